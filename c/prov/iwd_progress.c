/*
 * iwd_progress.c — domain-wide progress (fi_domain(3) FI_PROGRESS_MANUAL):
 * any call that reads a CQ or counter, or finds a queue full, polls every
 * endpoint of the domain through its ops (ep->ops->progress), arms their
 * verbs CQs before a wait, drains the completion channel, and notices a
 * daemon that went away. It knows no endpoint type.
 */
#include <time.h>

#include "iwd.h"
#include "iwd_fastpath.h"
#include "iwd_trace.h"

/* iwd_domain_progress also notes whether the domain serves itself: every
 * endpoint owns its QP's socket (the fast paths, docs/fastpath.md) and has
 * nothing posted to the daemon. Then an empty poll has nobody to give the
 * processor to (the daemon has nothing of ours to do: iwd_idle.c). */
void iwd_domain_progress(struct iwd_domain *dom)
{
	struct iwd_list *it, *tmp;
	int self = 0, daemon = 0;
	iwd_trace_progress();
	iwd_list_foreach_safe(&dom->eps, it, tmp)
	{
		struct iwd_ep *ep = iwd_container_of(it, struct iwd_ep, link);
		ep->ops->progress(ep);
		if (!ep->sq_used && (iwd_fprd_owned(ep) || iwd_fp_owned(ep)))
			self = 1;
		else
			daemon = 1;
	}
	dom->self_served = self && !daemon;
}

void iwd_domain_arm(struct iwd_domain *dom)
{
	struct iwd_list *it;
	iwd_list_foreach(&dom->eps, it)
	{
		struct iwd_ep *ep = iwd_container_of(it, struct iwd_ep, link);
		if (ep->ops->idle)
			ep->ops->idle(ep);
		if (ep->vcq)
			iwv_req_notify_cq(ep->vcq, 0);
	}
}

void iwd_domain_drain_chan(struct iwd_domain *dom)
{
	struct iwv_cq *cq;
	int i;
	for (i = 0; i < 1024; i++) {
		if (iwv_get_cq_event(dom->chan, &cq, 0) < 0)
			break;
		iwv_ack_cq_events(cq, 1);
	}
}

int iwd_domain_check(struct iwd_domain *dom)
{
	if (dom->dead)
		return -FI_ENODEV;
	if (iwv_session_status(dom->fab->s)) {
		if (!dom->dead)
			IWD_WARN(FI_LOG_DOMAIN, "iwarpd: the daemon went away (%s); restart iwarpd and the application\n",
				 iwv_last_error(dom->fab->s));
		dom->dead = 1;
		return -FI_ENODEV;
	}
	return 0;
}

/*
 * An empty fi_cq_read or fi_poll (a polling MPI rank calls it in a loop)
 * must not cost a system call: iwd_domain_check probes the control socket
 * with poll(2) every time (iwv_session_status forces the probe), 0.8 us on
 * the 2-core test machine, in every pass of a rank that waits for an
 * atomic or RMA completion (docs/mpi.md "One-sided", issue 22). The probe
 * is taken at most every IWD_IDLE_CHECK_NS here: a daemon that went away
 * is still reported (-FI_ENODEV) within a millisecond of polling.
 */
int iwd_domain_check_idle(struct iwd_domain *dom)
{
	struct timespec ts;
	int64_t now;
	if (dom->dead)
		return -FI_ENODEV;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
	if (dom->idle_check_ns && now - dom->idle_check_ns < IWD_IDLE_CHECK_NS)
		return 0;
	dom->idle_check_ns = now;
	return iwd_domain_check(dom);
}
