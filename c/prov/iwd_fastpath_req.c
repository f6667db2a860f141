/*
 * iwd_fastpath_req.c — an RDM endpoint's fi_read and native atomics
 * (FetchAdd, CmpSwap: iwd_atomic.c "native") sent by the rank itself on
 * its RD QP's socket while it owns it (issue 22; docs/fastpath.md "Reads
 * and atomics the rank sends itself"; c/core fprd_req.h).
 *
 * iwd_rma.c and iwd_atomic.c try this first, under the conditions of the
 * rank's Writes (iwd_fastpath_rma.c): the rank owns the socket, none of
 * the endpoint's work requests is with the daemon (sq_used 0), the peer
 * has a slot with the right to send, a Read's response fits one datagram
 * and its sink is one buffer. Otherwise -FI_EAGAIN and the request is
 * posted as before.
 *
 * A request completes when its response is placed: by the rank (its
 * poll took the response), or, when the daemon took the socket over
 * meanwhile, when the socket comes back (the daemon wrote the response
 * into the page: iwvi_fp_rd_req_reap copies it into the buffer). A
 * request the target refused completes with the error of its error
 * message (FI_EACCES for an access error), a request whose QP failed
 * with FI_EIO: never a false success.
 */
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>

#include "iwd_fastpath.h"
#include "iwd.h"

#include "fprd_req.h"

/* slot_of: the peer's slot, or -1. */
static int slot_of(struct iwvi_fp_rd *rd, const struct iwv_av *av)
{
	struct sockaddr_storage ss;
	if (!av || iwv_av_to_sockaddr(av, &ss) < 0 || ss.ss_family != AF_INET)
		return -1;
	return iwvi_fp_rd_slot(rd, (const struct sockaddr_in *)&ss);
}

int iwd_fprd_req_read(struct iwd_ep *ep, struct iwvi_fp_rd *rd, void *buf, size_t len, const struct iwv_av *av,
		      uint64_t addr, uint64_t key, void *context, uint64_t op_flags)
{
	struct iwd_tx *tx;
	int slot;
	if (!rd->reqs || len == 0 || len > iwvi_fp_rd_read_max(rd) || key > UINT32_MAX)
		return -FI_EAGAIN;
	slot = slot_of(rd, av);
	if (slot < 0)
		return -FI_EAGAIN;
	tx = iwd_tx_new(ep, context, FI_RMA | FI_READ, op_flags);
	if (!tx)
		return -FI_EAGAIN;
	tx->cntr_kind = 2;
	tx->len = len;
	if (iwvi_fp_rd_read(rd, slot, (uint32_t)key, addr, buf, len, (uint64_t)(uintptr_t)tx)) {
		iwd_tx_free(ep, tx);
		return -FI_EAGAIN; /* a TO that wraps: the daemon's path reports it */
	}
	return 0;
}

int iwd_fprd_req_atomic(struct iwd_ep *ep, struct iwvi_fp_rd *rd, int op, uint64_t operand, uint64_t compare,
			void *result, const struct iwv_av *av, uint64_t addr, uint64_t key, void *context,
			uint64_t flags, uint64_t op_flags, int cntr_kind)
{
	struct iwd_tx *tx;
	int slot;
	if (!rd->reqs || key > UINT32_MAX || addr % 8 != 0)
		return -FI_EAGAIN; /* misaligned: the daemon's path reports it */
	slot = slot_of(rd, av);
	if (slot < 0)
		return -FI_EAGAIN;
	tx = iwd_tx_new(ep, context, flags, op_flags);
	if (!tx)
		return -FI_EAGAIN;
	tx->cntr_kind = cntr_kind;
	tx->len = sizeof(uint64_t);
	if (iwvi_fp_rd_atomic(rd, slot, op, (uint32_t)key, addr, operand, compare, result, (uint64_t)(uintptr_t)tx)) {
		iwd_tx_free(ep, tx);
		return -FI_EAGAIN;
	}
	return 0;
}

static void finish(struct iwd_ep *ep, const struct iwvi_fp_rd_req_done *d, int n)
{
	for (int i = 0; i < n; i++) {
		struct iwd_tx *tx = (struct iwd_tx *)(uintptr_t)d[i].cookie;
		if (d[i].status == IWV_WC_SUCCESS) {
			iwd_ep_tx_done(ep, tx->context, tx->flags, tx->op_flags, tx->len, tx->cntr_kind);
		} else {
			struct iwv_wc wc;
			memset(&wc, 0, sizeof(wc));
			wc.status = d[i].status;
			tx->failed = 1;
			iwd_ep_tx_err(ep, tx->context, tx->flags,
				      d[i].status == IWV_WC_WR_FLUSH_ERR ? FI_EIO : iwd_wc_errno(&wc), d[i].status,
				      tx->cntr_kind);
		}
		iwd_tx_free(ep, tx);
	}
}

void iwd_fprd_req_reap(struct iwd_ep *ep, struct iwvi_fp_rd *rd)
{
	struct iwvi_fp_rd_req_done d[W_FP_RD_REQS];
	finish(ep, d, iwvi_fp_rd_req_reap(rd, d, W_FP_RD_REQS));
}

void iwd_fprd_req_fail(struct iwd_ep *ep, struct iwvi_fp_rd *rd)
{
	struct iwvi_fp_rd_req_done d[W_FP_RD_REQS];
	int n = iwvi_fp_rd_req_flush(rd, d, W_FP_RD_REQS);
	if (n > 0)
		IWD_WARN(FI_LOG_EP_DATA, "iwarpd: the RDM endpoint's QP failed with %d Reads/atomics of the rank's own outstanding\n",
			 n);
	finish(ep, d, n);
}
