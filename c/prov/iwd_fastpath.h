/*
 * iwd_fastpath.h — the provider's fast path (issue 20, docs/fastpath.md
 * "The provider"): while the application polls, an endpoint's rank reads
 * its UD QP's own socket and sends on it itself instead of through the
 * daemon. Only iwd_fastpath.c knows the page and the codec (c/core
 * fpown.h, fprq.h, fastpath.h); the endpoint types call these functions
 * with the domain lock held. RDM (RD) will use the same entry points.
 */
#ifndef IWD_FASTPATH_H
#define IWD_FASTPATH_H

#include "iwd.h"

/* iwd_fp_attach gives ep's QP a fast-path page when FI_IWARPD_FASTPATH
 * allows and the QP can have one (UD, its socket made by this process, its
 * own receive queue); else the endpoint works through the daemon alone.
 * Never fails the endpoint: a refusal is logged (info) and the fast path
 * stays off. fi_enable, the domain lock held. */
void iwd_fp_attach(struct iwd_ep *ep);

/* iwd_fp_detach forgets ep's page (fi_close, after the QP is destroyed). */
void iwd_fp_detach(struct iwd_ep *ep);

/* Returned by iwd_fp_progress when the rank has just (re)gained the
 * socket: the caller polls the verbs CQ once more first (what the daemon
 * delivered before it gave the socket back completes before what the rank
 * reads) and calls iwd_fp_progress again. */
#define IWD_FP_REPOLL 1

/* iwd_fp_progress, after ep's verbs CQ was polled empty: renews the lease
 * and, while the rank owns the socket, places each whole one-datagram Send
 * into the next posted receive and completes it (ep->ops->wc, as a verbs
 * completion would); anything else goes back to the daemon with the
 * socket. 0 or IWD_FP_REPOLL. */
int iwd_fp_progress(struct iwd_ep *ep);

/* iwd_fp_send sends a one-datagram Send of iov[0, count) (len octets) to
 * av itself, when the rank owns the socket and no send of ep is with the
 * daemon (FI_ORDER_SAS): 0 when the kernel accepted it (the caller
 * completes it), else -FI_EAGAIN (post it to the daemon as always). */
int iwd_fp_send(struct iwd_ep *ep, const struct iovec *iov, size_t count, size_t len, const struct iwv_av *av);

/* iwd_fp_idle: the application is about to block (fi_trywait, sread):
 * the socket goes back to the daemon so that it delivers meanwhile. */
void iwd_fp_idle(struct iwd_ep *ep);

/* ---- RDM over RD (iwd_fastpath_rd.c; docs/fastpath.md "The provider's
 * RDM endpoints"): the rank sends a one-datagram eager message to a proven
 * peer itself (c/core fprd.h, the daemon keeping a copy to retransmit) and
 * takes the in-order Sends of its proven peers, which the RDM receive path
 * matches as it matches a bounce receive's (iwd_rdm_rx_msg). On unless
 * FI_IWARPD_FASTPATH_RDM=0. ---- */

/* iwd_fprd_attach: as iwd_fp_attach, for an RDM endpoint's RD QP. */
void iwd_fprd_attach(struct iwd_ep *ep);

/* iwd_fprd_detach forgets the page (fi_close, after the QP is destroyed). */
void iwd_fprd_detach(struct iwd_ep *ep);

/* iwd_fprd_progress, after the verbs CQ was polled empty: takes what the
 * rank serves from the socket and hands each message to iwd_rdm_rx_msg.
 * 0 or IWD_FP_REPOLL (as iwd_fp_progress). */
int iwd_fprd_progress(struct iwd_ep *ep);

/* iwd_fprd_send sends hdr[0, hlen) and iov[0, count) (len octets) as one
 * Send to av itself: 0 when sent (the caller completes it), -FI_ENOBUFS
 * when the peer's window or the rank's ring of outstanding datagrams stays
 * full after a progress (the caller returns -FI_EAGAIN: the application
 * progresses and retries, fi_msg(3)), else -FI_EAGAIN (post it through the
 * daemon: iwd_ep_post_send gives the socket back first). */
int iwd_fprd_send(struct iwd_ep *ep, const void *hdr, size_t hlen, const struct iovec *iov, size_t count, size_t len,
		  const struct iwv_av *av);

/* iwd_fprd_note: the endpoint sends or receives an RDM message of octets
 * (header included; noted before a send is tried and when a message is
 * taken in); rndv: a rendezvous's RTS or FIN. A message longer than the
 * rank sends or takes itself (one datagram) or a rendezvous needs the
 * daemon: while the endpoint's messages are such bulk the rank leaves its
 * socket with the daemon instead of asking for it back after each one;
 * IWD_FPRD_SMALL_RUN small messages in a row end that (docs/fastpath.md
 * "Bulk messages leave the socket with the daemon"). */
void iwd_fprd_note(struct iwd_ep *ep, size_t octets, int rndv);

/* iwd_fprd_leave: a transfer the daemons move while the application
 * computes was posted (iwd_rdm_cts.c): a bulk spell starts and the socket
 * stays with the daemon, a Want of before withdrawn (iwvi_fp_own_withdraw). */
void iwd_fprd_leave(struct iwd_ep *ep, size_t octets);

/* iwd_fprd_before_post: a work request is about to go to the daemon: the
 * socket goes back first (the ACKs owed sent), so that nothing the rank
 * sends overtakes it. */
void iwd_fprd_before_post(struct iwd_ep *ep);

/* iwd_fprd_idle: the application is about to block: the socket goes back. */
void iwd_fprd_idle(struct iwd_ep *ep);

/* iwd_fprd_unacked: 1 while Sends the rank made itself (complete for the
 * application) may still be unacknowledged by their peers: fi_close
 * lingers (bounded) until they are, so that the daemon can still resend
 * them. */
int iwd_fprd_unacked(struct iwd_ep *ep);

/* iwd_fprd_describe writes the fast path's state of ep (who owns the
 * socket, the rank's unacknowledged sends) into buf, for the log of a
 * close whose linger ran out; snprintf's result. */
int iwd_fprd_describe(const struct iwd_ep *ep, char *buf, size_t len);

/* ---- RMA Writes the rank sends itself (iwd_fastpath_rma.c, c/core
 * fprd_rma_tx.h; docs/fastpath.md "RDMA Writes the rank sends itself"). */

/* iwd_fprd_write sends an fi_write of iov[0, count) (len octets) to av's
 * STag key at addr itself: 0 when sent (it completes when acknowledged,
 * through iwd_fprd_progress), else -FI_EAGAIN (post it to the daemon). */
int iwd_fprd_write(struct iwd_ep *ep, const struct iovec *iov, size_t count, size_t len, const struct iwv_av *av,
		   uint64_t addr, uint64_t key, void *context, uint64_t op_flags);

/* iwd_fprd_qp_failed: the QP is in ERROR (a receive was flushed): the
 * rank's pending Writes complete with FI_EIO. */
void iwd_fprd_qp_failed(struct iwd_ep *ep);

/* iwd_fprd_pending: the rank's Writes, Reads and atomics not yet complete. */
int iwd_fprd_pending(const struct iwd_ep *ep);

/* iwd_fprd_dom_pending (domain locked): whether an endpoint of dom has
 * Writes of the rank's pending: a blocking wait then wakes every
 * millisecond to progress them (nothing else would wake it). */
int iwd_fprd_dom_pending(struct iwd_domain *dom);

struct iwvi_fp_rd;
struct iwvi_fp_rd_rma;
int iwd_fprd_rma_write(struct iwd_ep *ep, struct iwvi_fp_rd *rd, struct iwvi_fp_rd_rma *rma, const struct iovec *iov,
		       size_t count, size_t len, const struct iwv_av *av, uint64_t addr, uint64_t key, void *context,
		       uint64_t op_flags);
void iwd_fprd_rma_reap(struct iwd_ep *ep, struct iwvi_fp_rd *rd, struct iwvi_fp_rd_rma *rma);
void iwd_fprd_rma_fail(struct iwd_ep *ep, struct iwvi_fp_rd_rma *rma);

/* ---- Reads and atomics the rank sends itself (iwd_fastpath_req.c,
 * c/core fprd_req.h; docs/fastpath.md "Reads and atomics the rank sends
 * itself"). */

/* iwd_fprd_read sends an fi_read of len octets into buf, iwd_fprd_atomic
 * a native atomic (op 0 FetchAdd, 2 CmpSwap; the original value into
 * result, NULL: discarded) when the rank can (0: it completes through
 * iwd_fprd_progress), else -FI_EAGAIN (post it to the daemon). */
int iwd_fprd_read(struct iwd_ep *ep, void *buf, size_t len, const struct iwv_av *av, uint64_t addr, uint64_t key,
		  void *context, uint64_t op_flags);
int iwd_fprd_atomic(struct iwd_ep *ep, int op, uint64_t operand, uint64_t compare, void *result,
		    const struct iwv_av *av, uint64_t addr, uint64_t key, void *context, uint64_t flags, uint64_t op_flags,
		    int cntr_kind);
int iwd_fprd_req_read(struct iwd_ep *ep, struct iwvi_fp_rd *rd, void *buf, size_t len, const struct iwv_av *av,
		      uint64_t addr, uint64_t key, void *context, uint64_t op_flags);
int iwd_fprd_req_atomic(struct iwd_ep *ep, struct iwvi_fp_rd *rd, int op, uint64_t operand, uint64_t compare,
			void *result, const struct iwv_av *av, uint64_t addr, uint64_t key, void *context,
			uint64_t flags, uint64_t op_flags, int cntr_kind);
void iwd_fprd_req_reap(struct iwd_ep *ep, struct iwvi_fp_rd *rd);
void iwd_fprd_req_fail(struct iwd_ep *ep, struct iwvi_fp_rd *rd);

/* iwd_fp_owned / iwd_fprd_owned: the endpoint's UD / RD socket is the
 * rank's as of its last progress (0 without that fast path), and for RD
 * its last send did not wait for the peer's ACK (a full window: the peer,
 * perhaps on this CPU, must run; the empty poll then yields, iwd_idle.c). */
int iwd_fp_owned(const struct iwd_ep *ep);
int iwd_fprd_owned(const struct iwd_ep *ep);

/* iwd_fprd_with_daemon: 1 when the endpoint's RD socket stays with the
 * daemon (no fast path, or a bulk spell with the socket not the rank's)
 * and none of the rank's own Writes, Reads or atomics is pending: all it
 * waits for reaches it through the verbs CQ, so a wait may block on the
 * completion channel (iwd_domain_block). iwd_fprd_in_spell: a bulk spell
 * (the daemon moves the endpoint's messages). */
int iwd_fprd_with_daemon(const struct iwd_ep *ep);
int iwd_fprd_in_spell(const struct iwd_ep *ep);

/* iwd_fprd_park: the rank is about to block on the completion channel
 * (iwd_domain_block; the endpoint iwd_fprd_with_daemon): a Want of before
 * the spell is withdrawn, a socket handed back meanwhile given back
 * (iwvi_fp_own_withdraw), so that no datagram waits on a socket the rank
 * does not read while it sleeps. */
void iwd_fprd_park(struct iwd_ep *ep);

#endif /* IWD_FASTPATH_H */
