package fabtests

import (
	"strings"
	"testing"
)

// The client's output of fi_msg_inject -A inject -v when RxD reports the
// send's completion with a NULL context (as both references printed it
// on 2026-11-28), with the process's own address.
func injectClient(addr string) string {
	return "ERROR: op ctx=" + addr + " cq_ctx=(nil)\n" +
		"ft_cq_read_verify(): functional/msg_inject.c:83, ret=-256 (Unspecified error)\n" +
		"Start testing FI_INJECT\n"
}

func csResult(cfg, line string, srv, cli Proc) Result {
	return Result{Config: cfg, Test: Test{Line: line, EP: "rdm"}, Outcome: csOutcome(srv.Exit, cli.Exit), Server: srv, Client: &cli}
}

// TestClassify: a failure of iwarpd;ofi_rxd becomes SharedFail only when
// udp;ofi_rxd failed the same test in the same results with the same exit
// statuses and the same error lines (addresses masked); a hang, another
// error, a passing or absent reference leave it a failure.
func TestClassify(t *testing.T) {
	const line = "fi_msg_inject -A inject -v"
	ok := Proc{Output: "Start testing FI_INJECT\nGOOD: Completed FI_INJECT Testing\n"}
	fail := func(addr string) Proc { return Proc{Exit: 1, Output: injectClient(addr)} }
	hang := Proc{Exit: exitTimeout, TimedOut: true}
	rxd, _ := ConfigByName("iwarpd;ofi_rxd")
	udp, _ := ConfigByName("udp;ofi_rxd")
	if rxd.Reference != "udp;ofi_rxd" {
		t.Fatalf("iwarpd;ofi_rxd's reference is %q", rxd.Reference)
	}
	for _, c := range []struct {
		name      string
		mine, ref *Result
		want      Outcome
	}{
		{"same failure, other addresses", ptr(csResult(rxd.Name, line, ok, fail("0x5620e4cd98c0"))),
			ptr(csResult(udp.Name, line, ok, fail("0x564d6341f8c0"))), SharedFail},
		{"reference passed", ptr(csResult(rxd.Name, line, ok, fail("0x1"))), ptr(csResult(udp.Name, line, ok, ok)), Fail},
		{"reference absent from the run", ptr(csResult(rxd.Name, line, ok, fail("0x1"))), nil, Fail},
		{"another context", ptr(csResult(rxd.Name, line, ok, Proc{Exit: 1, Output: strings.Replace(injectClient("0x1"), "(nil)", "0x2", 1)})),
			ptr(csResult(udp.Name, line, ok, fail("0x1"))), Fail},
		{"other exit status", ptr(csResult(rxd.Name, line, Proc{Exit: 1}, fail("0x1"))),
			ptr(csResult(udp.Name, line, ok, fail("0x1"))), Fail},
		{"both hung", ptr(csResult(rxd.Name, line, hang, hang)), ptr(csResult(udp.Name, line, hang, hang)), Fail},
		{"no error said", ptr(csResult(rxd.Name, line, ok, Proc{Exit: 1})), ptr(csResult(udp.Name, line, ok, Proc{Exit: 1})), Fail},
	} {
		configs := []Config{udp, rxd}
		results := [][]Result{nil, {*c.mine}}
		if c.ref != nil {
			results[0] = []Result{*c.ref}
		}
		Classify(configs, results)
		if got := results[1][0].Outcome; got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
		if c.ref != nil && results[0][0].Outcome == SharedFail {
			t.Errorf("%s: the reference's own failure was classified", c.name)
		}
	}

	// Without the reference in the configurations, nothing is classified.
	results := [][]Result{{csResult(rxd.Name, line, ok, fail("0x1"))}}
	Classify([]Config{rxd}, results)
	if results[0][0].Outcome != Fail {
		t.Errorf("classified without its reference in the run")
	}
}

// TestTableShared: the table counts shared failures in their own column,
// not in "failed", and says "—" where a configuration has no reference in
// the run; SharedFailures lists each with the reference and its error.
func TestTableShared(t *testing.T) {
	const line = "fi_msg_inject -A inject -v"
	ok := Proc{}
	rxd, _ := ConfigByName("iwarpd;ofi_rxd")
	udp, _ := ConfigByName("udp;ofi_rxd")
	results := [][]Result{
		{csResult(udp.Name, line, ok, Proc{Exit: 1, Output: injectClient("0xa")})},
		{csResult(rxd.Name, line, ok, Proc{Exit: 1, Output: injectClient("0xb")})},
	}
	Classify([]Config{udp, rxd}, results)
	var b strings.Builder
	Table(&b, []Config{udp, rxd}, results)
	if !strings.Contains(b.String(), "| udp;ofi_rxd (`-p udp;ofi_rxd`) | 1 | 0 | 1 | — | 0 | — |") ||
		!strings.Contains(b.String(), "| iwarpd;ofi_rxd (`-p iwarpd;ofi_rxd`) | 1 | 0 | 0 | 1 (`udp;ofi_rxd`) | 0 | — |") {
		t.Errorf("table:\n%s", b.String())
	}
	b.Reset()
	SharedFailures(&b, results)
	want := "- `iwarpd;ofi_rxd` fi_msg_inject -A inject -v: failed as `udp;ofi_rxd` did in this run (server 0 client 1; " +
		"ERROR: op ctx=0x… cq_ctx=(nil); ft_cq_read_verify(): functional/msg_inject.c:83, ret=-256 (Unspecified error))\n"
	if b.String() != want {
		t.Errorf("SharedFailures:\n%s\nwant\n%s", b.String(), want)
	}
}

func ptr(r Result) *Result { return &r }
