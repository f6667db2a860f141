/*
 * iwd_rma.c — FI_RMA (fi_rma(3)): RDMA Write-Record and RDMA Read over RD
 * (RDM endpoints, the destination from the AV; RD has no plain Write) and
 * RDMA Write and Read over RC (MSG endpoints).
 * Keys are the daemon's STags and addresses virtual (FI_MR_PROV_KEY,
 * FI_MR_VIRT_ADDR). A local buffer without a daemon registration goes
 * through a bounce slot or staging memory.
 *
 * Remote CQ data (fi_writedata, FI_REMOTE_CQ_DATA): on MSG the Write is an
 * RDMA Write with Immediate (RFC 7306; 32-bit data, consuming a receive at
 * the target: FI_RX_CQ_DATA mode). On RDM the daemon's RD has no Write with
 * Immediate: the Write is followed by a header-only WDATA message carrying
 * the 64-bit data to the same peer QP, which RD delivers after the Write
 * (in order per pair of QPs); the target reports it without consuming a
 * receive. The initiator completes when the Write is acknowledged.
 */
#include <stdlib.h>
#include <string.h>

#include "iwd.h"
#include "iwd_fastpath.h"

static struct iwd_ep *ep_of(struct fid_ep *f) { return iwd_container_of(f, struct iwd_ep, ep_fid); }

void iwd_rma_done(struct iwd_ep *ep, struct iwd_tx *tx, const struct iwv_wc *wc)
{
	int err = iwd_wc_errno(wc);
	if (!err && tx->cntr_kind == 2) {
		const void *src = tx->stage ? tx->stage : tx->bounce;
		if (src)
			iwd_iov_copy_in(tx->iov, tx->iov_count, 0, src, tx->len);
	}
	if (err)
		iwd_ep_tx_err(ep, tx->context, tx->flags, err, wc->status, tx->cntr_kind);
	else
		iwd_ep_tx_done(ep, tx->context, tx->flags, tx->op_flags, tx->len, tx->cntr_kind);
	iwd_tx_free(ep, tx);
}

static ssize_t rma_op(struct iwd_ep *ep, int is_read, const struct iovec *iov, void **desc, size_t count,
		      fi_addr_t dest, uint64_t addr, uint64_t key, void *context, uint64_t op_flags, uint64_t data)
{
	struct iwv_sge sge[IWD_IOV_LIMIT];
	struct iwv_send_wr wr;
	const struct iwv_av *av = NULL;
	struct iwd_tx *tx;
	size_t len, i;
	int nsge = 0, ret;

	if (count > IWD_IOV_LIMIT || iwd_check_iov(iov, desc, count))
		return -FI_EINVAL;
	if (op_flags & FI_REMOTE_CQ_DATA) {
		if (is_read || !ep->ops->rma_write)
			return -FI_EINVAL;
		if (!(ep->caps & FI_REMOTE_CQ_DATA))
			return -FI_ENOSYS;
		if (data > ep->cq_data_max)
			return -FI_EINVAL; /* MSG: cq_data_size 4 */
	}
	len = iwd_iov_len(iov, count);
	if ((op_flags & FI_INJECT) && (is_read || len > ep->info->tx_attr->inject_size))
		return -FI_EINVAL;
	if (key > UINT32_MAX)
		return -FI_EINVAL;
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
	/* RDM: a small Write the rank sends itself while it owns its
	 * socket (iwd_fastpath_rma.c); otherwise through the daemon. */
	if (!is_read && ep->fprd && iwd_fprd_write(ep, iov, count, len, av, addr, key, context, op_flags) == 0) {
		iwd_unlock(ep->dom);
		return 0;
	}
	/* And a small Read into one buffer (iwd_fastpath_req.c). */
	if (is_read && ep->fprd && count == 1 && iov[0].iov_len == len &&
	    iwd_fprd_read(ep, iov[0].iov_base, len, av, addr, key, context, op_flags) == 0) {
		iwd_unlock(ep->dom);
		return 0;
	}
	if (ep->sq_used + 1 >= ep->sq_depth || !ep->txp.nfree)
		iwd_domain_progress(ep->dom);
	tx = iwd_tx_new(ep, context, FI_RMA | (is_read ? FI_READ : FI_WRITE), op_flags);
	if (!tx) {
		iwd_unlock(ep->dom);
		return -FI_ENOMEM;
	}
	tx->cntr_kind = is_read ? 2 : 1;
	tx->done = iwd_rma_done;
	tx->len = len;
	if (is_read) {
		uint32_t lk[IWD_IOV_LIMIT];
		int direct = desc != NULL && count > 0;
		for (i = 0; direct && i < count; i++)
			if (!iwd_desc_lkey(desc[i], iov[i].iov_base, iov[i].iov_len, &lk[i]))
				direct = 0;
		if (direct) {
			for (i = 0; i < count; i++)
				if (iov[i].iov_len)
					sge[nsge++] = (struct iwv_sge){(uint64_t)(uintptr_t)iov[i].iov_base,
								       (uint32_t)iov[i].iov_len, lk[i]};
			ret = 0;
		} else {
			for (i = 0; i < count; i++)
				tx->iov[i] = iov[i];
			tx->iov_count = count;
			if (len <= ep->txp.slot_size && (tx->bounce = iwd_pool_get(&ep->txp)) != NULL) {
				sge[0] = (struct iwv_sge){(uint64_t)(uintptr_t)tx->bounce, (uint32_t)len, iwd_pool_lkey(&ep->txp)};
				ret = 0;
			} else if ((tx->stage = iwd_stage_alloc(ep->dom, len)) != NULL) {
				tx->stage_len = len;
				sge[0] = (struct iwv_sge){(uint64_t)(uintptr_t)tx->stage, (uint32_t)len, iwd_stage_lkey(ep->dom)};
				ret = 0;
			} else {
				ret = iwd_stage_err(ep->dom);
			}
			nsge = len ? 1 : 0;
		}
	} else {
		ret = iwd_tx_gather(ep, tx, iov, desc, count, NULL, 0, sge, &nsge, (op_flags & FI_INJECT) != 0);
		if (ret == -FI_EMSGSIZE) {
			tx->stage = iwd_stage_alloc(ep->dom, len);
			if (tx->stage) {
				tx->stage_len = len;
				iwd_iov_copy_out(tx->stage, iov, count, len);
				sge[0] = (struct iwv_sge){(uint64_t)(uintptr_t)tx->stage, (uint32_t)len, iwd_stage_lkey(ep->dom)};
				nsge = 1;
				ret = 0;
			} else {
				ret = iwd_stage_err(ep->dom);
			}
		}
	}
	if (ret) {
		iwd_tx_free(ep, tx);
		iwd_unlock(ep->dom);
		return ret;
	}
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = (uint64_t)(uintptr_t)tx;
	wr.opcode = IWV_WR_RDMA_READ;
	wr.flags = IWV_SEND_SIGNALED;
	wr.num_sge = (uint16_t)nsge;
	wr.sg_list = sge;
	wr.av = av;
	wr.remote_addr = addr;
	wr.rkey = (uint32_t)key;
	/* A Write is the type's (ops->rma_write): Write-Record over RD, RDMA
	 * Write over RC, and how CQ data travels with it. */
	ret = is_read ? iwd_ep_post_send(ep, &wr) : ep->ops->rma_write(ep, &wr, op_flags, data, len, av);
	if (ret) {
		iwd_tx_free(ep, tx);
		iwd_unlock(ep->dom);
		return ret;
	}
	tx->posted = 1;
	iwd_unlock(ep->dom);
	return 0;
}

static ssize_t r_read(struct fid_ep *f, void *buf, size_t len, void *desc, fi_addr_t src, uint64_t addr, uint64_t key,
		      void *ctx)
{
	struct iovec iov = {buf, len};
	return rma_op(ep_of(f), 1, &iov, &desc, 1, src, addr, key, ctx, ep_of(f)->tx_op_flags, 0);
}

static ssize_t r_readv(struct fid_ep *f, const struct iovec *iov, void **desc, size_t count, fi_addr_t src,
		       uint64_t addr, uint64_t key, void *ctx)
{
	return rma_op(ep_of(f), 1, iov, desc, count, src, addr, key, ctx, ep_of(f)->tx_op_flags, 0);
}

static ssize_t r_readmsg(struct fid_ep *f, const struct fi_msg_rma *msg, uint64_t flags)
{
	if (!msg || msg->rma_iov_count != 1)
		return -FI_EINVAL;
	return rma_op(ep_of(f), 1, msg->msg_iov, msg->desc, msg->iov_count, msg->addr, msg->rma_iov[0].addr,
		      msg->rma_iov[0].key, msg->context, flags, msg->data);
}

static ssize_t r_write(struct fid_ep *f, const void *buf, size_t len, void *desc, fi_addr_t dest, uint64_t addr,
		       uint64_t key, void *ctx)
{
	struct iovec iov = {(void *)buf, len};
	return rma_op(ep_of(f), 0, &iov, &desc, 1, dest, addr, key, ctx, ep_of(f)->tx_op_flags, 0);
}

static ssize_t r_writev(struct fid_ep *f, const struct iovec *iov, void **desc, size_t count, fi_addr_t dest,
			uint64_t addr, uint64_t key, void *ctx)
{
	return rma_op(ep_of(f), 0, iov, desc, count, dest, addr, key, ctx, ep_of(f)->tx_op_flags, 0);
}

static ssize_t r_writemsg(struct fid_ep *f, const struct fi_msg_rma *msg, uint64_t flags)
{
	if (!msg || msg->rma_iov_count != 1)
		return -FI_EINVAL;
	return rma_op(ep_of(f), 0, msg->msg_iov, msg->desc, msg->iov_count, msg->addr, msg->rma_iov[0].addr,
		      msg->rma_iov[0].key, msg->context, flags, msg->data);
}

static ssize_t r_inject(struct fid_ep *f, const void *buf, size_t len, fi_addr_t dest, uint64_t addr, uint64_t key)
{
	struct iovec iov = {(void *)buf, len};
	return rma_op(ep_of(f), 0, &iov, NULL, 1, dest, addr, key, NULL, FI_INJECT | IWD_NOCOMP, 0);
}

static ssize_t r_writedata(struct fid_ep *f, const void *buf, size_t len, void *desc, uint64_t data, fi_addr_t dest,
			   uint64_t addr, uint64_t key, void *ctx)
{
	struct iovec iov = {(void *)buf, len};
	return rma_op(ep_of(f), 0, &iov, &desc, 1, dest, addr, key, ctx, ep_of(f)->tx_op_flags | FI_REMOTE_CQ_DATA, data);
}

static ssize_t r_injectdata(struct fid_ep *f, const void *buf, size_t len, uint64_t data, fi_addr_t dest,
			    uint64_t addr, uint64_t key)
{
	struct iovec iov = {(void *)buf, len};
	return rma_op(ep_of(f), 0, &iov, NULL, 1, dest, addr, key, NULL, FI_INJECT | IWD_NOCOMP | FI_REMOTE_CQ_DATA, data);
}

struct fi_ops_rma iwd_rma_ops = {
	.size = sizeof(struct fi_ops_rma),
	.read = r_read,
	.readv = r_readv,
	.readmsg = r_readmsg,
	.write = r_write,
	.writev = r_writev,
	.writemsg = r_writemsg,
	.inject = r_inject,
	.writedata = r_writedata,
	.injectdata = r_injectdata,
};
