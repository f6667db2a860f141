/*
 * iwd_dgram.h — the endpoint objects of the send/receive data path without
 * a provider header: FI_EP_DGRAM over a UD queue pair (iwd_ep_dgram.c) and
 * FI_EP_MSG over an RC queue pair (iwd_ep_msg.c), which embeds the DGRAM
 * object and adds the connection. Nothing outside these files sees them.
 */
#ifndef IWD_DGRAM_H
#define IWD_DGRAM_H

#include "iwd.h"

struct iwd_dgram_ep {
	struct iwd_ep ep;               /* first: an iwd_ep pointer is one */
	struct iwd_list rx_reqs;        /* posted receives (struct iwd_rxreq) */
	/* A message larger than a bounce slot goes through staging memory
	 * (MSG); else it is -FI_EMSGSIZE (DGRAM: one datagram). */
	int stage_large;
};

static inline struct iwd_dgram_ep *iwd_dgram(struct iwd_ep *ep)
{
	return iwd_container_of(ep, struct iwd_dgram_ep, ep);
}

/* What iwd_ep_dgram.c lends FI_EP_MSG (iwd_ep_msg.c). */
void iwd_dgram_init(struct iwd_dgram_ep *d);
int iwd_dgram_enable(struct iwd_ep *ep);
void iwd_dgram_fini(struct iwd_ep *ep);
void iwd_dgram_wc(struct iwd_ep *ep, struct iwv_wc *wc);
ssize_t iwd_dgram_cancel(struct iwd_ep *ep, void *context);
extern struct fi_ops_msg iwd_dgram_msg_ops;

#endif /* IWD_DGRAM_H */
