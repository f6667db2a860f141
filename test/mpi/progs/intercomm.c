/*
 * intercomm — intercommunicators (MPI-3.1 §6.6): MPI_COMM_WORLD is split
 * in two groups (by rank parity, then by lower/upper half), the groups are
 * joined by MPI_Intercomm_create through MPI_COMM_WORLD, and on the
 * intercommunicator: point-to-point with the source checked, MPI_Barrier,
 * MPI_Bcast from a root of either group (§5.2.2: MPI_ROOT / MPI_PROC_NULL
 * in the root's group), MPI_Allreduce (each group gets the other group's
 * sum, §5.9.6). Then MPI_Intercomm_merge (§6.6.2) with either group high,
 * and on the merged intracommunicator: rank order, MPI_Barrier, MPI_Bcast
 * and MPI_Allreduce. Every value is compared with what the ranks
 * contributed.
 *
 * Open MPI re-inserts the peers of the other group into its libfabric AV
 * when it creates the intercommunicator: this hung over iwarpd when a
 * duplicate insert got a new fi_addr (c/prov/tests/fi_av_dup.c).
 */
#include "check.h"

enum { ROUNDS = 3, NVAL = 1000 };

/* value is what world rank r contributes at index i in round k. */
static int64_t value(int r, int k, int i)
{
	return (int64_t)r * 1000003 + (int64_t)k * 7919 + i;
}

/* peer_p2p: local rank i sends to remote rank i % remote size, and every
 * rank receives from each remote rank that sends to it, by source. */
static void peer_p2p(MPI_Comm inter, int lrank, int lsize, int rsize, const int *rworld, int k, const char *label)
{
	int64_t out = value(g_rank, k, 1), in;
	MPI_Request req;
	MPI_Status st;
	CALL(MPI_Isend(&out, 1, MPI_INT64_T, lrank % rsize, 40 + k, inter, &req));
	for (int r = 0; r < rsize; r++) {
		if (r % lsize != lrank)
			continue; /* remote rank r sends to local rank r % lsize */
		in = -1;
		CALL(MPI_Recv(&in, 1, MPI_INT64_T, r, 40 + k, inter, &st));
		if (st.MPI_SOURCE != r)
			fail("%s round %d: receive from remote rank %d reports source %d", label, k, r, st.MPI_SOURCE);
		if (in != value(rworld[r], k, 1))
			fail("%s round %d: remote rank %d (world %d) sent %lld, want %lld", label, k, r, rworld[r],
			     (long long)in, (long long)value(rworld[r], k, 1));
	}
	CALL(MPI_Wait(&req, MPI_STATUS_IGNORE));
}

/* inter_colls: barrier, a bcast rooted in each group, allreduce. */
static void inter_colls(MPI_Comm inter, int color, int lrank, const int *rworld, int rsize, int k, const char *label)
{
	int64_t *buf = xmalloc(sizeof(int64_t) * NVAL), *in = xmalloc(sizeof(int64_t) * NVAL);
	CALL(MPI_Barrier(inter));
	for (int rootgroup = 0; rootgroup < 2; rootgroup++) {
		/* The root is the last local rank of group rootgroup. */
		if (color == rootgroup) {
			int lsize;
			CALL(MPI_Comm_size(inter, &lsize));
			int root = lrank == lsize - 1 ? MPI_ROOT : MPI_PROC_NULL;
			for (int i = 0; i < NVAL; i++)
				buf[i] = value(g_rank, k, i);
			CALL(MPI_Bcast(buf, NVAL, MPI_INT64_T, root, inter));
		} else {
			for (int i = 0; i < NVAL; i++)
				buf[i] = -1;
			CALL(MPI_Bcast(buf, NVAL, MPI_INT64_T, rsize - 1, inter));
			for (int i = 0; i < NVAL; i++)
				if (buf[i] != value(rworld[rsize - 1], k, i)) {
					fail("%s round %d: Bcast from group %d: element %d = %lld, want %lld", label, k,
					     rootgroup, i, (long long)buf[i], (long long)value(rworld[rsize - 1], k, i));
					break;
				}
		}
	}
	/* Allreduce: each group receives the other group's sum. */
	for (int i = 0; i < NVAL; i++)
		in[i] = value(g_rank, k, i);
	CALL(MPI_Allreduce(in, buf, NVAL, MPI_INT64_T, MPI_SUM, inter));
	for (int i = 0; i < NVAL; i++) {
		int64_t want = 0;
		for (int r = 0; r < rsize; r++)
			want += value(rworld[r], k, i);
		if (buf[i] != want) {
			fail("%s round %d: Allreduce: element %d = %lld, want the other group's sum %lld", label, k, i,
			     (long long)buf[i], (long long)want);
			break;
		}
	}
	CALL(MPI_Barrier(inter));
	free(buf);
	free(in);
}

/* merged_colls: the merged intracommunicator holds the low group's ranks
 * first (in local order), then the high group's; barrier, bcast from its
 * last rank, allreduce over all. */
static void merged_colls(MPI_Comm merged, int high, const int *order, int k, const char *label)
{
	int mrank, msize, wr;
	int64_t *buf = xmalloc(sizeof(int64_t) * NVAL), *in = xmalloc(sizeof(int64_t) * NVAL);
	CALL(MPI_Comm_rank(merged, &mrank));
	CALL(MPI_Comm_size(merged, &msize));
	if (msize != g_size)
		fail("%s round %d: merged size %d, want %d", label, k, msize, g_size);
	if (order[mrank] != g_rank)
		fail("%s round %d (high=%d): merged rank %d is world rank %d, want %d", label, k, high, mrank, g_rank,
		     order[mrank]);
	CALL(MPI_Barrier(merged));
	for (int i = 0; i < NVAL; i++)
		buf[i] = mrank == msize - 1 ? value(g_rank, k, i) : -1;
	CALL(MPI_Bcast(buf, NVAL, MPI_INT64_T, msize - 1, merged));
	wr = order[msize - 1];
	for (int i = 0; i < NVAL; i++)
		if (buf[i] != value(wr, k, i)) {
			fail("%s round %d: merged Bcast: element %d = %lld, want %lld", label, k, i, (long long)buf[i],
			     (long long)value(wr, k, i));
			break;
		}
	for (int i = 0; i < NVAL; i++)
		in[i] = value(g_rank, k, i);
	CALL(MPI_Allreduce(in, buf, NVAL, MPI_INT64_T, MPI_SUM, merged));
	for (int i = 0; i < NVAL; i++) {
		int64_t want = 0;
		for (int r = 0; r < g_size; r++)
			want += value(r, k, i);
		if (buf[i] != want) {
			fail("%s round %d: merged Allreduce: element %d = %lld, want %lld", label, k, i, (long long)buf[i],
			     (long long)want);
			break;
		}
	}
	CALL(MPI_Barrier(merged));
	free(buf);
	free(in);
}

/* one builds the intercommunicator of the split colorof() and checks it,
 * then its merges with either group high. */
static void one(int (*colorof)(int), const char *label)
{
	int color = colorof(g_rank), lrank, lsize, rsize, leader[2] = {-1, -1}, n[2] = {0, 0}, flag = 0;
	int *world[2], *order = xmalloc(sizeof(int) * (size_t)g_size);
	MPI_Comm local, inter, merged;
	world[0] = xmalloc(sizeof(int) * (size_t)g_size);
	world[1] = xmalloc(sizeof(int) * (size_t)g_size);
	/* Group members in world order: local rank i is world[color][i]
	 * (MPI_Comm_split with key = world rank). */
	for (int r = 0; r < g_size; r++) {
		int c = colorof(r);
		if (leader[c] < 0)
			leader[c] = r;
		world[c][n[c]++] = r;
	}
	for (int k = 0; k < ROUNDS; k++) {
		CALL(MPI_Comm_split(MPI_COMM_WORLD, color, g_rank, &local));
		CALL(MPI_Comm_rank(local, &lrank));
		CALL(MPI_Comm_size(local, &lsize));
		CALL(MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, leader[1 - color], 100 + k, &inter));
		CALL(MPI_Comm_test_inter(inter, &flag));
		CALL(MPI_Comm_remote_size(inter, &rsize));
		if (!flag)
			fail("%s round %d: MPI_Comm_test_inter says not an intercommunicator", label, k);
		if (lsize != n[color] || rsize != n[1 - color])
			fail("%s round %d: local size %d, remote size %d, want %d and %d", label, k, lsize, rsize, n[color],
			     n[1 - color]);
		peer_p2p(inter, lrank, lsize, rsize, world[1 - color], k, label);
		inter_colls(inter, color, lrank, world[1 - color], rsize, k, label);
		for (int high = 0; high < 2; high++) {
			/* Group `high` goes last in the merge when it says high. */
			int lo = high ? 0 : 1, m = 0;
			for (int i = 0; i < n[lo]; i++)
				order[m++] = world[lo][i];
			for (int i = 0; i < n[1 - lo]; i++)
				order[m++] = world[1 - lo][i];
			CALL(MPI_Intercomm_merge(inter, color == high, &merged));
			merged_colls(merged, high, order, k, label);
			CALL(MPI_Comm_free(&merged));
		}
		CALL(MPI_Comm_free(&inter));
		CALL(MPI_Comm_free(&local));
	}
	free(world[0]);
	free(world[1]);
	free(order);
}

static int by_parity(int r)
{
	return r % 2;
}

static int by_half(int r)
{
	return r < g_size / 2 ? 0 : 1;
}

int main(int argc, char **argv)
{
	start(&argc, &argv, "intercomm");
	if (g_size < 2) {
		fail("needs at least 2 ranks, has %d", g_size);
		return finish();
	}
	one(by_parity, "parity split");
	one(by_half, "half split");
	return finish();
}
