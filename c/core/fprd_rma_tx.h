/*
 * fprd_rma_tx.h — the origin side of RDMA on an RD QP's fast path (issue 22,
 * issue 20; docs/fastpath.md "RDMA Writes the rank sends itself"): while the
 * rank owns its QP's socket (fprd.h) it sends a one-datagram RDMA
 * Write-Record itself, byte for byte as the daemon builds it
 * (verbsd/rd/wrec_rd.go prepareWriteRecord, verbsd/ud/wrec_send.go
 * WriteRecordSegments; docs/write-record.md, wire-format.md §8), and
 * completes it when RD acknowledges it — the daemon's own completion rule
 * for a Write-Record on RD (WCWriteRecord when every segment is
 * acknowledged).
 *
 * The datagram is a DATA of the slot's sequence like the rank's Sends:
 * a copy goes into the page's outstanding ring, and the daemon retransmits
 * it after a take-over. Its Record ID is the QP's next MSN of QN 0 (the
 * page's SendMSN, shared with Sends as in the daemon), and it asks for an
 * ACK at once (Q), as the daemon does for the last Write-Record queued.
 *
 * A Write completes successfully
 *  - when a Cumulative Ack the rank reads passes its sequence number
 *    (SndUna of its slot beyond it) while the rank still owns the socket
 *    it sent it on; or
 *  - when the rank owns the socket again after having lost it (a release,
 *    or a renew that found the daemon owning) and the slot the daemon
 *    handed back for its peer (found again by address: the slot numbers
 *    may have moved) has SndUna beyond it, or no slot has its peer. A
 *    hand-back may give the rank's own copies back still outstanding
 *    (verbsd/rd/fastpath_out.go: they go back into the slot's ring), so
 *    the hand-back alone proves nothing; but llp/rd FastpathExportOut
 *    exports every peer with a datagram outstanding, so a peer left out
 *    has none. A copy given up (retries exceeded, the peer restarted)
 *    fails the QP instead, and then the socket never comes back: the
 *    caller fails what is pending when it learns the QP failed
 *    (iwvi_fp_rd_rma_flush).
 * A hand-back needs Want after the take-over (the engine clears Want when
 * it takes the socket over, and the rank sets it only through a renew that
 * found the engine owning, or explicitly): so "the rank lost the socket
 * since the Write was sent" is the count of the rank's releases and failed
 * renews (fprd.h released, fpown.h lost) having moved, which the rank
 * itself maintains. (Whoever adds a way for the rank to give the socket
 * back must count it in released, and none may set Want after a release
 * or take-over except through a renew that fails: a hand-back the rank
 * did not see as a loss would complete its Writes by slot numbers that
 * were rewritten.)
 *
 * Internal to libiwverbs (hidden symbols); one thread per QP, as fprd.h.
 * No allocation.
 */
#ifndef IWV_FPRD_RMA_TX_H
#define IWV_FPRD_RMA_TX_H

#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/uio.h>

#include "fprd.h"

/* Most Writes pending at once: every ring of every slot full. */
#define IWVI_FP_RMA_MAX (W_FP_RD_SLOTS * W_FP_RD_RING)

struct iwvi_fp_rd_rma_ent {
	uint64_t cookie; /* the caller's */
	uint32_t seq;    /* its datagram's sequence number */
	uint32_t epoch;  /* iwvi_fp_rd_rma epoch when slot was last read */
	uint32_t our_inc;        /* the slot's Our Incarnation then */
	struct sockaddr_in peer; /* whom it went to: finds the slot after a hand-back */
	int slot;
};

/* The rank's pending Writes, oldest first (zeroed by the caller). */
struct iwvi_fp_rd_rma {
	struct iwvi_fp_rd_rma_ent e[IWVI_FP_RMA_MAX];
	unsigned n;
	/* Counts (information; tests assert on them). */
	uint64_t writes, on_ack, on_handback, flushed;
};

/* iwvi_fp_rd_write_max: the largest Write the rank sends itself (one
 * datagram and one copy of the page: 8 octets less than a Send). */
size_t iwvi_fp_rd_write_max(const struct iwvi_fp_rd *r);

/* iwvi_fp_rd_write sends iov[0, count) (len octets) as one Write-Record to
 * the STag stag at tagged offset to of slot's peer and records it pending
 * with cookie. 0 when sent (it completes through iwvi_fp_rd_rma_reap),
 * -EAGAIN when the rank cannot send it itself now (the socket is not the
 * rank's, no send right, the window, the ring or the pending table full:
 * post it through the daemon), -EMSGSIZE when it does not fit, -EINVAL for
 * a bad slot or a TO + len that wraps 2^64 (the daemon's WCLocLenErr). */
int iwvi_fp_rd_write(struct iwvi_fp_rd *r, struct iwvi_fp_rd_rma *t, int slot, uint32_t stag, uint64_t to,
		     const struct iovec *iov, size_t count, size_t len, uint64_t cookie);

/* iwvi_fp_rd_rma_reap writes into cookies[0, max) the Writes that are now
 * complete (rules above) and forgets them: returns how many. It renews the
 * lease to look (0 when the socket is not the rank's: it asks for it). */
int iwvi_fp_rd_rma_reap(struct iwvi_fp_rd *r, struct iwvi_fp_rd_rma *t, uint64_t *cookies, int max);

/* iwvi_fp_rd_rma_flush forgets every pending Write (the QP failed, or the
 * endpoint closes), writing at most max cookies: returns how many. */
int iwvi_fp_rd_rma_flush(struct iwvi_fp_rd_rma *t, uint64_t *cookies, int max);

#endif
