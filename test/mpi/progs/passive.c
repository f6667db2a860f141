/*
 * passive — passive-target progress (MPI-3.1 §11.5.3, §11.7 "Progress"):
 * an origin's MPI_Put, MPI_Get and MPI_Fetch_and_op under MPI_Win_lock
 * complete while the target computes without calling MPI. Rank 1 (the
 * target) loops over arithmetic and reads of its own window words — no MPI
 * call — until the origin's operation shows in its window:
 *
 *   put   the origin's MPI_Put (lock, put, unlock) changes the target's
 *         word;
 *   get   the origin reads with MPI_Get a value the target wrote before it
 *         started computing (checked), then puts a flag the target waits
 *         for (the put completes only after the get did);
 *   fop   the origin's MPI_Fetch_and_op (MPI_SUM of 1) changes the target's
 *         counter; the origin checks the value it fetched.
 *
 * The target waits at most BOUND_S seconds per operation (a bound against
 * a hang, not a time measured): then the run fails with "no passive
 * progress". Open MPI's osc rdma over btl ofi on iwarpd passes (the
 * target's daemon executes the RDMA and the atomics); osc pt2pt cannot
 * (the target's MPI library must receive and apply every operation:
 * docs/mpi.md). On MPI_Win_create (malloc'd memory) and MPI_Win_allocate
 * windows. Ranks beyond 1 only take part in the barriers.
 */
#include <time.h>

#include "check.h"

#define BOUND_S 20
#define PUT_MAGIC 0x5054505554505554ll
#define GET_VALUE 0x4745544745544745ll
#define GET_FLAG 0x464c4147464c4147ll
#define FOP_INIT 1000

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* compute_until: the target's loop — arithmetic, and a read of its own
 * window word w, no MPI call — until *w == want or BOUND_S seconds passed.
 * Returns 1 when the word changed. */
static int compute_until(const volatile int64_t *w, int64_t want)
{
	volatile double x = 1;
	double end = now() + BOUND_S;
	while (__atomic_load_n(w, __ATOMIC_ACQUIRE) != want) {
		for (int i = 0; i < 10000; i++)
			x = x * 1.0000001 + 1e-9;
		if (now() > end)
			return 0;
	}
	return 1;
}

static void run(MPI_Win win, int64_t *w, const char *kind)
{
	int64_t v, got = 0, one = 1;

	/* put */
	w[0] = 0;
	CALL(MPI_Barrier(MPI_COMM_WORLD));
	if (g_rank == 1) {
		if (!compute_until(&w[0], PUT_MAGIC))
			fail("%s: no passive progress: the origin's MPI_Put under MPI_Win_lock did not reach the target "
			     "within %d s while it computed without calling MPI",
			     kind, BOUND_S);
	} else if (g_rank == 0) {
		v = PUT_MAGIC;
		CALL(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win));
		CALL(MPI_Put(&v, 1, MPI_INT64_T, 1, 0, 1, MPI_INT64_T, win));
		CALL(MPI_Win_unlock(1, win));
	}
	CALL(MPI_Barrier(MPI_COMM_WORLD));

	/* get: the target writes the value before it computes */
	if (g_rank == 1) {
		CALL(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win));
		w[1] = GET_VALUE;
		w[2] = 0;
		CALL(MPI_Win_unlock(1, win));
	}
	CALL(MPI_Barrier(MPI_COMM_WORLD));
	if (g_rank == 1) {
		if (!compute_until(&w[2], GET_FLAG))
			fail("%s: no passive progress: the origin's MPI_Get under MPI_Win_lock (and the flag put after it) "
			     "did not complete within %d s while the target computed without calling MPI",
			     kind, BOUND_S);
	} else if (g_rank == 0) {
		CALL(MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win));
		CALL(MPI_Get(&got, 1, MPI_INT64_T, 1, 8, 1, MPI_INT64_T, win));
		CALL(MPI_Win_unlock(1, win));
		if (got != GET_VALUE)
			fail("%s: MPI_Get read %#llx, want %#llx", kind, (unsigned long long)got, (unsigned long long)GET_VALUE);
		v = GET_FLAG;
		CALL(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win));
		CALL(MPI_Put(&v, 1, MPI_INT64_T, 1, 16, 1, MPI_INT64_T, win));
		CALL(MPI_Win_unlock(1, win));
	}
	CALL(MPI_Barrier(MPI_COMM_WORLD));

	/* fop */
	if (g_rank == 1) {
		CALL(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win));
		w[3] = FOP_INIT;
		CALL(MPI_Win_unlock(1, win));
	}
	CALL(MPI_Barrier(MPI_COMM_WORLD));
	if (g_rank == 1) {
		if (!compute_until(&w[3], FOP_INIT + 1))
			fail("%s: no passive progress: the origin's MPI_Fetch_and_op under MPI_Win_lock did not reach the "
			     "target within %d s while it computed without calling MPI",
			     kind, BOUND_S);
	} else if (g_rank == 0) {
		got = -1;
		CALL(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win));
		CALL(MPI_Fetch_and_op(&one, &got, MPI_INT64_T, 1, 24, MPI_SUM, win));
		CALL(MPI_Win_unlock(1, win));
		if (got != FOP_INIT)
			fail("%s: MPI_Fetch_and_op fetched %lld, want %d", kind, (long long)got, FOP_INIT);
	}
	CALL(MPI_Barrier(MPI_COMM_WORLD));
}

int main(int argc, char **argv)
{
	start(&argc, &argv, "passive");
	if (g_size < 2) {
		fail("needs 2 ranks");
		return finish();
	}
	MPI_Win win;
	int64_t *w = xmalloc(64);
	memset(w, 0, 64);
	CALL(MPI_Win_create(w, 64, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win));
	run(win, w, "Win_create(malloc)");
	CALL(MPI_Win_free(&win));
	free(w);
	w = NULL;
	CALL(MPI_Win_allocate(64, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &w, &win));
	memset(w, 0, 64);
	CALL(MPI_Barrier(MPI_COMM_WORLD));
	run(win, w, "Win_allocate");
	CALL(MPI_Win_free(&win));
	return finish();
}
