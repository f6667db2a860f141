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

#endif /* IWD_FASTPATH_H */
