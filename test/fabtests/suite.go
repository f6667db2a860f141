package fabtests

import "strings"

// Kind says how a test runs: Unit is one process; ClientServer is a server
// (-s ADDR) and a client (-s ADDR ADDR).
type Kind int

const (
	Unit Kind = iota
	ClientServer
)

// Test is one command line of runfabtests.sh: its set, its kind and the
// endpoint type it opens ("msg", "rdm", "dgram"; "" for unit tests of the
// fabric, domain and queues that open no endpoint of a given type).
type Test struct {
	Set  string // "unit", "functional", "short"
	Kind Kind
	Line string // program and arguments; SERVER_ADDR and GOOD_ADDR are replaced
	EP   string
}

// Name is the command line, the test's name in results.
func (t Test) Name() string { return t.Line }

// The sets of fabtests v1.17.0's scripts/runfabtests.sh (unit_tests,
// functional_tests, short_tests), in its order.
var (
	unitLines = []string{
		"fi_getinfo_test -s SERVER_ADDR GOOD_ADDR",
		"fi_av_test -g GOOD_ADDR -n 1 -s SERVER_ADDR -e rdm",
		"fi_av_test -g GOOD_ADDR -n 1 -s SERVER_ADDR -e dgram",
		"fi_dom_test -n 2",
		"fi_eq_test",
		"fi_cq_test",
		"fi_mr_test",
		"fi_cntr_test",
	}
	functionalLines = []string{
		"fi_av_xfer -e rdm",
		"fi_av_xfer -e dgram",
		"fi_cm_data",
		"fi_cq_data -e msg",
		"fi_cq_data -e rdm",
		"fi_cq_data -e dgram",
		"fi_dgram",
		"fi_dgram_waitset",
		"fi_msg",
		"fi_msg_epoll",
		"fi_msg_sockets",
		"fi_poll -t queue",
		"fi_poll -t counter",
		"fi_rdm",
		"fi_rdm -U",
		"fi_rdm_rma_event",
		"fi_rdm_rma_trigger",
		"fi_shared_ctx",
		"fi_shared_ctx --no-tx-shared-ctx",
		"fi_shared_ctx --no-rx-shared-ctx",
		"fi_shared_ctx -e msg",
		"fi_shared_ctx -e msg --no-tx-shared-ctx",
		"fi_shared_ctx -e msg --no-rx-shared-ctx",
		"fi_shared_ctx -e dgram",
		"fi_shared_ctx -e dgram --no-tx-shared-ctx",
		"fi_shared_ctx -e dgram --no-rx-shared-ctx",
		"fi_rdm_tagged_peek",
		"fi_scalable_ep",
		"fi_rdm_shared_av",
		"fi_multi_mr -e msg -V",
		"fi_multi_mr -e rdm -V",
		"fi_multi_ep -e msg -v",
		"fi_multi_ep -e rdm -v",
		"fi_recv_cancel -e rdm -V",
		"fi_unexpected_msg -e msg -I 10",
		"fi_unexpected_msg -e rdm -I 10",
		"fi_msg_inject -A inject -v",
		"fi_msg_inject -N -A inject -v",
		"fi_msg_inject -A inj_complete -v",
		"fi_msg_inject -N -A inj_complete -v",
		"fi_bw -e rdm -v -T 1",
		"fi_bw -e rdm -v -T 1 -U",
		"fi_bw -e msg -v -T 1",
		"fi_rdm_multi_client -C 10 -I 5",
		"fi_rdm_multi_client -C 10 -I 5 -U",
	}
	shortLines = []string{
		"fi_msg_pingpong -I 5",
		"fi_msg_pingpong -I 5 -v",
		"fi_msg_bw -I 5",
		"fi_msg_bw -I 5 -v",
		"fi_rma_bw -e msg -o write -I 5",
		"fi_rma_bw -e msg -o read -I 5",
		"fi_rma_bw -e msg -o writedata -I 5",
		"fi_rma_bw -e rdm -o write -I 5",
		"fi_rma_bw -e rdm -o write -I 5 -U",
		"fi_rma_bw -e rdm -o read -I 5",
		"fi_rma_bw -e rdm -o read -I 5 -U",
		"fi_rma_bw -e rdm -o writedata -I 5",
		"fi_rma_bw -e rdm -o writedata -I 5 -U",
		"fi_rdm_atomic -I 5 -o all",
		"fi_rdm_atomic -I 5 -o all -U",
		"fi_rdm_cntr_pingpong -I 5",
		"fi_multi_recv -e rdm -I 5",
		"fi_multi_recv -e msg -I 5",
		"fi_rdm_pingpong -I 5",
		"fi_rdm_pingpong -I 5 -U",
		"fi_rdm_pingpong -I 5 -v",
		"fi_rdm_pingpong -I 5 -v -U",
		"fi_rdm_tagged_pingpong -I 5",
		"fi_rdm_tagged_pingpong -I 5 -U",
		"fi_rdm_tagged_pingpong -I 5 -v",
		"fi_rdm_tagged_pingpong -I 5 -v -U",
		"fi_rdm_tagged_bw -I 5",
		"fi_rdm_tagged_bw -I 5 -U",
		"fi_rdm_tagged_bw -I 5 -v",
		"fi_rdm_tagged_bw -I 5 -v -U",
		"fi_dgram_pingpong -I 5",
	}
)

// defaultEP is the endpoint type a program opens without -e (its source:
// the hints it sets, else common/shared.c's FI_EP_RDM).
var defaultEP = map[string]string{
	"fi_cm_data": "msg", "fi_msg": "msg", "fi_msg_epoll": "msg", "fi_msg_sockets": "msg",
	"fi_msg_pingpong": "msg", "fi_msg_bw": "msg",
	"fi_dgram": "dgram", "fi_dgram_waitset": "dgram", "fi_dgram_pingpong": "dgram",
	"fi_getinfo_test": "", "fi_dom_test": "", "fi_eq_test": "", "fi_cq_test": "", "fi_mr_test": "", "fi_cntr_test": "",
}

// Tests returns the 84 tests of the unit, functional and short sets.
func Tests() []Test {
	var out []Test
	add := func(set string, kind Kind, lines []string) {
		for _, l := range lines {
			out = append(out, Test{Set: set, Kind: kind, Line: l, EP: endpointOf(l)})
		}
	}
	add("unit", Unit, unitLines)
	add("functional", ClientServer, functionalLines)
	add("short", ClientServer, shortLines)
	return out
}

// endpointOf reads -e TYPE from a command line, else the program's default.
func endpointOf(line string) string {
	f := strings.Fields(line)
	for i := 1; i+1 < len(f); i++ {
		if f[i] == "-e" {
			return f[i+1]
		}
	}
	if ep, ok := defaultEP[f[0]]; ok {
		return ep
	}
	return "rdm"
}
