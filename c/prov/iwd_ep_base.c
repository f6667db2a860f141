/*
 * iwd_ep_base.c — the endpoint object every type embeds (fi_endpoint(3)):
 * creation of the verbs CQ and QP, binding to CQs, counters, AV and EQ,
 * enable, close, names, options, cancel. What a type does differently it
 * does through ep->ops (struct iwd_ep_ops, iwd.h); this file never asks
 * which type it has. Completion reporting, send helpers and per-endpoint
 * progress are in iwd_ep_data.c; operations not offered in iwd_util_noops.c.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "iwd.h"
#include "iwd_fastpath.h"

int iwd_ep_create_qp(struct iwd_ep *ep, enum iwv_qp_type qpt, size_t rx_depth)
{
	return iwd_ep_create_qp_srq(ep, qpt, rx_depth, NULL);
}

int iwd_ep_create_qp_srq(struct iwd_ep *ep, enum iwv_qp_type qpt, size_t rx_depth, struct iwv_srq *srq)
{
	struct iwd_domain *dom = ep->dom;
	struct iwv_qp_init_attr qa;
	struct iwv_qp_cap cap;
	int ret;
	size_t sq = ep->info->tx_attr->size ? ep->info->tx_attr->size : IWD_TX_SIZE;

	sq += IWD_TX_EXTRA;
	ret = iwv_create_cq(dom->fab->s, (int)(sq + rx_depth), dom->chan, &ep->vcq);
	if (ret) {
		IWD_WARN(FI_LOG_EP_CTRL, "iwarpd: creating a CQ of %zu entries: %s\n", sq + rx_depth,
			 iwv_last_error(dom->fab->s));
		return iwd_errno(ret);
	}
	memset(&qa, 0, sizeof(qa));
	qa.qp_type = qpt;
	qa.send_cq = ep->vcq;
	qa.recv_cq = ep->vcq;
	qa.cap.max_send_wr = (uint32_t)sq;
	qa.cap.max_recv_wr = (uint32_t)rx_depth;
	qa.cap.max_send_sge = IWD_IOV_LIMIT + 1;
	qa.cap.max_recv_sge = IWD_IOV_LIMIT;
	qa.cap.max_inline = 0;
	qa.sq_sig_all = 1;
	qa.srq = srq; /* MSG bound to a shared receive context (iwd_srx.c) */
	qa.port = ep->want_port;
	if (qpt != IWV_QPT_RC) {
		qa.qkey = IWD_QKEY;
		/* FI_IWARPD_DGRAM_CRC: CRC use on a datagram QP is agreed out of
		 * band (datagram-iwarp.md §4); the trailer stays, 0 when off. */
		qa.no_crc = !iwd_env.dgram_crc;
	}
	/* MSG: fi_senddata is a Send with Immediate that takes one receive at
	 * the peer, which is also a provider MSG endpoint (docs/libfabric.md). */
	qa.merge_send_imm = qpt == IWV_QPT_RC;
	/* MSG (and RxM's MSG endpoints): FI_RM_ENABLED (fi_domain(3)) promises
	 * protection against receiver-not-ready; iWARP has no RNR retry, so
	 * the daemon holds a message that arrives before its receive
	 * (docs/libfabric.md "Receiver not ready"). */
	qa.hold_recv = qpt == IWV_QPT_RC;
	/* RDM: fi_write is a Write-Record (iwd_rdm_rma_write) and has no
	 * target completion (fi_rma(3): FI_RMA_EVENT is not offered, CQ data
	 * travels as a WDATA message): the target's daemon takes no bounce
	 * receive for it, so a passive target that makes no libfabric call
	 * keeps taking writes after its FI_IWARPD_RX_BUFS receives
	 * (docs/libfabric.md "Progress"). */
	qa.quiet_records = qpt == IWV_QPT_RD;
	ret = iwv_create_qp(dom->pd, &qa, &ep->qp);
	if (ret) {
		IWD_WARN(FI_LOG_EP_CTRL, "iwarpd: creating a %s QP: %s\n",
			 qpt == IWV_QPT_RD ? "RD" : qpt == IWV_QPT_UD ? "UD" : "RC", iwv_last_error(dom->fab->s));
		return iwd_errno(ret);
	}
	iwv_qp_cap(ep->qp, &cap);
	ep->sq_depth = cap.max_send_wr;
	ep->rq_depth = cap.max_recv_wr;
	ret = iwv_modify_qp(ep->qp, IWV_QPS_INIT);
	if (!ret && qpt != IWV_QPT_RC) {
		ret = iwv_modify_qp(ep->qp, IWV_QPS_RTR);
		if (!ret)
			ret = iwv_modify_qp(ep->qp, IWV_QPS_RTS);
	}
	if (ret) {
		IWD_WARN(FI_LOG_EP_CTRL, "iwarpd: moving the QP to RTS: %s\n", iwv_last_error(dom->fab->s));
		return iwd_errno(ret);
	}
	if (qpt != IWV_QPT_RC) {
		struct iwv_av av;
		if (!iwv_qp_av(ep->qp, &av)) {
			ep->name.sin_family = AF_INET;
			ep->name.sin_port = htons(av.port);
			memcpy(&ep->name.sin_addr, &av.ip[12], 4);
		}
	}
	return 0;
}

static int ep_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	struct iwd_ep *ep = iwd_container_of(fid, struct iwd_ep, ep_fid.fid);
	int ret = 0;
	if (!bfid)
		return -FI_EINVAL;
	if (bfid->fclass == FI_CLASS_EQ) {
		/* Under the fabric lock alone: it is taken before the domain
		 * lock, never inside it (iwd.h). */
		struct iwd_eq *eq = iwd_container_of(bfid, struct iwd_eq, eq_fid.fid);
		pthread_mutex_lock(&ep->dom->fab->lock);
		if (ep->eq)
			ep->eq->refs--;
		ep->eq = eq;
		eq->refs++;
		pthread_mutex_unlock(&ep->dom->fab->lock);
		return 0;
	}
	iwd_lock(ep->dom);
	if (ep->enabled) {
		iwd_unlock(ep->dom);
		return -FI_EOPBADSTATE;
	}
	switch (bfid->fclass) {
	case FI_CLASS_CQ: {
		struct iwd_cq *cq = iwd_container_of(bfid, struct iwd_cq, cq_fid.fid);
		if (cq->dom != ep->dom) {
			ret = -FI_EINVAL;
			break;
		}
		if (flags & ~(uint64_t)(FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION)) {
			ret = -FI_EINVAL;
			break;
		}
		if (flags & FI_TRANSMIT) {
			if (ep->tx_cq)
				ep->tx_cq->refs--;
			ep->tx_cq = cq;
			cq->refs++;
			ep->tx_selective = (flags & FI_SELECTIVE_COMPLETION) != 0;
		}
		if (flags & FI_RECV) {
			if (ep->rx_cq)
				ep->rx_cq->refs--;
			ep->rx_cq = cq;
			cq->refs++;
			ep->rx_selective = (flags & FI_SELECTIVE_COMPLETION) != 0;
		}
		break;
	}
	case FI_CLASS_CNTR: {
		struct iwd_cntr *c = iwd_container_of(bfid, struct iwd_cntr, cntr_fid.fid);
		if (flags & ~(uint64_t)(FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)) {
			ret = -FI_EINVAL;
			break;
		}
		if (flags & (FI_REMOTE_READ | FI_REMOTE_WRITE)) {
			ret = -FI_ENOSYS; /* FI_RMA_EVENT is not offered */
			break;
		}
#define BIND_CNTR(f, field)                     \
	if (flags & (f)) {                      \
		if (ep->field)                  \
			ep->field->refs--;      \
		ep->field = c;                  \
		c->refs++;                      \
	}
		BIND_CNTR(FI_SEND, send_cntr)
		BIND_CNTR(FI_RECV, recv_cntr)
		BIND_CNTR(FI_READ, read_cntr)
		BIND_CNTR(FI_WRITE, write_cntr)
#undef BIND_CNTR
		break;
	}
	case FI_CLASS_AV: {
		struct iwd_av *av = iwd_container_of(bfid, struct iwd_av, av_fid.fid);
		if (!ep->ops->datagram || ep->av) {
			ret = -FI_EINVAL;
			break;
		}
		ep->av = av;
		av->refs++;
		break;
	}
	default:
		ret = -FI_EINVAL;
	}
	iwd_unlock(ep->dom);
	return ret;
}

static int ep_enable(struct iwd_ep *ep)
{
	int ret;
	if (ep->enabled)
		return 0;
	if (ep->ops->datagram && !ep->av)
		return -FI_ENOAV;
	if (!ep->tx_cq && !ep->rx_cq && !ep->send_cntr && !ep->recv_cntr)
		return -FI_ENOCQ;
	ret = ep->ops->enable(ep);
	if (!ret)
		ep->enabled = 1;
	return ret;
}

static int ep_control(struct fid *fid, int command, void *arg)
{
	struct iwd_ep *ep = iwd_container_of(fid, struct iwd_ep, ep_fid.fid);
	int ret;
	switch (command) {
	case FI_ENABLE:
		iwd_lock(ep->dom);
		ret = ep_enable(ep);
		iwd_unlock(ep->dom);
		return ret;
	case FI_GETOPSFLAG: {
		uint64_t *f = arg;
		if (!f)
			return -FI_EINVAL;
		if (*f & FI_TRANSMIT)
			*f = ep->tx_op_flags;
		else if (*f & FI_RECV)
			*f = ep->rx_op_flags;
		else
			return -FI_EINVAL;
		return 0;
	}
	case FI_SETOPSFLAG: {
		uint64_t *f = arg;
		if (!f)
			return -FI_EINVAL;
		if (*f & FI_TRANSMIT)
			ep->tx_op_flags = *f & ~(uint64_t)FI_TRANSMIT;
		else if (*f & FI_RECV)
			ep->rx_op_flags = *f & ~(uint64_t)FI_RECV;
		else
			return -FI_EINVAL;
		return 0;
	}
	default:
		return -FI_ENOSYS;
	}
}

/* Before an RD or UD QP goes away: let our sends complete (bounded, ~1 s),
 * as SO_LINGER does. RD: a message still unacknowledged may need a
 * retransmission the destroyed QP could not send; the acknowledgements we
 * owe our peers need no wait: the daemon sends them when it destroys the
 * QP (verbsd rdCloseAcks). RDM's fast path: a Send the rank made itself
 * completed when the kernel had it; until its peer acknowledges it, the
 * daemon may have to resend it (iwd_fprd_unacked). UD (DGRAM): fi_send returns once the work
 * request is posted, before the daemon hands the datagram to the kernel,
 * and destroying the QP discards what it has not sent; a UDP socket's
 * sendto has the datagram in the kernel when it returns, and ofi_rxd
 * relies on that: its acknowledgement of the peer's last message, sent
 * just before fi_pingpong closes, was lost with the QP and left the peer
 * retransmitting to a closed endpoint (issue 10). A UD send completes
 * when the kernel has it, so this wait is one engine pass. */
static void ep_linger(struct iwd_ep *ep)
{
	const struct timespec ms = {0, 1000 * 1000};
	int i, idle = 0;
	for (i = 0; i < 1000 && !idle; i++) {
		iwd_lock(ep->dom);
		iwd_domain_progress(ep->dom);
		idle = (ep->sq_used == 0 && !iwd_fprd_unacked(ep) && !iwd_fprd_pending(ep)) || ep->dom->dead;
		iwd_unlock(ep->dom);
		if (!idle)
			nanosleep(&ms, NULL);
	}
	if (idle && i > 1) {
		char fp[256];
		iwd_lock(ep->dom);
		iwd_fprd_describe(ep, fp, sizeof(fp));
		IWD_INFO(FI_LOG_EP_CTRL, "iwarpd: fi_close: lingered %d waits of 1 ms until its sends were done; RDM fast path: %s\n",
			 i - 1, fp);
		iwd_unlock(ep->dom);
	}
	if (!idle) {
		/* What the peers may never get: say so (FI_LOG_LEVEL=warn). */
		char fp[256];
		iwd_lock(ep->dom);
		iwd_fprd_describe(ep, fp, sizeof(fp));
		IWD_WARN(FI_LOG_EP_CTRL,
			 "iwarpd: fi_close: the endpoint's linger ran out (%d waits of 1 ms) with %u work requests still "
			 "with the daemon; RDM fast path: %s; the QP is destroyed now and what is unacknowledged is "
			 "not resent\n",
			 i, (unsigned)ep->sq_used, fp);
		iwd_unlock(ep->dom);
	}
}

static int ep_close(struct fid *fid)
{
	struct iwd_ep *ep = iwd_container_of(fid, struct iwd_ep, ep_fid.fid);
	struct iwd_domain *dom = ep->dom;

	if (ep->ops->datagram && ep->qp && !dom->dead)
		ep_linger(ep);
	iwd_lock(dom);
	iwd_list_remove(&ep->link);
	iwd_unlock(dom);
	if (ep->ops->disconnect)
		ep->ops->disconnect(ep);
	if (ep->qp)
		iwv_destroy_qp(ep->qp);
	if (ep->vcq)
		iwv_destroy_cq(ep->vcq);
	iwd_lock(dom);
	iwd_fp_detach(ep); /* iwd_fastpath.c: after the QP, as fpown.h asks */
	if (ep->at_posted[0] || ep->at_posted[1] || ep->at_posted[2])
		IWD_INFO(FI_LOG_EP_DATA, "iwarpd: atomics posted: %llu fi_atomic, %llu fi_fetch_atomic, %llu fi_compare_atomic\n",
			 (unsigned long long)ep->at_posted[0], (unsigned long long)ep->at_posted[1],
			 (unsigned long long)ep->at_posted[2]);
	iwd_fprd_detach(ep);
	ep->ops->fini(ep);
	{
		struct iwd_list *it, *tmp;
		iwd_list_foreach_safe(&ep->tx_active, it, tmp)
		iwd_tx_free(ep, iwd_container_of(it, struct iwd_tx, link));
	}
	iwd_freelist_fini(&ep->tx_free);
	iwd_pool_fini(&ep->txp);
	iwd_pool_fini(&ep->rxp);
	/* fi_close(3): the endpoint's operations are discarded, completions
	 * not yet read included (their contexts may name this endpoint). */
	iwd_cq_purge(ep->tx_cq, ep);
	iwd_cq_purge(ep->rx_cq, ep);
	if (ep->tx_cq)
		ep->tx_cq->refs--;
	if (ep->rx_cq)
		ep->rx_cq->refs--;
	if (ep->av)
		ep->av->refs--;
	if (ep->send_cntr)
		ep->send_cntr->refs--;
	if (ep->recv_cntr)
		ep->recv_cntr->refs--;
	if (ep->read_cntr)
		ep->read_cntr->refs--;
	if (ep->write_cntr)
		ep->write_cntr->refs--;
	dom->refs--;
	iwd_unlock(dom);
	if (ep->eq) {
		pthread_mutex_lock(&dom->fab->lock);
		iwd_eq_purge(ep->eq, &ep->ep_fid.fid);
		ep->eq->refs--;
		pthread_mutex_unlock(&dom->fab->lock);
	}
	fi_freeinfo(ep->info);
	free(ep);
	return 0;
}

static ssize_t ep_cancel(fid_t fid, void *context)
{
	struct iwd_ep *ep = iwd_container_of(fid, struct iwd_ep, ep_fid.fid);
	ssize_t ret;
	iwd_lock(ep->dom);
	ret = ep->ops->cancel(ep, context);
	iwd_unlock(ep->dom);
	return ret;
}

static int ep_getopt(fid_t fid, int level, int optname, void *optval, size_t *optlen)
{
	struct iwd_ep *ep = iwd_container_of(fid, struct iwd_ep, ep_fid.fid);
	if (level != FI_OPT_ENDPOINT || !optval || !optlen)
		return -FI_ENOPROTOOPT;
	switch (optname) {
	case FI_OPT_MIN_MULTI_RECV:
		if (*optlen < sizeof(size_t))
			return -FI_ETOOSMALL;
		*(size_t *)optval = ep->min_multi_recv;
		*optlen = sizeof(size_t);
		return 0;
	case FI_OPT_CM_DATA_SIZE:
		if (*optlen < sizeof(size_t))
			return -FI_ETOOSMALL;
		*(size_t *)optval = IWD_CM_DATA_SIZE;
		*optlen = sizeof(size_t);
		return 0;
	default:
		return -FI_ENOPROTOOPT;
	}
}

static int ep_setopt(fid_t fid, int level, int optname, const void *optval, size_t optlen)
{
	struct iwd_ep *ep = iwd_container_of(fid, struct iwd_ep, ep_fid.fid);
	if (level != FI_OPT_ENDPOINT || !optval)
		return -FI_ENOPROTOOPT;
	switch (optname) {
	case FI_OPT_MIN_MULTI_RECV:
		if (optlen != sizeof(size_t))
			return -FI_EINVAL;
		ep->min_multi_recv = *(const size_t *)optval;
		return 0;
	default:
		return -FI_ENOPROTOOPT;
	}
}

/* fi_rx_size_left(3): DGRAM and MSG post each fi_recv as one receive of
 * the QP, so what is left is the QP's receive queue (rx_attr->size deep)
 * less the receives outstanding; a type that queues receives in the
 * provider (RDM: tag matching) says what it has (ops->rx_size_left). */
static ssize_t ep_rx_size_left(struct fid_ep *fid)
{
	struct iwd_ep *ep = iwd_container_of(fid, struct iwd_ep, ep_fid);
	ssize_t left;
	if (!ep->enabled)
		return -FI_EOPBADSTATE;
	if (ep->ops->rx_size_left)
		return ep->ops->rx_size_left(ep);
	iwd_lock(ep->dom);
	left = (ssize_t)(ep->rq_depth > ep->rq_used ? ep->rq_depth - ep->rq_used : 0);
	iwd_unlock(ep->dom);
	return left;
}

static ssize_t ep_tx_size_left(struct fid_ep *fid)
{
	struct iwd_ep *ep = iwd_container_of(fid, struct iwd_ep, ep_fid);
	if (!ep->enabled)
		return -FI_EOPBADSTATE;
	return (ssize_t)(ep->sq_depth > ep->sq_used ? ep->sq_depth - ep->sq_used : 0);
}

static struct fi_ops_ep ep_ops = {
	.size = sizeof(struct fi_ops_ep),
	.cancel = ep_cancel,
	.getopt = ep_getopt,
	.setopt = ep_setopt,
	.tx_ctx = iwd_no_tx_ctx,
	.rx_ctx = iwd_no_rx_ctx,
	.rx_size_left = ep_rx_size_left,
	.tx_size_left = ep_tx_size_left,
};

static struct fi_ops ep_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = ep_close,
	.bind = ep_bind,
	.control = ep_control,
	.ops_open = iwd_no_ops_open,
};

int iwd_ep_getname(fid_t fid, void *addr, size_t *addrlen)
{
	struct iwd_ep *ep = iwd_container_of(fid, struct iwd_ep, ep_fid.fid);
	return iwd_give_sockaddr(&ep->name, addr, addrlen);
}

/* The connectionless types' fi_ops_cm: a name and nothing else (ask for a
 * port with src_addr in fi_getinfo instead of fi_setname). */
static struct fi_ops_cm ep_cm_ops = {
	.size = sizeof(struct fi_ops_cm),
	.setname = iwd_no_setname,
	.getname = iwd_ep_getname,
	.getpeer = iwd_no_getpeer,
	.connect = iwd_no_connect,
	.listen = iwd_no_listen,
	.accept = iwd_no_accept,
	.reject = iwd_no_reject,
	.shutdown = iwd_no_shutdown,
	.join = iwd_no_join,
};

size_t iwd_ep_rx_depth(const struct fi_info *info)
{
	return info->rx_attr && info->rx_attr->size ? info->rx_attr->size : IWD_RX_SIZE;
}

void iwd_ep_init(struct iwd_ep *ep, struct iwd_domain *dom, struct fi_info *info, void *context,
		 const struct iwd_ep_ops *ops)
{
	ep->ops = ops;
	ep->dom = dom;
	ep->caps = info->caps ? info->caps : ~0ull;
	ep->tx_op_flags = info->tx_attr ? info->tx_attr->op_flags : 0;
	ep->rx_op_flags = info->rx_attr ? info->rx_attr->op_flags : 0;
	ep->min_multi_recv = 64;
	iwd_list_init(&ep->link);
	iwd_list_init(&ep->tx_active);
	iwd_freelist_init(&ep->tx_free, sizeof(struct iwd_tx));
	/* A datagram QP binds the port src_addr names. An RC QP has no port
	 * of its own: its connection's ports are the listener's (accepting:
	 * a connection request's info carries the listener's address) or the
	 * kernel's (connecting), fi_cm(3); issue 19. */
	if (info->ep_attr->type != FI_EP_MSG && info->src_addr && info->src_addrlen >= sizeof(struct sockaddr_in))
		ep->want_port = ntohs(((struct sockaddr_in *)info->src_addr)->sin_port);

	ep->ep_fid.fid.fclass = FI_CLASS_EP;
	ep->ep_fid.fid.context = context;
	ep->ep_fid.fid.ops = &ep_fi_ops;
	ep->ep_fid.ops = &ep_ops;
	ep->ep_fid.cm = &ep_cm_ops;
	ep->ep_fid.tagged = &iwd_no_tagged_ops;
	ep->ep_fid.rma = &iwd_no_rma_ops;
	ep->ep_fid.atomic = &iwd_no_atomic_ops;
	ep->info = fi_dupinfo(info);
}

int iwd_ep_opened(struct iwd_ep *ep, int ret, struct fid_ep **out)
{
	struct iwd_domain *dom = ep->dom;
	if (!ret && !ep->info)
		ret = -FI_ENOMEM;
	if (ret) {
		if (ep->qp)
			iwv_destroy_qp(ep->qp);
		if (ep->vcq)
			iwv_destroy_cq(ep->vcq);
		fi_freeinfo(ep->info);
		free(ep); /* the type's object: the base is its first member */
		return ret;
	}
	iwd_lock(dom);
	iwd_list_insert_tail(&dom->eps, &ep->link);
	dom->refs++;
	iwd_unlock(dom);
	*out = &ep->ep_fid;
	return 0;
}

size_t iwd_ep_tx_pool_count(const struct iwd_ep *ep)
{
	size_t tx = ep->info->tx_attr->size ? ep->info->tx_attr->size : IWD_TX_SIZE;
	return iwd_pool_count(tx + IWD_TX_EXTRA, ep->sq_depth);
}
