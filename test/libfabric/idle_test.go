package libfabric

import (
	"testing"

	"github.com/iwarpd/iwarpd/test/daemontest"
)

// TestIdleDiscipline runs c/prov/tests/fi_idle.c in each FI_IWARPD_IDLE
// mode (c/prov/iwd_idle.c, docs/libfabric.md "Progress"): every empty
// fi_cq_read, fi_poll and unchanged fi_cntr_read yields once (yield) or
// sleeps once (sleep, the thread's timer slack restored after), a changed
// counter read does neither; adaptive yields first and, with a busy
// process bound to its CPU, starts sleeping instead (issue 20, under load);
// self: adaptive with the RDM fast path, whose endpoint owns its socket,
// neither yields nor sleeps (the domain serves itself); block: while
// rendezvous sends between two endpoints are in flight (all of it the
// daemon's work) and FI_IWARPD_IDLE_BLOCK_US is set, the empty reads but
// the first after a completion block on the completion channel, each
// woken by the daemon's signal (none ends by its 1 s bound); noblock: the
// same with FI_IWARPD_IDLE_BLOCK_US=0 (the default) yields or sleeps once
// per empty read and never blocks.
func TestIdleDiscipline(t *testing.T) {
	for _, mode := range []string{"yield", "sleep", "adaptive", "self", "block", "noblock"} {
		t.Run(mode, func(t *testing.T) {
			var opts daemontest.Options
			if mode == "self" {
				// "self" counts the calls of 2000 empty reads once the
				// endpoint owns its socket. On a loaded machine the rank
				// can be descheduled past the default 1 ms lease, and the
				// daemon then rightly takes the socket back (the reads
				// after yield): a 300 ms lease keeps the premise
				// (CI, 2026-11-29: 3 yields in 2000 reads).
				opts.Extra = []string{"-fastpath-lease", "300ms"}
			}
			runProvProgramWith(t, opts, "fi_idle", mode)
		})
	}
}
