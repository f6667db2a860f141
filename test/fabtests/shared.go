package fabtests

import (
	"fmt"
	"io"
	"regexp"
	"strings"
)

// A layered configuration (a utility provider over iwarpd) names, in
// Config.Reference, the configuration that runs the same utility provider
// over libfabric's own core provider: iwarpd;ofi_rxd's is udp;ofi_rxd. A
// test that fails in both, the same way, in the same run, fails in the
// utility provider's own code, which both configurations share; Classify
// gives it the outcome SharedFail, which the table counts in a column of
// its own (docs/libfabric.md "fabtests", "Still failing"). Nothing is
// classified without the reference's result of the same run: a run
// without the reference leaves every failure a failure.

// Classify marks, in results (configurations in the order of configs, as
// Runner.Run returns them), every failure of a configuration with a
// Reference that its reference failed the same way in the same run
// (sameFailure) as SharedFail, naming the reference in Result.SharedWith.
func Classify(configs []Config, results [][]Result) {
	byName := map[string]int{}
	for i, c := range configs {
		byName[c.Name] = i
	}
	for i, c := range configs {
		j, ok := byName[c.Reference]
		if c.Reference == "" || !ok || i >= len(results) || j >= len(results) {
			continue
		}
		ref := map[string]Result{}
		for _, r := range results[j] {
			ref[r.Test.Line] = r
		}
		for k := range results[i] {
			r := &results[i][k]
			rr, ok := ref[r.Test.Line]
			if r.Outcome == Fail && ok && rr.Outcome == Fail && sameFailure(*r, rr) {
				r.Outcome = SharedFail
				r.SharedWith = rr.Config
			}
		}
	}
}

// sameFailure reports whether a and b failed the same way: neither killed
// at its timeout (a hang says nothing of its cause), the same exit status
// of each process, and the same error lines (errorLines), at least one.
func sameFailure(a, b Result) bool {
	if (a.Client == nil) != (b.Client == nil) {
		return false
	}
	procs := func(r Result) []Proc {
		if r.Client == nil {
			return []Proc{r.Server}
		}
		return []Proc{r.Server, *r.Client}
	}
	pa, pb := procs(a), procs(b)
	lines := 0
	for i := range pa {
		if pa[i].TimedOut || pb[i].TimedOut || pa[i].Exit != pb[i].Exit {
			return false
		}
		la, lb := errorLines(pa[i].Output), errorLines(pb[i].Output)
		if strings.Join(la, "\n") != strings.Join(lb, "\n") {
			return false
		}
		lines += len(la)
	}
	return lines > 0
}

var (
	// errorLine is what fabtests prints when it fails: FT_PRINTERR's
	// "call(): file:line, ret=-N (text)", FT_ERR's "[error] ...", and
	// lines such as ft_cq_read_verify's "ERROR: op ctx=... cq_ctx=...".
	errorLine = regexp.MustCompile(`(?i)error|ret=-?[0-9]+`)
	// hexNumber is an address or a key, which differs between any two
	// processes; (nil) stays as it is.
	hexNumber = regexp.MustCompile(`0x[0-9a-fA-F]+`)
)

// errorLines are a process's error lines with hexadecimal numbers masked,
// libfabric's own log lines (which name the provider) left out.
func errorLines(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "libfabric:") || !errorLine.MatchString(l) {
			continue
		}
		lines = append(lines, hexNumber.ReplaceAllString(l, "0x…"))
	}
	return lines
}

// SharedFailures writes one line per SharedFail result: the test, the
// reference that failed it the same way, and the shared error lines.
func SharedFailures(w io.Writer, results [][]Result) {
	for _, rs := range results {
		for _, r := range rs {
			if r.Outcome != SharedFail {
				continue
			}
			var lines []string
			for _, p := range append([]Proc{r.Server}, clientOf(r)...) {
				lines = append(lines, errorLines(p.Output)...)
			}
			fmt.Fprintf(w, "- `%s` %s: failed as `%s` did in this run (%s; %s)\n", r.Config, r.Test.Line, r.SharedWith,
				exitsOf(r), strings.Join(lines, "; "))
		}
	}
}

func clientOf(r Result) []Proc {
	if r.Client == nil {
		return nil
	}
	return []Proc{*r.Client}
}

func exitsOf(r Result) string {
	if r.Client == nil {
		return fmt.Sprintf("exit %d", r.Server.Exit)
	}
	return fmt.Sprintf("server %d client %d", r.Server.Exit, r.Client.Exit)
}
