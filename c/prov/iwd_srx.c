/*
 * iwd_srx.c — the shared receive context of FI_EP_MSG endpoints
 * (fi_endpoint(3) fi_srx_context; fi_domain(3) max_ep_srx_ctx): one
 * receive queue for many connections, on the daemon's shared receive
 * queue (create-srq; RC QPs created on it, iwd_ep_msg.c). fi_recv,
 * fi_recvv and fi_recvmsg post to the srx; a message arriving on any
 * endpoint bound to it takes the oldest receive and completes on that
 * endpoint's receive CQ and counter (as the verbs and tcp providers
 * report srx completions).
 *
 * Each receive posts one work request to the SRQ, always into a bounce
 * slot of the srx (a staging chunk when larger than a slot) copied out on
 * completion, never into the application's buffer: fi_cancel(3) must let
 * the application reuse its buffer at once, and a receive handed to the
 * daemon's ring cannot be taken back. A cancelled receive's slot stays in
 * the ring; the message it takes goes to the oldest receive posted since,
 * or waits in the srx (unexp) for the next fi_recv. So no message is lost
 * and none is written to a buffer the application took back.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "iwd_srx.h"

struct srx_recv;

/* One work request in the SRQ (IWD_WR_RX_REQ), then, once a message
 * filled it, the message until a receive takes it. */
struct srx_slot {
	struct iwd_wr wr;
	struct iwd_list link;   /* srx->slots while posted, srx->unexp after */
	struct srx_recv *app;   /* the receive it was posted for; NULL: cancelled */
	void *buf;
	size_t cap;
	int stage;              /* buf is a staging chunk, else a pool slot */
	/* after completion */
	struct iwd_ep *ep;      /* the endpoint it arrived on */
	size_t n;
	uint64_t imm;
	int has_imm, rdma_imm;
};

/* An application receive. */
struct srx_recv {
	struct iwd_list link;   /* srx->recvs */
	void *context;
	uint64_t flags;
	struct iovec iov[IWD_IOV_LIMIT];
	size_t iov_count, len;
	struct srx_slot *slot;  /* its work request, or NULL (taken by another message) */
	int null_buf;           /* an iovec with a NULL base and a length (srx_check_iov) */
};

struct iwd_srx {
	struct fid_ep ep_fid;
	struct iwd_domain *dom;
	struct iwv_srq *srq;
	struct iwd_pool pool;
	size_t depth, posted;   /* work requests the SRQ may hold, holds */
	struct iwd_list slots, recvs, unexp;
	struct iwd_ep **eps;    /* bound endpoints */
	size_t neps;
	struct iwd_cq *cq;      /* fi_ep_bind(srx, cq): where fi_cancel reports */
	uint64_t op_flags;
};

static struct fi_ops srx_fi_ops;

struct iwd_srx *iwd_srx_of(struct fid *fid)
{
	if (!fid || fid->fclass != FI_CLASS_SRX_CTX || fid->ops != &srx_fi_ops)
		return NULL;
	return iwd_container_of(fid, struct iwd_srx, ep_fid.fid);
}

struct iwv_srq *iwd_srx_srq(struct iwd_srx *srx) { return srx->srq; }

static void slot_free(struct iwd_srx *srx, struct srx_slot *s)
{
	if (s->stage)
		iwd_stage_free(srx->dom, s->buf, s->cap);
	else if (s->buf)
		iwd_pool_put(&srx->pool, s->buf);
	free(s);
}

static void recv_free(struct srx_recv *r)
{
	iwd_list_remove(&r->link);
	if (r->slot)
		r->slot->app = NULL;
	free(r);
}

void iwd_srx_attach(struct iwd_srx *srx, struct iwd_ep *ep)
{
	struct iwd_ep **n = realloc(srx->eps, (srx->neps + 1) * sizeof(*n));
	if (!n)
		return; /* only fi_cancel's fallback CQ and the -FI_EBUSY count miss it */
	srx->eps = n;
	srx->eps[srx->neps++] = ep;
}

void iwd_srx_detach(struct iwd_srx *srx, struct iwd_ep *ep)
{
	struct iwd_list *it, *tmp;
	size_t i;
	for (i = 0; i < srx->neps; i++)
		if (srx->eps[i] == ep) {
			srx->eps[i] = srx->eps[--srx->neps];
			break;
		}
	/* Messages of the closed connection nobody received: dropped, as a
	 * QP's flush drops unreceived data. */
	iwd_list_foreach_safe(&srx->unexp, it, tmp)
	{
		struct srx_slot *s = iwd_container_of(it, struct srx_slot, link);
		if (s->ep == ep) {
			iwd_list_remove(it);
			slot_free(srx, s);
		}
	}
}

/* Completes r with the message in s (copied out) on the endpoint it
 * arrived on; frees both. */
static void deliver(struct iwd_srx *srx, struct srx_recv *r, struct srx_slot *s)
{
	uint64_t f = FI_RECV | FI_MSG;
	size_t c = s->n < r->len ? s->n : r->len;
	if (!r->null_buf)
		iwd_iov_copy_in(r->iov, r->iov_count, 0, s->buf, c);
	if (r->null_buf && s->n) {
		iwd_ep_rx_err(s->ep, r->context, f, 0, 0, 0, s->n, FI_EFAULT, 0, FI_ADDR_NOTAVAIL);
	} else if (s->rdma_imm) {
		iwd_ep_rx_done(s->ep, r->context, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA | FI_COMPLETION, 0, NULL,
			       s->imm, 0, FI_ADDR_NOTAVAIL);
	} else if (s->n > r->len) {
		iwd_ep_rx_err(s->ep, r->context, f, r->len, 0, 0, s->n - r->len, FI_ETRUNC, 0, FI_ADDR_NOTAVAIL);
	} else {
		if (s->has_imm)
			f |= FI_REMOTE_CQ_DATA;
		iwd_ep_rx_done(s->ep, r->context, f | (r->flags & FI_COMPLETION), s->n,
			       r->iov_count ? r->iov[0].iov_base : NULL, s->imm, 0, FI_ADDR_NOTAVAIL);
	}
	recv_free(r);
	slot_free(srx, s);
}

void iwd_srx_wc(struct iwd_srx *srx, struct iwd_ep *ep, const struct iwv_wc *wc)
{
	struct srx_slot *s = (struct srx_slot *)(uintptr_t)wc->wr_id;
	struct srx_recv *r;
	int err = iwd_wc_errno(wc);

	iwd_list_remove(&s->link);
	srx->posted--;
	s->ep = ep;
	if (err) {
		if (s->app) {
			iwd_ep_rx_err(ep, s->app->context, FI_RECV | FI_MSG, 0, 0, 0, 0, err, wc->status,
				      FI_ADDR_NOTAVAIL);
			recv_free(s->app);
		}
		slot_free(srx, s);
		return;
	}
	s->n = wc->byte_len;
	s->has_imm = (wc->flags & IWV_WC_FLAG_IMM) != 0;
	s->imm = s->has_imm ? wc->imm : 0;
	s->rdma_imm = s->has_imm && wc->opcode == IWV_WC_RECV_RDMA_WITH_IMM;
	r = s->app;
	if (!r && !iwd_list_empty(&srx->recvs))
		r = iwd_container_of(srx->recvs.next, struct srx_recv, link);
	if (!r) {
		iwd_list_insert_tail(&srx->unexp, &s->link);
		return;
	}
	if (r->slot && r->slot != s)
		r->slot->app = NULL; /* its own slot's message goes to the next receive */
	r->slot = NULL;
	deliver(srx, r, s);
}

/* The checks of iwd_check_iov (docs/libfabric.md "Errors"), but for a NULL
 * buffer with a length, which the srx accepts (*null_buf set): it never
 * hands the application's buffer to the daemon, and a message of more
 * than 0 octets for such a receive completes with FI_EFAULT, nothing
 * written (deliver). tcp accepts it too, and fabtests' fi_shared_ctx -e
 * msg posts 64-octet receives of a NULL buffer for its 0-octet messages
 * (it never allocates its buffers on the MSG path). Returns 1 when ok. */
static int srx_check_iov(const struct iovec *iov, void **desc, size_t count, int *null_buf)
{
	struct iovec tmp[IWD_IOV_LIMIT];
	size_t i;
	*null_buf = 0;
	if (count && !iov)
		return 0;
	for (i = 0; i < count; i++) {
		tmp[i] = iov[i];
		if (!iov[i].iov_base && iov[i].iov_len) {
			tmp[i].iov_len = 0;
			*null_buf = 1;
		}
	}
	return iwd_check_iov(tmp, desc, count) == 0;
}

/* fi_recv on the srx (fi_msg(3)). */
static ssize_t srx_post(struct iwd_srx *srx, const struct iovec *iov, void **desc, size_t count, void *context,
			uint64_t flags)
{
	struct iwd_domain *dom = srx->dom;
	struct srx_recv *r;
	struct srx_slot *s;
	struct iwv_sge sge;
	struct iwv_recv_wr wr;
	int ret, null_buf;

	if (count > IWD_IOV_LIMIT || !srx_check_iov(iov, desc, count, &null_buf))
		return -FI_EINVAL;
	if (flags & FI_MULTI_RECV)
		return -FI_ENOSYS;
	iwd_lock(dom);
	if (dom->dead) {
		iwd_unlock(dom);
		return -FI_ENODEV;
	}
	/* Progress first: a completion it reaps may take the oldest receive,
	 * which must not be this one half made. */
	if (iwd_list_empty(&srx->unexp) && srx->posted >= srx->depth)
		iwd_domain_progress(dom);
	r = calloc(1, sizeof(*r));
	if (!r) {
		iwd_unlock(dom);
		return -FI_ENOMEM;
	}
	r->context = context;
	r->flags = flags;
	r->iov_count = count;
	memcpy(r->iov, iov, count * sizeof(*iov));
	r->len = iwd_iov_len(iov, count);
	r->null_buf = null_buf;
	iwd_list_insert_tail(&srx->recvs, &r->link);
	if (!iwd_list_empty(&srx->unexp)) {
		/* A message waits: it is this receive's (the slot it came in
		 * replaces the one this receive would post). */
		s = iwd_container_of(srx->unexp.next, struct srx_slot, link);
		iwd_list_remove(&s->link);
		deliver(srx, r, s);
		iwd_unlock(dom);
		return 0;
	}
	ret = -FI_EAGAIN;
	s = srx->posted < srx->depth ? calloc(1, sizeof(*s)) : NULL;
	if (s) {
		s->wr.kind = IWD_WR_RX_REQ;
		if (r->len > srx->pool.slot_size) {
			s->cap = r->len;
			s->buf = iwd_stage_alloc(dom, r->len);
			s->stage = s->buf != NULL;
			if (!s->buf)
				ret = iwd_stage_err(dom);
			sge = (struct iwv_sge){(uint64_t)(uintptr_t)s->buf, (uint32_t)s->cap, iwd_stage_lkey(dom)};
		} else {
			s->cap = srx->pool.slot_size;
			s->buf = iwd_pool_get(&srx->pool);
			sge = (struct iwv_sge){(uint64_t)(uintptr_t)s->buf, (uint32_t)s->cap, iwd_pool_lkey(&srx->pool)};
		}
		if (s->buf) {
			memset(&wr, 0, sizeof(wr));
			wr.wr_id = (uint64_t)(uintptr_t)s;
			wr.num_sge = 1;
			wr.sg_list = &sge;
			ret = iwv_post_srq_recv(srx->srq, &wr, 1);
			ret = ret == 1 ? 0 : ret == -ENOMEM ? -FI_EAGAIN : iwd_errno(ret < 0 ? ret : -EIO);
			if (ret)
				IWD_WARN(FI_LOG_EP_DATA, "iwarpd: posting to the shared receive queue: %s\n",
					 iwv_last_error(dom->fab->s));
		}
	}
	if (ret) {
		if (s)
			slot_free(srx, s);
		recv_free(r);
		iwd_unlock(dom);
		return ret;
	}
	s->app = r;
	r->slot = s;
	iwd_list_insert_tail(&srx->slots, &s->link);
	srx->posted++;
	iwd_unlock(dom);
	return 0;
}

static struct iwd_srx *srx_ep(struct fid_ep *f) { return iwd_container_of(f, struct iwd_srx, ep_fid); }

static ssize_t srx_recv(struct fid_ep *f, void *buf, size_t len, void *desc, fi_addr_t src, void *ctx)
{
	struct iovec iov = {buf, len};
	IWD_UNUSED(src);
	return srx_post(srx_ep(f), &iov, &desc, 1, ctx, srx_ep(f)->op_flags);
}

static ssize_t srx_recvv(struct fid_ep *f, const struct iovec *iov, void **desc, size_t count, fi_addr_t src,
			 void *ctx)
{
	IWD_UNUSED(src);
	return srx_post(srx_ep(f), iov, desc, count, ctx, srx_ep(f)->op_flags);
}

static ssize_t srx_recvmsg(struct fid_ep *f, const struct fi_msg *msg, uint64_t flags)
{
	if (!msg)
		return -FI_EINVAL;
	return srx_post(srx_ep(f), msg->msg_iov, msg->desc, msg->iov_count, msg->context, flags);
}

/* A receive context transmits nothing (fi_endpoint(3)). */
static ssize_t srx_send(struct fid_ep *f, const void *buf, size_t len, void *desc, fi_addr_t dest, void *ctx)
{
	IWD_UNUSED(f), IWD_UNUSED(buf), IWD_UNUSED(len), IWD_UNUSED(desc), IWD_UNUSED(dest), IWD_UNUSED(ctx);
	return -FI_ENOSYS;
}
static ssize_t srx_sendv(struct fid_ep *f, const struct iovec *iov, void **desc, size_t count, fi_addr_t dest,
			 void *ctx)
{
	IWD_UNUSED(f), IWD_UNUSED(iov), IWD_UNUSED(desc), IWD_UNUSED(count), IWD_UNUSED(dest), IWD_UNUSED(ctx);
	return -FI_ENOSYS;
}
static ssize_t srx_sendmsg(struct fid_ep *f, const struct fi_msg *msg, uint64_t flags)
{
	IWD_UNUSED(f), IWD_UNUSED(msg), IWD_UNUSED(flags);
	return -FI_ENOSYS;
}
static ssize_t srx_inject(struct fid_ep *f, const void *buf, size_t len, fi_addr_t dest)
{
	IWD_UNUSED(f), IWD_UNUSED(buf), IWD_UNUSED(len), IWD_UNUSED(dest);
	return -FI_ENOSYS;
}
static ssize_t srx_senddata(struct fid_ep *f, const void *buf, size_t len, void *desc, uint64_t data, fi_addr_t dest,
			    void *ctx)
{
	IWD_UNUSED(f), IWD_UNUSED(buf), IWD_UNUSED(len), IWD_UNUSED(desc), IWD_UNUSED(data), IWD_UNUSED(dest);
	IWD_UNUSED(ctx);
	return -FI_ENOSYS;
}
static ssize_t srx_injectdata(struct fid_ep *f, const void *buf, size_t len, uint64_t data, fi_addr_t dest)
{
	IWD_UNUSED(f), IWD_UNUSED(buf), IWD_UNUSED(len), IWD_UNUSED(data), IWD_UNUSED(dest);
	return -FI_ENOSYS;
}

static struct fi_ops_msg srx_msg_ops = {
	.size = sizeof(struct fi_ops_msg),
	.recv = srx_recv,
	.recvv = srx_recvv,
	.recvmsg = srx_recvmsg,
	.send = srx_send,
	.sendv = srx_sendv,
	.sendmsg = srx_sendmsg,
	.inject = srx_inject,
	.senddata = srx_senddata,
	.injectdata = srx_injectdata,
};

/* fi_cancel(3): the receive is taken back at once and reported as an
 * FI_ECANCELED error completion on the srx's CQ (fi_ep_bind(srx, cq)) or,
 * without one, on the receive CQ of an endpoint bound to the srx. Its
 * work request stays in the daemon's ring (see the file comment). */
static ssize_t srx_cancel(fid_t fid, void *context)
{
	struct iwd_srx *srx = iwd_container_of(fid, struct iwd_srx, ep_fid.fid);
	struct iwd_list *it;
	ssize_t ret = -FI_ENOENT;
	iwd_lock(srx->dom);
	iwd_list_foreach(&srx->recvs, it)
	{
		struct srx_recv *r = iwd_container_of(it, struct srx_recv, link);
		if (r->context != context)
			continue;
		if (srx->cq)
			iwd_cq_push_err(srx->cq, context, FI_RECV | FI_MSG, 0, NULL, 0, 0, 0, FI_ECANCELED, 0,
					FI_ADDR_NOTAVAIL);
		else if (srx->neps)
			iwd_ep_rx_err(srx->eps[0], context, FI_RECV | FI_MSG, 0, 0, 0, 0, FI_ECANCELED, 0,
				      FI_ADDR_NOTAVAIL);
		recv_free(r);
		ret = 0;
		break;
	}
	iwd_unlock(srx->dom);
	return ret;
}

static ssize_t srx_rx_size_left(struct fid_ep *f)
{
	struct iwd_srx *srx = srx_ep(f);
	ssize_t left;
	iwd_lock(srx->dom);
	left = (ssize_t)(srx->depth - srx->posted);
	iwd_unlock(srx->dom);
	return left;
}

static ssize_t srx_tx_size_left(struct fid_ep *f)
{
	IWD_UNUSED(f);
	return -FI_ENOSYS;
}

static int srx_getopt(fid_t fid, int level, int optname, void *optval, size_t *optlen)
{
	IWD_UNUSED(fid), IWD_UNUSED(level), IWD_UNUSED(optname), IWD_UNUSED(optval), IWD_UNUSED(optlen);
	return -FI_ENOPROTOOPT;
}

static int srx_setopt(fid_t fid, int level, int optname, const void *optval, size_t optlen)
{
	IWD_UNUSED(fid), IWD_UNUSED(level), IWD_UNUSED(optname), IWD_UNUSED(optval), IWD_UNUSED(optlen);
	return -FI_ENOPROTOOPT;
}

static struct fi_ops_ep srx_ep_ops = {
	.size = sizeof(struct fi_ops_ep),
	.cancel = srx_cancel,
	.getopt = srx_getopt,
	.setopt = srx_setopt,
	.tx_ctx = iwd_no_tx_ctx,
	.rx_ctx = iwd_no_rx_ctx,
	.rx_size_left = srx_rx_size_left,
	.tx_size_left = srx_tx_size_left,
};

static int srx_no_getname(fid_t fid, void *addr, size_t *addrlen)
{
	IWD_UNUSED(fid), IWD_UNUSED(addr), IWD_UNUSED(addrlen);
	return -FI_ENOSYS;
}

static struct fi_ops_cm srx_cm_ops = {
	.size = sizeof(struct fi_ops_cm),
	.setname = iwd_no_setname,
	.getname = srx_no_getname,
	.getpeer = iwd_no_getpeer,
	.connect = iwd_no_connect,
	.listen = iwd_no_listen,
	.accept = iwd_no_accept,
	.reject = iwd_no_reject,
	.shutdown = iwd_no_shutdown,
	.join = iwd_no_join,
};

/* fi_close(3): -FI_EBUSY while an endpoint uses it; receives still posted
 * are discarded. */
static int srx_close(struct fid *fid)
{
	struct iwd_srx *srx = iwd_container_of(fid, struct iwd_srx, ep_fid.fid);
	struct iwd_domain *dom = srx->dom;
	struct iwd_list *it, *tmp;
	int ret;
	iwd_lock(dom);
	if (srx->neps) {
		iwd_unlock(dom);
		return -FI_EBUSY;
	}
	ret = iwv_destroy_srq(srx->srq);
	if (ret && ret != -ENODEV) {
		IWD_WARN(FI_LOG_EP_CTRL, "iwarpd: destroying the shared receive queue: %s\n",
			 iwv_last_error(dom->fab->s));
		iwd_unlock(dom);
		return iwd_errno(ret);
	}
	iwd_list_foreach_safe(&srx->recvs, it, tmp)
	{
		recv_free(iwd_container_of(it, struct srx_recv, link));
	}
	iwd_list_foreach_safe(&srx->slots, it, tmp)
	{
		slot_free(srx, iwd_container_of(it, struct srx_slot, link));
	}
	iwd_list_foreach_safe(&srx->unexp, it, tmp)
	{
		slot_free(srx, iwd_container_of(it, struct srx_slot, link));
	}
	iwd_pool_fini(&srx->pool);
	if (srx->cq)
		srx->cq->refs--;
	dom->refs--;
	iwd_unlock(dom);
	free(srx->eps);
	free(srx);
	return 0;
}

/* fi_ep_bind(srx, cq, FI_RECV): where fi_cancel reports. */
static int srx_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	struct iwd_srx *srx = iwd_container_of(fid, struct iwd_srx, ep_fid.fid);
	struct iwd_cq *cq;
	if (!bfid || bfid->fclass != FI_CLASS_CQ || !(flags & FI_RECV))
		return -FI_EINVAL;
	cq = iwd_container_of(bfid, struct iwd_cq, cq_fid.fid);
	if (cq->dom != srx->dom)
		return -FI_EINVAL;
	iwd_lock(srx->dom);
	if (srx->cq)
		srx->cq->refs--;
	srx->cq = cq;
	cq->refs++;
	iwd_unlock(srx->dom);
	return 0;
}

/* FI_ENABLE: a shared context is enabled with the endpoints using it. */
static int srx_control(struct fid *fid, int command, void *arg)
{
	struct iwd_srx *srx = iwd_container_of(fid, struct iwd_srx, ep_fid.fid);
	IWD_UNUSED(arg);
	if (command == FI_ENABLE)
		return 0;
	if (command == FI_GETOPSFLAG || command == FI_SETOPSFLAG) {
		uint64_t *f = arg;
		if (!f || !(*f & FI_RECV))
			return -FI_EINVAL;
		if (command == FI_GETOPSFLAG)
			*f = srx->op_flags;
		else
			srx->op_flags = *f & ~(uint64_t)FI_RECV;
		return 0;
	}
	return -FI_ENOSYS;
}

static struct fi_ops srx_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = srx_close,
	.bind = srx_bind,
	.control = srx_control,
	.ops_open = iwd_no_ops_open,
};

int iwd_srx_open(struct fid_domain *domain, struct fi_rx_attr *attr, struct fid_ep **rx_ep, void *context)
{
	struct iwd_domain *dom = iwd_container_of(domain, struct iwd_domain, domain_fid);
	struct iwv_srq_init_attr qa;
	struct iwd_srx *srx;
	int ret;

	if (!rx_ep || (attr && (attr->iov_limit > IWD_IOV_LIMIT || attr->size > 65536)))
		return -FI_EINVAL;
	srx = calloc(1, sizeof(*srx));
	if (!srx)
		return -FI_ENOMEM;
	srx->dom = dom;
	srx->depth = attr && attr->size ? attr->size : IWD_RX_SIZE;
	srx->op_flags = attr ? attr->op_flags : 0;
	iwd_list_init(&srx->slots);
	iwd_list_init(&srx->recvs);
	iwd_list_init(&srx->unexp);
	memset(&qa, 0, sizeof(qa));
	qa.max_wr = (uint32_t)srx->depth;
	qa.max_sge = 1;
	iwd_lock(dom);
	ret = iwv_create_srq(dom->pd, &qa, &srx->srq);
	if (ret) {
		IWD_WARN(FI_LOG_EP_CTRL, "iwarpd: creating a shared receive queue of %zu entries: %s\n", srx->depth,
			 iwv_last_error(dom->fab->s));
		ret = iwd_errno(ret);
	} else {
		ret = iwd_pool_init(dom, &srx->pool, iwd_env.dgram_max, srx->depth);
		if (ret)
			iwv_destroy_srq(srx->srq);
	}
	if (ret) {
		iwd_unlock(dom);
		free(srx);
		return ret;
	}
	dom->refs++;
	iwd_unlock(dom);
	srx->ep_fid.fid.fclass = FI_CLASS_SRX_CTX;
	srx->ep_fid.fid.context = context;
	srx->ep_fid.fid.ops = &srx_fi_ops;
	srx->ep_fid.ops = &srx_ep_ops;
	srx->ep_fid.cm = &srx_cm_ops;
	srx->ep_fid.msg = &srx_msg_ops;
	srx->ep_fid.rma = &iwd_no_rma_ops;
	srx->ep_fid.tagged = &iwd_no_tagged_ops;
	srx->ep_fid.atomic = &iwd_no_atomic_ops;
	*rx_ep = &srx->ep_fid;
	return 0;
}
