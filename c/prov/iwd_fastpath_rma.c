/*
 * iwd_fastpath_rma.c — an RDM endpoint's fi_write sent by the rank itself
 * on its RD QP's socket while it owns it (issue 22; docs/fastpath.md
 * "RDMA Writes the rank sends itself"; c/core fprd_rma_tx.h).
 *
 * iwd_rma.c tries this first for a Write on an RDM endpoint: when the rank
 * owns the socket, none of the endpoint's work requests is with the daemon
 * (sq_used 0: RD numbers both in one sequence per peer, and the rank's
 * datagram must not overtake one the daemon holds), the peer has a slot
 * with the right to send, the Write fits one datagram and carries no
 * remote CQ data (that is a second message, WDATA, which stays the
 * daemon's). Otherwise -FI_EAGAIN and the Write is posted as before.
 *
 * The Write completes as the daemon's Write-Record on RD does, when RD
 * acknowledged it (which is after the target placed it: RD acknowledges a
 * datagram once delivered): the rank reads the ACK itself, or, when the
 * daemon took the socket over meanwhile, it sees the socket handed back
 * (the daemon hands it back only once every datagram the rank left is
 * acknowledged). That is also FI_DELIVERY_COMPLETE's rule, so every
 * completion level fi_write may ask for is met. A QP that fails (a
 * datagram given up after the retries: the daemon fails the QP, and its
 * receives are flushed) fails the Writes still pending (FI_EIO).
 */
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>

#include "iwd_fastpath.h"
#include "iwd.h"

#include "fprd_rma_tx.h"

int iwd_fprd_rma_write(struct iwd_ep *ep, struct iwvi_fp_rd *rd, struct iwvi_fp_rd_rma *rma, const struct iovec *iov,
		       size_t count, size_t len, const struct iwv_av *av, uint64_t addr, uint64_t key, void *context,
		       uint64_t op_flags)
{
	struct sockaddr_storage ss;
	struct iwd_tx *tx;
	int slot, rc;
	if (!av || (op_flags & FI_REMOTE_CQ_DATA) || len > iwvi_fp_rd_write_max(rd) || key > UINT32_MAX)
		return -FI_EAGAIN;
	if (iwv_av_to_sockaddr(av, &ss) < 0 || ss.ss_family != AF_INET)
		return -FI_EAGAIN;
	slot = iwvi_fp_rd_slot(rd, (const struct sockaddr_in *)&ss);
	if (slot < 0)
		return -FI_EAGAIN;
	tx = iwd_tx_new(ep, context, FI_RMA | FI_WRITE, op_flags);
	if (!tx)
		return -FI_EAGAIN;
	tx->cntr_kind = 1;
	tx->len = len;
	rc = iwvi_fp_rd_write(rd, rma, slot, (uint32_t)key, addr, iov, count, len, (uint64_t)(uintptr_t)tx);
	if (rc) {
		iwd_tx_free(ep, tx);
		/* A TO + length that wraps is refused by the daemon's path
		 * too (a local length error): let it report it. */
		return -FI_EAGAIN;
	}
	return 0;
}

void iwd_fprd_rma_reap(struct iwd_ep *ep, struct iwvi_fp_rd *rd, struct iwvi_fp_rd_rma *rma)
{
	uint64_t done[IWVI_FP_RMA_MAX];
	int n = iwvi_fp_rd_rma_reap(rd, rma, done, IWVI_FP_RMA_MAX);
	for (int i = 0; i < n; i++) {
		struct iwd_tx *tx = (struct iwd_tx *)(uintptr_t)done[i];
		iwd_ep_tx_done(ep, tx->context, tx->flags, tx->op_flags, tx->len, tx->cntr_kind);
		iwd_tx_free(ep, tx);
	}
}

void iwd_fprd_rma_fail(struct iwd_ep *ep, struct iwvi_fp_rd_rma *rma)
{
	uint64_t done[IWVI_FP_RMA_MAX];
	int n = iwvi_fp_rd_rma_flush(rma, done, IWVI_FP_RMA_MAX);
	if (n > 0)
		IWD_WARN(FI_LOG_EP_DATA, "iwarpd: the RDM endpoint's QP failed with %d Writes of the rank's own unacknowledged\n",
			 n);
	for (int i = 0; i < n; i++) {
		struct iwd_tx *tx = (struct iwd_tx *)(uintptr_t)done[i];
		tx->failed = 1;
		iwd_ep_tx_err(ep, tx->context, tx->flags, FI_EIO, IWV_WC_WR_FLUSH_ERR, tx->cntr_kind);
		iwd_tx_free(ep, tx);
	}
}

int iwd_fprd_dom_pending(struct iwd_domain *dom)
{
	struct iwd_list *it;
	iwd_list_foreach(&dom->eps, it)
	{
		if (iwd_fprd_pending(iwd_container_of(it, struct iwd_ep, link)))
			return 1;
	}
	return 0;
}
