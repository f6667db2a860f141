/*
 * mr.c — protection domains, buffers and memory regions (ofverbs/memory.go).
 * A memory region inside an iwv_alloc_buffer buffer is registered as its
 * memfd range (the daemon maps it: zero copy); any other range is the
 * application's own memory, registered in the process form of
 * proto.RegMRRequest (no descriptor; the daemon reaches it with
 * pread/pwrite(2) on this process's /proc/self/mem, handed over at hello:
 * session.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"

IWV_EXPORT int iwv_alloc_pd(struct iwv_session *s, struct iwv_pd **out)
{
	json_t *j;
	*out = NULL;
	struct iwv_pd *pd = calloc(1, sizeof *pd);
	if (!pd)
		return iwvi_seterr(s, ENOMEM, "alloc-pd");
	pthread_mutex_lock(&s->mu);
	int r = iwvi_call_locked(s, W_OP_ALLOC_PD, NULL, NULL, 0, &j);
	if (r == 0) {
		pd->s = s;
		pd->handle = (uint32_t)iwvi_jget_u64(j, "handle");
		json_decref(j);
		pd->next = s->pds;
		s->pds = pd;
		*out = pd;
	}
	pthread_mutex_unlock(&s->mu);
	if (r < 0)
		free(pd);
	return r;
}

IWV_EXPORT int iwv_dealloc_pd(struct iwv_pd *pd)
{
	if (!pd)
		return -EINVAL;
	struct iwv_session *s = pd->s;
	int r = iwvi_destroy_handle(s, W_OP_DEALLOC_PD, pd->handle);
	if (r < 0)
		return r;
	pthread_mutex_lock(&s->mu);
	LIST_REMOVE(&s->pds, struct iwv_pd, pd);
	pthread_mutex_unlock(&s->mu);
	free(pd);
	return 0;
}

IWV_EXPORT uint32_t iwv_pd_handle(const struct iwv_pd *pd)
{
	return pd->handle;
}

IWV_EXPORT int iwv_alloc_buffer(struct iwv_session *s, size_t size, struct iwv_buffer **out)
{
	*out = NULL;
	if (size == 0)
		return iwvi_seterr(s, EINVAL, "alloc-buffer: size 0");
	if (__atomic_load_n(&s->dead, __ATOMIC_ACQUIRE))
		return iwvi_seterr(s, ENODEV, "alloc-buffer: iwarpd: daemon closed the session");
	struct iwv_buffer *b = calloc(1, sizeof *b);
	if (!b)
		return iwvi_seterr(s, ENOMEM, "alloc-buffer");
	int r = iwvi_region_create(&b->r, "buffer", size);
	if (r < 0) {
		free(b);
		return iwvi_seterr(s, r, "alloc-buffer: %zu bytes", size);
	}
	b->s = s;
	b->size = size;
	pthread_mutex_lock(&s->mu);
	b->next = s->buffers;
	s->buffers = b;
	pthread_mutex_unlock(&s->mu);
	*out = b;
	return 0;
}

IWV_EXPORT void *iwv_buffer_addr(const struct iwv_buffer *b)
{
	return b->r.mem;
}

IWV_EXPORT size_t iwv_buffer_len(const struct iwv_buffer *b)
{
	return b->size;
}

IWV_EXPORT int iwv_free_buffer(struct iwv_buffer *b)
{
	if (!b)
		return -EINVAL;
	struct iwv_session *s = b->s;
	pthread_mutex_lock(&s->mu);
	LIST_REMOVE(&s->buffers, struct iwv_buffer, b);
	pthread_mutex_unlock(&s->mu);
	iwvi_buffer_release(b);
	free(b);
	return 0;
}

/* find_buffer returns the buffer holding [addr, addr+len) (mu held). */
static struct iwv_buffer *find_buffer(struct iwv_session *s, uintptr_t addr, size_t len, uint64_t *off)
{
	for (struct iwv_buffer *b = s->buffers; b; b = b->next) {
		uintptr_t base = (uintptr_t)b->r.mem;
		if (b == s->arena)
			continue; /* below: it "holds" every address */
		if (addr < base)
			continue;
		uint64_t o = addr - base;
		if (o > b->size || len > b->size - o)
			continue;
		if (!iwvi_buffer_holds(b, addr, len))
			continue; /* adopted pages the application has unmapped since: process memory now */
		*off = o;
		return b;
	}
	if (s->arena && iwvi_buffer_holds(s->arena, addr, len)) {
		*off = addr; /* the arena's offset is the address */
		return s->arena;
	}
	return NULL;
}

IWV_EXPORT int iwv_reg_mr(struct iwv_pd *pd, void *addr, size_t len, int access, struct iwv_mr **out)
{
	*out = NULL;
	if (!pd)
		return -EINVAL;
	struct iwv_session *s = pd->s;
	const int all = IWV_ACCESS_LOCAL_WRITE | IWV_ACCESS_REMOTE_WRITE | IWV_ACCESS_REMOTE_READ | IWV_ACCESS_REMOTE_ATOMIC;
	if (len == 0 || !addr)
		return iwvi_seterr(s, EINVAL, "reg-mr: empty memory region");
	if (access & ~all)
		return iwvi_seterr(s, EINVAL, "reg-mr: unknown access flags %#x", access & ~all);
	if ((access & (IWV_ACCESS_REMOTE_WRITE | IWV_ACCESS_REMOTE_ATOMIC)) && !(access & IWV_ACCESS_LOCAL_WRITE))
		return iwvi_seterr(s, EINVAL, "reg-mr: remote write or atomic access requires local write");
	struct iwv_mr *mr = calloc(1, sizeof *mr);
	json_t *req = json_object();
	if (!mr || !req) {
		free(mr);
		json_decref(req);
		return iwvi_seterr(s, ENOMEM, "reg-mr");
	}
	pthread_mutex_lock(&s->mu);
	uint64_t off = 0;
	struct iwv_buffer *b = find_buffer(s, (uintptr_t)addr, len, &off);
	int fd = b ? b->r.fd : -1;
	int r = iwvi_jset_u64(req, "pd", pd->handle);
	r = r ? r : iwvi_jset_u64(req, "offset", off);
	r = r ? r : iwvi_jset_u64(req, "length", len);
	r = r ? r : iwvi_jset_u64(req, "addr", (uintptr_t)addr);
	r = r ? r : iwvi_jset_u64(req, "access", (uint64_t)access);
	if (!r && !b)
		r = json_object_set_new(req, "process", json_true()) ? -ENOMEM : 0;
	json_t *rep = NULL;
	if (r < 0) {
		json_decref(req);
		r = iwvi_seterr(s, r, "reg-mr: encoding the request");
	} else {
		r = iwvi_call_locked(s, W_OP_REG_MR, req, b ? &fd : NULL, b ? 1 : 0, &rep);
	}
	if (r == 0) {
		mr->s = s;
		mr->pd = pd;
		mr->handle = (uint32_t)iwvi_jget_u64(rep, "handle");
		mr->lkey = (uint32_t)iwvi_jget_u64(rep, "lkey");
		mr->rkey = (uint32_t)iwvi_jget_u64(rep, "rkey");
		mr->addr = addr;
		mr->len = len;
		mr->process = !b;
		mr->arena = b && b == s->arena;
		mr->access = access;
		json_decref(rep);
		mr->next = s->mrs;
		s->mrs = mr;
		*out = mr;
		/* For the rank's RD fast path (fprd_rma_rx.c). Without room the
		 * rank leaves this region's requests to the daemon. */
		struct iwvi_rkey_ent e = {.rkey = mr->rkey, .access = (uint32_t)access, .pd = pd,
					  .addr = (uintptr_t)addr, .len = len};
		(void)iwvi_rkeys_add(&s->rkeys, &e);
	}
	pthread_mutex_unlock(&s->mu);
	if (r < 0)
		free(mr);
	return r;
}

IWV_EXPORT int iwv_dereg_mr(struct iwv_mr *mr)
{
	if (!mr)
		return -EINVAL;
	struct iwv_session *s = mr->s;
	/* The rank stops serving it first (rkeys.h), then the daemon. */
	iwvi_rkeys_del(&s->rkeys, mr->rkey);
	int r = iwvi_destroy_handle(s, W_OP_DEREG_MR, mr->handle);
	if (r < 0) {
		struct iwvi_rkey_ent e = {.rkey = mr->rkey, .access = (uint32_t)mr->access, .pd = mr->pd,
					  .addr = (uintptr_t)mr->addr, .len = mr->len};
		(void)iwvi_rkeys_add(&s->rkeys, &e);
		return r;
	}
	pthread_mutex_lock(&s->mu);
	LIST_REMOVE(&s->mrs, struct iwv_mr, mr);
	pthread_mutex_unlock(&s->mu);
	free(mr);
	return 0;
}

IWV_EXPORT uint32_t iwv_mr_lkey(const struct iwv_mr *mr)
{
	return mr->lkey;
}
IWV_EXPORT uint32_t iwv_mr_rkey(const struct iwv_mr *mr)
{
	return mr->rkey;
}
IWV_EXPORT void *iwv_mr_addr(const struct iwv_mr *mr)
{
	return mr->addr;
}
IWV_EXPORT size_t iwv_mr_len(const struct iwv_mr *mr)
{
	return mr->len;
}
IWV_EXPORT int iwv_mr_is_process(const struct iwv_mr *mr)
{
	return mr->process;
}
IWV_EXPORT int iwv_mr_is_adopted(const struct iwv_mr *mr)
{
	return mr->arena;
}
