/*
 * iwd_ep_data.c — the data path every endpoint type shares: verbs status to
 * libfabric errno, the source address of a completion (FI_SOURCE), CQ and
 * counter reporting of transmit and receive completions (fi_cq(3),
 * fi_cntr(3)), posting sends with -FI_EAGAIN on a full queue, transmit
 * contexts and gathering, and per-endpoint progress that hands each verbs
 * completion to the type's protocol code through ep->ops.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "iwd.h"
#include "iwd_fastpath.h"

int iwd_wc_errno(const struct iwv_wc *wc)
{
	switch (wc->status) {
	case IWV_WC_SUCCESS:
		return 0;
	case IWV_WC_LOC_LEN_ERR:
		return FI_ETRUNC;
	case IWV_WC_WR_FLUSH_ERR:
		return FI_ECANCELED;
	case IWV_WC_LOC_PROT_ERR:
	case IWV_WC_LOC_ACCESS_ERR:
	case IWV_WC_REM_ACCESS_ERR:
		return FI_EACCES;
	case IWV_WC_RETRY_EXC_ERR:
	case IWV_WC_RESP_TIMEOUT_ERR:
		return FI_ETIMEDOUT;
	case IWV_WC_REM_INV_REQ_ERR:
		return FI_EINVAL;
	case IWV_WC_REM_ABORT_ERR:
		return FI_ECONNABORTED;
	case IWV_WC_FATAL_ERR:
		return FI_ENODEV;
	default:
		return FI_EIO;
	}
}

fi_addr_t iwd_ep_src(struct iwd_ep *ep, const struct iwv_wc *wc)
{
	if (!(wc->flags & IWV_WC_FLAG_SRC_VALID) || !ep->av)
		return FI_ADDR_NOTAVAIL;
	return iwd_av_reverse(ep->av, wc->src_ip, wc->src_port);
}

void iwd_ep_tx_done(struct iwd_ep *ep, void *context, uint64_t flags, uint64_t op_flags, size_t len, int cntr_kind)
{
	struct iwd_cntr *c = cntr_kind == 1 ? ep->write_cntr : cntr_kind == 2 ? ep->read_cntr : ep->send_cntr;
	iwd_cntr_inc(c);
	/* Only the fi_inject* calls go without a completion (fi_msg(3)); a
	 * send with the FI_INJECT flag completes like any other. */
	if (op_flags & IWD_NOCOMP)
		return;
	if (ep->tx_selective && !(op_flags & FI_COMPLETION))
		return;
	if (ep->tx_cq)
		iwd_cq_push_owned(ep->tx_cq, ep, context, flags, (flags & FI_READ) ? len : 0, NULL, 0, 0,
				  FI_ADDR_NOTAVAIL);
}

void iwd_ep_tx_err(struct iwd_ep *ep, void *context, uint64_t flags, int err, int prov_errno, int cntr_kind)
{
	struct iwd_cntr *c = cntr_kind == 1 ? ep->write_cntr : cntr_kind == 2 ? ep->read_cntr : ep->send_cntr;
	iwd_cntr_err(c);
	if (ep->tx_cq)
		iwd_cq_push_err_owned(ep->tx_cq, ep, context, flags, 0, NULL, 0, 0, 0, err, prov_errno, FI_ADDR_NOTAVAIL);
}

void iwd_ep_rx_done(struct iwd_ep *ep, void *context, uint64_t flags, size_t len, void *buf, uint64_t data,
		    uint64_t tag, fi_addr_t src)
{
	iwd_cntr_inc(ep->recv_cntr);
	if (ep->rx_selective && !(flags & (FI_COMPLETION | FI_MULTI_RECV)))
		return;
	if (ep->rx_cq)
		iwd_cq_push_owned(ep->rx_cq, ep, context, flags & ~(uint64_t)FI_COMPLETION, len, buf, data, tag, src);
}

void iwd_ep_rx_err(struct iwd_ep *ep, void *context, uint64_t flags, size_t len, uint64_t data, uint64_t tag,
		   size_t olen, int err, int prov_errno, fi_addr_t src)
{
	iwd_cntr_err(ep->recv_cntr);
	if (ep->rx_cq)
		iwd_cq_push_err_owned(ep->rx_cq, ep, context, flags & ~(uint64_t)FI_COMPLETION, len, NULL, data, tag, olen,
				      err, prov_errno, src);
}

int iwd_ep_av_dest(struct iwd_ep *ep, fi_addr_t dest, const struct iwv_av **av)
{
	*av = iwd_av_lookup(ep->av, dest);
	return *av ? 0 : -FI_EINVAL;
}

int iwd_ep_post_send(struct iwd_ep *ep, struct iwv_send_wr *wr)
{
	int ret;
	if (ep->sq_used >= ep->sq_depth)
		return -FI_EAGAIN;
	if (ep->ops->datagram)
		wr->remote_qkey = IWD_QKEY;
	if (ep->fprd)
		iwd_fprd_before_post(ep); /* nothing the rank sends overtakes it */
	ret = iwv_post_send(ep->qp, wr, 1);
	if (ret == 1) {
		ep->sq_used++;
		return 0;
	}
	if (ret == -ENOMEM)
		return -FI_EAGAIN;
	if (ret == -ENODEV)
		ep->dom->dead = 1;
	else
		IWD_WARN(FI_LOG_EP_DATA, "iwarpd: posting a send: %s\n", iwv_last_error(ep->dom->fab->s));
	return iwd_errno(ret < 0 ? ret : -EIO);
}

int iwd_ep_post_send_n(struct iwd_ep *ep, struct iwv_send_wr *wr, int n)
{
	int ret, i;
	if (ep->sq_used + (size_t)n > ep->sq_depth)
		return -FI_EAGAIN;
	if (ep->ops->datagram)
		for (i = 0; i < n; i++)
			wr[i].remote_qkey = IWD_QKEY;
	if (ep->fprd)
		iwd_fprd_before_post(ep); /* nothing the rank sends overtakes them */
	ret = iwv_post_send(ep->qp, wr, n);
	if (ret > 0) {
		ep->sq_used += (size_t)ret;
		return ret;
	}
	if (ret == -ENOMEM)
		return -FI_EAGAIN;
	if (ret == -ENODEV)
		ep->dom->dead = 1;
	else
		IWD_WARN(FI_LOG_EP_DATA, "iwarpd: posting sends: %s\n", iwv_last_error(ep->dom->fab->s));
	return iwd_errno(ret < 0 ? ret : -EIO);
}

struct iwd_tx *iwd_tx_new(struct iwd_ep *ep, void *context, uint64_t flags, uint64_t op_flags)
{
	struct iwd_tx *tx = iwd_freelist_get(&ep->tx_free);
	if (!tx)
		return NULL;
	tx->wr.kind = IWD_WR_TX_REQ;
	tx->ep = ep;
	tx->context = context;
	tx->flags = flags;
	tx->op_flags = op_flags;
	iwd_list_insert_tail(&ep->tx_active, &tx->link);
	return tx;
}

void iwd_tx_free(struct iwd_ep *ep, struct iwd_tx *tx)
{
	iwd_list_remove(&tx->link);
	if (tx->bounce)
		iwd_pool_put(&ep->txp, tx->bounce);
	if (tx->stage && tx->stage_tx)
		iwd_stage_free_tx(ep->dom, tx->stage, tx->stage_len);
	else if (tx->stage)
		iwd_stage_free(ep->dom, tx->stage, tx->stage_len);
	if (tx->tmp_mr)
		iwv_dereg_mr(tx->tmp_mr);
	if (tx->rc)
		iwd_rcache_put(ep->dom, tx->rc, tx->failed);
	free(tx->cas);
	tx->cas = NULL;
	iwd_freelist_put(&ep->tx_free, tx);
}

int iwd_tx_gather(struct iwd_ep *ep, struct iwd_tx *tx, const struct iovec *iov, void **desc, size_t count,
		  const void *hdr, size_t hdr_len, struct iwv_sge *sge, int *nsge, int force_copy)
{
	size_t total = iwd_iov_len(iov, count), i;
	int direct = !force_copy && desc && count;
	uint32_t lkeys[IWD_IOV_LIMIT];

	for (i = 0; direct && i < count; i++)
		if (!iwd_desc_lkey(desc[i], iov[i].iov_base, iov[i].iov_len, &lkeys[i]))
			direct = 0;
	if (!direct && hdr_len + total > ep->txp.slot_size)
		return -FI_EMSGSIZE;
	if (hdr_len || !direct) {
		tx->bounce = iwd_pool_get(&ep->txp);
		if (!tx->bounce)
			return -FI_EAGAIN;
	}
	*nsge = 0;
	if (direct) {
		if (hdr_len) {
			memcpy(tx->bounce, hdr, hdr_len);
			sge[0] = (struct iwv_sge){(uint64_t)(uintptr_t)tx->bounce, (uint32_t)hdr_len, iwd_pool_lkey(&ep->txp)};
			*nsge = 1;
		}
		for (i = 0; i < count; i++) {
			if (!iov[i].iov_len)
				continue;
			sge[*nsge] = (struct iwv_sge){(uint64_t)(uintptr_t)iov[i].iov_base, (uint32_t)iov[i].iov_len, lkeys[i]};
			(*nsge)++;
		}
		return 0;
	}
	if (hdr_len)
		memcpy(tx->bounce, hdr, hdr_len);
	iwd_iov_copy_out((char *)tx->bounce + hdr_len, iov, count, total);
	sge[0] = (struct iwv_sge){(uint64_t)(uintptr_t)tx->bounce, (uint32_t)(hdr_len + total), iwd_pool_lkey(&ep->txp)};
	*nsge = hdr_len + total ? 1 : 0;
	return 0;
}

/* poll_cq hands up to 8 x 32 verbs completions of ep to its type; 1 if it
 * polled the CQ empty. */
static int poll_cq(struct iwd_ep *ep)
{
	struct iwv_wc wc[32];
	int n, i, rounds;
	for (rounds = 0; rounds < 8; rounds++) {
		n = iwv_poll_cq(ep->vcq, 32, wc);
		if (n < 0) {
			if (n == -ENODEV && !ep->dom->dead) {
				IWD_WARN(FI_LOG_EP_DATA, "iwarpd: the daemon went away: %s\n", iwv_last_error(ep->dom->fab->s));
				ep->dom->dead = 1;
			}
			return 0;
		}
		for (i = 0; i < n; i++) {
			if (wc[i].opcode < IWV_WC_RECV)
				ep->sq_used--;
			ep->ops->wc(ep, &wc[i]);
		}
		if (n < 32)
			return 1;
	}
	return 0;
}

void iwd_ep_progress(struct iwd_ep *ep)
{
	if (!ep->vcq)
		return;
	/* The fast path reads the socket only after the CQ was polled empty,
	 * and polls it again after a hand-back (iwd_fastpath.h IWD_FP_REPOLL):
	 * the daemon's completions of what it read come first. */
	if (poll_cq(ep)) {
		if (ep->fp && iwd_fp_progress(ep) == IWD_FP_REPOLL && poll_cq(ep))
			iwd_fp_progress(ep);
		if (ep->fprd && iwd_fprd_progress(ep) == IWD_FP_REPOLL && poll_cq(ep))
			iwd_fprd_progress(ep);
	}
	if (ep->ops->retry)
		ep->ops->retry(ep);
}
