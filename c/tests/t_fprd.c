/*
 * t_fprd.c — a rank serving its RD QP's socket itself (c/core/fprd.h;
 * issue 20), for test/fastpath (own_rd_test.go) and test/hostile
 * (hostile_fprd_test.go), which run it against real daemons:
 *
 *   t_fprd SOCK pong N PAUSE_EVERY   answer N numbered 8-octet pings
 *   t_fprd SOCK daemon N             the same, never asking for the socket:
 *                                    every ping and pong through the daemon
 *   t_fprd SOCK garbage SEED         own the socket with a peer's slot, then
 *                                    write garbage over the RD halves
 *   t_fprd SOCK take N               answer N pings, then take ping N itself
 *                                    (its ACK deferred), answer nothing and
 *                                    destroy the QP at once: "took N rank"
 *                                    (or "took N cq": the daemon had it)
 *
 * It prints "ready ADDR QKEY" once its QP is in RTS with its page handed
 * over, then reads "peer ADDR QKEY" from stdin (the ofverbs peer). In pong
 * mode, for i = 0..N-1 it waits for ping i (an 8-octet Send carrying i)
 * from its CQ (what the daemon delivered) or its socket (iwvi_fp_rd_poll,
 * while it owns it) and answers pong i: itself (iwvi_fp_rd_send) when it
 * owns the socket and has the peer's slot, else through the daemon
 * (iwv_post_send). It asks for the socket whenever it does not own it.
 * Every PAUSE_EVERY pings it stops polling until the daemon's take-over
 * count in the page grows (bounded): the daemon takes the socket over,
 * imports the page's RD halves, and serves the next ping. A ping out of
 * order or twice is counted bad. It prints
 *   "result got=G bad=B rank_rx=R cq_rx=C rank_tx=S daemon_tx=D takeovers=T
 *    handbacks=H released=L acks_in=A acks_out=O"
 * and "figures rtt_rank_ns=MEDIAN rtt_daemon_ns=MEDIAN" (information: the
 * time from a pong sent to the next ping received, by the path the pong
 * took), then waits for a line on stdin before it destroys its QP. Every
 * wait is bounded (IWARPD_TEST_TIMEOUT_SCALE).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "testlib.h"

#include <arpa/inet.h>
#include <sched.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "../core/fastpath.h"
#include "../core/fprd.h"

#define RECVS 64
#define SLOT 64
#define MAXN 200000

struct rank {
	struct iwv_session *s;
	struct iwv_pd *pd;
	struct iwv_cq *cq;
	struct iwv_qp *qp;
	struct iwv_buffer *buf;
	struct iwv_mr *mr;
	char *mem;
	struct iwvi_fp_rd fp;
	struct iwv_av peer;
	struct sockaddr_in peer_sa;
	/* the run */
	long n, next, bad, rank_rx, cq_rx, rank_tx, daemon_tx, send_wrs;
	int nofp; /* daemon mode */
	long long sent_at;
	int sent_by_rank;
	long *rtt_rank, *rtt_daemon;
	long nrtt_rank, nrtt_daemon;
};

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void post_recv(struct rank *r, uint64_t i)
{
	struct iwv_sge g = {.addr = (uintptr_t)(r->mem + i * SLOT), .length = SLOT, .lkey = iwv_mr_lkey(r->mr)};
	struct iwv_recv_wr w = {.wr_id = i, .num_sge = 1, .sg_list = &g};
	CHECK(iwv_post_recv(r->qp, &w, 1) == 1);
}

static void setup(struct rank *r, const char *sock)
{
	memset(r, 0, sizeof *r);
	r->s = open_session(sock, "t_fprd");
	OK(r->s, iwv_alloc_pd(r->s, &r->pd));
	OK(r->s, iwv_create_cq(r->s, 1024, NULL, &r->cq));
	OK(r->s, iwv_alloc_buffer(r->s, (RECVS + 16) * SLOT, &r->buf));
	r->mem = iwv_buffer_addr(r->buf);
	OK(r->s, iwv_reg_mr(r->pd, r->mem, (RECVS + 16) * SLOT, IWV_ACCESS_LOCAL_WRITE, &r->mr));
	struct iwv_qp_init_attr qa = {.qp_type = IWV_QPT_RD, .send_cq = r->cq, .recv_cq = r->cq,
				      .cap = {.max_send_wr = 16, .max_recv_wr = RECVS, .max_send_sge = 1, .max_recv_sge = 1}};
	OK(r->s, iwv_create_qp(r->pd, &qa, &r->qp));
	OK(r->s, iwv_modify_qp(r->qp, IWV_QPS_INIT));
	OK(r->s, iwv_modify_qp(r->qp, IWV_QPS_RTR));
	OK(r->s, iwv_modify_qp(r->qp, IWV_QPS_RTS));
	for (uint64_t i = 0; i < RECVS; i++)
		post_recv(r, i);
	OK(r->s, iwvi_fp_rd_attach(r->qp, &r->fp));
	printf("ready %s %u\n", iwv_qp_addr(r->qp), iwv_qp_qkey(r->qp));
	fflush(stdout);
	char line[128], addr[96];
	unsigned qkey;
	CHECK(fgets(line, sizeof line, stdin) != NULL);
	CHECK(sscanf(line, "peer %95s %u", addr, &qkey) == 2);
	OK(r->s, iwv_av_from_string(r->s, &r->peer, addr));
	r->peer.qkey = qkey;
	struct sockaddr_storage ss;
	OK(r->s, iwv_av_to_sockaddr(&r->peer, &ss));
	CHECK(ss.ss_family == AF_INET);
	memcpy(&r->peer_sa, &ss, sizeof r->peer_sa);
}

static void teardown(struct rank *r)
{
	OK(r->s, iwv_destroy_qp(r->qp));
	iwvi_fp_rd_detach(&r->fp);
	OK(r->s, iwv_dereg_mr(r->mr));
	OK(r->s, iwv_free_buffer(r->buf));
	OK(r->s, iwv_destroy_cq(r->cq));
	OK(r->s, iwv_dealloc_pd(r->pd));
	iwv_close(r->s);
}

static void wait_line(void)
{
	char line[64];
	if (!fgets(line, sizeof line, stdin))
		return;
}

/* pong answers ping i: by the rank when it can, else through the daemon. */
static void pong(struct rank *r, uint64_t i)
{
	int slot = r->nofp ? -1 : iwvi_fp_rd_slot(&r->fp, &r->peer_sa);
	r->sent_at = now_ns();
	if (slot >= 0 && iwvi_fp_rd_send(&r->fp, slot, &i, 8, 0) == 0) {
		r->rank_tx++;
		r->sent_by_rank = 1;
		return;
	}
	if (!r->nofp)
		iwvi_fp_rd_release(&r->fp); /* the rank sends nothing itself until the daemon gives the socket back */
	char *b = r->mem + (RECVS + (i % 16)) * SLOT;
	memcpy(b, &i, 8);
	struct iwv_sge g = {.addr = (uintptr_t)b, .length = 8, .lkey = iwv_mr_lkey(r->mr)};
	struct iwv_send_wr w = {.wr_id = 1000000 + i, .opcode = IWV_WR_SEND, .flags = IWV_SEND_SIGNALED,
				.num_sge = 1, .sg_list = &g, .av = &r->peer};
	CHECK(iwv_post_send(r->qp, &w, 1) == 1);
	r->daemon_tx++;
	r->send_wrs++;
	r->sent_by_rank = 0;
}

/* ping takes ping seq received by either path. */
static void ping(struct rank *r, uint64_t seq, int by_rank)
{
	if (seq != (uint64_t)r->next) {
		fprintf(stderr, "t_fprd: ping %llu, want %ld (%s)\n", (unsigned long long)seq, r->next, by_rank ? "rank" : "cq");
		r->bad++;
		return;
	}
	if (r->sent_at) {
		long d = (long)(now_ns() - r->sent_at);
		if (r->sent_by_rank && r->nrtt_rank < r->n)
			r->rtt_rank[r->nrtt_rank++] = d;
		else if (!r->sent_by_rank && r->nrtt_daemon < r->n)
			r->rtt_daemon[r->nrtt_daemon++] = d;
	}
	if (by_rank)
		r->rank_rx++;
	else
		r->cq_rx++;
	r->next++;
	pong(r, seq);
}

static void deliver(void *arg, int slot, const uint8_t *p, size_t len, uint32_t imm, int has_imm)
{
	struct rank *r = arg;
	(void)slot;
	(void)imm;
	if (len != 8 || has_imm) {
		r->bad++;
		return;
	}
	uint64_t seq;
	memcpy(&seq, p, 8);
	ping(r, seq, 1);
}

static int poll_cq(struct rank *r)
{
	struct iwv_wc wc[32];
	int n = iwv_poll_cq(r->cq, 32, wc);
	OK(r->s, n);
	for (int i = 0; i < n; i++) {
		if (wc[i].status != IWV_WC_SUCCESS) {
			fprintf(stderr, "t_fprd: completion status %d opcode %d wr_id %llu\n", wc[i].status, wc[i].opcode,
				(unsigned long long)wc[i].wr_id);
			exit(1);
		}
		if (wc[i].opcode != IWV_WC_RECV) {
			r->send_wrs--;
			continue;
		}
		CHECK(wc[i].byte_len == 8 && wc[i].wr_id < RECVS);
		uint64_t seq;
		memcpy(&seq, r->mem + wc[i].wr_id * SLOT, 8);
		post_recv(r, wc[i].wr_id);
		ping(r, seq, 0);
	}
	return n;
}

static void pause_for_takeover(struct rank *r)
{
	/* Only a socket the rank owns can be taken over: if the daemon has it
	 * (a release for a Send through the daemon, a take-over just before),
	 * ask for it and wait until it is back, without polling. */
	long long deadline = mono_ms() + scaled_ms(10000);
	while (!iwvi_fp_own_acquire(&r->fp.own) && mono_ms() < deadline)
		usleep(100);
	if (!iwvi_fp_own_owned(&r->fp.own)) {
		fprintf(stderr, "t_fprd: the daemon did not hand the socket back within %d ms before a pause\n", scaled_ms(10000));
		exit(1);
	}
	uint64_t before = iwvi_fp_own_takeovers(&r->fp.own);
	deadline = mono_ms() + scaled_ms(10000);
	while (iwvi_fp_own_takeovers(&r->fp.own) == before && mono_ms() < deadline)
		usleep(500);
	if (iwvi_fp_own_takeovers(&r->fp.own) == before) {
		fprintf(stderr, "t_fprd: no take-over within %d ms of a pause\n", scaled_ms(10000));
		exit(1);
	}
}

static int cmp_long(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;
	return (x > y) - (x < y);
}

static long median(long *v, long n)
{
	if (n == 0)
		return 0;
	qsort(v, (size_t)n, sizeof *v, cmp_long);
	return v[n / 2];
}

static void run_pong(struct rank *r, long n, long every)
{
	r->n = n;
	r->rtt_rank = calloc((size_t)n, sizeof(long));
	r->rtt_daemon = calloc((size_t)n, sizeof(long));
	CHECK(r->rtt_rank && r->rtt_daemon);
	long next_pause = every;
	long long deadline = mono_ms() + scaled_ms(120000);
	for (long i = 0; i < 400000000L && r->next < n && mono_ms() < deadline; i++) {
		long had = r->next + r->bad;
		poll_cq(r); /* the CQ before the socket: what the daemon read came first */
		if (r->nofp)
			;
		else if (!iwvi_fp_own_owned(&r->fp.own))
			iwvi_fp_own_want(&r->fp.own);
		else if (iwvi_fp_rd_poll(&r->fp, 16, deliver, r) < 0)
			break;
		if (r->next + r->bad == had)
			sched_yield();
		if (r->next >= next_pause && r->next < n) {
			next_pause += every;
			pause_for_takeover(r);
		}
	}
	/* The last pong's acknowledgement: keep serving until the daemon has
	 * nothing of ours outstanding (bounded), so that the peer's count is
	 * final before the test reads it. */
	long long end = mono_ms() + scaled_ms(2000);
	while ((r->send_wrs > 0) && mono_ms() < end) {
		poll_cq(r);
		if (!r->nofp)
			iwvi_fp_rd_poll(&r->fp, 16, deliver, r);
		usleep(100);
	}
	printf("result got=%ld bad=%ld rank_rx=%ld cq_rx=%ld rank_tx=%ld daemon_tx=%ld takeovers=%llu handbacks=%llu "
	       "released=%llu acks_in=%llu acks_out=%llu\n",
	       r->next, r->bad, r->rank_rx, r->cq_rx, r->rank_tx, r->daemon_tx,
	       (unsigned long long)iwvi_fp_own_takeovers(&r->fp.own), (unsigned long long)iwvi_fp_own_handbacks(&r->fp.own),
	       (unsigned long long)r->fp.released, (unsigned long long)r->fp.acks_in, (unsigned long long)r->fp.acks_out);
	printf("figures rtt_rank_ns=%ld rtt_daemon_ns=%ld n_rank=%ld n_daemon=%ld\n", median(r->rtt_rank, r->nrtt_rank),
	       median(r->rtt_daemon, r->nrtt_daemon), r->nrtt_rank, r->nrtt_daemon);
	fflush(stdout);
	free(r->rtt_rank);
	free(r->rtt_daemon);
}

/* take_deliver records the ping the rank takes and answers nothing. */
static void take_deliver(void *arg, int slot, const uint8_t *p, size_t len, uint32_t imm, int has_imm)
{
	struct rank *r = arg;
	(void)slot;
	(void)imm;
	uint64_t seq;
	if (len != 8 || has_imm) {
		r->bad++;
		return;
	}
	memcpy(&seq, p, 8);
	if (seq != (uint64_t)r->next)
		r->bad++;
	r->next++;
	r->rank_rx++;
}

/* run_take answers n pings, then takes ping n without answering it: by
 * the rank (iwvi_fp_rd_poll, whose ACK of one Send is deferred) when it
 * owns the socket, else from the CQ. The QP is destroyed right after
 * (the caller's teardown): the daemon must take the rank's halves back
 * to acknowledge it (verbsd rd/fastpath.go fpClose). */
static void run_take(struct rank *r, long n)
{
	run_pong(r, n, n);
	long rank_rx = r->rank_rx, cq_rx = r->cq_rx;
	long long deadline = mono_ms() + scaled_ms(30000);
	while (r->next == n && mono_ms() < deadline) {
		struct iwv_wc wc[8];
		int k = iwv_poll_cq(r->cq, 8, wc);
		OK(r->s, k);
		for (int i = 0; i < k; i++) {
			if (wc[i].status != IWV_WC_SUCCESS) {
				fprintf(stderr, "t_fprd: completion status %d\n", wc[i].status);
				exit(1);
			}
			if (wc[i].opcode == IWV_WC_RECV) {
				r->next++;
				r->cq_rx++;
			}
		}
		if (r->next > n)
			break;
		if (!iwvi_fp_own_owned(&r->fp.own))
			iwvi_fp_own_want(&r->fp.own);
		else if (iwvi_fp_rd_poll(&r->fp, 1, take_deliver, r) < 0)
			break;
		sched_yield();
	}
	printf("took %ld %s bad=%ld\n", r->next - 1,
	       r->rank_rx > rank_rx ? "rank" : (r->cq_rx > cq_rx ? "cq" : "none"), r->bad);
	fflush(stdout);
}

/* run_garbage serves pings until it has the peer's slot and owns the
 * socket, then writes garbage over the RD halves and stops renewing. */
static void run_garbage(struct rank *r, unsigned seed)
{
	r->n = MAXN;
	r->rtt_rank = calloc(MAXN, sizeof(long));
	r->rtt_daemon = calloc(MAXN, sizeof(long));
	CHECK(r->rtt_rank && r->rtt_daemon);
	long long deadline = mono_ms() + scaled_ms(30000);
	while (mono_ms() < deadline) {
		poll_cq(r);
		if (!iwvi_fp_own_owned(&r->fp.own))
			iwvi_fp_own_want(&r->fp.own);
		else if (iwvi_fp_rd_slot(&r->fp, &r->peer_sa) >= 0 && r->next > 2)
			break;
		else
			iwvi_fp_rd_poll(&r->fp, 16, deliver, r);
		usleep(50);
	}
	CHECK(iwvi_fp_own_owned(&r->fp.own));
	uint8_t *page = r->fp.own.page;
	for (size_t i = W_OFF_FP_RD_SLOTS + W_OFF_FP_RD_NEXT_SEQ; i < W_OFF_FP_RD_SLOTS + W_FP_RD_SLOT_LEN; i++)
		page[i] = (uint8_t)rand_r(&seed);
	printf("garbage written after %ld pings\n", r->next);
	fflush(stdout);
	free(r->rtt_rank);
	free(r->rtt_daemon);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: t_fprd SOCK pong N PAUSE_EVERY | daemon N | garbage SEED | take N\n");
		return 2;
	}
	struct rank r;
	setup(&r, argv[1]);
	if (strcmp(argv[2], "pong") == 0 && argc == 5) {
		long n = atol(argv[3]), every = atol(argv[4]);
		CHECK(n > 0 && n <= MAXN && every > 0);
		run_pong(&r, n, every);
	} else if (strcmp(argv[2], "daemon") == 0 && argc == 4) {
		long n = atol(argv[3]);
		CHECK(n > 0 && n <= MAXN);
		r.nofp = 1;
		run_pong(&r, n, n);
	} else if (strcmp(argv[2], "garbage") == 0 && argc == 4) {
		run_garbage(&r, (unsigned)atoi(argv[3]));
	} else if (strcmp(argv[2], "take") == 0 && argc == 4) {
		long n = atol(argv[3]);
		CHECK(n > 0 && n < MAXN);
		run_take(&r, n);
		teardown(&r); /* at once: the ACK of the ping taken is still owed */
		return 0;
	} else {
		fprintf(stderr, "t_fprd: unknown mode %s\n", argv[2]);
		return 2;
	}
	wait_line();
	teardown(&r);
	return 0;
}
