package main

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/iwarpd/iwarpd/proto"
)

// JSON shapes of the per-object commands: each row names its session.
type (
	deviceJSON struct {
		Device proto.DeviceAttr `json:"device"`
		Port   proto.PortAttr   `json:"port"`
	}
	qpRow struct {
		Session uint64 `json:"session"`
		proto.QPInfo
	}
	cqRow struct {
		Session uint64 `json:"session"`
		proto.CQInfo
	}
	mrRow struct {
		Session uint64 `json:"session"`
		proto.MRInfo
	}
)

// selectJSON returns what -json prints for cmd: the whole Inspect for
// status, else the part cmd names (lists are never null).
func selectJSON(in *proto.Inspect, cmd string) any {
	switch cmd {
	case "device":
		return deviceJSON{Device: in.Device, Port: in.Port}
	case "sessions":
		return nonNil(in.Sessions)
	case "qps":
		return qpRows(in)
	case "cqs":
		return cqRows(in)
	case "mrs":
		return mrRows(in)
	case "engines":
		return nonNil(in.Engines)
	case "counters":
		if in.Counters == nil {
			return map[string]int64{}
		}
		return in.Counters
	}
	return in
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func qpRows(in *proto.Inspect) []qpRow {
	rows := []qpRow{}
	for _, s := range in.Sessions {
		for _, q := range s.QPs {
			rows = append(rows, qpRow{Session: s.ID, QPInfo: q})
		}
	}
	return rows
}

func cqRows(in *proto.Inspect) []cqRow {
	rows := []cqRow{}
	for _, s := range in.Sessions {
		for _, c := range s.CQs {
			rows = append(rows, cqRow{Session: s.ID, CQInfo: c})
		}
	}
	return rows
}

func mrRows(in *proto.Inspect) []mrRow {
	rows := []mrRow{}
	for _, s := range in.Sessions {
		for _, m := range s.MRs {
			rows = append(rows, mrRow{Session: s.ID, MRInfo: m})
		}
	}
	return rows
}

// renderText prints cmd's view of in for people.
func renderText(w io.Writer, in *proto.Inspect, cmd string) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	switch cmd {
	case "device":
		writeDevice(tw, in)
	case "sessions":
		writeSessions(tw, in)
	case "qps":
		writeQPs(tw, in)
	case "cqs":
		writeCQs(tw, in)
	case "mrs":
		writeMRs(tw, in)
	case "engines":
		writeEngines(tw, in)
	case "counters":
		writeCounters(tw, in.Counters)
	default:
		writeStatus(tw, in)
	}
	return tw.Flush()
}

func writeStatus(w io.Writer, in *proto.Inspect) {
	var qps, cqs, mrs int
	var reg uint64
	for _, s := range in.Sessions {
		qps += len(s.QPs)
		cqs += len(s.CQs)
		mrs += len(s.MRs)
		reg += s.RegBytes
	}
	fmt.Fprintf(w, "iwarpd %s (pid %d), device %s\n", orDash(in.Daemon), in.PID, orDash(in.Device.Name))
	fmt.Fprintf(w, "port %s, address %s, UD ports %s, datagram %d bytes\n",
		orDash(in.Port.State), orDash(in.Port.Addr), orDash(in.Port.UDPorts), in.Port.DatagramSize)
	fmt.Fprintf(w, "sessions %d, QPs %d, CQs %d, MRs %d (%s registered)\n",
		len(in.Sessions), qps, cqs, mrs, humanBytes(reg))
	fmt.Fprintln(w)
	writeEngines(w, in)
	fmt.Fprintln(w)
	writeSessions(w, in)
	if qps > 0 {
		fmt.Fprintln(w)
		writeQPs(w, in)
	}
	fmt.Fprintln(w)
	c := in.Counters
	fmt.Fprintf(w, "datagrams in %d, out %d; bytes in %d, out %d; CRC errors %d; drops %d\n",
		c["datagrams_in"], c["datagrams_out"], c["bytes_in"], c["bytes_out"], c["drop_crc"], dropTotal(c))
	nonZero := map[string]int64{}
	for k, v := range c {
		if v != 0 {
			nonZero[k] = v
		}
	}
	writeCounters(w, nonZero)
	fmt.Fprintln(w, "(non-zero counters; iwarpctl counters lists all)")
}

// dropTotal sums the daemon's drop_* counters: datagrams dropped for any
// reason.
func dropTotal(c map[string]int64) int64 {
	var n int64
	for k, v := range c {
		if strings.HasPrefix(k, "drop_") {
			n += v
		}
	}
	return n
}

func writeDevice(w io.Writer, in *proto.Inspect) {
	d, p := in.Device, in.Port
	rows := []struct {
		k string
		v any
	}{
		{"name", d.Name},
		{"max_qp", d.MaxQP}, {"max_qp_wr", d.MaxQPWR}, {"max_sge", d.MaxSGE},
		{"max_cq", d.MaxCQ}, {"max_cqe", d.MaxCQE},
		{"max_mr", d.MaxMR}, {"max_mr_size", d.MaxMRSize}, {"max_registered_bytes", d.MaxRegistered},
		{"max_pd", d.MaxPD}, {"max_srq", d.MaxSRQ}, {"max_srq_wr", d.MaxSRQWR},
		{"max_inline", d.MaxInline}, {"max_msg_ud", d.MaxMsgUD}, {"datagram_size", d.DatagramSize},
		{"max_comp_channel", d.MaxCompChannel},
		{"port.state", p.State}, {"port.addr", p.Addr}, {"port.datagram_size", p.DatagramSize},
		{"port.ud_ports", p.UDPorts},
	}
	for _, r := range rows {
		fmt.Fprintf(w, "%s:\t%v\n", r.k, r.v)
	}
}

func writeSessions(w io.Writer, in *proto.Inspect) {
	fmt.Fprintln(w, "SESSION\tPID\tUID\tGID\tCLIENT\tPDS\tMRS\tCQS\tQPS\tSRQS\tREGISTERED")
	for _, s := range in.Sessions {
		fmt.Fprintf(w, "%d\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n",
			s.ID, s.PID, s.UID, s.GID, orDash(clientName(s.Client)), s.PDs, len(s.MRs), len(s.CQs), len(s.QPs),
			s.SRQs, humanBytes(s.RegBytes))
	}
	if len(in.Sessions) == 0 {
		fmt.Fprintln(w, "(no sessions)")
	}
}

// writeEngines prints one line per engine (docs/engines.md): its CPU, its
// QPs, its load (thread CPU time over the daemon's uptime), its passes that
// did work and its wake-ups from sleep.
func writeEngines(w io.Writer, in *proto.Inspect) {
	fmt.Fprintln(w, "ENGINE\tCPU\tQPS\tLOAD\tCPU-TIME\tWORK-PASSES\tPASSES\tWAKEUPS")
	for _, e := range in.Engines {
		cpu := "-"
		if e.CPU >= 0 {
			cpu = strconv.Itoa(e.CPU)
		}
		load := "-"
		if e.UptimeNS > 0 {
			load = fmt.Sprintf("%.1f%%", 100*float64(e.CPUTimeNS)/float64(e.UptimeNS))
		}
		fmt.Fprintf(w, "%d\t%s\t%d\t%s\t%.3fs\t%d\t%d\t%d\n", e.ID, cpu, e.QPs, load, float64(e.CPUTimeNS)/1e9,
			e.WorkPasses, e.Passes, e.Wakeups)
	}
	if len(in.Engines) == 0 {
		fmt.Fprintln(w, "(the daemon reports no engines)")
	}
}

func writeQPs(w io.Writer, in *proto.Inspect) {
	rows := qpRows(in)
	fmt.Fprintln(w, "SESSION\tQP\tQPN\tENGINE\tTYPE\tSTATE\tADDRESS\tCOUNTERS")
	for _, r := range rows {
		fmt.Fprintf(w, "%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n",
			r.Session, r.Handle, r.QPN, r.Engine, orDash(r.Type), orDash(r.State), orDash(r.Addr), counterList(r.Counters))
	}
	if len(rows) == 0 {
		fmt.Fprintln(w, "(no queue pairs)")
	}
}

func writeCQs(w io.Writer, in *proto.Inspect) {
	rows := cqRows(in)
	fmt.Fprintln(w, "SESSION\tCQ\tDEPTH\tARMED")
	for _, r := range rows {
		fmt.Fprintf(w, "%d\t%d\t%d\t%t\n", r.Session, r.Handle, r.Depth, r.Armed)
	}
	if len(rows) == 0 {
		fmt.Fprintln(w, "(no completion queues)")
	}
}

func writeMRs(w io.Writer, in *proto.Inspect) {
	rows := mrRows(in)
	fmt.Fprintln(w, "SESSION\tMR\tLKEY\tRKEY\tLENGTH\tACCESS")
	for _, r := range rows {
		fmt.Fprintf(w, "%d\t%d\t%#08x\t%#08x\t%d\t%s\n", r.Session, r.Handle, r.LKey, r.RKey, r.Length, accessString(r.Access))
	}
	if len(rows) == 0 {
		fmt.Fprintln(w, "(no memory regions)")
	}
}

// writeCounters prints every counter, sorted by name, one per line; the
// daemon names them (docs/iwarpd.md).
func writeCounters(w io.Writer, c map[string]int64) {
	fmt.Fprintln(w, "COUNTER\tVALUE")
	for _, k := range sortedKeys(c) {
		fmt.Fprintf(w, "%s\t%d\n", k, c[k])
	}
	if len(c) == 0 {
		fmt.Fprintln(w, "(no counters)")
	}
}

func sortedKeys(c map[string]int64) []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// counterList renders a QP's counters as "name=value" sorted by name,
// leaving out zeros to keep the line short.
func counterList(c map[string]int64) string {
	var parts []string
	for _, k := range sortedKeys(c) {
		if c[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", k, c[k]))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

func accessString(a proto.Access) string {
	var parts []string
	for _, f := range []struct {
		bit  proto.Access
		name string
	}{
		{proto.AccessLocalWrite, "local-write"}, {proto.AccessRemoteWrite, "remote-write"},
		{proto.AccessRemoteRead, "remote-read"}, {proto.AccessRemoteAtomic, "remote-atomic"},
	} {
		if a&f.bit != 0 {
			parts = append(parts, f.name)
			a &^= f.bit
		}
	}
	if a != 0 {
		parts = append(parts, fmt.Sprintf("%#x", uint32(a)))
	}
	if len(parts) == 0 {
		return "local-read"
	}
	return strings.Join(parts, ",")
}

func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// maxClientName bounds a client name in text output (runes).
const maxClientName = 48

// clientName makes a client-chosen name safe to print: every rune that is
// not graphic (terminal escapes, newlines, tabs that would forge rows or
// columns) is escaped as in a Go string literal, and a long name is cut.
// The name is whatever the client said in its hello: untrusted.
func clientName(s string) string {
	q := strconv.QuoteToGraphic(s)
	q = q[1 : len(q)-1] // drop the quotes, keep the escapes
	if r := []rune(q); len(r) > maxClientName {
		q = string(r[:maxClientName-1]) + "…"
	}
	return q
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
