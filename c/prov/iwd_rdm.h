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

/* Receiver-ready rendezvous (iwd_rdm_cts.c), per fi_addr of the AV. */
struct iwd_cts_peer {
	uint32_t tx_seq;                /* EAGER, RTS, DONE messages sent to the peer */
	uint32_t rx_seq;                /* ... taken from it */
	int held;                       /* the peer's offer below is held */
	int raced;                      /* an offer crossed our matching RTS: wait for the next one */
	int last_rndv;                  /* the last message sent was a tagged RTS ... */
	uint64_t last_tag;              /* ... with this tag */
	struct iwd_hdr offer;           /* op CTS */
	/* Standing credits (iwd_rdm_credit.c). */
	int credit_held;                /* sender: the peer's credit below is held */
	struct iwd_hdr credit;          /* op CREDIT */
	void *zone;                     /* receiver: the landing zone of our credit out to the peer */
	size_t zone_len, want;          /* its length; the largest rendezvous taken from the peer */
	uint64_t zone_id;
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
	struct iwd_cts_peer *peers;     /* iwd_rdm_cts.c, indexed by fi_addr */
	size_t npeers;
	uint32_t cts_next;              /* offers made (the high half of their ids) */
	struct iwd_list cts_dead;       /* offers of cancelled receives */
	int cts_off;                    /* a message was not counted: no more offers */
	uint64_t credit_next;           /* credits granted (their ids) */
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

/* iwd_rdm_cts.c: the receiver-ready rendezvous (file comment there). */
void iwd_cts_init(struct iwd_ep *ep);
void iwd_cts_fini(struct iwd_ep *ep);
/* A message (EAGER, RTS) was posted to dest: counted; a held offer it matches ends. */
void iwd_cts_sent(struct iwd_ep *ep, fi_addr_t dest, int tagged, uint64_t tag, int rndv);
/* An EAGER, RTS (done 0) or DONE (1) taken from src: counted; tombstones an EAGER or RTS matches end. */
void iwd_cts_taken(struct iwd_ep *ep, fi_addr_t src, int tagged, uint64_t tag, int done);
/* fi_trecv is about to post rx (no unexpected message matched): makes an offer when it may. */
void iwd_cts_offer(struct iwd_ep *ep, struct iwd_rx *rx);
/* rx was matched as before (or freed): its offer's staging goes. */
void iwd_cts_rx_end(struct iwd_ep *ep, struct iwd_rx *rx);
/* rx was cancelled: its offer becomes a tombstone. */
void iwd_cts_cancel(struct iwd_ep *ep, struct iwd_rx *rx);
void iwd_cts_arrived(struct iwd_ep *ep, const struct iwd_hdr *h, fi_addr_t src);
/* A DONE: completes its receive (0), or, its receive cancelled, returns 1
 * with the message in *stage (*stage_len octets of staging): the caller
 * takes it as an arriving eager message, then iwd_stage_free_cts. */
int iwd_cts_done(struct iwd_ep *ep, const struct iwd_hdr *h, fi_addr_t src, void **stage, size_t *stage_len);
/* A rendezvous send copied into tx->stage: 1 when it went by a held offer
 * (Write-Record and DONE posted), 0 when it goes as an RTS. */
int iwd_cts_try_send(struct iwd_ep *ep, struct iwd_tx *tx, struct iwd_hdr *h, fi_addr_t dest,
		     const struct iwv_av *av, uint64_t op_flags);

/* The peer record of fi_addr a (grown on demand), NULL for none. */
struct iwd_cts_peer *iwd_cts_peer(struct iwd_ep *ep, fi_addr_t a);
/* Posts the Write-Record of tx's staging to (addr, rkey) and the DONE h
 * (its op, id, flags set here) behind it: 0 both posted, -1 nothing posted
 * (the message may go as an RTS), 1 the Write went without its DONE (h is
 * an RTS again; the landing zone is lost). */
int iwd_cts_push(struct iwd_ep *ep, struct iwd_tx *tx, struct iwd_hdr *h, const struct iwv_av *av, uint64_t addr,
		 uint32_t rkey, uint64_t id, uint8_t hflag);

/* iwd_rdm_credit.c: standing credits (file comment there). */
/* A rendezvous message of len octets was taken from src: keep a credit out to it. */
void iwd_credit_grant(struct iwd_ep *ep, fi_addr_t src, size_t len);
/* A CREDIT arrived from src: held for the next rendezvous send to it. */
void iwd_credit_arrived(struct iwd_ep *ep, const struct iwd_hdr *h, fi_addr_t src);
/* A DONE with IWD_HF_CREDIT: 1 with its landing zone (*zone, *zone_len),
 * which the caller takes as an arriving eager message's payload and frees
 * with iwd_credit_zone_free; 0 when it names no credit out (dropped). */
int iwd_credit_done(struct iwd_ep *ep, const struct iwd_hdr *h, fi_addr_t src, void **zone, size_t *zone_len);
void iwd_credit_zone_free(struct iwd_ep *ep, void *zone, size_t len);
/* A credit of ours is out to src (the receive about to wait leaves the socket to the daemon). */
int iwd_credit_out(struct iwd_ep *ep, fi_addr_t src);
/* A rendezvous send copied into tx->stage that no offer took: 1 when it
 * went into the peer's credit (Write-Record and DONE posted), else 0. */
int iwd_credit_try_send(struct iwd_ep *ep, struct iwd_tx *tx, struct iwd_hdr *h, fi_addr_t dest,
			const struct iwv_av *av, uint64_t op_flags);
void iwd_credit_fini(struct iwd_ep *ep);

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
/* ops->bulk: a rendezvous send (staged or waiting for its FIN) or Read in flight. */
int iwd_rdm_bulk(struct iwd_ep *ep);

#endif /* IWD_RDM_H */
