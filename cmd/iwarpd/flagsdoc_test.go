package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"regexp"
	"testing"
)

// TestEveryFlagDocumented: every flag of `iwarpd -h` has a row (or a
// mention in a row, "`-a N`, `-b N`") in docs/iwarpd.md's flag table.
func TestEveryFlagDocumented(t *testing.T) {
	var usage bytes.Buffer
	if _, err := parseConfig([]string{"-h"}, func(string) string { return "" }, &usage); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("parseConfig(-h) = %v, want flag.ErrHelp", err)
	}
	doc, err := os.ReadFile("../../docs/iwarpd.md")
	if err != nil {
		t.Fatal(err)
	}
	flags := regexp.MustCompile(`(?m)^  (-[a-z0-9-]+)`).FindAllSubmatch(usage.Bytes(), -1)
	if len(flags) < 10 {
		t.Fatalf("only %d flags in the usage text:\n%s", len(flags), usage.String())
	}
	for _, f := range flags {
		name := regexp.QuoteMeta(string(f[1]))
		if !regexp.MustCompile("(`|, )" + name + "[ `]").Match(doc) {
			t.Errorf("flag %s is not documented in docs/iwarpd.md", f[1])
		}
	}
}
