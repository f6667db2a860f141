/*
 * iwd_ep_dgram.c — FI_EP_DGRAM over a UD queue pair (its object, ops and
 * open), and the send/receive data path FI_EP_MSG shares over an RC queue
 * pair (fi_msg(3)). No header:
 * a message is the payload, so libfabric's ofi_rxd and ofi_rxm can layer
 * their own protocols on it. Each fi_recv posts exactly one receive work
 * request, straight into the application's buffer when its descriptor is a
 * daemon registration, else into a bounce slot copied out on completion:
 * receives complete in the order they were posted, as verbs do.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "iwd_dgram.h"
#include "iwd_fastpath.h"

static struct iwd_ep *ep_of(struct fid_ep *f) { return iwd_container_of(f, struct iwd_ep, ep_fid); }

int iwd_dgram_enable(struct iwd_ep *ep)
{
	size_t slot = ep->info->ep_attr->max_msg_size;
	int ret;
	if (iwd_dgram(ep)->stage_large || slot > iwd_env.dgram_max)
		slot = iwd_env.dgram_max;
	ret = iwd_pool_init(ep->dom, &ep->txp, slot, iwd_ep_tx_pool_count(ep));
	if (!ret)
		ret = iwd_pool_init(ep->dom, &ep->rxp, slot, iwd_pool_count(iwd_ep_rx_depth(ep->info), ep->rq_depth));
	if (ret)
		iwd_pool_fini(&ep->txp); /* a second fi_enable starts afresh */
	return ret;
}

void iwd_dgram_fini(struct iwd_ep *ep)
{
	struct iwd_list *it, *tmp;
	iwd_list_foreach_safe(&iwd_dgram(ep)->rx_reqs, it, tmp)
	{
		struct iwd_rxreq *rr = iwd_container_of(it, struct iwd_rxreq, link);
		iwd_list_remove(it);
		if (rr->stage)
			iwd_stage_free(ep->dom, rr->bounce, rr->bounce_len);
		if (rr->tmp_mr)
			iwv_dereg_mr(rr->tmp_mr);
		free(rr);
	}
}

static void rxreq_free(struct iwd_ep *ep, struct iwd_rxreq *rr)
{
	iwd_list_remove(&rr->link);
	if (rr->bounce && !rr->stage)
		iwd_pool_put(&ep->rxp, rr->bounce);
	if (rr->stage)
		iwd_stage_free(ep->dom, rr->bounce, rr->bounce_len);
	if (rr->tmp_mr)
		iwv_dereg_mr(rr->tmp_mr);
	free(rr);
}

static void rx_wc(struct iwd_ep *ep, struct iwd_rxreq *rr, const struct iwv_wc *wc)
{
	uint64_t f = FI_RECV | FI_MSG;
	fi_addr_t src = iwd_ep_src(ep, wc); /* FI_ADDR_NOTAVAIL without an AV (MSG) */
	int err = iwd_wc_errno(wc);
	size_t n = wc->byte_len;

	ep->rq_used--;
	if (err) {
		iwd_ep_rx_err(ep, rr->context, f, 0, 0, 0, 0, err, wc->status, src);
		rxreq_free(ep, rr);
		return;
	}
	if (rr->bounce) {
		size_t c = n < rr->len ? n : rr->len;
		iwd_iov_copy_in(rr->iov, rr->iov_count, 0, rr->bounce, c);
		if (n > rr->len) {
			iwd_ep_rx_err(ep, rr->context, f, rr->len, 0, 0, n - rr->len, FI_ETRUNC, 0, src);
			rxreq_free(ep, rr);
			return;
		}
	}
	if (wc->flags & IWV_WC_FLAG_IMM) {
		/* MSG (FI_RX_CQ_DATA): an RDMA Write with Immediate consumed this
		 * receive (always reported), or a Send with Immediate did: the
		 * peer's fi_senddata, merged into one receive by the daemon
		 * (merge_send_imm), or another RFC 7306 sender's Immediate Data
		 * (a message of 0 octets with CQ data). */
		f |= FI_REMOTE_CQ_DATA;
		if (wc->opcode == IWV_WC_RECV_RDMA_WITH_IMM) {
			iwd_ep_rx_done(ep, rr->context, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA | FI_COMPLETION, 0,
				       NULL, wc->imm, 0, src);
			rxreq_free(ep, rr);
			return;
		}
	}
	iwd_ep_rx_done(ep, rr->context, f | (rr->flags & FI_COMPLETION), n,
		       rr->iov_count ? rr->iov[0].iov_base : NULL, (wc->flags & IWV_WC_FLAG_IMM) ? wc->imm : 0, 0,
		       src);
	rxreq_free(ep, rr);
}

static void tx_wc(struct iwd_ep *ep, struct iwd_tx *tx, const struct iwv_wc *wc)
{
	int err = iwd_wc_errno(wc);
	tx->posted = 0;
	if (tx->done) {
		tx->done(ep, tx, wc);
		return;
	}
	if (err)
		iwd_ep_tx_err(ep, tx->context, tx->flags, err, wc->status, 0);
	else
		iwd_ep_tx_done(ep, tx->context, tx->flags, tx->op_flags, tx->len, 0);
	iwd_tx_free(ep, tx);
}

void iwd_dgram_wc(struct iwd_ep *ep, struct iwv_wc *wc)
{
	struct iwd_wr *w = (struct iwd_wr *)(uintptr_t)wc->wr_id;
	switch (w->kind) {
	case IWD_WR_RX_REQ:
		rx_wc(ep, (struct iwd_rxreq *)w, wc);
		break;
	case IWD_WR_TX_REQ:
		tx_wc(ep, (struct iwd_tx *)w, wc);
		break;
	default:
		IWD_WARN(FI_LOG_EP_DATA, "iwarpd: completion of unknown kind %u\n", w->kind);
	}
}

ssize_t iwd_dgram_cancel(struct iwd_ep *ep, void *context)
{
	IWD_UNUSED(ep);
	IWD_UNUSED(context);
	/* A receive posted to the QP cannot be taken back from the daemon's ring. */
	return -FI_ENOENT;
}

static ssize_t dg_recv(struct iwd_ep *ep, const struct iovec *iov, void **desc, size_t count, void *context,
		       uint64_t op_flags)
{
	struct iwv_sge sge[IWD_IOV_LIMIT];
	struct iwv_recv_wr wr;
	struct iwd_rxreq *rr;
	size_t i, len;
	uint32_t lkey;
	int direct = desc != NULL && count > 0, ret, nsge = 0;

	if (count > IWD_IOV_LIMIT || iwd_check_iov(iov, desc, count))
		return -FI_EINVAL;
	if (op_flags & FI_MULTI_RECV)
		return -FI_ENOSYS;
	len = iwd_iov_len(iov, count);
	iwd_lock(ep->dom);
	if (ep->dom->dead) {
		iwd_unlock(ep->dom);
		return -FI_ENODEV;
	}
	if (!ep->enabled) {
		iwd_unlock(ep->dom);
		return -FI_EOPBADSTATE;
	}
	if (ep->rq_used >= ep->rq_depth) {
		iwd_domain_progress(ep->dom);
		if (ep->rq_used >= ep->rq_depth) {
			iwd_unlock(ep->dom);
			return -FI_EAGAIN;
		}
	}
	rr = calloc(1, sizeof(*rr));
	if (!rr) {
		iwd_unlock(ep->dom);
		return -FI_ENOMEM;
	}
	rr->wr.kind = IWD_WR_RX_REQ;
	rr->ep = ep;
	rr->context = context;
	rr->flags = op_flags;
	rr->len = len;
	rr->iov_count = count;
	for (i = 0; i < count; i++) {
		rr->iov[i] = iov[i];
		if (direct && !iwd_desc_lkey(desc[i], iov[i].iov_base, iov[i].iov_len, &lkey))
			direct = 0;
		else if (direct && iov[i].iov_len)
			sge[nsge++] = (struct iwv_sge){(uint64_t)(uintptr_t)iov[i].iov_base, (uint32_t)iov[i].iov_len, lkey};
	}
	iwd_list_insert_tail(&iwd_dgram(ep)->rx_reqs, &rr->link);
	if (!direct) {
		nsge = 1;
		if (len > ep->rxp.slot_size && iwd_dgram(ep)->stage_large) {
			rr->bounce = iwd_stage_alloc(ep->dom, len);
			rr->bounce_len = len;
			rr->stage = rr->bounce != NULL;
			sge[0] = (struct iwv_sge){(uint64_t)(uintptr_t)rr->bounce, (uint32_t)len,
						  rr->bounce ? iwd_stage_lkey(ep->dom) : 0};
		} else {
			rr->bounce = iwd_pool_get(&ep->rxp);
			sge[0] = (struct iwv_sge){(uint64_t)(uintptr_t)rr->bounce, (uint32_t)ep->rxp.slot_size,
						  iwd_pool_lkey(&ep->rxp)};
		}
		if (!rr->bounce) {
			ret = rr->bounce_len ? iwd_stage_err(ep->dom) : -FI_EAGAIN;
			rxreq_free(ep, rr);
			iwd_unlock(ep->dom);
			return ret;
		}
	}
	wr.wr_id = (uint64_t)(uintptr_t)rr;
	wr.num_sge = (uint16_t)nsge;
	wr.sg_list = sge;
	ret = iwv_post_recv(ep->qp, &wr, 1);
	if (ret != 1) {
		rxreq_free(ep, rr);
		iwd_unlock(ep->dom);
		return ret == -ENOMEM ? -FI_EAGAIN : iwd_errno(ret < 0 ? ret : -EIO);
	}
	ep->rq_used++;
	iwd_unlock(ep->dom);
	return 0;
}

static ssize_t dg_send(struct iwd_ep *ep, const struct iovec *iov, void **desc, size_t count, fi_addr_t dest,
		       void *context, uint64_t op_flags, uint64_t data)
{
	struct iwv_sge sge[IWD_IOV_LIMIT + 1];
	struct iwv_send_wr wr;
	const struct iwv_av *av = NULL;
	struct iwd_tx *tx;
	size_t len;
	int nsge = 0, ret;

	if (count > IWD_IOV_LIMIT || iwd_check_iov(iov, desc, count))
		return -FI_EINVAL;
	len = iwd_iov_len(iov, count);
	if (len > ep->info->ep_attr->max_msg_size)
		return -FI_EMSGSIZE;
	if ((op_flags & FI_INJECT) && len > ep->info->tx_attr->inject_size)
		return -FI_EMSGSIZE;
	if (op_flags & FI_REMOTE_CQ_DATA) {
		/* MSG: a Send with Immediate on a merge_send_imm QP (one
		 * receive at the peer, zero-copy as a Send), cq_data_size 4;
		 * DGRAM offers no CQ data (cq_data_max 0). */
		if (!ep->cq_data_max || !(ep->caps & FI_REMOTE_CQ_DATA))
			return -FI_ENOSYS;
		if (data > ep->cq_data_max)
			return -FI_EINVAL;
	}
	iwd_lock(ep->dom);
	if (ep->dom->dead) {
		iwd_unlock(ep->dom);
		return -FI_ENODEV;
	}
	if (!ep->enabled) {
		iwd_unlock(ep->dom);
		return -FI_EOPBADSTATE;
	}
	ret = ep->ops->tx_dest(ep, dest, &av);
	if (ret) {
		iwd_unlock(ep->dom);
		return ret;
	}
	if (ep->fp && !(op_flags & FI_REMOTE_CQ_DATA) && !iwd_fp_send(ep, iov, count, len, av)) {
		/* Sent by the rank itself (iwd_fastpath.c): UD completes when
		 * the LLP accepted it. */
		iwd_ep_tx_done(ep, context, FI_SEND | FI_MSG, op_flags, len, 0);
		iwd_unlock(ep->dom);
		return 0;
	}
	if (ep->sq_used >= ep->sq_depth || !ep->txp.nfree)
		iwd_domain_progress(ep->dom);
	tx = iwd_tx_new(ep, context, FI_SEND | FI_MSG, op_flags);
	if (!tx) {
		iwd_unlock(ep->dom);
		return -FI_ENOMEM;
	}
	tx->len = len;
	ret = iwd_tx_gather(ep, tx, iov, desc, count, NULL, 0, sge, &nsge, (op_flags & FI_INJECT) != 0);
	if (ret == -FI_EMSGSIZE && iwd_dgram(ep)->stage_large) {
		/* Larger than a bounce slot and not registered: stage it. */
		tx->stage = iwd_stage_alloc(ep->dom, len);
		if (!tx->stage) {
			ret = iwd_stage_err(ep->dom);
		} else {
			tx->stage_len = len;
			iwd_iov_copy_out(tx->stage, iov, count, len);
			sge[0] = (struct iwv_sge){(uint64_t)(uintptr_t)tx->stage, (uint32_t)len, iwd_stage_lkey(ep->dom)};
			nsge = 1;
			ret = 0;
		}
	}
	if (ret) {
		iwd_tx_free(ep, tx);
		iwd_unlock(ep->dom);
		return ret;
	}
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = (uint64_t)(uintptr_t)tx;
	wr.opcode = IWV_WR_SEND;
	if (op_flags & FI_REMOTE_CQ_DATA) {
		wr.opcode = IWV_WR_SEND_WITH_IMM;
		wr.imm = (uint32_t)data;
	}
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

static ssize_t m_recv(struct fid_ep *f, void *buf, size_t len, void *desc, fi_addr_t src, void *ctx)
{
	struct iovec iov = {buf, len};
	IWD_UNUSED(src);
	return dg_recv(ep_of(f), &iov, &desc, 1, ctx, ep_of(f)->rx_op_flags);
}

static ssize_t m_recvv(struct fid_ep *f, const struct iovec *iov, void **desc, size_t count, fi_addr_t src, void *ctx)
{
	IWD_UNUSED(src);
	return dg_recv(ep_of(f), iov, desc, count, ctx, ep_of(f)->rx_op_flags);
}

static ssize_t m_recvmsg(struct fid_ep *f, const struct fi_msg *msg, uint64_t flags)
{
	if (!msg)
		return -FI_EINVAL;
	return dg_recv(ep_of(f), msg->msg_iov, msg->desc, msg->iov_count, msg->context, flags);
}

static ssize_t m_send(struct fid_ep *f, const void *buf, size_t len, void *desc, fi_addr_t dest, void *ctx)
{
	struct iovec iov = {(void *)buf, len};
	return dg_send(ep_of(f), &iov, &desc, 1, dest, ctx, ep_of(f)->tx_op_flags, 0);
}

static ssize_t m_sendv(struct fid_ep *f, const struct iovec *iov, void **desc, size_t count, fi_addr_t dest, void *ctx)
{
	return dg_send(ep_of(f), iov, desc, count, dest, ctx, ep_of(f)->tx_op_flags, 0);
}

static ssize_t m_sendmsg(struct fid_ep *f, const struct fi_msg *msg, uint64_t flags)
{
	if (!msg)
		return -FI_EINVAL;
	return dg_send(ep_of(f), msg->msg_iov, msg->desc, msg->iov_count, msg->addr, msg->context, flags, msg->data);
}

static ssize_t m_inject(struct fid_ep *f, const void *buf, size_t len, fi_addr_t dest)
{
	struct iovec iov = {(void *)buf, len};
	return dg_send(ep_of(f), &iov, NULL, 1, dest, NULL, FI_INJECT | IWD_NOCOMP, 0);
}

/* fi_senddata / fi_injectdata: MSG only (DGRAM: -FI_ENOSYS, dg_send). */
static ssize_t m_senddata(struct fid_ep *f, const void *buf, size_t len, void *desc, uint64_t data, fi_addr_t dest,
			  void *ctx)
{
	struct iovec iov = {(void *)buf, len};
	return dg_send(ep_of(f), &iov, &desc, 1, dest, ctx, ep_of(f)->tx_op_flags | FI_REMOTE_CQ_DATA, data);
}

static ssize_t m_injectdata(struct fid_ep *f, const void *buf, size_t len, uint64_t data, fi_addr_t dest)
{
	struct iovec iov = {(void *)buf, len};
	return dg_send(ep_of(f), &iov, NULL, 1, dest, NULL, FI_INJECT | IWD_NOCOMP | FI_REMOTE_CQ_DATA, data);
}

void iwd_dgram_init(struct iwd_dgram_ep *d)
{
	iwd_list_init(&d->rx_reqs);
	d->ep.ep_fid.msg = &iwd_dgram_msg_ops;
}

struct fi_ops_msg iwd_dgram_msg_ops = {
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

/* FI_EP_DGRAM's enable: MSG's, and the fast path (iwd_fastpath.c; its
 * codec follows the QP's CRC setting, FI_IWARPD_DGRAM_CRC). */
static int dgram_enable(struct iwd_ep *ep)
{
	int ret = iwd_dgram_enable(ep);
	if (!ret)
		iwd_fp_attach(ep);
	return ret;
}

static const struct iwd_ep_ops dgram_ops = {
	.datagram = 1,
	.enable = dgram_enable,
	.idle = iwd_fp_idle,
	.fini = iwd_dgram_fini,
	.progress = iwd_ep_progress,
	.wc = iwd_dgram_wc,
	.cancel = iwd_dgram_cancel,
	.tx_dest = iwd_ep_av_dest,
};

int iwd_dgram_ep_open(struct iwd_domain *dom, struct fi_info *info, struct fid_ep **out, void *context)
{
	struct iwd_dgram_ep *d = calloc(1, sizeof(*d));
	int ret;
	if (!d)
		return -FI_ENOMEM;
	iwd_ep_init(&d->ep, dom, info, context, &dgram_ops);
	iwd_dgram_init(d);
	ret = d->ep.info ? iwd_ep_create_qp(&d->ep, IWV_QPT_UD, iwd_ep_rx_depth(info)) : -FI_ENOMEM;
	return iwd_ep_opened(&d->ep, ret, out);
}
