package conformance

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// reporter is the part of testing.T the checks use, so that the negative
// tests can run them against a recorder.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Fatal(args ...any)
	Logf(format string, args ...any)
	Failed() bool
}

var errFatal = errors.New("fatal")

// recorder collects the failures of checks instead of failing the test.
type recorder struct{ errs []string }

func (r *recorder) Helper()                      {}
func (r *recorder) Logf(string, ...any)          {}
func (r *recorder) Failed() bool                 { return len(r.errs) > 0 }
func (r *recorder) Errorf(f string, args ...any) { r.errs = append(r.errs, fmt.Sprintf(f, args...)) }
func (r *recorder) Fatalf(f string, args ...any) { r.Errorf(f, args...); panic(errFatal) }
func (r *recorder) Fatal(args ...any)            { r.errs = append(r.errs, fmt.Sprint(args...)); panic(errFatal) }

// record runs check against a recorder and returns what it reported.
func record(check func(reporter)) (errs []string) {
	rec := &recorder{}
	defer func() {
		if v := recover(); v != nil && v != errFatal {
			panic(v)
		}
		errs = rec.errs
	}()
	check(rec)
	return rec.errs
}

// TestTsharkChecksFail proves that the tshark checks catch a corrupted
// capture and expectations that differ from what was encoded.
func TestTsharkChecksFail(t *testing.T) {
	tshark, err := FindTshark()
	if err != nil {
		t.Skip(err.Error())
	}
	base := configs[2] // rev2-crc
	tests := []struct {
		name   string
		cfg    config
		tamper func(c *conversation)
		want   string // substring of some reported failure
	}{
		{"bad-crc", config{name: "bad-crc", rev: 2, crc: true, mss: 1460, corrupt: 5}, nil, "Bad CRC32"},
		{"bad-crc-markers", config{name: "bad-crc-markers", rev: 2, crc: true, markers: true, mss: 1460, corrupt: 30}, nil, "Bad CRC32"},
		{"wrong-msn", base, func(c *conversation) { c.fpdus[4].hdr.MSN++ }, "iwarp_ddp.msn"},
		{"wrong-to", base, func(c *conversation) { c.fpdus[len(c.fpdus)-3].hdr.TO++ }, "iwarp_ddp.tagged_offset"},
		{"missing-fpdu", base, func(c *conversation) { c.fpdus = c.fpdus[1:] }, "we encoded"},
		{"wrong-marker", configs[4], func(c *conversation) { c.fpdus[7].markers = append(c.fpdus[7].markers, 1) }, "iwarp_mpa.marker_fpduptr"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path, c := writeCapture(t, tc.cfg)
			if tc.tamper != nil {
				tc.tamper(c)
			}
			errs := record(func(r reporter) { checkTshark(r, tshark, path, c) })
			if len(errs) == 0 {
				t.Fatalf("checks passed on a faulty capture")
			}
			for _, e := range errs {
				if strings.Contains(e, tc.want) {
					return
				}
			}
			t.Errorf("no failure mentions %q; got:\n%s", tc.want, strings.Join(errs, "\n"))
		})
	}
}
