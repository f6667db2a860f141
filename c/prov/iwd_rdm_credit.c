/*
 * iwd_rdm_credit.c — standing credits of the RDM receiver-ready rendezvous
 * (issue 20, overlap; docs/libfabric.md "Progress while both ranks
 * compute").
 *
 * An offer (iwd_rdm_cts.c) exists only once the receive is posted, and a
 * sender whose MPI_Isend runs before the offer arrives (both ranks leave a
 * barrier together; on one CPU the receiving rank may not run at all until
 * the sender computed) sends an RTS that nobody reads until MPI_Wait. A
 * credit is a landing zone that does not wait for the receive:
 *
 *  - A receiver that takes a rendezvous message (RTS, or a DONE) from a
 *    peer in its AV keeps one credit out to that peer: staging of the
 *    largest such message's length (rounded up to the staging chunk; none
 *    for a message above a sixteenth of FI_IWARPD_STAGING),
 *    announced by a header-only CREDIT (op 7: rkey, address, length, id)
 *    through the daemon. Credits and offers share the quarter of the
 *    staging that offers may hold (iwd_stage_alloc_cts); none is granted
 *    when it is used up.
 *  - A tagged rendezvous send that no held offer takes (not
 *    FI_DELIVERY_COMPLETE, copied into staging, no longer than the credit)
 *    uses the peer's credit: an RD Write-Record of its staging into the
 *    zone and a DONE (IWD_HF_CREDIT, the credit's id, tag, CQ data,
 *    length) behind it, the daemons' work as for an offer; it completes
 *    when DONE is acknowledged. It counts as a message sent to the peer
 *    (iwd_cts_sent: a held offer of its tag ends).
 *  - The receiver's provider, at its next call, takes that DONE exactly
 *    where an eager message would have arrived (RD delivers in order per
 *    pair of QPs: the data is in the zone): posted receives first, else
 *    the unexpected queue, whose entry keeps the zone as its payload (no
 *    copy until a receive takes it). Matching is therefore the eager
 *    one. Taking it grants the next credit (a new zone) at once.
 *
 * A credit is never revoked: its zone stays held until the DONE arrives or
 * the endpoint closes.
 */
#include <stdlib.h>
#include <string.h>

#include "iwd_fastpath.h"
#include "iwd_rdm.h"
#include "iwd_trace.h"

#define HDR IWD_HDR_LEN
#define ZONE_ROUND (64u << 10) /* the staging chunk (iwd_buf.c) */

void iwd_credit_grant(struct iwd_ep *ep, fi_addr_t src, size_t len)
{
	struct iwd_rdm_ep *r = iwd_rdm(ep);
	struct iwd_cts_peer *p;
	const struct iwv_av *av;
	struct iwd_hdr h;
	void *zone;

	/* A zone of at most a sixteenth of the staging (4 MiB of the default
	 * 64): the quarter offers and credits share stays open to the offers
	 * and credits of other peers; a longer message goes by an offer or an
	 * RTS, as before. */
	if (!iwd_env.cts || !iwd_env.cts_credit || len <= r->eager_max || len > iwd_env.staging / 16)
		return;
	p = iwd_cts_peer(ep, src);
	if (!p)
		return;
	len = (len + ZONE_ROUND - 1) / ZONE_ROUND * ZONE_ROUND;
	if (len > p->want)
		p->want = len;
	if (p->zone)
		return; /* one out per peer */
	av = iwd_av_lookup(ep->av, src);
	if (!av)
		return;
	zone = iwd_stage_alloc_cts(ep->dom, p->want);
	if (!zone)
		return;
	memset(&h, 0, sizeof(h));
	h.op = IWD_OP_CREDIT;
	h.magic = IWD_HDR_MAGIC;
	h.rkey = iwd_stage_rkey(ep->dom);
	h.len = p->want;
	h.addr = (uint64_t)(uintptr_t)zone;
	h.id = ++r->credit_next;
	if (iwd_rdm_ctrl(ep, &h, av)) {
		iwd_stage_free_cts(ep->dom, zone, p->want);
		return;
	}
	iwd_trace("credit_grant", p->want, 0);
	p->zone = zone;
	p->zone_len = p->want;
	p->zone_id = h.id;
	ep->dom->cts.credit_granted++;
}

void iwd_credit_arrived(struct iwd_ep *ep, const struct iwd_hdr *h, fi_addr_t src)
{
	struct iwd_cts_peer *p = iwd_cts_peer(ep, src);
	if (!p || !iwd_env.cts || !iwd_env.cts_credit)
		return; /* its zone stays held on the peer until it closes */
	iwd_trace("credit_arrived", h->len, 0);
	p->credit_held = 1;
	p->credit = *h;
	ep->dom->cts.credit_taken++;
}

int iwd_credit_done(struct iwd_ep *ep, const struct iwd_hdr *h, fi_addr_t src, void **zone, size_t *zone_len)
{
	struct iwd_cts_peer *p = iwd_cts_peer(ep, src);
	if (!p || !p->zone || p->zone_id != h->id) {
		IWD_WARN(FI_LOG_EP_DATA, "iwarpd: a DONE for unknown credit %llx: dropped\n", (unsigned long long)h->id);
		return 0;
	}
	*zone = p->zone;
	*zone_len = p->zone_len;
	p->zone = NULL;
	if (h->len > *zone_len) {
		IWD_WARN(FI_LOG_EP_DATA, "iwarpd: a DONE of %llu octets for a credit of %zu: dropped\n",
			 (unsigned long long)h->len, *zone_len);
		iwd_stage_free_cts(ep->dom, *zone, *zone_len);
		return 0;
	}
	ep->dom->cts.credit_done++;
	return 1;
}

void iwd_credit_zone_free(struct iwd_ep *ep, void *zone, size_t len)
{
	iwd_stage_free_cts(ep->dom, zone, len);
}

int iwd_credit_out(struct iwd_ep *ep, fi_addr_t src)
{
	struct iwd_rdm_ep *r = iwd_rdm(ep);
	return src < r->npeers && r->peers[src].zone;
}

int iwd_credit_try_send(struct iwd_ep *ep, struct iwd_tx *tx, struct iwd_hdr *h, fi_addr_t dest,
			const struct iwv_av *av, uint64_t op_flags)
{
	struct iwd_cts_peer *p = iwd_cts_peer(ep, dest);
	struct iwd_hdr c;
	int ret;

	if (!iwd_env.cts_credit || !p || !p->credit_held || (op_flags & FI_DELIVERY_COMPLETE) ||
	    tx->len > p->credit.len || tx->len > UINT32_MAX || ep->sq_used + 2 > ep->sq_depth || ep->txp.nfree < 1)
		return 0;
	c = p->credit;
	ret = iwd_cts_push(ep, tx, h, av, c.addr, c.rkey, c.id, IWD_HF_CREDIT);
	if (ret < 0)
		return 0;
	p->credit_held = 0; /* written: used even if its DONE could not follow */
	if (ret > 0)
		return 0;
	iwd_trace("send_credit", tx->len, 0);
	iwd_cts_sent(ep, dest, 1, h->tag, 0);
	ep->dom->cts.credit_used++;
	return 1;
}

void iwd_credit_fini(struct iwd_ep *ep)
{
	struct iwd_rdm_ep *r = iwd_rdm(ep);
	struct iwd_cts_stats *c = &ep->dom->cts;
	size_t i;
	if (c->credit_granted || c->credit_taken)
		IWD_INFO(FI_LOG_EP_CTRL,
			 "iwarpd: standing credits (domain): %llu granted, %llu taken, %llu used, %llu messages arrived "
			 "in one (%llu of them before their receive)\n",
			 (unsigned long long)c->credit_granted, (unsigned long long)c->credit_taken,
			 (unsigned long long)c->credit_used, (unsigned long long)c->credit_done,
			 (unsigned long long)c->credit_unexp);
	for (i = 0; i < r->npeers; i++) {
		if (!r->peers[i].zone)
			continue;
		iwd_stage_free_cts(ep->dom, r->peers[i].zone, r->peers[i].zone_len);
		r->peers[i].zone = NULL;
	}
}
