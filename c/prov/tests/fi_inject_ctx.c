/*
 * fi_inject_ctx — which tagged send forms report their own context in the
 * send's completion (fi_cq(3) op_context: "the application specified
 * context value that was provided with an asynchronous operation"; fi_msg(3):
 * only fi_inject suppresses the completion, the FI_INJECT flag does not).
 * Issue 19: fabtests' fi_msg_inject -A inject fails over iwarpd;ofi_rxd and
 * udp;ofi_rxd alike; this names the form that fails and shows the core
 * provider under RxD plays no part (docs/libfabric.md "Still failing").
 *
 * Two RDM endpoints of PROV (FI_TAGGED, FI_CONTEXT) in one process, each
 * with its own CQ; for each form a tagged receive on B and an 8-octet
 * tagged send from A, both CQs read until both completions came:
 *   fi_tsend; fi_tsendmsg with 0, FI_COMPLETION, FI_INJECT_COMPLETE,
 *   FI_INJECT, FI_INJECT|FI_COMPLETION; fi_tsend on an endpoint whose
 *   tx_attr->op_flags is FI_INJECT.
 * Each prints "FORM: send context ok|NULL|wrong|none, receive context
 * ok|wrong|none".
 *   fi_inject_ctx PROV          every form must say ok, ok ("fi_inject_ctx: ok")
 *   fi_inject_ctx PROV report   only the forms without FI_INJECT must; the
 *                               FI_INJECT forms are reported, for comparison
 * Exit 0 when no EXPECT failed, else 1.
 */
#include <string.h>
#include <unistd.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_tagged.h>

#define FITEST_NAME "fi_inject_ctx"
#include "fitest.h"

static struct fid_domain *dom;
static struct fid_av *av;
static struct fid_ep *ep[2];
static struct fid_cq *cq[2];
static fi_addr_t peer;
static char sbuf[64], rbuf[64];

static void open_pair(struct fi_info *info, uint64_t tx_op_flags)
{
	struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_TAGGED};
	char name[64];
	size_t len = sizeof(name);

	info->tx_attr->op_flags = tx_op_flags;
	fitest_open_eps(dom, info, av, &cqa, 2, ep, cq);
	CHECK(fi_getname(&ep[1]->fid, name, &len));
	if (fi_av_insert(av, name, 1, &peer, 0, NULL) != 1)
		fitest_die("fi_av_insert of the receiver's address failed");
}

static void close_pair(void)
{
	CHECK(fi_av_remove(av, &peer, 1, 0));
	for (int i = 0; i < 2; i++) {
		CHECK(fi_close(&ep[i]->fid));
		CHECK(fi_close(&cq[i]->fid));
	}
}

static const char *verdict(int n, void *got, void *want)
{
	if (!n)
		return "none";
	if (got == want)
		return "ok";
	return got ? "wrong" : "NULL";
}

/* one sends by fi_tsend (msg_flags < 0) or fi_tsendmsg(msg_flags) and
 * checks both completions' contexts; strict: the send's must be right. */
static void one(const char *form, long long msg_flags, int strict)
{
	struct fi_context sctx, rctx;
	struct iovec iov = {sbuf, 8};
	struct fi_msg_tagged m = {.msg_iov = &iov, .iov_count = 1, .addr = peer, .tag = 7, .context = &sctx};
	struct fi_cq_tagged_entry e;
	void *sgot = NULL, *rgot = NULL;
	int ns = 0, nr = 0;

	fitest_set_deadline(10);
	POST(fi_trecv(ep[1], rbuf, sizeof(rbuf), NULL, FI_ADDR_UNSPEC, 7, 0, &rctx), "fi_trecv");
	for (;;) {
		ssize_t r = msg_flags < 0 ? fi_tsend(ep[0], sbuf, 8, NULL, peer, 7, &sctx)
					  : fi_tsendmsg(ep[0], &m, (uint64_t)msg_flags);
		if (r != -FI_EAGAIN) {
			CHECK(r);
			break;
		}
		/* Progress both endpoints (manual progress), consume nothing. */
		(void)fi_cq_read(cq[0], NULL, 0);
		(void)fi_cq_read(cq[1], NULL, 0);
		fitest_check_deadline(form);
	}
	while (!ns || !nr) {
		if (fi_cq_read(cq[0], &e, 1) == 1 && !ns++)
			sgot = e.op_context;
		if (fi_cq_read(cq[1], &e, 1) == 1 && !nr++)
			rgot = e.op_context;
		if (now_s() > fitest_deadline_s)
			break;
		sched_yield();
	}
	printf("%s: send context %s, receive context %s\n", form, verdict(ns, sgot, &sctx), verdict(nr, rgot, &rctx));
	EXPECT(nr && rgot == &rctx, "%s: the receive's completion: %d, context %p, want %p", form, nr, rgot,
	       (void *)&rctx);
	if (strict)
		EXPECT(ns && sgot == &sctx, "%s: the send's completion: %d, context %p, want %p", form, ns, sgot,
		       (void *)&sctx);
}

int main(int argc, char **argv)
{
	struct fi_info *hints, *info;
	struct fid_fabric *fab;
	struct fi_av_attr ava = {.type = FI_AV_MAP};
	int strict;

	if (argc < 2 || argc > 3 || (argc == 3 && strcmp(argv[2], "report"))) {
		fprintf(stderr, "usage: fi_inject_ctx PROV [report]\n");
		return 2;
	}
	strict = argc == 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	hints = fi_allocinfo();
	if (!hints)
		return 1;
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_TAGGED;
	hints->mode = FI_CONTEXT;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->fabric_attr->prov_name = strdup(argv[1]);
	CHECK(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", NULL, 0, hints, &info));
	printf("provider %s, inject_size %zu\n", info->fabric_attr->prov_name, info->tx_attr->inject_size);
	CHECK(fi_fabric(info->fabric_attr, &fab, NULL));
	CHECK(fi_domain(fab, info, &dom, NULL));
	CHECK(fi_av_open(dom, &ava, &av, NULL));

	open_pair(info, 0);
	one("fi_tsend", -1, 1);
	one("fi_tsendmsg(0)", 0, 1);
	one("fi_tsendmsg(FI_COMPLETION)", (long long)FI_COMPLETION, 1);
	one("fi_tsendmsg(FI_INJECT_COMPLETE)", (long long)FI_INJECT_COMPLETE, 1);
	one("fi_tsendmsg(FI_INJECT)", (long long)FI_INJECT, strict);
	one("fi_tsendmsg(FI_INJECT|FI_COMPLETION)", (long long)(FI_INJECT | FI_COMPLETION), strict);
	close_pair();

	open_pair(info, FI_INJECT);
	one("fi_tsend, tx_attr->op_flags FI_INJECT", -1, strict);
	close_pair();
	return fitest_close(av, dom, fab, info, hints);
}
