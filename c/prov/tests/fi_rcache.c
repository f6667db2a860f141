/*
 * fi_rcache — the registration cache keeps the control plane off the data
 * path: N rendezvous sends (fi_send(3)) of one reused 1 MiB buffer the
 * application never registered cost at most one control round trip with
 * the daemon (one registration), counted by the session
 * (fi_ext_iwarpd.h FI_IWARPD_STATS_OPS, iwv_session_stats). The buffer's
 * content changes before every send and the receiver checks it, so a
 * cached registration reads what the buffer holds now. Staging memory is
 * made smaller than a message (FI_IWARPD_STAGING, unless set), so no send
 * can copy instead: without the cache (FI_IWARPD_MR_CACHE=0) every send
 * registers and deregisters its buffer, two round trips each.
 *
 * One process, two RDM endpoints on the daemon named by FI_IWARPD_SOCKET.
 *   fi_rcache [PROV [N]]   N sends (default 2,000; the figures in
 *                          docs/libfabric.md were taken with 10,000);
 *                          prints "fi_rcache: ok" and exits 0, else 1
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include "fi_ext_iwarpd.h"

#define FITEST_NAME "fi_rcache"
#include "fitest.h"

enum { LEN = 1 << 20 };

static long SENDS = 2000;

/* wait1 reads one completion of cq (bounded: 30 s); an error completion
 * is a failure. */
static void wait1(struct fid_cq *cq)
{
	struct fi_cq_entry e;
	struct fi_cq_err_entry err;
	double end = now_s() + 30;
	while (now_s() < end) {
		ssize_t r = fi_cq_read(cq, &e, 1);
		if (r == 1)
			return;
		if (r == -FI_EAVAIL) {
			memset(&err, 0, sizeof(err));
			CHECK(fi_cq_readerr(cq, &err, 0));
			fprintf(stderr, FITEST_NAME ": error completion: %s\n", fi_strerror(err.err));
			exit(1);
		}
		if (r != -FI_EAGAIN)
			CHECK(r);
	}
	fprintf(stderr, FITEST_NAME ": no completion within 30 s\n");
	exit(1);
}

int main(int argc, char **argv)
{
	struct fi_info *hints = fi_allocinfo(), *info;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_av *av;
	struct fid_mr *rmr;
	struct fid_ep *ep[2];
	struct fid_cq *cq[2];
	struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_CONTEXT};
	struct fi_av_attr ava = {.type = FI_AV_TABLE};
	struct fi_iwarpd_stats_ops *ops;
	struct fi_iwarpd_stats s0, s1;
	char name[64];
	size_t namelen = sizeof(name);
	fi_addr_t peer;
	unsigned char *sbuf = malloc(LEN), *rbuf = malloc(LEN);
	double t0;

	if (!sbuf || !rbuf)
		return 1;
	if (argc > 2 && (SENDS = strtol(argv[2], NULL, 10)) < 2) {
		fprintf(stderr, FITEST_NAME ": N must be at least 2, not %s\n", argv[2]);
		return 1;
	}
	setenv("FI_IWARPD_STAGING", "65536", 0); /* before the provider reads its parameters */
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG;
	hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED;
	hints->fabric_attr->prov_name = strdup(argc > 1 ? argv[1] : "iwarpd");
	CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &info));
	/* The provider itself, not a utility provider layered on it
	 * (iwarpd;ofi_rxd), whose domain would not know the stats ops. */
	while (info && strcmp(info->fabric_attr->prov_name, hints->fabric_attr->prov_name)) {
		struct fi_info *next = info->next;
		info->next = NULL;
		fi_freeinfo(info);
		info = next;
	}
	if (!info)
		fitest_die("no fi_info of provider %s itself", hints->fabric_attr->prov_name);
	CHECK(fi_fabric(info->fabric_attr, &fab, NULL));
	CHECK(fi_domain(fab, info, &dom, NULL));
	CHECK(fi_open_ops(&dom->fid, FI_IWARPD_STATS_OPS, 0, (void **)&ops, NULL));
	CHECK(fi_av_open(dom, &ava, &av, NULL));
	fitest_open_eps(dom, info, av, &cqa, 2, ep, cq);
	CHECK(fi_getname(&ep[1]->fid, name, &namelen));
	EXPECT(fi_av_insert(av, name, 1, &peer, 0, NULL) == 1, "fi_av_insert");
	/* The receiver's buffer is registered (before counting): the RDMA
	 * Read lands in it, no staging copy. */
	CHECK(fi_mr_reg(dom, rbuf, LEN, FI_RECV, 0, 0, 0, &rmr, NULL));

	ops->get(dom, &s0);
	t0 = now_s();
	for (uint64_t i = 0; i < (uint64_t)SENDS; i++) {
		uint64_t got[2];
		memcpy(sbuf, &i, sizeof(i));
		memcpy(sbuf + LEN - sizeof(i), &i, sizeof(i));
		CHECK(fi_recv(ep[1], rbuf, LEN, fi_mr_desc(rmr), FI_ADDR_UNSPEC, NULL));
		CHECK(fi_send(ep[0], sbuf, LEN, NULL, peer, NULL));
		wait1(cq[1]);
		wait1(cq[0]);
		memcpy(&got[0], rbuf, sizeof(got[0]));
		memcpy(&got[1], rbuf + LEN - sizeof(got[1]), sizeof(got[1]));
		if (got[0] != i || got[1] != i) {
			EXPECT(0, "send %llu: the receiver read %llu ... %llu", (unsigned long long)i,
			       (unsigned long long)got[0], (unsigned long long)got[1]);
			break;
		}
	}
	ops->get(dom, &s1);
	printf(FITEST_NAME ": %ld sends of %d octets in %.2f s: %llu control round trips, %llu registrations, "
	       "cache %llu hits %llu misses\n",
	       SENDS, LEN, now_s() - t0, (unsigned long long)(s1.control_calls - s0.control_calls),
	       (unsigned long long)(s1.reg_mr_calls - s0.reg_mr_calls),
	       (unsigned long long)(s1.mr_cache_hits - s0.mr_cache_hits),
	       (unsigned long long)(s1.mr_cache_misses - s0.mr_cache_misses));
	EXPECT(s1.reg_mr_calls - s0.reg_mr_calls <= 1, "%llu registrations, want at most 1",
	       (unsigned long long)(s1.reg_mr_calls - s0.reg_mr_calls));
	EXPECT(s1.control_calls - s0.control_calls <= 1, "%llu control round trips, want at most 1",
	       (unsigned long long)(s1.control_calls - s0.control_calls));
	EXPECT(s1.mr_cache_hits - s0.mr_cache_hits >= (uint64_t)SENDS - 1, "%llu cache hits, want %ld",
	       (unsigned long long)(s1.mr_cache_hits - s0.mr_cache_hits), SENDS - 1);

	for (int i = 0; i < 2; i++) {
		fi_close(&ep[i]->fid);
		fi_close(&cq[i]->fid);
	}
	fi_close(&rmr->fid);
	free(sbuf);
	free(rbuf);
	return fitest_close(av, dom, fab, info, hints);
}
