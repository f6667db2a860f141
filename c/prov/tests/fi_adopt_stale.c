/*
 * fi_adopt_stale — an atomic target the application unmaps while its MR
 * lives, and memory mapped anew at the same address (what Open MPI's ob1
 * and osc rdma do through btl ofi's lazy registration cache: free(3) of a
 * large buffer is munmap(2), the next malloc(3) gets the same address,
 * the old registration is closed later). The provider adopts an atomic
 * target's pages into a memfd (iwd_mr.c); that adoption must count only
 * where its pages still are:
 *
 *  1. a new MR at the address is the new memory: an fi_write and an
 *     fi_fetch_atomic into it are seen by the application there (not by
 *     the old memfd, which the application no longer maps);
 *  2. closing the old MR leaves the new memory as it is (the old contents
 *     are not put back over it);
 *  3. closing the new MR gives its pages back private, contents intact;
 *  4. an MR over pages that partly overlap an earlier atomic target's
 *     (a registration cache registers such ranges) is an atomic target
 *     too: fetch-adds through both MRs on the shared page and through
 *     the second on its own pages are seen by the application, and each
 *     MR's close gives back only the pages no other MR covers.
 *
 * One process, two RDM endpoints on the daemon named by FI_IWARPD_SOCKET.
 *   fi_adopt_stale [PROV]   prints "fi_adopt_stale: ok" and exits 0, else 1
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#define FITEST_NAME "fi_adopt_stale"
#include "fitest.h"

enum { PAGES = 4 };

/* wait1 reads one completion of cq within the deadline; an error
 * completion is a failure. */
static void wait1(struct fid_cq *cq, const char *what)
{
	struct fi_cq_entry e;
	struct fi_cq_err_entry err;
	for (;;) {
		ssize_t r = fi_cq_read(cq, &e, 1);
		if (r == 1)
			return;
		if (r == -FI_EAVAIL) {
			memset(&err, 0, sizeof(err));
			CHECK(fi_cq_readerr(cq, &err, 0));
			fitest_die("%s: error completion: %s (provider error %d)", what, fi_strerror(err.err),
				   err.prov_errno);
		}
		if (r != -FI_EAGAIN)
			CHECK(r);
		fitest_check_deadline(what);
	}
}

/* Whether any page of [p, p+n) is a shared mapping (proc(5) maps "s"). */
static int shared(const void *p, size_t n)
{
	char line[512], perms[8];
	unsigned long a, b;
	int s = 0;
	FILE *f = fopen("/proc/self/maps", "r");
	if (!f)
		fitest_die("cannot read /proc/self/maps");
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "%lx-%lx %7s", &a, &b, perms) == 3 && a < (unsigned long)p + n && (unsigned long)p < b &&
		    perms[3] == 's')
			s = 1;
	fclose(f);
	return s;
}

/* fadd fetch-adds one to the word at w through key (the original must be
 * want). */
static void fadd(struct fid_ep *ep, struct fid_cq *cq, fi_addr_t peer, uint64_t *w, uint64_t key, uint64_t want,
		 const char *what)
{
	uint64_t one = 1, got = ~0ull;
	POST(fi_fetch_atomic(ep, &one, 1, NULL, &got, NULL, peer, (uint64_t)(uintptr_t)w, key, FI_UINT64, FI_SUM, NULL),
	     what);
	wait1(cq, what);
	EXPECT(got == want && *w == want + 1, "%s: fetched %llu (want %llu), word %llu (want %llu)", what,
	       (unsigned long long)got, (unsigned long long)want, (unsigned long long)*w,
	       (unsigned long long)want + 1);
}

/* count returns how many octets of [p, p+n) equal v. */
static size_t count(const unsigned char *p, size_t n, unsigned char v)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += p[i] == v;
	return k;
}

int main(int argc, char **argv)
{
	struct fi_info *hints = fi_allocinfo(), *info;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_av *av;
	struct fid_mr *old_mr, *new_mr, *src_mr;
	struct fid_ep *ep[2];
	struct fid_cq *cq[2];
	struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_CONTEXT};
	struct fi_av_attr ava = {.type = FI_AV_TABLE};
	char name[64];
	size_t namelen = sizeof(name), page = (size_t)sysconf(_SC_PAGESIZE), len = PAGES * page;
	fi_addr_t peer;
	unsigned char src[256];
	uint64_t one = 1, fetched = ~0ull, *word;

	fitest_set_deadline(30);
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG | FI_RMA | FI_ATOMIC;
	hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED;
	hints->fabric_attr->prov_name = strdup(argc > 1 ? argv[1] : "iwarpd");
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
	CHECK(fi_av_open(dom, &ava, &av, NULL));
	fitest_open_eps(dom, info, av, &cqa, 2, ep, cq);
	CHECK(fi_getname(&ep[1]->fid, name, &namelen));
	EXPECT(fi_av_insert(av, name, 1, &peer, 0, NULL) == 1, "fi_av_insert");
	memset(src, 0x5a, sizeof(src));
	CHECK(fi_mr_reg(dom, src, sizeof(src), FI_WRITE, 0, 0, 0, &src_mr, NULL));

	/* The old memory: an atomic target, so its pages are adopted. */
	unsigned char *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED)
		fitest_die("mmap %zu", len);
	memset(mem, 0xaa, len);
	CHECK(fi_mr_reg(dom, mem, len, FI_REMOTE_WRITE | FI_REMOTE_READ, 0, 0, 0, &old_mr, NULL));
	EXPECT(shared(mem, len), "the atomic target's pages were not adopted (no shared mapping): nothing tested");

	/* The application unmaps it; new memory at the same address. */
	if (munmap(mem, len))
		fitest_die("munmap");
	unsigned char *again = mmap(mem, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
				    -1, 0);
	if (again != mem)
		fitest_die("mmap at %p again: got %p", (void *)mem, (void *)again);
	memset(mem, 0x11, len);
	CHECK(fi_mr_reg(dom, mem, len, FI_REMOTE_WRITE | FI_REMOTE_READ, 0, 0, 0, &new_mr, NULL));

	/* 1: RMA and atomics through the new MR reach the new memory. */
	POST(fi_write(ep[0], src, sizeof(src), fi_mr_desc(src_mr), peer, (uint64_t)(uintptr_t)(mem + page),
		      fi_mr_key(new_mr), NULL),
	     "fi_write");
	wait1(cq[0], "fi_write");
	EXPECT(count(mem + page, sizeof(src), 0x5a) == sizeof(src),
	       "fi_write into the new memory: %zu of %zu octets arrived (the rest went to the old, unmapped pages)",
	       count(mem + page, sizeof(src), 0x5a), sizeof(src));
	word = (uint64_t *)(mem + 2 * page);
	*word = 41;
	POST(fi_fetch_atomic(ep[0], &one, 1, NULL, &fetched, NULL, peer, (uint64_t)(uintptr_t)word, fi_mr_key(new_mr),
			     FI_UINT64, FI_SUM, NULL),
	     "fi_fetch_atomic");
	wait1(cq[0], "fi_fetch_atomic");
	EXPECT(fetched == 41 && *word == 42, "fetch-add on the new memory: fetched %llu (want 41), word %llu (want 42)",
	       (unsigned long long)fetched, (unsigned long long)*word);

	/* 2: the old MR's close leaves the new memory alone. */
	*word = 0x1111111111111111ull;
	memset(mem + page, 0x11, sizeof(src));
	CHECK(fi_close(&old_mr->fid));
	EXPECT(count(mem, len, 0x11) == len, "closing the old MR changed the new memory: %zu of %zu octets are 0x11",
	       count(mem, len, 0x11), len);

	/* 3: the new MR's close gives the pages back private, intact. */
	memset(mem + 3 * page, 0x22, page);
	CHECK(fi_close(&new_mr->fid));
	EXPECT(count(mem, 3 * page, 0x11) == 3 * page && count(mem + 3 * page, page, 0x22) == page,
	       "the new memory after its MR closed: contents changed");
	EXPECT(!shared(mem, len), "the new memory is still a shared mapping after its last MR closed");

	/* 4: A over pages 0-1, B over pages 1-3 (partly A's). */
	struct fid_mr *a_mr, *b_mr;
	memset(mem, 0x33, len);
	uint64_t *w1 = (uint64_t *)(mem + page + 64), *w3 = (uint64_t *)(mem + 3 * page + 8);
	*w1 = 100;
	*w3 = 300;
	CHECK(fi_mr_reg(dom, mem + 16, 2 * page - 32, FI_REMOTE_WRITE | FI_REMOTE_READ, 0, 0, 0, &a_mr, NULL));
	CHECK(fi_mr_reg(dom, mem + page + 8, 3 * page - 16, FI_REMOTE_WRITE | FI_REMOTE_READ, 0, 0, 0, &b_mr, NULL));
	fadd(ep[0], cq[0], peer, w1, fi_mr_key(a_mr), 100, "fetch-add through A on the shared page");
	fadd(ep[0], cq[0], peer, w1, fi_mr_key(b_mr), 101, "fetch-add through B on the shared page");
	fadd(ep[0], cq[0], peer, w3, fi_mr_key(b_mr), 300, "fetch-add through B on its own page");
	CHECK(fi_close(&a_mr->fid));
	EXPECT(!shared(mem, page) && shared(mem + page, 3 * page), "after A's close: page 0 private, pages 1-3 adopted");
	fadd(ep[0], cq[0], peer, w1, fi_mr_key(b_mr), 102, "fetch-add through B after A's close");
	CHECK(fi_close(&b_mr->fid));
	EXPECT(!shared(mem, len), "after B's close: all pages private");
	EXPECT(*w1 == 103 && *w3 == 301 && count(mem, page, 0x33) == page, "contents after both closes: %llu %llu",
	       (unsigned long long)*w1, (unsigned long long)*w3);

	munmap(mem, len);
	for (int i = 0; i < 2; i++) {
		fi_close(&ep[i]->fid);
		fi_close(&cq[i]->fid);
	}
	fi_close(&src_mr->fid);
	return fitest_close(av, dom, fab, info, hints);
}
