/*
 * fprd_rma_rx.h — the target side of RDMA on an RD QP's fast path (issue
 * 22; docs/fastpath.md "RDMA at the target"): while the rank owns its QP's
 * socket (fprd.h) it serves, from a slot's peer and in order, what the
 * daemon would otherwise take the socket back for:
 *  - a Write-Record (opcode 0xC) of one segment on a QP created with
 *    quiet_records, placed into the rank's own registered memory and
 *    acknowledged (verbsd/rd wrec_rd.go, verbsd/ud AcceptWriteRecord and
 *    CompleteQuiet: no receive, no completion);
 *  - an RDMA Read Request (RFC 5040 §4.4) whose Read Response fits one
 *    datagram, answered from the rank's memory (verbsd/rd readRequest);
 *  - an RFC 7306 Atomic Request — FetchAdd without an Add Mask, Swap and
 *    CmpSwap with any masks — executed on the rank's memory with the CPU's
 *    atomic instructions and answered (verbsd/rd RdAtomicRequest).
 * The checks are the daemon's (verbsd/rnic/remote.go checkRemote and
 * semantics.go AtomicTarget): the STag names a region of the QP's session
 * (rkeys.h) in the QP's PD with the right needed, the octets lie inside it
 * without wrapping, an atomic's target is 8-aligned, the message is one
 * whole segment of its length. Anything that fails a check, or that the
 * rank does not serve (a Write-Record with Immediate or into a QP without
 * quiet_records, a Read of fewer than 4 or more than one datagram's octets,
 * a masked FetchAdd, no right to send the response, its window or ring
 * full), stays in the socket for the daemon, which answers it (an error
 * message, NOTREADY) as always: the rank produces no error itself.
 *
 * Exactly once: the rank takes a request only in order (RD's sequence
 * numbers: a retransmission of one it took is below RcvNext, which the
 * daemon imports, and llp/rd drops it), executes it after it took it out
 * of the socket, and its response is a datagram of its outstanding ring
 * (a copy in the page) that the daemon retransmits if it is lost, never
 * re-executed.
 */
#ifndef IWV_FPRD_RMA_RX_H
#define IWV_FPRD_RMA_RX_H

#include <stddef.h>
#include <stdint.h>

#include "fastpath.h"
#include "fprd.h"

/* iwvi_fp_rd_rma_rx serves the datagram b[0, n) at the head of the socket
 * (peeked, Busy set) from slot's peer, which iwvi_fp_rd_classify left to
 * the daemon (rx) only for being RDMA: reason FP_R_TAGGED or FP_R_OPCODE,
 * every RD check passed (in order, incarnations, acknowledgement range).
 * 1: the rank took it out of the socket, applied its piggybacked
 * acknowledgement, executed it, moved RcvNext and sent its response (an
 * acknowledgement is owed for a Write-Record); 0: it is the daemon's,
 * nothing was done; a negative errno of the socket. */
int iwvi_fp_rd_rma_rx(struct iwvi_fp_rd *r, int slot, const uint8_t *b, size_t n, const struct fp_rx *rx);

/* fprd.c's: apply an acknowledgement (classified) to slot s. */
void iwvi_fp_rd_apply_ack(uint8_t *s, const struct fp_rd_hdr *h);

#endif
