package benchreport

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// WriteMarkdown writes the summary of exps: per experiment, a table of the
// ratio of each series to its baseline at each X (median [min – max]; the
// baseline column is left out: it is 1) and a link to <name>.png (the file
// WriteAll writes beside it); then one section, headed by the machine
// description, with the absolute numbers of every experiment. An
// experiment without a baseline has no ratio table. Every entry of
// m.Missed is a "MISS" line in a section of its own, before the results.
func WriteMarkdown(w io.Writer, m Machine, exps []Experiment) error {
	for i := range exps {
		if err := exps[i].Validate(); err != nil {
			return err
		}
	}
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "# Benchmark results\n\n")
	fmt.Fprintf(bw, "Every figure is a series divided by its experiment's baseline, both measured in the same run:\n")
	fmt.Fprintf(bw, "the median over the rounds, with [min – max] over the rounds beside it. Absolute numbers are\n")
	fmt.Fprintf(bw, "only in the last section, beside the machine they were measured on.\n")
	if len(m.Missed) > 0 {
		fmt.Fprintf(bw, "\n## Not run on this machine\n\n")
		for _, ms := range m.Missed {
			fmt.Fprintf(bw, "- **MISS** %s: %s\n", cell(ms.Experiment), cell(ms.Reason))
		}
	}
	marked := false
	for i := range exps {
		e := &exps[i]
		fmt.Fprintf(bw, "\n## %s\n\n", cell(title(e)))
		if e.Note != "" {
			fmt.Fprintf(bw, "%s\n\n", e.Note)
		}
		base := e.baselineOf()
		if base == nil {
			fmt.Fprintf(bw, "No baseline: absolute numbers only, see the last section.\n\n")
		} else {
			fmt.Fprintf(bw, "Ratio to **%s** (%s):\n\n", cell(base.Name), cell(e.YLabel))
			var cols []*Series
			for j := range e.Series {
				if e.Series[j].Name != e.Baseline {
					cols = append(cols, &e.Series[j])
				}
			}
			header(bw, e.XLabel, cols)
			for _, x := range e.xs() {
				fmt.Fprintf(bw, "| %s |", formatX(x))
				for _, s := range cols {
					txt := "–"
					if p, ok := s.pointAt(x); ok {
						if r, ok := e.RatioAt(p); ok {
							txt = formatRatio(r)
							if !r.PerRound {
								txt += " *"
								marked = true
							}
						}
					}
					fmt.Fprintf(bw, " %s |", txt)
				}
				fmt.Fprintf(bw, "\n")
			}
			fmt.Fprintf(bw, "\n")
		}
		fmt.Fprintf(bw, "![%s](%s.png)\n", cell(title(e)), e.Name)
	}
	if marked {
		fmt.Fprintf(bw, "\n\\* ratio of the medians (no per-round values); its range is the widest the two spreads allow.\n")
	}

	desc := m.Description
	if desc == "" {
		desc = "unknown machine"
	}
	fmt.Fprintf(bw, "\n## Absolute numbers on %s\n\n", cell(desc))
	if m.Tree != "" {
		fmt.Fprintf(bw, "- tree: `%s`\n", m.Tree)
	}
	if m.Config != "" {
		fmt.Fprintf(bw, "- config: %s\n", m.Config)
	}
	fmt.Fprintf(bw, "- median [min – max] over the rounds, (n) rounds with a value\n")
	for i := range exps {
		e := &exps[i]
		fmt.Fprintf(bw, "\n### %s (%s)\n\n", cell(title(e)), cell(e.YLabel))
		cols := make([]*Series, len(e.Series))
		for j := range e.Series {
			cols[j] = &e.Series[j]
		}
		header(bw, e.XLabel, cols)
		for _, x := range e.xs() {
			fmt.Fprintf(bw, "| %s |", formatX(x))
			for _, s := range cols {
				txt := "–"
				if p, ok := s.pointAt(x); ok {
					txt = formatAbsolute(p)
				}
				fmt.Fprintf(bw, " %s |", txt)
			}
			fmt.Fprintf(bw, "\n")
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("benchreport: markdown: %w", err)
	}
	return nil
}

func title(e *Experiment) string {
	if e.Title != "" {
		return e.Title
	}
	return e.Name
}

// header writes a table header: the X column, then one per series.
func header(w io.Writer, xlabel string, cols []*Series) {
	fmt.Fprintf(w, "| %s |", cell(xlabel))
	for _, s := range cols {
		fmt.Fprintf(w, " %s |", cell(s.Name))
	}
	fmt.Fprintf(w, "\n|---:|")
	for range cols {
		fmt.Fprintf(w, "---:|")
	}
	fmt.Fprintf(w, "\n")
}

// cell makes s safe inside a Markdown table cell or heading.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

// formatX prints an X value: integers as integers (sizes, peer counts).
func formatX(x float64) string {
	if x == math.Trunc(x) && math.Abs(x) < 1e15 {
		return strconv.FormatFloat(x, 'f', 0, 64)
	}
	return strconv.FormatFloat(x, 'g', 4, 64)
}

// formatValue prints v with three significant digits or so, "?" when not
// finite (a missing min or max).
func formatValue(v float64) string {
	a := math.Abs(v)
	switch {
	case !finite(v):
		return "?"
	case a >= 1e15 || (a < 0.01 && a != 0):
		return strconv.FormatFloat(v, 'g', 3, 64)
	case a >= 100: // whole numbers, never exponent form (2500000, not 2.5e+06)
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

func formatRatio(r Ratio) string {
	return fmt.Sprintf("%s× [%s× – %s×]", strconv.FormatFloat(r.Median, 'f', 2, 64), ratioBound(r.Min), ratioBound(r.Max))
}

func ratioBound(v float64) string {
	if !finite(v) {
		return "?"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func formatAbsolute(p Point) string {
	if !finite(p.Median) {
		return "no data"
	}
	s := fmt.Sprintf("%s [%s – %s]", formatValue(p.Median), formatValue(p.Min), formatValue(p.Max))
	if p.N > 0 {
		s += fmt.Sprintf(" (%d)", p.N)
	}
	return s
}
