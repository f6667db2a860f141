package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigMaxAHRetired: -max-ah is gone with ABI 2 (address handles are
// the client's); a config file naming it is refused with a message that
// says why, and the flag is unknown.
func TestConfigMaxAHRetired(t *testing.T) {
	none := func(string) string { return "" }
	path := filepath.Join(t.TempDir(), "iwarpd.json")
	if err := os.WriteFile(path, []byte(`{"max-qp": 32, "max-ah": 1000}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := parseConfig([]string{"-config", path}, none, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `"max-ah" is no longer used`) {
		t.Fatalf("config file with max-ah: %v", err)
	}
	if _, err := parseConfig([]string{"-max-ah", "5"}, none, io.Discard); err == nil {
		t.Fatal("-max-ah accepted")
	}
}
