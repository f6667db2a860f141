/*
 * unexpected — thousands of unexpected messages (MPI-3.1 §3.5 matching;
 * the provider's unexpected queue, FI_TAGGED in fi_tagged(3)).
 *
 * Every rank but 0 sends rank 0 NUNEXP messages (tags 0..NUNEXP-1; every
 * 97th one 8 KiB, every 1000th one 256 KiB, the others 0-64 octets) with
 * MPI_Isend before rank 0 has posted a single receive: rank 0 waits in a
 * barrier the senders enter only after posting all their sends, then sleeps
 * no time at all and receives them in REVERSE tag order, naming source and
 * tag, so every match searches the unexpected queue. Then a second batch
 * is received with MPI_ANY_TAG in arrival order, which must be send order.
 */
#include "check.h"

#define NUNEXP 3000

static size_t usize(int k)
{
	if (k % 1000 == 999)
		return 262144;
	if (k % 97 == 0)
		return 8192;
	return (size_t)(k % 65);
}

int main(int argc, char **argv)
{
	start(&argc, &argv, "unexpected");
	uint8_t **bufs = xmalloc(sizeof(*bufs) * NUNEXP);
	MPI_Request *req = xmalloc(sizeof(*req) * NUNEXP);
	uint8_t *rbuf = xmalloc(262144);
	MPI_Status st;
	char what[96];
	for (int batch = 0; batch < 2; batch++) {
		if (g_rank != 0) {
			for (int k = 0; k < NUNEXP; k++) {
				bufs[k] = xmalloc(usize(k));
				fill(bufs[k], usize(k), g_rank, k, batch);
				CALL(MPI_Isend(bufs[k], (int)usize(k), MPI_BYTE, 0, k, MPI_COMM_WORLD, &req[k]));
			}
			CALL(MPI_Barrier(MPI_COMM_WORLD));
			CALL(MPI_Waitall(NUNEXP, req, MPI_STATUSES_IGNORE));
			for (int k = 0; k < NUNEXP; k++)
				free(bufs[k]);
		} else {
			CALL(MPI_Barrier(MPI_COMM_WORLD));
			for (int src = 1; src < g_size; src++) {
				for (int i = 0; i < NUNEXP; i++) {
					int k = batch == 0 ? NUNEXP - 1 - i : i;
					int tag = batch == 0 ? k : MPI_ANY_TAG;
					memset(rbuf, 0xee, usize(k));
					CALL(MPI_Recv(rbuf, 262144, MPI_BYTE, src, tag, MPI_COMM_WORLD, &st));
					snprintf(what, sizeof what, "unexpected %s message %d from %d",
						 batch == 0 ? "reverse-order" : "ANY_TAG", k, src);
					check_status(&st, src, k, usize(k), what);
					expect(rbuf, usize(k), src, k, batch, what);
				}
			}
		}
		CALL(MPI_Barrier(MPI_COMM_WORLD));
	}
	free(bufs);
	free(req);
	free(rbuf);
	return finish();
}
