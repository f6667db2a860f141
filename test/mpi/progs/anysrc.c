/*
 * anysrc — MPI_ANY_SOURCE / MPI_ANY_TAG receives and probes (MPI-3.1 §3.2.4
 * wildcards, §3.8 MPI_Probe/MPI_Iprobe, §3.8.2 MPI_Mprobe/MPI_Mrecv).
 *
 * Phase 1: every rank but 0 sends NMSG messages of varying size and tag to
 * rank 0, which receives them with MPI_ANY_SOURCE and MPI_ANY_TAG into a
 * buffer of the largest size and identifies each by its status; messages
 * of one sender must arrive in the order sent (non-overtaking, §3.5).
 * Phase 2: the same with MPI_Probe(ANY, ANY) first, a receive of exactly
 * the probed source, tag and count. Phase 3: MPI_Iprobe in a bounded loop,
 * then MPI_Recv. Phase 4: MPI_Improbe + MPI_Mrecv (matched probe: no other
 * receive may take the probed message). Phase 5: a wildcard receive
 * posted before the send (expected message) with ANY_TAG from a given
 * source. Every payload and status is checked.
 */
#include "check.h"

#define NMSG 60
#define MAXSZ 200000

static size_t msg_size(int src, int k)
{
	static const size_t s[] = {0, 1, 8, 100, 1024, 4000, 9000, 65536, 70000, MAXSZ};
	return s[(src * 3 + k) % 10];
}

static int msg_tag(int phase, int k) { return phase * 1000 + (k * 37) % 500; }

static void senders(int phase, uint8_t *buf)
{
	if (g_rank == 0)
		return;
	for (int k = 0; k < NMSG; k++) {
		size_t n = msg_size(g_rank, k);
		fill(buf, n, g_rank, msg_tag(phase, k), k);
		CALL(MPI_Send(buf, (int)n, MPI_BYTE, 0, msg_tag(phase, k), MPI_COMM_WORLD));
	}
}

/* got checks one message rank 0 received (any mode) against the sender's
 * next expected sequence number. */
static void got(int phase, const MPI_Status *st, const uint8_t *buf, int *next, const char *mode)
{
	char what[128];
	int src = st->MPI_SOURCE, count = -1;
	MPI_Get_count(st, MPI_BYTE, &count);
	if (src <= 0 || src >= g_size) {
		fail("%s phase %d: status source %d out of range", mode, phase, src);
		return;
	}
	int k = next[src]++;
	snprintf(what, sizeof what, "%s phase %d: message %d from %d", mode, phase, k, src);
	if (k >= NMSG) {
		fail("%s: more than %d messages", what, NMSG);
		return;
	}
	if (st->MPI_TAG != msg_tag(phase, k))
		fail("%s: tag %d, want %d (out of order or wrong tag)", what, st->MPI_TAG, msg_tag(phase, k));
	if (count < 0 || (size_t)count != msg_size(src, k)) {
		fail("%s: count %d, want %zu", what, count, msg_size(src, k));
		return;
	}
	expect(buf, (size_t)count, src, msg_tag(phase, k), k, what);
}

int main(int argc, char **argv)
{
	start(&argc, &argv, "anysrc");
	uint8_t *buf = xmalloc(MAXSZ);
	int *next = xmalloc(sizeof(int) * (size_t)g_size);
	int total = (g_size - 1) * NMSG;
	MPI_Status st;

	for (int phase = 1; phase <= 4; phase++) {
		memset(next, 0, sizeof(int) * (size_t)g_size);
		if (g_rank != 0) {
			senders(phase, buf);
		} else {
			for (int m = 0; m < total; m++) {
				memset(buf, 0xee, MAXSZ);
				if (phase == 1) {
					CALL(MPI_Recv(buf, MAXSZ, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
					got(phase, &st, buf, next, "Recv(ANY_SOURCE, ANY_TAG)");
				} else if (phase == 2) {
					MPI_Status ps;
					int count = -1;
					CALL(MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &ps));
					MPI_Get_count(&ps, MPI_BYTE, &count);
					if (count < 0 || count > MAXSZ) {
						fail("Probe: count %d out of range", count);
						count = MAXSZ;
					}
					CALL(MPI_Recv(buf, count, MPI_BYTE, ps.MPI_SOURCE, ps.MPI_TAG, MPI_COMM_WORLD, &st));
					if (st.MPI_SOURCE != ps.MPI_SOURCE || st.MPI_TAG != ps.MPI_TAG)
						fail("Probe said source %d tag %d, Recv got source %d tag %d", ps.MPI_SOURCE,
						     ps.MPI_TAG, st.MPI_SOURCE, st.MPI_TAG);
					got(phase, &st, buf, next, "Probe+Recv");
				} else if (phase == 3) {
					int flag = 0;
					MPI_Status ps;
					/* Bounded: a message is on its way; 10^8 polls is minutes. */
					for (long i = 0; i < 100000000L && !flag; i++)
						CALL(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &ps));
					if (!flag) {
						fail("Iprobe: no message after 10^8 polls (%d of %d received)", m, total);
						break;
					}
					CALL(MPI_Recv(buf, MAXSZ, MPI_BYTE, ps.MPI_SOURCE, ps.MPI_TAG, MPI_COMM_WORLD, &st));
					got(phase, &st, buf, next, "Iprobe+Recv");
				} else {
					int flag = 0;
					MPI_Message msg;
					MPI_Status ps;
					for (long i = 0; i < 100000000L && !flag; i++)
						CALL(MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &msg, &ps));
					if (!flag) {
						fail("Improbe: no message after 10^8 polls (%d of %d received)", m, total);
						break;
					}
					CALL(MPI_Mrecv(buf, MAXSZ, MPI_BYTE, &msg, &st));
					if (st.MPI_SOURCE != ps.MPI_SOURCE || st.MPI_TAG != ps.MPI_TAG)
						fail("Improbe said source %d tag %d, Mrecv got source %d tag %d", ps.MPI_SOURCE,
						     ps.MPI_TAG, st.MPI_SOURCE, st.MPI_TAG);
					got(phase, &st, buf, next, "Improbe+Mrecv");
				}
			}
			for (int s = 1; s < g_size; s++)
				if (next[s] != NMSG)
					fail("phase %d: %d messages from rank %d, want %d", phase, next[s], s, NMSG);
		}
		CALL(MPI_Barrier(MPI_COMM_WORLD));
	}

	/* Phase 5: wildcard receives posted first (expected messages), ANY_TAG
	 * from each peer in a ring. */
	{
		int to = (g_rank + 1) % g_size, from = (g_rank + g_size - 1) % g_size;
		uint8_t *sb = xmalloc(MAXSZ);
		for (int k = 0; k < 20; k++) {
			MPI_Request r;
			size_t n = msg_size(g_rank, k);
			memset(buf, 0xee, MAXSZ);
			CALL(MPI_Irecv(buf, MAXSZ, MPI_BYTE, from, MPI_ANY_TAG, MPI_COMM_WORLD, &r));
			CALL(MPI_Barrier(MPI_COMM_WORLD));
			fill(sb, n, g_rank, 5000 + k, k);
			CALL(MPI_Send(sb, (int)n, MPI_BYTE, to, 5000 + k, MPI_COMM_WORLD));
			CALL(MPI_Wait(&r, &st));
			check_status(&st, from, 5000 + k, msg_size(from, k), "posted Irecv(ANY_TAG)");
			expect(buf, msg_size(from, k), from, 5000 + k, k, "posted Irecv(ANY_TAG)");
		}
		free(sb);
	}
	free(buf);
	free(next);
	return finish();
}
