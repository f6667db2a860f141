/*
 * iwd_util_noops.c — the one place for operations an object does not
 * offer: fid bind/control/ops_open (fi_fabric(3) and every object), the
 * fi_ops_cm calls of endpoints that do not connect or listen (fi_cm(3)),
 * scalable-endpoint contexts, and the fi_ops_tagged (fi_tagged(3)),
 * fi_ops_rma (fi_rma(3)) and fi_ops_atomic (fi_atomic(3)) tables of
 * endpoint types without those capabilities. Every call returns
 * -FI_ENOSYS (atomics: -FI_EOPNOTSUPP), never crashes on a NULL pointer.
 * libfabric's own providers share these from prov/util (fi_no_*), which
 * libfabric-dev does not install.
 */
#include "iwd.h"

static ssize_t nt_recv(struct fid_ep *e, void *b, size_t l, void *d, fi_addr_t s, uint64_t t, uint64_t i, void *c)
{
	IWD_UNUSED(e), IWD_UNUSED(b), IWD_UNUSED(l), IWD_UNUSED(d), IWD_UNUSED(s), IWD_UNUSED(t), IWD_UNUSED(i), IWD_UNUSED(c);
	return -FI_ENOSYS;
}
static ssize_t nt_recvv(struct fid_ep *e, const struct iovec *v, void **d, size_t n, fi_addr_t s, uint64_t t,
			uint64_t i, void *c)
{
	IWD_UNUSED(e), IWD_UNUSED(v), IWD_UNUSED(d), IWD_UNUSED(n), IWD_UNUSED(s), IWD_UNUSED(t), IWD_UNUSED(i), IWD_UNUSED(c);
	return -FI_ENOSYS;
}
static ssize_t nt_recvmsg(struct fid_ep *e, const struct fi_msg_tagged *m, uint64_t f)
{
	IWD_UNUSED(e), IWD_UNUSED(m), IWD_UNUSED(f);
	return -FI_ENOSYS;
}
static ssize_t nt_send(struct fid_ep *e, const void *b, size_t l, void *d, fi_addr_t a, uint64_t t, void *c)
{
	IWD_UNUSED(e), IWD_UNUSED(b), IWD_UNUSED(l), IWD_UNUSED(d), IWD_UNUSED(a), IWD_UNUSED(t), IWD_UNUSED(c);
	return -FI_ENOSYS;
}
static ssize_t nt_sendv(struct fid_ep *e, const struct iovec *v, void **d, size_t n, fi_addr_t a, uint64_t t, void *c)
{
	IWD_UNUSED(e), IWD_UNUSED(v), IWD_UNUSED(d), IWD_UNUSED(n), IWD_UNUSED(a), IWD_UNUSED(t), IWD_UNUSED(c);
	return -FI_ENOSYS;
}
static ssize_t nt_sendmsg(struct fid_ep *e, const struct fi_msg_tagged *m, uint64_t f)
{
	IWD_UNUSED(e), IWD_UNUSED(m), IWD_UNUSED(f);
	return -FI_ENOSYS;
}
static ssize_t nt_inject(struct fid_ep *e, const void *b, size_t l, fi_addr_t a, uint64_t t)
{
	IWD_UNUSED(e), IWD_UNUSED(b), IWD_UNUSED(l), IWD_UNUSED(a), IWD_UNUSED(t);
	return -FI_ENOSYS;
}
static ssize_t nt_senddata(struct fid_ep *e, const void *b, size_t l, void *d, uint64_t x, fi_addr_t a, uint64_t t,
			   void *c)
{
	IWD_UNUSED(e), IWD_UNUSED(b), IWD_UNUSED(l), IWD_UNUSED(d), IWD_UNUSED(x), IWD_UNUSED(a), IWD_UNUSED(t), IWD_UNUSED(c);
	return -FI_ENOSYS;
}
static ssize_t nt_injectdata(struct fid_ep *e, const void *b, size_t l, uint64_t x, fi_addr_t a, uint64_t t)
{
	IWD_UNUSED(e), IWD_UNUSED(b), IWD_UNUSED(l), IWD_UNUSED(x), IWD_UNUSED(a), IWD_UNUSED(t);
	return -FI_ENOSYS;
}
struct fi_ops_tagged iwd_no_tagged_ops = {
	.size = sizeof(struct fi_ops_tagged),
	.recv = nt_recv,
	.recvv = nt_recvv,
	.recvmsg = nt_recvmsg,
	.send = nt_send,
	.sendv = nt_sendv,
	.sendmsg = nt_sendmsg,
	.inject = nt_inject,
	.senddata = nt_senddata,
	.injectdata = nt_injectdata,
};

static ssize_t nr_rw(struct fid_ep *e, void *b, size_t l, void *d, fi_addr_t a, uint64_t ad, uint64_t k, void *c)
{
	IWD_UNUSED(e), IWD_UNUSED(b), IWD_UNUSED(l), IWD_UNUSED(d), IWD_UNUSED(a), IWD_UNUSED(ad), IWD_UNUSED(k), IWD_UNUSED(c);
	return -FI_ENOSYS;
}
static ssize_t nr_w(struct fid_ep *e, const void *b, size_t l, void *d, fi_addr_t a, uint64_t ad, uint64_t k, void *c)
{
	IWD_UNUSED(e), IWD_UNUSED(b), IWD_UNUSED(l), IWD_UNUSED(d), IWD_UNUSED(a), IWD_UNUSED(ad), IWD_UNUSED(k), IWD_UNUSED(c);
	return -FI_ENOSYS;
}
static ssize_t nr_v(struct fid_ep *e, const struct iovec *v, void **d, size_t n, fi_addr_t a, uint64_t ad, uint64_t k,
		    void *c)
{
	IWD_UNUSED(e), IWD_UNUSED(v), IWD_UNUSED(d), IWD_UNUSED(n), IWD_UNUSED(a), IWD_UNUSED(ad), IWD_UNUSED(k), IWD_UNUSED(c);
	return -FI_ENOSYS;
}
static ssize_t nr_msg(struct fid_ep *e, const struct fi_msg_rma *m, uint64_t f)
{
	IWD_UNUSED(e), IWD_UNUSED(m), IWD_UNUSED(f);
	return -FI_ENOSYS;
}
static ssize_t nr_inject(struct fid_ep *e, const void *b, size_t l, fi_addr_t a, uint64_t ad, uint64_t k)
{
	IWD_UNUSED(e), IWD_UNUSED(b), IWD_UNUSED(l), IWD_UNUSED(a), IWD_UNUSED(ad), IWD_UNUSED(k);
	return -FI_ENOSYS;
}
static ssize_t nr_wdata(struct fid_ep *e, const void *b, size_t l, void *d, uint64_t x, fi_addr_t a, uint64_t ad,
			uint64_t k, void *c)
{
	IWD_UNUSED(e), IWD_UNUSED(b), IWD_UNUSED(l), IWD_UNUSED(d), IWD_UNUSED(x), IWD_UNUSED(a), IWD_UNUSED(ad), IWD_UNUSED(k), IWD_UNUSED(c);
	return -FI_ENOSYS;
}
static ssize_t nr_idata(struct fid_ep *e, const void *b, size_t l, uint64_t x, fi_addr_t a, uint64_t ad, uint64_t k)
{
	IWD_UNUSED(e), IWD_UNUSED(b), IWD_UNUSED(l), IWD_UNUSED(x), IWD_UNUSED(a), IWD_UNUSED(ad), IWD_UNUSED(k);
	return -FI_ENOSYS;
}
struct fi_ops_rma iwd_no_rma_ops = {
	.size = sizeof(struct fi_ops_rma),
	.read = nr_rw,
	.readv = nr_v,
	.readmsg = nr_msg,
	.write = nr_w,
	.writev = (ssize_t(*)(struct fid_ep *, const struct iovec *, void **, size_t, fi_addr_t, uint64_t, uint64_t,
			      void *))nr_v,
	.writemsg = nr_msg,
	.inject = nr_inject,
	.writedata = nr_wdata,
	.injectdata = nr_idata,
};

/* ---- fid operations ---- */

int iwd_no_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	IWD_UNUSED(fid);
	IWD_UNUSED(bfid);
	IWD_UNUSED(flags);
	return -FI_ENOSYS;
}

int iwd_no_control(struct fid *fid, int command, void *arg)
{
	IWD_UNUSED(fid);
	IWD_UNUSED(command);
	IWD_UNUSED(arg);
	return -FI_ENOSYS;
}

int iwd_no_ops_open(struct fid *fid, const char *name, uint64_t flags, void **ops, void *context)
{
	IWD_UNUSED(fid);
	IWD_UNUSED(name);
	IWD_UNUSED(flags);
	IWD_UNUSED(ops);
	IWD_UNUSED(context);
	return -FI_ENOSYS;
}

/* ---- fi_ops_cm ---- */

int iwd_no_setname(fid_t fid, void *addr, size_t addrlen)
{
	IWD_UNUSED(fid);
	IWD_UNUSED(addr);
	IWD_UNUSED(addrlen);
	return -FI_ENOSYS;
}

int iwd_no_getpeer(struct fid_ep *ep, void *addr, size_t *addrlen)
{
	IWD_UNUSED(ep);
	IWD_UNUSED(addr);
	IWD_UNUSED(addrlen);
	return -FI_ENOSYS;
}

int iwd_no_connect(struct fid_ep *ep, const void *addr, const void *param, size_t paramlen)
{
	IWD_UNUSED(ep);
	IWD_UNUSED(addr);
	IWD_UNUSED(param);
	IWD_UNUSED(paramlen);
	return -FI_ENOSYS;
}

int iwd_no_listen(struct fid_pep *pep)
{
	IWD_UNUSED(pep);
	return -FI_ENOSYS;
}

int iwd_no_accept(struct fid_ep *ep, const void *param, size_t paramlen)
{
	IWD_UNUSED(ep);
	IWD_UNUSED(param);
	IWD_UNUSED(paramlen);
	return -FI_ENOSYS;
}

int iwd_no_reject(struct fid_pep *pep, fid_t handle, const void *param, size_t paramlen)
{
	IWD_UNUSED(pep);
	IWD_UNUSED(handle);
	IWD_UNUSED(param);
	IWD_UNUSED(paramlen);
	return -FI_ENOSYS;
}

int iwd_no_shutdown(struct fid_ep *ep, uint64_t flags)
{
	IWD_UNUSED(ep);
	IWD_UNUSED(flags);
	return -FI_ENOSYS;
}

int iwd_no_join(struct fid_ep *ep, const void *addr, uint64_t flags, struct fid_mc **mc, void *context)
{
	IWD_UNUSED(ep);
	IWD_UNUSED(addr);
	IWD_UNUSED(flags);
	IWD_UNUSED(mc);
	IWD_UNUSED(context);
	return -FI_ENOSYS;
}

/* ---- fi_ops_ep ---- */

ssize_t iwd_no_cancel(fid_t fid, void *context)
{
	IWD_UNUSED(fid);
	IWD_UNUSED(context);
	return -FI_ENOSYS;
}

int iwd_no_tx_ctx(struct fid_ep *sep, int index, struct fi_tx_attr *attr, struct fid_ep **tx_ep, void *context)
{
	IWD_UNUSED(sep);
	IWD_UNUSED(index);
	IWD_UNUSED(attr);
	IWD_UNUSED(tx_ep);
	IWD_UNUSED(context);
	return -FI_ENOSYS;
}

int iwd_no_rx_ctx(struct fid_ep *sep, int index, struct fi_rx_attr *attr, struct fid_ep **rx_ep, void *context)
{
	IWD_UNUSED(sep);
	IWD_UNUSED(index);
	IWD_UNUSED(attr);
	IWD_UNUSED(rx_ep);
	IWD_UNUSED(context);
	return -FI_ENOSYS;
}

/* ---- fi_ops_atomic ---- */

static ssize_t na_write(struct fid_ep *f, const void *b, size_t n, void *d, fi_addr_t a, uint64_t ad, uint64_t k,
			enum fi_datatype dt, enum fi_op op, void *c)
{
	IWD_UNUSED(f), IWD_UNUSED(b), IWD_UNUSED(n), IWD_UNUSED(d), IWD_UNUSED(a), IWD_UNUSED(ad), IWD_UNUSED(k);
	IWD_UNUSED(dt), IWD_UNUSED(op), IWD_UNUSED(c);
	return -FI_EOPNOTSUPP;
}

static ssize_t na_writev(struct fid_ep *f, const struct fi_ioc *v, void **d, size_t n, fi_addr_t a, uint64_t ad,
			 uint64_t k, enum fi_datatype dt, enum fi_op op, void *c)
{
	IWD_UNUSED(f), IWD_UNUSED(v), IWD_UNUSED(d), IWD_UNUSED(n), IWD_UNUSED(a), IWD_UNUSED(ad), IWD_UNUSED(k);
	IWD_UNUSED(dt), IWD_UNUSED(op), IWD_UNUSED(c);
	return -FI_EOPNOTSUPP;
}

static ssize_t na_writemsg(struct fid_ep *f, const struct fi_msg_atomic *m, uint64_t fl)
{
	IWD_UNUSED(f), IWD_UNUSED(m), IWD_UNUSED(fl);
	return -FI_EOPNOTSUPP;
}

static ssize_t na_inject(struct fid_ep *f, const void *b, size_t n, fi_addr_t a, uint64_t ad, uint64_t k,
			 enum fi_datatype dt, enum fi_op op)
{
	IWD_UNUSED(f), IWD_UNUSED(b), IWD_UNUSED(n), IWD_UNUSED(a), IWD_UNUSED(ad), IWD_UNUSED(k), IWD_UNUSED(dt);
	IWD_UNUSED(op);
	return -FI_EOPNOTSUPP;
}

static ssize_t na_readwrite(struct fid_ep *f, const void *b, size_t n, void *d, void *r, void *rd, fi_addr_t a,
			    uint64_t ad, uint64_t k, enum fi_datatype dt, enum fi_op op, void *c)
{
	IWD_UNUSED(f), IWD_UNUSED(b), IWD_UNUSED(n), IWD_UNUSED(d), IWD_UNUSED(r), IWD_UNUSED(rd), IWD_UNUSED(a);
	IWD_UNUSED(ad), IWD_UNUSED(k), IWD_UNUSED(dt), IWD_UNUSED(op), IWD_UNUSED(c);
	return -FI_EOPNOTSUPP;
}

static ssize_t na_readwritev(struct fid_ep *f, const struct fi_ioc *v, void **d, size_t n, struct fi_ioc *r,
			     void **rd, size_t rn, fi_addr_t a, uint64_t ad, uint64_t k, enum fi_datatype dt,
			     enum fi_op op, void *c)
{
	IWD_UNUSED(f), IWD_UNUSED(v), IWD_UNUSED(d), IWD_UNUSED(n), IWD_UNUSED(r), IWD_UNUSED(rd), IWD_UNUSED(rn);
	IWD_UNUSED(a), IWD_UNUSED(ad), IWD_UNUSED(k), IWD_UNUSED(dt), IWD_UNUSED(op), IWD_UNUSED(c);
	return -FI_EOPNOTSUPP;
}

static ssize_t na_readwritemsg(struct fid_ep *f, const struct fi_msg_atomic *m, struct fi_ioc *r, void **rd,
			       size_t rn, uint64_t fl)
{
	IWD_UNUSED(f), IWD_UNUSED(m), IWD_UNUSED(r), IWD_UNUSED(rd), IWD_UNUSED(rn), IWD_UNUSED(fl);
	return -FI_EOPNOTSUPP;
}

static ssize_t na_compwrite(struct fid_ep *f, const void *b, size_t n, void *d, const void *cp, void *cd, void *r,
			    void *rd, fi_addr_t a, uint64_t ad, uint64_t k, enum fi_datatype dt, enum fi_op op,
			    void *c)
{
	IWD_UNUSED(f), IWD_UNUSED(b), IWD_UNUSED(n), IWD_UNUSED(d), IWD_UNUSED(cp), IWD_UNUSED(cd), IWD_UNUSED(r);
	IWD_UNUSED(rd), IWD_UNUSED(a), IWD_UNUSED(ad), IWD_UNUSED(k), IWD_UNUSED(dt), IWD_UNUSED(op), IWD_UNUSED(c);
	return -FI_EOPNOTSUPP;
}

static ssize_t na_compwritev(struct fid_ep *f, const struct fi_ioc *v, void **d, size_t n, const struct fi_ioc *cv,
			     void **cd, size_t cn, struct fi_ioc *r, void **rd, size_t rn, fi_addr_t a, uint64_t ad,
			     uint64_t k, enum fi_datatype dt, enum fi_op op, void *c)
{
	IWD_UNUSED(f), IWD_UNUSED(v), IWD_UNUSED(d), IWD_UNUSED(n), IWD_UNUSED(cv), IWD_UNUSED(cd), IWD_UNUSED(cn);
	IWD_UNUSED(r), IWD_UNUSED(rd), IWD_UNUSED(rn), IWD_UNUSED(a), IWD_UNUSED(ad), IWD_UNUSED(k), IWD_UNUSED(dt);
	IWD_UNUSED(op), IWD_UNUSED(c);
	return -FI_EOPNOTSUPP;
}

static ssize_t na_compwritemsg(struct fid_ep *f, const struct fi_msg_atomic *m, const struct fi_ioc *cv, void **cd,
			       size_t cn, struct fi_ioc *r, void **rd, size_t rn, uint64_t fl)
{
	IWD_UNUSED(f), IWD_UNUSED(m), IWD_UNUSED(cv), IWD_UNUSED(cd), IWD_UNUSED(cn), IWD_UNUSED(r), IWD_UNUSED(rd);
	IWD_UNUSED(rn), IWD_UNUSED(fl);
	return -FI_EOPNOTSUPP;
}

static int na_valid(struct fid_ep *f, enum fi_datatype dt, enum fi_op op, size_t *count)
{
	IWD_UNUSED(f), IWD_UNUSED(dt), IWD_UNUSED(op), IWD_UNUSED(count);
	return -FI_EOPNOTSUPP;
}

struct fi_ops_atomic iwd_no_atomic_ops = {
	.size = sizeof(struct fi_ops_atomic),
	.write = na_write,
	.writev = na_writev,
	.writemsg = na_writemsg,
	.inject = na_inject,
	.readwrite = na_readwrite,
	.readwritev = na_readwritev,
	.readwritemsg = na_readwritemsg,
	.compwrite = na_compwrite,
	.compwritev = na_compwritev,
	.compwritemsg = na_compwritemsg,
	.writevalid = na_valid,
	.readwritevalid = na_valid,
	.compwritevalid = na_valid,
};
