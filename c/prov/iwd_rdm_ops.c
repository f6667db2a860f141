/*
 * iwd_rdm_ops.c — the FI_EP_RDM endpoint object: opening one (an RD queue
 * pair), its iwd_ep_ops, and its fi_ops_msg (fi_msg(3)) and fi_ops_tagged
 * (fi_tagged(3)) tables: thin entry points that unpack the libfabric call
 * forms into iwd_rdm_send / iwd_rdm_recv (iwd_ep_rdm.c).
 */
#include <stdlib.h>

#include "iwd_rdm.h"
#include "iwd_fastpath.h"

static struct iwd_ep *ep_of(struct fid_ep *f) { return iwd_container_of(f, struct iwd_ep, ep_fid); }

static ssize_t m_recv(struct fid_ep *f, void *buf, size_t len, void *desc, fi_addr_t src, void *ctx)
{
	struct iovec iov = {buf, len};
	return iwd_rdm_recv(ep_of(f), &iov, &desc, 1, src, 0, 0, ctx, ep_of(f)->rx_op_flags, 0);
}

static ssize_t m_recvv(struct fid_ep *f, const struct iovec *iov, void **desc, size_t count, fi_addr_t src, void *ctx)
{
	return iwd_rdm_recv(ep_of(f), iov, desc, count, src, 0, 0, ctx, ep_of(f)->rx_op_flags, 0);
}

static ssize_t m_recvmsg(struct fid_ep *f, const struct fi_msg *msg, uint64_t flags)
{
	if (!msg)
		return -FI_EINVAL;
	return iwd_rdm_recv(ep_of(f), msg->msg_iov, msg->desc, msg->iov_count, msg->addr, 0, 0, msg->context,
			flags | ep_of(f)->rx_op_flags, 0);
}

static ssize_t m_send(struct fid_ep *f, const void *buf, size_t len, void *desc, fi_addr_t dest, void *ctx)
{
	struct iovec iov = {(void *)buf, len};
	return iwd_rdm_send(ep_of(f), &iov, &desc, 1, dest, 0, 0, ctx, ep_of(f)->tx_op_flags, 0);
}

static ssize_t m_sendv(struct fid_ep *f, const struct iovec *iov, void **desc, size_t count, fi_addr_t dest, void *ctx)
{
	return iwd_rdm_send(ep_of(f), iov, desc, count, dest, 0, 0, ctx, ep_of(f)->tx_op_flags, 0);
}

static ssize_t m_sendmsg(struct fid_ep *f, const struct fi_msg *msg, uint64_t flags)
{
	if (!msg)
		return -FI_EINVAL;
	return iwd_rdm_send(ep_of(f), msg->msg_iov, msg->desc, msg->iov_count, msg->addr, 0, msg->data, msg->context,
			flags, 0);
}

static ssize_t m_inject(struct fid_ep *f, const void *buf, size_t len, fi_addr_t dest)
{
	struct iovec iov = {(void *)buf, len};
	return iwd_rdm_send(ep_of(f), &iov, NULL, 1, dest, 0, 0, NULL, FI_INJECT | IWD_NOCOMP, 0);
}

static ssize_t m_senddata(struct fid_ep *f, const void *buf, size_t len, void *desc, uint64_t data, fi_addr_t dest,
			  void *ctx)
{
	struct iovec iov = {(void *)buf, len};
	return iwd_rdm_send(ep_of(f), &iov, &desc, 1, dest, 0, data, ctx, ep_of(f)->tx_op_flags | FI_REMOTE_CQ_DATA, 0);
}

static ssize_t m_injectdata(struct fid_ep *f, const void *buf, size_t len, uint64_t data, fi_addr_t dest)
{
	struct iovec iov = {(void *)buf, len};
	return iwd_rdm_send(ep_of(f), &iov, NULL, 1, dest, 0, data, NULL, FI_INJECT | IWD_NOCOMP | FI_REMOTE_CQ_DATA, 0);
}

static struct fi_ops_msg rdm_msg_ops = {
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
	return iwd_rdm_recv(ep_of(f), &iov, &desc, 1, src, tag, ignore, ctx, ep_of(f)->rx_op_flags, 1);
}

static ssize_t t_recvv(struct fid_ep *f, const struct iovec *iov, void **desc, size_t count, fi_addr_t src,
		       uint64_t tag, uint64_t ignore, void *ctx)
{
	return iwd_rdm_recv(ep_of(f), iov, desc, count, src, tag, ignore, ctx, ep_of(f)->rx_op_flags, 1);
}

static ssize_t t_recvmsg(struct fid_ep *f, const struct fi_msg_tagged *msg, uint64_t flags)
{
	if (!msg)
		return -FI_EINVAL;
	return iwd_rdm_recv(ep_of(f), msg->msg_iov, msg->desc, msg->iov_count, msg->addr, msg->tag, msg->ignore,
			msg->context, flags | ep_of(f)->rx_op_flags, 1);
}

static ssize_t t_send(struct fid_ep *f, const void *buf, size_t len, void *desc, fi_addr_t dest, uint64_t tag,
		      void *ctx)
{
	struct iovec iov = {(void *)buf, len};
	return iwd_rdm_send(ep_of(f), &iov, &desc, 1, dest, tag, 0, ctx, ep_of(f)->tx_op_flags, 1);
}

static ssize_t t_sendv(struct fid_ep *f, const struct iovec *iov, void **desc, size_t count, fi_addr_t dest,
		       uint64_t tag, void *ctx)
{
	return iwd_rdm_send(ep_of(f), iov, desc, count, dest, tag, 0, ctx, ep_of(f)->tx_op_flags, 1);
}

static ssize_t t_sendmsg(struct fid_ep *f, const struct fi_msg_tagged *msg, uint64_t flags)
{
	if (!msg)
		return -FI_EINVAL;
	return iwd_rdm_send(ep_of(f), msg->msg_iov, msg->desc, msg->iov_count, msg->addr, msg->tag, msg->data,
			msg->context, flags, 1);
}

static ssize_t t_inject(struct fid_ep *f, const void *buf, size_t len, fi_addr_t dest, uint64_t tag)
{
	struct iovec iov = {(void *)buf, len};
	return iwd_rdm_send(ep_of(f), &iov, NULL, 1, dest, tag, 0, NULL, FI_INJECT | IWD_NOCOMP, 1);
}

static ssize_t t_senddata(struct fid_ep *f, const void *buf, size_t len, void *desc, uint64_t data, fi_addr_t dest,
			  uint64_t tag, void *ctx)
{
	struct iovec iov = {(void *)buf, len};
	return iwd_rdm_send(ep_of(f), &iov, &desc, 1, dest, tag, data, ctx, ep_of(f)->tx_op_flags | FI_REMOTE_CQ_DATA, 1);
}

static ssize_t t_injectdata(struct fid_ep *f, const void *buf, size_t len, uint64_t data, fi_addr_t dest,
			    uint64_t tag)
{
	struct iovec iov = {(void *)buf, len};
	return iwd_rdm_send(ep_of(f), &iov, NULL, 1, dest, tag, data, NULL, FI_INJECT | IWD_NOCOMP | FI_REMOTE_CQ_DATA, 1);
}

static struct fi_ops_tagged rdm_tagged_ops = {
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

/* fi_rx_size_left(3): receives queue in the provider (tag matching). */
static ssize_t rdm_rx_size_left(struct iwd_ep *ep)
{
	IWD_UNUSED(ep);
	return (ssize_t)IWD_RX_SIZE;
}

/* FI_EP_RDM's enable: the bounce receives, and the fast path when asked
 * for (iwd_fastpath_rd.c). */
static int rdm_enable(struct iwd_ep *ep)
{
	int ret = iwd_rdm_enable(ep);
	if (!ret)
		iwd_fprd_attach(ep);
	return ret;
}

static const struct iwd_ep_ops rdm_ops = {
	.datagram = 1,
	.enable = rdm_enable,
	.idle = iwd_fprd_idle,
	.bulk = iwd_rdm_bulk,
	.fini = iwd_rdm_fini,
	.progress = iwd_ep_progress,
	.wc = iwd_rdm_wc,
	.retry = iwd_rdm_retry,
	.cancel = iwd_rdm_cancel,
	.rx_size_left = rdm_rx_size_left,
	.tx_dest = iwd_ep_av_dest,
	.rma_write = iwd_rdm_rma_write,
};

int iwd_rdm_ep_open(struct iwd_domain *dom, struct fi_info *info, struct fid_ep **out, void *context)
{
	struct iwd_rdm_ep *r = calloc(1, sizeof(*r));
	int ret;
	if (!r)
		return -FI_ENOMEM;
	iwd_ep_init(&r->ep, dom, info, context, &rdm_ops);
	r->eager_max = iwd_env.eager_max;
	r->ep.cq_data_max = UINT64_MAX;
	iwd_list_init(&r->pending_ctrl);
	iwd_list_init(&r->pending_reads);
	iwd_list_init(&r->reads);
	iwd_match_init(&r->m, (info->caps & FI_DIRECTED_RECV) != 0);
	iwd_cts_init(&r->ep);
	r->ep.ep_fid.msg = &rdm_msg_ops;
	r->ep.ep_fid.tagged = &rdm_tagged_ops;
	r->ep.ep_fid.rma = &iwd_rma_ops;
	r->ep.ep_fid.atomic = &iwd_atomic_ops;
	ret = r->ep.info ? iwd_ep_create_qp(&r->ep, IWV_QPT_RD, iwd_env.rx_bufs) : -FI_ENOMEM;
	return iwd_ep_opened(&r->ep, ret, out);
}
