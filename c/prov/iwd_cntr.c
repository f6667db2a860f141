/*
 * iwd_cntr.c — counters (fi_cntr(3)): success and error counts of the
 * endpoint operations bound to them, read after domain progress; wait with
 * FI_WAIT_FD / FI_WAIT_UNSPEC like CQs.
 */
#include <stdlib.h>
#include <time.h>

#include "iwd.h"
#include "iwd_fastpath.h"

void iwd_cntr_inc(struct iwd_cntr *c)
{
	if (!c)
		return;
	c->value++;
	if (c->wait_obj != FI_WAIT_NONE)
		iwd_wait_signal(c->efd);
}

void iwd_cntr_err(struct iwd_cntr *c)
{
	if (!c)
		return;
	c->err++;
	if (c->wait_obj != FI_WAIT_NONE)
		iwd_wait_signal(c->efd);
}

static uint64_t cntr_read(struct fid_cntr *fid)
{
	struct iwd_cntr *c = iwd_container_of(fid, struct iwd_cntr, cntr_fid);
	uint64_t v;
	int same, self;
	iwd_lock(c->dom);
	iwd_domain_progress(c->dom);
	v = c->value;
	same = v == c->last_read;
	c->last_read = v;
	self = c->dom->self_served;
	iwd_unlock(c->dom);
	/* A reader polling for a threshold: an unchanged value is an empty
	 * poll (iwd_idle.c, as cq_readfrom's). */
	if (same)
		iwd_idle(self);
	else
		iwd_idle_reset();
	return v;
}

static uint64_t cntr_readerr(struct fid_cntr *fid)
{
	struct iwd_cntr *c = iwd_container_of(fid, struct iwd_cntr, cntr_fid);
	uint64_t v;
	iwd_lock(c->dom);
	iwd_domain_progress(c->dom);
	v = c->err;
	iwd_unlock(c->dom);
	return v;
}

static int cntr_add(struct fid_cntr *fid, uint64_t value)
{
	struct iwd_cntr *c = iwd_container_of(fid, struct iwd_cntr, cntr_fid);
	iwd_lock(c->dom);
	c->value += value;
	iwd_unlock(c->dom);
	if (c->wait_obj != FI_WAIT_NONE)
		iwd_wait_signal(c->efd);
	return 0;
}

static int cntr_set(struct fid_cntr *fid, uint64_t value)
{
	struct iwd_cntr *c = iwd_container_of(fid, struct iwd_cntr, cntr_fid);
	iwd_lock(c->dom);
	c->value = value;
	iwd_unlock(c->dom);
	if (c->wait_obj != FI_WAIT_NONE)
		iwd_wait_signal(c->efd);
	return 0;
}

static int cntr_adderr(struct fid_cntr *fid, uint64_t value)
{
	struct iwd_cntr *c = iwd_container_of(fid, struct iwd_cntr, cntr_fid);
	iwd_lock(c->dom);
	c->err += value;
	iwd_unlock(c->dom);
	return 0;
}

static int cntr_seterr(struct fid_cntr *fid, uint64_t value)
{
	struct iwd_cntr *c = iwd_container_of(fid, struct iwd_cntr, cntr_fid);
	iwd_lock(c->dom);
	c->err = value;
	iwd_unlock(c->dom);
	return 0;
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int cntr_wait(struct fid_cntr *fid, uint64_t threshold, int timeout)
{
	struct iwd_cntr *c = iwd_container_of(fid, struct iwd_cntr, cntr_fid);
	int64_t deadline = timeout >= 0 ? now_ms() + timeout : -1;
	uint64_t err0;
	iwd_lock(c->dom);
	err0 = c->err;
	iwd_unlock(c->dom);
	for (;;) {
		int left, done = 0, dead, cap;
		iwd_lock(c->dom);
		iwd_domain_drain_chan(c->dom);
		iwd_domain_progress(c->dom);
		if (c->value >= threshold)
			done = 1;
		else if (c->err != err0)
			done = -1;
		else if (c->wait_obj != FI_WAIT_NONE)
			iwd_domain_arm(c->dom);
		dead = iwd_domain_check(c->dom);
		cap = iwd_fprd_dom_pending(c->dom) ? 1 : 1000; /* the rank's own Writes: iwd_cq.c */
		iwd_unlock(c->dom);
		if (done > 0)
			return 0;
		if (done < 0)
			return -FI_EAVAIL;
		if (dead)
			return -FI_ENODEV;
		left = deadline < 0 ? 1000 : (int)(deadline - now_ms());
		if (left <= 0)
			return -FI_ETIMEDOUT;
		if (c->wait_obj == FI_WAIT_NONE)
			continue;
		if (iwd_wait_block(c->dom, c->efd, c->epfd, left > cap ? cap : left) < 0)
			return -FI_EOTHER;
	}
}

int iwd_cntr_trywait(struct iwd_cntr *c)
{
	int ret = 0;
	iwd_lock(c->dom);
	iwd_domain_drain_chan(c->dom);
	iwd_domain_progress(c->dom);
	iwd_domain_arm(c->dom);
	iwd_unlock(c->dom);
	return ret;
}

static int cntr_control(struct fid *fid, int command, void *arg)
{
	struct iwd_cntr *c = iwd_container_of(fid, struct iwd_cntr, cntr_fid.fid);
	switch (command) {
	case FI_GETWAIT:
		if (c->wait_obj != FI_WAIT_FD || !arg)
			return -FI_EINVAL;
		*(int *)arg = c->epfd;
		return 0;
	case FI_GETWAITOBJ:
		if (!arg)
			return -FI_EINVAL;
		*(enum fi_wait_obj *)arg = c->wait_obj;
		return 0;
	default:
		return -FI_ENOSYS;
	}
}

static int cntr_close(struct fid *fid)
{
	struct iwd_cntr *c = iwd_container_of(fid, struct iwd_cntr, cntr_fid.fid);
	if (c->refs)
		return -FI_EBUSY;
	iwd_wait_fini(c->efd, c->epfd);
	iwd_lock(c->dom);
	c->dom->refs--;
	iwd_unlock(c->dom);
	free(c);
	return 0;
}

static struct fi_ops_cntr cntr_ops = {
	.size = sizeof(struct fi_ops_cntr),
	.read = cntr_read,
	.readerr = cntr_readerr,
	.add = cntr_add,
	.set = cntr_set,
	.wait = cntr_wait,
	.adderr = cntr_adderr,
	.seterr = cntr_seterr,
};

static struct fi_ops cntr_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = cntr_close,
	.bind = iwd_no_bind,
	.control = cntr_control,
	.ops_open = iwd_no_ops_open,
};

int iwd_cntr_open(struct fid_domain *domain, struct fi_cntr_attr *attr, struct fid_cntr **out, void *context)
{
	struct iwd_domain *dom = iwd_container_of(domain, struct iwd_domain, domain_fid);
	struct iwd_cntr *c;
	enum fi_wait_obj w = attr ? attr->wait_obj : FI_WAIT_UNSPEC;
	if (!out)
		return -FI_EINVAL;
	if (attr && attr->events != FI_CNTR_EVENTS_COMP)
		return -FI_ENOSYS;
	if (w != FI_WAIT_NONE && w != FI_WAIT_UNSPEC && w != FI_WAIT_FD)
		return -FI_ENOSYS;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -FI_ENOMEM;
	c->dom = dom;
	c->wait_obj = w == FI_WAIT_UNSPEC ? FI_WAIT_FD : w;
	c->efd = c->epfd = -1;
	if (c->wait_obj != FI_WAIT_NONE && iwd_wait_init(dom, &c->efd, &c->epfd)) {
		free(c);
		return -FI_ENOMEM;
	}
	c->cntr_fid.fid.fclass = FI_CLASS_CNTR;
	c->cntr_fid.fid.context = context;
	c->cntr_fid.fid.ops = &cntr_fi_ops;
	c->cntr_fid.ops = &cntr_ops;
	iwd_lock(dom);
	dom->refs++;
	iwd_unlock(dom);
	*out = &c->cntr_fid;
	return 0;
}
