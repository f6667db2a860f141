/*
 * iwd_rdm_rndv.c — the RDM endpoint's rendezvous protocol (iwd_ep_rdm.c
 * has the overview): the receiver of an RTS pulls the message with an RDMA
 * Read over RD (RFC 5040 §4.4 Read Request, carried by the RD profile of
 * docs/rd.md) into the registered receive buffer or staging memory, then
 * answers with a header-only FIN control message that completes the send.
 * Control messages and Reads that find the send queue full wait on
 * pending lists, retried from progress (iwd_rdm_retry).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "iwd_rdm.h"
#include "iwd_trace.h"

#define HDR IWD_HDR_LEN

/* ---- delivery helpers shared with iwd_ep_rdm.c ---- */

uint64_t iwd_rdm_rx_cflags(const struct iwd_rx *rx, uint32_t hflags)
{
	uint64_t f = FI_RECV | ((rx->flags & IWD_RX_TAGGED_FLAG) ? FI_TAGGED : FI_MSG);
	if (hflags & IWD_HF_CQDATA)
		f |= FI_REMOTE_CQ_DATA;
	return f | (rx->flags & FI_COMPLETION);
}

/* FI_MULTI_RECV: after a message consumed space, release the buffer when
 * less than the minimum is left; the completion reported last carries
 * FI_MULTI_RECV. Returns the flag to add to the completion being made. */
uint64_t iwd_rdm_multi_consume(struct iwd_ep *ep, struct iwd_rx *rx)
{
	if (rx->released || rx->len - rx->used >= ep->min_multi_recv)
		return 0;
	iwd_list_remove(&rx->link);
	rx->released = 1;
	return rx->inflight ? 0 : FI_MULTI_RECV;
}

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
	tx = iwd_tx_new(ep, NULL, 0, FI_INJECT | IWD_NOCOMP);
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
	if (iwd_list_empty(&iwd_rdm(ep)->pending_ctrl) && post_ctrl(ep, h, av) == 0)
		return 0;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -FI_ENOMEM;
	c->h = *h;
	c->av = *av;
	iwd_list_insert_tail(&iwd_rdm(ep)->pending_ctrl, &c->link);
	return 0;
}

void iwd_rdm_send_fin(struct iwd_ep *ep, uint64_t id, const uint8_t ip[16], uint16_t port)
{
	struct iwd_hdr h = {.op = IWD_OP_FIN, .magic = IWD_HDR_MAGIC, .id = id};
	struct iwv_av av;
	av_from(&av, ip, port);
	if (iwd_rdm_ctrl(ep, &h, &av))
		IWD_WARN(FI_LOG_EP_DATA, "iwarpd: no memory for a FIN: the sender's rendezvous will not complete\n");
}

void iwd_rdm_fin(struct iwd_ep *ep, uint64_t id)
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

/* post_read's answer when the staging memory could not be allocated at its
 * first use: the receive completes in error (FI_ENOMEM) and the sender is
 * sent its FIN, rather than waiting for memory that will not come. */
#define READ_NOMEM 1

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
				return iwd_stage_err(ep->dom) == -FI_ENOMEM ? READ_NOMEM : -FI_EAGAIN;
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
int iwd_rdm_read_done(struct iwd_ep *ep, struct iwd_rxreq *rr, int err, int prov_errno)
{
	struct iwd_rx *rx = rr->rx;
	int freed = 0;
	size_t rlen = rr->mlen - rr->olen;
	uint64_t f = iwd_rdm_rx_cflags(rx, rr->hflags);
	void *buf;

	iwd_trace("read_done", rlen, 0);
	if (!err && rr->stage && rlen)
		iwd_iov_copy_in(rx->iov, rx->iov_count, rr->off, rr->bounce, rlen);
	if (rr->stage)
		iwd_stage_free(ep->dom, rr->bounce, rr->bounce_len);
	rr->bounce = NULL;
	iwd_rdm_send_fin(ep, rr->id, rr->ip, rr->port);
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
int iwd_rdm_start_read(struct iwd_ep *ep, struct iwd_rx *rx, uint32_t hflags, uint64_t tag, uint64_t data,
		       size_t mlen, uint32_t rkey, uint64_t raddr, uint64_t id, fi_addr_t src, const uint8_t ip[16],
		       uint16_t port)
{
	struct iwd_rxreq *rr = calloc(1, sizeof(*rr));
	size_t cap;
	if (!rr) {
		iwd_ep_rx_err(ep, rx->context, iwd_rdm_rx_cflags(rx, hflags), 0, data, tag, mlen, FI_ENOMEM, 0, src);
		iwd_rdm_send_fin(ep, id, ip, port);
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
		iwd_rdm_multi_consume(ep, rx);
	} else {
		cap = rx->len;
	}
	rr->olen = mlen > cap ? mlen - cap : 0;
	iwd_list_insert_tail(&iwd_rdm(ep)->reads, &rr->link);
	if (mlen - rr->olen == 0)
		return iwd_rdm_read_done(ep, rr, 0, 0);
	iwd_trace("read_start", mlen, 0);
	if (iwd_list_empty(&iwd_rdm(ep)->pending_reads)) {
		int ret = post_read(ep, rr);
		if (ret == READ_NOMEM)
			return iwd_rdm_read_done(ep, rr, FI_ENOMEM, 0);
		if (!ret)
			return 0;
	}
	iwd_list_remove(&rr->link);
	rr->pending = 1;
	iwd_list_insert_tail(&iwd_rdm(ep)->pending_reads, &rr->link);
	return 0;
}

void iwd_rdm_retry(struct iwd_ep *ep)
{
	struct iwd_list *it, *tmp;
	iwd_list_foreach_safe(&iwd_rdm(ep)->pending_ctrl, it, tmp)
	{
		struct iwd_ctrl *c = iwd_container_of(it, struct iwd_ctrl, link);
		if (post_ctrl(ep, &c->h, &c->av))
			break;
		iwd_list_remove(it);
		free(c);
	}
	iwd_list_foreach_safe(&iwd_rdm(ep)->pending_reads, it, tmp)
	{
		struct iwd_rxreq *rr = iwd_container_of(it, struct iwd_rxreq, link);
		int ret = post_read(ep, rr);
		if (ret == READ_NOMEM) {
			iwd_rdm_read_done(ep, rr, FI_ENOMEM, 0);
			continue;
		}
		if (ret)
			break;
		iwd_list_remove(it);
		rr->pending = 0;
		iwd_list_insert_tail(&iwd_rdm(ep)->reads, &rr->link);
	}
}

int iwd_rdm_bulk(struct iwd_ep *ep)
{
	struct iwd_rdm_ep *r = iwd_rdm(ep);
	struct iwd_list *it;
	if (!iwd_list_empty(&r->reads) || !iwd_list_empty(&r->pending_reads))
		return 1;
	iwd_list_foreach(&ep->tx_active, it)
	{
		struct iwd_tx *tx = iwd_container_of(it, struct iwd_tx, link);
		if (tx->wr.kind == IWD_WR_TX_REQ && (tx->waiting_fin || tx->stage))
			return 1;
	}
	return 0;
}
