/*
 * fi_rx_size — an FI_EP_DGRAM endpoint's receive depth and backlog:
 * fi_rx_size_left (fi_endpoint(3)) reports the rx_attr->size asked for
 * less the receives outstanding, and messages sent before any receive is
 * posted are not lost: they wait (in the daemon's socket, docs/iwarpd.md
 * "UD receive backlog") and complete, in order, on the receives posted
 * afterwards.
 *
 * One process, two endpoints on the daemon named by FI_IWARPD_SOCKET.
 *   fi_rx_size [PROV]      prints "fi_rx_size: ok" and exits 0, else 1
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

#define FITEST_NAME "fi_rx_size"
#include "fitest.h"

enum { DEPTH = 64, MSGS = 10, LEN = 32 };

/* next reads one completion of cq (bounded: 10 s); an error completion
 * is a failure. */
static void next(struct fid_cq *cq, struct fi_cq_msg_entry *e)
{
	double end = now_s() + 10;
	while (now_s() < end) {
		ssize_t r = fi_cq_read(cq, e, 1);
		if (r == 1)
			return;
		if (r == -FI_EAVAIL) {
			struct fi_cq_err_entry err = {0};
			CHECK(fi_cq_readerr(cq, &err, 0));
			fprintf(stderr, "fi_rx_size: error completion: %s\n", fi_strerror(err.err));
			exit(1);
		}
		if (r != -FI_EAGAIN)
			CHECK(r);
	}
	fprintf(stderr, "fi_rx_size: no completion within 10 s\n");
	exit(1);
}

/* rx_left is fi_rx_size_left: marked deprecated in the libfabric 1.17
 * headers, still in the ABI and in every provider's fi_ops_ep. */
static ssize_t rx_left(struct fid_ep *ep)
{
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
	return fi_rx_size_left(ep);
#pragma GCC diagnostic pop
}

int main(int argc, char **argv)
{
	struct fi_info *hints = fi_allocinfo(), *info;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_av *av;
	struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_MSG};
	struct fi_av_attr ava = {.type = FI_AV_TABLE};
	struct fid_ep *ep[2];
	struct fid_cq *cq[2];
	fi_addr_t peer;
	char name[64], msg[MSGS][LEN], bufs[MSGS][LEN];
	size_t namelen;
	struct fi_context ctx[MSGS], sctx[MSGS];
	struct fi_cq_msg_entry e;
	ssize_t left;

	hints->ep_attr->type = FI_EP_DGRAM;
	hints->caps = FI_MSG;
	hints->fabric_attr->prov_name = strdup(argc > 1 ? argv[1] : "iwarpd");
	CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &info));
	info->rx_attr->size = DEPTH;
	CHECK(fi_fabric(info->fabric_attr, &fab, NULL));
	CHECK(fi_domain(fab, info, &dom, NULL));
	CHECK(fi_av_open(dom, &ava, &av, NULL));
	fitest_open_eps(dom, info, av, &cqa, 2, ep, cq);
	namelen = sizeof(name);
	CHECK(fi_getname(&ep[1]->fid, name, &namelen));
	EXPECT(fi_av_insert(av, name, 1, &peer, 0, NULL) == 1, "fi_av_insert");

	left = rx_left(ep[1]);
	EXPECT(left == DEPTH, "fi_rx_size_left %zd of a fresh endpoint, want rx_attr->size %d", left, DEPTH);

	/* Messages before any receive: they wait for the receives. */
	for (int k = 0; k < MSGS; k++) {
		snprintf(msg[k], LEN, "message %d", k);
		CHECK(fi_send(ep[0], msg[k], LEN, NULL, peer, &sctx[k]));
	}
	for (int k = 0; k < MSGS; k++) {
		next(cq[0], &e);
		EXPECT(e.flags & FI_SEND, "send completion %d: flags %#llx", k, (unsigned long long)e.flags);
	}
	memset(bufs, 0, sizeof(bufs));
	for (int k = 0; k < MSGS; k++) {
		CHECK(fi_recv(ep[1], bufs[k], LEN, NULL, FI_ADDR_UNSPEC, &ctx[k]));
		left = rx_left(ep[1]);
		EXPECT(left == DEPTH - k - 1, "fi_rx_size_left %zd after %d receives posted, want %d", left, k + 1,
		       DEPTH - k - 1);
	}
	for (int k = 0; k < MSGS; k++) {
		next(cq[1], &e);
		EXPECT(e.op_context == &ctx[k], "receive %d: context %p, want %p", k, e.op_context, (void *)&ctx[k]);
		EXPECT((e.flags & FI_RECV) && e.len == LEN, "receive %d: flags %#llx len %zu", k,
		       (unsigned long long)e.flags, e.len);
		EXPECT(!strcmp(bufs[k], msg[k]), "receive %d holds '%s', want '%s'", k, bufs[k], msg[k]);
	}
	left = rx_left(ep[1]);
	EXPECT(left == DEPTH, "fi_rx_size_left %zd once every receive completed, want %d", left, DEPTH);

	for (int i = 0; i < 2; i++) {
		fi_close(&ep[i]->fid);
		fi_close(&cq[i]->fid);
	}
	return fitest_close(av, dom, fab, info, hints);
}
