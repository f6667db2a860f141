/*
 * fitest.h — the one set-up every test program of the provider shares
 * (every fi_*.c and t_fi_*.c here: fi_adopt_stale.c, fi_av_dup.c,
 * fi_baddesc.c, fi_cancel.c, fi_cm_race.c, fi_msg_size.c,
 * fi_named_port.c, fi_poll.c, fi_progress.c, fi_rcache.c, fi_rx_size.c,
 * fi_semantics.c, fi_shutdown.c, fi_srx.c, t_fi_atomic.c, t_fi_fastpath.c,
 * t_fi_msgdata.c; not bench_mr_live.c, a benchmark, nor test_match.c, a
 * unit test of the matching code): fitest_die (the verdict FAIL and exit 1),
 * CHECK (a libfabric call that must not fail), EXPECT (a condition; a miss
 * is printed and counted in failures), now_s, a bounded deadline scaled by
 * IWARPD_TEST_TIMEOUT_SCALE (fitest_set_deadline, fitest_check_deadline),
 * POST (a post retried while it says -FI_EAGAIN, within the deadline),
 * fitest_open_eps (endpoints with their CQs on an AV, enabled) and
 * fitest_close (the objects of the fabric, then the verdict).
 *
 * Define FITEST_NAME (the program's name, a string literal) before
 * including it; a program with roles sets fitest_role ("server", ...).
 * Unused parameters are marked (void)x, as everywhere in the C tests.
 */
#ifndef FITEST_H
#define FITEST_H

#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

__attribute__((unused)) static int failures;
__attribute__((unused)) static const char *fitest_role = "";
__attribute__((unused)) static double fitest_deadline_s;

__attribute__((format(printf, 1, 2), noreturn)) static inline void fitest_die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, FITEST_NAME "%s%s: FAIL: ", *fitest_role ? " " : "", fitest_role);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

#define CHECK(call)                                                                                \
	do {                                                                                       \
		ssize_t rc_ = (call);                                                              \
		if (rc_ < 0)                                                                       \
			fitest_die("%s:%d: %s = %zd (%s)", __FILE__, __LINE__, #call, rc_,          \
				   fi_strerror((int)-rc_));                                        \
	} while (0)
#define EXPECT(cond, ...)                                                           \
	do {                                                                        \
		if (!(cond)) {                                                      \
			fprintf(stderr, FITEST_NAME ": %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                               \
			fputc('\n', stderr);                                        \
			failures++;                                                 \
		}                                                                   \
	} while (0)

static inline double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* IWARPD_TEST_TIMEOUT_SCALE, at least 1. */
static inline double fitest_scale(void)
{
	const char *s = getenv("IWARPD_TEST_TIMEOUT_SCALE");
	double scale = s ? atof(s) : 1;
	return scale < 1 ? 1 : scale;
}

/* Every wait of the program ends by seconds (scaled) from now. */
static inline void fitest_set_deadline(double seconds)
{
	fitest_deadline_s = now_s() + seconds * fitest_scale();
}

static inline void fitest_check_deadline(const char *what)
{
	if (now_s() > fitest_deadline_s)
		fitest_die("timed out waiting for %s", what);
}

/* Posts with -FI_EAGAIN retried (the provider progresses inside the call). */
#define POST(call, what)                                                                   \
	do {                                                                               \
		ssize_t p_;                                                                \
		while ((p_ = (call)) == -FI_EAGAIN) {                                      \
			sched_yield();                                                     \
			fitest_check_deadline(what);                                       \
		}                                                                          \
		if (p_)                                                                    \
			fitest_die("%s: %zd (%s)", what, p_, fi_strerror((int)-p_));       \
	} while (0)

/* fitest_open_eps opens n endpoints of info on dom, each with a CQ of its
 * own (cqa) bound for transmit and receive, binds them to av and enables
 * them. */
static inline void fitest_open_eps(struct fid_domain *dom, struct fi_info *info, struct fid_av *av,
				   struct fi_cq_attr *cqa, int n, struct fid_ep **ep, struct fid_cq **cq)
{
	for (int i = 0; i < n; i++) {
		CHECK(fi_cq_open(dom, cqa, &cq[i], NULL));
		CHECK(fi_endpoint(dom, info, &ep[i], NULL));
		CHECK(fi_ep_bind(ep[i], &cq[i]->fid, FI_TRANSMIT | FI_RECV));
		CHECK(fi_ep_bind(ep[i], &av->fid, 0));
		CHECK(fi_enable(ep[i]));
	}
}

/* fitest_close closes the AV, domain and fabric, frees info and hints,
 * and returns the exit status: 0 (printing "FITEST_NAME: ok") when no
 * EXPECT failed, else 1. */
static inline int fitest_close(struct fid_av *av, struct fid_domain *dom, struct fid_fabric *fab, struct fi_info *info,
			       struct fi_info *hints)
{
	fi_close(&av->fid);
	fi_close(&dom->fid);
	fi_close(&fab->fid);
	fi_freeinfo(info);
	fi_freeinfo(hints);
	if (failures) {
		fprintf(stderr, FITEST_NAME ": %d failures\n", failures);
		return 1;
	}
	printf(FITEST_NAME ": ok\n");
	return 0;
}

#endif
