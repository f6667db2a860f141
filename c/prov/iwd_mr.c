/*
 * iwd_mr.c — memory registration (fi_mr(3)). Any application memory (heap,
 * stack, static) is registered with the daemon through iwv_reg_mr, which
 * reaches it through the /proc/self/mem the session handed over at hello
 * (docs/memory-registration.md; a libiwverbs buffer is mapped
 * zero-copy instead). Keys are the daemon's STags (FI_MR_PROV_KEY) and
 * addresses are virtual (FI_MR_VIRT_ADDR).
 *
 * If the daemon cannot register the range and the application asked only
 * for local access (FI_SEND/FI_RECV/FI_READ/FI_WRITE), the MR is kept
 * local-only: transfers through it are staged through bounce memory.
 *
 * Atomic targets (fi_atomic(3)): in a domain opened with FI_ATOMIC an MR
 * with FI_REMOTE_WRITE is registered with remote atomic access. The daemon
 * executes atomics with CPU atomic instructions on a shared mapping, so
 * process memory cannot take them (EOPNOTSUPP, docs/memory-registration.md):
 * the provider then adopts the MR's whole pages in place into the
 * session's arena (iwv_adopt_pages: same address, same contents, now a
 * sparse memfd shared with the daemon, every page at file offset = its
 * address) unless FI_IWARPD_ATOMIC_ADOPT=0 or they hold a shared mapping
 * (MAP_SHARED, proc(5) /proc/self/maps "s"): moving those into a memfd of
 * this process alone would silently unshare them from every other process
 * mapping the same object (Open MPI's osc rdma keeps its window state in
 * such a segment when a node runs several ranks). Otherwise the MR takes
 * RMA but not atomics (FI_EACCES at the initiator).
 *
 * One arena, not a memfd per MR: a registration cache (Open MPI's grdma
 * under btl ofi) registers overlapping page ranges — a window over pages
 * an earlier message buffer's registration adopted in part — and one MR
 * must be one range of one file. Adopted pages go back to private memory
 * when the last MR on the arena covering them closes (iwv_release_pages).
 * The application may unmap adopted pages while MRs on them live (the
 * registration cache deregisters a freed buffer lazily, after the
 * munmap(2) of free(3)), and the kernel may map something else there:
 * libiwverbs counts a page as adopted only while it is the arena at its
 * own offset (iwv_buffer_mapped), so new memory there is registered, and
 * adopted, as new memory, and a release never touches it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "iwd.h"

#define IWD_MR_ACCESS (FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)

/* The live MRs of the process, sorted by address: a desc is looked up here
 * before it is dereferenced, so that an application's bogus desc (a
 * pointer that never was, or no longer is, an MR of this provider) fails
 * the call with -FI_EINVAL instead of crashing the application
 * (docs/libfabric.md "Failures"; issue 18). A binary search under a
 * mutex of its own (a leaf lock) per descriptor posted. */
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static const struct iwd_mr **live;
static size_t live_n, live_cap;

/* live_find: the index of mr in live, or where it would go (live_mu held). */
static size_t live_find(const void *mr)
{
	size_t lo = 0, hi = live_n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if ((uintptr_t)live[mid] < (uintptr_t)mr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int live_add(const struct iwd_mr *mr)
{
	size_t i;
	pthread_mutex_lock(&live_mu);
	if (live_n == live_cap) {
		size_t ncap = live_cap ? live_cap * 2 : 64;
		const struct iwd_mr **nl = realloc(live, ncap * sizeof(*nl));
		if (!nl) {
			pthread_mutex_unlock(&live_mu);
			return -FI_ENOMEM;
		}
		live = nl;
		live_cap = ncap;
	}
	i = live_find(mr);
	memmove(&live[i + 1], &live[i], (live_n - i) * sizeof(*live));
	live[i] = mr;
	live_n++;
	pthread_mutex_unlock(&live_mu);
	return 0;
}

static void live_del(const struct iwd_mr *mr)
{
	size_t i;
	pthread_mutex_lock(&live_mu);
	i = live_find(mr);
	if (i < live_n && live[i] == mr) {
		memmove(&live[i], &live[i + 1], (live_n - i - 1) * sizeof(*live));
		live_n--;
	}
	if (!live_n) {
		/* The table goes with the last MR: libfabric dlcloses the
		 * provider at fi_fini, and a table left behind would be a leak. */
		free(live);
		live = NULL;
		live_cap = 0;
	}
	pthread_mutex_unlock(&live_mu);
}

static int live_has(const void *desc)
{
	size_t i;
	int found;
	pthread_mutex_lock(&live_mu);
	i = live_find(desc);
	found = i < live_n && (const void *)live[i] == desc;
	pthread_mutex_unlock(&live_mu);
	return found;
}

int iwd_check_iov(const struct iovec *iov, void **desc, size_t count)
{
	size_t i;
	if (count && !iov)
		return -FI_EINVAL;
	for (i = 0; i < count; i++) {
		if (!iov[i].iov_base && iov[i].iov_len)
			return -FI_EINVAL;
		if (desc && desc[i] && !live_has(desc[i]))
			return -FI_EINVAL;
	}
	return 0;
}

static int mr_close(struct fid *fid)
{
	struct iwd_mr *mr = iwd_container_of(fid, struct iwd_mr, mr_fid.fid);
	int ret = 0;
	if (mr->vmr) {
		ret = iwv_dereg_mr(mr->vmr);
		if (ret && ret != -ENODEV) {
			IWD_WARN(FI_LOG_MR, "iwarpd: deregistering %p+%zu: %s\n", mr->addr, mr->len,
				 iwv_last_error(mr->dom->fab->s));
		}
	}
	if (mr->arena) /* the pages no other MR on the arena covers go back */
		iwv_release_pages(mr->dom->fab->s, mr->addr, mr->len);
	live_del(mr);
	iwd_lock(mr->dom);
	mr->dom->refs--;
	iwd_unlock(mr->dom);
	free(mr);
	return 0;
}

/* Registers mr with remote atomic access if it can (see the file comment). */
static int reg_atomic(struct iwd_domain *dom, struct iwd_mr *mr, int vacc)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	char *lo = (char *)((uintptr_t)mr->addr & ~(page - 1));
	char *hi = (char *)(((uintptr_t)mr->addr + mr->len + page - 1) & ~(page - 1));
	int ret = iwv_reg_mr(dom->pd, mr->addr, mr->len, vacc | IWV_ACCESS_REMOTE_ATOMIC, &mr->vmr);
	if (ret != -EOPNOTSUPP) /* inside adopted pages already; or not a matter of atomics */
		goto done;
	if (iwd_env.atomic_adopt) {
		ret = iwv_adopt_pages(dom->fab->s, lo, (size_t)(hi - lo));
		if (ret == 0) {
			ret = iwv_reg_mr(dom->pd, mr->addr, mr->len, vacc | IWV_ACCESS_REMOTE_ATOMIC, &mr->vmr);
			if (ret == 0)
				goto done;
			iwv_release_pages(dom->fab->s, lo, (size_t)(hi - lo));
			if (ret != -EOPNOTSUPP)
				goto done; /* a limit, say: the plain registration would be refused too */
		}
		IWD_INFO(FI_LOG_MR, "iwarpd: %p+%zu: its pages cannot be adopted as an atomic target (%s)\n", mr->addr,
			 mr->len, iwv_last_error(dom->fab->s));
	}
	IWD_INFO(FI_LOG_MR,
		 "iwarpd: %p+%zu is registered without remote atomic access: atomics targeting it complete with "
		 "FI_EACCES (FI_IWARPD_ATOMIC_ADOPT=1 adopts its pages, docs/libfabric.md)\n",
		 mr->addr, mr->len);
	return iwv_reg_mr(dom->pd, mr->addr, mr->len, vacc, &mr->vmr);
done:
	/* Any other refusal (a limit, a bad range, a daemon without process
	 * registration) is not a matter of atomics: registering again without
	 * them would be refused the same way, and logged twice by the daemon. */
	if (ret == 0)
		mr->atomic = 1;
	return ret;
}

static int mr_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	IWD_UNUSED(fid);
	IWD_UNUSED(flags);
	if (bfid->fclass == FI_CLASS_EP || bfid->fclass == FI_CLASS_CNTR)
		return -FI_ENOSYS; /* FI_MR_ENDPOINT and FI_RMA_EVENT are not offered */
	return -FI_EINVAL;
}

static struct fi_ops mr_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = mr_close,
	.bind = mr_bind,
	.control = iwd_no_control,
	.ops_open = iwd_no_ops_open,
};

int iwd_mr_reg(struct fid *fid, const void *buf, size_t len, uint64_t access, uint64_t offset,
	       uint64_t requested_key, uint64_t flags, struct fid_mr **out, void *context)
{
	struct iwd_domain *dom;
	struct iwd_mr *mr;
	int vacc = 0, ret;

	IWD_UNUSED(requested_key);
	if (!fid || fid->fclass != FI_CLASS_DOMAIN || !out)
		return -FI_EINVAL;
	dom = iwd_container_of(fid, struct iwd_domain, domain_fid.fid);
	if (flags)
		return -FI_EINVAL;
	if (offset)
		return -FI_EINVAL; /* FI_MR_VIRT_ADDR: the offset is the address */
	if (!access)
		access = IWD_MR_ACCESS;
	if (access & ~(uint64_t)IWD_MR_ACCESS)
		return -FI_EINVAL;
	if (!buf && len)
		return -FI_EINVAL;
	if (iwd_domain_check(dom))
		return -FI_ENODEV;
	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return -FI_ENOMEM;
	mr->dom = dom;
	mr->addr = (void *)buf;
	mr->len = len;
	mr->access = access;
	if (live_add(mr)) {
		free(mr);
		return -FI_ENOMEM;
	}
	vacc = IWV_ACCESS_LOCAL_WRITE;
	if (access & FI_REMOTE_READ)
		vacc |= IWV_ACCESS_REMOTE_READ;
	if (access & FI_REMOTE_WRITE)
		vacc |= IWV_ACCESS_REMOTE_WRITE;
	if (len && (access & FI_REMOTE_WRITE) && (dom->caps & FI_ATOMIC))
		ret = reg_atomic(dom, mr, vacc);
	else
		ret = len ? iwv_reg_mr(dom->pd, (void *)buf, len, vacc, &mr->vmr) : 0;
	if (ret) {
		/* A daemon without application-memory registration (proto
		 * RegMRRequest.Process) answers EINVAL: keep the MR local-only,
		 * so that sends and receives through it are staged; remote
		 * access to it is refused by the peer's daemon (no key). */
		if (ret != -EINVAL || iwd_domain_check(dom)) {
			/* The daemon's reason: for a limit, which one, what is in use and
			 * the flag that raises it (its log says the same at warn). */
			IWD_WARN(FI_LOG_MR, "iwarpd: fi_mr_reg of %zu octets at %p fails with %s: %s\n", len, buf,
				 fi_strerror(-iwd_errno(ret)), iwv_last_error(dom->fab->s));
			live_del(mr);
			free(mr);
			return iwd_errno(ret);
		}
		if (access & (FI_REMOTE_READ | FI_REMOTE_WRITE))
			IWD_WARN(FI_LOG_MR,
				 "iwarpd: %p+%zu cannot be registered for remote access (%s): RMA into it will fail, "
				 "sends and receives through it are staged\n",
				 buf, len, iwv_last_error(dom->fab->s));
		mr->vmr = NULL;
	}
	mr->arena = mr->vmr && iwv_mr_is_adopted(mr->vmr); /* any MR inside adopted pages keeps them */
	mr->mr_fid.fid.fclass = FI_CLASS_MR;
	mr->mr_fid.fid.context = context;
	mr->mr_fid.fid.ops = &mr_fi_ops;
	mr->mr_fid.mem_desc = mr;
	mr->mr_fid.key = mr->vmr ? iwv_mr_rkey(mr->vmr) : FI_KEY_NOTAVAIL;
	iwd_lock(dom);
	dom->refs++;
	iwd_unlock(dom);
	*out = &mr->mr_fid;
	return 0;
}

int iwd_mr_regv(struct fid *fid, const struct iovec *iov, size_t count, uint64_t access, uint64_t offset,
		uint64_t requested_key, uint64_t flags, struct fid_mr **mr, void *context)
{
	if (count != 1 || !iov)
		return count ? -FI_ENOSYS : -FI_EINVAL;
	return iwd_mr_reg(fid, iov[0].iov_base, iov[0].iov_len, access, offset, requested_key, flags, mr, context);
}

int iwd_mr_regattr(struct fid *fid, const struct fi_mr_attr *attr, uint64_t flags, struct fid_mr **mr)
{
	if (!attr)
		return -FI_EINVAL;
	if (attr->iface != FI_HMEM_SYSTEM)
		return -FI_ENOSYS;
	return iwd_mr_regv(fid, attr->mr_iov, attr->iov_count, attr->access, attr->offset, attr->requested_key,
			   flags, mr, attr->context);
}

int iwd_desc_lkey(void *desc, const void *addr, size_t len, uint32_t *lkey)
{
	struct iwd_mr *mr = desc;
	if (!mr || !live_has(mr) || !mr->vmr || mr->mr_fid.fid.fclass != FI_CLASS_MR)
		return 0;
	if ((const char *)addr < (char *)mr->addr || (const char *)addr + len > (char *)mr->addr + mr->len)
		return 0;
	*lkey = iwv_mr_lkey(mr->vmr);
	return 1;
}
