/*
 * iwd_poll.c — poll sets (fi_poll(3)): fi_poll_open on a domain,
 * fi_poll_add / fi_poll_del of the domain's CQs and counters, and fi_poll,
 * which progresses the domain (as fi_cq_read does under manual progress)
 * and returns the context of each member with something to read:
 *   a CQ that holds completions or error entries;
 *   a counter whose success or error value changed since this poll set
 *   last reported it (its first fi_poll compares with 0, the value of a
 *   new counter; fi_cntr_set/fi_cntr_add to another value count as a
 *   change too, since fi_poll sees the value they left).
 * Contexts beyond count stay unreported (a counter keeps its old
 * snapshot) and come back on the next call. A member holds a reference
 * on its CQ or counter, so fi_close of it returns -FI_EBUSY until
 * fi_poll_del; the poll set holds one on its domain; fi_close of a poll
 * set with members returns -FI_EBUSY (fi_poll(3), "fi_close").
 */
#include <stdlib.h>

#include "iwd.h"

struct iwd_poll_member {
	struct iwd_list link;
	struct fid *fid;            /* FI_CLASS_CQ or FI_CLASS_CNTR */
	struct iwd_cq *cq;          /* one of these two is set */
	struct iwd_cntr *cntr;
	uint64_t seen_value, seen_err; /* the counter when last reported */
};

struct iwd_poll {
	struct fid_poll poll_fid;
	struct iwd_domain *dom;
	struct iwd_list members;    /* struct iwd_poll_member, in fi_poll_add order */
};

/* The member for fid, or NULL; the domain lock is held. */
static struct iwd_poll_member *find_member(struct iwd_poll *ps, const struct fid *fid)
{
	struct iwd_list *it;
	iwd_list_foreach(&ps->members, it)
	{
		struct iwd_poll_member *m = iwd_container_of(it, struct iwd_poll_member, link);
		if (m->fid == fid)
			return m;
	}
	return NULL;
}

static int poll_add(struct fid_poll *pollset, struct fid *event_fid, uint64_t flags)
{
	struct iwd_poll *ps = iwd_container_of(pollset, struct iwd_poll, poll_fid);
	struct iwd_poll_member *m;
	struct iwd_domain *owner;
	IWD_UNUSED(flags);
	if (!event_fid)
		return -FI_EINVAL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -FI_ENOMEM;
	m->fid = event_fid;
	switch (event_fid->fclass) {
	case FI_CLASS_CQ:
		m->cq = iwd_container_of(event_fid, struct iwd_cq, cq_fid.fid);
		owner = m->cq->dom;
		break;
	case FI_CLASS_CNTR:
		m->cntr = iwd_container_of(event_fid, struct iwd_cntr, cntr_fid.fid);
		owner = m->cntr->dom;
		break;
	default:
		IWD_WARN(FI_LOG_DOMAIN, "iwarpd: fi_poll_add: a poll set holds CQs and counters, not fid class %zu\n",
			 event_fid->fclass);
		free(m);
		return -FI_EINVAL;
	}
	if (owner != ps->dom) {
		IWD_WARN(FI_LOG_DOMAIN, "iwarpd: fi_poll_add: the CQ or counter belongs to another domain than the poll set\n");
		free(m);
		return -FI_EINVAL;
	}
	iwd_lock(ps->dom);
	if (find_member(ps, event_fid)) {
		iwd_unlock(ps->dom);
		free(m);
		return -FI_EALREADY;
	}
	if (m->cq)
		m->cq->refs++;
	else
		m->cntr->refs++;
	iwd_list_insert_tail(&ps->members, &m->link);
	iwd_unlock(ps->dom);
	return 0;
}

static int poll_del(struct fid_poll *pollset, struct fid *event_fid, uint64_t flags)
{
	struct iwd_poll *ps = iwd_container_of(pollset, struct iwd_poll, poll_fid);
	struct iwd_poll_member *m;
	IWD_UNUSED(flags);
	iwd_lock(ps->dom);
	m = event_fid ? find_member(ps, event_fid) : NULL;
	if (!m) {
		iwd_unlock(ps->dom);
		return -FI_EINVAL;
	}
	if (m->cq)
		m->cq->refs--;
	else
		m->cntr->refs--;
	iwd_list_remove(&m->link);
	iwd_unlock(ps->dom);
	free(m);
	return 0;
}

/* fi_poll: progress, then the contexts of members with events. */
static int poll_run(struct fid_poll *pollset, void **context, int count)
{
	struct iwd_poll *ps = iwd_container_of(pollset, struct iwd_poll, poll_fid);
	struct iwd_list *it;
	int n = 0, self;
	if (count < 0 || (count && !context))
		return -FI_EINVAL;
	iwd_lock(ps->dom);
	iwd_domain_progress(ps->dom);
	iwd_list_foreach(&ps->members, it)
	{
		struct iwd_poll_member *m = iwd_container_of(it, struct iwd_poll_member, link);
		if (n == count)
			break;
		if (m->cq) {
			if (m->cq->count || m->cq->nerrs)
				context[n++] = m->fid->context;
		} else if (m->cntr->value != m->seen_value || m->cntr->err != m->seen_err) {
			m->seen_value = m->cntr->value;
			m->seen_err = m->cntr->err;
			context[n++] = m->fid->context;
		}
	}
	if (!n && iwd_domain_check_idle(ps->dom))
		n = -FI_ENODEV;
	self = ps->dom->self_served;
	iwd_unlock(ps->dom);
	/* Nothing to read: give the daemon the processor (iwd_idle.c). */
	if (!n)
		iwd_idle(self);
	else
		iwd_idle_reset();
	return n;
}

static int poll_close(struct fid *fid)
{
	struct iwd_poll *ps = iwd_container_of(fid, struct iwd_poll, poll_fid.fid);
	struct iwd_domain *dom = ps->dom;
	iwd_lock(dom);
	if (!iwd_list_empty(&ps->members)) {
		iwd_unlock(dom);
		return -FI_EBUSY;
	}
	dom->refs--;
	iwd_unlock(dom);
	free(ps);
	return 0;
}

static struct fi_ops_poll poll_ops = {
	.size = sizeof(struct fi_ops_poll),
	.poll = poll_run,
	.poll_add = poll_add,
	.poll_del = poll_del,
};

static struct fi_ops poll_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = poll_close,
	.bind = iwd_no_bind,
	.control = iwd_no_control,
	.ops_open = iwd_no_ops_open,
};

/* fi_poll_open (fi_poll(3)): attr->flags is reserved and must be 0. */
int iwd_poll_open(struct fid_domain *domain, struct fi_poll_attr *attr, struct fid_poll **pollset)
{
	struct iwd_domain *dom = iwd_container_of(domain, struct iwd_domain, domain_fid);
	struct iwd_poll *ps;
	if (!pollset)
		return -FI_EINVAL;
	if (attr && attr->flags) {
		IWD_WARN(FI_LOG_DOMAIN, "iwarpd: fi_poll_open: fi_poll_attr.flags is reserved and must be 0\n");
		return -FI_EINVAL;
	}
	ps = calloc(1, sizeof(*ps));
	if (!ps)
		return -FI_ENOMEM;
	ps->dom = dom;
	iwd_list_init(&ps->members);
	ps->poll_fid.fid.fclass = FI_CLASS_POLL;
	ps->poll_fid.fid.ops = &poll_fi_ops;
	ps->poll_fid.ops = &poll_ops;
	iwd_lock(dom);
	dom->refs++;
	iwd_unlock(dom);
	*pollset = &ps->poll_fid;
	return 0;
}
