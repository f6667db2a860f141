/*
 * iwd_cq.c — completion queues (fi_cq(3)): every format, readfrom with
 * FI_SOURCE addresses, readerr with the verbs status as prov_errno, sread
 * and FI_WAIT_FD (FI_GETWAIT: an epoll descriptor over the domain's
 * completion channel and the CQ's own eventfd, iwd_util_wait.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "iwd.h"
#include "iwd_fastpath.h"

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A completion that could not be stored (no memory to grow the ring or for
 * an error entry) is never dropped silently: the CQ reports FI_EOVERRUN
 * (fi_cq(3)) through fi_cq_readerr, once, with the number lost as
 * prov_errno, from an entry it owns (no allocation). */
static void overrun(struct iwd_cq *cq)
{
	if (!cq->lost++) {
		memset(&cq->overrun, 0, sizeof(cq->overrun));
		cq->overrun.e.err = FI_EOVERRUN;
		cq->overrun.src = FI_ADDR_NOTAVAIL;
		iwd_list_insert_tail(&cq->errs, &cq->overrun.link);
		cq->nerrs++;
		if (cq->wait_obj != FI_WAIT_NONE)
			iwd_wait_signal(cq->efd);
	}
	cq->overrun.e.prov_errno = cq->lost > INT32_MAX ? INT32_MAX : (int)cq->lost;
	IWD_WARN(FI_LOG_CQ, "iwarpd: CQ overrun: no memory for a completion; fi_cq_readerr reports FI_EOVERRUN\n");
}

void iwd_cq_push_owned(struct iwd_cq *cq, const void *owner, void *context, uint64_t flags, size_t len, void *buf,
		       uint64_t data, uint64_t tag, fi_addr_t src)
{
	struct iwd_cqe *e;
	if (cq->count == cq->cap) {
		size_t ncap = cq->cap * 2, i;
		struct iwd_cqe *nr = malloc(ncap * sizeof(*nr));
		if (!nr) {
			overrun(cq);
			return;
		}
		for (i = 0; i < cq->count; i++)
			nr[i] = cq->ring[(cq->head + i) % cq->cap];
		free(cq->ring);
		cq->ring = nr;
		cq->cap = ncap;
		cq->head = 0;
	}
	e = &cq->ring[(cq->head + cq->count) % cq->cap];
	e->e.op_context = context;
	e->e.flags = flags;
	e->e.len = len;
	e->e.buf = buf;
	e->e.data = data;
	e->e.tag = tag;
	e->src = src;
	e->owner = owner;
	cq->count++;
	if (cq->count == 1 && cq->wait_obj != FI_WAIT_NONE)
		iwd_wait_signal(cq->efd);
}

void iwd_cq_push_err_owned(struct iwd_cq *cq, const void *owner, void *context, uint64_t flags, size_t len,
			   void *buf, uint64_t data, uint64_t tag, size_t olen, int err, int prov_errno,
			   fi_addr_t src)
{
	struct iwd_cq_err *e = calloc(1, sizeof(*e));
	IWD_INFO(FI_LOG_CQ, "iwarpd: error completion: %s (verbs status %d), flags %#llx, %zu octets, %zu truncated\n",
		 fi_strerror(err), prov_errno, (unsigned long long)flags, len, olen);
	if (!e) {
		overrun(cq);
		return;
	}
	e->e.op_context = context;
	e->e.flags = flags;
	e->e.len = len;
	e->e.buf = buf;
	e->e.data = data;
	e->e.tag = tag;
	e->e.olen = olen;
	e->e.err = err;
	e->e.prov_errno = prov_errno;
	e->src = src;
	e->owner = owner;
	iwd_list_insert_tail(&cq->errs, &e->link);
	cq->nerrs++;
	if (cq->wait_obj != FI_WAIT_NONE)
		iwd_wait_signal(cq->efd);
}

void iwd_cq_purge(struct iwd_cq *cq, const void *owner)
{
	struct iwd_list *it, *tmp;
	size_t i, kept = 0;
	if (!cq || !owner)
		return;
	for (i = 0; i < cq->count; i++) {
		struct iwd_cqe *e = &cq->ring[(cq->head + i) % cq->cap];
		if (e->owner != owner)
			cq->ring[(cq->head + kept++) % cq->cap] = *e;
	}
	cq->count = kept;
	iwd_list_foreach_safe(&cq->errs, it, tmp)
	{
		struct iwd_cq_err *e = iwd_container_of(it, struct iwd_cq_err, link);
		if (e->owner == owner && e != &cq->overrun) {
			iwd_list_remove(it);
			cq->nerrs--;
			free(e);
		}
	}
}

int iwd_cq_has_owned(const struct iwd_cq *cq, const void *owner)
{
	size_t i;
	if (!cq || !owner)
		return 0;
	for (i = 0; i < cq->count; i++)
		if (cq->ring[(cq->head + i) % cq->cap].owner == owner)
			return 1;
	return 0;
}

static void copy_entry(struct iwd_cq *cq, void *dst, const struct iwd_cqe *e)
{
	switch (cq->format) {
	case FI_CQ_FORMAT_CONTEXT: {
		struct fi_cq_entry *c = dst;
		c->op_context = e->e.op_context;
		break;
	}
	case FI_CQ_FORMAT_MSG: {
		struct fi_cq_msg_entry *m = dst;
		m->op_context = e->e.op_context;
		m->flags = e->e.flags;
		m->len = e->e.len;
		break;
	}
	case FI_CQ_FORMAT_DATA: {
		struct fi_cq_data_entry *d = dst;
		d->op_context = e->e.op_context;
		d->flags = e->e.flags;
		d->len = e->e.len;
		d->buf = e->e.buf;
		d->data = e->e.data;
		break;
	}
	default:
		memcpy(dst, &e->e, sizeof(e->e));
		break;
	}
}

static ssize_t cq_readfrom_locked(struct iwd_cq *cq, void *buf, size_t count, fi_addr_t *src)
{
	size_t n = 0;
	if (cq->nerrs)
		return -FI_EAVAIL;
	while (n < count && cq->count) {
		struct iwd_cqe *e = &cq->ring[cq->head];
		copy_entry(cq, (char *)buf + n * cq->entry_size, e);
		if (src)
			src[n] = e->src;
		cq->head = (cq->head + 1) % cq->cap;
		cq->count--;
		n++;
	}
	if (n)
		return (ssize_t)n;
	if (cq->nerrs)
		return -FI_EAVAIL;
	return iwd_domain_check_idle(cq->dom) ? -FI_ENODEV : -FI_EAGAIN;
}

static ssize_t cq_readfrom(struct fid_cq *cq_fid, void *buf, size_t count, fi_addr_t *src)
{
	struct iwd_cq *cq = iwd_container_of(cq_fid, struct iwd_cq, cq_fid);
	ssize_t ret;
	int self, block;
	if (!buf && count)
		return -FI_EINVAL;
	iwd_lock(cq->dom);
	if (!cq->count)
		iwd_domain_progress(cq->dom);
	ret = cq_readfrom_locked(cq, buf, count, src);
	self = cq->dom->self_served;
	block = cq->dom->daemon_wait;
	iwd_unlock(cq->dom);
	/* The daemon is the RNIC and shares the CPUs with us: an empty poll
	 * gives it the processor rather than spinning through its timeslice
	 * (on 2 cores with two daemons, spinning readers cost milliseconds),
	 * unless the domain serves itself; how, iwd_idle.c. While all it
	 * waits for is the daemon's work, it blocks on the completion channel
	 * until the daemon signals one (iwd_progress.c iwd_domain_block). */
	if (ret == -FI_EAGAIN) {
		if (!block || !iwd_idle_block_due() || !iwd_domain_block(cq->dom, cq))
			iwd_idle(self);
	} else
		iwd_idle_reset();
	return ret;
}

static ssize_t cq_read(struct fid_cq *cq_fid, void *buf, size_t count)
{
	return cq_readfrom(cq_fid, buf, count, NULL);
}

static ssize_t cq_readerr(struct fid_cq *cq_fid, struct fi_cq_err_entry *buf, uint64_t flags)
{
	struct iwd_cq *cq = iwd_container_of(cq_fid, struct iwd_cq, cq_fid);
	struct iwd_cq_err *e, o;
	size_t err_data_size;
	void *err_data;
	IWD_UNUSED(flags);
	if (!buf)
		return -FI_EINVAL;
	iwd_lock(cq->dom);
	if (!cq->nerrs)
		iwd_domain_progress(cq->dom);
	if (!cq->nerrs) {
		iwd_unlock(cq->dom);
		return -FI_EAGAIN;
	}
	e = iwd_container_of(cq->errs.next, struct iwd_cq_err, link);
	iwd_list_remove(&e->link);
	cq->nerrs--;
	if (e == &cq->overrun) {
		/* Copied under the lock: it is the CQ's, reused by the next overrun. */
		o = cq->overrun;
		cq->lost = 0;
		e = &o;
	}
	iwd_unlock(cq->dom);
	/* API >= 1.5: keep the caller's err_data buffer; we have none to give. */
	err_data = buf->err_data;
	err_data_size = buf->err_data_size;
	if (FI_VERSION_GE(cq->dom->api_version, FI_VERSION(1, 5))) {
		*buf = e->e;
		buf->err_data = err_data;
		buf->err_data_size = 0;
		IWD_UNUSED(err_data_size);
	} else {
		memcpy(buf, &e->e, offsetof(struct fi_cq_err_entry, err_data_size));
	}
	if (e != &o)
		free(e);
	return 1;
}

static ssize_t cq_sreadfrom(struct fid_cq *cq_fid, void *buf, size_t count, fi_addr_t *src, const void *cond,
			    int timeout)
{
	struct iwd_cq *cq = iwd_container_of(cq_fid, struct iwd_cq, cq_fid);
	int64_t deadline = timeout >= 0 ? now_ms() + timeout : -1;
	ssize_t ret;
	int i;
	IWD_UNUSED(cond);
	if (cq->wait_obj == FI_WAIT_NONE)
		return -FI_EINVAL;
	for (i = 0;; i++) {
		int left, cap;
		iwd_lock(cq->dom);
		iwd_domain_drain_chan(cq->dom);
		iwd_domain_progress(cq->dom);
		ret = cq_readfrom_locked(cq, buf, count, src);
		if (ret == -FI_EAGAIN) {
			iwd_domain_arm(cq->dom);
			iwd_domain_progress(cq->dom);
			ret = cq_readfrom_locked(cq, buf, count, src);
		}
		/* The rank's own Writes complete only by its progress (an ACK
		 * or a hand-back, iwd_fastpath_rma.c): wake soon. */
		cap = iwd_fprd_dom_pending(cq->dom) ? 1 : 1000;
		iwd_unlock(cq->dom);
		if (ret != -FI_EAGAIN)
			return ret;
		/* fi_cq_signal (fi_cq(3)): the blocked read returns at once. */
		if (__atomic_exchange_n(&cq->signaled, 0, __ATOMIC_ACQ_REL))
			return -FI_EAGAIN;
		left = deadline < 0 ? 1000 : (int)(deadline - now_ms());
		if (left <= 0)
			return -FI_EAGAIN;
		/* Wake at least every second to notice a dead daemon. */
		if (iwd_wait_block(cq->dom, cq->efd, cq->epfd, left > cap ? cap : left) < 0)
			return -FI_EOTHER;
	}
}

static ssize_t cq_sread(struct fid_cq *cq_fid, void *buf, size_t count, const void *cond, int timeout)
{
	return cq_sreadfrom(cq_fid, buf, count, NULL, cond, timeout);
}

static int cq_signal(struct fid_cq *cq_fid)
{
	struct iwd_cq *cq = iwd_container_of(cq_fid, struct iwd_cq, cq_fid);
	__atomic_store_n(&cq->signaled, 1, __ATOMIC_RELEASE);
	iwd_wait_signal(cq->efd);
	return 0;
}

static const char *cq_strerror(struct fid_cq *cq_fid, int prov_errno, const void *err_data, char *buf, size_t len)
{
	static const char *names[] = {
		[0] = "success",
		[1] = "local length error",
		[2] = "local QP operation error",
		[4] = "local protection error",
		[5] = "work request flushed",
		[7] = "bad response",
		[8] = "local access error",
		[9] = "remote invalid request",
		[10] = "remote access error",
		[11] = "remote operation error",
		[12] = "transport retry counter exceeded (the peer is gone or does not acknowledge; on RDM and "
		       "DGRAM endpoints also when the ranks' FI_IWARPD_DGRAM_CRC differ)",
		[13] = "RNR retry counter exceeded",
		[16] = "remote aborted",
		[19] = "fatal error (is the iwarpd daemon still running?)",
		[20] = "response timeout",
		[21] = "general error",
	};
	const char *s = "unknown";
	IWD_UNUSED(cq_fid);
	IWD_UNUSED(err_data);
	if (prov_errno >= 0 && (size_t)prov_errno < sizeof(names) / sizeof(names[0]) && names[prov_errno])
		s = names[prov_errno];
	else if (prov_errno < 0)
		s = fi_strerror(-prov_errno);
	if (buf && len) {
		snprintf(buf, len, "iwarpd: %s (verbs status %d)", s, prov_errno);
		return buf;
	}
	return s;
}

int iwd_cq_trywait(struct iwd_cq *cq)
{
	int ret = 0;
	iwd_lock(cq->dom);
	iwd_domain_drain_chan(cq->dom);
	iwd_domain_progress(cq->dom);
	if (cq->count || cq->nerrs) {
		ret = -FI_EAGAIN;
	} else {
		iwd_domain_arm(cq->dom);
		iwd_domain_progress(cq->dom);
		if (cq->count || cq->nerrs)
			ret = -FI_EAGAIN;
	}
	iwd_unlock(cq->dom);
	return ret;
}

static int cq_control(struct fid *fid, int command, void *arg)
{
	struct iwd_cq *cq = iwd_container_of(fid, struct iwd_cq, cq_fid.fid);
	switch (command) {
	case FI_GETWAIT:
		if (cq->wait_obj != FI_WAIT_FD || !arg)
			return -FI_EINVAL;
		*(int *)arg = cq->epfd;
		return 0;
	case FI_GETWAITOBJ:
		if (!arg)
			return -FI_EINVAL;
		*(enum fi_wait_obj *)arg = cq->wait_obj;
		return 0;
	default:
		return -FI_ENOSYS;
	}
}

static int cq_close(struct fid *fid)
{
	struct iwd_cq *cq = iwd_container_of(fid, struct iwd_cq, cq_fid.fid);
	struct iwd_list *it, *tmp;
	if (cq->refs)
		return -FI_EBUSY;
	iwd_list_foreach_safe(&cq->errs, it, tmp)
	{
		iwd_list_remove(it);
		if (it != &cq->overrun.link)
			free(iwd_container_of(it, struct iwd_cq_err, link));
	}
	iwd_wait_fini(cq->efd, cq->epfd);
	iwd_lock(cq->dom);
	cq->dom->refs--;
	iwd_unlock(cq->dom);
	free(cq->ring);
	free(cq);
	return 0;
}

static struct fi_ops_cq cq_ops = {
	.size = sizeof(struct fi_ops_cq),
	.read = cq_read,
	.readfrom = cq_readfrom,
	.readerr = cq_readerr,
	.sread = cq_sread,
	.sreadfrom = cq_sreadfrom,
	.signal = cq_signal,
	.strerror = cq_strerror,
};

static struct fi_ops cq_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = cq_close,
	.bind = iwd_no_bind,
	.control = cq_control,
	.ops_open = iwd_no_ops_open,
};

int iwd_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **out, void *context)
{
	struct iwd_domain *dom = iwd_container_of(domain, struct iwd_domain, domain_fid);
	struct iwd_cq *cq;
	size_t esize;
	int ret;

	if (!attr || !out)
		return -FI_EINVAL;
	switch (attr->format) {
	case FI_CQ_FORMAT_UNSPEC:
	case FI_CQ_FORMAT_CONTEXT:
		esize = sizeof(struct fi_cq_entry);
		break;
	case FI_CQ_FORMAT_MSG:
		esize = sizeof(struct fi_cq_msg_entry);
		break;
	case FI_CQ_FORMAT_DATA:
		esize = sizeof(struct fi_cq_data_entry);
		break;
	case FI_CQ_FORMAT_TAGGED:
		esize = sizeof(struct fi_cq_tagged_entry);
		break;
	default:
		return -FI_EINVAL;
	}
	switch (attr->wait_obj) {
	case FI_WAIT_NONE:
	case FI_WAIT_UNSPEC:
	case FI_WAIT_FD:
		break;
	case FI_WAIT_SET:
	case FI_WAIT_MUTEX_COND:
	case FI_WAIT_YIELD:
	case FI_WAIT_POLLFD:
	default:
		return -FI_ENOSYS;
	}
	if (attr->flags & ~(uint64_t)FI_AFFINITY)
		return -FI_EINVAL;
	cq = calloc(1, sizeof(*cq));
	if (!cq)
		return -FI_ENOMEM;
	cq->dom = dom;
	cq->format = attr->format == FI_CQ_FORMAT_UNSPEC ? FI_CQ_FORMAT_CONTEXT : attr->format;
	cq->entry_size = esize;
	cq->wait_obj = attr->wait_obj == FI_WAIT_UNSPEC ? FI_WAIT_FD : attr->wait_obj;
	cq->cap = attr->size ? attr->size : 1024;
	cq->ring = calloc(cq->cap, sizeof(*cq->ring));
	iwd_list_init(&cq->errs);
	cq->efd = cq->epfd = -1;
	if (!cq->ring) {
		free(cq);
		return -FI_ENOMEM;
	}
	if (cq->wait_obj != FI_WAIT_NONE) {
		ret = iwd_wait_init(dom, &cq->efd, &cq->epfd);
		if (ret) {
			free(cq->ring);
			free(cq);
			return ret;
		}
	}
	cq->cq_fid.fid.fclass = FI_CLASS_CQ;
	cq->cq_fid.fid.context = context;
	cq->cq_fid.fid.ops = &cq_fi_ops;
	cq->cq_fid.ops = &cq_ops;
	iwd_lock(dom);
	dom->refs++;
	iwd_unlock(dom);
	*out = &cq->cq_fid;
	return 0;
}
