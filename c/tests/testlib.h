/*
 * testlib.h — helpers of the C test programs of libiwverbs (run by the Go
 * package test/cclient against real daemons). A failed check prints where
 * and why and exits 1; every wait is bounded and scaled by
 * IWARPD_TEST_TIMEOUT_SCALE.
 */
#ifndef IWV_TESTLIB_H
#define IWV_TESTLIB_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iwarpd/verbs.h"

#define CHECK(cond)                                                                          \
	do {                                                                                 \
		if (!(cond)) {                                                               \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
			exit(1);                                                             \
		}                                                                            \
	} while (0)

/* OK checks that a libiwverbs call returned >= 0. */
#define OK(s, expr)                                                                                      \
	do {                                                                                             \
		int r_ = (expr);                                                                         \
		if (r_ < 0) {                                                                            \
			fprintf(stderr, "%s:%d: %s = %d (%s): %s\n", __FILE__, __LINE__, #expr, r_,      \
				iwv_strerror(r_), iwv_last_error(s));                                    \
			exit(1);                                                                         \
		}                                                                                        \
	} while (0)

/* FAILS checks that a call returned exactly -err. */
#define FAILS(s, err, expr)                                                                              \
	do {                                                                                             \
		int r_ = (expr);                                                                         \
		if (r_ != -(err)) {                                                                      \
			fprintf(stderr, "%s:%d: %s = %d (%s), want -%s: %s\n", __FILE__, __LINE__, #expr, r_, \
				r_ < 0 ? iwv_strerror(r_) : "ok", #err, iwv_last_error(s));             \
			exit(1);                                                                         \
		}                                                                                        \
	} while (0)

/* The daemons' sockets: $IWV_TEST_SOCK_A and $IWV_TEST_SOCK_B. */
const char *sock_a(void);
const char *sock_b(void);
struct iwv_session *open_session(const char *sock, const char *name);

/* scaled_ms multiplies ms by IWARPD_TEST_TIMEOUT_SCALE. */
int scaled_ms(int ms);
long long mono_ms(void);

/* wait_wc polls cq until one completion arrives (bounded: 10 s scaled). */
void wait_wc(struct iwv_session *s, struct iwv_cq *cq, struct iwv_wc *wc);
/* expect_no_wc checks that cq stays empty for a short while. */
void expect_no_wc(struct iwv_cq *cq);

/* Resources of one test endpoint. */
struct ep {
	struct iwv_session *s;
	struct iwv_pd *pd;
	struct iwv_cq *scq, *rcq;
	struct iwv_qp *qp;
	struct iwv_buffer *buf;
	struct iwv_mr *mr;
	char *mem;
	size_t len;
};

/* ep_open opens a session with a PD, two CQs, a buffer of len registered
 * with every access, and a QP of type t (moved to RTS unless RC). */
void ep_open(struct ep *e, const char *sock, const char *name, enum iwv_qp_type t, size_t len);
void ep_close(struct ep *e);

struct iwv_sge sge_of(struct ep *e, size_t off, uint32_t len);

#endif
