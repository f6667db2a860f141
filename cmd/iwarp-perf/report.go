package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// report is the outcome of a whole run: what -json prints, and what the
// client hands to the server at the end so that both print the same table.
type report struct {
	Role         string   `json:"role"` // "client" or "server": who printed it
	Test         string   `json:"test"` // "lat" or "bw"
	Op           string   `json:"op"`   // "send"
	Transport    string   `json:"transport"`
	Iterations   int      `json:"iterations"`
	Window       int      `json:"window,omitempty"`
	QPs          int      `json:"qps,omitempty"` // -qps, when more than 1
	PollWindowUS float64  `json:"poll_window_us"`
	Results      []result `json:"results"`
	OK           bool     `json:"ok"` // every message of every size arrived intact
}

// result is one message size.
type result struct {
	Bytes      int `json:"bytes"`
	Iterations int `json:"iterations"`
	// Verified counts messages whose content was checked and found right,
	// on both sides; Mismatches those found wrong.
	Verified   int64     `json:"verified"`
	Mismatches int64     `json:"mismatches"`
	FirstError string    `json:"first_error,omitempty"`
	Latency    *latStats `json:"latency,omitempty"`
	Bandwidth  *bwStats  `json:"bandwidth,omitempty"`
}

var transportTitle = map[string]string{
	"ud":      "iWARP UD (iwarpd)",
	"rc":      "iWARP RC (iwarpd: RDMAP/DDP/MPA over TCP)",
	"rd":      "iWARP RD (iwarpd: reliable datagrams over UDP)",
	"raw-udp": "raw UDP socket",
	"raw-tcp": "raw TCP socket (TCP_NODELAY)",
}

const rule = "-------------------------------------------------------------------------------------------"

// writeTable prints rep as a perftest-style table.
func writeTable(w io.Writer, rep *report) error {
	title := map[string]string{"lat": "Latency", "bw": "Bandwidth"}[rep.Test]
	fmt.Fprintln(w, rule)
	fmt.Fprintf(w, "                    %s %s Test (%s)\n", opTitle(rep.Op), title, rep.Role)
	fmt.Fprintf(w, " Transport       : %s\n", transportTitle[rep.Transport])
	fmt.Fprintf(w, " Poll window     : %v (then block)\n", time.Duration(rep.PollWindowUS*float64(time.Microsecond)))
	switch {
	case rep.Test == "bw" && rep.QPs > 1:
		fmt.Fprintf(w, " Queue pairs     : %d, round-robin, aggregate bandwidth\n", rep.QPs)
		fmt.Fprintf(w, " Window          : %d outstanding messages, %d per QP, credit every %d\n", rep.Window, qpWindow(rep.Window, rep.QPs),
			creditEvery(qpWindow(rep.Window, rep.QPs)))
	case rep.Test == "bw":
		fmt.Fprintf(w, " Window          : %d outstanding messages, credit every %d\n", rep.Window, creditEvery(rep.Window))
	case rep.QPs > 1:
		fmt.Fprintf(w, " Queue pairs     : %d, one message outstanding on each\n", rep.QPs)
		fmt.Fprintf(w, " Latency         : normalized, one way = half the round on all QPs / %d\n", rep.QPs)
	default:
		fmt.Fprintf(w, " Latency         : one way = half the round trip\n")
	}
	fmt.Fprintln(w, rule)
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', tabwriter.AlignRight)
	if rep.Test == "bw" {
		fmt.Fprintln(tw, "#bytes\t#iterations\tBW peak[Gb/s]\tBW average[Gb/s]\tBW average[MB/s]\tMsgRate[Mpps]\t")
		for _, r := range rep.Results {
			b := r.Bandwidth
			if b == nil {
				b = &bwStats{}
			}
			fmt.Fprintf(tw, "%d\t%d\t%.2f\t%.2f\t%.1f\t%.6f\t\n", r.Bytes, r.Iterations, b.PeakGbps, b.AvgGbps, b.AvgMBps, b.MsgRateMpps)
		}
	} else {
		fmt.Fprintln(tw, "#bytes\t#iterations\tt_min[us]\tt_median[us]\tt_avg[us]\tt_p99[us]\tt_max[us]\t")
		for _, r := range rep.Results {
			l := r.Latency
			if l == nil {
				l = &latStats{}
			}
			fmt.Fprintf(tw, "%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", r.Bytes, r.Iterations, l.MinUS, l.MedianUS, l.AvgUS, l.P99US, l.MaxUS)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, rule)
	var bad []string
	var verified int64
	for _, r := range rep.Results {
		verified += r.Verified
		if r.Mismatches > 0 {
			bad = append(bad, fmt.Sprintf(" DATA MISMATCH at %d bytes: %d messages wrong; first: %s", r.Bytes, r.Mismatches, r.FirstError))
		}
	}
	if len(bad) > 0 {
		fmt.Fprintln(w, strings.Join(bad, "\n"))
	} else {
		fmt.Fprintf(w, " data verified: %d messages intact\n", verified)
	}
	_, err := fmt.Fprintln(w, rule)
	return err
}

func writeJSON(w io.Writer, rep *report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// opTitle names operation op in table titles.
func opTitle(op string) string {
	if op == "write-record" {
		return "Write-Record"
	}
	return capitalize(op)
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
