/*
 * rma — one-sided communication (MPI-3.1 chapter 11): MPI_Put, MPI_Get,
 * MPI_Accumulate, MPI_Fetch_and_op, MPI_Compare_and_swap, synchronised
 * with MPI_Win_fence (§11.5.1, active target) and MPI_Win_lock /
 * MPI_Win_unlock / MPI_Win_lock_all / MPI_Win_flush (§11.5.3, passive
 * target), on a window of memory the program allocated itself with malloc
 * (MPI_Win_create) and on one MPI allocated (MPI_Win_allocate).
 *
 * Window layout (per rank, WSIZE octets): [0, BIG) put/get area, then
 * NACC int64 accumulators, then the fetch-and-op counter.
 */
#include "check.h"

#define BIG (1 << 20)
#define NACC 1024
#define WSIZE (BIG + (NACC + 8) * 8)
#define ACC_OFF BIG
#define CNT_OFF (BIG + NACC * 8)
#define NFOP 200

static void run(MPI_Win win, uint8_t *base, const char *kind)
{
	int right = (g_rank + 1) % g_size, left = (g_rank + g_size - 1) % g_size;
	uint8_t *tmp = xmalloc(BIG);
	char what[128];
	static const size_t psizes[] = {1, 8, 1000, 4096, 65536, BIG};

	/* Fence: put into the right neighbour, get back from the left one. */
	for (size_t i = 0; i < sizeof(psizes) / sizeof(psizes[0]); i++) {
		size_t n = psizes[i];
		memset(base, 0xee, BIG);
		fill(tmp, n, g_rank, 1, (int)i);
		CALL(MPI_Win_fence(0, win));
		CALL(MPI_Put(tmp, (int)n, MPI_BYTE, right, 0, (int)n, MPI_BYTE, win));
		CALL(MPI_Win_fence(0, win));
		snprintf(what, sizeof what, "%s: Put %zu B from %d, fence", kind, n, left);
		expect(base, n, left, 1, (int)i, what);
		memset(tmp, 0xee, n);
		CALL(MPI_Get(tmp, (int)n, MPI_BYTE, left, 0, (int)n, MPI_BYTE, win));
		CALL(MPI_Win_fence(0, win));
		/* Left's window holds what left-of-left put. */
		snprintf(what, sizeof what, "%s: Get %zu B from %d, fence", kind, n, left);
		expect(tmp, n, (left + g_size - 1) % g_size, 1, (int)i, what);
	}

	/* Fence: every rank accumulates into every rank's NACC counters. */
	int64_t *acc = (int64_t *)(base + ACC_OFF), *v = xmalloc(sizeof(int64_t) * NACC);
	for (int i = 0; i < NACC; i++) {
		acc[i] = 1000;
		v[i] = (int64_t)(g_rank + 1) * (i + 1);
	}
	CALL(MPI_Win_fence(0, win));
	for (int t = 0; t < g_size; t++)
		CALL(MPI_Accumulate(v, NACC, MPI_INT64_T, t, ACC_OFF, NACC, MPI_INT64_T, MPI_SUM, win));
	CALL(MPI_Win_fence(0, win));
	for (int i = 0; i < NACC; i++) {
		int64_t want = 1000 + (int64_t)g_size * (g_size + 1) / 2 * (i + 1);
		if (acc[i] != want) {
			fail("%s: Accumulate SUM, fence: counter %d = %lld, want %lld", kind, i, (long long)acc[i],
			     (long long)want);
			break;
		}
	}

	/* Passive target: fetch-and-op on rank 0's counter under exclusive
	 * locks; the fetched values of all ranks must be exactly 0..n*NFOP-1. */
	int64_t *cnt = (int64_t *)(base + CNT_OFF);
	*cnt = 0;
	CALL(MPI_Win_fence(0, win));
	int64_t one = 1, *fetched = xmalloc(sizeof(int64_t) * NFOP);
	for (int k = 0; k < NFOP; k++) {
		CALL(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
		CALL(MPI_Fetch_and_op(&one, &fetched[k], MPI_INT64_T, 0, CNT_OFF, MPI_SUM, win));
		CALL(MPI_Win_unlock(0, win));
	}
	CALL(MPI_Barrier(MPI_COMM_WORLD));
	int64_t *all = xmalloc(sizeof(int64_t) * NFOP * (size_t)g_size);
	CALL(MPI_Allgather(fetched, NFOP, MPI_INT64_T, all, NFOP, MPI_INT64_T, MPI_COMM_WORLD));
	uint8_t *seen = xmalloc((size_t)NFOP * (size_t)g_size);
	memset(seen, 0, (size_t)NFOP * (size_t)g_size);
	for (int k = 0; k < NFOP * g_size; k++) {
		if (all[k] < 0 || all[k] >= NFOP * g_size || seen[all[k]]++) {
			fail("%s: Fetch_and_op under lock: fetched value %lld (entry %d) out of range or seen twice", kind,
			     (long long)all[k], k);
			break;
		}
	}
	if (g_rank == 0) {
		CALL(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
		int64_t final = -1;
		CALL(MPI_Get(&final, 1, MPI_INT64_T, 0, CNT_OFF, 1, MPI_INT64_T, win));
		CALL(MPI_Win_unlock(0, win));
		if (final != (int64_t)NFOP * g_size)
			fail("%s: counter after %d fetch-and-ops = %lld", kind, NFOP * g_size, (long long)final);
	}

	/* Passive target: lock_all, put to the right, flush, compare-and-swap. */
	CALL(MPI_Barrier(MPI_COMM_WORLD));
	memset(base, 0xee, BIG);
	CALL(MPI_Barrier(MPI_COMM_WORLD));
	CALL(MPI_Win_lock_all(0, win));
	fill(tmp, 65536, g_rank, 2, 0);
	CALL(MPI_Put(tmp, 65536, MPI_BYTE, right, 0, 65536, MPI_BYTE, win));
	CALL(MPI_Win_flush(right, win));
	CALL(MPI_Win_unlock_all(win));
	CALL(MPI_Barrier(MPI_COMM_WORLD));
	CALL(MPI_Win_lock(MPI_LOCK_SHARED, g_rank, 0, win)); /* sync the public and private copies */
	snprintf(what, sizeof what, "%s: Put 64 KiB under lock_all + flush", kind);
	expect(base, 65536, left, 2, 0, what);
	CALL(MPI_Win_unlock(g_rank, win));
	CALL(MPI_Barrier(MPI_COMM_WORLD));
	memset(tmp, 0xee, 65536);
	CALL(MPI_Win_lock(MPI_LOCK_SHARED, left, 0, win));
	CALL(MPI_Get(tmp, 65536, MPI_BYTE, left, 0, 65536, MPI_BYTE, win));
	CALL(MPI_Win_unlock(left, win));
	snprintf(what, sizeof what, "%s: Get 64 KiB under a shared lock", kind);
	expect(tmp, 65536, (left + g_size - 1) % g_size, 2, 0, what);

	/* Compare-and-swap: every rank tries to swap 0 -> rank+1 on rank 0's
	 * slot; exactly one wins. */
	int64_t *slot = (int64_t *)(base + CNT_OFF + 8);
	*slot = 0;
	CALL(MPI_Barrier(MPI_COMM_WORLD));
	int64_t cmp = 0, mine = g_rank + 1, old = -1;
	CALL(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
	CALL(MPI_Compare_and_swap(&mine, &cmp, &old, MPI_INT64_T, 0, CNT_OFF + 8, win));
	CALL(MPI_Win_unlock(0, win));
	int won = old == 0, winners = 0;
	CALL(MPI_Allreduce(&won, &winners, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
	if (winners != 1)
		fail("%s: Compare_and_swap: %d ranks swapped, want exactly 1 (mine returned %lld)", kind, winners,
		     (long long)old);
	CALL(MPI_Barrier(MPI_COMM_WORLD));
	free(tmp);
	free(v);
	free(fetched);
	free(all);
	free(seen);
}

int main(int argc, char **argv)
{
	start(&argc, &argv, "rma");
	MPI_Win win;
	uint8_t *base = xmalloc(WSIZE);
	CALL(MPI_Win_create(base, WSIZE, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win));
	run(win, base, "Win_create(malloc)");
	CALL(MPI_Win_free(&win));
	free(base);

	uint8_t *mb = NULL;
	CALL(MPI_Win_allocate(WSIZE, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &mb, &win));
	run(win, mb, "Win_allocate");
	CALL(MPI_Win_free(&win));
	return finish();
}
