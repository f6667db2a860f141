/*
 * fi_poll — poll sets of the provider (fi_poll(3)): fi_poll_open on the
 * domain, fi_poll_add / fi_poll_del of CQs and counters, and fi_poll,
 * which progresses the endpoints (manual progress: nobody reads a CQ
 * while the test waits in fi_poll) and returns the context of each CQ
 * with completions or error entries and of each counter whose value or
 * error value changed since the poll set last reported it, at most count
 * of them. Also the errors: reserved attr flags, a member of the wrong
 * class, a second add, a del of a non-member, and -FI_EBUSY from
 * fi_close of a member CQ and of a poll set that still has members.
 *
 * One process, two FI_EP_RDM endpoints on the daemon named by
 * FI_IWARPD_SOCKET: a sends to b; a's CQ and send counter, b's CQ and
 * receive counter are the members.
 *   fi_poll [PROV]         prints "fi_poll: ok" and exits 0, else 1
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#define FITEST_NAME "fi_poll"
#include "fitest.h"

/* The members' contexts: what fi_poll must hand back. */
static char cq_a_ctx, cq_b_ctx, cntr_a_ctx, cntr_b_ctx;

enum { MAXCTX = 8 };

/* poll_once runs fi_poll with room for count contexts and returns how
 * many it gave (a negative return is a failure). */
static int poll_once(struct fid_poll *ps, void **ctx, int count)
{
	int n = fi_poll(ps, ctx, count);
	if (n < 0)
		fitest_die("fi_poll: %d (%s)", n, fi_strerror(-n));
	if (n > count)
		fitest_die("fi_poll gave %d contexts for room of %d", n, count);
	return n;
}

/* has reports whether ctx[0..n) holds want. */
static int has(void **ctx, int n, const void *want)
{
	for (int i = 0; i < n; i++)
		if (ctx[i] == want)
			return 1;
	return 0;
}

int main(int argc, char **argv)
{
	struct fi_info *hints = fi_allocinfo(), *info;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_av *av;
	struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_MSG};
	struct fi_cntr_attr cnta = {.events = FI_CNTR_EVENTS_COMP};
	struct fi_av_attr ava = {.type = FI_AV_TABLE};
	struct fi_poll_attr pa = {0};
	struct fid_ep *a, *b;
	struct fid_cq *cq_a, *cq_b;
	struct fid_cntr *cntr_a, *cntr_b;
	struct fid_poll *ps;
	fi_addr_t peer;
	char name[64], msg[32] = "through a poll set", buf[32] = {0}, late[32];
	size_t namelen;
	struct fi_context sctx, rctx, cctx;
	struct fi_cq_msg_entry e;
	struct fi_cq_err_entry err = {0};
	void *ctx[MAXCTX];
	int n, seen_cq_a = 0, seen_cq_b = 0, seen_cntr_a = 0, seen_cntr_b = 0, polls = 0;

	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG;
	hints->mode = FI_CONTEXT;
	hints->fabric_attr->prov_name = strdup(argc > 1 ? argv[1] : "iwarpd");
	CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &info));
	CHECK(fi_fabric(info->fabric_attr, &fab, NULL));
	CHECK(fi_domain(fab, info, &dom, NULL));
	CHECK(fi_av_open(dom, &ava, &av, NULL));
	CHECK(fi_cq_open(dom, &cqa, &cq_a, &cq_a_ctx));
	CHECK(fi_cq_open(dom, &cqa, &cq_b, &cq_b_ctx));
	CHECK(fi_cntr_open(dom, &cnta, &cntr_a, &cntr_a_ctx));
	CHECK(fi_cntr_open(dom, &cnta, &cntr_b, &cntr_b_ctx));
	CHECK(fi_endpoint(dom, info, &a, NULL));
	CHECK(fi_endpoint(dom, info, &b, NULL));
	CHECK(fi_ep_bind(a, &cq_a->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_ep_bind(b, &cq_b->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_ep_bind(a, &cntr_a->fid, FI_SEND));
	CHECK(fi_ep_bind(b, &cntr_b->fid, FI_RECV));
	CHECK(fi_ep_bind(a, &av->fid, 0));
	CHECK(fi_ep_bind(b, &av->fid, 0));
	CHECK(fi_enable(a));
	CHECK(fi_enable(b));
	namelen = sizeof(name);
	CHECK(fi_getname(&b->fid, name, &namelen));
	EXPECT(fi_av_insert(av, name, 1, &peer, 0, NULL) == 1, "fi_av_insert");

	/* fi_poll_attr.flags is reserved and must be 0. */
	pa.flags = 1;
	n = fi_poll_open(dom, &pa, &ps);
	EXPECT(n == -FI_EINVAL, "fi_poll_open with flags 1: %d, want -FI_EINVAL", n);
	pa.flags = 0;
	CHECK(fi_poll_open(dom, &pa, &ps));
	n = poll_once(ps, ctx, MAXCTX);
	EXPECT(n == 0, "fi_poll of an empty poll set: %d, want 0", n);

	CHECK(fi_poll_add(ps, &cq_a->fid, 0));
	CHECK(fi_poll_add(ps, &cq_b->fid, 0));
	CHECK(fi_poll_add(ps, &cntr_a->fid, 0));
	CHECK(fi_poll_add(ps, &cntr_b->fid, 0));
	n = fi_poll_add(ps, &av->fid, 0);
	EXPECT(n == -FI_EINVAL, "fi_poll_add of an AV: %d, want -FI_EINVAL", n);
	n = fi_poll_add(ps, &cq_a->fid, 0);
	EXPECT(n == -FI_EALREADY, "second fi_poll_add of a CQ: %d, want -FI_EALREADY", n);
	n = fi_poll_del(ps, &av->fid, 0);
	EXPECT(n == -FI_EINVAL, "fi_poll_del of a non-member: %d, want -FI_EINVAL", n);
	n = fi_close(&cq_a->fid);
	EXPECT(n == -FI_EBUSY, "fi_close of a CQ in a poll set: %d, want -FI_EBUSY", n);
	n = fi_close(&cntr_b->fid);
	EXPECT(n == -FI_EBUSY, "fi_close of a counter in a poll set: %d, want -FI_EBUSY", n);
	n = fi_close(&ps->fid);
	EXPECT(n == -FI_EBUSY, "fi_close of a poll set with members: %d, want -FI_EBUSY", n);

	/* Nothing happened yet: no CQ holds anything, no counter moved. */
	n = poll_once(ps, ctx, MAXCTX);
	EXPECT(n == 0, "fi_poll before any transfer: %d contexts, want 0", n);

	/* One message a -> b. Only fi_poll progresses it: every member must
	 * come back, each CQ until it is read, each counter once. */
	fitest_set_deadline(10);
	POST(fi_recv(b, buf, sizeof(buf), NULL, FI_ADDR_UNSPEC, &rctx), "fi_recv");
	POST(fi_send(a, msg, sizeof(msg), NULL, peer, &sctx), "fi_send");
	while (!(seen_cq_a && seen_cq_b && seen_cntr_a && seen_cntr_b)) {
		fitest_check_deadline("fi_poll to report every member");
		n = poll_once(ps, ctx, MAXCTX);
		polls++;
		for (int i = 0; i < n; i++) {
			if (ctx[i] == &cq_a_ctx)
				seen_cq_a = 1;
			else if (ctx[i] == &cq_b_ctx)
				seen_cq_b = 1;
			else if (ctx[i] == &cntr_a_ctx) {
				EXPECT(!seen_cntr_a, "send counter reported twice for one change");
				EXPECT(fi_cntr_read(cntr_a) == 1, "send counter %llu when reported, want 1",
				       (unsigned long long)fi_cntr_read(cntr_a));
				seen_cntr_a = 1;
			} else if (ctx[i] == &cntr_b_ctx) {
				EXPECT(!seen_cntr_b, "receive counter reported twice for one change");
				EXPECT(fi_cntr_read(cntr_b) == 1, "receive counter %llu when reported, want 1",
				       (unsigned long long)fi_cntr_read(cntr_b));
				seen_cntr_b = 1;
			} else
				fitest_die("fi_poll gave context %p, not a member's", ctx[i]);
		}
	}
	/* The CQs are still unread: fi_poll keeps reporting them, and only them. */
	n = poll_once(ps, ctx, MAXCTX);
	EXPECT(n == 2 && has(ctx, n, &cq_a_ctx) && has(ctx, n, &cq_b_ctx),
	       "fi_poll with two unread CQs and unchanged counters: %d contexts, want the two CQs", n);
	CHECK(fi_cq_read(cq_a, &e, 1));
	EXPECT(e.op_context == &sctx && (e.flags & FI_SEND), "send completion: context %p flags %#llx",
	       e.op_context, (unsigned long long)e.flags);
	CHECK(fi_cq_read(cq_b, &e, 1));
	EXPECT(e.op_context == &rctx && (e.flags & FI_RECV), "receive completion: context %p flags %#llx",
	       e.op_context, (unsigned long long)e.flags);
	EXPECT(!strcmp(buf, msg), "received '%s', want '%s'", buf, msg);
	n = poll_once(ps, ctx, MAXCTX);
	EXPECT(n == 0, "fi_poll once both CQs were read: %d contexts, want 0", n);

	/* count bounds the contexts; the rest come on the next call. */
	CHECK(fi_cntr_add(cntr_a, 1));
	CHECK(fi_cntr_add(cntr_b, 1));
	n = poll_once(ps, ctx, 1);
	EXPECT(n == 1 && ctx[0] == &cntr_a_ctx, "fi_poll with room for 1: %d, first %p, want the send counter", n,
	       n > 0 ? ctx[0] : NULL);
	n = poll_once(ps, ctx, MAXCTX);
	EXPECT(n == 1 && ctx[0] == &cntr_b_ctx, "fi_poll after it: %d, first %p, want the receive counter", n,
	       n > 0 ? ctx[0] : NULL);
	n = poll_once(ps, ctx, 0);
	EXPECT(n == 0, "fi_poll with count 0: %d", n);
	n = poll_once(ps, ctx, MAXCTX);
	EXPECT(n == 0, "fi_poll with nothing new: %d contexts, want 0", n);

	/* An error count is a change too. */
	CHECK(fi_cntr_adderr(cntr_b, 1));
	n = poll_once(ps, ctx, MAXCTX);
	EXPECT(n == 1 && ctx[0] == &cntr_b_ctx, "fi_poll after fi_cntr_adderr: %d, first %p, want the receive counter",
	       n, n > 0 ? ctx[0] : NULL);

	/* A CQ holding only an error entry is reported: a cancelled receive
	 * (which also counts as an error of b's receive counter). */
	POST(fi_recv(b, late, sizeof(late), NULL, FI_ADDR_UNSPEC, &cctx), "fi_recv");
	CHECK(fi_cancel(&b->fid, &cctx));
	n = poll_once(ps, ctx, MAXCTX);
	EXPECT(n == 2 && ctx[0] == &cq_b_ctx && ctx[1] == &cntr_b_ctx,
	       "fi_poll with an error entry in b's CQ: %d, first %p, want b's CQ and receive counter", n,
	       n > 0 ? ctx[0] : NULL);
	EXPECT(fi_cntr_readerr(cntr_b) == 2, "receive counter errors %llu, want 2",
	       (unsigned long long)fi_cntr_readerr(cntr_b));

	/* fi_poll_del: the CQ is no longer reported and may be closed. */
	CHECK(fi_poll_del(ps, &cq_b->fid, 0));
	n = fi_poll_del(ps, &cq_b->fid, 0);
	EXPECT(n == -FI_EINVAL, "second fi_poll_del: %d, want -FI_EINVAL", n);
	n = poll_once(ps, ctx, MAXCTX);
	EXPECT(n == 0, "fi_poll after deleting the CQ with the error entry: %d contexts, want 0", n);
	n = (int)fi_cq_read(cq_b, &e, 1);
	EXPECT(n == -FI_EAVAIL, "fi_cq_read of the cancelled receive: %d, want -FI_EAVAIL", n);
	CHECK(fi_cq_readerr(cq_b, &err, 0));
	EXPECT(err.err == FI_ECANCELED && err.op_context == &cctx, "error entry: err %d context %p", err.err,
	       err.op_context);

	CHECK(fi_poll_del(ps, &cq_a->fid, 0));
	CHECK(fi_poll_del(ps, &cntr_a->fid, 0));
	CHECK(fi_poll_del(ps, &cntr_b->fid, 0));
	CHECK(fi_close(&ps->fid));
	CHECK(fi_close(&a->fid));
	CHECK(fi_close(&b->fid));
	CHECK(fi_close(&cq_a->fid));
	CHECK(fi_close(&cq_b->fid));
	CHECK(fi_close(&cntr_a->fid));
	CHECK(fi_close(&cntr_b->fid));
	printf("fi_poll: every member reported within %d polls\n", polls);
	return fitest_close(av, dom, fab, info, hints);
}
