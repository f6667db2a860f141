/*
 * fi_shutdown — the end of an FI_EP_MSG connection and the completions
 * that came before it (fi_cm(3) FI_SHUTDOWN, fi_eq(3), fi_endpoint(3)
 * fi_close): a message that arrived before the peer went away must be
 * readable from the CQ before FI_SHUTDOWN is read from the EQ, because an
 * application may close the endpoint on FI_SHUTDOWN, which discards its
 * unread completions. ofi_rxm does exactly that (rxm_process_shutdown ->
 * rxm_close_conn), and lost fi_pingpong's last message: its receiver
 * waited forever (issue 10).
 *
 * One process, two fabrics (two daemon sessions, as two processes would
 * have) on the daemon named by FI_IWARPD_SOCKET. For each way the sender
 * ends the connection (fi_close: an abort with a Terminate, as RxM closes;
 * fi_shutdown: a graceful close):
 *   1. the sender sends M messages, sees them complete, ends the connection;
 *   2. the receiver reads, with fi_cq_readerr only, the N-M receives flushed
 *      by the end of the connection (so its daemon has ended it), then
 *      reads the EQ for a while: no FI_SHUTDOWN while the M messages are
 *      unread, but a new connection request behind it comes through;
 *   3. the receiver reads the M messages (in order, intact), then
 *      FI_SHUTDOWN of its endpoint, closes the endpoint as RxM does and
 *      finds nothing more in the CQ.
 *
 *   fi_shutdown [PROV]     prints "fi_shutdown: ok" and exits 0, else 1
 * Every wait is bounded (seconds times IWARPD_TEST_TIMEOUT_SCALE).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#define FITEST_NAME "fi_shutdown"
#include "fitest.h"

#define NRECV 8 /* receives the receiver posts */
#define NMSG 3  /* messages the sender sends */
#define MSGLEN 48

struct side {
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_eq *eq;
	struct fid_cq *cq;
	struct fid_ep *ep;
};

static void open_side(struct side *s, struct fi_info *info)
{
	struct fi_eq_attr ea = {.wait_obj = FI_WAIT_UNSPEC};
	struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_MSG, .wait_obj = FI_WAIT_NONE};
	memset(s, 0, sizeof(*s));
	CHECK(fi_fabric(info->fabric_attr, &s->fab, NULL));
	CHECK(fi_eq_open(s->fab, &ea, &s->eq, NULL));
	CHECK(fi_domain(s->fab, info, &s->dom, NULL));
	CHECK(fi_cq_open(s->dom, &ca, &s->cq, NULL));
}

static struct fid_ep *open_ep(struct side *s, struct fi_info *info)
{
	struct fid_ep *ep;
	CHECK(fi_endpoint(s->dom, info, &ep, NULL));
	CHECK(fi_ep_bind(ep, &s->eq->fid, 0));
	CHECK(fi_ep_bind(ep, &s->cq->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_enable(ep));
	return ep;
}

/* The next EQ event of s within secs (scaled); an error event is read and
 * reported as -err. */
static ssize_t next_event(struct side *s, uint32_t *ev, struct fi_eq_cm_entry *e, size_t len, double secs)
{
	double end = now_s() + secs * fitest_scale();
	while (now_s() < end) {
		ssize_t n = fi_eq_sread(s->eq, ev, e, len, 100, 0);
		if (n > 0)
			return n;
		if (n == -FI_EAVAIL) {
			struct fi_eq_err_entry err = {0};
			CHECK(fi_eq_readerr(s->eq, &err, 0));
			return -err.err;
		}
		if (n != -FI_EAGAIN && n != -FI_ETIMEDOUT)
			CHECK(n);
	}
	fitest_die("no EQ event in time");
	return 0;
}

/* One round: the sender ends the connection with fi_close (abort) or
 * fi_shutdown (graceful). */
static void round_trip(struct fi_info *info, struct side *r, struct side *s, struct fid_pep *pep,
		       const void *pep_addr, int abort)
{
	static char rbuf[NRECV][MSGLEN], sbuf[NMSG][MSGLEN];
	struct fi_context rctx[NRECV], sctx[NMSG];
	unsigned char evbuf[sizeof(struct fi_eq_cm_entry) + 256];
	struct fi_eq_cm_entry *e = (struct fi_eq_cm_entry *)evbuf;
	struct fi_cq_msg_entry c;
	struct fi_cq_err_entry err;
	struct fid_ep *ep2;
	uint32_t ev;
	ssize_t n;
	double end;
	int i, got, flushed;
	const char *how = abort ? "fi_close" : "fi_shutdown";

	/* Connect; the receiver posts its receives before accepting. */
	s->ep = open_ep(s, info);
	CHECK(fi_connect(s->ep, pep_addr, NULL, 0));
	n = next_event(r, &ev, e, sizeof(evbuf), 10);
	if (n < 0 || ev != FI_CONNREQ)
		fitest_die("no FI_CONNREQ");
	r->ep = open_ep(r, e->info);
	memset(rbuf, 0, sizeof(rbuf));
	for (i = 0; i < NRECV; i++)
		CHECK(fi_recv(r->ep, rbuf[i], MSGLEN, NULL, 0, &rctx[i]));
	CHECK(fi_accept(r->ep, NULL, 0));
	fi_freeinfo(e->info);
	n = next_event(r, &ev, e, sizeof(evbuf), 10);
	if (n < 0 || ev != FI_CONNECTED)
		fitest_die("the receiver saw no FI_CONNECTED");
	n = next_event(s, &ev, e, sizeof(evbuf), 10);
	if (n < 0 || ev != FI_CONNECTED)
		fitest_die("the sender saw no FI_CONNECTED");

	/* 1. NMSG messages, each completed, then the end of the connection. */
	for (i = 0; i < NMSG; i++) {
		snprintf(sbuf[i], MSGLEN, "message %d (%s)", i, how);
		CHECK(fi_send(s->ep, sbuf[i], MSGLEN, NULL, 0, &sctx[i]));
	}
	for (got = 0, end = now_s() + 10 * fitest_scale(); got < NMSG && now_s() < end;) {
		n = fi_cq_read(s->cq, &c, 1);
		if (n == 1) {
			EXPECT(c.op_context == &sctx[got], "send completion %d: context %p", got, c.op_context);
			got++;
		} else if (n != -FI_EAGAIN) {
			CHECK(n);
		}
	}
	if (got < NMSG)
		fitest_die("the sends did not complete");
	if (abort)
		CHECK(fi_close(&s->ep->fid));
	else
		CHECK(fi_shutdown(s->ep, 0));

	/* 2. The flushed receives only (fi_cq_readerr leaves the messages
	 * alone): once they are there, the receiver's QP has ended. */
	for (flushed = 0, end = now_s() + 10 * fitest_scale(); flushed < NRECV - NMSG && now_s() < end;) {
		memset(&err, 0, sizeof(err));
		n = fi_cq_readerr(r->cq, &err, 0);
		if (n == 1) {
			EXPECT(err.err == FI_ECANCELED, "%s: receive error %d, want FI_ECANCELED", how, err.err);
			flushed++;
		} else if (n != -FI_EAGAIN) {
			CHECK(n);
		}
	}
	EXPECT(flushed == NRECV - NMSG, "%s: %d receives flushed, want %d", how, flushed, NRECV - NMSG);
	/* Its FI_SHUTDOWN waits for the messages; a later event does not. */
	for (end = now_s() + 0.5 * fitest_scale(); now_s() < end;) {
		n = fi_eq_read(r->eq, &ev, e, sizeof(evbuf), 0);
		EXPECT(n == -FI_EAGAIN, "%s: EQ read %zd (event %u) while %d messages were unread", how, n,
		       n > 0 ? ev : 0, NMSG);
		if (n != -FI_EAGAIN)
			break;
	}
	ep2 = open_ep(s, info);
	CHECK(fi_connect(ep2, pep_addr, NULL, 0));
	n = next_event(r, &ev, e, sizeof(evbuf), 10);
	EXPECT(n > 0 && ev == FI_CONNREQ, "%s: a held FI_SHUTDOWN kept back a connection request (%zd, event %u)",
	       how, n, ev);
	if (n > 0 && ev == FI_CONNREQ) {
		CHECK(fi_reject(pep, e->info->handle, NULL, 0));
		fi_freeinfo(e->info);
		n = next_event(s, &ev, e, sizeof(evbuf), 10);
		/* After its own fi_shutdown the sender's endpoint gets FI_SHUTDOWN
		 * too (as verbs and tcp report it; issue 19). */
		if (!abort && n > 0 && ev == FI_SHUTDOWN && e->fid == &s->ep->fid)
			n = next_event(s, &ev, e, sizeof(evbuf), 10);
		EXPECT(n == -FI_ECONNREFUSED, "%s: rejected connect ended with %zd", how, n);
	}
	CHECK(fi_close(&ep2->fid));

	/* 3. The messages, then FI_SHUTDOWN; closing then leaves nothing. */
	for (got = 0, end = now_s() + 10 * fitest_scale(); got < NMSG && now_s() < end;) {
		n = fi_cq_read(r->cq, &c, 1);
		if (n == 1) {
			EXPECT(c.op_context == &rctx[got] && c.len == MSGLEN && (c.flags & FI_RECV),
			       "%s: message %d: context %p len %zu flags %#llx", how, got, c.op_context, c.len,
			       (unsigned long long)c.flags);
			EXPECT(!strcmp(rbuf[got], sbuf[got]), "%s: message %d reads \"%.*s\"", how, got, MSGLEN,
			       rbuf[got]);
			got++;
		} else if (n != -FI_EAGAIN) {
			CHECK(n);
		}
	}
	EXPECT(got == NMSG, "%s: %d of %d messages arrived", how, got, NMSG);
	n = next_event(r, &ev, e, sizeof(evbuf), 10);
	EXPECT(n > 0 && ev == FI_SHUTDOWN && e->fid == &r->ep->fid, "%s: after the messages: %zd, event %u", how, n,
	       ev);
	CHECK(fi_close(&r->ep->fid));
	n = fi_cq_read(r->cq, &c, 1);
	EXPECT(n == -FI_EAGAIN, "%s: CQ read after closing the endpoint: %zd", how, n);
	if (!abort) /* the sender's own FI_SHUTDOWN, if there yet, goes with it */
		CHECK(fi_close(&s->ep->fid));
}

int main(int argc, char **argv)
{
	struct fi_info *hints = fi_allocinfo(), *info;
	struct side r, s;
	struct fid_pep *pep;
	char addr[64];
	size_t alen = sizeof(addr);
	if (!hints)
		fitest_die("fi_allocinfo");
	hints->ep_attr->type = FI_EP_MSG;
	hints->caps = FI_MSG;
	hints->addr_format = FI_SOCKADDR_IN;
	hints->fabric_attr->prov_name = strdup(argc > 1 ? argv[1] : "iwarpd");
	CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &info));
	open_side(&r, info);
	open_side(&s, info);
	CHECK(fi_passive_ep(r.fab, info, &pep, NULL));
	CHECK(fi_pep_bind(pep, &r.eq->fid, 0));
	CHECK(fi_listen(pep));
	CHECK(fi_getname(&pep->fid, addr, &alen));

	round_trip(info, &r, &s, pep, addr, 1);
	round_trip(info, &r, &s, pep, addr, 0);

	CHECK(fi_close(&pep->fid));
	struct side *sides[2] = {&r, &s};
	for (int i = 0; i < 2; i++) {
		CHECK(fi_close(&sides[i]->cq->fid));
		CHECK(fi_close(&sides[i]->dom->fid));
		CHECK(fi_close(&sides[i]->eq->fid));
		CHECK(fi_close(&sides[i]->fab->fid));
	}
	fi_freeinfo(info);
	fi_freeinfo(hints);
	if (failures) {
		fprintf(stderr, "fi_shutdown: %d failures\n", failures);
		return 1;
	}
	printf("fi_shutdown: ok\n");
	return 0;
}
