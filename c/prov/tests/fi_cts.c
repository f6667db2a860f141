/*
 * fi_cts — the receiver-ready rendezvous of RDM endpoints (iwd_rdm_cts.c,
 * docs/libfabric.md "Progress while both ranks compute"): the data of a
 * large tagged message moves while the receiver makes no libfabric call,
 * and matching stays that of fi_tagged(3) (receives match in the order
 * they were posted, messages from one peer in the order they were sent;
 * FI_ADDR_UNSPEC receives; unexpected messages; fi_cancel).
 *
 * One process, two domains on the daemon named by FI_IWARPD_SOCKET (A
 * receives, B sends; each domain is progressed only by calls on its own
 * objects), FI_EP_RDM with FI_TAGGED | FI_DIRECTED_RECV, unregistered
 * 1 MiB buffers (staging on both sides). Cases:
 *   progress   A posts a directed receive, then makes no call; B waits for
 *              A's offer (the domain's counters, fi_ext_iwarpd.h), sends,
 *              and its send completes on B's calls alone: the daemons moved
 *              the data (B's completion is the acknowledgement of the DONE
 *              behind the Write). Only then does A read its CQ.
 *   eager      an offer is out; B sends a 64-octet message of the tag, then
 *              a 1 MiB one: the receive takes the small one (the first
 *              match), the next receive the large one.
 *   wildcard   an FI_ADDR_UNSPEC receive, then a directed one of the same
 *              tag: no offer; the first message goes to the wildcard.
 *   unexpected a 1 MiB message before any receive: the receive takes it,
 *              no offer.
 *   between    an offer for tag 5; B sends tag 6 (no match), then tag 5:
 *              tag 5 by the offer, tag 6 as an RTS to the next receive.
 *   cancel     an offer's receive is cancelled; B sends by the offer; the
 *              message waits as unexpected and the next receive takes it.
 *   credit     (standing credits, iwd_rdm_credit.c) A took rendezvous
 *              messages from B, so B holds A's credit; B sends 1 MiB with
 *              no receive posted at A, and its send completes on B's calls
 *              alone; then A's receive takes it from the credit's zone.
 *   order      B sends 1 MiB by the credit, then 64 octets of the same
 *              tag; an FI_ADDR_UNSPEC receive posted first takes the large
 *              one, the directed receive after it the small one (the
 *              credit's DONE keeps its place among B's messages).
 *   stranger   B takes a message from C, an endpoint not in B's AV (as an
 *              MPI peer's first message can arrive before the AV insert):
 *              B accepts no offer again (it could not count that
 *              message), but its next 1 MiB send still goes by A's credit
 *              and completes on B's calls alone.
 *
 *   fi_cts [PROV [off]]   off: FI_IWARPD_CTS=0 is set: no offers, same
 *                         matching (the progress case is not asserted)
 * Prints "fi_cts: ok" and exits 0, else 1.
 */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_tagged.h>

#include "fi_ext_iwarpd.h"

#define FITEST_NAME "fi_cts"
#include "fitest.h"

#define BIG (1u << 20)

struct side {
	struct fid_domain *dom;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	fi_addr_t peer;
	struct fi_iwarpd_stats_ops *ops;
};

static struct side A, B, C;
static int off;

static void stats(struct side *s, struct fi_iwarpd_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (s->ops)
		s->ops->get(s->dom, st);
}

static void fill(uint8_t *b, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(i * 13 + seed * 101 + (i >> 11));
}

static int same(const uint8_t *b, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		if (b[i] != (uint8_t)(i * 13 + seed * 101 + (i >> 11)))
			return 0;
	return 1;
}

/* One completion of s (bounded); progresses only s's domain. */
static void reap(struct side *s, struct fi_cq_tagged_entry *e, const char *what)
{
	fitest_set_deadline(30);
	for (;;) {
		ssize_t r = fi_cq_read(s->cq, e, 1);
		if (r == 1)
			return;
		if (r == -FI_EAVAIL) {
			struct fi_cq_err_entry err = {0};
			fi_cq_readerr(s->cq, &err, 0);
			if (err.err == FI_ECANCELED || err.err == FI_ENOMSG) {
				e->op_context = err.op_context;
				e->flags = err.flags;
				e->len = 0;
				e->tag = err.tag;
				e->buf = NULL;
				e->data = (uint64_t)err.err; /* marks the cancel or the missed peek for the caller */
				return;
			}
			fitest_die("%s: completion error %s", what, fi_strerror(err.err));
		}
		if (r != -FI_EAGAIN)
			fitest_die("%s: fi_cq_read %zd", what, r);
		fitest_check_deadline(what);
		sched_yield();
	}
}

/* B progresses until it holds one more offer of A's than before. */
static void await_offer(uint64_t before)
{
	struct fi_cq_tagged_entry e;
	struct fi_iwarpd_stats st;
	if (off)
		return;
	fitest_set_deadline(10);
	for (;;) {
		ssize_t r = fi_cq_read(B.cq, &e, 1);
		if (r == 1)
			fitest_die("B: a completion while waiting for an offer");
		stats(&B, &st);
		if (st.cts_accepted > before)
			return;
		fitest_check_deadline("B to take A's offer");
		sched_yield();
	}
}

/* B progresses until it holds one more credit of A's than before. */
static void await_credit(uint64_t before)
{
	struct fi_cq_tagged_entry e;
	struct fi_iwarpd_stats st;
	if (off)
		return;
	fitest_set_deadline(10);
	for (;;) {
		ssize_t r = fi_cq_read(B.cq, &e, 1);
		if (r == 1)
			fitest_die("B: a completion while waiting for a credit");
		stats(&B, &st);
		if (st.credit_taken > before)
			return;
		fitest_check_deadline("B to take A's credit");
		sched_yield();
	}
}

static void open_side(struct fid_fabric *fab, struct fi_info *info, struct side *s)
{
	struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_TAGGED};
	struct fi_av_attr ava = {.type = FI_AV_TABLE};
	CHECK(fi_domain(fab, info, &s->dom, NULL));
	CHECK(fi_av_open(s->dom, &ava, &s->av, NULL));
	fitest_open_eps(s->dom, info, s->av, &cqa, 1, &s->ep, &s->cq);
	if (fi_open_ops(&s->dom->fid, FI_IWARPD_STATS_OPS, 0, (void **)&s->ops, NULL))
		s->ops = NULL;
}

static void connect_sides(void)
{
	char name[64];
	size_t len = sizeof(name);
	CHECK(fi_getname(&B.ep->fid, name, &len));
	if (fi_av_insert(A.av, name, 1, &A.peer, 0, NULL) != 1)
		fitest_die("A: fi_av_insert");
	len = sizeof(name);
	CHECK(fi_getname(&A.ep->fid, name, &len));
	if (fi_av_insert(B.av, name, 1, &B.peer, 0, NULL) != 1)
		fitest_die("B: fi_av_insert");
}

/* The send of B completes, A making no call (the offer's case), or with
 * A's calls too (off: A's provider must issue the Read). */
static void b_send_done(const char *what)
{
	struct fi_cq_tagged_entry e;
	if (!off) {
		reap(&B, &e, what);
		return;
	}
	fitest_set_deadline(30);
	for (;;) {
		ssize_t r = fi_cq_read(B.cq, &e, 1);
		if (r == 1)
			return;
		(void)fi_cq_read(A.cq, &e, 0); /* progress only */
		fitest_check_deadline(what);
		sched_yield();
	}
}

static void case_progress(uint8_t *rb, uint8_t *sb)
{
	struct fi_iwarpd_stats a0, a1, b0, b1;
	struct fi_cq_tagged_entry e;
	struct fi_context rc, sc;
	stats(&A, &a0);
	stats(&B, &b0);
	memset(rb, 0, BIG);
	fill(sb, BIG, 1);
	POST(fi_trecv(A.ep, rb, BIG, NULL, A.peer, 1, 0, &rc), "A: fi_trecv");
	await_offer(b0.cts_accepted);
	POST(fi_tsend(B.ep, sb, BIG, NULL, B.peer, 1, &sc), "B: fi_tsend");
	/* A computes: no call on A's objects until B's send completed. */
	b_send_done("progress: B's send");
	stats(&A, &a1);
	stats(&B, &b1);
	if (!off) {
		EXPECT(b1.cts_used == b0.cts_used + 1, "progress: B used %llu offers, want 1",
		       (unsigned long long)(b1.cts_used - b0.cts_used));
		EXPECT(a1.cts_done == a0.cts_done, "progress: A completed a receive without a call");
	} else {
		EXPECT(a1.cts_offered == a0.cts_offered && b1.cts_used == b0.cts_used, "off: an offer was made or used");
	}
	reap(&A, &e, "progress: A's receive");
	EXPECT(e.op_context == &rc && e.len == BIG && e.tag == 1 && same(rb, BIG, 1),
	       "progress: A's receive: context %p len %zu tag %llu, data %s", e.op_context, e.len,
	       (unsigned long long)e.tag, same(rb, BIG, 1) ? "intact" : "wrong");
	stats(&A, &a1);
	if (!off)
		EXPECT(a1.cts_done == a0.cts_done + 1, "progress: A's receive not completed by a DONE");
}

static void case_eager(uint8_t *rb, uint8_t *sb)
{
	struct fi_iwarpd_stats b0, b1;
	struct fi_cq_tagged_entry e;
	struct fi_context rc1, rc2, sc1, sc2;
	static uint8_t small[64], small_rx[BIG];
	stats(&B, &b0);
	fill(small, sizeof(small), 2);
	fill(sb, BIG, 3);
	POST(fi_trecv(A.ep, small_rx, BIG, NULL, A.peer, 2, 0, &rc1), "A: fi_trecv 1");
	await_offer(b0.cts_accepted);
	POST(fi_tsend(B.ep, small, sizeof(small), NULL, B.peer, 2, &sc1), "B: fi_tsend small");
	POST(fi_tsend(B.ep, sb, BIG, NULL, B.peer, 2, &sc2), "B: fi_tsend large");
	reap(&A, &e, "eager: first receive");
	EXPECT(e.op_context == &rc1 && e.len == sizeof(small) && same(small_rx, sizeof(small), 2),
	       "eager: the first receive took %zu octets (context %p), want the 64-octet message", e.len, e.op_context);
	memset(rb, 0, BIG);
	POST(fi_trecv(A.ep, rb, BIG, NULL, A.peer, 2, 0, &rc2), "A: fi_trecv 2");
	reap(&A, &e, "eager: second receive");
	EXPECT(e.op_context == &rc2 && e.len == BIG && same(rb, BIG, 3), "eager: the second receive: len %zu, data %s",
	       e.len, same(rb, BIG, 3) ? "intact" : "wrong");
	for (int i = 0; i < 2; i++)
		b_send_done("eager: B's sends");
	stats(&B, &b1);
	EXPECT(b1.cts_used == b0.cts_used, "eager: B used an offer for a message the small one preceded");
}

static void case_wildcard(uint8_t *rb, uint8_t *sb)
{
	struct fi_iwarpd_stats a0, a1;
	struct fi_cq_tagged_entry e;
	struct fi_context rw, rd, s1, s2;
	static uint8_t rb2[BIG], sb2[BIG];
	stats(&A, &a0);
	memset(rb, 0, BIG);
	memset(rb2, 0, BIG);
	fill(sb, BIG, 4);
	fill(sb2, BIG, 5);
	POST(fi_trecv(A.ep, rb, BIG, NULL, FI_ADDR_UNSPEC, 3, 0, &rw), "A: fi_trecv any");
	POST(fi_trecv(A.ep, rb2, BIG, NULL, A.peer, 3, 0, &rd), "A: fi_trecv directed");
	stats(&A, &a1);
	EXPECT(a1.cts_offered == a0.cts_offered, "wildcard: %llu offers with an FI_ADDR_UNSPEC receive posted first",
	       (unsigned long long)(a1.cts_offered - a0.cts_offered));
	POST(fi_tsend(B.ep, sb, BIG, NULL, B.peer, 3, &s1), "B: fi_tsend 1");
	POST(fi_tsend(B.ep, sb2, BIG, NULL, B.peer, 3, &s2), "B: fi_tsend 2");
	for (int i = 0; i < 2; i++) {
		reap(&A, &e, "wildcard: receives");
		if (e.op_context == &rw)
			EXPECT(same(rb, BIG, 4), "wildcard: the FI_ADDR_UNSPEC receive did not get the first message");
		else
			EXPECT(e.op_context == &rd && same(rb2, BIG, 5), "wildcard: the directed receive did not get the second");
	}
	for (int i = 0; i < 2; i++)
		b_send_done("wildcard: B's sends");
}

static void case_unexpected(uint8_t *rb, uint8_t *sb)
{
	struct fi_iwarpd_stats a0, a1;
	struct fi_cq_tagged_entry e;
	struct fi_context rc, sc;
	stats(&A, &a0);
	fill(sb, BIG, 6);
	memset(rb, 0, BIG);
	POST(fi_tsend(B.ep, sb, BIG, NULL, B.peer, 4, &sc), "B: fi_tsend");
	/* Until the RTS is in A's unexpected queue: a claim-less peek finds it. */
	fitest_set_deadline(10);
	for (;;) {
		struct fi_msg_tagged m = {.addr = A.peer, .tag = 4};
		struct fi_context pc;
		m.context = &pc;
		POST(fi_trecvmsg(A.ep, &m, FI_PEEK), "A: peek");
		reap(&A, &e, "unexpected: peek");
		if (e.data != FI_ENOMSG && e.op_context == &pc && e.len == BIG)
			break;
		fitest_check_deadline("the RTS to arrive");
		(void)fi_cq_read(B.cq, &e, 0);
	}
	POST(fi_trecv(A.ep, rb, BIG, NULL, A.peer, 4, 0, &rc), "A: fi_trecv");
	stats(&A, &a1);
	EXPECT(a1.cts_offered == a0.cts_offered, "unexpected: an offer for a receive an unexpected message matches");
	reap(&A, &e, "unexpected: receive");
	EXPECT(e.op_context == &rc && e.len == BIG && same(rb, BIG, 6), "unexpected: len %zu, data %s", e.len,
	       same(rb, BIG, 6) ? "intact" : "wrong");
	b_send_done("unexpected: B's send");
}

static void case_between(uint8_t *rb, uint8_t *sb)
{
	struct fi_iwarpd_stats b0, b1;
	struct fi_cq_tagged_entry e;
	struct fi_context r5, r6, s6, s5;
	static uint8_t rb6[BIG], sb6[BIG];
	stats(&B, &b0);
	fill(sb, BIG, 7);
	fill(sb6, BIG, 8);
	memset(rb, 0, BIG);
	memset(rb6, 0, BIG);
	POST(fi_trecv(A.ep, rb, BIG, NULL, A.peer, 5, 0, &r5), "A: fi_trecv 5");
	await_offer(b0.cts_accepted);
	POST(fi_tsend(B.ep, sb6, BIG, NULL, B.peer, 6, &s6), "B: fi_tsend 6");
	POST(fi_tsend(B.ep, sb, BIG, NULL, B.peer, 5, &s5), "B: fi_tsend 5");
	stats(&B, &b1);
	if (!off)
		EXPECT(b1.cts_used == b0.cts_used + 1, "between: tag 5 did not use the offer past a tag-6 message");
	reap(&A, &e, "between: tag 5");
	EXPECT(e.op_context == &r5 && e.tag == 5 && same(rb, BIG, 7), "between: tag 5's receive: tag %llu, data %s",
	       (unsigned long long)e.tag, same(rb, BIG, 7) ? "intact" : "wrong");
	POST(fi_trecv(A.ep, rb6, BIG, NULL, A.peer, 6, 0, &r6), "A: fi_trecv 6");
	reap(&A, &e, "between: tag 6");
	EXPECT(e.op_context == &r6 && e.tag == 6 && same(rb6, BIG, 8), "between: tag 6's receive: data %s",
	       same(rb6, BIG, 8) ? "intact" : "wrong");
	for (int i = 0; i < 2; i++)
		b_send_done("between: B's sends");
}

static void case_cancel(uint8_t *rb, uint8_t *sb)
{
	struct fi_iwarpd_stats a0, a1, b0;
	struct fi_cq_tagged_entry e;
	struct fi_context rc, rc2, sc;
	static uint8_t gone[BIG];
	stats(&A, &a0);
	stats(&B, &b0);
	fill(sb, BIG, 9);
	memset(rb, 0, BIG);
	POST(fi_trecv(A.ep, gone, BIG, NULL, A.peer, 7, 0, &rc), "A: fi_trecv");
	await_offer(b0.cts_accepted);
	CHECK(fi_cancel(&A.ep->fid, &rc));
	reap(&A, &e, "cancel: the cancelled receive");
	EXPECT(e.op_context == &rc && e.data == FI_ECANCELED, "cancel: no FI_ECANCELED completion");
	POST(fi_tsend(B.ep, sb, BIG, NULL, B.peer, 7, &sc), "B: fi_tsend");
	/* By the offer, B's send completes before A posts again; as an RTS
	 * (off), only after A's next receive took it. */
	if (!off)
		b_send_done("cancel: B's send");
	POST(fi_trecv(A.ep, rb, BIG, NULL, A.peer, 7, 0, &rc2), "A: fi_trecv again");
	if (off)
		b_send_done("cancel: B's send");
	reap(&A, &e, "cancel: the next receive");
	EXPECT(e.op_context == &rc2 && e.len == BIG && same(rb, BIG, 9), "cancel: the next receive: len %zu, data %s",
	       e.len, same(rb, BIG, 9) ? "intact" : "wrong");
	stats(&A, &a1);
	if (!off)
		EXPECT(a1.cts_done_unexp == a0.cts_done_unexp + 1, "cancel: the DONE was not taken as an arriving message");
}

static void case_credit(uint8_t *rb, uint8_t *sb)
{
	struct fi_iwarpd_stats a0, a1, b0, b1;
	struct fi_cq_tagged_entry e;
	struct fi_context rc, sc;
	stats(&A, &a0);
	stats(&B, &b0);
	/* A granted a credit when it took B's last rendezvous; B may not
	 * have read it yet. A makes no call from here until B's send is done. */
	if (!off && b0.credit_taken == b0.credit_used)
		await_credit(b0.credit_taken);
	fill(sb, BIG, 10);
	memset(rb, 0, BIG);
	POST(fi_tsend(B.ep, sb, BIG, NULL, B.peer, 10, &sc), "B: fi_tsend");
	/* By the credit, B's send completes before A posts; as an RTS (off),
	 * only after A's receive took it. */
	if (!off)
		b_send_done("credit: B's send");
	stats(&A, &a1);
	stats(&B, &b1);
	if (!off) {
		EXPECT(b1.credit_used == b0.credit_used + 1, "credit: B used %llu credits, want 1",
		       (unsigned long long)(b1.credit_used - b0.credit_used));
		EXPECT(a1.credit_done == a0.credit_done, "credit: A took a message without a call");
	} else {
		EXPECT(a1.credit_granted == 0 && b1.credit_used == 0, "off: a credit was granted or used");
	}
	POST(fi_trecv(A.ep, rb, BIG, NULL, A.peer, 10, 0, &rc), "A: fi_trecv");
	if (off)
		b_send_done("credit: B's send");
	reap(&A, &e, "credit: A's receive");
	EXPECT(e.op_context == &rc && e.len == BIG && e.tag == 10 && same(rb, BIG, 10),
	       "credit: A's receive: context %p len %zu tag %llu, data %s", e.op_context, e.len,
	       (unsigned long long)e.tag, same(rb, BIG, 10) ? "intact" : "wrong");
	stats(&A, &a1);
	if (!off)
		EXPECT(a1.credit_done == a0.credit_done + 1, "credit: A's receive was not the credit's message");
}

static void case_order(uint8_t *rb, uint8_t *sb)
{
	struct fi_iwarpd_stats b0, b1;
	struct fi_cq_tagged_entry e;
	struct fi_context rw, rd, s1, s2;
	static uint8_t small[64], small_rx[BIG];
	stats(&B, &b0);
	if (!off && b0.credit_taken == b0.credit_used)
		await_credit(b0.credit_taken);
	fill(sb, BIG, 11);
	fill(small, sizeof(small), 12);
	memset(rb, 0, BIG);
	memset(small_rx, 0, BIG);
	POST(fi_tsend(B.ep, sb, BIG, NULL, B.peer, 11, &s1), "B: fi_tsend large");
	POST(fi_tsend(B.ep, small, sizeof(small), NULL, B.peer, 11, &s2), "B: fi_tsend small");
	stats(&B, &b1);
	if (!off)
		EXPECT(b1.credit_used == b0.credit_used + 1, "order: the large send did not use the credit");
	POST(fi_trecv(A.ep, rb, BIG, NULL, FI_ADDR_UNSPEC, 11, 0, &rw), "A: fi_trecv any");
	POST(fi_trecv(A.ep, small_rx, BIG, NULL, A.peer, 11, 0, &rd), "A: fi_trecv directed");
	for (int i = 0; i < 2; i++) {
		reap(&A, &e, "order: receives");
		if (e.op_context == &rw)
			EXPECT(e.len == BIG && same(rb, BIG, 11), "order: the first receive got %zu octets, want the large message",
			       e.len);
		else
			EXPECT(e.op_context == &rd && e.len == sizeof(small) && same(small_rx, sizeof(small), 12),
			       "order: the second receive got %zu octets, want the small message", e.len);
	}
	for (int i = 0; i < 2; i++)
		b_send_done("order: B's sends");
}

static void case_stranger(struct fid_fabric *fab, struct fi_info *info, uint8_t *rb, uint8_t *sb)
{
	struct fi_iwarpd_stats a0, a1, b0, b1;
	struct fi_cq_tagged_entry e;
	struct fi_context rc, sc, cr, cs;
	static uint8_t small[64], small_rx[64];
	char name[64];
	size_t len = sizeof(name);
	open_side(fab, info, &C);
	CHECK(fi_getname(&B.ep->fid, name, &len));
	if (fi_av_insert(C.av, name, 1, &C.peer, 0, NULL) != 1)
		fitest_die("C: fi_av_insert");
	fill(small, sizeof(small), 13);
	POST(fi_trecv(B.ep, small_rx, sizeof(small_rx), NULL, FI_ADDR_UNSPEC, 20, 0, &cr), "B: fi_trecv from C");
	POST(fi_tsend(C.ep, small, sizeof(small), NULL, C.peer, 20, &cs), "C: fi_tsend");
	reap(&C, &e, "stranger: C's send");
	reap(&B, &e, "stranger: B's receive from C");
	EXPECT(e.op_context == &cr && same(small_rx, sizeof(small_rx), 13), "stranger: B's receive from C");
	stats(&A, &a0);
	stats(&B, &b0);
	if (!off && b0.credit_taken == b0.credit_used)
		await_credit(b0.credit_taken);
	fill(sb, BIG, 14);
	memset(rb, 0, BIG);
	POST(fi_tsend(B.ep, sb, BIG, NULL, B.peer, 21, &sc), "B: fi_tsend");
	if (!off)
		b_send_done("stranger: B's send");
	stats(&B, &b1);
	if (!off)
		EXPECT(b1.credit_used == b0.credit_used + 1, "stranger: B used %llu credits after a message it could not count",
		       (unsigned long long)(b1.credit_used - b0.credit_used));
	POST(fi_trecv(A.ep, rb, BIG, NULL, A.peer, 21, 0, &rc), "A: fi_trecv");
	if (off)
		b_send_done("stranger: B's send");
	reap(&A, &e, "stranger: A's receive");
	EXPECT(e.op_context == &rc && e.len == BIG && same(rb, BIG, 14), "stranger: A's receive: len %zu, data %s", e.len,
	       same(rb, BIG, 14) ? "intact" : "wrong");
	stats(&A, &a1);
	if (!off)
		EXPECT(a1.credit_done == a0.credit_done + 1, "stranger: A's receive was not the credit's message");
	fi_close(&C.ep->fid);
	fi_close(&C.cq->fid);
	fi_close(&C.av->fid);
	fi_close(&C.dom->fid);
}

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "iwarpd";
	struct fi_info *hints = fi_allocinfo(), *info;
	struct fid_fabric *fab;
	static uint8_t rb[BIG], sb[BIG];
	off = argc > 2 && !strcmp(argv[2], "off");
	if (off)
		setenv("FI_IWARPD_CTS", "0", 1);
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_TAGGED | FI_DIRECTED_RECV;
	hints->mode = FI_CONTEXT;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->fabric_attr->prov_name = strdup(prov);
	CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &info));
	CHECK(fi_fabric(info->fabric_attr, &fab, NULL));
	open_side(fab, info, &A);
	open_side(fab, info, &B);
	if (!A.ops || !B.ops)
		fitest_die("the provider has no " FI_IWARPD_STATS_OPS);
	connect_sides();
	case_progress(rb, sb);
	case_eager(rb, sb);
	case_wildcard(rb, sb);
	case_unexpected(rb, sb);
	case_between(rb, sb);
	case_cancel(rb, sb);
	case_credit(rb, sb);
	case_order(rb, sb);
	case_stranger(fab, info, rb, sb);
	fi_close(&A.ep->fid);
	fi_close(&B.ep->fid);
	fi_close(&A.cq->fid);
	fi_close(&B.cq->fid);
	fi_close(&B.av->fid);
	fi_close(&B.dom->fid);
	return fitest_close(A.av, A.dom, fab, info, hints);
}
