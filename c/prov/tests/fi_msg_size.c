/*
 * fi_msg_size — an FI_EP_MSG endpoint costs what its attributes ask for:
 * fi_getinfo returns the tx_attr->size and rx_attr->size a hint asks for
 * (fi_getinfo(3); ofi_rxm asks 128 for its MSG endpoints), and fi_enable
 * maps bounce slots (64 KiB each) for that many operations, not for the
 * daemon's queue depths rounded up to powers of two: an RxM connection
 * mapped 48 MiB (docs/memory.md, "RxM's MSG endpoints"). The memory is
 * read from /proc/self/smaps: the libiwverbs buffers ("memfd:iwarpd:buffer")
 * the process maps before and after fi_enable.
 *
 * One process on the daemon named by FI_IWARPD_SOCKET.
 *   fi_msg_size [PROV]     prints "fi_msg_size: ok" and exits 0, else 1
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

#define FITEST_NAME "fi_msg_size"
#include "fitest.h"

enum { SLOT = 65536, EXTRA = 16, DEFAULT_SIZE = 256, ASKED = 128 };

/* buffer_bytes is the size of every libiwverbs buffer this process maps
 * (proc(5): a mapping's line, then its fields, Size among them). */
static size_t buffer_bytes(void)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512], perms[8];
	unsigned long lo, hi;
	int in = 0;
	size_t total = 0, kb;
	if (!f)
		fitest_die("open /proc/self/smaps");
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3)
			in = strstr(line, "memfd:iwarpd:buffer") != NULL;
		else if (in && sscanf(line, "Size: %zu kB", &kb) == 1)
			total += kb << 10;
	}
	fclose(f);
	return total;
}

/* enable_cost opens an MSG endpoint with info and returns the buffer
 * octets fi_enable mapped; the endpoint is closed again. */
static size_t enable_cost(struct fid_domain *dom, struct fid_eq *eq, struct fid_cq *cq, struct fi_info *info)
{
	struct fid_ep *ep;
	size_t before, after;
	CHECK(fi_endpoint(dom, info, &ep, NULL));
	CHECK(fi_ep_bind(ep, &eq->fid, 0));
	CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	before = buffer_bytes();
	CHECK(fi_enable(ep));
	after = buffer_bytes();
	CHECK(fi_close(&ep->fid));
	return after - before;
}

static struct fi_info *getinfo(const char *prov, size_t tx, size_t rx)
{
	struct fi_info *hints = fi_allocinfo(), *info;
	if (!hints)
		fitest_die("fi_allocinfo");
	hints->ep_attr->type = FI_EP_MSG;
	hints->caps = FI_MSG;
	hints->addr_format = FI_SOCKADDR_IN;
	hints->fabric_attr->prov_name = strdup(prov);
	hints->tx_attr->size = tx;
	hints->rx_attr->size = rx;
	CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &info));
	fi_freeinfo(hints);
	return info;
}

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "iwarpd";
	struct fi_info *dflt = getinfo(prov, 0, 0), *asked = getinfo(prov, ASKED, ASKED);
	struct fi_eq_attr ea = {.wait_obj = FI_WAIT_UNSPEC};
	struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_MSG, .wait_obj = FI_WAIT_NONE};
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_eq *eq;
	struct fid_cq *cq;
	size_t cost_dflt, cost_asked, bound;

	EXPECT(dflt->tx_attr->size == DEFAULT_SIZE && dflt->rx_attr->size == DEFAULT_SIZE,
	       "no size hint: tx %zu rx %zu, want %d", dflt->tx_attr->size, dflt->rx_attr->size, DEFAULT_SIZE);
	EXPECT(asked->tx_attr->size == ASKED && asked->rx_attr->size == ASKED,
	       "hints tx %d rx %d: fi_getinfo returned tx %zu rx %zu", ASKED, ASKED, asked->tx_attr->size,
	       asked->rx_attr->size);

	CHECK(fi_fabric(asked->fabric_attr, &fab, NULL));
	CHECK(fi_eq_open(fab, &ea, &eq, NULL));
	CHECK(fi_domain(fab, asked, &dom, NULL));
	CHECK(fi_cq_open(dom, &ca, &cq, NULL));

	/* A slot per operation asked for (sends: tx size + EXTRA), rounded
	 * up to 64-octet slots and whole pages per pool. */
	cost_asked = enable_cost(dom, eq, cq, asked);
	bound = (size_t)(ASKED + EXTRA + ASKED) * SLOT + 2 * 4096;
	EXPECT(cost_asked > 0 && cost_asked <= bound, "tx/rx size %d: fi_enable mapped %zu KiB, bound %zu KiB", ASKED,
	       cost_asked >> 10, bound >> 10);
	cost_dflt = enable_cost(dom, eq, cq, dflt);
	bound = (size_t)(DEFAULT_SIZE + EXTRA + DEFAULT_SIZE) * SLOT + 2 * 4096;
	EXPECT(cost_dflt > 0 && cost_dflt <= bound, "default sizes: fi_enable mapped %zu KiB, bound %zu KiB",
	       cost_dflt >> 10, bound >> 10);
	printf("fi_msg_size: fi_enable mapped %zu KiB with tx/rx size %d, %zu KiB with the defaults (%d)\n",
	       cost_asked >> 10, ASKED, cost_dflt >> 10, DEFAULT_SIZE);

	CHECK(fi_close(&cq->fid));
	CHECK(fi_close(&dom->fid));
	CHECK(fi_close(&eq->fid));
	CHECK(fi_close(&fab->fid));
	fi_freeinfo(dflt);
	fi_freeinfo(asked);
	if (failures) {
		fprintf(stderr, "fi_msg_size: %d failures\n", failures);
		return 1;
	}
	printf("fi_msg_size: ok\n");
	return 0;
}
