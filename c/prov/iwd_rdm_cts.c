/*
 * iwd_rdm_cts.c — the RDM endpoint's receiver-ready rendezvous (issue 20,
 * overlap; docs/libfabric.md "Progress while both ranks compute").
 *
 * A rendezvous (iwd_rdm_rndv.c) needs the receiving rank's provider twice:
 * to match the RTS and post the RDMA Read, then to answer FIN. A rank that
 * computes without libfabric calls (MPI_Irecv, compute, MPI_Wait) moves
 * nothing until MPI_Wait. Here the receiver tells the sender first:
 *
 *  - fi_trecv of a large tagged receive directed at one peer, when no
 *    unexpected message matched it and no receive posted before it could
 *    take a message it matches (so the peer's next message that matches it
 *    is the one it will take), allocates staging for it and sends the peer
 *    a CTS "offer" (op 5): its tag and ignore mask, its length, the staging
 *    (rkey, address) and an id whose low 32 bits count the matching
 *    messages (EAGER, RTS, DONE) the receiver has taken from that peer.
 *  - The sender accepts the offer only if it has sent exactly that many
 *    such messages to the receiver (none in flight that the receive might
 *    take first); a later one replaces it; any message it sends that
 *    matches the offer's tag ends it, so the first such message either
 *    uses it or goes as before.
 *  - A rendezvous send (tagged, above FI_IWARPD_EAGER_MAX, not
 *    FI_DELIVERY_COMPLETE, copied into staging, no longer than the offer)
 *    that matches a held offer runs progress once after its staging copy
 *    (an offer arriving meanwhile is taken), then posts an RD Write-Record
 *    of its staging into the receiver's staging and a header-only DONE
 *    (op 6: id, tag, CQ data, length) behind it. Both are the daemons'
 *    work: the sender completes when DONE is acknowledged, the receiver's
 *    provider finds DONE (RD delivers in order per pair of QPs, so the data
 *    is in place) at its next call and completes the receive with one copy
 *    out of staging. Neither rank's provider is needed while the data moves.
 *  - On the receiver a receive whose offer is out and that a message
 *    matches as before (the sender did not use the offer) ends the offer;
 *    a cancelled receive leaves its staging behind (a tombstone): a DONE
 *    for it is then an unexpected message like any other, taken through the
 *    posted receives in arrival order; a matching message as before ends
 *    it.
 *
 * Matching order is therefore exactly the eager/RTS one: the message that
 * uses an offer is the first message from that peer that could match the
 * receive, and no receive posted before it could match that message.
 * Wildcard (FI_ADDR_UNSPEC) receives, FI_MULTI_RECV and untagged receives
 * make no offer. An endpoint that took a message from a source not in its
 * AV makes none again (it could not count that peer's messages).
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "iwd_fastpath.h"
#include "iwd_trace.h"
#include "iwd_rdm.h"

#define HDR IWD_HDR_LEN
#define CTS_MAX_PEERS (1u << 24)

struct iwd_cts_dead {                 /* the offer of a cancelled receive */
	struct iwd_list link;
	fi_addr_t src;
	uint64_t id, tag, ignore;
	void *stage;
	size_t len;
};

struct iwd_cts_peer *iwd_cts_peer(struct iwd_ep *ep, fi_addr_t a)
{
	struct iwd_rdm_ep *r = iwd_rdm(ep);
	if (a == FI_ADDR_NOTAVAIL || a == FI_ADDR_UNSPEC || a >= CTS_MAX_PEERS)
		return NULL;
	if (a >= r->npeers) {
		size_t n = r->npeers ? r->npeers : 16;
		struct iwd_cts_peer *p;
		while (n <= a)
			n *= 2;
		p = realloc(r->peers, n * sizeof(*p));
		if (!p)
			return NULL;
		memset(p + r->npeers, 0, (n - r->npeers) * sizeof(*p));
		r->peers = p;
		r->npeers = n;
	}
	return &r->peers[a];
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int tag_matches(uint64_t tag, uint64_t want, uint64_t ignore)
{
	return (tag | ignore) == (want | ignore);
}

void iwd_cts_sent(struct iwd_ep *ep, fi_addr_t dest, int tagged, uint64_t tag, int rndv)
{
	struct iwd_cts_peer *p = iwd_cts_peer(ep, dest);
	if (!p) {
		iwd_rdm(ep)->cts_off = 1; /* a message not counted: accept no offer again */
		return;
	}
	p->tx_seq++;
	p->last_rndv = tagged && rndv;
	p->last_tag = tag;
	if (p->held && tagged && tag_matches(tag, p->offer.tag, p->offer.data)) {
		p->held = 0;
		ep->dom->cts.declined++;
	}
}

void iwd_cts_taken(struct iwd_ep *ep, fi_addr_t src, int tagged, uint64_t tag, int done)
{
	struct iwd_rdm_ep *r = iwd_rdm(ep);
	struct iwd_cts_peer *p = iwd_cts_peer(ep, src);
	struct iwd_list *it, *tmp;
	if (!p) {
		r->cts_off = 1;
		return;
	}
	p->rx_seq++;
	if (done || !tagged || iwd_list_empty(&r->cts_dead))
		return;
	/* A message as before ends the tombstones it matches: the sender
	 * ended its offer when it sent it (iwd_cts_sent). */
	iwd_list_foreach_safe(&r->cts_dead, it, tmp)
	{
		struct iwd_cts_dead *d = iwd_container_of(it, struct iwd_cts_dead, link);
		if (d->src != src || !tag_matches(tag, d->tag, d->ignore))
			continue;
		iwd_list_remove(it);
		iwd_stage_free_cts(ep->dom, d->stage, d->len);
		free(d);
	}
}

void iwd_cts_rx_end(struct iwd_ep *ep, struct iwd_rx *rx)
{
	if (!rx->cts_stage)
		return;
	iwd_stage_free_cts(ep->dom, rx->cts_stage, rx->cts_len);
	rx->cts_stage = NULL;
	rx->cts_len = 0;
}

/* Could a receive posted before rx take a message rx matches? */
static int overlaps_posted(struct iwd_ep *ep, const struct iwd_rx *rx)
{
	struct iwd_list *it;
	iwd_list_foreach(&iwd_rdm(ep)->m.posted_tag, it)
	{
		const struct iwd_rx *p = iwd_container_of(it, struct iwd_rx, link);
		if (p->src != FI_ADDR_UNSPEC && p->src != rx->src)
			continue;
		if (!((p->tag ^ rx->tag) & ~p->ignore & ~rx->ignore))
			return 1;
	}
	return 0;
}

void iwd_cts_offer(struct iwd_ep *ep, struct iwd_rx *rx)
{
	struct iwd_rdm_ep *r = iwd_rdm(ep);
	struct iwd_cts_peer *p;
	const struct iwv_av *av;
	struct iwd_hdr h;
	void *stage;

	if (!iwd_env.cts || r->cts_off || !r->m.directed || rx->src == FI_ADDR_UNSPEC ||
	    !(rx->flags & IWD_RX_TAGGED_FLAG) || (rx->flags & FI_MULTI_RECV) || rx->len <= r->eager_max)
		return;
	av = iwd_av_lookup(ep->av, rx->src);
	p = iwd_cts_peer(ep, rx->src);
	if (!av || !p || overlaps_posted(ep, rx))
		return;
	stage = iwd_stage_alloc_cts(ep->dom, rx->len);
	if (!stage)
		return;
	memset(&h, 0, sizeof(h));
	h.op = IWD_OP_CTS;
	h.magic = IWD_HDR_MAGIC;
	h.flags = IWD_HF_TAGGED;
	h.rkey = iwd_stage_rkey(ep->dom);
	h.tag = rx->tag;
	h.data = rx->ignore;
	h.len = rx->len;
	h.addr = (uint64_t)(uintptr_t)stage;
	h.id = ((uint64_t)++r->cts_next << 32) | p->rx_seq;
	/* Through the daemon, not the rank's socket: the post gives the
	 * socket back (iwd_ep_post_send), and the offer starts a bulk spell,
	 * so that the daemon, not the computing rank, takes the Write in
	 * (a socket the rank keeps is taken over only when its lease ends,
	 * 1 ms: docs/fastpath.md "The hand-over"). */
	if (iwd_rdm_ctrl(ep, &h, av)) {
		iwd_stage_free_cts(ep->dom, stage, rx->len);
		return;
	}
	iwd_fprd_leave(ep, HDR + rx->len);
	rx->cts_stage = stage;
	rx->cts_len = rx->len;
	rx->cts_id = h.id;
	ep->dom->cts.offered++;
}

void iwd_cts_arrived(struct iwd_ep *ep, const struct iwd_hdr *h, fi_addr_t src)
{
	struct iwd_cts_peer *p = iwd_cts_peer(ep, src);
	if (!p || iwd_rdm(ep)->cts_off || (uint32_t)h->id != p->tx_seq) {
		iwd_trace("cts_arrived", 0, 0);
		ep->dom->cts.stale++; /* a message of ours it did not count was in flight */
		/* Crossed: the one message in flight was the rendezvous this
		 * receive will take. The next such send waits a little for
		 * the offer (iwd_cts_try_send). */
		if (p && (uint32_t)h->id + 1 == p->tx_seq && p->last_rndv && tag_matches(p->last_tag, h->tag, h->data))
			p->raced = 1;
		return;
	}
	iwd_trace("cts_arrived", 1, 0);
	p->held = 1;
	p->offer = *h;
	ep->dom->cts.accepted++;
}

/* iwd_cts_push posts the Write-Record (its own work request, IWD_WR_CTRL,
 * freed on completion) and the DONE behind it in one call: one doorbell,
 * so one wake-up of the daemon, which on a shared CPU preempts the rank
 * for each (two posts held an MPI_Isend ~0.5 ms where one is ~0.25). */
int iwd_cts_push(struct iwd_ep *ep, struct iwd_tx *tx, struct iwd_hdr *h, const struct iwv_av *av, uint64_t addr,
		 uint32_t rkey, uint64_t id, uint8_t hflag)
{
	struct iwv_sge wsge, sge[IWD_IOV_LIMIT + 1];
	struct iwv_send_wr wr[2];
	struct iwd_hdr before = *h;
	struct iwd_tx *w;
	int nsge = 0, ret;

	w = iwd_tx_new(ep, NULL, 0, FI_INJECT | IWD_NOCOMP);
	if (!w)
		return -1;
	w->wr.kind = IWD_WR_CTRL;
	h->op = IWD_OP_DONE;
	h->flags |= hflag;
	h->rkey = 0;
	h->addr = 0;
	h->id = id;
	if (iwd_tx_gather(ep, tx, NULL, NULL, 0, h, HDR, sge, &nsge, 1)) {
		iwd_tx_free(ep, w);
		*h = before;
		return -1;
	}
	wsge = (struct iwv_sge){(uint64_t)(uintptr_t)tx->stage, (uint32_t)tx->len, iwd_stage_lkey(ep->dom)};
	memset(wr, 0, sizeof(wr));
	wr[0].wr_id = (uint64_t)(uintptr_t)w;
	wr[0].opcode = IWV_WR_WRITE_RECORD;
	wr[0].flags = IWV_SEND_SIGNALED;
	wr[0].num_sge = 1;
	wr[0].sg_list = &wsge;
	wr[0].av = av;
	wr[0].remote_addr = addr;
	wr[0].rkey = rkey;
	wr[1].wr_id = (uint64_t)(uintptr_t)tx;
	wr[1].opcode = IWV_WR_SEND;
	wr[1].flags = IWV_SEND_SIGNALED;
	wr[1].num_sge = (uint16_t)nsge;
	wr[1].sg_list = sge;
	wr[1].av = av;
	ret = iwd_ep_post_send_n(ep, wr, 2);
	if (ret == 2) {
		iwd_trace("write_posted", tx->len, 0);
		tx->posted = 1;
		iwd_fprd_leave(ep, HDR + tx->len);
		return 0;
	}
	if (tx->bounce) {
		iwd_pool_put(&ep->txp, tx->bounce);
		tx->bounce = NULL;
	}
	*h = before; /* an RTS again: the caller fills in the rest */
	if (ret <= 0) {
		iwd_tx_free(ep, w);
		return -1;
	}
	/* The Write went without its DONE: the landing zone holds data
	 * nobody reads; the message goes as an RTS, which the receive takes
	 * as before. */
	return 1;
}

int iwd_cts_try_send(struct iwd_ep *ep, struct iwd_tx *tx, struct iwd_hdr *h, fi_addr_t dest,
		     const struct iwv_av *av, uint64_t op_flags)
{
	struct iwd_cts_peer *p;
	struct iwd_hdr offer;
	int ret;

	if (!iwd_env.cts || !(h->flags & IWD_HF_TAGGED) || !tx->stage)
		return 0;
	/* An offer may have arrived while the message was copied. */
	iwd_domain_progress(ep->dom);
	iwd_trace("send_progressed", tx->len, 0);
	/* A message not counted (its source was not in the AV: MPI peers
	 * that send while the other still wires up) ends offers, whose
	 * exactness is the count; a credit's message is matched on arrival
	 * and needs none. */
	if (iwd_rdm(ep)->cts_off)
		return iwd_credit_try_send(ep, tx, h, dest, av, op_flags);
	p = iwd_cts_peer(ep, dest);
	if (p && !p->held && p->raced && iwd_env.cts_wait_us) {
		/* The last offer crossed our RTS: the receiver posts about
		 * when we send. Wait up to FI_IWARPD_CTS_WAIT_US for this one; none
		 * coming ends the waiting until an offer crosses again. */
		uint64_t end = now_ns() + (uint64_t)iwd_env.cts_wait_us * 1000;
		while (!p->held && now_ns() < end) {
			sched_yield();
			iwd_domain_progress(ep->dom);
			p = iwd_cts_peer(ep, dest);
			if (!p)
				return 0;
		}
		if (!p->held)
			p->raced = 0;
		ep->dom->cts.waits++;
	}
	if (!p || !p->held || !tag_matches(h->tag, p->offer.tag, p->offer.data) || (op_flags & FI_DELIVERY_COMPLETE) ||
	    tx->len > p->offer.len || tx->len > UINT32_MAX || ep->sq_used + 2 > ep->sq_depth || ep->txp.nfree < 1)
		/* No offer for it: a credit, else as before (iwd_cts_sent
		 * then ends a held offer it matches). */
		return iwd_credit_try_send(ep, tx, h, dest, av, op_flags);
	offer = p->offer;
	ret = iwd_cts_push(ep, tx, h, av, offer.addr, offer.rkey, offer.id, 0);
	if (ret < 0)
		return iwd_credit_try_send(ep, tx, h, dest, av, op_flags);
	if (ret > 0)
		return 0;
	iwd_trace("send_used", tx->len, 0);
	p->held = 0;
	p->tx_seq++;
	ep->dom->cts.used++;
	return 1;
}

int iwd_cts_done(struct iwd_ep *ep, const struct iwd_hdr *h, fi_addr_t src, void **stage, size_t *stage_len)
{
	struct iwd_rdm_ep *r = iwd_rdm(ep);
	struct iwd_list *it;

	iwd_cts_taken(ep, src, 1, h->tag, 1);
	iwd_list_foreach(&r->m.posted_tag, it)
	{
		struct iwd_rx *rx = iwd_container_of(it, struct iwd_rx, link);
		uint64_t f;
		if (!rx->cts_stage || rx->cts_id != h->id || rx->src != src)
			continue;
		if (h->len > rx->cts_len) {
			IWD_WARN(FI_LOG_EP_DATA, "iwarpd: a DONE of %llu octets for an offer of %zu: dropped\n",
				 (unsigned long long)h->len, rx->cts_len);
			return 0;
		}
		iwd_list_remove(&rx->link);
		iwd_iov_copy_in(rx->iov, rx->iov_count, 0, rx->cts_stage, (size_t)h->len);
		iwd_trace("done_copied", h->len, 0);
		iwd_cts_rx_end(ep, rx);
		f = iwd_rdm_rx_cflags(rx, h->flags);
		iwd_ep_rx_done(ep, rx->context, f, (size_t)h->len, rx->iov_count ? rx->iov[0].iov_base : NULL, h->data,
			       h->tag, src);
		free(rx);
		ep->dom->cts.done++;
		return 0;
	}
	iwd_list_foreach(&r->cts_dead, it)
	{
		struct iwd_cts_dead *d = iwd_container_of(it, struct iwd_cts_dead, link);
		if (d->id != h->id || d->src != src)
			continue;
		/* The receive was cancelled: the message arrives now, as any
		 * eager message would (posted receives, else unexpected): the
		 * caller takes it from the staging, then frees it. */
		iwd_list_remove(it);
		*stage = d->stage;
		*stage_len = d->len;
		free(d);
		ep->dom->cts.done_unexp++;
		if (h->len > *stage_len) {
			iwd_stage_free_cts(ep->dom, *stage, *stage_len);
			return 0;
		}
		return 1;
	}
	IWD_WARN(FI_LOG_EP_DATA, "iwarpd: a DONE for unknown offer %llx: dropped\n", (unsigned long long)h->id);
	return 0;
}

void iwd_cts_cancel(struct iwd_ep *ep, struct iwd_rx *rx)
{
	struct iwd_cts_dead *d;
	if (!rx->cts_stage)
		return;
	d = calloc(1, sizeof(*d));
	if (!d) {
		/* Cannot keep it: the sender may still write there. Leak the
		 * staging rather than hand it to another operation. */
		IWD_WARN(FI_LOG_EP_DATA, "iwarpd: no memory for a cancelled offer: its staging stays held\n");
		rx->cts_stage = NULL;
		return;
	}
	d->src = rx->src;
	d->id = rx->cts_id;
	d->tag = rx->tag;
	d->ignore = rx->ignore;
	d->stage = rx->cts_stage;
	d->len = rx->cts_len;
	rx->cts_stage = NULL;
	iwd_list_insert_tail(&iwd_rdm(ep)->cts_dead, &d->link);
}

void iwd_cts_init(struct iwd_ep *ep)
{
	iwd_list_init(&iwd_rdm(ep)->cts_dead);
}

void iwd_cts_fini(struct iwd_ep *ep)
{
	struct iwd_rdm_ep *r = iwd_rdm(ep);
	struct iwd_cts_stats *c = &ep->dom->cts;
	struct iwd_list *it, *tmp;
	if (c->offered || c->accepted || c->stale)
		IWD_INFO(FI_LOG_EP_CTRL, "iwarpd: receiver-ready rendezvous: %llu sends waited for an offer\n",
			 (unsigned long long)c->waits);
	if (c->offered || c->accepted || c->stale)
		IWD_INFO(FI_LOG_EP_CTRL,
			 "iwarpd: receiver-ready rendezvous (domain): %llu offers made, %llu taken, %llu stale, %llu used, "
			 "%llu ended by a message as before, %llu receives completed by DONE, %llu DONEs of cancelled receives%s\n",
			 (unsigned long long)c->offered, (unsigned long long)c->accepted, (unsigned long long)c->stale,
			 (unsigned long long)c->used, (unsigned long long)c->declined, (unsigned long long)c->done,
			 (unsigned long long)c->done_unexp, r->cts_off ? " (off: a message not counted)" : "");
	iwd_list_foreach(&r->m.posted_tag, it)
		iwd_cts_rx_end(ep, iwd_container_of(it, struct iwd_rx, link));
	if (r->cts_dead.next)
		iwd_list_foreach_safe(&r->cts_dead, it, tmp)
		{
			struct iwd_cts_dead *d = iwd_container_of(it, struct iwd_cts_dead, link);
			iwd_list_remove(it);
			iwd_stage_free_cts(ep->dom, d->stage, d->len);
			free(d);
		}
	free(r->peers);
	r->peers = NULL;
	r->npeers = 0;
}
