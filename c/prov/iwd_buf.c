/*
 * iwd_buf.c — registered memory the provider owns: fixed-size bounce slots
 * (eager messages, inject, control messages) and the domain's staging area
 * (rendezvous of buffers the application did not register). Both live in
 * libiwverbs buffers (sealed memfds the daemon maps): the zero-copy path of
 * the daemon.
 */
#include <stdlib.h>
#include <string.h>

#include "iwd.h"

int iwd_pool_init(struct iwd_domain *dom, struct iwd_pool *p, size_t slot_size, size_t count)
{
	int ret;
	size_t i;
	memset(p, 0, sizeof(*p));
	slot_size = (slot_size + 63) & ~(size_t)63;
	p->slot_size = slot_size;
	p->count = count;
	p->free_stack = calloc(count, sizeof(uint32_t));
	if (!p->free_stack)
		return -FI_ENOMEM;
	ret = iwv_alloc_buffer(dom->fab->s, slot_size * count, &p->buf);
	if (!ret)
		ret = iwv_reg_mr(dom->pd, iwv_buffer_addr(p->buf), slot_size * count,
				 IWV_ACCESS_LOCAL_WRITE | IWV_ACCESS_REMOTE_READ, &p->mr);
	if (ret) {
		IWD_WARN(FI_LOG_EP_CTRL, "iwarpd: bounce buffers (%zu x %zu octets): %s\n", count, slot_size,
			 iwv_last_error(dom->fab->s));
		iwd_pool_fini(p);
		return iwd_errno(ret);
	}
	for (i = 0; i < count; i++)
		p->free_stack[i] = (uint32_t)(count - 1 - i);
	p->nfree = count;
	return 0;
}

void iwd_pool_fini(struct iwd_pool *p)
{
	if (p->mr)
		iwv_dereg_mr(p->mr);
	if (p->buf)
		iwv_free_buffer(p->buf);
	free(p->free_stack);
	memset(p, 0, sizeof(*p));
}

void *iwd_pool_get(struct iwd_pool *p)
{
	if (!p->nfree)
		return NULL;
	return (char *)iwv_buffer_addr(p->buf) + (size_t)p->free_stack[--p->nfree] * p->slot_size;
}

void iwd_pool_put(struct iwd_pool *p, void *slot)
{
	size_t i = (size_t)((char *)slot - (char *)iwv_buffer_addr(p->buf)) / p->slot_size;
	p->free_stack[p->nfree++] = (uint32_t)i;
}

uint32_t iwd_pool_lkey(const struct iwd_pool *p) { return iwv_mr_lkey(p->mr); }

/* Staging: chunks of IWD_STAGE_CHUNK octets, allocated first-fit as
 * contiguous runs tracked by a byte map. The memory itself is allocated and
 * registered with the daemon at the first allocation (stage_map), not at
 * fi_domain: libiwverbs writes every page of the buffers it creates
 * (c/core/shm.c), so a rank that never stages would otherwise keep
 * FI_IWARPD_STAGING resident for nothing (docs/memory.md). */
#define IWD_STAGE_CHUNK (64u << 10)

struct iwd_stage {
	struct iwv_buffer *buf; /* NULL until the first allocation */
	struct iwv_mr *mr;
	int err;                /* the last stage_map's failure, else 0 */
	size_t nchunks;
	size_t hint;
	size_t tx_chunks; /* held by rendezvous sends' copies (iwd_stage_alloc_tx) */
	size_t cts_chunks; /* held by receiver-ready offers (iwd_stage_alloc_cts) */
	unsigned char used[];
};

int iwd_stage_init(struct iwd_domain *dom, size_t size)
{
	struct iwd_stage *st;
	size_t n = (size + IWD_STAGE_CHUNK - 1) / IWD_STAGE_CHUNK;
	if (!n)
		return 0;
	st = calloc(1, sizeof(*st) + n);
	if (!st)
		return -FI_ENOMEM;
	st->nchunks = n;
	dom->stage = st;
	return 0;
}

/* Allocates and registers the staging memory; the domain lock is held. A
 * failure is kept in st->err for iwd_stage_err and tried again at the next
 * allocation. */
static int stage_map(struct iwd_domain *dom, struct iwd_stage *st)
{
	size_t size = st->nchunks * IWD_STAGE_CHUNK;
	int ret = iwv_alloc_buffer(dom->fab->s, size, &st->buf);
	if (!ret)
		ret = iwv_reg_mr(dom->pd, iwv_buffer_addr(st->buf), size,
				 IWV_ACCESS_LOCAL_WRITE | IWV_ACCESS_REMOTE_READ | IWV_ACCESS_REMOTE_WRITE, &st->mr);
	if (ret) {
		IWD_WARN(FI_LOG_DOMAIN,
			 "iwarpd: staging memory (%zu octets) at its first use: %s; lower FI_IWARPD_STAGING, or "
			 "register the buffers (fi_mr_reg)\n",
			 size, iwv_last_error(dom->fab->s));
		if (st->buf)
			iwv_free_buffer(st->buf);
		st->buf = NULL;
		st->mr = NULL;
		st->err = -FI_ENOMEM;
		return st->err;
	}
	st->err = 0;
	return 0;
}

int iwd_stage_err(struct iwd_domain *dom)
{
	return dom->stage && dom->stage->err ? dom->stage->err : -FI_EAGAIN;
}

void iwd_stage_fini(struct iwd_domain *dom)
{
	struct iwd_stage *st = dom->stage;
	if (!st)
		return;
	if (st->mr)
		iwv_dereg_mr(st->mr);
	if (st->buf)
		iwv_free_buffer(st->buf);
	free(st);
	dom->stage = NULL;
}

void *iwd_stage_alloc(struct iwd_domain *dom, size_t len)
{
	struct iwd_stage *st = dom->stage;
	size_t need, i, run = 0, pass;
	if (!st || !len)
		return NULL;
	need = (len + IWD_STAGE_CHUNK - 1) / IWD_STAGE_CHUNK;
	if (need > st->nchunks)
		return NULL;
	if (!st->buf && stage_map(dom, st))
		return NULL;
	for (pass = 0; pass < 2; pass++) {
		size_t start = pass ? 0 : st->hint;
		run = 0;
		for (i = start; i < st->nchunks; i++) {
			if (st->used[i]) {
				run = 0;
				continue;
			}
			if (++run == need) {
				size_t first = i + 1 - need;
				memset(st->used + first, 1, need);
				st->hint = (i + 1) % st->nchunks;
				return (char *)iwv_buffer_addr(st->buf) + first * IWD_STAGE_CHUNK;
			}
		}
	}
	return NULL;
}

void iwd_stage_free(struct iwd_domain *dom, void *p, size_t len)
{
	struct iwd_stage *st = dom->stage;
	size_t first, need;
	if (!st || !p)
		return;
	first = (size_t)((char *)p - (char *)iwv_buffer_addr(st->buf)) / IWD_STAGE_CHUNK;
	need = (len + IWD_STAGE_CHUNK - 1) / IWD_STAGE_CHUNK;
	memset(st->used + first, 0, need);
}

/* Staging for the copy of a rendezvous send (iwd_ep_rdm.c): such sends
 * together hold at most half of the staging. A send holds its chunks until
 * the peer's FIN, and the peer's Read of it needs the peer's staging when
 * the receive buffer is not registered (iwd_rdm_rndv.c post_read): sends
 * holding all the staging on both sides would wait for each other's
 * Reads for ever. With half kept, a Read finds room once the Reads in
 * flight end. */
void *iwd_stage_alloc_tx(struct iwd_domain *dom, size_t len)
{
	struct iwd_stage *st = dom->stage;
	size_t need;
	void *p;
	if (!st || !len)
		return NULL;
	need = (len + IWD_STAGE_CHUNK - 1) / IWD_STAGE_CHUNK;
	if (st->tx_chunks + need > st->nchunks / 2)
		return NULL;
	p = iwd_stage_alloc(dom, len);
	if (p)
		st->tx_chunks += need;
	return p;
}

void iwd_stage_free_tx(struct iwd_domain *dom, void *p, size_t len)
{
	struct iwd_stage *st = dom->stage;
	if (!st || !p)
		return;
	st->tx_chunks -= (len + IWD_STAGE_CHUNK - 1) / IWD_STAGE_CHUNK;
	iwd_stage_free(dom, p, len);
}

/* A receiver-ready offer (iwd_rdm_cts.c) holds its chunks until the
 * sender's Write lands or the offer ends: such offers hold at most a
 * quarter of the staging, so that sends and Reads keep theirs. */
void *iwd_stage_alloc_cts(struct iwd_domain *dom, size_t len)
{
	struct iwd_stage *st = dom->stage;
	size_t need;
	void *p;
	if (!st || !len)
		return NULL;
	need = (len + IWD_STAGE_CHUNK - 1) / IWD_STAGE_CHUNK;
	if (st->cts_chunks + need > st->nchunks / 4)
		return NULL;
	p = iwd_stage_alloc(dom, len);
	if (p)
		st->cts_chunks += need;
	return p;
}

void iwd_stage_free_cts(struct iwd_domain *dom, void *p, size_t len)
{
	struct iwd_stage *st = dom->stage;
	if (!st || !p)
		return;
	st->cts_chunks -= (len + IWD_STAGE_CHUNK - 1) / IWD_STAGE_CHUNK;
	iwd_stage_free(dom, p, len);
}

uint32_t iwd_stage_lkey(struct iwd_domain *dom) { return iwv_mr_lkey(dom->stage->mr); }
uint32_t iwd_stage_rkey(struct iwd_domain *dom) { return iwv_mr_rkey(dom->stage->mr); }
