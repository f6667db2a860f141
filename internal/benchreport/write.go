package benchreport

import (
	"fmt"
	"os"
	"path/filepath"
)

// SummaryFile is the name of the Markdown summary WriteAll writes.
const SummaryFile = "summary.md"

// WriteAll creates dir (and its parents) if needed and writes, for every
// experiment, dir/<name>.csv and dir/<name>.png, then dir/summary.md.
// Every experiment is validated first, and names must be unique (and not
// "summary"), so nothing is written for a malformed report.
func WriteAll(dir string, m Machine, exps []Experiment) error {
	seen := map[string]bool{}
	for i := range exps {
		if err := exps[i].Validate(); err != nil {
			return err
		}
		if n := exps[i].Name; seen[n] || n+".md" == SummaryFile {
			return fmt.Errorf("benchreport: experiment name %q repeated or reserved: %w", n, ErrInvalid)
		}
		seen[exps[i].Name] = true
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("benchreport: %w", err)
	}
	for _, e := range exps {
		if err := writeFile(filepath.Join(dir, e.Name+".csv"), func(f *os.File) error { return WriteCSV(f, e) }); err != nil {
			return err
		}
		if err := WritePNG(filepath.Join(dir, e.Name+".png"), e); err != nil {
			return err
		}
	}
	return writeFile(filepath.Join(dir, SummaryFile), func(f *os.File) error { return WriteMarkdown(f, m, exps) })
}

// writeFile creates path and fills it with fill, reporting the error of
// Close too.
func writeFile(path string, fill func(*os.File) error) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("benchreport: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("benchreport: %w", cerr)
		}
	}()
	return fill(f)
}
