package benchreport

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"strconv"
)

// CSVHeader is the first record of every CSV file WriteCSV writes.
var CSVHeader = []string{"experiment", "series", "x", "median", "min", "max",
	"ratio_to_baseline_median", "ratio_min", "ratio_max", "n"}

// WriteCSV writes e as CSV: CSVHeader, then one record per point of every
// series, in series order. Numbers are plain decimals, never exponent form
// (1000000, not 1e+06; 0.00000015, not 1.5e-07), with the fewest digits that
// give back the exact float64 (strconv 'f', -1), so spreadsheets and awk read
// them as they are; a missing value (NaN, no ratio, no baseline) is an
// empty field. The baseline series has ratio 1 wherever it has data. n is
// the number of rounds with a value ("" when the point carries no count).
func WriteCSV(w io.Writer, e Experiment) error {
	if err := e.Validate(); err != nil {
		return err
	}
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return fmt.Errorf("benchreport: csv %s: %w", e.Name, err)
	}
	for _, s := range e.Series {
		for _, p := range s.Points {
			rec := []string{e.Name, s.Name, num(p.X), num(p.Median), num(p.Min), num(p.Max), "", "", "", ""}
			if r, ok := e.RatioAt(p); ok {
				rec[6], rec[7], rec[8] = num(r.Median), num(r.Min), num(r.Max)
			}
			if p.N > 0 {
				rec[9] = strconv.Itoa(p.N)
			}
			if err := cw.Write(rec); err != nil {
				return fmt.Errorf("benchreport: csv %s: %w", e.Name, err)
			}
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("benchreport: csv %s: %w", e.Name, err)
	}
	return nil
}

// num formats v as a plain decimal that parses back to exactly v, "" for
// NaN and ±Inf.
func num(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return ""
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}
