/*
 * fi_srx — a shared receive context over FI_EP_MSG endpoints
 * (fi_endpoint(3) fi_srx_context, fi_ep_bind(ep, srx); fi_getinfo(3)
 * rx_ctx_cnt FI_SHARED_CONTEXT, fi_domain(3) max_ep_srx_ctx; fi_cancel(3)).
 *
 * One process, two fabrics (two daemon sessions, as two processes would
 * have) on the daemon named by FI_IWARPD_SOCKET. The receiver accepts two
 * connections onto endpoints sharing one srx, each endpoint with a receive
 * CQ of its own:
 *   1. fi_getinfo with rx_ctx_cnt FI_SHARED_CONTEXT says it back, and
 *      max_ep_srx_ctx is at least 1;
 *   2. the sender sends one message on each connection BEFORE the receiver
 *      posts anything (the daemon holds them, verbsd/rc/hold.go); then two
 *      receives posted to the srx take both: each completes on the CQ of
 *      the endpoint its message came on, with its data intact;
 *   3. fi_cancel of a receive posted to the srx: an FI_ECANCELED error on
 *      the srx's CQ; the next message goes to the receive posted after it
 *      and the cancelled buffer is never written;
 *      a NULL buffer with a length is taken (tcp takes it; fabtests'
 *      fi_shared_ctx -e msg posts one): a 0-octet message completes into
 *      it, a longer one completes with FI_EFAULT;
 *   4. fi_recv on the endpoint itself is refused; fi_close(srx) is
 *      -FI_EBUSY while endpoints use it, 0 once they are closed.
 *
 *   fi_srx [PROV]     prints "fi_srx: ok" and exits 0, else 1
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

#define FITEST_NAME "fi_srx"
#include "fitest.h"

#define MSGLEN 64

struct side {
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_eq *eq;
	struct fid_cq *cq[2];
	struct fid_ep *ep[2];
};

static void open_side(struct side *s, struct fi_info *info)
{
	struct fi_eq_attr ea = {.wait_obj = FI_WAIT_UNSPEC};
	struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_MSG, .wait_obj = FI_WAIT_NONE};
	memset(s, 0, sizeof(*s));
	CHECK(fi_fabric(info->fabric_attr, &s->fab, NULL));
	CHECK(fi_eq_open(s->fab, &ea, &s->eq, NULL));
	CHECK(fi_domain(s->fab, info, &s->dom, NULL));
	CHECK(fi_cq_open(s->dom, &ca, &s->cq[0], NULL));
	CHECK(fi_cq_open(s->dom, &ca, &s->cq[1], NULL));
}

static ssize_t next_event(struct side *s, uint32_t *ev, struct fi_eq_cm_entry *e, size_t len)
{
	fitest_set_deadline(10);
	for (;;) {
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
		fitest_check_deadline("an EQ event");
	}
}

/* One completion of cq (an error is returned as -err with *ctx set). */
static ssize_t one_comp(struct fid_cq *cq, struct fi_cq_msg_entry *c, const char *what)
{
	fitest_set_deadline(10);
	for (;;) {
		ssize_t n = fi_cq_read(cq, c, 1);
		if (n == 1)
			return 1;
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry err;
			memset(&err, 0, sizeof(err));
			CHECK(fi_cq_readerr(cq, &err, 0));
			c->op_context = err.op_context;
			return -err.err;
		}
		if (n != -FI_EAGAIN)
			CHECK(n);
		fitest_check_deadline(what);
	}
}

int main(int argc, char **argv)
{
	struct fi_info *hints = fi_allocinfo(), *info;
	struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_MSG, .wait_obj = FI_WAIT_NONE};
	unsigned char evbuf[sizeof(struct fi_eq_cm_entry) + 256];
	struct fi_eq_cm_entry *e = (struct fi_eq_cm_entry *)evbuf;
	static char rbuf[4][MSGLEN], sbuf[3][MSGLEN];
	struct fi_context rctx[4], sctx[3];
	struct fi_cq_msg_entry c;
	struct side r, s;
	struct fid_pep *pep;
	struct fid_ep *srx;
	struct fid_cq *srxcq;
	char addr[64];
	size_t alen = sizeof(addr);
	uint32_t ev;
	ssize_t n;
	int i;

	if (!hints)
		fitest_die("fi_allocinfo");
	hints->ep_attr->type = FI_EP_MSG;
	hints->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT;
	hints->caps = FI_MSG;
	hints->addr_format = FI_SOCKADDR_IN;
	hints->fabric_attr->prov_name = strdup(argc > 1 ? argv[1] : "iwarpd");
	CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &info));
	/* 1. */
	EXPECT(info->ep_attr->rx_ctx_cnt == FI_SHARED_CONTEXT, "rx_ctx_cnt %zu, want FI_SHARED_CONTEXT",
	       info->ep_attr->rx_ctx_cnt);
	EXPECT(info->domain_attr->max_ep_srx_ctx >= 1, "max_ep_srx_ctx %zu", info->domain_attr->max_ep_srx_ctx);

	open_side(&r, info);
	open_side(&s, info);
	CHECK(fi_srx_context(r.dom, info->rx_attr, &srx, NULL));
	CHECK(fi_cq_open(r.dom, &ca, &srxcq, NULL));
	CHECK(fi_ep_bind(srx, &srxcq->fid, FI_RECV));
	CHECK(fi_passive_ep(r.fab, info, &pep, NULL));
	CHECK(fi_pep_bind(pep, &r.eq->fid, 0));
	CHECK(fi_listen(pep));
	CHECK(fi_getname(&pep->fid, addr, &alen));

	for (i = 0; i < 2; i++) {
		CHECK(fi_endpoint(s.dom, info, &s.ep[i], NULL));
		CHECK(fi_ep_bind(s.ep[i], &s.eq->fid, 0));
		CHECK(fi_ep_bind(s.ep[i], &s.cq[i]->fid, FI_TRANSMIT | FI_RECV));
		CHECK(fi_connect(s.ep[i], addr, NULL, 0));
		n = next_event(&r, &ev, e, sizeof(evbuf));
		if (n < 0 || ev != FI_CONNREQ)
			fitest_die("no FI_CONNREQ (%zd)", n);
		CHECK(fi_endpoint(r.dom, e->info, &r.ep[i], NULL));
		fi_freeinfo(e->info);
		CHECK(fi_ep_bind(r.ep[i], &r.eq->fid, 0));
		CHECK(fi_ep_bind(r.ep[i], &srx->fid, 0));
		CHECK(fi_ep_bind(r.ep[i], &r.cq[i]->fid, FI_TRANSMIT | FI_RECV));
		CHECK(fi_enable(r.ep[i]));
		CHECK(fi_accept(r.ep[i], NULL, 0));
		n = next_event(&r, &ev, e, sizeof(evbuf));
		if (n < 0 || ev != FI_CONNECTED || e->fid != &r.ep[i]->fid)
			fitest_die("the receiver saw no FI_CONNECTED (%zd)", n);
		n = next_event(&s, &ev, e, sizeof(evbuf));
		if (n < 0 || ev != FI_CONNECTED || e->fid != &s.ep[i]->fid)
			fitest_die("the sender saw no FI_CONNECTED (%zd)", n);
	}

	/* 2. Messages before any receive: held, then taken by the srx. */
	for (i = 0; i < 2; i++) {
		snprintf(sbuf[i], MSGLEN, "message %d on connection %d", i, i);
		CHECK(fi_send(s.ep[i], sbuf[i], MSGLEN, NULL, 0, &sctx[i]));
		if (one_comp(s.cq[i], &c, "a send completion") != 1 || c.op_context != &sctx[i])
			fitest_die("send %d did not complete", i);
	}
	/* The sends completed when written to TCP; let them reach the
	 * receiving daemon (no receive is posted: they are held there). */
	{
		struct timespec ms = {0, 100 * 1000 * 1000};
		nanosleep(&ms, NULL);
	}
	memset(rbuf, 0, sizeof(rbuf));
	for (i = 0; i < 2; i++)
		POST(fi_recv(srx, rbuf[i], MSGLEN, NULL, 0, &rctx[i]), "fi_recv on the srx");
	for (i = 0; i < 2; i++) {
		n = one_comp(r.cq[i], &c, "a receive on the srx");
		EXPECT(n == 1, "connection %d: receive ended with %zd", i, n);
		if (n != 1)
			continue;
		EXPECT((c.op_context == &rctx[0] || c.op_context == &rctx[1]) && c.len == MSGLEN && (c.flags & FI_RECV),
		       "connection %d: context %p len %zu flags %#llx", i, c.op_context, c.len,
		       (unsigned long long)c.flags);
		if (c.op_context == &rctx[0] || c.op_context == &rctx[1]) {
			int k = c.op_context == &rctx[0] ? 0 : 1;
			EXPECT(!strcmp(rbuf[k], sbuf[i]), "connection %d: receive %d reads \"%.*s\"", i, k, MSGLEN,
			       rbuf[k]);
		}
	}

	/* 3. fi_cancel: reported on the srx's CQ; the buffer stays untouched
	 * and the next message goes to the receive after it. */
	memset(rbuf[2], 'x', MSGLEN);
	memset(rbuf[3], 0, MSGLEN);
	POST(fi_recv(srx, rbuf[2], MSGLEN, NULL, 0, &rctx[2]), "fi_recv on the srx");
	POST(fi_recv(srx, rbuf[3], MSGLEN, NULL, 0, &rctx[3]), "fi_recv on the srx");
	EXPECT(fi_cancel(&srx->fid, &rctx[2]) == 0, "fi_cancel of a posted receive failed");
	EXPECT(fi_cancel(&srx->fid, &rctx[2]) == -FI_ENOENT, "a second fi_cancel found the receive");
	n = one_comp(srxcq, &c, "the cancelled receive");
	EXPECT(n == -FI_ECANCELED && c.op_context == &rctx[2], "cancel: %zd context %p", n, c.op_context);
	snprintf(sbuf[2], MSGLEN, "after the cancel");
	CHECK(fi_send(s.ep[1], sbuf[2], MSGLEN, NULL, 0, &sctx[2]));
	n = one_comp(r.cq[1], &c, "the receive after the cancelled one");
	EXPECT(n == 1 && c.op_context == &rctx[3] && !strcmp(rbuf[3], sbuf[2]),
	       "after cancel: %zd context %p (want %p) reads \"%.*s\"", n, c.op_context, (void *)&rctx[3], MSGLEN,
	       rbuf[3]);
	for (i = 0; i < MSGLEN && rbuf[2][i] == 'x'; i++)
		;
	EXPECT(i == MSGLEN, "the cancelled receive's buffer was written at %d", i);

	/* 3b. A NULL buffer with a length (fabtests' fi_shared_ctx -e msg
	 * posts them): a 0-octet message completes, a longer one is
	 * FI_EFAULT and written nowhere. */
	POST(fi_recv(srx, NULL, MSGLEN, NULL, 0, &rctx[0]), "fi_recv of a NULL buffer on the srx");
	CHECK(fi_send(s.ep[0], NULL, 0, NULL, 0, &sctx[0]));
	n = one_comp(r.cq[0], &c, "a 0-octet message into a NULL buffer");
	EXPECT(n == 1 && c.op_context == &rctx[0] && c.len == 0, "0 octets, NULL buffer: %zd context %p len %zu", n,
	       c.op_context, c.len);
	POST(fi_recv(srx, NULL, MSGLEN, NULL, 0, &rctx[1]), "fi_recv of a NULL buffer on the srx");
	CHECK(fi_send(s.ep[0], sbuf[0], MSGLEN, NULL, 0, &sctx[1]));
	n = one_comp(r.cq[0], &c, "a message into a NULL buffer");
	EXPECT(n == -FI_EFAULT && c.op_context == &rctx[1], "%d octets, NULL buffer: %zd context %p", MSGLEN, n,
	       c.op_context);

	/* 4. */
	EXPECT(fi_recv(r.ep[0], rbuf[0], MSGLEN, NULL, 0, &rctx[0]) < 0,
	       "fi_recv on an endpoint of the srx was accepted");
	EXPECT(fi_close(&srx->fid) == -FI_EBUSY, "fi_close(srx) while bound is not -FI_EBUSY");
	for (i = 0; i < 2; i++) {
		CHECK(fi_close(&s.ep[i]->fid));
		CHECK(fi_close(&r.ep[i]->fid));
	}
	CHECK(fi_close(&srx->fid));
	CHECK(fi_close(&srxcq->fid));
	CHECK(fi_close(&pep->fid));
	struct side *sides[2] = {&r, &s};
	for (i = 0; i < 2; i++) {
		CHECK(fi_close(&sides[i]->cq[0]->fid));
		CHECK(fi_close(&sides[i]->cq[1]->fid));
		CHECK(fi_close(&sides[i]->dom->fid));
		CHECK(fi_close(&sides[i]->eq->fid));
		CHECK(fi_close(&sides[i]->fab->fid));
	}
	fi_freeinfo(info);
	fi_freeinfo(hints);
	if (failures) {
		fprintf(stderr, "fi_srx: %d failures\n", failures);
		return 1;
	}
	printf("fi_srx: ok\n");
	return 0;
}
