/*
 * bigmsg — the sizes where a transport switches protocol, up to 4 MiB
 * (MPI-3.1 §3.4 blocking and synchronous send, §3.7 non-blocking), for
 * transports layered on connections (iwarpd;ofi_rxm: eager up to 16 KiB,
 * segmentation (SAR) up to 128 KiB, rendezvous with RMA Read above).
 *
 * Ranks pair up (r with r^1). Per size: MPI_Send/MPI_Recv both ways,
 * MPI_Ssend (the other rank first), and an Isend/Irecv exchange. Every
 * received octet and status is checked.
 */
#include "check.h"

static const size_t sizes[] = {0, 1, 4096, 16384, 16385, 65536, 131072, 131073, 262144, 1048576, 4194304};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

int main(int argc, char **argv)
{
	start(&argc, &argv, "bigmsg");
	size_t max = sizes[NSIZES - 1];
	uint8_t *sbuf = xmalloc(max), *rbuf = xmalloc(max);
	int peer = g_rank ^ 1;
	char what[96];
	MPI_Status st;
	if (peer >= g_size)
		peer = -1;
	for (size_t i = 0; i < NSIZES && peer >= 0; i++) {
		size_t n = sizes[i];
		int seq = (int)i, tag = (int)i * 4;

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

		fill(sbuf, n, g_rank, tag + 1, seq);
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
		expect(rbuf, n, peer, tag + 1, seq, what);

		MPI_Request r[2];
		MPI_Status s2[2];
		fill(sbuf, n, g_rank, tag + 2, seq);
		memset(rbuf, 0xee, n);
		snprintf(what, sizeof what, "Isend/Irecv %zu B", n);
		CALL(MPI_Irecv(rbuf, (int)n, MPI_BYTE, peer, tag + 2, MPI_COMM_WORLD, &r[0]));
		CALL(MPI_Isend(sbuf, (int)n, MPI_BYTE, peer, tag + 2, MPI_COMM_WORLD, &r[1]));
		CALL(MPI_Waitall(2, r, s2));
		check_status(&s2[0], peer, tag + 2, n, what);
		expect(rbuf, n, peer, tag + 2, seq, what);
	}
	free(sbuf);
	free(rbuf);
	return finish();
}
