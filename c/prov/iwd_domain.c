/*
 * iwd_domain.c — the domain (fi_domain(3)): a protection domain and a
 * completion channel in the fabric's session, staging memory for
 * rendezvous of unregistered buffers (its bookkeeping; the memory comes at
 * its first use, iwd_buf.c), and the FI_IWARPD_PROGRESS_THREAD
 * (domain-wide progress itself is iwd_progress.c).
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "fi_ext_iwarpd.h"
#include "iwd.h"

/* FI_IWARPD_PROGRESS_THREAD: advances rendezvous steps while the
 * application computes. It sleeps on the completion channel with every
 * endpoint's CQ armed, so an idle domain costs nothing. */
static void *progress_thread(void *arg)
{
	struct iwd_domain *dom = arg;
	struct pollfd pfd[2];
	pfd[0].fd = iwv_comp_channel_fd(dom->chan);
	pfd[0].events = POLLIN;
	pfd[1].fd = dom->stop_fd;
	pfd[1].events = POLLIN;
	for (;;) {
		iwd_lock(dom);
		if (dom->thread_stop) {
			iwd_unlock(dom);
			break;
		}
		iwd_domain_drain_chan(dom);
		iwd_domain_progress(dom);
		iwd_domain_arm(dom);
		iwd_domain_progress(dom);
		iwd_unlock(dom);
		if (poll(pfd, 2, 100) < 0 && errno != EINTR)
			break;
		if (pfd[1].revents)
			break;
	}
	return NULL;
}

static int domain_close(struct fid *fid)
{
	struct iwd_domain *dom = iwd_container_of(fid, struct iwd_domain, domain_fid.fid);
	if (dom->refs || !iwd_list_empty(&dom->eps))
		return -FI_EBUSY;
	if (dom->thread_on) {
		uint64_t one = 1;
		iwd_lock(dom);
		dom->thread_stop = 1;
		iwd_unlock(dom);
		if (write(dom->stop_fd, &one, sizeof(one)) < 0)
			IWD_WARN(FI_LOG_DOMAIN, "iwarpd: stopping the progress thread: %s\n", strerror(errno));
		pthread_join(dom->thread, NULL);
		close(dom->stop_fd);
	}
	iwd_rcache_fini(&dom->rcache);
	iwd_stage_fini(dom);
	if (dom->chan)
		iwv_destroy_comp_channel(dom->chan);
	if (dom->pd)
		iwv_dealloc_pd(dom->pd);
	pthread_mutex_lock(&dom->fab->lock);
	dom->fab->refs--;
	pthread_mutex_unlock(&dom->fab->lock);
	pthread_mutex_destroy(&dom->lock);
	free(dom);
	return 0;
}

static int domain_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	IWD_UNUSED(fid);
	IWD_UNUSED(flags);
	if (bfid->fclass == FI_CLASS_EQ)
		return 0; /* asynchronous MR events are not used: registration is synchronous */
	return -FI_EINVAL;
}

static int scalable_ep(struct fid_domain *domain, struct fi_info *info, struct fid_ep **sep, void *context)
{
	IWD_UNUSED(domain);
	IWD_UNUSED(info);
	IWD_UNUSED(sep);
	IWD_UNUSED(context);
	return -FI_ENOSYS;
}

static int stx_ctx(struct fid_domain *domain, struct fi_tx_attr *attr, struct fid_stx **stx, void *context)
{
	IWD_UNUSED(domain);
	IWD_UNUSED(attr);
	IWD_UNUSED(stx);
	IWD_UNUSED(context);
	return -FI_ENOSYS;
}

static struct fi_ops_domain domain_ops = {
	.size = sizeof(struct fi_ops_domain),
	.av_open = iwd_av_open,
	.cq_open = iwd_cq_open,
	.endpoint = iwd_ep_open,
	.scalable_ep = scalable_ep,
	.cntr_open = iwd_cntr_open,
	.poll_open = iwd_poll_open,
	.stx_ctx = stx_ctx,
	.srx_ctx = iwd_srx_open, /* MSG endpoints (iwd_srx.c) */
	.query_atomic = iwd_query_atomic,
};

static struct fi_ops_mr mr_ops = {
	.size = sizeof(struct fi_ops_mr),
	.reg = iwd_mr_reg,
	.regv = iwd_mr_regv,
	.regattr = iwd_mr_regattr,
};

/* FI_IWARPD_STATS_OPS (fi_ext_iwarpd.h): the session's control round
 * trips and the registration cache's counters. */
static void stats_get(struct fid_domain *domain, struct fi_iwarpd_stats *out)
{
	struct iwd_domain *dom = iwd_container_of(domain, struct iwd_domain, domain_fid);
	struct iwv_session_stats ss;
	iwv_session_stats(dom->fab->s, &ss);
	iwd_lock(dom);
	out->control_calls = ss.control_calls;
	out->reg_mr_calls = ss.reg_mr_calls;
	out->dereg_mr_calls = ss.dereg_mr_calls;
	out->mr_cache_hits = dom->rcache.hits;
	out->mr_cache_misses = dom->rcache.misses;
	out->mr_cache_entries = dom->rcache.n;
	out->cts_offered = dom->cts.offered;
	out->cts_accepted = dom->cts.accepted;
	out->cts_stale = dom->cts.stale;
	out->cts_used = dom->cts.used;
	out->cts_declined = dom->cts.declined;
	out->cts_done = dom->cts.done;
	out->cts_done_unexp = dom->cts.done_unexp;
	out->credit_granted = dom->cts.credit_granted;
	out->credit_taken = dom->cts.credit_taken;
	out->credit_used = dom->cts.credit_used;
	out->credit_done = dom->cts.credit_done;
	iwd_unlock(dom);
}

static struct fi_iwarpd_stats_ops stats_ops = {
	.size = sizeof(struct fi_iwarpd_stats_ops),
	.get = stats_get,
};

static int domain_ops_open(struct fid *fid, const char *name, uint64_t flags, void **ops, void *context)
{
	IWD_UNUSED(fid);
	IWD_UNUSED(flags);
	IWD_UNUSED(context);
	if (!name || !ops || strcmp(name, FI_IWARPD_STATS_OPS))
		return -FI_ENOSYS;
	*ops = &stats_ops;
	return 0;
}

static struct fi_ops domain_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = domain_close,
	.bind = domain_bind,
	.control = iwd_no_control,
	.ops_open = domain_ops_open,
};

int iwd_domain_open(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **out, void *context)
{
	struct iwd_fabric *fab = iwd_container_of(fabric, struct iwd_fabric, fabric_fid);
	struct iwd_domain *dom;
	int ret;

	if (info && info->domain_attr && info->domain_attr->name &&
	    strcmp(info->domain_attr->name, iwv_device_name(fab->s))) {
		IWD_WARN(FI_LOG_DOMAIN, "iwarpd: no domain %s (the daemon's device is %s)\n", info->domain_attr->name,
			 iwv_device_name(fab->s));
		return -FI_EINVAL;
	}
	dom = calloc(1, sizeof(*dom));
	if (!dom)
		return -FI_ENOMEM;
	dom->fab = fab;
	pthread_mutex_init(&dom->lock, NULL);
	iwd_list_init(&dom->eps);
	dom->caps = info ? info->caps : 0;
	dom->api_version = fabric->api_version;
	dom->mr_mode = info && info->domain_attr ? (uint64_t)info->domain_attr->mr_mode : 0;
	pthread_mutex_lock(&fab->lock);
	ret = iwv_alloc_pd(fab->s, &dom->pd);
	if (!ret)
		ret = iwv_create_comp_channel(fab->s, &dom->chan);
	pthread_mutex_unlock(&fab->lock);
	if (ret) {
		IWD_WARN(FI_LOG_DOMAIN, "iwarpd: opening a domain: %s\n", iwv_last_error(fab->s));
		ret = iwd_errno(ret);
		goto fail;
	}
	ret = iwd_stage_init(dom, iwd_env.staging);
	if (ret)
		goto fail;
	iwd_rcache_init(&dom->rcache, iwd_env.mr_cache);
	dom->domain_fid.fid.fclass = FI_CLASS_DOMAIN;
	dom->domain_fid.fid.context = context;
	dom->domain_fid.fid.ops = &domain_fi_ops;
	dom->domain_fid.ops = &domain_ops;
	dom->domain_fid.mr = &mr_ops;
	if (iwd_env.progress_thread) {
		dom->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (dom->stop_fd >= 0 && pthread_create(&dom->thread, NULL, progress_thread, dom) == 0)
			dom->thread_on = 1;
		else
			IWD_WARN(FI_LOG_DOMAIN, "iwarpd: no progress thread: %s\n", strerror(errno));
	}
	pthread_mutex_lock(&fab->lock);
	fab->refs++;
	pthread_mutex_unlock(&fab->lock);
	*out = &dom->domain_fid;
	return 0;
fail:
	iwd_stage_fini(dom);
	if (dom->chan)
		iwv_destroy_comp_channel(dom->chan);
	if (dom->pd)
		iwv_dealloc_pd(dom->pd);
	pthread_mutex_destroy(&dom->lock);
	free(dom);
	return ret;
}
