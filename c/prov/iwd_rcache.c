/*
 * iwd_rcache.c — the domain's registration cache (libfabric's rcache idea,
 * fi_mr(3) "Memory Registration Cache"): a rendezvous send from a buffer
 * the application did not register needs a daemon registration the peer
 * can RDMA Read. Registering is a control round trip (JSON over the
 * session's socket); the cache keeps registrations and hands out one that
 * covers the range again, so a buffer sent over and over costs one round
 * trip, not one per send.
 *
 * Entries are page-aligned ranges registered with local write and remote
 * read access, kept in LRU order and bounded in number
 * (FI_IWARPD_MR_CACHE, docs/libfabric.md); an entry in use by a transmit
 * is never evicted.
 *
 * Invalidation. libfabric's rcache drops an entry when its pages are
 * unmapped (memhooks, userfaultfd): a verbs registration pins pages, and
 * a range unmapped and mapped again would leave it pinning the old ones.
 * A registration of process memory with iwarpd pins nothing: the daemon
 * reaches the range by address when it reads it (process memory form of
 * RegMR, c/core/mr.c), so a cached entry always reads what is mapped there
 * now, and an unmapped range fails that Read with an access error, just
 * as a fresh registration of it would. So the rule is: an entry stays
 * valid while the domain lives; LRU eviction bounds how many the daemon
 * holds; a transmit whose registration failed at the peer (an error
 * completion) evicts its entry, so the next send registers afresh; the
 * domain's close deregisters the rest. The cost: a peer that was given
 * the rkey of a cached range can read it until the entry goes, as with
 * any cached registration with remote access.
 */
#include <stdlib.h>
#include <unistd.h>

#include "iwd.h"

struct iwd_rcache_entry {
	struct iwd_list link;  /* rc->lru, most recently used first */
	uintptr_t lo, hi;
	struct iwv_mr *mr;
	struct iwv_session *s;
	int refs;              /* transmits using it */
	int stale;             /* evict when the last user puts it */
};

void iwd_rcache_init(struct iwd_rcache *rc, size_t max)
{
	iwd_list_init(&rc->lru);
	rc->n = 0;
	rc->max = max;
	rc->hits = rc->misses = 0;
}

static void drop(struct iwd_rcache *rc, struct iwd_rcache_entry *e)
{
	struct iwv_session *s = e->s;
	int adopted;
	iwd_list_remove(&e->link);
	rc->n--;
	adopted = iwv_mr_is_adopted(e->mr); /* inside pages adopted for an atomic target (iwd_mr.c) */
	iwv_dereg_mr(e->mr);
	if (adopted)
		iwv_release_pages(s, (void *)e->lo, e->hi - e->lo);
	free(e);
}

void iwd_rcache_fini(struct iwd_rcache *rc)
{
	struct iwd_list *it, *tmp;
	iwd_list_foreach_safe(&rc->lru, it, tmp)
	drop(rc, iwd_container_of(it, struct iwd_rcache_entry, link));
}

/* Evicts unused entries from the cold end until at most max remain. */
static void trim(struct iwd_rcache *rc)
{
	struct iwd_list *it = rc->lru.prev, *prev;
	while (rc->n > rc->max && it != &rc->lru) {
		struct iwd_rcache_entry *e = iwd_container_of(it, struct iwd_rcache_entry, link);
		prev = it->prev;
		if (!e->refs)
			drop(rc, e);
		it = prev;
	}
}

struct iwd_rcache_entry *iwd_rcache_get(struct iwd_domain *dom, const void *addr, size_t len, uint32_t *rkey)
{
	struct iwd_rcache *rc = &dom->rcache;
	uintptr_t lo = (uintptr_t)addr, hi = lo + len, page = (uintptr_t)sysconf(_SC_PAGESIZE);
	struct iwd_rcache_entry *e;
	struct iwd_list *it;

	if (!rc->max || !len)
		return NULL;
	iwd_list_foreach(&rc->lru, it)
	{
		e = iwd_container_of(it, struct iwd_rcache_entry, link);
		if (!e->stale && e->lo <= lo && hi <= e->hi) {
			iwd_list_remove(&e->link);
			iwd_list_insert_head(&rc->lru, &e->link);
			e->refs++;
			rc->hits++;
			*rkey = iwv_mr_rkey(e->mr);
			return e;
		}
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->lo = lo & ~(page - 1);
	e->hi = (hi + page - 1) & ~(page - 1);
	if (iwv_reg_mr(dom->pd, (void *)e->lo, e->hi - e->lo, IWV_ACCESS_LOCAL_WRITE | IWV_ACCESS_REMOTE_READ,
		       &e->mr)) {
		IWD_INFO(FI_LOG_MR, "iwarpd: registering %zu octets for a rendezvous: %s\n", (size_t)(e->hi - e->lo),
			 iwv_last_error(dom->fab->s));
		free(e);
		return NULL;
	}
	rc->misses++;
	e->s = dom->fab->s;
	e->refs = 1;
	iwd_list_insert_head(&rc->lru, &e->link);
	rc->n++;
	trim(rc);
	*rkey = iwv_mr_rkey(e->mr);
	return e;
}

void iwd_rcache_put(struct iwd_domain *dom, struct iwd_rcache_entry *e, int failed)
{
	struct iwd_rcache *rc = &dom->rcache;
	if (failed)
		e->stale = 1;
	if (--e->refs == 0 && (e->stale || rc->n > rc->max))
		drop(rc, e);
}
