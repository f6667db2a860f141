/*
 * iwd_ep_noops.c — the fi_ops_tagged (fi_tagged(3)) and fi_ops_rma
 * (fi_rma(3)) tables of endpoint types that do not offer those
 * capabilities: every call returns -FI_ENOSYS, never crashes on a NULL
 * pointer.
 */
#include "iwd.h"

static ssize_t nt_recv(struct fid_ep *e, void *b, size_t l, void *d, fi_addr_t s, uint64_t t, uint64_t i, void *c)
{
	(void)e, (void)b, (void)l, (void)d, (void)s, (void)t, (void)i, (void)c;
	return -FI_ENOSYS;
}
static ssize_t nt_recvv(struct fid_ep *e, const struct iovec *v, void **d, size_t n, fi_addr_t s, uint64_t t,
			uint64_t i, void *c)
{
	(void)e, (void)v, (void)d, (void)n, (void)s, (void)t, (void)i, (void)c;
	return -FI_ENOSYS;
}
static ssize_t nt_recvmsg(struct fid_ep *e, const struct fi_msg_tagged *m, uint64_t f)
{
	(void)e, (void)m, (void)f;
	return -FI_ENOSYS;
}
static ssize_t nt_send(struct fid_ep *e, const void *b, size_t l, void *d, fi_addr_t a, uint64_t t, void *c)
{
	(void)e, (void)b, (void)l, (void)d, (void)a, (void)t, (void)c;
	return -FI_ENOSYS;
}
static ssize_t nt_sendv(struct fid_ep *e, const struct iovec *v, void **d, size_t n, fi_addr_t a, uint64_t t, void *c)
{
	(void)e, (void)v, (void)d, (void)n, (void)a, (void)t, (void)c;
	return -FI_ENOSYS;
}
static ssize_t nt_sendmsg(struct fid_ep *e, const struct fi_msg_tagged *m, uint64_t f)
{
	(void)e, (void)m, (void)f;
	return -FI_ENOSYS;
}
static ssize_t nt_inject(struct fid_ep *e, const void *b, size_t l, fi_addr_t a, uint64_t t)
{
	(void)e, (void)b, (void)l, (void)a, (void)t;
	return -FI_ENOSYS;
}
static ssize_t nt_senddata(struct fid_ep *e, const void *b, size_t l, void *d, uint64_t x, fi_addr_t a, uint64_t t,
			   void *c)
{
	(void)e, (void)b, (void)l, (void)d, (void)x, (void)a, (void)t, (void)c;
	return -FI_ENOSYS;
}
static ssize_t nt_injectdata(struct fid_ep *e, const void *b, size_t l, uint64_t x, fi_addr_t a, uint64_t t)
{
	(void)e, (void)b, (void)l, (void)x, (void)a, (void)t;
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
	(void)e, (void)b, (void)l, (void)d, (void)a, (void)ad, (void)k, (void)c;
	return -FI_ENOSYS;
}
static ssize_t nr_w(struct fid_ep *e, const void *b, size_t l, void *d, fi_addr_t a, uint64_t ad, uint64_t k, void *c)
{
	(void)e, (void)b, (void)l, (void)d, (void)a, (void)ad, (void)k, (void)c;
	return -FI_ENOSYS;
}
static ssize_t nr_v(struct fid_ep *e, const struct iovec *v, void **d, size_t n, fi_addr_t a, uint64_t ad, uint64_t k,
		    void *c)
{
	(void)e, (void)v, (void)d, (void)n, (void)a, (void)ad, (void)k, (void)c;
	return -FI_ENOSYS;
}
static ssize_t nr_msg(struct fid_ep *e, const struct fi_msg_rma *m, uint64_t f)
{
	(void)e, (void)m, (void)f;
	return -FI_ENOSYS;
}
static ssize_t nr_inject(struct fid_ep *e, const void *b, size_t l, fi_addr_t a, uint64_t ad, uint64_t k)
{
	(void)e, (void)b, (void)l, (void)a, (void)ad, (void)k;
	return -FI_ENOSYS;
}
static ssize_t nr_wdata(struct fid_ep *e, const void *b, size_t l, void *d, uint64_t x, fi_addr_t a, uint64_t ad,
			uint64_t k, void *c)
{
	(void)e, (void)b, (void)l, (void)d, (void)x, (void)a, (void)ad, (void)k, (void)c;
	return -FI_ENOSYS;
}
static ssize_t nr_idata(struct fid_ep *e, const void *b, size_t l, uint64_t x, fi_addr_t a, uint64_t ad, uint64_t k)
{
	(void)e, (void)b, (void)l, (void)x, (void)a, (void)ad, (void)k;
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
