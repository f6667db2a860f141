/*
 * fi_baddesc — bad arguments to data transfer calls fail the call, never
 * the application (docs/libfabric.md "Failures"; issue 18, defect 5): a
 * desc that is not a live MR of this provider (a pointer that never was
 * one, a closed MR's) and a NULL buffer with a non-zero length, with or
 * without a valid desc, get -FI_EINVAL from fi_send, fi_inject, fi_recv,
 * fi_senddata (rendezvous size too), fi_write and fi_read of an FI_EP_RDM
 * endpoint (fi_mr(3): desc is what fi_mr_desc returned). Before, the
 * provider dereferenced the desc (iwd_desc_lkey) or copied from the NULL
 * buffer (iwd_iov_copy_out): SIGSEGV in the application. Then the same
 * endpoints still carry a message, a zero-length one with a NULL buffer
 * (allowed) and an RDMA Write, all checked.
 *
 * One process, two endpoints on the daemon named by FI_IWARPD_SOCKET.
 *   fi_baddesc [PROV]      prints "fi_baddesc: ok" and exits 0, else 1
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
#include <rdma/fi_rma.h>

#define FITEST_NAME "fi_baddesc"
#include "fitest.h"

#define BIG (256 << 10) /* above the eager limit: the rendezvous path */

struct side {
	struct fid_ep *ep;
	struct fid_cq *cq;
	fi_addr_t peer;
};

/* next reads one completion (bounded: 10 s); an error completion fails. */
static void next(struct side *s, struct fi_cq_data_entry *e)
{
	double end = now_s() + 10;
	while (now_s() < end) {
		ssize_t r = fi_cq_read(s->cq, e, 1);
		if (r == 1)
			return;
		if (r == -FI_EAVAIL) {
			struct fi_cq_err_entry err = {0};
			CHECK(fi_cq_readerr(s->cq, &err, 0));
			fprintf(stderr, "fi_baddesc: error completion %d (%s)\n", err.err, fi_strerror(err.err));
			exit(1);
		}
		if (r != -FI_EAGAIN)
			CHECK(r);
	}
	fprintf(stderr, "fi_baddesc: no completion within 10 s\n");
	exit(1);
}

int main(int argc, char **argv)
{
	struct fi_info *hints = fi_allocinfo(), *info;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_av *av;
	struct fid_mr *mr, *gone;
	struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_DATA};
	struct fi_av_attr ava = {.type = FI_AV_TABLE};
	struct side a, b;
	char name[64], *buf = calloc(1, BIG), *dst = calloc(1, BIG);
	size_t namelen;
	struct fi_context ctx[4];
	struct fi_cq_data_entry e;
	void *desc, *gone_desc, *stack_desc = &namelen;
	void *bogus[] = {(void *)(uintptr_t)0x10, stack_desc, NULL /* gone_desc */};

	if (!buf || !dst)
		return 1;
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG | FI_RMA;
	hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED;
	hints->fabric_attr->prov_name = strdup(argc > 1 ? argv[1] : "iwarpd");
	CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &info));
	CHECK(fi_fabric(info->fabric_attr, &fab, NULL));
	CHECK(fi_domain(fab, info, &dom, NULL));
	CHECK(fi_av_open(dom, &ava, &av, NULL));
	struct side *sides[2] = {&a, &b};
	for (int i = 0; i < 2; i++) {
		struct side *s = sides[i];
		CHECK(fi_cq_open(dom, &cqa, &s->cq, NULL));
		CHECK(fi_endpoint(dom, info, &s->ep, NULL));
		CHECK(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV));
		CHECK(fi_ep_bind(s->ep, &av->fid, 0));
		CHECK(fi_enable(s->ep));
	}
	namelen = sizeof(name);
	CHECK(fi_getname(&b.ep->fid, name, &namelen));
	EXPECT(fi_av_insert(av, name, 1, &a.peer, 0, NULL) == 1, "fi_av_insert");

	CHECK(fi_mr_reg(dom, buf, BIG, FI_SEND | FI_RECV | FI_READ | FI_WRITE, 0, 0, 0, &mr, NULL));
	desc = fi_mr_desc(mr);
	CHECK(fi_mr_reg(dom, dst, BIG, FI_REMOTE_WRITE | FI_REMOTE_READ | FI_RECV, 0, 0, 0, &gone, NULL));
	gone_desc = fi_mr_desc(gone);
	CHECK(fi_close(&gone->fid));
	bogus[2] = gone_desc; /* a closed MR's desc: freed memory (ASan would see a use) */
	CHECK(fi_mr_reg(dom, dst, BIG, FI_REMOTE_WRITE | FI_REMOTE_READ | FI_RECV, 0, 0, 0, &gone, NULL));
	uint64_t dst_key = fi_mr_key(gone);
	if (fi_mr_desc(gone) == bogus[2])
		bogus[2] = (void *)(uintptr_t)0x20; /* the allocator gave the address back: not bogus any more */

	for (size_t k = 0; k < sizeof(bogus) / sizeof(bogus[0]); k++) {
		void *d = bogus[k];
		ssize_t r;
		r = fi_send(a.ep, buf, 8, d, a.peer, &ctx[0]);
		EXPECT(r == -FI_EINVAL, "fi_send with bogus desc %zu: %zd, want -FI_EINVAL", k, r);
		r = fi_senddata(a.ep, buf, BIG, d, 7, a.peer, &ctx[0]);
		EXPECT(r == -FI_EINVAL, "fi_senddata of %d octets with bogus desc %zu: %zd, want -FI_EINVAL", BIG, k, r);
		r = fi_recv(b.ep, buf, 8, d, FI_ADDR_UNSPEC, &ctx[0]);
		EXPECT(r == -FI_EINVAL, "fi_recv with bogus desc %zu: %zd, want -FI_EINVAL", k, r);
		r = fi_write(a.ep, buf, 8, d, a.peer, (uint64_t)(uintptr_t)dst, dst_key, &ctx[0]);
		EXPECT(r == -FI_EINVAL, "fi_write with bogus desc %zu: %zd, want -FI_EINVAL", k, r);
		r = fi_read(a.ep, buf, 8, d, a.peer, (uint64_t)(uintptr_t)dst, dst_key, &ctx[0]);
		EXPECT(r == -FI_EINVAL, "fi_read with bogus desc %zu: %zd, want -FI_EINVAL", k, r);
	}
	for (int withdesc = 0; withdesc < 2; withdesc++) {
		void *d = withdesc ? desc : NULL;
		ssize_t r;
		r = fi_send(a.ep, NULL, 8, d, a.peer, &ctx[0]);
		EXPECT(r == -FI_EINVAL, "fi_send of NULL+8 (desc %d): %zd, want -FI_EINVAL", withdesc, r);
		r = fi_send(a.ep, NULL, BIG, d, a.peer, &ctx[0]);
		EXPECT(r == -FI_EINVAL, "fi_send of NULL+%d (desc %d): %zd, want -FI_EINVAL", BIG, withdesc, r);
		r = fi_recv(b.ep, NULL, 8, d, FI_ADDR_UNSPEC, &ctx[0]);
		EXPECT(r == -FI_EINVAL, "fi_recv into NULL+8 (desc %d): %zd, want -FI_EINVAL", withdesc, r);
		r = fi_write(a.ep, NULL, 8, d, a.peer, (uint64_t)(uintptr_t)dst, dst_key, &ctx[0]);
		EXPECT(r == -FI_EINVAL, "fi_write from NULL+8 (desc %d): %zd, want -FI_EINVAL", withdesc, r);
	}
	EXPECT(fi_inject(a.ep, NULL, 8, a.peer) == -FI_EINVAL, "fi_inject of NULL+8");

	/* The endpoints are unharmed: a message, a zero-length one from a NULL
	 * buffer, and an RDMA Write, each checked. */
	memcpy(buf, "after the bogus calls", 22);
	CHECK(fi_recv(b.ep, dst, 64, fi_mr_desc(gone), FI_ADDR_UNSPEC, &ctx[1]));
	CHECK(fi_recv(b.ep, dst + 64, 64, NULL, FI_ADDR_UNSPEC, &ctx[2]));
	CHECK(fi_send(a.ep, buf, 22, desc, a.peer, &ctx[0]));
	next(&a, &e);
	next(&b, &e);
	EXPECT(e.op_context == &ctx[1] && e.len == 22 && !memcmp(dst, buf, 22), "message after the bogus calls: "
	       "context %p len %zu", e.op_context, e.len);
	CHECK(fi_send(a.ep, NULL, 0, NULL, a.peer, &ctx[0]));
	next(&a, &e);
	next(&b, &e);
	EXPECT(e.op_context == &ctx[2] && e.len == 0, "zero-length message: context %p len %zu", e.op_context, e.len);
	memcpy(buf, "written", 8);
	CHECK(fi_write(a.ep, buf, 8, desc, a.peer, (uint64_t)(uintptr_t)(dst + 4096), dst_key, &ctx[3]));
	next(&a, &e);
	EXPECT(e.op_context == &ctx[3], "RDMA Write: context %p", e.op_context);
	for (double end = now_s() + 10; memcmp(dst + 4096, "written", 8) && now_s() < end;)
		fi_cq_read(b.cq, &e, 0); /* progress b's endpoint */
	EXPECT(!memcmp(dst + 4096, "written", 8), "RDMA Write after the bogus calls: not placed within 10 s");

	fi_close(&mr->fid);
	fi_close(&gone->fid);
	for (int i = 0; i < 2; i++) {
		fi_close(&sides[i]->ep->fid);
		fi_close(&sides[i]->cq->fid);
	}
	free(buf);
	free(dst);
	return fitest_close(av, dom, fab, info, hints);
}
