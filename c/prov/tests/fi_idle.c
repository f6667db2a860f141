/*
 * fi_idle — the provider's wait discipline after an empty poll
 * (c/prov/iwd_idle.c, FI_IWARPD_IDLE, docs/libfabric.md "Progress").
 *
 * One RDM endpoint of the iwarpd provider with its CQ, a counter and a
 * poll set, nothing posted. sched_yield(2) and nanosleep(2) are interposed
 * (the program is linked with -rdynamic; the provider's calls resolve
 * here) and counted while `counting` is set. The mode is argv[1], which
 * the program also sets as FI_IWARPD_IDLE before fi_getinfo:
 *
 *   yield     every empty fi_cq_read, fi_poll and unchanged fi_cntr_read
 *             yields exactly once and never sleeps; a changed counter read
 *             does neither;
 *   sleep     each sleeps exactly once (FI_IWARPD_IDLE_SLEEP_US, here 2)
 *             and never yields, and the thread's timer slack is what it was
 *             after the calls (the provider lowers it for the sleep only);
 *   adaptive  the first empty read yields (no contention seen yet); then,
 *             with this process and a busy child bound to one CPU, empty
 *             reads go on (bounded: at most READS_MAX, or 20 s) until one
 *             sleeps: a yield that waited for the child's slice is seen
 *             and the thread sleeps instead of yielding. No time is
 *             asserted: the count of each call is.
 *   block     adaptive, FI_IWARPD_IDLE_BLOCK_US=1000000 (1 s), fast path
 *             off: two endpoints of the domain on one CQ, ROUNDS (or more,
 *             until 5 blocks, at most ROUNDS_MAX) rendezvous sends of
 *             LEN octets from one to the other; every empty fi_cq_read
 *             while one is in flight (all of it the daemon's work), but
 *             the first after a read that found something (the end of a
 *             drain), blocks on the completion channel (ppoll(2)
 *             interposed: the provider's only blocking call) instead of
 *             yielding or sleeping; no block ends by its bound (each is
 *             woken by the daemon's signal: a missed arming would sleep
 *             out the second), at least one block is made, and the data
 *             arrive intact (docs/libfabric.md "Waiting: yield or sleep",
 *             "Blocking while the daemon works").
 *   noblock   the same with FI_IWARPD_IDLE_BLOCK_US=0 (the default): each
 *             empty read yields or sleeps once, as before, and none
 *             blocks.
 *   self      adaptive, with the RDM fast path (the default): once the
 *             endpoint owns its RD socket (bounded: at most READS_MAX
 *             empty reads, or 20 s), READS empty fi_cq_read neither yield
 *             nor sleep — the domain serves itself (iwd_progress.c). The
 *             other modes run with FI_IWARPD_FASTPATH_RDM=0, whose
 *             endpoint waits on the daemon.
 *
 *   fi_idle MODE      prints "fi_idle: ok" and exit 0, or exit 1
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#define FITEST_NAME "fi_idle"
#include "fitest.h"

enum { READS = 2000, READS_MAX = 200000, ROUNDS = 20, ROUNDS_MAX = 400, LEN = 1 << 20 };

static int counting;
static long yields, sleeps, blocks, block_timeouts;

/* The provider's block on the completion channel (iwd_progress.c
 * iwd_domain_block); returns 0 when its bound ran out. */
int ppoll(struct pollfd *fds, nfds_t nfds, const struct timespec *tmo, const sigset_t *mask)
{
	static int (*real)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);
	int n;
	if (!real)
		real = (int (*)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *))dlsym(RTLD_NEXT,
													   "ppoll");
	n = real(fds, nfds, tmo, mask);
	if (__atomic_load_n(&counting, __ATOMIC_RELAXED)) {
		__atomic_add_fetch(&blocks, 1, __ATOMIC_RELAXED);
		if (n == 0)
			__atomic_add_fetch(&block_timeouts, 1, __ATOMIC_RELAXED);
	}
	return n;
}

int sched_yield(void)
{
	static int (*real)(void);
	if (!real)
		real = (int (*)(void))dlsym(RTLD_NEXT, "sched_yield");
	if (__atomic_load_n(&counting, __ATOMIC_RELAXED))
		__atomic_add_fetch(&yields, 1, __ATOMIC_RELAXED);
	return real();
}

int nanosleep(const struct timespec *req, struct timespec *rem)
{
	static int (*real)(const struct timespec *, struct timespec *);
	if (!real)
		real = (int (*)(const struct timespec *, struct timespec *))dlsym(RTLD_NEXT, "nanosleep");
	if (__atomic_load_n(&counting, __ATOMIC_RELAXED))
		__atomic_add_fetch(&sleeps, 1, __ATOMIC_RELAXED);
	return real(req, rem);
}

static void count(int on)
{
	if (on) {
		__atomic_store_n(&yields, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&sleeps, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&blocks, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&block_timeouts, 0, __ATOMIC_RELAXED);
	}
	__atomic_store_n(&counting, on, __ATOMIC_RELAXED);
}

static void bind_cpu(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		fitest_die("sched_setaffinity(CPU %d): %s", cpu, strerror(errno));
}

/* yield and sleep: each kind of empty poll makes exactly one call of the
 * mode's kind and none of the other. */
static void fixed_mode(int sleep_mode, struct fid_cq *cq, struct fid_poll *ps, struct fid_cntr *cntr)
{
	long want_y = sleep_mode ? 0 : READS, want_s = sleep_mode ? READS : 0;
	int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
	struct fi_cq_entry e;
	void *ctx[1];
	uint64_t v;

	count(1);
	for (int i = 0; i < READS; i++)
		EXPECT(fi_cq_read(cq, &e, 1) == -FI_EAGAIN, "fi_cq_read %d of an empty CQ", i);
	count(0);
	printf("fi_idle: %d empty fi_cq_read: %ld sched_yield, %ld nanosleep\n", READS, yields, sleeps);
	EXPECT(yields == want_y && sleeps == want_s, "%d empty fi_cq_read made %ld sched_yield and %ld nanosleep, "
						     "want %ld and %ld",
	       READS, yields, sleeps, want_y, want_s);

	count(1);
	for (int i = 0; i < READS; i++)
		EXPECT(fi_poll(ps, ctx, 1) == 0, "fi_poll %d of an empty CQ", i);
	count(0);
	EXPECT(yields == want_y && sleeps == want_s, "%d empty fi_poll made %ld sched_yield and %ld nanosleep", READS,
	       yields, sleeps);

	v = fi_cntr_read(cntr);
	count(1);
	for (int i = 0; i < READS; i++)
		EXPECT(fi_cntr_read(cntr) == v, "fi_cntr_read %d of an idle counter", i);
	count(0);
	EXPECT(yields == want_y && sleeps == want_s, "%d unchanged fi_cntr_read made %ld sched_yield and %ld nanosleep",
	       READS, yields, sleeps);

	/* A read that finds the counter changed is not an empty poll. */
	CHECK(fi_cntr_add(cntr, 1));
	count(1);
	EXPECT(fi_cntr_read(cntr) == v + 1, "fi_cntr_read after fi_cntr_add(1)");
	count(0);
	EXPECT(yields == 0 && sleeps == 0, "a changed fi_cntr_read made %ld sched_yield and %ld nanosleep", yields,
	       sleeps);

	EXPECT(prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0) == slack, "timer slack %d after the polls, %d before",
	       prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0), slack);
}

/* adaptive: yields first, sleeps once a busy task on its CPU kept a yield
 * waiting. */
static void adaptive_mode(struct fid_cq *cq)
{
	struct fi_cq_entry e;
	long reads = 0, y;
	pid_t busy;
	int st;

	count(1);
	EXPECT(fi_cq_read(cq, &e, 1) == -FI_EAGAIN, "fi_cq_read of an empty CQ");
	count(0);
	EXPECT(yields == 1 && sleeps == 0, "the first empty fi_cq_read made %ld sched_yield and %ld nanosleep, want 1 "
					   "and 0",
	       yields, sleeps);

	bind_cpu(0);
	busy = fork();
	if (busy < 0)
		fitest_die("fork: %s", strerror(errno));
	if (busy == 0) {
		alarm(60); /* bounded if the parent is killed */
		for (;;)
			__asm__ volatile("" ::: "memory");
	}
	fitest_set_deadline(20);
	count(1);
	while (__atomic_load_n(&sleeps, __ATOMIC_RELAXED) == 0 && reads < READS_MAX) {
		EXPECT(fi_cq_read(cq, &e, 1) == -FI_EAGAIN, "fi_cq_read of an empty CQ");
		reads++;
		if (now_s() > fitest_deadline_s)
			break;
	}
	count(0);
	y = yields;
	kill(busy, SIGKILL);
	waitpid(busy, &st, 0);
	printf("fi_idle: adaptive, a busy process on the CPU: the first sleep after %ld empty reads (%ld yields)\n",
	       reads, y);
	EXPECT(sleeps > 0, "adaptive: %ld empty fi_cq_read with a busy process on the same CPU never slept "
			   "(%ld yields): contention not seen",
	       reads, y);
}

/* self: a domain whose endpoint owns its socket polls on. */
static void self_mode(struct fid_cq *cq)
{
	struct fi_cq_entry e;
	long reads = 0, i;

	fitest_set_deadline(20);
	for (;;) { /* until an empty read makes no call: the socket is ours */
		count(1);
		EXPECT(fi_cq_read(cq, &e, 1) == -FI_EAGAIN, "fi_cq_read of an empty CQ");
		count(0);
		reads++;
		if (yields == 0 && sleeps == 0)
			break;
		yields = sleeps = 0;
		if (reads >= READS_MAX || now_s() > fitest_deadline_s) {
			EXPECT(0, "self: %ld empty fi_cq_read all yielded or slept: the endpoint never served itself", reads);
			return;
		}
	}
	count(1);
	for (i = 0; i < READS; i++)
		EXPECT(fi_cq_read(cq, &e, 1) == -FI_EAGAIN, "fi_cq_read of an empty CQ");
	count(0);
	printf("fi_idle: self, owned after %ld empty reads: %d more made %ld sched_yield and %ld nanosleep\n", reads,
	       (int)READS, yields, sleeps);
	EXPECT(yields == 0 && sleeps == 0, "self: %d empty fi_cq_read of a self-served domain made %ld sched_yield and "
					   "%ld nanosleep, want 0 and 0",
	       (int)READS, yields, sleeps);
}

/* Empty reads of read_one, and those of them that came first after a
 * read that found something (the provider neither blocks on those nor
 * counts them as a wait: iwd_idle.c iwd_idle_block_due). */
static long empty_reads, first_empty;
static int prev_found = 1;

/* Reads cq until one completion (bounded by the deadline). */
static void read_one(struct fid_cq *cq, const char *what)
{
	struct fi_cq_err_entry err;
	struct fi_cq_entry e;
	ssize_t n;
	while ((n = fi_cq_read(cq, &e, 1)) == -FI_EAGAIN) {
		empty_reads++;
		first_empty += prev_found;
		prev_found = 0;
		fitest_check_deadline(what);
	}
	prev_found = 1;
	if (n == -FI_EAVAIL && fi_cq_readerr(cq, &err, 0) == 1)
		fitest_die("%s: error completion %d (%s)", what, err.err, fi_strerror(err.err));
	if (n != 1)
		fitest_die("%s: fi_cq_read = %zd (%s)", what, n, fi_strerror((int)-n));
}

/* block / noblock: rendezvous sends between two endpoints of the domain;
 * the empty reads while one is in flight block on the channel (block) or
 * yield (noblock). */
static void block_mode(int block, struct fid_ep **ep, struct fid_cq *cq, struct fid_av *av)
{
	char name[2][64];
	fi_addr_t addr[2];
	unsigned char *sbuf = malloc(LEN), *rbuf = malloc(LEN);
	long y = 0, sl = 0, b = 0, bt = 0;
	size_t namelen;
	int r;

	if (!sbuf || !rbuf)
		fitest_die("out of memory");
	for (int d = 0; d < 2; d++) {
		namelen = sizeof(name[d]);
		CHECK(fi_getname(&ep[d]->fid, name[d], &namelen));
		EXPECT(fi_av_insert(av, name[d], 1, &addr[d], 0, NULL) == 1, "fi_av_insert");
	}
	fitest_set_deadline(60);
	/* ROUNDS, and on until a few blocks were seen (a transfer that
	 * completes within the first empty read after a completion makes
	 * none), at most ROUNDS_MAX. */
	for (r = 0; r < ROUNDS_MAX && (r < ROUNDS || (block && b < 5)); r++) {
		for (size_t i = 0; i < LEN; i++)
			sbuf[i] = (unsigned char)(i * 7 + (size_t)r);
		memset(rbuf, 0, LEN);
		POST(fi_recv(ep[1], rbuf, LEN, NULL, addr[0], NULL), "fi_recv");
		POST(fi_send(ep[0], sbuf, LEN, NULL, addr[1], NULL), "fi_send");
		count(1);
		read_one(cq, "the receive's or the send's completion");
		read_one(cq, "the other completion");
		count(0);
		y += yields;
		sl += sleeps;
		b += blocks;
		bt += block_timeouts;
		EXPECT(!memcmp(sbuf, rbuf, LEN), "round %d: the %d octets received differ from those sent", r, LEN);
		if (failures)
			break;
	}
	printf("fi_idle: %s, %d rendezvous sends of %d octets: %ld empty reads (%ld first after a completion): %ld "
	       "blocks on the channel (%ld ended by the bound), %ld sched_yield, %ld nanosleep\n",
	       block ? "block" : "noblock", r, LEN, empty_reads, first_empty, b, bt, y, sl);
	if (block) {
		/* Only the first empty read after a completion (the end of a
		 * drain) yields or sleeps; every later one is a wait. */
		EXPECT(b > 0 && bt == 0 && y + sl <= first_empty,
		       "block: the reads while the daemon moved %d rendezvous made %ld blocks, %ld of them ended by "
		       "the 1 s bound (not woken by the daemon's signal), %ld sched_yield and %ld nanosleep; want "
		       "at least one block, none ended by the bound, at most %ld yields and sleeps (one per first "
		       "empty read after a completion)",
		       r, b, bt, y, sl, first_empty);
	} else {
		/* Every empty read yields or sleeps once, as before. */
		EXPECT(b == 0 && y + sl == empty_reads,
		       "noblock: %ld empty reads made %ld blocks, %ld sched_yield and %ld nanosleep; want no block "
		       "and one yield or sleep each",
		       empty_reads, b, y, sl);
	}
	free(sbuf);
	free(rbuf);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "yield";
	struct fi_info *hints, *info;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_av *av;
	struct fid_poll *ps;
	struct fid_cntr *cntr;
	struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_CONTEXT};
	struct fi_cntr_attr ca = {.events = FI_CNTR_EVENTS_COMP};
	struct fi_av_attr ava = {.type = FI_AV_TABLE};
	struct fi_poll_attr pa = {0};
	struct fid_ep *ep[2];
	struct fid_cq *cq[2];
	int blockish = !strcmp(mode, "block") || !strcmp(mode, "noblock");

	setenv("FI_IWARPD_IDLE", strcmp(mode, "self") && !blockish ? mode : "adaptive", 1);
	setenv("FI_IWARPD_IDLE_SLEEP_US", "2", 1);
	setenv("FI_IWARPD_FASTPATH_RDM", strcmp(mode, "self") ? "0" : "1", 1);
	if (blockish)
		setenv("FI_IWARPD_IDLE_BLOCK_US", strcmp(mode, "block") ? "0" : "1000000", 1);
	hints = fi_allocinfo();
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG;
	hints->fabric_attr->prov_name = strdup("iwarpd");
	CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &info));
	CHECK(fi_fabric(info->fabric_attr, &fab, NULL));
	CHECK(fi_domain(fab, info, &dom, NULL));
	CHECK(fi_av_open(dom, &ava, &av, NULL));
	if (blockish) {
		/* Both endpoints complete into one CQ (a completion waiting in
		 * another CQ of the domain is not a wait on the daemon). */
		CHECK(fi_cq_open(dom, &cqa, &cq[0], NULL));
		cq[1] = cq[0];
		for (int i = 0; i < 2; i++) {
			CHECK(fi_endpoint(dom, info, &ep[i], NULL));
			CHECK(fi_ep_bind(ep[i], &cq[0]->fid, FI_TRANSMIT | FI_RECV));
			CHECK(fi_ep_bind(ep[i], &av->fid, 0));
			CHECK(fi_enable(ep[i]));
		}
	} else {
		fitest_open_eps(dom, info, av, &cqa, 1, ep, cq);
	}
	CHECK(fi_poll_open(dom, &pa, &ps));
	CHECK(fi_poll_add(ps, &cq[0]->fid, 0));
	CHECK(fi_cntr_open(dom, &ca, &cntr, NULL));

	if (!strcmp(mode, "yield") || !strcmp(mode, "sleep"))
		fixed_mode(!strcmp(mode, "sleep"), cq[0], ps, cntr);
	else if (!strcmp(mode, "adaptive"))
		adaptive_mode(cq[0]);
	else if (!strcmp(mode, "self"))
		self_mode(cq[0]);
	else if (blockish)
		block_mode(!strcmp(mode, "block"), ep, cq[0], av);
	else
		fitest_die("unknown mode %s (yield, sleep, adaptive, self, block, noblock)", mode);

	CHECK(fi_close(&cntr->fid));
	CHECK(fi_poll_del(ps, &cq[0]->fid, 0));
	CHECK(fi_close(&ps->fid));
	CHECK(fi_close(&ep[0]->fid));
	if (blockish)
		CHECK(fi_close(&ep[1]->fid));
	CHECK(fi_close(&cq[0]->fid));
	return fitest_close(av, dom, fab, info, hints);
}
