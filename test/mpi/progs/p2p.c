/*
 * p2p — blocking and non-blocking point-to-point, 0 B to 16 MiB
 * (MPI-3.1 §3.4 blocking send/receive, §3.7 non-blocking communication).
 *
 * Ranks pair up (r with r^1; an odd last rank pairs with nobody). For each
 * size: MPI_Send/MPI_Recv in both directions, MPI_Ssend, MPI_Sendrecv,
 * MPI_Isend/MPI_Irecv with MPI_Waitall, and several messages in flight
 * between the pair that must match in order (non-overtaking, §3.5). Then
 * every rank exchanges with every other rank at once (Irecv from all,
 * Isend to all, Waitall) up to 1 MiB. Every received buffer and status is
 * checked.
 */
#include "check.h"

static const size_t sizes[] = {0, 1, 7, 8, 63, 64, 1000, 1024, 4095, 4096, 8193, 16384, 65535, 65536, 65537,
			       262144, 1048576, 4194304, 16777216};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))
#define INFLIGHT 8

static void pair_blocking(int peer, size_t n, int seq, uint8_t *sbuf, uint8_t *rbuf)
{
	MPI_Status st;
	char what[96];
	int tag = (int)(seq % 1000);
	fill(sbuf, n, g_rank, tag, seq);
	memset(rbuf, 0xee, n);
	snprintf(what, sizeof what, "Send/Recv %zu B", n);
	if (g_rank < peer) {
		CALL(MPI_Send(sbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD));
		CALL(MPI_Recv(rbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st));
	} else {
		CALL(MPI_Recv(rbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st));
		CALL(MPI_Send(sbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD));
	}
	check_status(&st, peer, tag, n, what);
	expect(rbuf, n, peer, tag, seq, what);

	/* Synchronous send, the other side first. */
	memset(rbuf, 0xee, n);
	snprintf(what, sizeof what, "Ssend/Recv %zu B", n);
	if (g_rank > peer) {
		CALL(MPI_Ssend(sbuf, (int)n, MPI_BYTE, peer, tag + 1, MPI_COMM_WORLD));
		CALL(MPI_Recv(rbuf, (int)n, MPI_BYTE, peer, tag + 1, MPI_COMM_WORLD, &st));
	} else {
		CALL(MPI_Recv(rbuf, (int)n, MPI_BYTE, peer, tag + 1, MPI_COMM_WORLD, &st));
		CALL(MPI_Ssend(sbuf, (int)n, MPI_BYTE, peer, tag + 1, MPI_COMM_WORLD));
	}
	check_status(&st, peer, tag + 1, n, what);
	expect(rbuf, n, peer, tag, seq, what);

	memset(rbuf, 0xee, n);
	snprintf(what, sizeof what, "Sendrecv %zu B", n);
	CALL(MPI_Sendrecv(sbuf, (int)n, MPI_BYTE, peer, tag + 2, rbuf, (int)n, MPI_BYTE, peer, tag + 2, MPI_COMM_WORLD, &st));
	check_status(&st, peer, tag + 2, n, what);
	expect(rbuf, n, peer, tag, seq, what);
}

/* pair_nonblocking: INFLIGHT messages each way, same tag, matched in order. */
static void pair_nonblocking(int peer, size_t n, int seq, uint8_t **sb, uint8_t **rb)
{
	MPI_Request req[2 * INFLIGHT];
	MPI_Status st[2 * INFLIGHT];
	char what[96];
	int tag = 7;
	for (int k = 0; k < INFLIGHT; k++) {
		memset(rb[k], 0xee, n);
		CALL(MPI_Irecv(rb[k], (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &req[k]));
	}
	for (int k = 0; k < INFLIGHT; k++) {
		fill(sb[k], n, g_rank, tag, seq + k);
		CALL(MPI_Isend(sb[k], (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &req[INFLIGHT + k]));
	}
	CALL(MPI_Waitall(2 * INFLIGHT, req, st));
	for (int k = 0; k < INFLIGHT; k++) {
		snprintf(what, sizeof what, "Isend/Irecv %zu B, message %d of %d in order", n, k, INFLIGHT);
		check_status(&st[k], peer, tag, n, what);
		expect(rb[k], n, peer, tag, seq + k, what);
	}
}

/* all_pairs: every rank sends to and receives from every other at once. */
static void all_pairs(size_t n, int seq)
{
	uint8_t **sb = xmalloc(sizeof(*sb) * (size_t)g_size), **rb = xmalloc(sizeof(*rb) * (size_t)g_size);
	MPI_Request *req = xmalloc(sizeof(*req) * 2 * (size_t)g_size);
	MPI_Status *st = xmalloc(sizeof(*st) * 2 * (size_t)g_size);
	int nr = 0;
	for (int p = 0; p < g_size; p++) {
		sb[p] = xmalloc(n);
		rb[p] = xmalloc(n);
		if (p == g_rank)
			continue;
		memset(rb[p], 0xee, n);
		CALL(MPI_Irecv(rb[p], (int)n, MPI_BYTE, p, 100 + p, MPI_COMM_WORLD, &req[nr++]));
	}
	for (int p = 0; p < g_size; p++) {
		if (p == g_rank)
			continue;
		fill(sb[p], n, g_rank, 100 + g_rank, seq + p);
		CALL(MPI_Isend(sb[p], (int)n, MPI_BYTE, p, 100 + g_rank, MPI_COMM_WORLD, &req[nr++]));
	}
	CALL(MPI_Waitall(nr, req, st));
	for (int p = 0, k = 0; p < g_size; p++) {
		char what[96];
		if (p == g_rank)
			continue;
		snprintf(what, sizeof what, "all-pairs Irecv %zu B from %d", n, p);
		check_status(&st[k++], p, 100 + p, n, what);
		expect(rb[p], n, p, 100 + p, seq + g_rank, what);
	}
	for (int p = 0; p < g_size; p++) {
		free(sb[p]);
		free(rb[p]);
	}
	free(sb);
	free(rb);
	free(req);
	free(st);
}

int main(int argc, char **argv)
{
	start(&argc, &argv, "p2p");
	size_t max = sizes[NSIZES - 1];
	uint8_t *sbuf = xmalloc(max), *rbuf = xmalloc(max);
	uint8_t *sb[INFLIGHT], *rb[INFLIGHT];
	size_t nbmax = 1048576;
	for (int k = 0; k < INFLIGHT; k++) {
		sb[k] = xmalloc(nbmax);
		rb[k] = xmalloc(nbmax);
	}
	int peer = g_rank ^ 1;
	if (peer >= g_size)
		peer = -1;
	for (size_t i = 0; i < NSIZES; i++) {
		size_t n = sizes[i];
		if (peer >= 0) {
			pair_blocking(peer, n, (int)i * 3, sbuf, rbuf);
			if (n <= nbmax) {
				pair_nonblocking(peer, n, (int)i * 11, sb, rb);
			} else {
				/* One big message each way, non-blocking. */
				MPI_Request r[2];
				MPI_Status st[2];
				fill(sbuf, n, g_rank, 9, (int)i);
				memset(rbuf, 0xee, n);
				CALL(MPI_Irecv(rbuf, (int)n, MPI_BYTE, peer, 9, MPI_COMM_WORLD, &r[0]));
				CALL(MPI_Isend(sbuf, (int)n, MPI_BYTE, peer, 9, MPI_COMM_WORLD, &r[1]));
				CALL(MPI_Waitall(2, r, st));
				check_status(&st[0], peer, 9, n, "Isend/Irecv large");
				expect(rbuf, n, peer, 9, (int)i, "Isend/Irecv large");
			}
		}
		if (n <= nbmax)
			all_pairs(n, (int)i * 5);
		CALL(MPI_Barrier(MPI_COMM_WORLD));
	}
	for (int k = 0; k < INFLIGHT; k++) {
		free(sb[k]);
		free(rb[k]);
	}
	free(sbuf);
	free(rbuf);
	return finish();
}
