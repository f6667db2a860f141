package fabtests

import "testing"

// TestSuiteShape: the sets are runfabtests.sh v1.17.0's (8 unit, 45
// functional, 31 short command lines), each test's endpoint type is read
// from -e or the program's default, and the configurations pick by it.
func TestSuiteShape(t *testing.T) {
	n := map[string]int{}
	for _, tt := range Tests() {
		n[tt.Set]++
	}
	if n["unit"] != 8 || n["functional"] != 45 || n["short"] != 31 {
		t.Fatalf("sets %v, want unit 8, functional 45, short 31", n)
	}
	for line, want := range map[string]string{
		"fi_cq_data -e dgram": "dgram", "fi_msg_pingpong -I 5": "msg", "fi_rdm": "rdm",
		"fi_msg_inject -A inject -v": "rdm", "fi_eq_test": "", "fi_dgram": "dgram",
	} {
		if got := endpointOf(line); got != want {
			t.Errorf("endpointOf(%q) = %q, want %q", line, got, want)
		}
	}
	msg, _ := ConfigByName("MSG")
	if !msg.Runs(Test{Line: "fi_msg", EP: "msg"}) || !msg.Runs(Test{Line: "fi_eq_test"}) || msg.Runs(Test{Line: "fi_rdm", EP: "rdm"}) {
		t.Errorf("the MSG configuration picks the wrong tests")
	}
}

// TestOutcomes: runfabtests.sh's rules — pass when both exit 0, not run
// when both exit 61 or both 38, fail otherwise (one side's 61 included).
func TestOutcomes(t *testing.T) {
	for _, c := range []struct {
		s, c int
		want Outcome
	}{{0, 0, Pass}, {61, 61, Notrun}, {38, 38, Notrun}, {61, 0, Fail}, {61, 38, Fail}, {0, 124, Fail}, {137, 1, Fail}} {
		if got := csOutcome(c.s, c.c); got != c.want {
			t.Errorf("server %d client %d: %v, want %v", c.s, c.c, got, c.want)
		}
	}
	if unitOutcome(61) != Notrun || unitOutcome(0) != Pass || unitOutcome(1) != Fail {
		t.Errorf("unit outcomes wrong")
	}
}
