/*
 * fi_rndv_stage — rendezvous sends (RDM, above FI_IWARPD_EAGER_MAX) of
 * buffers the application never registered are copied into the domain's
 * staging when it has room (iwd_ep_rdm.c, iwd_stage_alloc_tx), so the
 * peer's RDMA Read is served from the daemon's mapping of staging, not
 * read from this process's memory through /proc/PID/mem; sends hold at
 * most half of the staging, so that Reads into staging (unregistered
 * receive buffers) always find room and traffic both ways cannot wait for
 * itself; past the half the registration cache serves them (zero copy).
 *
 * One process, two RDM endpoints on one domain (so one staging), N
 * messages of 1 MiB each way at once, W outstanding per direction, from
 * and into unregistered buffers whose every 8-octet word is checked.
 *   fi_rndv_stage PROV N W MODE
 *     MODE staged: every send copied (no registration but the staging's
 *                  own at its first use, no cache use);
 *     MODE capped: some sends past the half went zero copy (cache used).
 * Prints the counts and "fi_rndv_stage: ok", exits 0, else 1.
 */
#include <sched.h>
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

#define FITEST_NAME "fi_rndv_stage"
#include "fitest.h"

enum { LEN = 1 << 20, WMAX = 16 };

static uint64_t word(int dir, long msg, size_t k) { return ((uint64_t)dir << 62) ^ ((uint64_t)msg << 32) ^ k; }

static void fill(unsigned char *b, int dir, long msg)
{
	for (size_t k = 0; k < LEN / 8; k++) {
		uint64_t w = word(dir, msg, k);
		memcpy(b + 8 * k, &w, 8);
	}
}

static int check(const unsigned char *b, int dir, long msg)
{
	for (size_t k = 0; k < LEN / 8; k++) {
		uint64_t w;
		memcpy(&w, b + 8 * k, 8);
		if (w != word(dir, msg, k)) {
			fprintf(stderr, FITEST_NAME ": direction %d message %ld: word %zu is %#llx, want %#llx\n", dir,
				msg, k, (unsigned long long)w, (unsigned long long)word(dir, msg, k));
			return 0;
		}
	}
	return 1;
}

int main(int argc, char **argv)
{
	struct fi_info *hints = fi_allocinfo(), *info;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_av *av;
	struct fid_ep *ep[2];
	struct fid_cq *cq[2];
	struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_CONTEXT};
	struct fi_av_attr ava = {.type = FI_AV_TABLE};
	struct fi_iwarpd_stats_ops *ops;
	struct fi_iwarpd_stats s0, s1;
	char name[2][64];
	size_t namelen;
	fi_addr_t addr[2];
	unsigned char *sbuf[2][WMAX], *rbuf[2][WMAX];
	long n, w, sent[2] = {0, 0}, recvd[2] = {0, 0}, posted[2] = {0, 0}, done[2] = {0, 0};
	unsigned char rbusy[2][WMAX] = {{0}}, sbusy[2][WMAX] = {{0}};
	int staged;

	if (argc != 5 || (n = strtol(argv[2], NULL, 10)) < 1 || (w = strtol(argv[3], NULL, 10)) < 1 || w > WMAX ||
	    (strcmp(argv[4], "staged") && strcmp(argv[4], "capped")))
		fitest_die("usage: fi_rndv_stage PROV N W(1-%d) staged|capped", WMAX);
	staged = !strcmp(argv[4], "staged");
	for (int d = 0; d < 2; d++)
		for (int i = 0; i < w; i++)
			if (!(sbuf[d][i] = malloc(LEN)) || !(rbuf[d][i] = malloc(LEN)))
				fitest_die("malloc");
	fitest_set_deadline(120);
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG;
	hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED;
	hints->fabric_attr->prov_name = strdup(argv[1]);
	CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &info));
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
	for (int d = 0; d < 2; d++) {
		namelen = sizeof(name[d]);
		CHECK(fi_getname(&ep[d]->fid, name[d], &namelen));
		EXPECT(fi_av_insert(av, name[d], 1, &addr[d], 0, NULL) == 1, "fi_av_insert");
	}

	/* Direction d: ep[d] sends to ep[1-d]. Message m uses slot m % w on
	 * both sides, once the slot's last message completed there. A
	 * context packs direction, message and kind (receive or send). */
	ops->get(dom, &s0);
	while (done[0] < n || done[1] < n || recvd[0] < n || recvd[1] < n) {
		for (int d = 0; d < 2; d++) {
			while (posted[d] < n && !rbusy[d][posted[d] % w]) {
				long m = posted[d];
				uintptr_t ctx = ((uintptr_t)d << 40) | ((uintptr_t)m << 1) | 1;
				POST(fi_recv(ep[1 - d], rbuf[d][m % w], LEN, NULL, addr[d], (void *)ctx), "fi_recv");
				rbusy[d][m % w] = 1;
				posted[d]++;
			}
			while (sent[d] < n && sent[d] < posted[d] && !sbusy[d][sent[d] % w]) {
				long m = sent[d];
				uintptr_t ctx = ((uintptr_t)d << 40) | ((uintptr_t)m << 1);
				fill(sbuf[d][m % w], d, m);
				POST(fi_send(ep[d], sbuf[d][m % w], LEN, NULL, addr[1 - d], (void *)ctx), "fi_send");
				sbusy[d][m % w] = 1;
				sent[d]++;
			}
		}
		for (int e = 0; e < 2; e++) {
			struct fi_cq_entry ce;
			ssize_t r = fi_cq_read(cq[e], &ce, 1);
			if (r == -FI_EAVAIL) {
				struct fi_cq_err_entry err;
				memset(&err, 0, sizeof(err));
				CHECK(fi_cq_readerr(cq[e], &err, 0));
				fitest_die("error completion: %s", fi_strerror(err.err));
			}
			if (r == -FI_EAGAIN) {
				fitest_check_deadline("completions");
				continue;
			}
			CHECK(r);
			uintptr_t ctx = (uintptr_t)ce.op_context;
			int d = (int)(ctx >> 40);
			long m = (long)((ctx >> 1) & ((1ul << 39) - 1));
			if (ctx & 1) {
				recvd[d]++;
				if (!check(rbuf[d][m % w], d, m))
					failures++;
				rbusy[d][m % w] = 0;
			} else {
				done[d]++;
				sbusy[d][m % w] = 0;
			}
		}
		if (failures)
			break;
	}
	ops->get(dom, &s1);
	printf(FITEST_NAME ": %ld messages of %d octets each way, window %ld: %llu registrations, cache %llu hits %llu "
	       "misses\n",
	       n, LEN, w, (unsigned long long)(s1.reg_mr_calls - s0.reg_mr_calls),
	       (unsigned long long)(s1.mr_cache_hits - s0.mr_cache_hits),
	       (unsigned long long)(s1.mr_cache_misses - s0.mr_cache_misses));
	if (staged) {
		/* One registration: the staging's own, at its first use (the
		 * first send; iwd_buf.c), none per send. */
		EXPECT(s1.reg_mr_calls == s0.reg_mr_calls + 1 && s1.mr_cache_hits == s0.mr_cache_hits &&
			       s1.mr_cache_misses == s0.mr_cache_misses,
		       "a send was not copied into staging: %llu registrations, %llu cache hits, %llu misses",
		       (unsigned long long)(s1.reg_mr_calls - s0.reg_mr_calls),
		       (unsigned long long)(s1.mr_cache_hits - s0.mr_cache_hits),
		       (unsigned long long)(s1.mr_cache_misses - s0.mr_cache_misses));
	} else {
		EXPECT(s1.mr_cache_hits + s1.mr_cache_misses > s0.mr_cache_hits + s0.mr_cache_misses,
		       "no send went zero copy past half the staging");
	}
	for (int i = 0; i < 2; i++) {
		fi_close(&ep[i]->fid);
		fi_close(&cq[i]->fid);
	}
	for (int d = 0; d < 2; d++)
		for (int i = 0; i < w; i++) {
			free(sbuf[d][i]);
			free(rbuf[d][i]);
		}
	return fitest_close(av, dom, fab, info, hints);
}
