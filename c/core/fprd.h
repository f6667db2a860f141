/*
 * fprd.h — the rank's side of an RD QP's fast path (issue 20;
 * docs/design-small-messages.md "RD protocol state", docs/fastpath.md
 * "RD"; the page's RD halves: proto/fastpath_rd.go; the engine's side:
 * verbsd/rd/fastpath.go).
 *
 * On top of the socket's hand-over (fpown.h) the daemon gives the rank,
 * with the socket, the steady state of its proven peers: one slot per peer
 * in the page. While the rank owns the socket it
 *  - sends an untagged Send of one datagram to a slot's peer itself
 *    (iwvi_fp_rd_send: codec of fastpath.h, the RD header from the slot,
 *    a copy of the datagram kept in the page for the daemon to retransmit);
 *  - takes from the socket, in iwvi_fp_rd_poll, the in-order one-segment
 *    Sends of a slot's peer (handed to a callback) and its ACKs without
 *    SACK (applied to the slot), and acknowledges what it took: on the
 *    next Send to that peer (piggybacked), or at the next poll that takes
 *    no Send, a release or the daemon's take-over, or at once when a peer
 *    is owed 16 (FP_RD_ACK_BATCH in fprd.c);
 *  - serves, in order from a slot's peer, one-datagram Write-Records,
 *    Read Requests and atomics on its own memory (fprd_rma_rx.h);
 *  - gives the socket to the daemon for anything else (a hole, a duplicate,
 *    a new peer, a Challenge, NOTREADY, RESET, other RDMA, a segmented message),
 *    which then serves it, as it serves loss (the retransmission timer runs
 *    in the daemon from the page's outstanding ring).
 * The daemon checks what the rank leaves in the page when it takes the
 * socket back: a rank that breaks the rules fails its own QP (ERROR).
 *
 * A Send the rank cannot send itself (no slot, window or ring full, the
 * socket not the rank's, larger than one datagram) goes through the
 * daemon (iwv_post_send), after iwvi_fp_rd_release: the rank's earlier
 * datagrams keep their sequence numbers before the daemon's, and the rank
 * sends nothing itself until the daemon gives the socket back (posting
 * without releasing also takes the socket back, at the engine's next pass,
 * but a Send the rank made meanwhile would overtake the posted one).
 *
 * Internal to libiwverbs (hidden symbols), for the provider's RDM
 * endpoints; one thread per QP uses it. No allocation after attach.
 */
#ifndef IWV_FPRD_H
#define IWV_FPRD_H

#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>

#include "fastpath.h"
#include "fpown.h"

struct iwvi_fp_rd_reqs; /* fprd_req.h */

/* IWVI_FP_RD_TX_BATCH: the datagrams iwvi_fp_rd_send queues before a
 * flush (one sendmmsg(2)). */
#define IWVI_FP_RD_TX_BATCH 16

struct iwvi_fp_rd {
	struct iwvi_fp_own own; /* the hand-over; own.page is W_FP_RD_PAGE_LEN octets */
	uint32_t qkey;          /* our QP's Q_Key */
	int crc;                /* CRC32c trailer on (the default); 0: the QP was created with no_crc (own.crc) */
	size_t max_payload;     /* largest Send the rank sends itself */
	uint32_t ack_now;       /* slots whose peer asked for an ACK at once (Q) */
	/* The transmit batch (iwvi_fp_rd_flush): on when batch is 1 (the
	 * caller flushes), else every Send goes out at once. */
	int batch;
	unsigned txn;
	struct {
		struct sockaddr_in to;
		size_t len;
		uint8_t b[FP_KEYS_LEN + FP_RD_HDR_LEN + W_FP_RD_COPY_LEN + FP_CRC_LEN];
	} tx[IWVI_FP_RD_TX_BATCH];
	/* Why the last poll gave the socket to the daemon (enum fp_reason of
	 * the datagram it left there; FP_R_NO_PEER for a source without a
	 * slot). */
	int release_reason;
	/* Counts (information). */
	uint64_t sent, taken, acks_in, acks_out, released;
	uint64_t flushes, flushed; /* sendmmsg calls of the batch, datagrams they carried */
	uint64_t rma_wrecs, rma_reads, rma_atomics; /* RDMA served at the target (fprd_rma_rx.h) */
	uint64_t rma_cmpswaps, rma_cmpswaps_unequal; /* of rma_atomics: CmpSwaps, those that found another value */
	/* The rank's own outstanding Reads and atomics (fprd_req.h); NULL:
	 * it sends none, and every response is the daemon's. */
	struct iwvi_fp_rd_reqs *reqs;
};

/* iwvi_fp_rd_attach makes qp's RD page (W_FP_RD_PAGE_LEN octets, Magic
 * and Version written) and hands it to the daemon (fastpath-page). qp must
 * be RD with its socket made by this process. 0 or a negative errno (the
 * session's error says why). */
int iwvi_fp_rd_attach(struct iwv_qp *qp, struct iwvi_fp_rd *r);

/* iwvi_fp_rd_detach unmaps the page (after iwv_destroy_qp). */
void iwvi_fp_rd_detach(struct iwvi_fp_rd *r);

/* iwvi_fp_rd_slot returns the slot of peer (IPv4) the daemon gave the rank
 * at the last hand-back, or -1 (then the daemon serves it). */
int iwvi_fp_rd_slot(const struct iwvi_fp_rd *r, const struct sockaddr_in *peer);

/* iwvi_fp_rd_peer writes slot's peer address into *peer: 0, or -EINVAL
 * for a slot that names none. */
int iwvi_fp_rd_peer(const struct iwvi_fp_rd *r, int slot, struct sockaddr_in *peer);

/* iwvi_fp_rd_send sends payload[0, len) as one Send (solicited: with SE)
 * to the peer of slot. 0 when sent (the send is complete for the rank:
 * the daemon retransmits the page's copy if it is lost), -ENOBUFS when the
 * peer's window or the slot's ring of outstanding datagrams is full (poll:
 * the peer's ACK frees it, and the datagram that filled it asked for one
 * at once; the daemon takes the socket over at the oldest one's RTO if no
 * ACK comes), -EAGAIN when the rank cannot send it itself now (the socket
 * is not the rank's — it asked for it back —, the slot has no send right:
 * post it through the daemon), -EMSGSIZE when it does not fit one
 * datagram, -EINVAL for a bad slot. With r->batch set the datagram is
 * queued (iwvi_fp_rd_flush). */
int iwvi_fp_rd_send(struct iwvi_fp_rd *r, int slot, const void *payload, size_t len, int solicited);

/* iwvi_fp_rd_flush sends the queued datagrams (r->batch) with one
 * sendmmsg(2) (MSG_DONTWAIT): the ones the kernel refuses are lost as a
 * network drop loses them (the daemon resends the page's copy). Sent
 * whoever owns the socket now: they were numbered while the rank owned it,
 * and one the daemon resent meanwhile arrives as a duplicate, which RD
 * discards. iwvi_fp_rd_poll (at its start and end), iwvi_fp_rd_release,
 * the rank's RDMA sends and a full batch flush; a caller that set batch
 * flushes before the application can see a send's completion. */
void iwvi_fp_rd_flush(struct iwvi_fp_rd *r);

/* iwvi_fp_rd_release gives the socket to the daemon (before posting
 * through it): the ACKs owed are sent first. 1 if the rank owned it.
 * Also from iwvi_fp_rd_poll's deliver (the poll then ends). */
int iwvi_fp_rd_release(struct iwvi_fp_rd *r);

/* What iwvi_fp_rd_poll hands over: a Send from slot's peer, its payload
 * (valid during the call only). */
typedef void (*iwvi_fp_rd_deliver)(void *arg, int slot, const uint8_t *payload, size_t len, uint32_t imm,
				   int has_imm);

/* iwvi_fp_rd_poll renews the lease and, if the rank owns the socket, reads
 * it until it is empty (at most max datagrams): Sends in order go to
 * deliver, ACKs are applied; anything else gives the socket to the daemon
 * (what the rank read before still counts). Then it acknowledges what it
 * took, one ACK per peer — deferred when this poll took Sends (see the
 * top of this file). Returns the Sends delivered, 0 if the socket is
 * not the rank's (it asked for it back: poll the CQ, the daemon delivers
 * there meanwhile), or a negative errno of the socket. Poll the CQ before
 * this: what the daemon read while it owned the socket comes first. */
int iwvi_fp_rd_poll(struct iwvi_fp_rd *r, int max, iwvi_fp_rd_deliver deliver, void *arg);

/* iwvi_fp_rd_outstanding: the datagrams the rank sent itself that its
 * peers have not acknowledged yet, as the page's slots say — meaningful
 * while the rank owns the socket (after a take-over the daemon holds them,
 * and it hands the socket back only once they are all acknowledged). */
unsigned iwvi_fp_rd_outstanding(const struct iwvi_fp_rd *r);

#endif
