/*
 * t_fpown.c — a rank that reads its UD QP's own socket through the
 * fast-path hand-over (c/core/fpown.h; issue 20), for
 * test/fastpath (own_test.go) and test/hostile (hostile_fastpath_test.go),
 * which run it against real daemons:
 *
 *   t_fpown SOCK rank N PAUSE_EVERY    receive N numbered 8-octet Sends
 *   t_fpown SOCK busy                  own the socket, keep Busy set forever
 *   t_fpown SOCK garbage SEED          own it, then write garbage over the page
 *   t_fpown SOCK claim                 write the rank's Owner while the engine owns it
 *   t_fpown SOCK errflush K            place K Sends into its own receives (c/core fprq.h),
 *                                      then move the QP to ERROR while it still owns the
 *                                      socket: the other receives, and only they, flush
 *                                      (prints "result placed=P bycq=C owned=O flushed=F
 *                                      wrong=W takeovers=T"; P 0 or O 0: the machine's
 *                                      load took the socket, not a failure)
 *   t_fpown SOCK mcast GROUP           own the socket, keep the lease fresh and attach the
 *                                      QP to GROUP: the engine takes the socket over at
 *                                      once and does not give it back while attached
 *   t_fpown SOCK rqlie                 own the socket, leave an impossible receive-queue
 *                                      consumer index (beyond the producer's) and stop
 *   t_fpown SOCK refuse                what fastpath-page must refuse (second page, no QP,
 *                                      no Magic, unsealed, the daemon's socket, an RD
 *                                      QP's page without its RD halves)
 *   t_fpown SOCK chaos SEED            random words, legal and not, for a bounded while
 *   t_fpown SOCK groqueue              the page handed over while a coalesced buffer waits
 *                                      in the socket (run_groqueue)
 *
 * It prints "ready ADDR QKEY" once its QP is in RTS with its page handed
 * over (and, but for claim, the socket handed to it). In rank mode it then
 * polls its CQ, then, while it owns the socket, peeks at each datagram,
 * takes the one-segment Sends (fastpath.h classifier) and leaves anything
 * else to the daemon (release). Every PAUSE_EVERY messages it stops
 * renewing its lease until the daemon's take-over count in the page grows
 * (bounded), so that the daemon takes over and delivers through the CQ,
 * then asks for the socket back. It prints
 *   "result got=G dup=D rank=R cq=C takeovers=T handbacks=H drops=K missing=M ..."
 * and "figures takeover_us=MEDIAN/MAX handback_us=MEDIAN/MAX pauses=P"
 * and waits for a line on stdin before it destroys its QP (the test reads
 * iwarpctl meanwhile). The other modes print "ready", then act, then wait
 * for the line. Every wait is bounded (IWARPD_TEST_TIMEOUT_SCALE).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create, the seals */
#endif
#include "testlib.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sched.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../core/fastpath.h"
#include "../core/fpown.h"
#include "../core/fprq.h"

#ifndef UDP_GRO
#define UDP_GRO 104
#endif

#define RECVS 256 /* receives kept posted */
#define SLOT 64   /* octets per receive */
#define MAXN 100000

struct rank {
	struct iwv_session *s;
	struct iwv_pd *pd;
	struct iwv_cq *cq;
	struct iwv_qp *qp;
	struct iwv_buffer *buf;
	struct iwv_mr *mr;
	char *mem;
	struct iwvi_fp_own fp;
};

static void post_recv(struct rank *r, uint64_t i)
{
	struct iwv_sge g = {.addr = (uintptr_t)(r->mem + i * SLOT), .length = SLOT, .lkey = iwv_mr_lkey(r->mr)};
	struct iwv_recv_wr w = {.wr_id = i, .num_sge = 1, .sg_list = &g};
	CHECK(iwv_post_recv(r->qp, &w, 1) == 1);
}

/* setup_qp makes the QP, in RTS, with no receive posted and no page. */
static void setup_qp(struct rank *r, const char *sock)
{
	memset(r, 0, sizeof *r);
	r->s = open_session(sock, "t_fpown");
	OK(r->s, iwv_alloc_pd(r->s, &r->pd));
	OK(r->s, iwv_create_cq(r->s, 1024, NULL, &r->cq));
	OK(r->s, iwv_alloc_buffer(r->s, RECVS * SLOT, &r->buf));
	r->mem = iwv_buffer_addr(r->buf);
	OK(r->s, iwv_reg_mr(r->pd, r->mem, RECVS * SLOT, IWV_ACCESS_LOCAL_WRITE, &r->mr));
	struct iwv_qp_init_attr qa = {.qp_type = IWV_QPT_UD, .send_cq = r->cq, .recv_cq = r->cq,
				      .cap = {.max_send_wr = 16, .max_recv_wr = RECVS, .max_send_sge = 1, .max_recv_sge = 1}};
	OK(r->s, iwv_create_qp(r->pd, &qa, &r->qp));
	OK(r->s, iwv_modify_qp(r->qp, IWV_QPS_INIT));
	OK(r->s, iwv_modify_qp(r->qp, IWV_QPS_RTR));
	OK(r->s, iwv_modify_qp(r->qp, IWV_QPS_RTS));
}

static void setup(struct rank *r, const char *sock)
{
	setup_qp(r, sock);
	for (uint64_t i = 0; i < RECVS; i++)
		post_recv(r, i);
	OK(r->s, iwvi_fp_own_attach(r->qp, &r->fp));
}

/* acquire asks for the socket until the daemon hands it over (bounded). */
static void acquire(struct rank *r)
{
	long long deadline = mono_ms() + scaled_ms(10000);
	for (long i = 0; i < 10000000L && mono_ms() < deadline; i++) {
		if (iwvi_fp_own_acquire(&r->fp))
			return;
		usleep(20);
	}
	fprintf(stderr, "t_fpown: the daemon did not hand the socket over within %d ms\n", scaled_ms(10000));
	exit(1);
}

static void ready(struct rank *r)
{
	printf("ready %s %u\n", iwv_qp_addr(r->qp), iwv_qp_qkey(r->qp));
	fflush(stdout);
}

/* wait_line blocks until the test writes a line (or closes stdin). */
static void wait_line(void)
{
	char line[64];
	if (!fgets(line, sizeof line, stdin))
		return;
}

static void teardown(struct rank *r)
{
	OK(r->s, iwv_destroy_qp(r->qp));
	iwvi_fp_own_detach(&r->fp);
	OK(r->s, iwv_dereg_mr(r->mr));
	OK(r->s, iwv_free_buffer(r->buf));
	OK(r->s, iwv_destroy_cq(r->cq));
	OK(r->s, iwv_dealloc_pd(r->pd));
	iwv_close(r->s);
}

/* socket_drops: datagrams the kernel dropped on the QP's socket
 * (SO_MEMINFO, SK_MEMINFO_DROPS). */
static uint32_t socket_drops(int fd)
{
	uint32_t mem[9] = {0};
	socklen_t l = sizeof mem;
	if (getsockopt(fd, SOL_SOCKET, SO_MEMINFO, mem, &l) < 0 || l < sizeof mem)
		return 0;
	return mem[8];
}

struct tally {
	uint8_t *seen;
	long n, got, dup, rank, cq, bad;
};

static void note(struct tally *t, uint64_t seq, int by_rank)
{
	if (seq >= (uint64_t)t->n) {
		t->bad++;
		return;
	}
	if (t->seen[seq]++) {
		t->dup++;
		return;
	}
	t->got++;
	if (by_rank)
		t->rank++;
	else
		t->cq++;
}

/* Figures (information, never asserted): per pause, µs from the last
 * renewal to the take-over seen in the page, and from the first renewal
 * that found the engine owning to the socket back. */
#define MAXPAUSES 256
static long takeover_us[MAXPAUSES], handback_us[MAXPAUSES];
static int npauses;
static long long asked_ns; /* the rank's first lost renewal since the pause; 0: none */

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int cmp_long(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;
	return (x > y) - (x < y);
}

/* median_max renders "MEDIAN/MAX" of v[0, n) (n > 0), sorting v. */
static void median_max(long *v, int n, char *out, size_t cap)
{
	if (n == 0) {
		snprintf(out, cap, "-");
		return;
	}
	qsort(v, (size_t)n, sizeof *v, cmp_long);
	snprintf(out, cap, "%ld/%ld", v[n / 2], v[n - 1]);
}

/* poll_cq takes what the daemon delivered and reposts the receives. */
static void poll_cq(struct rank *r, struct tally *t)
{
	struct iwv_wc wc[32];
	int n = iwv_poll_cq(r->cq, 32, wc);
	OK(r->s, n);
	for (int i = 0; i < n; i++) {
		if (wc[i].status != IWV_WC_SUCCESS || wc[i].opcode != IWV_WC_RECV || wc[i].byte_len != 8 || wc[i].wr_id >= RECVS) {
			fprintf(stderr, "t_fpown: completion status %d opcode %d len %u wr_id %llu\n", wc[i].status, wc[i].opcode,
				wc[i].byte_len, (unsigned long long)wc[i].wr_id);
			exit(1);
		}
		uint64_t seq;
		memcpy(&seq, r->mem + wc[i].wr_id * SLOT, 8);
		note(t, seq, 0);
		post_recv(r, wc[i].wr_id);
	}
}

/* read_socket takes the Sends waiting in the socket while the rank owns
 * it; anything else goes back to the daemon. */
static void read_socket(struct rank *r, struct tally *t)
{
	if (!iwvi_fp_own_renew(&r->fp)) {
		if (asked_ns < 0)
			asked_ns = now_ns();
		return; /* the daemon owns it: asked back */
	}
	if (asked_ns > 0) {
		if (npauses < MAXPAUSES)
			handback_us[npauses++] = (long)((now_ns() - asked_ns) / 1000);
		asked_ns = 0;
	}
	struct fp_rx_qp rq = {.qkey = iwv_qp_qkey(r->qp), .crc = 1};
	uint8_t b[2048];
	for (int k = 0; k < 64; k++) {
		ssize_t n = iwvi_fp_own_recv(&r->fp, b, sizeof b, MSG_PEEK, NULL);
		if (n == -EAGAIN)
			break;
		CHECK(n >= 0);
		struct fp_rx rx;
		if (n > (ssize_t)sizeof b || iwvi_fp_ud_classify(b, (size_t)n, &rq, &rx) != FP_CLASS_SEND || rx.payload_len != 8) {
			iwvi_fp_own_release(&r->fp); /* the daemon's (clears Busy first) */
			return;
		}
		CHECK(iwvi_fp_own_drop(&r->fp) == 0);
		uint64_t seq;
		memcpy(&seq, b + rx.payload_off, 8);
		note(t, seq, 1);
	}
	iwvi_fp_own_done(&r->fp);
}

/* pause stops renewing until the daemon took the socket over (its count
 * in the page grows), bounded. */
static void pause_for_takeover(struct rank *r)
{
	/* Only a socket the rank owns can be taken over: if the daemon has it
	 * (the rank released it for a datagram it leaves to the daemon, or a
	 * take-over came just before), ask for it and wait until it is back,
	 * bounded, without polling. */
	long long deadline = mono_ms() + scaled_ms(10000);
	while (!iwvi_fp_own_acquire(&r->fp) && mono_ms() < deadline)
		usleep(100);
	if (!iwvi_fp_own_owned(&r->fp)) {
		fprintf(stderr, "t_fpown: the daemon did not hand the socket back within %d ms before a pause\n", scaled_ms(10000));
		exit(1);
	}
	if (asked_ns > 0) { /* the hand-back the rank asked for came here */
		if (npauses < MAXPAUSES)
			handback_us[npauses++] = (long)((now_ns() - asked_ns) / 1000);
		asked_ns = 0;
	}
	long long from = now_ns();
	uint64_t before = iwvi_fp_own_takeovers(&r->fp);
	deadline = mono_ms() + scaled_ms(10000);
	while (iwvi_fp_own_takeovers(&r->fp) == before && mono_ms() < deadline)
		usleep(500);
	if (iwvi_fp_own_takeovers(&r->fp) == before) {
		fprintf(stderr, "t_fpown: no take-over within %d ms of a pause\n", scaled_ms(10000));
		exit(1);
	}
	if (npauses < MAXPAUSES)
		takeover_us[npauses] = (long)((now_ns() - from) / 1000);
	asked_ns = -1; /* the next lost renewal starts the hand-back's clock */
}

static void run_rank(struct rank *r, long n, long every)
{
	struct tally t = {.n = n, .seen = calloc((size_t)n, 1)};
	CHECK(t.seen);
	acquire(r);
	ready(r);
	long next_pause = every;
	long long deadline = mono_ms() + scaled_ms(60000);
	for (long i = 0; i < 100000000L && t.got < n && mono_ms() < deadline; i++) {
		long had = t.got + t.dup + t.bad;
		poll_cq(r, &t); /* the CQ before the socket: what the daemon read came first */
		read_socket(r, &t);
		if (t.got + t.dup + t.bad == had)
			sched_yield(); /* as the provider's progress does after an empty poll (c/prov/iwd_cq.c) */
		if (t.got >= next_pause) {
			next_pause += every;
			pause_for_takeover(r);
		}
	}
	usleep(20000); /* anything more (a duplicate) would arrive now */
	poll_cq(r, &t);
	read_socket(r, &t);
	char tk[64], hb[64];
	int nt = npauses < MAXPAUSES && takeover_us[npauses] ? npauses + 1 : npauses;
	median_max(takeover_us, nt, tk, sizeof tk);
	median_max(handback_us, npauses, hb, sizeof hb);
	printf("result got=%ld dup=%ld rank=%ld cq=%ld takeovers=%llu handbacks=%llu drops=%u missing=%ld bad=%ld renews=%llu lost=%llu\n",
	       t.got, t.dup, t.rank, t.cq, (unsigned long long)iwvi_fp_own_takeovers(&r->fp),
	       (unsigned long long)iwvi_fp_own_handbacks(&r->fp), socket_drops(r->qp->sock), n - t.got, t.bad,
	       (unsigned long long)r->fp.renews, (unsigned long long)r->fp.lost);
	printf("figures takeover_us=%s handback_us=%s pauses=%d\n", tk, hb, npauses);
	fflush(stdout);
	free(t.seen);
}

/* errflush: the receives follow the socket (docs/fastpath.md "Posted
 * receives"). The rank places k Sends into its receives 0..k-1 itself,
 * then moves its QP to ERROR while it owns the socket and keeps renewing:
 * the engine takes the socket over at once, adopts the consumer index and
 * flushes receives k..RECVS-1, in order, each once, and none of those the
 * rank consumed. */
/* errflush_cq takes the receives the engine completed (a take-over's),
 * which must be the next ones in posting order. */
static void errflush_cq(struct rank *r, uint64_t *next, long *bycq)
{
	struct iwv_wc wc[8];
	int m;
	do {
		m = iwv_poll_cq(r->cq, 8, wc);
		OK(r->s, m);
		for (int i = 0; i < m; i++) {
			CHECK(wc[i].status == IWV_WC_SUCCESS && wc[i].opcode == IWV_WC_RECV && wc[i].wr_id == *next);
			(*next)++;
			(*bycq)++;
		}
	} while (m == 8);
}

static void run_errflush(struct rank *r, long k)
{
	struct fp_rx_qp rq = {.qkey = iwv_qp_qkey(r->qp), .crc = 1};
	uint8_t b[2048];
	long placed = 0, bycq = 0, flushed = 0, wrong = 0;
	uint64_t next = 0; /* the next receive to complete, whoever consumes it */
	iwvi_fp_rq_attach(&r->fp);
	acquire(r);
	ready(r);
	long long deadline = mono_ms() + scaled_ms(30000);
	while (placed + bycq < k && mono_ms() < deadline) {
		errflush_cq(r, &next, &bycq); /* a take-over (the machine's load) delivers here */
		if (!iwvi_fp_own_renew(&r->fp)) {
			sched_yield(); /* asked back */
			continue;
		}
		/* The engine may have taken the socket over and handed it back
		 * since that poll: what it read is in the CQ ring by now (its
		 * completions precede the hand-back), before the receives the
		 * rank finds at the ring's consumer index. */
		errflush_cq(r, &next, &bycq);
		ssize_t n = iwvi_fp_own_recv(&r->fp, b, sizeof b, MSG_PEEK, NULL);
		struct fp_rx rx;
		struct iwvi_fp_rqe e;
		if (n >= 0) {
			CHECK(n <= (ssize_t)sizeof b && iwvi_fp_ud_classify(b, (size_t)n, &rq, &rx) == FP_CLASS_SEND);
			CHECK(iwvi_fp_rq_head(&r->fp, &e) == 0);
			if (e.wr_id != next)
				fprintf(stderr, "t_fpown: errflush: the receive at the consumer index is %llu, want %llu (%ld placed, %ld through the CQ)\n",
					(unsigned long long)e.wr_id, (unsigned long long)next, placed, bycq);
			CHECK(e.wr_id == next && e.num_sge == 1 && e.sge[0].length >= rx.payload_len);
			memcpy((void *)(uintptr_t)e.sge[0].addr, b + rx.payload_off, rx.payload_len);
			CHECK(iwvi_fp_own_drop(&r->fp) == 0);
			CHECK(iwvi_fp_rq_consume(&r->fp) == 0);
			placed++;
			next++;
		} else
			CHECK(n == -EAGAIN);
		iwvi_fp_own_done(&r->fp);
		if (n < 0)
			sched_yield();
	}
	/* Own the socket again (bounded) before the QP fails. */
	while (!iwvi_fp_own_renew(&r->fp) && mono_ms() < deadline)
		sched_yield();
	iwvi_fp_own_done(&r->fp);
	CHECK(placed + bycq == k);
	/* On a loaded machine the engine may have taken the socket over (the
	 * lease lapsed) and delivered every Send through the CQ (placed 0), or
	 * kept it: reported, not a failure; the test runs the scenario again
	 * (test/fastpath own_test.go). The flush below holds either way. */
	int owned = iwvi_fp_own_owned(&r->fp);
	uint64_t tk = iwvi_fp_own_takeovers(&r->fp);
	OK(r->s, iwv_modify_qp(r->qp, IWV_QPS_ERR));
	deadline = mono_ms() + scaled_ms(10000);
	long long quiet_until = 0;
	while (mono_ms() < deadline && (flushed + wrong < RECVS - k || mono_ms() < quiet_until)) {
		iwvi_fp_own_renew(&r->fp); /* the lease stays fresh: the take-over is ERROR's */
		iwvi_fp_own_done(&r->fp);
		struct iwv_wc wc[32];
		int n = iwv_poll_cq(r->cq, 32, wc);
		OK(r->s, n);
		for (int i = 0; i < n; i++) {
			if (wc[i].status == IWV_WC_WR_FLUSH_ERR && wc[i].opcode == IWV_WC_RECV && wc[i].wr_id == next) {
				next++;
				flushed++;
			} else {
				fprintf(stderr, "t_fpown: errflush: completion status %d opcode %d wr_id %llu (want flush of %llu)\n",
					wc[i].status, wc[i].opcode, (unsigned long long)wc[i].wr_id, (unsigned long long)next);
				wrong++;
			}
		}
		if (flushed + wrong == RECVS - k && !quiet_until)
			quiet_until = mono_ms() + 20; /* anything more (a second flush) would come now */
		if (n == 0)
			sched_yield();
	}
	printf("result placed=%ld bycq=%ld owned=%d flushed=%ld wrong=%ld takeovers=%llu\n", placed, bycq, owned, flushed,
	       wrong, (unsigned long long)(iwvi_fp_own_takeovers(&r->fp) - tk));
	fflush(stdout);
}

/* mcast: a multicast group's datagrams take the QP's receives too, so the
 * engine reclaims the socket when the QP is attached to one (whatever the
 * lease) and keeps it while attached (docs/fastpath.md "Posted receives"). */
static void run_mcast(struct rank *r, const char *group)
{
	acquire(r);
	ready(r);
	uint64_t tk = iwvi_fp_own_takeovers(&r->fp);
	CHECK(iwvi_fp_own_renew(&r->fp) == 1);
	iwvi_fp_own_done(&r->fp);
	if (iwv_attach_mcast(r->qp, group) < 0) {
		fprintf(stderr, "t_fpown: attach-mcast %s: %s\n", group, iwv_last_error(r->s));
		printf("result skip=1\n");
		fflush(stdout);
		return;
	}
	long long deadline = mono_ms() + scaled_ms(5000);
	while (iwvi_fp_own_takeovers(&r->fp) == tk && mono_ms() < deadline) {
		if (iwvi_fp_own_renew(&r->fp)) /* the lease stays fresh */
			iwvi_fp_own_done(&r->fp);
		usleep(100);
	}
	uint64_t hb = iwvi_fp_own_handbacks(&r->fp);
	long owned = 0;
	long long end = mono_ms() + 50;
	while (mono_ms() < end) { /* asking back (Want) all the while */
		if (iwvi_fp_own_renew(&r->fp)) {
			owned++;
			iwvi_fp_own_done(&r->fp);
		}
		usleep(200);
	}
	printf("result skip=0 takeovers=%llu handbacks=%llu owned=%ld\n",
	       (unsigned long long)(iwvi_fp_own_takeovers(&r->fp) - tk),
	       (unsigned long long)(iwvi_fp_own_handbacks(&r->fp) - hb), owned);
	fflush(stdout);
}

/* raw_page hands a page of QP handle to the daemon as a hostile client
 * would: magic_ok writes Magic and Version, sealed seals it. Returns the
 * call's result. */
static int raw_page(struct rank *r, uint32_t handle, int magic_ok, int sealed)
{
	int fd = memfd_create("t_fpown", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	CHECK(fd >= 0);
	CHECK(ftruncate(fd, W_FP_PAGE_LEN) == 0);
	static uint8_t pg[W_FP_PAGE_LEN]; /* every octet written: the daemon refuses holes */
	memset(pg, 0, sizeof pg);
	if (magic_ok) {
		w_put32(pg + W_OFF_FP_MAGIC, W_FP_MAGIC);
		w_put16(pg + W_OFF_FP_VERSION, W_FP_VERSION);
	}
	CHECK(pwrite(fd, pg, sizeof pg, 0) == (ssize_t)sizeof pg);
	if (sealed)
		CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0);
	json_t *req = json_object();
	CHECK(req && iwvi_jset_u64(req, "qp", handle) == 0);
	json_t *rep = NULL;
	int rc = iwvi_call(r->s, W_OP_FASTPATH_PAGE, req, &fd, 1, &rep);
	json_decref(rep);
	close(fd);
	return rc;
}

/* refusals: what fastpath-page must refuse, each leaving no state. */
static void refusals(struct rank *r)
{
	FAILS(r->s, EEXIST, raw_page(r, r->qp->handle, 1, 1)); /* a second page */
	FAILS(r->s, EINVAL, raw_page(r, 999999, 1, 1));        /* no such QP */
	struct iwv_qp_init_attr qa = {.qp_type = IWV_QPT_UD, .send_cq = r->cq, .recv_cq = r->cq,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct iwv_qp *own, *theirs, *rd;
	OK(r->s, iwv_create_qp(r->pd, &qa, &own));
	FAILS(r->s, EINVAL, raw_page(r, own->handle, 0, 1)); /* no Magic */
	CHECK(raw_page(r, own->handle, 1, 0) < 0);            /* not sealed */
	OK(r->s, raw_page(r, own->handle, 1, 1));             /* then a good one is taken */
	int cs = r->s->client_sockets;
	r->s->client_sockets = 0; /* the daemon makes this one's socket */
	OK(r->s, iwv_create_qp(r->pd, &qa, &theirs));
	r->s->client_sockets = cs;
	CHECK(theirs->sock < 0);
	FAILS(r->s, EINVAL, raw_page(r, theirs->handle, 1, 1)); /* the daemon's socket */
	qa.qp_type = IWV_QPT_RD;
	if (iwv_create_qp(r->pd, &qa, &rd) == 0) { /* RD enabled on this daemon */
		FAILS(r->s, EINVAL, raw_page(r, rd->handle, 1, 1)); /* a UD-sized page: short of the RD halves */
		OK(r->s, iwv_destroy_qp(rd));
	}
	OK(r->s, iwv_destroy_qp(own));
	OK(r->s, iwv_destroy_qp(theirs));
}

/* chaos writes random values, legal and not, into the page's words for a
 * bounded while, reading the socket now and then as a rank would (what it
 * reads it drops). */
static void chaos(struct rank *r, unsigned seed)
{
	uint8_t *page = r->fp.page;
	uint32_t *words[3] = {(uint32_t *)(void *)(page + W_OFF_FP_OWNER), (uint32_t *)(void *)(page + W_OFF_FP_BUSY),
			      (uint32_t *)(void *)(page + W_OFF_FP_WANT)};
	int64_t *lease = (int64_t *)(void *)(page + W_OFF_FP_LEASE);
	uint32_t vals[5] = {0, 1, 2, 3, 0xffffffffu};
	long long end = mono_ms() + 1500;
	for (int i = 0; i < 20000 && mono_ms() < end; i++) {
		int k = rand_r(&seed) % 6;
		if (k < 3) {
			__atomic_store_n(words[k], vals[rand_r(&seed) % 5], __ATOMIC_SEQ_CST);
		} else if (k == 3) {
			int64_t now = (int64_t)mono_ms() * 1000000;
			int64_t ls[5] = {now, now - 50000000, now + 2000000000LL, INT64_MIN, INT64_MAX};
			__atomic_store_n(lease, ls[rand_r(&seed) % 5], __ATOMIC_SEQ_CST);
		} else if (k == 4 && iwvi_fp_own_renew(&r->fp)) {
			uint8_t b[256];
			while (iwvi_fp_own_recv(&r->fp, b, sizeof b, 0, NULL) >= 0)
				;
			iwvi_fp_own_done(&r->fp);
		} else {
			iwvi_fp_own_want(&r->fp);
		}
		usleep((useconds_t)(rand_r(&seed) % 300));
	}
}

/* groqueue: UDP_GRO goes off only over an empty queue (docs/fastpath.md
 * "UDP_GRO goes off only over an empty queue"). The QP is made with no
 * receive and no page; once the test has seen it parked (a Send of several
 * datagrams, sent by the peer's daemon as one GSO buffer, waits whole in
 * the socket, coalesced: UDP_GRO is on) it writes a line, and the rank
 * hands its page over, posts one receive of RECVS*SLOT octets and asks
 * for the socket. The engine must read the buffer with its UDP_GRO control
 * message and deliver the Send (octet i: (i*7+3) & 0xff) before the socket
 * goes to the rank; read with UDP_GRO off it is one datagram with a bad
 * CRC, dropped. Prints "result len=L status=S pattern=P gro=G owned=O":
 * the Send's length and status (len 0: none within the bound), whether
 * its octets are right, UDP_GRO on the socket once the rank owns it. */
static void run_groqueue(const char *sock)
{
	struct rank r;
	setup_qp(&r, sock);
	ready(&r);
	wait_line();
	OK(r.s, iwvi_fp_own_attach(r.qp, &r.fp));
	struct iwv_sge g = {.addr = (uintptr_t)r.mem, .length = RECVS * SLOT, .lkey = iwv_mr_lkey(r.mr)};
	struct iwv_recv_wr w = {.wr_id = 1, .num_sge = 1, .sg_list = &g};
	CHECK(iwv_post_recv(r.qp, &w, 1) == 1);
	acquire(&r);
	struct iwv_wc wc;
	int n = 0;
	long long deadline = mono_ms() + scaled_ms(5000);
	for (long i = 0; i < 10000000L && n == 0 && mono_ms() < deadline; i++) {
		n = iwv_poll_cq(r.cq, 1, &wc);
		OK(r.s, n);
		if (n == 0)
			usleep(100);
	}
	int pattern = 0;
	if (n == 1 && wc.status == IWV_WC_SUCCESS && wc.byte_len <= RECVS * SLOT) {
		pattern = 1;
		for (uint32_t i = 0; i < wc.byte_len; i++)
			if ((uint8_t)r.mem[i] != (uint8_t)(i * 7 + 3))
				pattern = 0;
	}
	int gro = -1;
	socklen_t gl = sizeof gro;
	if (getsockopt(r.qp->sock, SOL_UDP, UDP_GRO, &gro, &gl) < 0)
		gro = -1;
	printf("result len=%u status=%d pattern=%d gro=%d owned=%d\n", n == 1 ? wc.byte_len : 0, n == 1 ? (int)wc.status : -1,
	       pattern, gro, iwvi_fp_own_owned(&r.fp));
	fflush(stdout);
	wait_line();
	teardown(&r);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: t_fpown SOCK rank N PAUSE_EVERY | busy | garbage SEED | claim | rqlie\n");
		return 2;
	}
	if (strcmp(argv[2], "groqueue") == 0) {
		run_groqueue(argv[1]);
		return 0;
	}
	struct rank r;
	setup(&r, argv[1]);
	const char *mode = argv[2];
	uint8_t *page = r.fp.page;
	if (strcmp(mode, "rank") == 0 && argc == 5) {
		long n = atol(argv[3]), every = atol(argv[4]);
		CHECK(n > 0 && n <= MAXN && every > 0);
		run_rank(&r, n, every);
	} else if (strcmp(mode, "busy") == 0) {
		acquire(&r);
		CHECK(iwvi_fp_own_renew(&r.fp) == 1); /* Busy set, never cleared, the lease never renewed */
		ready(&r);
	} else if (strcmp(mode, "garbage") == 0 && argc == 4) {
		acquire(&r);
		unsigned seed = (unsigned)atoi(argv[3]);
		for (size_t i = 0; i < W_FP_PAGE_LEN; i++)
			page[i] = (uint8_t)rand_r(&seed);
		__atomic_store_n((uint32_t *)(void *)(page + W_OFF_FP_OWNER), 0xdeadbeefu, __ATOMIC_SEQ_CST);
		ready(&r);
	} else if (strcmp(mode, "refuse") == 0) {
		refusals(&r);
		ready(&r);
	} else if (strcmp(mode, "chaos") == 0 && argc == 4) {
		acquire(&r);
		ready(&r);
		chaos(&r, (unsigned)atoi(argv[3]));
	} else if (strcmp(mode, "errflush") == 0 && argc == 4) {
		long k = atol(argv[3]);
		CHECK(k > 0 && k < RECVS);
		run_errflush(&r, k);
	} else if (strcmp(mode, "mcast") == 0 && argc == 4) {
		run_mcast(&r, argv[3]);
	} else if (strcmp(mode, "rqlie") == 0) {
		/* The receives follow the socket (c/core fprq.h): at the
		 * take-over the engine adopts the consumer index the rank left,
		 * checked. Leave one beyond the producer's and stop renewing. */
		acquire(&r);
		struct ring *q = &r.qp->rq.ring;
		__atomic_store_n(q->consumer, q->pub + 5, __ATOMIC_SEQ_CST);
		ready(&r);
	} else if (strcmp(mode, "claim") == 0) {
		/* The engine owns the socket (nothing asked): claim it. */
		CHECK(!iwvi_fp_own_owned(&r.fp));
		__atomic_store_n((uint32_t *)(void *)(page + W_OFF_FP_OWNER), W_FP_OWNER_RANK, __ATOMIC_SEQ_CST);
		ready(&r);
	} else {
		fprintf(stderr, "t_fpown: unknown mode %s\n", mode);
		return 2;
	}
	wait_line();
	teardown(&r);
	return 0;
}
