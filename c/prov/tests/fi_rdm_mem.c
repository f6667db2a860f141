/*
 * fi_rdm_mem — what an FI_EP_RDM rank keeps resident (docs/memory.md):
 * libiwverbs writes every page of the buffers it creates, so every octet
 * of bounce pool and staging counts.
 *
 *   fi_rdm_mem PROV lazy
 *     fi_domain maps no staging; each endpoint's transmit bounce pool has
 *     a slot per tx_attr->size + IWD_TX_EXTRA operations (not the send
 *     queue the daemon rounds up to a power of two: 512 slots, 32 MiB);
 *     eager sends (up to FI_IWARPD_EAGER_MAX, default 64 KiB) map nothing
 *     more; the first rendezvous send of an unregistered buffer maps the
 *     staging (FI_IWARPD_STAGING, default 64 MiB) and its data arrives.
 *   fi_rdm_mem PROV nomem     (with FI_IWARPD_STAGING beyond what
 *                              libiwverbs can create, e.g. 2 TiB)
 *     the staging fails at its first use: a rendezvous fi_sendv of an
 *     unregistered two-part buffer returns -FI_ENOMEM, and a rendezvous
 *     receive into an unregistered buffer completes in error FI_ENOMEM
 *     while its send (zero copy, registration cache) completes; no crash.
 *
 * The memory is read from /proc/self/smaps: the libiwverbs buffers
 * ("memfd:iwarpd:buffer") the process maps. One process, two RDM
 * endpoints on one domain, on the daemon named by FI_IWARPD_SOCKET.
 * Prints "fi_rdm_mem: ok" and exits 0, else 1.
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

#define FITEST_NAME "fi_rdm_mem"
#include "fitest.h"

/* A bounce slot: IWD_HDR_LEN (48) + eager_max, rounded up to 64 octets. */
enum { EAGER = 65536, SLOT = 65600, EXTRA = 16, TX = 256, RX = 256, PAGE = 4096 };
enum { STAGING = 64 << 20, RNDV = 1 << 20, NEAGER = 32 };

/* buffer_bytes is the size of every libiwverbs buffer this process maps
 * (proc(5): a mapping's line, then its fields, Size among them); largest,
 * if not NULL, gets the largest one. */
static size_t buffer_bytes(size_t *largest)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512], perms[8];
	unsigned long lo, hi;
	int in = 0;
	size_t total = 0, kb;
	if (!f)
		fitest_die("open /proc/self/smaps");
	if (largest)
		*largest = 0;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3) {
			in = strstr(line, "memfd:iwarpd:buffer") != NULL;
			if (in && largest && hi - lo > *largest)
				*largest = hi - lo;
		} else if (in && sscanf(line, "Size: %zu kB", &kb) == 1) {
			total += kb << 10;
		}
	}
	fclose(f);
	return total;
}

static unsigned char pattern(size_t msg, size_t k) { return (unsigned char)(msg * 131 + k * 7 + (k >> 12)); }

/* transfer sends len octets of message msg from ep[0] to ep[1] (both
 * buffers unregistered) and returns the receive's completion error (0 when
 * the data arrived intact; the send must complete without error). */
static int transfer(struct fid_ep **ep, struct fid_cq **cq, fi_addr_t *addr, unsigned char *sbuf,
		    unsigned char *rbuf, size_t len, size_t msg)
{
	void *ctx;
	int err, rerr = -1, serr = -1;
	for (size_t k = 0; k < len; k++)
		sbuf[k] = pattern(msg, k);
	memset(rbuf, 0, len);
	POST(fi_recv(ep[1], rbuf, len, NULL, addr[0], (void *)1), "fi_recv");
	POST(fi_send(ep[0], sbuf, len, NULL, addr[1], (void *)2), "fi_send");
	/* The receive and the send complete on their own CQs, in any order;
	 * both are polled (each drives its endpoint's progress). */
	while (rerr < 0 || serr < 0) {
		struct fi_cq_entry ce;
		for (int e = 0; e < 2; e++) {
			ssize_t r = fi_cq_read(cq[e], &ce, 1);
			if (r == -FI_EAGAIN)
				continue;
			if (r == 1) {
				ctx = ce.op_context;
				err = 0;
			} else if (r == -FI_EAVAIL) {
				struct fi_cq_err_entry ee;
				memset(&ee, 0, sizeof(ee));
				CHECK(fi_cq_readerr(cq[e], &ee, 0));
				ctx = ee.op_context;
				err = ee.err;
			} else {
				fitest_die("fi_cq_read: %s", fi_strerror((int)-r));
			}
			if (ctx == (void *)1)
				rerr = err;
			else
				serr = err;
		}
		fitest_check_deadline("transfer completions");
	}
	EXPECT(serr == 0, "message %zu (%zu octets): send completed in error %s", msg, len, fi_strerror(serr));
	if (!rerr)
		for (size_t k = 0; k < len; k++)
			if (rbuf[k] != pattern(msg, k)) {
				EXPECT(0, "message %zu (%zu octets): octet %zu is %#x, want %#x", msg, len, k, rbuf[k],
				       pattern(msg, k));
				break;
			}
	return rerr;
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
	char name[2][64];
	size_t namelen, before, at_domain, at_eps, after_eager, after_rndv, largest, bound;
	fi_addr_t addr[2];
	unsigned char *sbuf = malloc(RNDV), *rbuf = malloc(RNDV);
	int nomem;

	if (argc != 3 || (strcmp(argv[2], "lazy") && strcmp(argv[2], "nomem")))
		fitest_die("usage: fi_rdm_mem PROV lazy|nomem");
	nomem = !strcmp(argv[2], "nomem");
	if (!hints || !sbuf || !rbuf)
		fitest_die("allocation");
	fitest_set_deadline(60);
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
	EXPECT(info->tx_attr->size == TX && info->rx_attr->size == RX, "default sizes: tx %zu rx %zu, want %d and %d",
	       info->tx_attr->size, info->rx_attr->size, TX, RX);
	CHECK(fi_fabric(info->fabric_attr, &fab, NULL));
	before = buffer_bytes(NULL);
	CHECK(fi_domain(fab, info, &dom, NULL));
	at_domain = buffer_bytes(NULL);
	EXPECT(at_domain == before, "fi_domain mapped %zu KiB of buffers, want none (staging comes at first use)",
	       (at_domain - before) >> 10);
	CHECK(fi_av_open(dom, &ava, &av, NULL));
	fitest_open_eps(dom, info, av, &cqa, 2, ep, cq);
	for (int d = 0; d < 2; d++) {
		namelen = sizeof(name[d]);
		CHECK(fi_getname(&ep[d]->fid, name[d], &namelen));
		EXPECT(fi_av_insert(av, name[d], 1, &addr[d], 0, NULL) == 1, "fi_av_insert");
	}
	/* Each endpoint: a transmit pool of TX + EXTRA slots and a receive
	 * pool of RX (all posted); a pool is one mapping, whole pages. */
	at_eps = buffer_bytes(&largest);
	bound = (size_t)(TX + EXTRA) * SLOT + PAGE;
	EXPECT(largest <= bound, "largest bounce pool %zu KiB, bound %zu KiB (tx_attr->size %d + %d slots of %d)",
	       largest >> 10, bound >> 10, TX, EXTRA, SLOT);
	bound = 2 * ((size_t)(TX + EXTRA + RX) * SLOT + 2 * PAGE);
	EXPECT(at_eps - at_domain <= bound, "two RDM endpoints mapped %zu KiB, bound %zu KiB", (at_eps - at_domain) >> 10,
	       bound >> 10);

	if (!nomem) {
		/* Eager messages, up to the largest: no staging. */
		for (size_t m = 0; m < NEAGER; m++)
			EXPECT(transfer(ep, cq, addr, sbuf, rbuf, m + 1 == NEAGER ? EAGER : 1 + m * 2000, m) == 0,
			       "eager message %zu: receive completed in error", m);
		after_eager = buffer_bytes(NULL);
		EXPECT(after_eager == at_eps, "eager sends mapped %zu KiB more, want none", (after_eager - at_eps) >> 10);
		/* A rendezvous of unregistered buffers: the staging, once. */
		for (size_t m = 0; m < 2; m++)
			EXPECT(transfer(ep, cq, addr, sbuf, rbuf, RNDV, NEAGER + m) == 0,
			       "rendezvous message %zu: receive completed in error", m);
		after_rndv = buffer_bytes(NULL);
		EXPECT(after_rndv - after_eager == STAGING, "rendezvous sends mapped %zu KiB, want the staging (%d KiB)",
		       (after_rndv - after_eager) >> 10, STAGING >> 10);
		printf(FITEST_NAME ": fi_domain 0 KiB, two endpoints %zu KiB (largest pool %zu KiB), eager 0 KiB, "
		       "rendezvous %zu KiB\n",
		       (at_eps - at_domain) >> 10, largest >> 10, (after_rndv - after_eager) >> 10);
	} else {
		struct iovec iov[2] = {{sbuf, RNDV / 2}, {sbuf + RNDV / 2, RNDV / 2}};
		void *desc[2] = {NULL, NULL};
		ssize_t r = fi_sendv(ep[0], iov, desc, 2, addr[1], (void *)3);
		int err;
		EXPECT(r == -FI_ENOMEM, "fi_sendv of %d unregistered octets without staging: %zd (%s), want -FI_ENOMEM",
		       RNDV, r, fi_strerror((int)-r));
		err = transfer(ep, cq, addr, sbuf, rbuf, RNDV, 0);
		EXPECT(err == FI_ENOMEM, "rendezvous receive into an unregistered buffer without staging: error %d (%s), "
		       "want FI_ENOMEM", err, fi_strerror(err));
		EXPECT(buffer_bytes(NULL) == at_eps, "a failed staging left %zu KiB mapped",
		       (buffer_bytes(NULL) - at_eps) >> 10);
		/* Eager traffic goes on. */
		EXPECT(transfer(ep, cq, addr, sbuf, rbuf, 1000, 1) == 0, "eager message after the failure");
		printf(FITEST_NAME ": without staging: fi_sendv -FI_ENOMEM, receive FI_ENOMEM\n");
	}
	for (int i = 0; i < 2; i++) {
		fi_close(&ep[i]->fid);
		fi_close(&cq[i]->fid);
	}
	free(sbuf);
	free(rbuf);
	return fitest_close(av, dom, fab, info, hints);
}
