/*
 * fprd_req.h — RDMA Reads and RFC 7306 atomics the rank sends itself on
 * its RD QP's socket (issue 22; docs/fastpath.md "Reads and atomics the
 * rank sends itself"): one Read Request whose Read Response fits one
 * datagram, or one Atomic Request (FetchAdd, Swap, CmpSwap), numbered,
 * copied and sent as the rank's Writes are (fprd_rma_tx.h), built octet
 * for octet as the daemon builds them (fastpath_req.h).
 *
 * A request completes when its response comes:
 *  - the rank's poll takes the in-order Read Response / Atomic Response of
 *    its own outstanding request while it owns the socket
 *    (iwvi_fp_rd_req_rx, from fprd_rma_rx.c), places it into the sink and
 *    completes it; or
 *  - the daemon took the socket over meanwhile: it imported the request
 *    from the page's entry (verbsd/rd/fastpath_req.go, checked), took the
 *    response or the error message naming it, and wrote the outcome into
 *    the entry (the response into the page, never into the rank's memory);
 *    it hands the socket back only once every imported request is
 *    resolved, and the rank completes such a request when it owns the
 *    socket again (iwvi_fp_rd_req_reap copies the response into the sink).
 * A request whose QP fails never completes successfully
 * (iwvi_fp_rd_req_flush: the caller fails it).
 *
 * Internal to libiwverbs (hidden symbols); one thread per QP, as fprd.h.
 */
#ifndef IWV_FPRD_REQ_H
#define IWV_FPRD_REQ_H

#include <stddef.h>
#include <stdint.h>

#include "fastpath.h"
#include "fprd.h"

struct iwvi_fp_rd_req_ent {
	uint64_t cookie; /* the caller's */
	uint64_t order;  /* sending order (the oldest Read is answered first) */
	uint8_t *sink;   /* Read: len octets; atomic: 8 octets, host order (NULL: discarded) */
	uint32_t len;
	uint32_t kind; /* W_FP_RD_REQ_READ or W_FP_RD_REQ_ATOMIC; 0: free */
	int slot;
	uint32_t msn, id; /* id: a Read's sink STag, an atomic's Request Identifier */
	uint64_t to;      /* a Read's sink TO */
};

/* A completed request: its cookie and work completion status
 * (IWV_WC_SUCCESS, else the daemon's status; IWV_WC_WR_FLUSH_ERR when the
 * QP failed), the iWARP error of an error message in term. */
struct iwvi_fp_rd_req_done {
	uint64_t cookie;
	int status;
	uint32_t term;
};

/* The rank's outstanding requests (zeroed by the caller; r->reqs). */
struct iwvi_fp_rd_reqs {
	struct iwvi_fp_rd_req_ent e[W_FP_RD_REQS]; /* entry k is the page's request entry k */
	struct iwvi_fp_rd_req_done done[W_FP_RD_REQS];
	unsigned n, ndone;
	uint64_t next_order;
	/* Counts (information; tests assert on them). */
	uint64_t reads, atomics, on_resp, on_handback, failed, flushed;
};

/* iwvi_fp_rd_read_max: the largest Read the rank sends itself (its
 * response one datagram of the peer's, which uses the same size). */
size_t iwvi_fp_rd_read_max(const struct iwvi_fp_rd *r);

/* iwvi_fp_rd_read sends a Read Request for len octets at src_stag/src_to
 * of slot's peer, into sink; iwvi_fp_rd_atomic an Atomic Request (op 0
 * FetchAdd, 1 Swap, 2 CmpSwap; the daemon's masks: none for FetchAdd,
 * all ones otherwise) on the 8 octets at stag/to, the original value into
 * result (8 octets, host order; NULL: discarded). 0 when sent, -EAGAIN
 * when the rank cannot send it now (not its socket, no send right, window,
 * ring or request table full, no r->reqs): post it through the daemon;
 * -EMSGSIZE (too long), -EINVAL (bad slot, TO wraps, misaligned). */
int iwvi_fp_rd_read(struct iwvi_fp_rd *r, int slot, uint32_t src_stag, uint64_t src_to, void *sink, size_t len,
		    uint64_t cookie);
int iwvi_fp_rd_atomic(struct iwvi_fp_rd *r, int slot, int op, uint32_t stag, uint64_t to, uint64_t add_swap,
		      uint64_t compare, void *result, uint64_t cookie);

/* iwvi_fp_rd_req_rx: fprd_rma_rx.c's, for a DATA segment seg[0, len) in
 * order from slot's peer: when it is the response of one of the rank's
 * requests, takes the datagram out of the socket, places the response and
 * completes the request: 1; 0 when it is not (the caller goes on); < 0 an
 * error of the socket. The caller then accounts the datagram as taken. */
int iwvi_fp_rd_req_rx(struct iwvi_fp_rd *r, int slot, const uint8_t *seg, size_t len, const struct fp_rx *rx);

/* iwvi_fp_rd_req_reap writes into out[0, max) the requests now complete
 * (above) and forgets them: how many. It renews the lease to look at the
 * entries the daemon resolved. */
int iwvi_fp_rd_req_reap(struct iwvi_fp_rd *r, struct iwvi_fp_rd_req_done *out, int max);

/* iwvi_fp_rd_req_flush forgets every outstanding request (the QP failed,
 * or the endpoint closes), status IWV_WC_WR_FLUSH_ERR: how many. */
int iwvi_fp_rd_req_flush(struct iwvi_fp_rd *r, struct iwvi_fp_rd_req_done *out, int max);

#endif
