package fabtests

import (
	"fmt"
	"io"
	"strings"
)

// Counts are one configuration's totals. Shared failures (SharedFail) are
// not in Fail.
type Counts struct{ Pass, Fail, Notrun, Shared int }

// Count totals results.
func Count(results []Result) Counts {
	var c Counts
	for _, r := range results {
		switch r.Outcome {
		case Pass:
			c.Pass++
		case Fail:
			c.Fail++
		case Notrun:
			c.Notrun++
		case SharedFail:
			c.Shared++
		}
	}
	return c
}

// refPasses is how many of the tests cfg ran the reference configuration
// (ref) passed: the figure cfg's passes are held against.
func refPasses(cfg, ref []Result) int {
	ran := map[string]bool{}
	for _, r := range cfg {
		ran[r.Test.Line] = true
	}
	n := 0
	for _, r := range ref {
		if ran[r.Test.Line] && r.Outcome == Pass {
			n++
		}
	}
	return n
}

// Table writes issue 19's table (Markdown): passed, failed and not run per
// configuration; the failures its reference had the same way in the same
// run (Classify; "—" when the configuration has no reference in the run);
// and how many of the same tests tcp passed.
func Table(w io.Writer, configs []Config, results [][]Result) {
	var tcp []Result
	inRun := map[string]bool{}
	for i, c := range configs {
		if c.Name == "tcp" {
			tcp = results[i]
		}
		inRun[c.Name] = true
	}
	fmt.Fprintln(w, "| configuration (`-p`, environment) | tests | passed | failed | failed as its reference, same run | notrun | tcp passed of the same tests |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for i, c := range configs {
		n := Count(results[i])
		ref := "—"
		if tcp != nil {
			ref = fmt.Sprint(refPasses(results[i], tcp))
		}
		shared := "—"
		if c.Reference != "" && inRun[c.Reference] {
			shared = fmt.Sprintf("%d (`%s`)", n.Shared, c.Reference)
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %s | %d | %s |\n", describe(c), len(results[i]), n.Pass, n.Fail, shared, n.Notrun, ref)
	}
}

func describe(c Config) string {
	s := fmt.Sprintf("%s (`-p %s`", c.Name, c.Prov)
	if len(c.Env) > 0 {
		s += ", `" + strings.Join(c.Env, " ") + "`"
	}
	if c.EPs != nil {
		var eps []string
		for _, ep := range c.EPs {
			if ep == "" {
				ep = "untyped unit"
			}
			eps = append(eps, ep)
		}
		s += ", " + strings.Join(eps, "+") + " tests"
	}
	return s + ")"
}

// Details writes one line per test and configuration: outcome, exit
// statuses, time.
func Details(w io.Writer, results [][]Result) {
	for _, rs := range results {
		for _, r := range rs {
			fmt.Fprintln(w, Line(r))
		}
	}
}

// Line is one result as a line of text.
func Line(r Result) string {
	return fmt.Sprintf("%-6s %-16s %-48s %s %.1fs", r.Outcome, r.Config, r.Test.Line, exitsOf(r), r.Took.Seconds())
}

// Failure is a failed test's commands and output, for the log.
func Failure(r Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "=== %s [%s]\n", r.Test.Line, r.Config)
	dump := func(who string, p Proc) {
		fmt.Fprintf(&b, "--- %s: %s (exit %d%s)\n", who, p.Cmd, p.Exit, map[bool]string{true: ", killed at the timeout"}[p.TimedOut])
		b.WriteString(strings.TrimRight(lastLines(p.Output, 40), "\n"))
		b.WriteString("\n")
	}
	dump("server", r.Server)
	if r.Client != nil {
		dump("client", *r.Client)
	}
	return b.String()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
