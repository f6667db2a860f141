/*
 * iwd_progress.c — domain-wide progress (fi_domain(3) FI_PROGRESS_MANUAL):
 * any call that reads a CQ or counter, or finds a queue full, polls every
 * endpoint of the domain through its ops (ep->ops->progress), arms their
 * verbs CQs before a wait, drains the completion channel, and notices a
 * daemon that went away. It knows no endpoint type.
 */
#include <errno.h>
#include <poll.h>
#include <time.h>

#include "iwd.h"
#include "iwd_fastpath.h"
#include "iwd_trace.h"

/* iwd_domain_progress also notes whether the domain serves itself: every
 * endpoint owns its QP's socket (the fast paths, docs/fastpath.md) and has
 * nothing posted to the daemon. Then an empty poll has nobody to give the
 * processor to (the daemon has nothing of ours to do: iwd_idle.c).
 *
 * And whether all the domain waits for is the daemon's work
 * (dom->daemon_wait, iwd_domain_block): no endpoint reads or wants its
 * socket or has operations of the rank's own pending (then everything
 * that completes reaches the verbs CQs, and the daemon signals the armed
 * CQs' channel), and one has a bulk transfer with the daemons: a
 * rendezvous send or Read in flight (ops->bulk), or a bulk spell
 * (docs/fastpath.md: the daemons move its messages). Small messages
 * through the daemon do not count: their waits are a few microseconds,
 * about what a wake-up from the channel costs. Only with
 * FI_IWARPD_IDLE_BLOCK_US set (off by default: docs/libfabric.md
 * "Blocking while the daemon works").
 * Not with a progress thread, which drains the channel itself. */
static int ep_rank_side(const struct iwd_ep *ep)
{
	return ep->fp || !iwd_fprd_with_daemon(ep);
}

static int ep_daemon_work(struct iwd_ep *ep)
{
	return iwd_fprd_in_spell(ep) || (ep->ops->bulk && ep->ops->bulk(ep));
}

void iwd_domain_progress(struct iwd_domain *dom)
{
	struct iwd_list *it, *tmp;
	int self = 0, daemon = 0, rank_side = 0, work = 0;
	int blocking = iwd_env.idle_block_us > 0 && iwd_env.idle_mode == IWD_IDLE_ADAPTIVE && !dom->thread_on;
	iwd_trace_progress();
	iwd_list_foreach_safe(&dom->eps, it, tmp)
	{
		struct iwd_ep *ep = iwd_container_of(it, struct iwd_ep, link);
		ep->ops->progress(ep);
		if (!ep->sq_used && (iwd_fprd_owned(ep) || iwd_fp_owned(ep)))
			self = 1;
		else
			daemon = 1;
		if (blocking) {
			rank_side |= ep_rank_side(ep);
			work |= ep_daemon_work(ep);
		}
	}
	dom->self_served = self && !daemon;
	dom->daemon_wait = blocking && work && !rank_side;
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

/* Whether an endpoint's CQ holds something. */
static int dom_has_completion(struct iwd_domain *dom)
{
	struct iwd_list *it;
	iwd_list_foreach(&dom->eps, it)
	{
		struct iwd_ep *ep = iwd_container_of(it, struct iwd_ep, link);
		if ((ep->tx_cq && (ep->tx_cq->count || ep->tx_cq->nerrs)) ||
		    (ep->rx_cq && (ep->rx_cq->count || ep->rx_cq->nerrs)))
			return 1;
	}
	return 0;
}

/*
 * Waiting for the daemon alone (issue 20, 1 MiB bandwidth): while a bulk
 * transfer is in flight (rendezvous Reads and Write-Records, the socket
 * with the daemon) an empty fi_cq_read yielded, and every yield of both
 * ranks was two context switches on CPUs the two daemons needed: a
 * quarter of the 2-core machine went to the ranks' scheduling (perf,
 * docs/libfabric.md "Waiting: yield or sleep"). Here the rank sleeps on
 * the completion channel instead, as fi_cq_sread does, and is woken once,
 * by the daemon's signal when it writes a completion to an armed CQ.
 * Arm first, then poll once more (what completed before the arming is
 * found here, not waited for), then block; bounded, so that a missed
 * signal (another thread drained the channel) costs at most
 * FI_IWARPD_IDLE_BLOCK_US and the next poll finds it.
 */
int iwd_domain_block(struct iwd_domain *dom, struct iwd_cq *cq)
{
	struct iwd_list *it;
	struct pollfd p;
	struct timespec ts;
	int found, wait;
	iwd_lock(dom);
	if (!dom->daemon_wait || dom->dead) {
		iwd_unlock(dom);
		return 0;
	}
	iwd_domain_drain_chan(dom);
	iwd_list_foreach(&dom->eps, it)
	{
		struct iwd_ep *ep = iwd_container_of(it, struct iwd_ep, link);
		iwd_fprd_park(ep);
		if (ep->vcq)
			iwv_req_notify_cq(ep->vcq, 0);
	}
	iwd_domain_progress(dom);
	found = cq && (cq->count || cq->nerrs);
	/* A completion in another CQ of the domain (this progress's, or one
	 * the application leaves there): not a wait on the daemon alone;
	 * the caller idles as before. */
	wait = dom->daemon_wait && !dom_has_completion(dom);
	p.fd = iwv_comp_channel_fd(dom->chan);
	iwd_unlock(dom);
	if (found)
		return 1;
	if (!wait)
		return 0;
	p.events = POLLIN;
	p.revents = 0;
	ts.tv_sec = iwd_env.idle_block_us / 1000000;
	ts.tv_nsec = (long)(iwd_env.idle_block_us % 1000000) * 1000;
	if (ppoll(&p, 1, &ts, NULL) < 0 && errno != EINTR)
		return 0; /* the caller yields instead */
	return 1;
}
