/*
 * trunc — a message longer than the receive buffer is an error of class
 * MPI_ERR_TRUNCATE (MPI-3.1 §3.2.5 "truncation"), returned, not fatal, under
 * MPI_ERRORS_RETURN (§8.3); the job goes on communicating afterwards.
 *
 * Rank 1 sends rank 0, for each size (eager and large): a message longer
 * than rank 0's buffer, then an intact message of the same tag. Rank 0
 * receives the first with MPI_Recv (must return MPI_ERR_TRUNCATE, buffer
 * holding at most its size), and the second normally. Then the same with
 * MPI_Irecv + MPI_Wait (status.MPI_ERROR is checked too). Other ranks only
 * take part in the final barrier.
 */
#include "check.h"

struct tcase {
	size_t sent, room;
};
static const struct tcase cases[] = {{100, 10}, {1, 0}, {4096, 4095}, {65536, 1024}, {1048576, 524288}, {4194304, 8}};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

static void check_trunc(int rc, const MPI_Status *st, const uint8_t *buf, size_t room, const char *what)
{
	int cls = -1;
	if (rc == MPI_SUCCESS) {
		fail("%s: returned MPI_SUCCESS, want an error of class MPI_ERR_TRUNCATE", what);
		return;
	}
	MPI_Error_class(rc, &cls);
	if (cls != MPI_ERR_TRUNCATE && !(cls == MPI_ERR_IN_STATUS && st->MPI_ERROR != MPI_SUCCESS)) {
		char s[MPI_MAX_ERROR_STRING];
		int l = 0;
		MPI_Error_string(rc, s, &l);
		fail("%s: error class %d (%s), want MPI_ERR_TRUNCATE (%d)", what, cls, s, MPI_ERR_TRUNCATE);
	}
	/* Nothing may be written past the buffer: the guard octets after it. */
	for (size_t i = room; i < room + 64; i++)
		if (buf[i] != 0xee) {
			fail("%s: octet %zu past the %zu-octet buffer overwritten (0x%02x)", what, i, room, buf[i]);
			break;
		}
}

int main(int argc, char **argv)
{
	start(&argc, &argv, "trunc");
	CALL(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
	size_t max = 4194304 + 64;
	uint8_t *buf = xmalloc(max);
	MPI_Status st;
	char what[128];
	for (int mode = 0; mode < 2; mode++) {
		for (size_t c = 0; c < NCASES; c++) {
			size_t sent = cases[c].sent, room = cases[c].room;
			int tag = (int)(mode * 100 + c);
			if (g_rank == 1) {
				fill(buf, sent, 1, tag, 1);
				CALL(MPI_Send(buf, (int)sent, MPI_BYTE, 0, tag, MPI_COMM_WORLD));
				fill(buf, room, 1, tag, 2);
				CALL(MPI_Send(buf, (int)room, MPI_BYTE, 0, tag, MPI_COMM_WORLD));
			} else if (g_rank == 0) {
				memset(buf, 0xee, max);
				snprintf(what, sizeof what, "%s of %zu octets into %zu", mode ? "Irecv+Wait" : "Recv", sent, room);
				st.MPI_ERROR = MPI_SUCCESS;
				if (mode == 0) {
					int rc = MPI_Recv(buf, (int)room, MPI_BYTE, 1, tag, MPI_COMM_WORLD, &st);
					check_trunc(rc, &st, buf, room, what);
				} else {
					MPI_Request r;
					CALL(MPI_Irecv(buf, (int)room, MPI_BYTE, 1, tag, MPI_COMM_WORLD, &r));
					int rc = MPI_Wait(&r, &st);
					check_trunc(rc, &st, buf, room, what);
					int cls = -1;
					if (rc != MPI_SUCCESS && st.MPI_ERROR != MPI_SUCCESS) {
						MPI_Error_class(st.MPI_ERROR, &cls);
						if (cls != MPI_ERR_TRUNCATE)
							fail("%s: status.MPI_ERROR class %d, want MPI_ERR_TRUNCATE", what, cls);
					}
				}
				/* The job goes on: the next message arrives intact. */
				memset(buf, 0xee, max);
				snprintf(what, sizeof what, "message after the truncated %zu-octet one", sent);
				CALL(MPI_Recv(buf, (int)room, MPI_BYTE, 1, tag, MPI_COMM_WORLD, &st));
				check_status(&st, 1, tag, room, what);
				expect(buf, room, 1, tag, 2, what);
			}
		}
	}
	CALL(MPI_Barrier(MPI_COMM_WORLD));
	free(buf);
	return finish();
}
