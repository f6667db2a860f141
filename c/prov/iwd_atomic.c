/*
 * iwd_atomic.c — FI_ATOMIC (fi_atomic(3)) on RDM endpoints (RD queue pairs)
 * and MSG endpoints (RC queue pairs), over the daemon's RFC 7306 atomics
 * (docs/atomics.md): one element per operation.
 *
 * As the daemon's own RFC 7306 messages, on FI_UINT64 and FI_INT64:
 *   fi_atomic        FI_SUM                  FetchAdd, the original value discarded
 *   fi_fetch_atomic  FI_SUM, FI_ATOMIC_READ  FetchAdd (of 0 for FI_ATOMIC_READ)
 *   fi_compare_atomic FI_CSWAP               CmpSwap
 * As the provider's CmpSwap loop (iwd_atomic_cas.c), every other
 * combination of FI_MIN FI_MAX FI_SUM FI_BOR FI_BAND FI_BXOR FI_ATOMIC_WRITE
 * (fi_atomic, fi_fetch_atomic), FI_ATOMIC_READ (fetch) and FI_CSWAP
 * (compare) with FI_INT32 FI_UINT32 FI_INT64 FI_UINT64 — what Open MPI
 * 4.1's btl ofi issues (FI_SUM, FI_ATOMIC_WRITE, FI_CSWAP on FI_UINT32 and
 * FI_UINT64) and MPI's integer reductions.
 *
 * Anything else is -FI_EOPNOTSUPP (fi_atomic(3) ERRORS), more than one
 * element -FI_EMSGSIZE. The
 * original value lands in a registered bounce slot and is copied to the
 * result buffer before the completion is written (atomic fetches have
 * FI_DELIVERY_COMPLETE semantics). The target must be registered with
 * FI_REMOTE_WRITE in a domain opened with FI_ATOMIC (iwd_mr.c: remote
 * atomic access) and aligned to its size; the daemon refuses anything else
 * and the operation completes with FI_EACCES.
 */
#include <stdlib.h>
#include <string.h>

#include "iwd.h"
#include "iwd_fastpath.h"

enum { AT_WRITE = 0, AT_FETCH = 1, AT_COMPARE = 2 };

static struct iwd_ep *ep_of(struct fid_ep *f) { return iwd_container_of(f, struct iwd_ep, ep_fid); }

/* The daemon's own RFC 7306 messages: FetchAdd and CmpSwap on 64 bits. */
static int native(int kind, enum fi_datatype dt, enum fi_op op)
{
	if (dt != FI_UINT64 && dt != FI_INT64)
		return 0;
	switch (kind) {
	case AT_WRITE:
		return op == FI_SUM;
	case AT_FETCH:
		return op == FI_SUM || op == FI_ATOMIC_READ;
	case AT_COMPARE:
		return op == FI_CSWAP;
	default:
		return 0;
	}
}

int iwd_atomic_valid(int kind, enum fi_datatype dt, enum fi_op op)
{
	if (!iwd_atomic_cas_supported(dt, op))
		return 0;
	switch (kind) {
	case AT_WRITE:
		return op != FI_ATOMIC_READ && op != FI_CSWAP;
	case AT_FETCH:
		return op != FI_CSWAP;
	case AT_COMPARE:
		return op == FI_CSWAP;
	default:
		return 0;
	}
}

static size_t dt_size(enum fi_datatype dt) { return (dt == FI_INT32 || dt == FI_UINT32) ? 4 : 8; }

/* One element of dt at p, zero-extended. */
static uint64_t load(const void *p, enum fi_datatype dt)
{
	uint64_t v;
	uint32_t w;
	if (dt_size(dt) == 4) {
		memcpy(&w, p, sizeof(w));
		return w;
	}
	memcpy(&v, p, sizeof(v));
	return v;
}

static ssize_t atomic_op(struct iwd_ep *ep, int kind, const void *buf, const void *compare, void *result, size_t count,
			 fi_addr_t dest, uint64_t addr, uint64_t key, enum fi_datatype dt, enum fi_op op, void *context,
			 uint64_t op_flags)
{
	struct iwv_send_wr wr;
	struct iwv_sge sge;
	const struct iwv_av *av = NULL;
	struct iwd_tx *tx;
	uint64_t operand = 0, cmp = 0;
	ssize_t ret;

	if (!iwd_atomic_valid(kind, dt, op) || !(ep->caps & FI_ATOMIC))
		return -FI_EOPNOTSUPP;
	if (count == 0)
		return -FI_EINVAL;
	if (count > 1)
		return -FI_EMSGSIZE;
	if (op_flags & FI_REMOTE_CQ_DATA)
		return -FI_EOPNOTSUPP;
	if (key > UINT32_MAX || (kind != AT_WRITE && !result))
		return -FI_EINVAL;
	if (op != FI_ATOMIC_READ) {
		if (!buf)
			return -FI_EINVAL;
		operand = load(buf, dt);
	}
	if (kind == AT_COMPARE) {
		if (!compare)
			return -FI_EINVAL;
		cmp = load(compare, dt);
	}
	iwd_lock(ep->dom);
	if (ep->dom->dead) {
		ret = -FI_ENODEV;
		goto out;
	}
	if (!ep->enabled) {
		ret = -FI_EOPBADSTATE;
		goto out;
	}
	ret = ep->ops->tx_dest(ep, dest, &av);
	if (ret)
		goto out;
	/* RDM: a native atomic the rank sends itself while it owns its
	 * socket (iwd_fastpath_req.c); otherwise through the daemon. */
	if (ep->fprd && native(kind, dt, op) &&
	    iwd_fprd_atomic(ep, kind == AT_COMPARE ? 2 : 0, operand, cmp, kind == AT_WRITE ? NULL : result, av, addr,
			    key, context, FI_ATOMIC | (kind == AT_WRITE ? FI_WRITE : FI_READ), op_flags,
			    kind == AT_WRITE ? 1 : 2) == 0) {
		ret = 0;
		goto out;
	}
	if (ep->sq_used >= ep->sq_depth || !ep->txp.nfree)
		iwd_domain_progress(ep->dom);
	tx = iwd_tx_new(ep, context, FI_ATOMIC | (kind == AT_WRITE ? FI_WRITE : FI_READ), op_flags);
	if (!tx) {
		ret = -FI_ENOMEM;
		goto out;
	}
	tx->bounce = iwd_pool_get(&ep->txp);
	if (!tx->bounce) {
		iwd_tx_free(ep, tx);
		ret = -FI_EAGAIN;
		goto out;
	}
	tx->cntr_kind = kind == AT_WRITE ? 1 : 2;
	if (!native(kind, dt, op)) {
		ret = iwd_atomic_cas_start(ep, tx, av, addr, (uint32_t)key, dt, op, operand, cmp, result);
		if (ret)
			iwd_tx_free(ep, tx);
		goto out;
	}
	/* iwd_rma_done: kind 2 (read) copies the bounce into iov, kind 1 (write) discards it. */
	tx->done = iwd_rma_done;
	tx->len = sizeof(uint64_t);
	if (kind != AT_WRITE) {
		tx->iov[0].iov_base = result;
		tx->iov[0].iov_len = sizeof(uint64_t);
		tx->iov_count = 1;
	}
	sge = (struct iwv_sge){(uint64_t)(uintptr_t)tx->bounce, sizeof(uint64_t), iwd_pool_lkey(&ep->txp)};
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = (uint64_t)(uintptr_t)tx;
	wr.flags = IWV_SEND_SIGNALED;
	wr.num_sge = 1;
	wr.sg_list = &sge;
	wr.av = av;
	wr.remote_addr = addr;
	wr.rkey = (uint32_t)key;
	if (kind == AT_COMPARE) {
		wr.opcode = IWV_WR_ATOMIC_CMP_AND_SWP;
		wr.compare_add = cmp;
		wr.swap = operand;
	} else {
		wr.opcode = IWV_WR_ATOMIC_FETCH_AND_ADD;
		wr.compare_add = operand; /* FI_ATOMIC_READ: add 0 */
	}
	ret = iwd_ep_post_send(ep, &wr);
	if (ret) {
		iwd_tx_free(ep, tx);
		goto out;
	}
	tx->posted = 1;
out:
	if (ret == 0)
		ep->at_posted[kind]++;
	iwd_unlock(ep->dom);
	return ret;
}

/* One element of an fi_ioc vector (count 1, one ioc), or the error. */
static ssize_t one_ioc(const struct fi_ioc *iov, size_t count, const void **p)
{
	if (count == 0 || !iov)
		return -FI_EINVAL;
	if (count > 1 || iov[0].count > 1)
		return -FI_EMSGSIZE;
	if (iov[0].count == 0)
		return -FI_EINVAL;
	*p = iov[0].addr;
	return 0;
}

static ssize_t msg_target(const struct fi_msg_atomic *msg, uint64_t *addr, uint64_t *key)
{
	if (!msg || !msg->rma_iov || msg->rma_iov_count != 1)
		return -FI_EINVAL;
	if (msg->rma_iov[0].count > 1)
		return -FI_EMSGSIZE;
	*addr = msg->rma_iov[0].addr;
	*key = msg->rma_iov[0].key;
	return 0;
}

/* ---- non-fetching ---- */

static ssize_t a_write(struct fid_ep *f, const void *buf, size_t count, void *desc, fi_addr_t dest, uint64_t addr,
		       uint64_t key, enum fi_datatype dt, enum fi_op op, void *ctx)
{
	IWD_UNUSED(desc);
	return atomic_op(ep_of(f), AT_WRITE, buf, NULL, NULL, count, dest, addr, key, dt, op, ctx, ep_of(f)->tx_op_flags);
}

static ssize_t a_writev(struct fid_ep *f, const struct fi_ioc *iov, void **desc, size_t count, fi_addr_t dest,
			uint64_t addr, uint64_t key, enum fi_datatype dt, enum fi_op op, void *ctx)
{
	const void *buf;
	ssize_t ret = one_ioc(iov, count, &buf);
	IWD_UNUSED(desc);
	if (ret)
		return iwd_atomic_valid(AT_WRITE, dt, op) ? ret : -FI_EOPNOTSUPP;
	return atomic_op(ep_of(f), AT_WRITE, buf, NULL, NULL, 1, dest, addr, key, dt, op, ctx, ep_of(f)->tx_op_flags);
}

static ssize_t a_writemsg(struct fid_ep *f, const struct fi_msg_atomic *msg, uint64_t flags)
{
	uint64_t addr, key;
	const void *buf;
	ssize_t ret = msg_target(msg, &addr, &key);
	if (!ret)
		ret = one_ioc(msg->msg_iov, msg->iov_count, &buf);
	if (ret)
		return ret;
	return atomic_op(ep_of(f), AT_WRITE, buf, NULL, NULL, 1, msg->addr, addr, key, msg->datatype, msg->op,
			 msg->context, flags);
}

static ssize_t a_inject(struct fid_ep *f, const void *buf, size_t count, fi_addr_t dest, uint64_t addr, uint64_t key,
			enum fi_datatype dt, enum fi_op op)
{
	return atomic_op(ep_of(f), AT_WRITE, buf, NULL, NULL, count, dest, addr, key, dt, op, NULL, FI_INJECT | IWD_NOCOMP);
}

/* ---- fetching ---- */

static ssize_t a_readwrite(struct fid_ep *f, const void *buf, size_t count, void *desc, void *result,
			   void *result_desc, fi_addr_t dest, uint64_t addr, uint64_t key, enum fi_datatype dt,
			   enum fi_op op, void *ctx)
{
	IWD_UNUSED(desc);
	IWD_UNUSED(result_desc);
	return atomic_op(ep_of(f), AT_FETCH, buf, NULL, result, count, dest, addr, key, dt, op, ctx,
			 ep_of(f)->tx_op_flags);
}

static ssize_t a_readwritev(struct fid_ep *f, const struct fi_ioc *iov, void **desc, size_t count,
			    struct fi_ioc *resultv, void **result_desc, size_t result_count, fi_addr_t dest,
			    uint64_t addr, uint64_t key, enum fi_datatype dt, enum fi_op op, void *ctx)
{
	const void *buf = NULL, *res;
	ssize_t ret = 0;
	IWD_UNUSED(desc);
	IWD_UNUSED(result_desc);
	if (!iwd_atomic_valid(AT_FETCH, dt, op))
		return -FI_EOPNOTSUPP;
	if (op != FI_ATOMIC_READ)
		ret = one_ioc(iov, count, &buf);
	if (!ret)
		ret = one_ioc(resultv, result_count, &res);
	if (ret)
		return ret;
	return atomic_op(ep_of(f), AT_FETCH, buf, NULL, (void *)res, 1, dest, addr, key, dt, op, ctx,
			 ep_of(f)->tx_op_flags);
}

static ssize_t a_readwritemsg(struct fid_ep *f, const struct fi_msg_atomic *msg, struct fi_ioc *resultv,
			      void **result_desc, size_t result_count, uint64_t flags)
{
	uint64_t addr, key;
	const void *buf = NULL, *res;
	ssize_t ret = msg_target(msg, &addr, &key);
	IWD_UNUSED(result_desc);
	if (!ret && msg->op != FI_ATOMIC_READ)
		ret = one_ioc(msg->msg_iov, msg->iov_count, &buf);
	if (!ret)
		ret = one_ioc(resultv, result_count, &res);
	if (ret)
		return ret;
	return atomic_op(ep_of(f), AT_FETCH, buf, NULL, (void *)res, 1, msg->addr, addr, key, msg->datatype, msg->op,
			 msg->context, flags);
}

/* ---- compare ---- */

static ssize_t a_compwrite(struct fid_ep *f, const void *buf, size_t count, void *desc, const void *compare,
			   void *compare_desc, void *result, void *result_desc, fi_addr_t dest, uint64_t addr,
			   uint64_t key, enum fi_datatype dt, enum fi_op op, void *ctx)
{
	IWD_UNUSED(desc);
	IWD_UNUSED(compare_desc);
	IWD_UNUSED(result_desc);
	return atomic_op(ep_of(f), AT_COMPARE, buf, compare, result, count, dest, addr, key, dt, op, ctx,
			 ep_of(f)->tx_op_flags);
}

static ssize_t a_compwritev(struct fid_ep *f, const struct fi_ioc *iov, void **desc, size_t count,
			    const struct fi_ioc *comparev, void **compare_desc, size_t compare_count,
			    struct fi_ioc *resultv, void **result_desc, size_t result_count, fi_addr_t dest,
			    uint64_t addr, uint64_t key, enum fi_datatype dt, enum fi_op op, void *ctx)
{
	const void *buf, *cmp, *res;
	ssize_t ret;
	IWD_UNUSED(desc);
	IWD_UNUSED(compare_desc);
	IWD_UNUSED(result_desc);
	if (!iwd_atomic_valid(AT_COMPARE, dt, op))
		return -FI_EOPNOTSUPP;
	ret = one_ioc(iov, count, &buf);
	if (!ret)
		ret = one_ioc(comparev, compare_count, &cmp);
	if (!ret)
		ret = one_ioc(resultv, result_count, &res);
	if (ret)
		return ret;
	return atomic_op(ep_of(f), AT_COMPARE, buf, cmp, (void *)res, 1, dest, addr, key, dt, op, ctx,
			 ep_of(f)->tx_op_flags);
}

static ssize_t a_compwritemsg(struct fid_ep *f, const struct fi_msg_atomic *msg, const struct fi_ioc *comparev,
			      void **compare_desc, size_t compare_count, struct fi_ioc *resultv, void **result_desc,
			      size_t result_count, uint64_t flags)
{
	uint64_t addr, key;
	const void *buf, *cmp, *res;
	ssize_t ret = msg_target(msg, &addr, &key);
	IWD_UNUSED(compare_desc);
	IWD_UNUSED(result_desc);
	if (!ret)
		ret = one_ioc(msg->msg_iov, msg->iov_count, &buf);
	if (!ret)
		ret = one_ioc(comparev, compare_count, &cmp);
	if (!ret)
		ret = one_ioc(resultv, result_count, &res);
	if (ret)
		return ret;
	return atomic_op(ep_of(f), AT_COMPARE, buf, cmp, (void *)res, 1, msg->addr, addr, key, msg->datatype, msg->op,
			 msg->context, flags);
}

/* ---- valid / query ---- */

static int valid(struct iwd_ep *ep, int kind, enum fi_datatype dt, enum fi_op op, size_t *count)
{
	if (!(ep->caps & FI_ATOMIC) || !iwd_atomic_valid(kind, dt, op))
		return -FI_EOPNOTSUPP;
	if (count)
		*count = 1;
	return 0;
}

static int a_writevalid(struct fid_ep *f, enum fi_datatype dt, enum fi_op op, size_t *count)
{
	return valid(ep_of(f), AT_WRITE, dt, op, count);
}

static int a_readwritevalid(struct fid_ep *f, enum fi_datatype dt, enum fi_op op, size_t *count)
{
	return valid(ep_of(f), AT_FETCH, dt, op, count);
}

static int a_compwritevalid(struct fid_ep *f, enum fi_datatype dt, enum fi_op op, size_t *count)
{
	return valid(ep_of(f), AT_COMPARE, dt, op, count);
}

int iwd_query_atomic(struct fid_domain *domain, enum fi_datatype dt, enum fi_op op, struct fi_atomic_attr *attr,
		     uint64_t flags)
{
	int kind = AT_WRITE;
	IWD_UNUSED(domain);
	if (!attr || (flags & FI_FETCH_ATOMIC && flags & FI_COMPARE_ATOMIC))
		return -FI_EINVAL;
	if (flags & FI_FETCH_ATOMIC)
		kind = AT_FETCH;
	else if (flags & FI_COMPARE_ATOMIC)
		kind = AT_COMPARE;
	if (!iwd_atomic_valid(kind, dt, op))
		return -FI_EOPNOTSUPP;
	attr->count = 1;
	attr->size = dt_size(dt);
	return 0;
}

struct fi_ops_atomic iwd_atomic_ops = {
	.size = sizeof(struct fi_ops_atomic),
	.write = a_write,
	.writev = a_writev,
	.writemsg = a_writemsg,
	.inject = a_inject,
	.readwrite = a_readwrite,
	.readwritev = a_readwritev,
	.readwritemsg = a_readwritemsg,
	.compwrite = a_compwrite,
	.compwritev = a_compwritev,
	.compwritemsg = a_compwritemsg,
	.writevalid = a_writevalid,
	.readwritevalid = a_readwritevalid,
	.compwritevalid = a_compwritevalid,
};
