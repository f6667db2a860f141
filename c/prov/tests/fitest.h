/*
 * fitest.h — what the provider's one-process test programs (fi_cancel.c,
 * fi_rx_size.c) share: CHECK (a libfabric call that must succeed, else
 * exit 1), EXPECT (a condition; a miss is printed and counted in
 * failures), now_s, and fitest_close (the objects of the fabric, then the
 * verdict). Define FITEST_NAME (the program's name, a string literal)
 * before including it.
 */
#ifndef FITEST_H
#define FITEST_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

static int failures;

#define CHECK(call)                                                                              \
	do {                                                                                     \
		ssize_t rc_ = (call);                                                            \
		if (rc_ < 0) {                                                                   \
			fprintf(stderr, FITEST_NAME ": %s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
				fi_strerror((int)-rc_));                                         \
			exit(1);                                                                 \
		}                                                                                \
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
