/*
 * fi_emptypoll — an empty fi_cq_read (and fi_poll) makes no system call to
 * probe the daemon each time (c/prov/iwd_progress.c iwd_domain_check_idle,
 * docs/mpi.md "One-sided": a polling MPI rank waiting for an atomic pays
 * for every call of its progress loop).
 *
 * One RDM endpoint of the provider (argv[1], default iwarpd) with its CQ,
 * nothing posted: READS back-to-back fi_cq_read calls, each -FI_EAGAIN,
 * then as many fi_poll calls on a poll set holding the CQ. poll(2) is
 * interposed (the program is linked with -rdynamic; the provider's calls
 * resolve here) and counted. The daemon is probed at most every
 * IWD_IDLE_CHECK_NS (1 ms): the calls may make at most one probe per
 * elapsed millisecond, plus one, plus the client core's own liveness
 * probes (every 50 ms, IWV_LIVENESS_NS) — before the change every empty
 * call made one. After the calls, 5 ms without a call: the next empty read
 * probes again (one poll), so a daemon that went away is still seen
 * (test/libfabric TestDeadDaemon kills one).
 *
 *   fi_emptypoll [PROV]      prints "fi_emptypoll: ok" and exit 0, or exit 1
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#define FITEST_NAME "fi_emptypoll"
#include "fitest.h"

enum { READS = 20000 };

static long polls;

/* poll(2), counted; the provider's and libfabric's calls land here. */
int poll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	static int (*real)(struct pollfd *, nfds_t, int);
	if (!real)
		real = (int (*)(struct pollfd *, nfds_t, int))dlsym(RTLD_NEXT, "poll");
	__atomic_add_fetch(&polls, 1, __ATOMIC_RELAXED);
	return real(fds, nfds, timeout);
}

/* The bound on probes during calls that took elapsed seconds: one per
 * IWD_IDLE_CHECK_NS and one more, the core's 50 ms probes, slack of 2. */
static long bound(double elapsed)
{
	return (long)(elapsed * 1000) + 1 + (long)(elapsed * 20) + 1 + 2;
}

int main(int argc, char **argv)
{
	struct fi_info *hints = fi_allocinfo(), *info;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_av *av;
	struct fid_poll *ps;
	struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_CONTEXT};
	struct fi_av_attr ava = {.type = FI_AV_TABLE};
	struct fi_poll_attr pa = {0};
	struct fid_ep *ep[1];
	struct fid_cq *cq[1];
	struct fi_cq_entry e;
	void *ctx[1];
	long before, n;
	double t0, elapsed;

	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG;
	hints->fabric_attr->prov_name = strdup(argc > 1 ? argv[1] : "iwarpd");
	CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &info));
	CHECK(fi_fabric(info->fabric_attr, &fab, NULL));
	CHECK(fi_domain(fab, info, &dom, NULL));
	CHECK(fi_av_open(dom, &ava, &av, NULL));
	fitest_open_eps(dom, info, av, &cqa, 1, ep, cq);
	CHECK(fi_poll_open(dom, &pa, &ps));
	CHECK(fi_poll_add(ps, &cq[0]->fid, 0));

	/* The first empty read may probe (the first one always does). */
	EXPECT(fi_cq_read(cq[0], &e, 1) == -FI_EAGAIN, "fi_cq_read of an empty CQ");

	before = __atomic_load_n(&polls, __ATOMIC_RELAXED);
	t0 = now_s();
	for (int i = 0; i < READS; i++) {
		ssize_t r = fi_cq_read(cq[0], &e, 1);
		if (r != -FI_EAGAIN)
			fitest_die("fi_cq_read %d of an empty CQ: %zd (%s)", i, r, fi_strerror((int)-r));
	}
	elapsed = now_s() - t0;
	n = __atomic_load_n(&polls, __ATOMIC_RELAXED) - before;
	printf("fi_emptypoll: %d empty fi_cq_read: %ld poll(2) in %.1f ms (at most %ld allowed)\n", READS, n,
	       elapsed * 1e3, bound(elapsed));
	EXPECT(n <= bound(elapsed), "%d empty fi_cq_read made %ld poll(2) calls in %.1f ms: the daemon is probed "
				    "on every empty read",
	       READS, n, elapsed * 1e3);

	before = __atomic_load_n(&polls, __ATOMIC_RELAXED);
	t0 = now_s();
	for (int i = 0; i < READS; i++) {
		int r = fi_poll(ps, ctx, 1);
		if (r != 0)
			fitest_die("fi_poll %d of an empty CQ: %d (%s)", i, r, fi_strerror(-r));
	}
	elapsed = now_s() - t0;
	n = __atomic_load_n(&polls, __ATOMIC_RELAXED) - before;
	printf("fi_emptypoll: %d empty fi_poll: %ld poll(2) in %.1f ms (at most %ld allowed)\n", READS, n,
	       elapsed * 1e3, bound(elapsed));
	EXPECT(n <= bound(elapsed), "%d empty fi_poll made %ld poll(2) calls in %.1f ms", READS, n, elapsed * 1e3);

	/* Idle for 5 ms (more than IWD_IDLE_CHECK_NS): the next read probes. */
	{
		struct timespec ts = {0, 5000000};
		nanosleep(&ts, NULL);
	}
	before = __atomic_load_n(&polls, __ATOMIC_RELAXED);
	EXPECT(fi_cq_read(cq[0], &e, 1) == -FI_EAGAIN, "fi_cq_read of an empty CQ after 5 ms");
	n = __atomic_load_n(&polls, __ATOMIC_RELAXED) - before;
	EXPECT(n >= 1, "an empty fi_cq_read 5 ms after the last one did not probe the daemon (%ld poll calls)", n);

	CHECK(fi_poll_del(ps, &cq[0]->fid, 0));
	CHECK(fi_close(&ps->fid));
	CHECK(fi_close(&ep[0]->fid));
	CHECK(fi_close(&cq[0]->fid));
	return fitest_close(av, dom, fab, info, hints);
}
