/*
 * iwd_ep_rdm.c — FI_EP_RDM over an RD queue pair (fi_endpoint(3),
 * fi_msg(3), fi_tagged(3)). RD delivers each message once, intact and in
 * order per pair of QPs, so the provider adds only what libfabric asks of an
 * RDM endpoint beyond verbs:
 *
 *  - every message starts with a 48-octet header (struct iwd_hdr: op,
 *    flags, tag, CQ data, length, rendezvous key/address/id);
 *  - eager: messages up to FI_IWARPD_EAGER_MAX travel whole and land in
 *    bounce receives the endpoint keeps posted; they are matched against
 *    posted receives (iwd_tagged.c) or kept as unexpected messages;
 *  - rendezvous: larger messages send only a header (RTS) naming a
 *    registered buffer; the receiver, once matched, pulls the data with an
 *    RDMA Read over RD straight into a registered receive buffer (or into
 *    staging memory, then copies) and answers FIN, which completes the send
 *    (iwd_rdm_rndv.c).
 *
 * The fi_ops_msg and fi_ops_tagged tables are in iwd_rdm_ops.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "iwd_rdm.h"
#include "iwd_fastpath.h"
#include "iwd_trace.h"

#define HDR IWD_HDR_LEN

_Static_assert(sizeof(struct iwd_hdr) == IWD_HDR_LEN, "RDM header is 48 octets");

static int post_bounce(struct iwd_ep *ep, struct iwd_bounce *b)
{
	struct iwv_sge sge = {(uint64_t)(uintptr_t)b->slot, (uint32_t)ep->rxp.slot_size, iwd_pool_lkey(&ep->rxp)};
	struct iwv_recv_wr wr = {(uint64_t)(uintptr_t)b, 1, &sge};
	int ret = iwv_post_recv(ep->qp, &wr, 1);
	if (ret != 1) {
		IWD_WARN(FI_LOG_EP_DATA, "iwarpd: reposting a receive buffer: %s\n", iwv_strerror(ret));
		return iwd_errno(ret < 0 ? ret : -EIO);
	}
	iwd_rdm(ep)->rx_posted++;
	return 0;
}

/* Undoes what iwd_rdm_enable set up; the domain lock is held. The
 * bounce receives already posted go with the QP (fi_close). */
static void rdm_unenable(struct iwd_ep *ep)
{
	free(iwd_rdm(ep)->bounces);
	iwd_rdm(ep)->bounces = NULL;
	iwd_pool_fini(&ep->rxp);
	iwd_pool_fini(&ep->txp);
}

int iwd_rdm_enable(struct iwd_ep *ep)
{
	struct iwd_rdm_ep *r = iwd_rdm(ep);
	size_t i;
	int ret = 0;
	/* A second fi_enable after a failure: with nothing posted the first
	 * undid everything; with some bounce receives posted (they stay with
	 * the pool until fi_close) it goes on from the first not posted. */
	if (!r->bounces) {
		ret = iwd_pool_init(ep->dom, &ep->txp, HDR + r->eager_max, iwd_ep_tx_pool_count(ep));
		if (!ret)
			ret = iwd_pool_init(ep->dom, &ep->rxp, HDR + r->eager_max, ep->rq_depth);
		if (!ret) {
			r->bounces = calloc(ep->rq_depth, sizeof(*r->bounces));
			if (!r->bounces)
				ret = -FI_ENOMEM;
		}
	}
	for (i = r->rx_posted; !ret && i < ep->rq_depth; i++) {
		r->bounces[i].wr.kind = IWD_WR_RX_BOUNCE;
		if (!r->bounces[i].slot)
			r->bounces[i].slot = iwd_pool_get(&ep->rxp);
		ret = post_bounce(ep, &r->bounces[i]);
	}
	if (ret && !r->rx_posted)
		rdm_unenable(ep);
	return ret;
}

/* Frees an unexpected message (and the credit's zone holding its payload). */
static void unexp_free(struct iwd_ep *ep, struct iwd_unexp *u)
{
	if (u->zone)
		iwd_credit_zone_free(ep, u->zone, u->zone_len);
	free(u);
}

void iwd_rdm_fini(struct iwd_ep *ep)
{
	struct iwd_list *it, *tmp;
	iwd_list_foreach_safe(&iwd_rdm(ep)->reads, it, tmp)
	{
		struct iwd_rxreq *rr = iwd_container_of(it, struct iwd_rxreq, link);
		iwd_list_remove(it);
		if (rr->stage)
			iwd_stage_free(ep->dom, rr->bounce, rr->bounce_len);
		if (rr->rx && !(rr->rx->flags & FI_MULTI_RECV))
			free(rr->rx);
		free(rr);
	}
	iwd_list_foreach_safe(&iwd_rdm(ep)->pending_ctrl, it, tmp)
	{
		iwd_list_remove(it);
		free(iwd_container_of(it, struct iwd_ctrl, link));
	}
	{
		struct iwd_list *hs[2] = {&iwd_rdm(ep)->m.unexp_msg, &iwd_rdm(ep)->m.unexp_tag};
		int i;
		for (i = 0; i < 2; i++)
			if (hs[i]->next)
				iwd_list_foreach_safe(hs[i], it, tmp)
				{
					iwd_list_remove(it);
					unexp_free(ep, iwd_container_of(it, struct iwd_unexp, link));
				}
	}
	iwd_credit_fini(ep);
	iwd_cts_fini(ep);
	iwd_match_fini(&iwd_rdm(ep)->m);
	free(iwd_rdm(ep)->bounces);
	iwd_rdm(ep)->bounces = NULL;
}

/* ---- control messages: WDATA (FIN and rendezvous: iwd_rdm_rndv.c) ---- */

/* The CQ data of an fi_writedata: the Write before it has been placed (RD
 * delivers in order per pair of QPs). No receive is consumed (no
 * FI_RX_CQ_DATA mode on RDM): fi_rma(3), fi_getinfo(3). */
static void handle_wdata(struct iwd_ep *ep, const struct iwd_hdr *h, const struct iwv_wc *wc)
{
	if (ep->rx_cq)
		iwd_cq_push(ep->rx_cq, NULL, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, h->len, NULL, h->data, 0,
			    iwd_ep_src(ep, wc));
	iwd_cntr_inc(ep->rwrite_cntr);
}

/* ---- delivery ---- */

/* Returns 1 when rx was freed. */
static int deliver_eager(struct iwd_ep *ep, struct iwd_rx *rx, uint32_t hflags, uint64_t tag, uint64_t data,
			  const void *payload, size_t plen, fi_addr_t src)
{
	uint64_t f = iwd_rdm_rx_cflags(rx, hflags);
	if (rx->flags & FI_MULTI_RECV) {
		size_t cap = rx->len - rx->used, n = plen < cap ? plen : cap;
		void *buf = (char *)rx->iov[0].iov_base + rx->used;
		iwd_iov_copy_in(rx->iov, rx->iov_count, rx->used, payload, n);
		rx->used += n;
		f |= iwd_rdm_multi_consume(ep, rx);
		if (n < plen)
			iwd_ep_rx_err(ep, rx->context, f, n, data, tag, plen - n, FI_ETRUNC, 0, src);
		else
			iwd_ep_rx_done(ep, rx->context, f | FI_COMPLETION, n, buf, data, tag, src);
		if (f & FI_MULTI_RECV) {
			free(rx);
			return 1;
		}
		return 0;
	}
	iwd_iov_copy_in(rx->iov, rx->iov_count, 0, payload, plen < rx->len ? plen : rx->len);
	if (plen > rx->len)
		iwd_ep_rx_err(ep, rx->context, f, rx->len, data, tag, plen - rx->len, FI_ETRUNC, 0, src);
	else
		iwd_ep_rx_done(ep, rx->context, f, plen, rx->iov_count ? rx->iov[0].iov_base : NULL, data, tag, src);
	free(rx);
	return 1;
}

static int deliver_unexp(struct iwd_ep *ep, struct iwd_rx *rx, struct iwd_unexp *u)
{
	int freed;
	if (u->rndv)
		freed = iwd_rdm_start_read(ep, rx, u->hflags, u->tag, u->data, u->len, u->rkey, u->raddr, u->id, u->src, u->ip,
				   u->port);
	else
		freed = deliver_eager(ep, rx, u->hflags, u->tag, u->data, u->zone ? u->zone : (void *)u->payload, u->len,
				      u->src);
	unexp_free(ep, u);
	return freed;
}

/* A message arrived: the first matching posted receive takes it, else it
 * waits as unexpected. zone (zone_len octets; NULL for none): the payload
 * is a credit's landing zone, which this call frees or hands to the
 * unexpected entry (no copy). */
static void rx_arrival(struct iwd_ep *ep, const struct iwd_hdr *h, const void *payload, size_t plen, fi_addr_t src,
		       const struct iwv_wc *wc, void *zone, size_t zone_len)
{
	int tagged = (h->flags & IWD_HF_TAGGED) != 0;
	struct iwd_rx *rx = iwd_match_posted(&iwd_rdm(ep)->m, tagged, src, h->tag);
	struct iwd_unexp *u;

	if (rx && (rx->flags & FI_MULTI_RECV) && h->op == IWD_OP_EAGER && plen > rx->len - rx->used) {
		/* Does not fit what is left: release this buffer, try the next. */
		iwd_list_remove(&rx->link);
		rx->released = 1;
		if (!rx->inflight) {
			iwd_ep_rx_done(ep, rx->context, FI_RECV | FI_MSG | FI_MULTI_RECV, 0, NULL, 0, 0, FI_ADDR_NOTAVAIL);
			free(rx);
		}
		rx = iwd_match_posted(&iwd_rdm(ep)->m, tagged, src, h->tag);
	}
	if (rx) {
		iwd_cts_rx_end(ep, rx); /* its offer, if any, was not used: the sender ended it */
		if (h->op == IWD_OP_RTS)
			iwd_rdm_start_read(ep, rx, h->flags, h->tag, h->data, h->len, h->rkey, h->addr, h->id, src, wc->src_ip,
				   wc->src_port);
		else
			deliver_eager(ep, rx, h->flags, h->tag, h->data, payload, plen, src);
		if (zone)
			iwd_credit_zone_free(ep, zone, zone_len);
		return;
	}
	u = malloc(sizeof(*u) + (h->op == IWD_OP_EAGER && !zone ? plen : 0));
	if (!u) {
		IWD_WARN(FI_LOG_EP_DATA, "iwarpd: no memory for an unexpected message: dropped\n");
		if (zone)
			iwd_credit_zone_free(ep, zone, zone_len);
		return;
	}
	memset(u, 0, sizeof(*u));
	u->src = src;
	u->tag = h->tag;
	u->data = h->data;
	u->hflags = h->flags;
	u->rndv = h->op == IWD_OP_RTS;
	u->len = u->rndv ? h->len : plen;
	u->rkey = h->rkey;
	u->raddr = h->addr;
	u->id = h->id;
	memcpy(u->ip, wc->src_ip, 16);
	u->port = wc->src_port;
	if (zone) {
		u->zone = zone;
		u->zone_len = zone_len;
		ep->dom->cts.credit_unexp++;
	} else if (!u->rndv && plen) {
		memcpy(u->payload, payload, plen);
	}
	iwd_list_insert_tail(tagged ? &iwd_rdm(ep)->m.unexp_tag : &iwd_rdm(ep)->m.unexp_msg, &u->link);
	iwd_rdm(ep)->m.nunexp++;
	if (src == FI_ADDR_NOTAVAIL)
		iwd_rdm(ep)->m.nunknown++;
}

/* A message can arrive before the application inserted its sender into
 * the AV (MPI: a peer that finished wiring up first sends at once). Its
 * source is resolved again before a receive searches the unexpected
 * queue, so that a receive directed at that peer still finds it. */
static void resolve_unknown(struct iwd_ep *ep)
{
	struct iwd_list *hs[2] = {&iwd_rdm(ep)->m.unexp_msg, &iwd_rdm(ep)->m.unexp_tag}, *it;
	size_t left = 0;
	int i;
	if (!iwd_rdm(ep)->m.nunknown)
		return;
	for (i = 0; i < 2; i++) {
		iwd_list_foreach(hs[i], it)
		{
			struct iwd_unexp *u = iwd_container_of(it, struct iwd_unexp, link);
			if (u->src != FI_ADDR_NOTAVAIL)
				continue;
			u->src = iwd_av_reverse(ep->av, u->ip, u->port);
			if (u->src == FI_ADDR_NOTAVAIL)
				left++;
		}
	}
	iwd_rdm(ep)->m.nunknown = left;
}

/* iwd_rdm_rx_msg handles one arrived message (header and payload), from a
 * bounce receive or from the fast path (iwd_fastpath_rd.c); msg is read
 * during the call only. */
void iwd_rdm_rx_msg(struct iwd_ep *ep, const void *msg, uint32_t len, const struct iwv_wc *wc)
{
	struct iwd_hdr h;
	fi_addr_t src;
	if (len < HDR) {
		IWD_WARN(FI_LOG_EP_DATA, "iwarpd: a %u-octet message without an RDM header: dropped\n", len);
		return;
	}
	memcpy(&h, msg, HDR);
	if (h.magic != IWD_HDR_MAGIC) {
		IWD_WARN(FI_LOG_EP_DATA, "iwarpd: a message with a bad RDM header (is the peer an iwarpd RDM endpoint?): dropped\n");
		return;
	}
	/* Bulk messages leave the socket with the daemon (iwd_fastpath_rd.c). */
	if (h.op == IWD_OP_EAGER || h.op == IWD_OP_RTS || h.op == IWD_OP_FIN || h.op == IWD_OP_DONE)
		iwd_fprd_note(ep, len, h.op != IWD_OP_EAGER);
	switch (h.op) {
	case IWD_OP_EAGER:
		if (h.len != len - HDR) {
			IWD_WARN(FI_LOG_EP_DATA, "iwarpd: eager message length %llu, %u octets arrived: dropped\n",
				 (unsigned long long)h.len, len - HDR);
			break;
		}
		src = iwd_ep_src(ep, wc);
		iwd_cts_taken(ep, src, (h.flags & IWD_HF_TAGGED) != 0, h.tag, 0);
		rx_arrival(ep, &h, (const char *)msg + HDR, len - HDR, src, wc, NULL, 0);
		break;
	case IWD_OP_RTS:
		iwd_trace("rx_rts", h.len, 0);
		src = iwd_ep_src(ep, wc);
		iwd_cts_taken(ep, src, (h.flags & IWD_HF_TAGGED) != 0, h.tag, 0);
		rx_arrival(ep, &h, NULL, 0, src, wc, NULL, 0);
		iwd_credit_grant(ep, src, h.len); /* it sends large messages: its next one needs no RTS */
		break;
	case IWD_OP_CTS:
		iwd_cts_arrived(ep, &h, iwd_ep_src(ep, wc));
		break;
	case IWD_OP_CREDIT:
		iwd_credit_arrived(ep, &h, iwd_ep_src(ep, wc));
		break;
	case IWD_OP_DONE: {
		void *stage;
		size_t slen;
		src = iwd_ep_src(ep, wc);
		iwd_trace("rx_done", h.len, h.flags);
		if (h.flags & IWD_HF_CREDIT) {
			/* Written into our credit: it arrives now as an eager
			 * message would, its payload in the zone. */
			if (iwd_credit_done(ep, &h, src, &stage, &slen)) {
				iwd_cts_taken(ep, src, (h.flags & IWD_HF_TAGGED) != 0, h.tag, 0);
				h.op = IWD_OP_EAGER;
				h.flags &= (uint8_t)~IWD_HF_CREDIT;
				rx_arrival(ep, &h, stage, (size_t)h.len, src, wc, stage, slen);
				iwd_credit_grant(ep, src, h.len);
			}
			break;
		}
		if (iwd_cts_done(ep, &h, src, &stage, &slen)) {
			/* Its receive was cancelled: it arrives as an eager message. */
			h.op = IWD_OP_EAGER;
			rx_arrival(ep, &h, stage, (size_t)h.len, src, wc, NULL, 0);
			iwd_stage_free_cts(ep->dom, stage, slen);
		}
		iwd_credit_grant(ep, src, h.len);
		break;
	}
	case IWD_OP_FIN:
		iwd_trace("rx_fin", h.id, 0);
		iwd_rdm_fin(ep, h.id);
		break;
	case IWD_OP_WDATA:
		handle_wdata(ep, &h, wc);
		break;
	default:
		IWD_WARN(FI_LOG_EP_DATA, "iwarpd: RDM op %u unknown: dropped\n", h.op);
	}
}

static void rx_bounce(struct iwd_ep *ep, struct iwd_bounce *b, const struct iwv_wc *wc)
{
	iwd_rdm(ep)->rx_posted--;
	if (wc->status != IWV_WC_SUCCESS) {
		if (wc->status == IWV_WC_WR_FLUSH_ERR) {
			iwd_fprd_qp_failed(ep); /* the QP is in ERROR: the rank's own Writes fail too */
			return;
		}
		IWD_WARN(FI_LOG_EP_DATA, "iwarpd: a receive failed (verbs status %u): dropped\n", wc->status);
		post_bounce(ep, b);
		return;
	}
	if (wc->opcode == IWV_WC_RECV_WRITE_RECORD) {
		/* A peer's fi_write (Write-Record over RD) took a receive for
		 * its record (docs/write-record.md): not on a quiet_records QP
		 * (iwd_ep_base.c), kept for a record with Immediate; the data is
		 * in place. */
		post_bounce(ep, b);
		return;
	}
	iwd_rdm_rx_msg(ep, b->slot, wc->byte_len, wc);
	post_bounce(ep, b);
}

static void tx_wc(struct iwd_ep *ep, struct iwd_tx *tx, const struct iwv_wc *wc)
{
	int err = iwd_wc_errno(wc);
	tx->posted = 0;
	if (tx->done) {
		tx->done(ep, tx, wc);
		return;
	}
	if (tx->bounce) {
		iwd_pool_put(&ep->txp, tx->bounce);
		tx->bounce = NULL;
	}
	if (err) {
		tx->failed = 1;
		iwd_ep_tx_err(ep, tx->context, tx->flags, err, wc->status, 0);
		iwd_tx_free(ep, tx);
		return;
	}
	if (tx->waiting_fin)
		return;
	if (tx->len > iwd_rdm(ep)->eager_max)
		iwd_trace("send_wc", tx->len, 0);
	iwd_ep_tx_done(ep, tx->context, tx->flags, tx->op_flags, tx->len, 0);
	iwd_tx_free(ep, tx);
}

void iwd_rdm_wc(struct iwd_ep *ep, struct iwv_wc *wc)
{
	struct iwd_wr *w = (struct iwd_wr *)(uintptr_t)wc->wr_id;
	switch (w->kind) {
	case IWD_WR_RX_BOUNCE:
		rx_bounce(ep, (struct iwd_bounce *)w, wc);
		break;
	case IWD_WR_TX_REQ:
		tx_wc(ep, (struct iwd_tx *)w, wc);
		break;
	case IWD_WR_CTRL:
		if (wc->status != IWV_WC_SUCCESS && wc->status != IWV_WC_WR_FLUSH_ERR)
			IWD_WARN(FI_LOG_EP_DATA, "iwarpd: a FIN failed (verbs status %u)\n", wc->status);
		iwd_tx_free(ep, (struct iwd_tx *)w);
		break;
	case IWD_WR_READ: {
		struct iwd_rxreq *rr = (struct iwd_rxreq *)w;
		iwd_rdm_read_done(ep, rr, iwd_wc_errno(wc), wc->status);
		break;
	}
	default:
		IWD_WARN(FI_LOG_EP_DATA, "iwarpd: completion of unknown kind %u\n", w->kind);
	}
}

/* ---- transmit ---- */

ssize_t iwd_rdm_send(struct iwd_ep *ep, const struct iovec *iov, void **desc, size_t count, fi_addr_t dest,
		     uint64_t tag, uint64_t data, void *context, uint64_t op_flags, int tagged)
{
	struct iwd_hdr h;
	struct iwv_sge sge[IWD_IOV_LIMIT + 1];
	struct iwv_send_wr wr;
	const struct iwv_av *av;
	struct iwd_tx *tx;
	size_t len;
	int nsge = 0, ret, attempt;

	if (count > IWD_IOV_LIMIT || iwd_check_iov(iov, desc, count))
		return -FI_EINVAL;
	len = iwd_iov_len(iov, count);
	if ((op_flags & FI_INJECT) && len > iwd_rdm(ep)->eager_max)
		return -FI_EMSGSIZE;
	if (len > ep->info->ep_attr->max_msg_size)
		return -FI_EMSGSIZE;
	iwd_lock(ep->dom);
	if (ep->dom->dead) {
		iwd_unlock(ep->dom);
		return -FI_ENODEV;
	}
	if (!ep->enabled) {
		iwd_unlock(ep->dom);
		return -FI_EOPBADSTATE;
	}
	av = iwd_av_lookup(ep->av, dest);
	if (!av) {
		iwd_unlock(ep->dom);
		return -FI_EINVAL;
	}
	memset(&h, 0, sizeof(h));
	h.magic = IWD_HDR_MAGIC;
	h.flags = (uint8_t)((tagged ? IWD_HF_TAGGED : 0) | ((op_flags & FI_REMOTE_CQ_DATA) ? IWD_HF_CQDATA : 0));
	h.tag = tag;
	h.data = data;
	h.len = len;
	/* Not FI_DELIVERY_COMPLETE: the rank's send completes when sent (the
	 * daemon retransmits the page's copy), the daemon's when acknowledged. */
	if (ep->fprd)
		iwd_fprd_note(ep, HDR + len, len > iwd_rdm(ep)->eager_max);
	if (ep->fprd && len <= iwd_rdm(ep)->eager_max && !(op_flags & FI_DELIVERY_COMPLETE)) {
		h.op = IWD_OP_EAGER;
		ret = iwd_fprd_send(ep, &h, HDR, iov, count, len, av);
		if (!ret) {
			/* Sent by the rank itself (iwd_fastpath_rd.c): complete
			 * for RD, whose daemon retransmits the page's copy. */
			iwd_ep_tx_done(ep, context, FI_SEND | (tagged ? FI_TAGGED : FI_MSG), op_flags, len, 0);
			iwd_cts_sent(ep, dest, tagged, tag, 0);
			iwd_unlock(ep->dom);
			return 0;
		}
		if (ret == -FI_ENOBUFS) {
			/* Only an ACK is missing: the application progresses
			 * and retries (fi_msg(3) -FI_EAGAIN). */
			iwd_unlock(ep->dom);
			return -FI_EAGAIN;
		}
	}
	for (attempt = 0; attempt < 2; attempt++) {
		if (ep->sq_used < ep->sq_depth && ep->txp.nfree)
			break;
		iwd_domain_progress(ep->dom);
	}
	tx = iwd_tx_new(ep, context, FI_SEND | (tagged ? FI_TAGGED : FI_MSG), op_flags);
	if (!tx) {
		iwd_unlock(ep->dom);
		return -FI_ENOMEM;
	}
	tx->len = len;
	if (len <= iwd_rdm(ep)->eager_max) {
		h.op = IWD_OP_EAGER;
		ret = iwd_tx_gather(ep, tx, iov, desc, count, &h, HDR, sge, &nsge, (op_flags & FI_INJECT) != 0);
	} else {
		uint32_t lkey;
		struct iwd_mr *mr = desc ? desc[0] : NULL;
		h.op = IWD_OP_RTS;
		iwd_trace("send_post", len, 0);
		if (count == 1 && mr && iwd_desc_lkey(mr, iov[0].iov_base, len, &lkey) && (mr->access & FI_SEND)) {
			h.rkey = iwv_mr_rkey(mr->vmr); /* zero copy: the peer reads the registered buffer */
			h.addr = (uint64_t)(uintptr_t)iov[0].iov_base;
		} else {
			/* A copy into staging first: the peer's Read of staging is
			 * sent from the daemon's mapping of it, where a Read of the
			 * application's own buffer (a cached registration of process
			 * memory) costs the daemon a pread of /proc/PID/mem — two
			 * kernel copies and a page walk per page, on two shared
			 * cores three times the CPU of this copy (docs/benchmarks.md
			 * "MPI large messages"). Sends copy into half the staging
			 * at most (iwd_stage_alloc_tx); past it, zero copy. */
			tx->stage = iwd_stage_alloc_tx(ep->dom, len);
			if (tx->stage) {
				tx->stage_tx = 1;
				tx->stage_len = len;
				iwd_iov_copy_out(tx->stage, iov, count, len);
				/* The receiver offered its staging: the daemons
				 * move it (iwd_rdm_cts.c). */
				iwd_trace("send_copied", len, 0);
				if (iwd_cts_try_send(ep, tx, &h, dest, av, op_flags)) {
					iwd_unlock(ep->dom);
					return 0;
				}
				h.rkey = iwd_stage_rkey(ep->dom);
				h.addr = (uint64_t)(uintptr_t)tx->stage;
				goto rts;
			}
			/* Zero copy from a cached registration (iwd_rcache.c): a
			 * buffer sent again costs no control round trip. */
			if (count == 1)
				tx->rc = iwd_rcache_get(ep->dom, iov[0].iov_base, len, &h.rkey);
			if (tx->rc) {
				h.addr = (uint64_t)(uintptr_t)iov[0].iov_base;
				goto rts;
			}
			tx->stage = iwd_stage_alloc(ep->dom, len);
			if (!tx->stage && count == 1 && !iwd_env.mr_cache &&
			    iwv_reg_mr(ep->dom->pd, iov[0].iov_base, len, IWV_ACCESS_LOCAL_WRITE | IWV_ACCESS_REMOTE_READ,
				       &tx->tmp_mr) == 0) {
				h.rkey = iwv_mr_rkey(tx->tmp_mr);
				h.addr = (uint64_t)(uintptr_t)iov[0].iov_base;
			} else if (!tx->stage) {
				ret = iwd_stage_err(ep->dom); /* busy: completions free it */
				iwd_tx_free(ep, tx);
				iwd_unlock(ep->dom);
				return ret;
			} else {
				tx->stage_len = len;
				iwd_iov_copy_out(tx->stage, iov, count, len);
				h.rkey = iwd_stage_rkey(ep->dom);
				h.addr = (uint64_t)(uintptr_t)tx->stage;
			}
		}
	rts:
		h.id = ++iwd_rdm(ep)->next_id;
		tx->id = h.id;
		tx->waiting_fin = 1;
		ret = iwd_tx_gather(ep, tx, NULL, NULL, 0, &h, HDR, sge, &nsge, 1);
	}
	if (ret) {
		iwd_tx_free(ep, tx);
		iwd_unlock(ep->dom);
		return ret;
	}
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = (uint64_t)(uintptr_t)tx;
	wr.opcode = IWV_WR_SEND;
	wr.flags = IWV_SEND_SIGNALED;
	wr.num_sge = (uint16_t)nsge;
	wr.sg_list = sge;
	wr.av = av;
	ret = iwd_ep_post_send(ep, &wr);
	if (ret) {
		iwd_tx_free(ep, tx);
		iwd_unlock(ep->dom);
		return ret;
	}
	tx->posted = 1;
	if (h.op == IWD_OP_RTS)
		iwd_trace("send_rts", len, 0);
	iwd_cts_sent(ep, dest, tagged, tag, h.op == IWD_OP_RTS);
	iwd_unlock(ep->dom);
	return 0;
}

/* RMA Write (ops->rma_write): RD has no plain RDMA Write, so it is a
 * Write-Record, which places the data the same way; the target's QP is
 * created with quiet_records (iwd_ep_base.c), so the record takes none of
 * its bounce receives and completes nothing there. With
 * FI_REMOTE_CQ_DATA the daemon's RD has no Write with Immediate: a
 * header-only WDATA message carrying the 64-bit data follows to the same
 * peer QP, which RD delivers after the Write (in order per pair of QPs);
 * the target reports it without consuming a receive (handle_wdata). */
int iwd_rdm_rma_write(struct iwd_ep *ep, struct iwv_send_wr *wr, uint64_t op_flags, uint64_t data, size_t len,
		      const struct iwv_av *av)
{
	int ret;
	if ((op_flags & FI_REMOTE_CQ_DATA) && ep->sq_used + 1 >= ep->sq_depth)
		return -FI_EAGAIN; /* room for the Write and its WDATA */
	wr->opcode = IWV_WR_WRITE_RECORD;
	ret = iwd_ep_post_send(ep, wr);
	if (ret || !(op_flags & FI_REMOTE_CQ_DATA))
		return ret;
	{
		struct iwd_hdr h = {.op = IWD_OP_WDATA, .magic = IWD_HDR_MAGIC, .data = data, .len = len,
				    .addr = wr->remote_addr};
		if (iwd_rdm_ctrl(ep, &h, av))
			IWD_WARN(FI_LOG_EP_DATA, "iwarpd: no memory for the CQ data of a Write: the target will not see it\n");
	}
	return 0;
}

/* ---- receive ---- */

ssize_t iwd_rdm_recv(struct iwd_ep *ep, const struct iovec *iov, void **desc, size_t count, fi_addr_t src,
		     uint64_t tag, uint64_t ignore, void *context, uint64_t op_flags, int tagged)
{
	struct iwd_rx *rx;
	struct iwd_unexp *u;
	size_t i;
	int done = 0;

	if (count > IWD_IOV_LIMIT || iwd_check_iov(iov, desc, count))
		return -FI_EINVAL;
	if ((op_flags & FI_MULTI_RECV) && (tagged || count != 1))
		return -FI_EINVAL;
	if (!iwd_rdm(ep)->m.directed)
		src = FI_ADDR_UNSPEC;
	iwd_lock(ep->dom);
	if (ep->dom->dead) {
		iwd_unlock(ep->dom);
		return -FI_ENODEV;
	}
	if (!ep->enabled) {
		iwd_unlock(ep->dom);
		return -FI_EOPBADSTATE;
	}
	/* A large tagged receive looks at what arrived first: an RTS already
	 * there starts its Read now, while the application computes; else
	 * the receive may offer its staging (iwd_rdm_cts.c). */
	if (tagged && iwd_env.cts && !(op_flags & (FI_PEEK | FI_CLAIM)) &&
	    iwd_iov_len(iov, count) > iwd_rdm(ep)->eager_max)
	{
		if (tagged && iwd_iov_len(iov, count) > iwd_rdm(ep)->eager_max)
			iwd_trace("recv_post", iwd_iov_len(iov, count), 0);
		iwd_domain_progress(ep->dom);
	}
	resolve_unknown(ep);
	if (tagged && (op_flags & FI_PEEK)) {
		iwd_domain_progress(ep->dom);
		resolve_unknown(ep);
		u = iwd_match_unexp(&iwd_rdm(ep)->m, 1, src, tag, ignore, 1, NULL);
		if (!u) {
			iwd_ep_rx_err(ep, context, FI_RECV | FI_TAGGED, 0, 0, tag, 0, FI_ENOMSG, 0, FI_ADDR_NOTAVAIL);
		} else {
			uint64_t f = FI_RECV | FI_TAGGED | ((u->hflags & IWD_HF_CQDATA) ? FI_REMOTE_CQ_DATA : 0);
			if (op_flags & FI_CLAIM) {
				u->claimed = 1;
				u->claim_ctx = context;
			}
			if (op_flags & FI_DISCARD) {
				iwd_match_unexp(&iwd_rdm(ep)->m, 1, src, tag, ignore, 0, (op_flags & FI_CLAIM) ? context : NULL);
				if (u->rndv)
					iwd_rdm_send_fin(ep, u->id, u->ip, u->port);
				unexp_free(ep, u);
				iwd_ep_rx_done(ep, context, f | FI_COMPLETION, 0, NULL, 0, tag, FI_ADDR_NOTAVAIL);
			} else {
				iwd_ep_rx_done(ep, context, f | FI_COMPLETION, u->len, NULL, u->data, u->tag, u->src);
			}
		}
		iwd_unlock(ep->dom);
		return 0;
	}
	if (tagged && (op_flags & FI_CLAIM)) {
		void *claim = context;
		u = iwd_match_unexp(&iwd_rdm(ep)->m, 1, src, tag, ignore, 0, claim);
		if (!u) {
			iwd_unlock(ep->dom);
			return -FI_EINVAL;
		}
		if (op_flags & FI_DISCARD) {
			if (u->rndv)
				iwd_rdm_send_fin(ep, u->id, u->ip, u->port);
			iwd_ep_rx_done(ep, context, FI_RECV | FI_TAGGED | FI_COMPLETION, 0, NULL, 0, u->tag, u->src);
			unexp_free(ep, u);
			iwd_unlock(ep->dom);
			return 0;
		}
		rx = calloc(1, sizeof(*rx));
		if (!rx) {
			iwd_list_insert_head(&iwd_rdm(ep)->m.unexp_tag, &u->link);
			iwd_rdm(ep)->m.nunexp++;
			iwd_unlock(ep->dom);
			return -FI_ENOMEM;
		}
		iwd_list_init(&rx->link);
		rx->context = context;
		rx->flags = FI_RECV | IWD_RX_TAGGED_FLAG | FI_COMPLETION;
		rx->src = src;
		rx->tag = tag;
		rx->ignore = ignore;
		for (i = 0; i < count; i++) {
			rx->iov[i] = iov[i];
			rx->desc[i] = desc ? desc[i] : NULL;
		}
		rx->iov_count = count;
		rx->len = iwd_iov_len(iov, count);
		deliver_unexp(ep, rx, u);
		iwd_unlock(ep->dom);
		return 0;
	}
	rx = calloc(1, sizeof(*rx));
	if (!rx) {
		iwd_unlock(ep->dom);
		return -FI_ENOMEM;
	}
	rx->context = context;
	rx->flags = FI_RECV | (tagged ? IWD_RX_TAGGED_FLAG : 0) | (op_flags & (FI_COMPLETION | FI_MULTI_RECV));
	rx->src = src;
	rx->tag = tag;
	rx->ignore = ignore;
	for (i = 0; i < count; i++) {
		rx->iov[i] = iov[i];
		rx->desc[i] = desc ? desc[i] : NULL;
	}
	rx->iov_count = count;
	rx->len = iwd_iov_len(iov, count);
	iwd_list_init(&rx->link);
	for (i = 0; i < 1u << 20; i++) {
		int multi = (rx->flags & FI_MULTI_RECV) != 0;
		u = iwd_match_unexp(&iwd_rdm(ep)->m, tagged, src, tag, ignore, 0, NULL);
		if (!u)
			break;
		if (multi && !u->rndv && u->len > rx->len - rx->used) {
			iwd_list_insert_head(&iwd_rdm(ep)->m.unexp_msg, &u->link);
			iwd_rdm(ep)->m.nunexp++;
			break;
		}
		if (multi && !rx->released && iwd_list_empty(&rx->link))
			iwd_list_insert_tail(&iwd_rdm(ep)->m.posted_msg, &rx->link); /* iwd_rdm_multi_consume unlinks it */
		if (deliver_unexp(ep, rx, u) || !multi || rx->released) {
			done = 1;
			break;
		}
	}
	if (done && tagged && rx->len > iwd_rdm(ep)->eager_max)
		iwd_trace("recv_unexp", 0, 0);
	if (!done && iwd_list_empty(&rx->link)) {
		if (tagged) {
			iwd_cts_offer(ep, rx); /* before it is posted: receives posted earlier decide */
			/* The sender may write into our credit while we compute:
			 * the daemon, not this rank, should hold the socket then. */
			if (!rx->cts_stage && rx->len > iwd_rdm(ep)->eager_max && rx->src != FI_ADDR_UNSPEC &&
			    iwd_credit_out(ep, rx->src))
				iwd_fprd_leave(ep, HDR + rx->len);
		}
		if (tagged && rx->len > iwd_rdm(ep)->eager_max)
			iwd_trace("recv_posted", rx->cts_stage != NULL, 0);
		iwd_list_insert_tail(tagged ? &iwd_rdm(ep)->m.posted_tag : &iwd_rdm(ep)->m.posted_msg, &rx->link);
	}
	iwd_unlock(ep->dom);
	return 0;
}

ssize_t iwd_rdm_cancel(struct iwd_ep *ep, void *context)
{
	struct iwd_rx *rx = iwd_match_cancel(&iwd_rdm(ep)->m, context);
	if (!rx)
		return -FI_ENOENT;
	iwd_ep_rx_err(ep, context, FI_RECV | ((rx->flags & IWD_RX_TAGGED_FLAG) ? FI_TAGGED : FI_MSG), 0, 0, rx->tag, 0,
		      FI_ECANCELED, 0, FI_ADDR_NOTAVAIL);
	if (rx->flags & FI_MULTI_RECV)
		rx->released = 1;
	iwd_cts_cancel(ep, rx);
	if (!(rx->flags & FI_MULTI_RECV) || !rx->inflight)
		free(rx);
	return 0;
}
