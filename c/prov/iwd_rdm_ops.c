/*
 * iwd_rdm_ops.c — the fi_ops_msg (fi_msg(3)) and fi_ops_tagged
 * (fi_tagged(3)) tables of FI_EP_RDM endpoints: thin entry points that
 * unpack the libfabric call forms into iwd_rdm_send / iwd_rdm_recv
 * (iwd_ep_rdm.c).
 */
#include "iwd.h"

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
	return iwd_rdm_send(ep_of(f), &iov, NULL, 1, dest, 0, 0, NULL, FI_INJECT, 0);
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
	return iwd_rdm_send(ep_of(f), &iov, NULL, 1, dest, 0, data, NULL, FI_INJECT | FI_REMOTE_CQ_DATA, 0);
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
	return iwd_rdm_send(ep_of(f), &iov, NULL, 1, dest, tag, 0, NULL, FI_INJECT, 1);
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
	return iwd_rdm_send(ep_of(f), &iov, NULL, 1, dest, tag, data, NULL, FI_INJECT | FI_REMOTE_CQ_DATA, 1);
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
