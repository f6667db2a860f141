/*
 * iwd_rdm.h — the RDM endpoint object (FI_EP_RDM over an RD queue pair)
 * and what its files share: iwd_ep_rdm.c (eager protocol, arrivals,
 * send/receive), iwd_rdm_rndv.c (rendezvous and control messages) and
 * iwd_rdm_ops.c (open, ops tables). Nothing outside these files sees it.
 */
#ifndef IWD_RDM_H
#define IWD_RDM_H

#include "iwd.h"

struct iwd_ctrl {                       /* a FIN waiting for SQ space */
	struct iwd_list link;
	struct iwd_hdr h;
	struct iwv_av av;
};

struct iwd_rdm_ep {
	struct iwd_ep ep;               /* first: an iwd_ep pointer is one */
	struct iwd_match m;             /* posted and unexpected receives */
	struct iwd_bounce *bounces;     /* one work request context per rxp slot */
	size_t rx_posted;               /* bounce receives in the RQ */
	struct iwd_list pending_ctrl;   /* FINs waiting for SQ space (iwd_ctrl) */
	struct iwd_list pending_reads;  /* rendezvous reads waiting for SQ space/staging */
	struct iwd_list reads;          /* rendezvous reads in flight (struct iwd_rxreq) */
	uint64_t next_id;
	size_t eager_max;
};

static inline struct iwd_rdm_ep *iwd_rdm(struct iwd_ep *ep)
{
	return iwd_container_of(ep, struct iwd_rdm_ep, ep);
}

/* iwd_ep_rdm.c */
int iwd_rdm_enable(struct iwd_ep *ep);
void iwd_rdm_fini(struct iwd_ep *ep);
void iwd_rdm_wc(struct iwd_ep *ep, struct iwv_wc *wc);
/* One arrived message (RDM header and payload; a bounce receive's or the
 * fast path's, iwd_fastpath_rd.c), read during the call only. */
void iwd_rdm_rx_msg(struct iwd_ep *ep, const void *msg, uint32_t len, const struct iwv_wc *wc);
ssize_t iwd_rdm_cancel(struct iwd_ep *ep, void *context);
int iwd_rdm_rma_write(struct iwd_ep *ep, struct iwv_send_wr *wr, uint64_t op_flags, uint64_t data, size_t len,
		      const struct iwv_av *av);
ssize_t iwd_rdm_send(struct iwd_ep *ep, const struct iovec *iov, void **desc, size_t count, fi_addr_t dest,
		     uint64_t tag, uint64_t data, void *context, uint64_t op_flags, int tagged);
ssize_t iwd_rdm_recv(struct iwd_ep *ep, const struct iovec *iov, void **desc, size_t count, fi_addr_t src,
		     uint64_t tag, uint64_t ignore, void *context, uint64_t op_flags, int tagged);

/* iwd_rdm_rndv.c */
/* Sends a header-only control message (FIN, WDATA), queued if the SQ is full. */
int iwd_rdm_ctrl(struct iwd_ep *ep, const struct iwd_hdr *h, const struct iwv_av *av);
/* Protocol steps that waited for SQ space or staging (ops->retry). */
void iwd_rdm_retry(struct iwd_ep *ep);
/* Completion flags of a receive and FI_MULTI_RECV space accounting. */
uint64_t iwd_rdm_rx_cflags(const struct iwd_rx *rx, uint32_t hflags);
uint64_t iwd_rdm_multi_consume(struct iwd_ep *ep, struct iwd_rx *rx);
/* Rendezvous: start the RDMA Read of a matched RTS, finish it (returns 1
 * when the receive was freed), FIN both ways. */
int iwd_rdm_start_read(struct iwd_ep *ep, struct iwd_rx *rx, uint32_t hflags, uint64_t tag, uint64_t data,
		       size_t mlen, uint32_t rkey, uint64_t raddr, uint64_t id, fi_addr_t src, const uint8_t ip[16],
		       uint16_t port);
int iwd_rdm_read_done(struct iwd_ep *ep, struct iwd_rxreq *rr, int err, int prov_errno);
void iwd_rdm_send_fin(struct iwd_ep *ep, uint64_t id, const uint8_t ip[16], uint16_t port);
void iwd_rdm_fin(struct iwd_ep *ep, uint64_t id);

#endif /* IWD_RDM_H */
