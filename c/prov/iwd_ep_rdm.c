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
 *    staging memory, then copies) and answers FIN, which completes the send.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "iwd.h"

#define HDR IWD_HDR_LEN

_Static_assert(sizeof(struct iwd_hdr) == IWD_HDR_LEN, "RDM header is 48 octets");

static struct iwd_ep *ep_of(struct fid_ep *f) { return iwd_container_of(f, struct iwd_ep, ep_fid); }

static int post_bounce(struct iwd_ep *ep, struct iwd_bounce *b)
{
	struct iwv_sge sge = {(uint64_t)(uintptr_t)b->slot, (uint32_t)ep->rxp.slot_size, iwd_pool_lkey(&ep->rxp)};
	struct iwv_recv_wr wr = {(uint64_t)(uintptr_t)b, 1, &sge};
	int ret = iwv_post_recv(ep->qp, &wr, 1);
	if (ret != 1) {
		IWD_WARN(FI_LOG_EP_DATA, "iwarpd: reposting a receive buffer: %s\n", iwv_strerror(ret));
		return iwd_errno(ret < 0 ? ret : -EIO);
	}
	ep->rx_posted++;
	return 0;
}

int iwd_rdm_enable(struct iwd_ep *ep)
{
	size_t i;
	int ret;
	ret = iwd_pool_init(ep->dom, &ep->txp, HDR + ep->eager_max, ep->sq_depth);
	if (ret)
		return ret;
	ret = iwd_pool_init(ep->dom, &ep->rxp, HDR + ep->eager_max, ep->rq_depth);
	if (ret)
		return ret;
	ep->bounces = calloc(ep->rq_depth, sizeof(*ep->bounces));
	if (!ep->bounces)
		return -FI_ENOMEM;
	for (i = 0; i < ep->rq_depth; i++) {
		ep->bounces[i].wr.kind = IWD_WR_RX_BOUNCE;
		ep->bounces[i].slot = iwd_pool_get(&ep->rxp);
		ret = post_bounce(ep, &ep->bounces[i]);
		if (ret)
			return ret;
	}
	return 0;
}

void iwd_rdm_fini(struct iwd_ep *ep)
{
	struct iwd_list *it, *tmp;
	iwd_list_foreach_safe(&ep->rx_reqs, it, tmp)
	{
		struct iwd_rxreq *rr = iwd_container_of(it, struct iwd_rxreq, link);
		iwd_list_remove(it);
		if (rr->stage)
			iwd_stage_free(ep->dom, rr->bounce, rr->bounce_len);
		if (rr->rx && !(rr->rx->flags & FI_MULTI_RECV))
			free(rr->rx);
		free(rr);
	}
	iwd_list_foreach_safe(&ep->pending_ctrl, it, tmp)
	{
		iwd_list_remove(it);
		free(iwd_container_of(it, struct iwd_ctrl, link));
	}
	iwd_match_fini(&ep->m);
	free(ep->bounces);
	ep->bounces = NULL;
}

/* ---- FIN ---- */

static void av_from(struct iwv_av *av, const uint8_t ip[16], uint16_t port)
{
	memset(av, 0, sizeof(*av));
	av->family = 4;
	av->port = port;
	memcpy(av->ip, ip, 16);
}

static int post_ctrl(struct iwd_ep *ep, const struct iwd_hdr *h, const struct iwv_av *av)
{
	struct iwd_tx *tx;
	struct iwv_sge sge;
	struct iwv_send_wr wr;
	int ret;
	if (ep->sq_used >= ep->sq_depth || !ep->txp.nfree)
		return -FI_EAGAIN;
	tx = iwd_tx_new(ep, NULL, 0, FI_INJECT);
	if (!tx)
		return -FI_ENOMEM;
	tx->wr.kind = IWD_WR_CTRL;
	tx->bounce = iwd_pool_get(&ep->txp);
	memcpy(tx->bounce, h, HDR);
	sge = (struct iwv_sge){(uint64_t)(uintptr_t)tx->bounce, HDR, iwd_pool_lkey(&ep->txp)};
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = (uint64_t)(uintptr_t)tx;
	wr.opcode = IWV_WR_SEND;
	wr.flags = IWV_SEND_SIGNALED;
	wr.num_sge = 1;
	wr.sg_list = &sge;
	wr.av = av;
	ret = iwd_ep_post_send(ep, &wr);
	if (ret)
		iwd_tx_free(ep, tx);
	return ret;
}

int iwd_rdm_ctrl(struct iwd_ep *ep, const struct iwd_hdr *h, const struct iwv_av *av)
{
	struct iwd_ctrl *c;
	if (iwd_list_empty(&ep->pending_ctrl) && post_ctrl(ep, h, av) == 0)
		return 0;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -FI_ENOMEM;
	c->h = *h;
	c->av = *av;
	iwd_list_insert_tail(&ep->pending_ctrl, &c->link);
	return 0;
}

static void send_fin(struct iwd_ep *ep, uint64_t id, const uint8_t ip[16], uint16_t port)
{
	struct iwd_hdr h = {.op = IWD_OP_FIN, .magic = IWD_HDR_MAGIC, .id = id};
	struct iwv_av av;
	av_from(&av, ip, port);
	if (iwd_rdm_ctrl(ep, &h, &av))
		IWD_WARN(FI_LOG_EP_DATA, "iwarpd: no memory for a FIN: the sender's rendezvous will not complete\n");
}

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

static void handle_fin(struct iwd_ep *ep, uint64_t id)
{
	struct iwd_list *it;
	iwd_list_foreach(&ep->tx_active, it)
	{
		struct iwd_tx *tx = iwd_container_of(it, struct iwd_tx, link);
		if (tx->wr.kind != IWD_WR_TX_REQ || !tx->waiting_fin || tx->id != id)
			continue;
		tx->waiting_fin = 0;
		if (!tx->posted) {
			iwd_ep_tx_done(ep, tx->context, tx->flags, tx->op_flags, tx->len, 0);
			iwd_tx_free(ep, tx);
		}
		return;
	}
	IWD_DBG(FI_LOG_EP_DATA, "iwarpd: FIN for unknown rendezvous %llu dropped\n", (unsigned long long)id);
}

/* ---- delivery ---- */

static uint64_t rx_cflags(const struct iwd_rx *rx, uint32_t hflags)
{
	uint64_t f = FI_RECV | ((rx->flags & IWD_RX_TAGGED_FLAG) ? FI_TAGGED : FI_MSG);
	if (hflags & IWD_HF_CQDATA)
		f |= FI_REMOTE_CQ_DATA;
	return f | (rx->flags & FI_COMPLETION);
}

/* FI_MULTI_RECV: after a message consumed space, release the buffer when
 * less than the minimum is left; the completion reported last carries
 * FI_MULTI_RECV. Returns the flag to add to the completion being made. */
static uint64_t multi_consume(struct iwd_ep *ep, struct iwd_rx *rx)
{
	if (rx->released || rx->len - rx->used >= ep->min_multi_recv)
		return 0;
	iwd_list_remove(&rx->link);
	rx->released = 1;
	return rx->inflight ? 0 : FI_MULTI_RECV;
}

/* Returns 1 when rx was freed. */
static int deliver_eager(struct iwd_ep *ep, struct iwd_rx *rx, uint32_t hflags, uint64_t tag, uint64_t data,
			  const void *payload, size_t plen, fi_addr_t src)
{
	uint64_t f = rx_cflags(rx, hflags);
	if (rx->flags & FI_MULTI_RECV) {
		size_t cap = rx->len - rx->used, n = plen < cap ? plen : cap;
		void *buf = (char *)rx->iov[0].iov_base + rx->used;
		iwd_iov_copy_in(rx->iov, rx->iov_count, rx->used, payload, n);
		rx->used += n;
		f |= multi_consume(ep, rx);
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

static int post_read(struct iwd_ep *ep, struct iwd_rxreq *rr)
{
	struct iwv_sge sge;
	struct iwv_send_wr wr;
	struct iwv_av av;
	uint32_t lkey;
	size_t rlen = rr->mlen - rr->olen;
	int ret;

	if (!rr->bounce) {
		if (!rr->rx->iov_count || (rr->rx->flags & FI_MULTI_RECV) || rr->rx->iov_count != 1 ||
		    !iwd_desc_lkey(rr->rx->desc[0], rr->rx->iov[0].iov_base, rlen, &lkey)) {
			rr->bounce = iwd_stage_alloc(ep->dom, rlen);
			if (!rr->bounce)
				return -FI_EAGAIN;
			rr->bounce_len = rlen;
			rr->stage = 1;
			lkey = iwd_stage_lkey(ep->dom);
		} else {
			rr->bounce = rr->rx->iov[0].iov_base; /* zero copy: the registered receive buffer */
			rr->stage = 0;
		}
	}
	lkey = rr->stage ? iwd_stage_lkey(ep->dom) : 0;
	if (!rr->stage && !iwd_desc_lkey(rr->rx->desc[0], rr->bounce, rlen, &lkey))
		return -FI_EINVAL;
	sge = (struct iwv_sge){(uint64_t)(uintptr_t)rr->bounce, (uint32_t)rlen, lkey};
	av_from(&av, rr->ip, rr->port);
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = (uint64_t)(uintptr_t)rr;
	wr.opcode = IWV_WR_RDMA_READ;
	wr.flags = IWV_SEND_SIGNALED;
	wr.num_sge = 1;
	wr.sg_list = &sge;
	wr.av = &av;
	wr.remote_addr = rr->raddr;
	wr.rkey = rr->rkey;
	ret = iwd_ep_post_send(ep, &wr);
	return ret;
}

/* Returns 1 when the receive was freed. */
static int finish_read(struct iwd_ep *ep, struct iwd_rxreq *rr, int err, int prov_errno)
{
	struct iwd_rx *rx = rr->rx;
	int freed = 0;
	size_t rlen = rr->mlen - rr->olen;
	uint64_t f = rx_cflags(rx, rr->hflags);
	void *buf;

	if (!err && rr->stage && rlen)
		iwd_iov_copy_in(rx->iov, rx->iov_count, rr->off, rr->bounce, rlen);
	if (rr->stage)
		iwd_stage_free(ep->dom, rr->bounce, rr->bounce_len);
	rr->bounce = NULL;
	send_fin(ep, rr->id, rr->ip, rr->port);
	buf = rx->iov_count ? (char *)rx->iov[0].iov_base + rr->off : NULL;
	if (rx->flags & FI_MULTI_RECV) {
		rx->inflight--;
		if (rx->released && !rx->inflight)
			f |= FI_MULTI_RECV;
	}
	if (err)
		iwd_ep_rx_err(ep, rx->context, f, 0, rr->data, rr->tag, rr->mlen, err, prov_errno, rr->src);
	else if (rr->olen)
		iwd_ep_rx_err(ep, rx->context, f, rlen, rr->data, rr->tag, rr->olen, FI_ETRUNC, 0, rr->src);
	else
		iwd_ep_rx_done(ep, rx->context, f | ((rx->flags & FI_MULTI_RECV) ? FI_COMPLETION : 0), rlen, buf, rr->data,
			       rr->tag, rr->src);
	if (!(rx->flags & FI_MULTI_RECV) || (f & FI_MULTI_RECV)) {
		free(rx);
		freed = 1;
	}
	iwd_list_remove(&rr->link);
	free(rr);
	return freed;
}

/* Returns 1 when rx was freed (nothing to read, or no memory). */
static int start_read(struct iwd_ep *ep, struct iwd_rx *rx, uint32_t hflags, uint64_t tag, uint64_t data,
		       size_t mlen, uint32_t rkey, uint64_t raddr, uint64_t id, fi_addr_t src, const uint8_t ip[16],
		       uint16_t port)
{
	struct iwd_rxreq *rr = calloc(1, sizeof(*rr));
	size_t cap;
	if (!rr) {
		iwd_ep_rx_err(ep, rx->context, rx_cflags(rx, hflags), 0, data, tag, mlen, FI_ENOMEM, 0, src);
		send_fin(ep, id, ip, port);
		if (!(rx->flags & FI_MULTI_RECV)) {
			free(rx);
			return 1;
		}
		return 0;
	}
	rr->wr.kind = IWD_WR_READ;
	rr->ep = ep;
	rr->rx = rx;
	rr->hflags = hflags;
	rr->tag = tag;
	rr->data = data;
	rr->mlen = mlen;
	rr->rkey = rkey;
	rr->raddr = raddr;
	rr->id = id;
	rr->src = src;
	memcpy(rr->ip, ip, 16);
	rr->port = port;
	if (rx->flags & FI_MULTI_RECV) {
		rr->off = rx->used;
		cap = rx->len - rx->used;
		rx->used += mlen < cap ? mlen : cap;
		rx->inflight++;
		multi_consume(ep, rx);
	} else {
		cap = rx->len;
	}
	rr->olen = mlen > cap ? mlen - cap : 0;
	iwd_list_insert_tail(&ep->rx_reqs, &rr->link);
	if (mlen - rr->olen == 0)
		return finish_read(ep, rr, 0, 0);
	if (!iwd_list_empty(&ep->pending_reads) || post_read(ep, rr)) {
		iwd_list_remove(&rr->link);
		rr->pending = 1;
		iwd_list_insert_tail(&ep->pending_reads, &rr->link);
	}
	return 0;
}

static int deliver_unexp(struct iwd_ep *ep, struct iwd_rx *rx, struct iwd_unexp *u)
{
	int freed;
	if (u->rndv)
		freed = start_read(ep, rx, u->hflags, u->tag, u->data, u->len, u->rkey, u->raddr, u->id, u->src, u->ip,
				   u->port);
	else
		freed = deliver_eager(ep, rx, u->hflags, u->tag, u->data, u->payload, u->len, u->src);
	free(u);
	return freed;
}

void iwd_rdm_retry(struct iwd_ep *ep)
{
	struct iwd_list *it, *tmp;
	iwd_list_foreach_safe(&ep->pending_ctrl, it, tmp)
	{
		struct iwd_ctrl *c = iwd_container_of(it, struct iwd_ctrl, link);
		if (post_ctrl(ep, &c->h, &c->av))
			break;
		iwd_list_remove(it);
		free(c);
	}
	iwd_list_foreach_safe(&ep->pending_reads, it, tmp)
	{
		struct iwd_rxreq *rr = iwd_container_of(it, struct iwd_rxreq, link);
		if (post_read(ep, rr))
			break;
		iwd_list_remove(it);
		rr->pending = 0;
		iwd_list_insert_tail(&ep->rx_reqs, &rr->link);
	}
}

static void rx_arrival(struct iwd_ep *ep, const struct iwd_hdr *h, const void *payload, size_t plen,
		       const struct iwv_wc *wc)
{
	int tagged = (h->flags & IWD_HF_TAGGED) != 0;
	fi_addr_t src = iwd_ep_src(ep, wc);
	struct iwd_rx *rx = iwd_match_posted(&ep->m, tagged, src, h->tag);
	struct iwd_unexp *u;

	if (rx && (rx->flags & FI_MULTI_RECV) && h->op == IWD_OP_EAGER && plen > rx->len - rx->used) {
		/* Does not fit what is left: release this buffer, try the next. */
		iwd_list_remove(&rx->link);
		rx->released = 1;
		if (!rx->inflight) {
			iwd_ep_rx_done(ep, rx->context, FI_RECV | FI_MSG | FI_MULTI_RECV, 0, NULL, 0, 0, FI_ADDR_NOTAVAIL);
			free(rx);
		}
		rx = iwd_match_posted(&ep->m, tagged, src, h->tag);
	}
	if (rx) {
		if (h->op == IWD_OP_RTS)
			start_read(ep, rx, h->flags, h->tag, h->data, h->len, h->rkey, h->addr, h->id, src, wc->src_ip,
				   wc->src_port);
		else
			deliver_eager(ep, rx, h->flags, h->tag, h->data, payload, plen, src);
		return;
	}
	u = malloc(sizeof(*u) + (h->op == IWD_OP_EAGER ? plen : 0));
	if (!u) {
		IWD_WARN(FI_LOG_EP_DATA, "iwarpd: no memory for an unexpected message: dropped\n");
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
	if (!u->rndv && plen)
		memcpy(u->payload, payload, plen);
	iwd_list_insert_tail(tagged ? &ep->m.unexp_tag : &ep->m.unexp_msg, &u->link);
	ep->m.nunexp++;
	if (src == FI_ADDR_NOTAVAIL)
		ep->m.nunknown++;
}

/* A message can arrive before the application inserted its sender into
 * the AV (MPI: a peer that finished wiring up first sends at once). Its
 * source is resolved again before a receive searches the unexpected
 * queue, so that a receive directed at that peer still finds it. */
static void resolve_unknown(struct iwd_ep *ep)
{
	struct iwd_list *hs[2] = {&ep->m.unexp_msg, &ep->m.unexp_tag}, *it;
	size_t left = 0;
	int i;
	if (!ep->m.nunknown)
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
	ep->m.nunknown = left;
}

static void rx_bounce(struct iwd_ep *ep, struct iwd_bounce *b, const struct iwv_wc *wc)
{
	struct iwd_hdr h;
	ep->rx_posted--;
	if (wc->status != IWV_WC_SUCCESS) {
		if (wc->status == IWV_WC_WR_FLUSH_ERR)
			return;
		IWD_WARN(FI_LOG_EP_DATA, "iwarpd: a receive failed (verbs status %u): dropped\n", wc->status);
		post_bounce(ep, b);
		return;
	}
	if (wc->opcode == IWV_WC_RECV_WRITE_RECORD) {
		/* A peer's fi_write (Write-Record over RD) took a receive for
		 * its record (docs/write-record.md); the data is in place. */
		post_bounce(ep, b);
		return;
	}
	if (wc->byte_len < HDR) {
		IWD_WARN(FI_LOG_EP_DATA, "iwarpd: a %u-octet message without an RDM header: dropped\n", wc->byte_len);
		post_bounce(ep, b);
		return;
	}
	memcpy(&h, b->slot, HDR);
	if (h.magic != IWD_HDR_MAGIC) {
		IWD_WARN(FI_LOG_EP_DATA, "iwarpd: a message with a bad RDM header (is the peer an iwarpd RDM endpoint?): dropped\n");
		post_bounce(ep, b);
		return;
	}
	switch (h.op) {
	case IWD_OP_EAGER:
		if (h.len != wc->byte_len - HDR)
			IWD_WARN(FI_LOG_EP_DATA, "iwarpd: eager message length %llu, %u octets arrived: dropped\n",
				 (unsigned long long)h.len, wc->byte_len - HDR);
		else
			rx_arrival(ep, &h, (char *)b->slot + HDR, wc->byte_len - HDR, wc);
		break;
	case IWD_OP_RTS:
		rx_arrival(ep, &h, NULL, 0, wc);
		break;
	case IWD_OP_FIN:
		handle_fin(ep, h.id);
		break;
	case IWD_OP_WDATA:
		handle_wdata(ep, &h, wc);
		break;
	default:
		IWD_WARN(FI_LOG_EP_DATA, "iwarpd: RDM op %u unknown: dropped\n", h.op);
	}
	post_bounce(ep, b);
}

static void tx_wc(struct iwd_ep *ep, struct iwd_tx *tx, const struct iwv_wc *wc)
{
	int err = iwd_wc_errno(wc);
	tx->posted = 0;
	if (tx->cntr_kind) {
		iwd_rma_wc(ep, tx, (struct iwv_wc *)wc);
		return;
	}
	if (tx->bounce) {
		iwd_pool_put(&ep->txp, tx->bounce);
		tx->bounce = NULL;
	}
	if (err) {
		iwd_ep_tx_err(ep, tx->context, tx->flags, err, wc->status, 0);
		iwd_tx_free(ep, tx);
		return;
	}
	if (tx->waiting_fin)
		return;
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
		finish_read(ep, rr, iwd_wc_errno(wc), wc->status);
		break;
	}
	default:
		IWD_WARN(FI_LOG_EP_DATA, "iwarpd: completion of unknown kind %u\n", w->kind);
	}
}

/* ---- transmit ---- */

static ssize_t rdm_send(struct iwd_ep *ep, const struct iovec *iov, void **desc, size_t count, fi_addr_t dest,
			uint64_t tag, uint64_t data, void *context, uint64_t op_flags, int tagged)
{
	struct iwd_hdr h;
	struct iwv_sge sge[IWD_IOV_LIMIT + 1];
	struct iwv_send_wr wr;
	const struct iwv_av *av;
	struct iwd_tx *tx;
	size_t len;
	int nsge = 0, ret, attempt;

	if (count > IWD_IOV_LIMIT || (count && !iov))
		return -FI_EINVAL;
	len = iwd_iov_len(iov, count);
	if ((op_flags & FI_INJECT) && len > ep->eager_max)
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
	if (len <= ep->eager_max) {
		h.op = IWD_OP_EAGER;
		ret = iwd_tx_gather(ep, tx, iov, desc, count, &h, HDR, sge, &nsge, (op_flags & FI_INJECT) != 0);
	} else {
		uint32_t lkey;
		struct iwd_mr *mr = desc ? desc[0] : NULL;
		h.op = IWD_OP_RTS;
		if (count == 1 && mr && iwd_desc_lkey(mr, iov[0].iov_base, len, &lkey) && (mr->access & FI_SEND)) {
			h.rkey = iwv_mr_rkey(mr->vmr); /* zero copy: the peer reads the registered buffer */
			h.addr = (uint64_t)(uintptr_t)iov[0].iov_base;
		} else {
			tx->stage = iwd_stage_alloc(ep->dom, len);
			if (!tx->stage && count == 1 &&
			    iwv_reg_mr(ep->dom->pd, iov[0].iov_base, len, IWV_ACCESS_LOCAL_WRITE | IWV_ACCESS_REMOTE_READ,
				       &tx->tmp_mr) == 0) {
				h.rkey = iwv_mr_rkey(tx->tmp_mr);
				h.addr = (uint64_t)(uintptr_t)iov[0].iov_base;
			} else if (!tx->stage) {
				iwd_tx_free(ep, tx);
				iwd_unlock(ep->dom);
				return -FI_EAGAIN; /* staging is busy: completions free it */
			} else {
				tx->stage_len = len;
				iwd_iov_copy_out(tx->stage, iov, count, len);
				h.rkey = iwd_stage_rkey(ep->dom);
				h.addr = (uint64_t)(uintptr_t)tx->stage;
			}
		}
		h.id = ++ep->next_id;
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
	iwd_unlock(ep->dom);
	return 0;
}

/* ---- receive ---- */

static ssize_t rdm_recv(struct iwd_ep *ep, const struct iovec *iov, void **desc, size_t count, fi_addr_t src,
			uint64_t tag, uint64_t ignore, void *context, uint64_t op_flags, int tagged)
{
	struct iwd_rx *rx;
	struct iwd_unexp *u;
	size_t i;
	int done = 0;

	if (count > IWD_IOV_LIMIT || (count && !iov))
		return -FI_EINVAL;
	if ((op_flags & FI_MULTI_RECV) && (tagged || count != 1))
		return -FI_EINVAL;
	if (!ep->m.directed)
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
	resolve_unknown(ep);
	if (tagged && (op_flags & FI_PEEK)) {
		iwd_domain_progress(ep->dom);
		resolve_unknown(ep);
		u = iwd_match_unexp(&ep->m, 1, src, tag, ignore, 1, NULL);
		if (!u) {
			iwd_ep_rx_err(ep, context, FI_RECV | FI_TAGGED, 0, 0, tag, 0, FI_ENOMSG, 0, FI_ADDR_NOTAVAIL);
		} else {
			uint64_t f = FI_RECV | FI_TAGGED | ((u->hflags & IWD_HF_CQDATA) ? FI_REMOTE_CQ_DATA : 0);
			if (op_flags & FI_CLAIM) {
				u->claimed = 1;
				u->claim_ctx = context;
			}
			if (op_flags & FI_DISCARD) {
				iwd_match_unexp(&ep->m, 1, src, tag, ignore, 0, (op_flags & FI_CLAIM) ? context : NULL);
				if (u->rndv)
					send_fin(ep, u->id, u->ip, u->port);
				free(u);
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
		u = iwd_match_unexp(&ep->m, 1, src, tag, ignore, 0, claim);
		if (!u) {
			iwd_unlock(ep->dom);
			return -FI_EINVAL;
		}
		if (op_flags & FI_DISCARD) {
			if (u->rndv)
				send_fin(ep, u->id, u->ip, u->port);
			iwd_ep_rx_done(ep, context, FI_RECV | FI_TAGGED | FI_COMPLETION, 0, NULL, 0, u->tag, u->src);
			free(u);
			iwd_unlock(ep->dom);
			return 0;
		}
		rx = calloc(1, sizeof(*rx));
		if (!rx) {
			iwd_list_insert_head(&ep->m.unexp_tag, &u->link);
			ep->m.nunexp++;
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
		u = iwd_match_unexp(&ep->m, tagged, src, tag, ignore, 0, NULL);
		if (!u)
			break;
		if (multi && !u->rndv && u->len > rx->len - rx->used) {
			iwd_list_insert_head(&ep->m.unexp_msg, &u->link);
			ep->m.nunexp++;
			break;
		}
		if (multi && !rx->released && iwd_list_empty(&rx->link))
			iwd_list_insert_tail(&ep->m.posted_msg, &rx->link); /* multi_consume unlinks it */
		if (deliver_unexp(ep, rx, u) || !multi || rx->released) {
			done = 1;
			break;
		}
	}
	if (!done && iwd_list_empty(&rx->link))
		iwd_list_insert_tail(tagged ? &ep->m.posted_tag : &ep->m.posted_msg, &rx->link);
	iwd_unlock(ep->dom);
	return 0;
}

ssize_t iwd_rdm_cancel(struct iwd_ep *ep, void *context)
{
	struct iwd_rx *rx = iwd_match_cancel(&ep->m, context);
	if (!rx)
		return -FI_ENOENT;
	iwd_ep_rx_err(ep, context, FI_RECV | ((rx->flags & IWD_RX_TAGGED_FLAG) ? FI_TAGGED : FI_MSG), 0, 0, rx->tag, 0,
		      FI_ECANCELED, 0, FI_ADDR_NOTAVAIL);
	if (rx->flags & FI_MULTI_RECV)
		rx->released = 1;
	if (!(rx->flags & FI_MULTI_RECV) || !rx->inflight)
		free(rx);
	return 0;
}

/* ---- ops tables ---- */

static ssize_t m_recv(struct fid_ep *f, void *buf, size_t len, void *desc, fi_addr_t src, void *ctx)
{
	struct iovec iov = {buf, len};
	return rdm_recv(ep_of(f), &iov, &desc, 1, src, 0, 0, ctx, ep_of(f)->rx_op_flags, 0);
}

static ssize_t m_recvv(struct fid_ep *f, const struct iovec *iov, void **desc, size_t count, fi_addr_t src, void *ctx)
{
	return rdm_recv(ep_of(f), iov, desc, count, src, 0, 0, ctx, ep_of(f)->rx_op_flags, 0);
}

static ssize_t m_recvmsg(struct fid_ep *f, const struct fi_msg *msg, uint64_t flags)
{
	if (!msg)
		return -FI_EINVAL;
	return rdm_recv(ep_of(f), msg->msg_iov, msg->desc, msg->iov_count, msg->addr, 0, 0, msg->context,
			flags | ep_of(f)->rx_op_flags, 0);
}

static ssize_t m_send(struct fid_ep *f, const void *buf, size_t len, void *desc, fi_addr_t dest, void *ctx)
{
	struct iovec iov = {(void *)buf, len};
	return rdm_send(ep_of(f), &iov, &desc, 1, dest, 0, 0, ctx, ep_of(f)->tx_op_flags, 0);
}

static ssize_t m_sendv(struct fid_ep *f, const struct iovec *iov, void **desc, size_t count, fi_addr_t dest, void *ctx)
{
	return rdm_send(ep_of(f), iov, desc, count, dest, 0, 0, ctx, ep_of(f)->tx_op_flags, 0);
}

static ssize_t m_sendmsg(struct fid_ep *f, const struct fi_msg *msg, uint64_t flags)
{
	if (!msg)
		return -FI_EINVAL;
	return rdm_send(ep_of(f), msg->msg_iov, msg->desc, msg->iov_count, msg->addr, 0, msg->data, msg->context,
			flags, 0);
}

static ssize_t m_inject(struct fid_ep *f, const void *buf, size_t len, fi_addr_t dest)
{
	struct iovec iov = {(void *)buf, len};
	return rdm_send(ep_of(f), &iov, NULL, 1, dest, 0, 0, NULL, FI_INJECT, 0);
}

static ssize_t m_senddata(struct fid_ep *f, const void *buf, size_t len, void *desc, uint64_t data, fi_addr_t dest,
			  void *ctx)
{
	struct iovec iov = {(void *)buf, len};
	return rdm_send(ep_of(f), &iov, &desc, 1, dest, 0, data, ctx, ep_of(f)->tx_op_flags | FI_REMOTE_CQ_DATA, 0);
}

static ssize_t m_injectdata(struct fid_ep *f, const void *buf, size_t len, uint64_t data, fi_addr_t dest)
{
	struct iovec iov = {(void *)buf, len};
	return rdm_send(ep_of(f), &iov, NULL, 1, dest, 0, data, NULL, FI_INJECT | FI_REMOTE_CQ_DATA, 0);
}

struct fi_ops_msg iwd_rdm_msg_ops = {
	.size = sizeof(struct fi_ops_msg),
	.recv = m_recv,
	.recvv = m_recvv,
	.recvmsg = m_recvmsg,
	.send = m_send,
	.sendv = m_sendv,
	.sendmsg = m_sendmsg,
	.inject = m_inject,
	.senddata = m_senddata,
	.injectdata = m_injectdata,
};

static ssize_t t_recv(struct fid_ep *f, void *buf, size_t len, void *desc, fi_addr_t src, uint64_t tag,
		      uint64_t ignore, void *ctx)
{
	struct iovec iov = {buf, len};
	return rdm_recv(ep_of(f), &iov, &desc, 1, src, tag, ignore, ctx, ep_of(f)->rx_op_flags, 1);
}

static ssize_t t_recvv(struct fid_ep *f, const struct iovec *iov, void **desc, size_t count, fi_addr_t src,
		       uint64_t tag, uint64_t ignore, void *ctx)
{
	return rdm_recv(ep_of(f), iov, desc, count, src, tag, ignore, ctx, ep_of(f)->rx_op_flags, 1);
}

static ssize_t t_recvmsg(struct fid_ep *f, const struct fi_msg_tagged *msg, uint64_t flags)
{
	if (!msg)
		return -FI_EINVAL;
	return rdm_recv(ep_of(f), msg->msg_iov, msg->desc, msg->iov_count, msg->addr, msg->tag, msg->ignore,
			msg->context, flags | ep_of(f)->rx_op_flags, 1);
}

static ssize_t t_send(struct fid_ep *f, const void *buf, size_t len, void *desc, fi_addr_t dest, uint64_t tag,
		      void *ctx)
{
	struct iovec iov = {(void *)buf, len};
	return rdm_send(ep_of(f), &iov, &desc, 1, dest, tag, 0, ctx, ep_of(f)->tx_op_flags, 1);
}

static ssize_t t_sendv(struct fid_ep *f, const struct iovec *iov, void **desc, size_t count, fi_addr_t dest,
		       uint64_t tag, void *ctx)
{
	return rdm_send(ep_of(f), iov, desc, count, dest, tag, 0, ctx, ep_of(f)->tx_op_flags, 1);
}

static ssize_t t_sendmsg(struct fid_ep *f, const struct fi_msg_tagged *msg, uint64_t flags)
{
	if (!msg)
		return -FI_EINVAL;
	return rdm_send(ep_of(f), msg->msg_iov, msg->desc, msg->iov_count, msg->addr, msg->tag, msg->data,
			msg->context, flags, 1);
}

static ssize_t t_inject(struct fid_ep *f, const void *buf, size_t len, fi_addr_t dest, uint64_t tag)
{
	struct iovec iov = {(void *)buf, len};
	return rdm_send(ep_of(f), &iov, NULL, 1, dest, tag, 0, NULL, FI_INJECT, 1);
}

static ssize_t t_senddata(struct fid_ep *f, const void *buf, size_t len, void *desc, uint64_t data, fi_addr_t dest,
			  uint64_t tag, void *ctx)
{
	struct iovec iov = {(void *)buf, len};
	return rdm_send(ep_of(f), &iov, &desc, 1, dest, tag, data, ctx, ep_of(f)->tx_op_flags | FI_REMOTE_CQ_DATA, 1);
}

static ssize_t t_injectdata(struct fid_ep *f, const void *buf, size_t len, uint64_t data, fi_addr_t dest,
			    uint64_t tag)
{
	struct iovec iov = {(void *)buf, len};
	return rdm_send(ep_of(f), &iov, NULL, 1, dest, tag, data, NULL, FI_INJECT | FI_REMOTE_CQ_DATA, 1);
}

struct fi_ops_tagged iwd_rdm_tagged_ops = {
	.size = sizeof(struct fi_ops_tagged),
	.recv = t_recv,
	.recvv = t_recvv,
	.recvmsg = t_recvmsg,
	.send = t_send,
	.sendv = t_sendv,
	.sendmsg = t_sendmsg,
	.inject = t_inject,
	.senddata = t_senddata,
	.injectdata = t_injectdata,
};
