/*
 * rma — one-sided communication (MPI-3.1 chapter 11): MPI_Put, MPI_Get,
 * MPI_Accumulate, MPI_Fetch_and_op, MPI_Compare_and_swap, synchronised
 * with MPI_Win_fence (§11.5.1, active target) and MPI_Win_lock /
 * MPI_Win_unlock / MPI_Win_lock_all / MPI_Win_flush (§11.5.3, passive
 * target), on a window of memory the program allocated itself with malloc
 * (MPI_Win_create) and on one MPI allocated (MPI_Win_allocate).
 *
 * Then every atomic Open MPI's osc rdma may issue as a network atomic
 * (btl ofi: fi_atomic/fi_fetch_atomic/fi_compare_atomic, docs/atomics.md):
 * MPI_Fetch_and_op and single-element MPI_Accumulate with MPI_SUM and
 * MPI_REPLACE (the others: see op_name), and MPI_Compare_and_swap, on 32-
 * and 64-bit signed integers, every rank at
 * once on rank 0's words (32-bit words two to an 8-aligned word, so that
 * neighbours change both halves of one word at once); final values and
 * every fetched value checked.
 *
 * Window layout (per rank, WSIZE octets): [0, BIG) put/get area, then
 * NACC int64 accumulators, the fetch-and-op counter and compare-and-swap
 * slot, then the atomics' words (ATOM_OFF).
 */
#include "check.h"

#define BIG (1 << 20)
#define NACC 1024
#define WSIZE (BIG + (NACC + 64) * 8)
#define ACC_OFF BIG
#define CNT_OFF (BIG + NACC * 8)
#define ATOM_OFF (CNT_OFF + 16)
#define NFOP 200

/* Only MPI_SUM and MPI_REPLACE (and compare-and-swap): Open MPI 4.1.4's
 * btl ofi knows no other network atomic (btl_ofi_atomics.c to_fi_op: ADD
 * and SWAP, anything else "Unknown or unsupported atomic op" and the job
 * aborts before anything reaches libfabric), and osc rdma hands it MPI_MIN,
 * MPI_MAX, MPI_BAND, MPI_BOR, MPI_BXOR all the same (measured). The
 * provider's FI_MIN, FI_MAX, FI_BAND, FI_BOR and FI_BXOR are checked by
 * c/prov/tests/t_fi_atomic.c (docs/mpi.md, docs/atomics.md). */
enum { A_SUM, A_REPLACE, NOPS };
static const char *const op_name[NOPS] = {"SUM", "REPLACE"};
#define NSUM 10 /* fetch-adds per rank */

static MPI_Op op_of(int k)
{
	switch (k) {
	case A_SUM:
		return MPI_SUM;
	default:
		return MPI_REPLACE;
	}
}

/* The word's value before any rank's operation k. */
static int64_t a_init(int k)
{
	switch (k) {
	case A_SUM:
		return -5;
	default: /* A_REPLACE */
		return -1;
	}
}

/* Rank r's operand for operation k. */
static int64_t a_val(int k, int r)
{
	switch (k) {
	case A_SUM:
		return r + 1;
	default: /* A_REPLACE */
		return 100 + r;
	}
}

/* The word's value once every rank did k (times NSUM for SUM); REPLACE:
 * any rank's operand, checked apart. */
static int64_t a_final(int k, int n)
{
	int64_t v = a_init(k);
	for (int r = 0; r < n; r++) {
		int64_t x = a_val(k, r);
		switch (k) {
		case A_SUM:
			v += NSUM * x;
			break;
		}
	}
	return v;
}

/* Offset of the word of operation k, size sz, fetching (f 1) or not. */
static MPI_Aint a_off(int k, int sz, int f)
{
	int slot = k * 2 + f; /* 2 * NOPS words per size */
	return sz == 8 ? ATOM_OFF + 8 * slot : ATOM_OFF + 8 * 2 * NOPS + 4 * slot;
}
#define CAS32_OFF (ATOM_OFF + 12 * 2 * NOPS) /* after both sizes' words */

static int64_t ld(const uint8_t *p, int sz)
{
	if (sz == 4) {
		int32_t v;
		memcpy(&v, p, 4);
		return v;
	}
	int64_t v;
	memcpy(&v, p, 8);
	return v;
}

static void st(uint8_t *p, int sz, int64_t v)
{
	if (sz == 4) {
		int32_t w = (int32_t)v;
		memcpy(p, &w, 4);
	} else {
		memcpy(p, &v, 8);
	}
}

/* atomics: every rank, under MPI_Win_lock_all, does each operation on rank
 * 0's words of both sizes, fetching and not; then compare-and-swap on
 * 32 bits. Rank 0 checks the finals, every rank its fetched values. */
static void atomics(MPI_Win win, uint8_t *base, const char *kind)
{
	int64_t fetched[2][NOPS][NSUM];
	if (g_rank == 0) {
		CALL(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
		for (int sz = 4; sz <= 8; sz += 4)
			for (int k = 0; k < NOPS; k++)
				for (int f = 0; f < 2; f++)
					st(base + a_off(k, sz, f), sz, a_init(k));
		st(base + CAS32_OFF, 4, 0);
		CALL(MPI_Win_unlock(0, win));
	}
	CALL(MPI_Barrier(MPI_COMM_WORLD));
	CALL(MPI_Win_lock_all(0, win));
	for (int sz = 4; sz <= 8; sz += 4) {
		MPI_Datatype t = sz == 4 ? MPI_INT32_T : MPI_INT64_T;
		for (int k = 0; k < NOPS; k++) {
			uint8_t v[8], got[8];
			if (getenv("RMA_OPS") && !strstr(getenv("RMA_OPS"), op_name[k])) continue;
			st(v, sz, a_val(k, g_rank));
			for (int i = 0; i < (k == A_SUM ? NSUM : 1); i++) {
				CALL(MPI_Fetch_and_op(v, got, t, 0, a_off(k, sz, 1), op_of(k), win));
				CALL(MPI_Win_flush(0, win));
				fetched[sz / 8][k][i] = ld(got, sz);
				CALL(MPI_Accumulate(v, 1, t, 0, a_off(k, sz, 0), 1, t, op_of(k), win));
				CALL(MPI_Win_flush(0, win));
			}
		}
	}
	int32_t cmp = 0, mine = g_rank + 1, old = -1;
	CALL(MPI_Compare_and_swap(&mine, &cmp, &old, MPI_INT32_T, 0, CAS32_OFF, win));
	CALL(MPI_Win_unlock_all(win));

	/* Fetched values: what the word may have held at that moment. */
	for (int s8 = 0; s8 < 2; s8++) {
		int sz = s8 ? 8 : 4;
		for (int k = 0; k < NOPS; k++) {
			int64_t x = fetched[s8][k][0], lo = a_init(k), hi = a_final(k, g_size);
			int ok = 1;
			switch (k) {
			case A_SUM: /* increasing, between init and final */
				for (int i = 0; i < NSUM; i++)
					ok &= fetched[s8][k][i] >= lo && fetched[s8][k][i] <= hi - (g_rank + 1) &&
					      (i == 0 || fetched[s8][k][i] > fetched[s8][k][i - 1]);
				break;
			case A_REPLACE:
				ok = x == -1 || (x >= 100 && x < 100 + g_size && x != 100 + g_rank);
				break;
			}
			if (!ok)
				fail("%s: MPI_Fetch_and_op %s on %d bits: fetched %lld, impossible (init %lld, final %lld)", kind,
				     op_name[k], sz * 8, (long long)x, (long long)lo, (long long)hi);
		}
	}
	/* REPLACE: the fetched values and the final one are each operand and
	 * the initial value exactly once. */
	int64_t rep[2] = {fetched[0][A_REPLACE][0], fetched[1][A_REPLACE][0]}, *all = xmalloc(sizeof(int64_t) * 2 * (size_t)g_size);
	CALL(MPI_Gather(rep, 2, MPI_INT64_T, all, 2, MPI_INT64_T, 0, MPI_COMM_WORLD));
	int won = old == 0, winners = 0;
	CALL(MPI_Reduce(&won, &winners, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD));
	if (g_rank == 0) {
		CALL(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win)); /* public and private copies */
		for (int sz = 4; sz <= 8; sz += 4) {
			for (int k = 0; k < NOPS; k++) {
				for (int f = 0; f < 2; f++) {
					int64_t got = ld(base + a_off(k, sz, f), sz), want = a_final(k, g_size);
					if (sz == 4)
						want = (int32_t)want;
					if (k == A_REPLACE ? !(got >= 100 && got < 100 + g_size) : got != want)
						fail("%s: %s %s on %d bits by %d ranks: word %lld, want %lld", kind,
						     f ? "MPI_Fetch_and_op" : "MPI_Accumulate", op_name[k], sz * 8, g_size,
						     (long long)got, (long long)want);
				}
			}
			uint64_t seen = 0; /* bit r: operand of rank r; bit 63: the initial -1 */
			int64_t fin = ld(base + a_off(A_REPLACE, sz, 1), sz);
			for (int r = 0; r <= g_size; r++) {
				int64_t x = r < g_size ? all[2 * r + sz / 8] : fin;
				int bit = x == -1 ? 63 : (int)(x - 100);
				if ((bit != 63 && (bit < 0 || bit >= g_size)) || (seen >> bit & 1))
					fail("%s: MPI_REPLACE chain on %d bits: value %lld twice or unknown", kind, sz * 8,
					     (long long)x);
				else
					seen |= (uint64_t)1 << bit;
			}
		}
		if (winners != 1)
			fail("%s: 32-bit Compare_and_swap: %d ranks swapped, want exactly 1", kind, winners);
		CALL(MPI_Win_unlock(0, win));
	}
	free(all);
	CALL(MPI_Barrier(MPI_COMM_WORLD));
}

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
	atomics(win, base, kind);
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
