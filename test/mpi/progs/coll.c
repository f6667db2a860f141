/*
 * coll — collectives (MPI-3.1 chapter 5): MPI_Barrier, MPI_Bcast from every
 * root, MPI_Allreduce (sum of integers, max of doubles, in place),
 * MPI_Alltoall and MPI_Alltoallv, MPI_Allgather, MPI_Reduce, and the
 * non-blocking MPI_Ibarrier/MPI_Iallreduce (§5.12). Sizes up to 4 MiB.
 * Every result is compared with the value computed locally from what each
 * rank contributed.
 */
#include "check.h"

static const size_t bsizes[] = {0, 1, 8, 1000, 4096, 65536, 65537, 1048576, 4194304};
#define NB (sizeof(bsizes) / sizeof(bsizes[0]))
static const int rcounts[] = {1, 2, 17, 1024, 65536, 262144};
#define NR (sizeof(rcounts) / sizeof(rcounts[0]))
static const size_t asizes[] = {1, 8, 100, 4096, 65536, 262144};
#define NA (sizeof(asizes) / sizeof(asizes[0]))

static void barriers(void)
{
	/* A counter passed around with barriers between: each rank's view of
	 * the round must agree with rank 0's, broadcast after the barrier. */
	for (int round = 0; round < 200; round++) {
		int r = -1;
		CALL(MPI_Barrier(MPI_COMM_WORLD));
		if (g_rank == 0)
			r = round;
		CALL(MPI_Bcast(&r, 1, MPI_INT, 0, MPI_COMM_WORLD));
		if (r != round) {
			fail("barrier round %d: rank 0 says round %d", round, r);
			return;
		}
	}
	MPI_Request req;
	CALL(MPI_Ibarrier(MPI_COMM_WORLD, &req));
	CALL(MPI_Wait(&req, MPI_STATUS_IGNORE));
}

static void bcasts(void)
{
	uint8_t *buf = xmalloc(bsizes[NB - 1]);
	char what[96];
	for (size_t i = 0; i < NB; i++) {
		for (int root = 0; root < g_size; root++) {
			size_t n = bsizes[i];
			if (g_rank == root)
				fill(buf, n, root, 0, (int)i);
			else
				memset(buf, 0xee, n);
			CALL(MPI_Bcast(buf, (int)n, MPI_BYTE, root, MPI_COMM_WORLD));
			snprintf(what, sizeof what, "Bcast %zu B from root %d", n, root);
			expect(buf, n, root, 0, (int)i, what);
		}
	}
	free(buf);
}

static void allreduces(void)
{
	int cmax = rcounts[NR - 1];
	int64_t *in = xmalloc(sizeof(int64_t) * (size_t)cmax), *out = xmalloc(sizeof(int64_t) * (size_t)cmax);
	double *din = xmalloc(sizeof(double) * (size_t)cmax), *dout = xmalloc(sizeof(double) * (size_t)cmax);
	int64_t n = g_size;
	for (size_t c = 0; c < NR; c++) {
		int cnt = rcounts[c];
		for (int i = 0; i < cnt; i++) {
			in[i] = (int64_t)g_rank * 1000003 + i;
			din[i] = (double)((g_rank * 7919 + i) % 10007);
			out[i] = -1;
			dout[i] = -1;
		}
		CALL(MPI_Allreduce(in, out, cnt, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD));
		CALL(MPI_Allreduce(din, dout, cnt, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
		int bad = 0;
		for (int i = 0; i < cnt && bad < 3; i++) {
			int64_t want = 1000003 * n * (n - 1) / 2 + n * i;
			double dwant = -1;
			for (int r = 0; r < g_size; r++) {
				double v = (double)((r * 7919 + i) % 10007);
				dwant = v > dwant ? v : dwant;
			}
			if (out[i] != want) {
				fail("Allreduce SUM int64 count %d: element %d = %lld, want %lld", cnt, i, (long long)out[i],
				     (long long)want);
				bad++;
			}
			if (dout[i] != dwant) {
				fail("Allreduce MAX double count %d: element %d = %g, want %g", cnt, i, dout[i], dwant);
				bad++;
			}
		}
		/* In place. */
		for (int i = 0; i < cnt; i++)
			out[i] = (int64_t)(g_rank + 1) * (i % 5 + 1);
		CALL(MPI_Allreduce(MPI_IN_PLACE, out, cnt, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD));
		for (int i = 0; i < cnt; i++)
			if (out[i] != n * (n + 1) / 2 * (i % 5 + 1)) {
				fail("Allreduce IN_PLACE count %d: element %d = %lld, want %lld", cnt, i, (long long)out[i],
				     (long long)(n * (n + 1) / 2 * (i % 5 + 1)));
				break;
			}
		/* Non-blocking, and Reduce to the last rank. */
		MPI_Request req;
		CALL(MPI_Iallreduce(in, out, cnt, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD, &req));
		CALL(MPI_Wait(&req, MPI_STATUS_IGNORE));
		for (int i = 0; i < cnt; i++)
			if (out[i] != (n - 1) * 1000003 + i) {
				fail("Iallreduce MAX count %d: element %d = %lld, want %lld", cnt, i, (long long)out[i],
				     (long long)((n - 1) * 1000003 + i));
				break;
			}
		CALL(MPI_Reduce(in, out, cnt, MPI_INT64_T, MPI_SUM, g_size - 1, MPI_COMM_WORLD));
		if (g_rank == g_size - 1)
			for (int i = 0; i < cnt; i++)
				if (out[i] != 1000003 * n * (n - 1) / 2 + n * i) {
					fail("Reduce SUM count %d: element %d = %lld", cnt, i, (long long)out[i]);
					break;
				}
	}
	free(in);
	free(out);
	free(din);
	free(dout);
}

static void alltoalls(void)
{
	size_t maxn = asizes[NA - 1] * (size_t)g_size;
	uint8_t *sb = xmalloc(maxn), *rb = xmalloc(maxn);
	char what[96];
	for (size_t i = 0; i < NA; i++) {
		size_t n = asizes[i];
		for (int p = 0; p < g_size; p++)
			fill(sb + (size_t)p * n, n, g_rank, p, (int)i);
		memset(rb, 0xee, n * (size_t)g_size);
		CALL(MPI_Alltoall(sb, (int)n, MPI_BYTE, rb, (int)n, MPI_BYTE, MPI_COMM_WORLD));
		for (int p = 0; p < g_size; p++) {
			snprintf(what, sizeof what, "Alltoall %zu B, block from %d", n, p);
			expect(rb + (size_t)p * n, n, p, g_rank, (int)i, what);
		}
		/* Allgather: block p is rank p's. */
		fill(sb, n, g_rank, 77, (int)i);
		memset(rb, 0xee, n * (size_t)g_size);
		CALL(MPI_Allgather(sb, (int)n, MPI_BYTE, rb, (int)n, MPI_BYTE, MPI_COMM_WORLD));
		for (int p = 0; p < g_size; p++) {
			snprintf(what, sizeof what, "Allgather %zu B, block of %d", n, p);
			expect(rb + (size_t)p * n, n, p, 77, (int)i, what);
		}
	}
	/* Alltoallv: rank r sends (r + p + 1) * 100 octets to p. */
	int *sc = xmalloc(sizeof(int) * (size_t)g_size), *sd = xmalloc(sizeof(int) * (size_t)g_size);
	int *rc = xmalloc(sizeof(int) * (size_t)g_size), *rd = xmalloc(sizeof(int) * (size_t)g_size);
	int so = 0, ro = 0;
	for (int p = 0; p < g_size; p++) {
		sc[p] = (g_rank + p + 1) * 100;
		sd[p] = so;
		so += sc[p];
		rc[p] = (p + g_rank + 1) * 100;
		rd[p] = ro;
		ro += rc[p];
	}
	uint8_t *vs = xmalloc((size_t)so), *vr = xmalloc((size_t)ro);
	for (int p = 0; p < g_size; p++)
		fill(vs + sd[p], (size_t)sc[p], g_rank, p, 99);
	memset(vr, 0xee, (size_t)ro);
	CALL(MPI_Alltoallv(vs, sc, sd, MPI_BYTE, vr, rc, rd, MPI_BYTE, MPI_COMM_WORLD));
	for (int p = 0; p < g_size; p++) {
		snprintf(what, sizeof what, "Alltoallv %d B, block from %d", rc[p], p);
		expect(vr + rd[p], (size_t)rc[p], p, g_rank, 99, what);
	}
	free(vs);
	free(vr);
	free(sc);
	free(sd);
	free(rc);
	free(rd);
	free(sb);
	free(rb);
}

int main(int argc, char **argv)
{
	start(&argc, &argv, "coll");
	barriers();
	bcasts();
	allreduces();
	alltoalls();
	return finish();
}
