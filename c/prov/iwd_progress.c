/*
 * iwd_progress.c — domain-wide progress (fi_domain(3) FI_PROGRESS_MANUAL):
 * any call that reads a CQ or counter, or finds a queue full, polls every
 * endpoint of the domain through its ops (ep->ops->progress), arms their
 * verbs CQs before a wait, drains the completion channel, and notices a
 * daemon that went away. It knows no endpoint type.
 */
#include "iwd.h"

void iwd_domain_progress(struct iwd_domain *dom)
{
	struct iwd_list *it, *tmp;
	iwd_list_foreach_safe(&dom->eps, it, tmp)
	{
		struct iwd_ep *ep = iwd_container_of(it, struct iwd_ep, link);
		ep->ops->progress(ep);
	}
}

void iwd_domain_arm(struct iwd_domain *dom)
{
	struct iwd_list *it;
	iwd_list_foreach(&dom->eps, it)
	{
		struct iwd_ep *ep = iwd_container_of(it, struct iwd_ep, link);
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
