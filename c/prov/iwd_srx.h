/*
 * iwd_srx.h — the shared receive context of MSG endpoints (iwd_srx.c,
 * fi_endpoint(3) fi_srx_context) as iwd_ep_msg.c sees it.
 */
#ifndef IWD_SRX_H
#define IWD_SRX_H

#include "iwd.h"

struct iwd_srx;

/* The srx of an FI_CLASS_SRX_CTX fid of this provider, or NULL. */
struct iwd_srx *iwd_srx_of(struct fid *fid);
/* The daemon's SRQ the endpoint's RC QP is created on. */
struct iwv_srq *iwd_srx_srq(struct iwd_srx *srx);
/* fi_ep_bind(ep, srx) and fi_close(ep): counts the endpoints using the
 * srx (fi_close(srx) is -FI_EBUSY while any does); unbinding drops the
 * messages that arrived on ep and wait for a receive. Domain lock held. */
void iwd_srx_attach(struct iwd_srx *srx, struct iwd_ep *ep);
void iwd_srx_detach(struct iwd_srx *srx, struct iwd_ep *ep);
/* A receive completion on ep's verbs CQ whose work request is one of the
 * srx's (IWD_WR_RX_REQ); the domain lock is held. */
void iwd_srx_wc(struct iwd_srx *srx, struct iwd_ep *ep, const struct iwv_wc *wc);

#endif /* IWD_SRX_H */
