/*
 * iwd_idle.c — what a thread does after a poll that found nothing
 * (fi_cq_read/fi_cq_readfrom returning -FI_EAGAIN, fi_poll with no event,
 * fi_cntr_read returning the value it returned last): the provider's wait
 * discipline, FI_IWARPD_IDLE and FI_IWARPD_IDLE_SLEEP_US (docs/libfabric.md
 * "Progress" and "Environment variables").
 *
 * The daemon is the RNIC and shares the CPUs with its clients, so a polling
 * thread gives the processor away between empty polls; the question is how.
 *
 *  - sched_yield(2) ("yield") costs nothing when no other task wants the
 *    CPU and hands it at once to a daemon or peer rank queued on it. But on
 *    a CPU shared with processes that never wait, a yield queues the thread
 *    behind them for whole time slices (under Linux's EEVDF scheduler a
 *    yield also moves the yielder's deadline one slice later), and every
 *    hop of a message (rank, daemon, daemon, rank) pays one: milliseconds.
 *  - nanosleep(2) for IWARPD_IDLE_SLEEP_US ("sleep") takes the thread off
 *    the run queue; woken, it is placed with its lag kept and runs before
 *    the busy processes whose slices it would have waited for. When the CPU
 *    is not contended each sleep costs a timer and two context switches
 *    more than a yield (about 20 us more per ping-pong with both ranks on
 *    one CPU, docs/libfabric.md).
 *  - "adaptive" (the default) yields while yields return quickly and
 *    sleeps once the CPU is seen contended: a yield or a sleep that kept
 *    the thread away longer than IWD_IDLE_CONTENDED_NS (another task ran
 *    meanwhile for most of a slice) twice within IWD_IDLE_HOLD_NS makes the
 *    thread sleep instead of yield for the next IWD_IDLE_HOLD_NS, renewed by
 *    every such long return.
 *    The sleeps of one wait double from FI_IWARPD_IDLE_SLEEP_US, at most
 *    IWD_IDLE_BACKOFF times (1 us: up to 32 us), until a poll finds
 *    something (iwd_idle_reset): on a contended CPU a wait lasts
 *    milliseconds, and each sleep costs a wake-up.
 *
 * In "adaptive" mode an empty poll of a domain that serves itself (every
 * endpoint owns its QP's socket through a fast path and has nothing posted
 * to the daemon: iwd_domain_progress) neither yields nor sleeps: the
 * daemon has nothing of ours to do, and a rank that gives its processor
 * away then only waits for it to come back, as a socket provider's rank
 * would not (MPI's own mpi_yield_when_idle still yields, as it does for
 * them). An RDM endpoint whose last send found the peer's window full
 * does not count as serving itself: the peer must run to acknowledge (in
 * issue 20's engine-CPU layout both ranks share one CPU, and Open MPI's
 * mtl ofi retries a refused send without yielding: spinning there cut the
 * 8 B message rate to 0.30x tcp). Open MPI 8 B latency over the RDM fast path, alternating runs:
 * 0.83-1.24x tcp polling on, 0.94-1.72x yielding (docs/fastpath.md).
 *
 * In "adaptive" mode an empty fi_cq_read of a domain whose every wait is
 * the daemon's work (a bulk transfer in flight, no socket the rank reads
 * or wants, none of its own operations pending: iwd_progress.c
 * dom->daemon_wait) neither yields nor sleeps either: it blocks on the
 * completion channel, woken by the daemon's signal when a completion is
 * written, for at most FI_IWARPD_IDLE_BLOCK_US (iwd_domain_block) — but
 * not on the first empty read after one that found something
 * (iwd_idle_block_due: Open MPI reads its CQ until -FI_EAGAIN before it
 * completes what it read, and that read must return at once).
 *
 * The sleep runs with the thread's timer slack lowered to the sleep
 * (prctl(2) PR_SET_TIMERSLACK; the default slack, 50 us, would lengthen
 * every short sleep by 50 us) and the slack restored after. No mode blocks
 * longer than one sleep (at most IWD_IDLE_SLEEP_MAX_US) or one block on the
 * channel (FI_IWARPD_IDLE_BLOCK_US, 1 ms by default), so none can miss a
 * completion for long: the caller's next poll sees it. The state is per thread: the
 * thread that waits is the one that is scheduled.
 */
#include <sched.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <time.h>

#include "iwd.h"

/* Until when (CLOCK_MONOTONIC ns) this thread sleeps instead of yielding
 * in adaptive mode: the CPU was seen contended (0: never). */
static __thread int64_t idle_contended_until;
/* Adaptive: empty polls in a row that slept (the next sleep is the base
 * doubled this many times, up to IWD_IDLE_BACKOFF doublings). */
static __thread unsigned idle_slept;
/* Adaptive: when the last long return (a yield or sleep that kept the
 * thread away IWD_IDLE_CONTENDED_NS) ended (0: none yet). */
static __thread int64_t idle_long_at;
/* Empty fi_cq_reads in a row (iwd_idle_block_due). */
static __thread unsigned idle_empty_run;

void iwd_idle_reset(void)
{
	idle_slept = 0;
	idle_empty_run = 0;
}

/*
 * Whether an empty fi_cq_read may block on the completion channel
 * (iwd_domain_block): not the first after a read that found something.
 * Open MPI's mtl ofi (ompi_mtl_ofi_context_progress) reads its CQ in a
 * loop until it returns -FI_EAGAIN and only then completes the requests
 * it read: blocking on that read, which ends a drain, not a wait, held
 * every message of a ping-pong for the whole bound (64 KiB latency 1.5 ms
 * with a 1 ms bound). The second empty read in a row is a wait.
 */
int iwd_idle_block_due(void)
{
	return idle_empty_run++ > 0;
}

static int64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* nanosleep for ns with the thread's timer slack at most ns, restored. */
static void idle_sleep(int64_t ns)
{
	struct timespec ts = {.tv_sec = ns / 1000000000LL, .tv_nsec = ns % 1000000000LL};
	int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
	int lowered = slack > ns && prctl(PR_SET_TIMERSLACK, (unsigned long)(ns > 0 ? ns : 1), 0, 0, 0) == 0;
	nanosleep(&ts, NULL); /* EINTR: the caller polls again */
	if (lowered)
		prctl(PR_SET_TIMERSLACK, (unsigned long)slack, 0, 0, 0);
}

void iwd_idle(int self_served)
{
	int64_t sleep_ns = (int64_t)iwd_env.idle_sleep_us * 1000, before, away;
	if (self_served && iwd_env.idle_mode == IWD_IDLE_ADAPTIVE)
		return; /* nobody of ours to give the processor to: poll on, as a socket provider does */
	switch (iwd_env.idle_mode) {
	case IWD_IDLE_YIELD:
		sched_yield();
		return;
	case IWD_IDLE_SLEEP:
		idle_sleep(sleep_ns);
		return;
	default:
		break;
	}
	before = mono_ns();
	if (before < idle_contended_until) {
		/* A wait of milliseconds would cost a wake-up per sleep:
		 * back off, at most IWD_IDLE_BACKOFF doublings. */
		sleep_ns <<= idle_slept < IWD_IDLE_BACKOFF ? idle_slept++ : IWD_IDLE_BACKOFF;
		if (sleep_ns > IWD_IDLE_SLEEP_MAX_US * 1000LL)
			sleep_ns = IWD_IDLE_SLEEP_MAX_US * 1000LL;
		idle_sleep(sleep_ns);
		away = mono_ns() - before - sleep_ns;
	} else {
		sched_yield();
		away = mono_ns() - before;
	}
	if (away > IWD_IDLE_CONTENDED_NS) {
		/* One long return may be a blip (another process ran once);
		 * two within IWD_IDLE_HOLD_NS are contention. */
		if (idle_long_at && before - idle_long_at < IWD_IDLE_HOLD_NS)
			idle_contended_until = before + away + IWD_IDLE_HOLD_NS;
		idle_long_at = before + away;
	}
}
