/*
 * fprq.h — the rank's side of a UD QP's posted receives while it owns the
 * QP's socket (issue 20; docs/fastpath.md "Posted receives"; the engine's
 * side: verbsd/ud/fastpath.go).
 *
 * The receives follow the socket: while the rank owns it (between an
 * iwvi_fp_own_renew that returned 1 and iwvi_fp_own_done) it consumes its
 * QP's own receive queue itself — the entry at the ring's consumer index,
 * in posting order — by storing the ring's consumer index, which the
 * engine does not touch then; when the engine takes the socket over it
 * adopts that index (checked against its own and the producer's), and it
 * publishes its own before it gives the socket back, so that each receive
 * is consumed by exactly one side. Not for a QP on an SRQ (shared with
 * other QPs: -EOPNOTSUPP).
 *
 * Internal to libiwverbs (hidden symbols); one thread per QP, as fpown.h.
 */
#ifndef IWV_FPRQ_H
#define IWV_FPRQ_H

#include <stdint.h>

#include "fpown.h"

/* The SGEs a receive the rank places into may have (more: -E2BIG). */
#define IWVI_FP_RQE_SGE 4

/* A posted receive as the rank posted it (iwv_post_recv): the addresses
 * are this process's. */
struct iwvi_fp_rqe {
	uint64_t wr_id;
	uint16_t num_sge;
	struct iwv_sge sge[IWVI_FP_RQE_SGE];
};

/* iwvi_fp_rq_attach: the rank consumes o's QP's receives while it owns the
 * socket (after iwvi_fp_own_attach; until the QP is destroyed): from now
 * on iwv_post_recv rings no doorbell while the rank owns the socket. */
void iwvi_fp_rq_attach(struct iwvi_fp_own *o);

/* iwvi_fp_rq_head gives the oldest receive the engine has not consumed
 * (the next the rank may place into): 0, -EAGAIN when none is posted,
 * -E2BIG when it has more than IWVI_FP_RQE_SGE SGEs (leave the datagram
 * to the engine), -EPERM outside renew/done, -EOPNOTSUPP with an SRQ,
 * -EIO when the consumer index is impossible (the engine's: it never is
 * unless the daemon is broken). */
int iwvi_fp_rq_head(struct iwvi_fp_own *o, struct iwvi_fp_rqe *out);

/* iwvi_fp_rq_consume consumes that receive (the ring's consumer index one
 * further, release order: before the Busy clear that lets the engine take
 * over). Same errors. */
int iwvi_fp_rq_consume(struct iwvi_fp_own *o);

#endif
