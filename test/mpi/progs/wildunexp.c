/*
 * wildunexp — the smallest case of a wildcard-source receive matching an
 * unexpected message (MPI-3.1 §3.5 matching; fi_tagged(3) FI_ADDR_UNSPEC
 * receives against the unexpected queue), then directed receives from the
 * same sender.
 *
 * For each size (eager and rendezvous) and each way of receiving the first
 * message (ANY_SOURCE+ANY_TAG, ANY_SOURCE, ANY_TAG, directed), every rank
 * but 0 sends rank 0 two messages (tags 5 and 6) before rank 0 posts a
 * receive (a barrier orders it); rank 0 receives the first that way and the
 * second from its sender by name, then everyone meets in a barrier (whose
 * messages are directed receives too). Before all that, as the job's very
 * first communication: every rank but 0 sends 8 octets (tag 50) and 0 octets
 * (tag 51) with MPI_Send; rank 0 receives the first with ANY_SOURCE (tag
 * 50) and the second from its sender by name.
 */
#include "check.h"

static const size_t sizes[] = {0, 8, 4096, 200000};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

int main(int argc, char **argv)
{
	start(&argc, &argv, "wildunexp");
	uint8_t *buf = xmalloc(200000);
	MPI_Status st;
	char what[128];
	static const char *modes[] = {"ANY_SOURCE+ANY_TAG", "ANY_SOURCE", "ANY_TAG", "directed"};

	/* First contact. */
	if (g_rank != 0) {
		fill(buf, 8, g_rank, 50, 1000);
		CALL(MPI_Send(buf, 8, MPI_BYTE, 0, 50, MPI_COMM_WORLD));
		CALL(MPI_Send(buf, 0, MPI_BYTE, 0, 51, MPI_COMM_WORLD));
	} else {
		for (int k = 1; k < g_size; k++) {
			CALL(MPI_Recv(buf, 200000, MPI_BYTE, MPI_ANY_SOURCE, 50, MPI_COMM_WORLD, &st));
			int from = st.MPI_SOURCE;
			check_status(&st, MPI_ANY_SOURCE, 50, 8, "first contact: 8 B by ANY_SOURCE");
			if (from < 1 || from >= g_size) {
				fail("first contact: source %d", from);
				continue;
			}
			expect(buf, 8, from, 50, 1000, "first contact: 8 B by ANY_SOURCE");
			CALL(MPI_Recv(buf, 200000, MPI_BYTE, from, 51, MPI_COMM_WORLD, &st));
			check_status(&st, from, 51, 0, "first contact: 0 B from the same sender by name");
		}
	}
	for (size_t i = 0; i < NSIZES; i++) {
		for (int mode = 0; mode < 4; mode++) {
			size_t n = sizes[i];
			int seq = (int)i * 4 + mode;
			MPI_Request r[2];
			if (g_rank != 0) {
				uint8_t *a = xmalloc(n), *b = xmalloc(n);
				fill(a, n, g_rank, 5, seq);
				fill(b, n, g_rank, 6, seq);
				CALL(MPI_Isend(a, (int)n, MPI_BYTE, 0, 5, MPI_COMM_WORLD, &r[0]));
				CALL(MPI_Isend(b, (int)n, MPI_BYTE, 0, 6, MPI_COMM_WORLD, &r[1]));
				CALL(MPI_Barrier(MPI_COMM_WORLD));
				CALL(MPI_Waitall(2, r, MPI_STATUSES_IGNORE));
				free(a);
				free(b);
			} else {
				CALL(MPI_Barrier(MPI_COMM_WORLD));
				for (int src = 1; src < g_size; src++) {
					int s = mode <= 1 ? MPI_ANY_SOURCE : src, tag = (mode == 0 || mode == 2) ? MPI_ANY_TAG : 5;
					memset(buf, 0xee, n);
					CALL(MPI_Recv(buf, 200000, MPI_BYTE, s, tag, MPI_COMM_WORLD, &st));
					int from = st.MPI_SOURCE;
					snprintf(what, sizeof what, "%zu B, first message by %s", n, modes[mode]);
					if (from < 1 || from >= g_size) {
						fail("%s: source %d", what, from);
						continue;
					}
					check_status(&st, from, 5, n, what);
					expect(buf, n, from, 5, seq, what);
					memset(buf, 0xee, n);
					snprintf(what, sizeof what, "%zu B, second message from %d by name after a %s receive", n,
						 from, modes[mode]);
					CALL(MPI_Recv(buf, 200000, MPI_BYTE, from, 6, MPI_COMM_WORLD, &st));
					check_status(&st, from, 6, n, what);
					expect(buf, n, from, 6, seq, what);
				}
			}
			CALL(MPI_Barrier(MPI_COMM_WORLD));
		}
	}
	free(buf);
	return finish();
}
