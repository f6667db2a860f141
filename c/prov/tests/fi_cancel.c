/*
 * fi_cancel — cancelling posted receives of an FI_EP_RDM endpoint
 * (fi_endpoint(3) fi_cancel, fi_cq(3) FI_ECANCELED): tagged and untagged
 * receives are cancelled, each produces exactly one error completion
 * FI_ECANCELED with its context and flags, a second cancel or an unknown
 * context gives -FI_ENOENT, and messages sent afterwards go to the
 * receives still posted, never to a cancelled one.
 *
 * One process, two endpoints on the daemon named by FI_IWARPD_SOCKET.
 *   fi_cancel [PROV]       prints "fi_cancel: ok" and exits 0, else 1
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#define FITEST_NAME "fi_cancel"
#include "fitest.h"

struct side {
	struct fid_ep *ep;
	struct fid_cq *cq;
	fi_addr_t peer;
};

/* next reads one completion or error completion (bounded: 10 s). */
static int next(struct side *s, struct fi_cq_tagged_entry *e, struct fi_cq_err_entry *err)
{
	double end = now_s() + 10;
	while (now_s() < end) {
		ssize_t r = fi_cq_read(s->cq, e, 1);
		if (r == 1)
			return 0;
		if (r == -FI_EAVAIL) {
			memset(err, 0, sizeof(*err));
			CHECK(fi_cq_readerr(s->cq, err, 0));
			return 1;
		}
		if (r != -FI_EAGAIN)
			CHECK(r);
	}
	fprintf(stderr, "fi_cancel: no completion within 10 s\n");
	exit(1);
}

/* quiet checks that nothing more completes on s for a moment (the
 * cancelled receives must never complete). */
static void quiet(struct side *s)
{
	struct fi_cq_tagged_entry e;
	double end = now_s() + 0.2;
	while (now_s() < end) {
		ssize_t r = fi_cq_read(s->cq, &e, 1);
		EXPECT(r == -FI_EAGAIN, "unexpected completion (%zd, context %p)", r, r == 1 ? e.op_context : NULL);
		if (r != -FI_EAGAIN)
			return;
	}
}

int main(int argc, char **argv)
{
	struct fi_info *hints = fi_allocinfo(), *info;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_av *av;
	struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_TAGGED};
	struct fi_av_attr ava = {.type = FI_AV_TABLE};
	struct side a, b;
	char name[64], bufs[6][32] = {{0}}, msg[3][32] = {"tag one", "untagged", "tag two"};
	size_t namelen;
	struct fi_context ctx[8];
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err;

	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG | FI_TAGGED;
	hints->fabric_attr->prov_name = strdup(argc > 1 ? argv[1] : "iwarpd");
	CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &info));
	CHECK(fi_fabric(info->fabric_attr, &fab, NULL));
	CHECK(fi_domain(fab, info, &dom, NULL));
	CHECK(fi_av_open(dom, &ava, &av, NULL));
	struct side *sides[2] = {&a, &b};
	for (int i = 0; i < 2; i++) {
		fitest_open_eps(dom, info, av, &cqa, 1, &sides[i]->ep, &sides[i]->cq);
	}
	namelen = sizeof(name);
	CHECK(fi_getname(&b.ep->fid, name, &namelen));
	EXPECT(fi_av_insert(av, name, 1, &a.peer, 0, NULL) == 1, "fi_av_insert");

	/* Post: tagged 1 (ctx 0), untagged (ctx 1), tagged 2 (ctx 2). */
	CHECK(fi_trecv(b.ep, bufs[0], sizeof(bufs[0]), NULL, FI_ADDR_UNSPEC, 1, 0, &ctx[0]));
	CHECK(fi_recv(b.ep, bufs[1], sizeof(bufs[1]), NULL, FI_ADDR_UNSPEC, &ctx[1]));
	CHECK(fi_trecv(b.ep, bufs[2], sizeof(bufs[2]), NULL, FI_ADDR_UNSPEC, 2, 0, &ctx[2]));

	/* Cancel the first two; an unknown context and a repeat are ENOENT. */
	EXPECT(fi_cancel(&b.ep->fid, &ctx[0]) == 0, "cancel of a posted tagged receive");
	EXPECT(fi_cancel(&b.ep->fid, &ctx[1]) == 0, "cancel of a posted untagged receive");
	EXPECT(fi_cancel(&b.ep->fid, &ctx[0]) == -FI_ENOENT, "second cancel of the same receive");
	EXPECT(fi_cancel(&b.ep->fid, &ctx[7]) == -FI_ENOENT, "cancel of an unknown context");
	for (int k = 0; k < 2; k++) {
		EXPECT(next(&b, &e, &err) == 1, "cancel %d: a normal completion", k);
		EXPECT(err.err == FI_ECANCELED, "cancel %d: error %d (%s), want FI_ECANCELED", k, err.err,
		       fi_strerror(err.err));
		EXPECT(err.op_context == &ctx[k], "cancel %d: context %p, want %p", k, err.op_context, (void *)&ctx[k]);
		EXPECT((err.flags & FI_RECV) && (err.flags & (k == 0 ? FI_TAGGED : FI_MSG)), "cancel %d: flags %#llx", k,
		       (unsigned long long)err.flags);
	}
	quiet(&b);

	/* New receives for tag 1 and untagged; then send all three. */
	CHECK(fi_trecv(b.ep, bufs[3], sizeof(bufs[3]), NULL, FI_ADDR_UNSPEC, 1, 0, &ctx[3]));
	CHECK(fi_recv(b.ep, bufs[4], sizeof(bufs[4]), NULL, FI_ADDR_UNSPEC, &ctx[4]));
	CHECK(fi_tsend(a.ep, msg[0], sizeof(msg[0]), NULL, a.peer, 1, &ctx[5]));
	CHECK(fi_send(a.ep, msg[1], sizeof(msg[1]), NULL, a.peer, &ctx[5]));
	CHECK(fi_tsend(a.ep, msg[2], sizeof(msg[2]), NULL, a.peer, 2, &ctx[5]));
	for (int k = 0; k < 3; k++) {
		EXPECT(next(&a, &e, &err) == 0, "send %d failed: %s", k, fi_strerror(err.err));
		EXPECT(next(&b, &e, &err) == 0, "receive %d failed: %s", k, fi_strerror(err.err));
		if (e.op_context == &ctx[3])
			EXPECT(!strcmp(bufs[3], msg[0]), "tag 1 receive holds '%s'", bufs[3]);
		else if (e.op_context == &ctx[4])
			EXPECT(!strcmp(bufs[4], msg[1]), "untagged receive holds '%s'", bufs[4]);
		else if (e.op_context == &ctx[2])
			EXPECT(!strcmp(bufs[2], msg[2]), "tag 2 receive holds '%s'", bufs[2]);
		else
			EXPECT(0, "completion of context %p (a cancelled receive?)", e.op_context);
	}
	EXPECT(!bufs[0][0] && !bufs[1][0], "a cancelled receive's buffer was written");
	quiet(&b);

	for (int i = 0; i < 2; i++) {
		fi_close(&sides[i]->ep->fid);
		fi_close(&sides[i]->cq->fid);
	}
	return fitest_close(av, dom, fab, info, hints);
}
