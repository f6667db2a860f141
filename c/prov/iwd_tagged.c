/*
 * iwd_tagged.c — tag matching for RDM endpoints (fi_tagged(3)): posted and
 * unexpected queues for untagged and tagged messages, ignore bits,
 * FI_DIRECTED_RECV, and the FI_PEEK/FI_CLAIM bookkeeping. Pure data
 * structures: no verbs, no locks (the caller holds the domain lock), so a C
 * unit test drives them directly (c/prov/tests/test_match.c).
 *
 * A receive matches an arrival when (tag | ignore) == (want | ignore)
 * (fi_tagged(3)) and, with FI_DIRECTED_RECV, its source is FI_ADDR_UNSPEC
 * or the arrival's. Both queues are searched in order, which keeps
 * messages between two endpoints matched in the order they were sent.
 */
#include <stdlib.h>
#include <string.h>

#include "iwd.h"

void iwd_match_init(struct iwd_match *m, int directed)
{
	iwd_list_init(&m->posted_msg);
	iwd_list_init(&m->posted_tag);
	iwd_list_init(&m->unexp_msg);
	iwd_list_init(&m->unexp_tag);
	m->nunexp = 0;
	m->directed = directed;
}

static void free_list(struct iwd_list *h, size_t off)
{
	struct iwd_list *it, *tmp;
	iwd_list_foreach_safe(h, it, tmp)
	{
		iwd_list_remove(it);
		free((char *)it - off);
	}
}

void iwd_match_fini(struct iwd_match *m)
{
	free_list(&m->posted_msg, offsetof(struct iwd_rx, link));
	free_list(&m->posted_tag, offsetof(struct iwd_rx, link));
	free_list(&m->unexp_msg, offsetof(struct iwd_unexp, link));
	free_list(&m->unexp_tag, offsetof(struct iwd_unexp, link));
	m->nunexp = 0;
}

int iwd_tag_match(uint64_t tag, uint64_t want, uint64_t ignore)
{
	return (tag | ignore) == (want | ignore);
}

static int addr_match(const struct iwd_match *m, fi_addr_t want, fi_addr_t src)
{
	return !m->directed || want == FI_ADDR_UNSPEC || want == src;
}

struct iwd_rx *iwd_match_posted(struct iwd_match *m, int tagged, fi_addr_t src, uint64_t tag)
{
	struct iwd_list *h = tagged ? &m->posted_tag : &m->posted_msg, *it;
	iwd_list_foreach(h, it)
	{
		struct iwd_rx *rx = iwd_container_of(it, struct iwd_rx, link);
		if (!addr_match(m, rx->src, src))
			continue;
		if (tagged && !iwd_tag_match(tag, rx->tag, rx->ignore))
			continue;
		if (!(rx->flags & FI_MULTI_RECV))
			iwd_list_remove(&rx->link);
		return rx;
	}
	return NULL;
}

struct iwd_unexp *iwd_match_unexp(struct iwd_match *m, int tagged, fi_addr_t src, uint64_t tag, uint64_t ignore,
				  int peek, void *claim_ctx)
{
	struct iwd_list *h = tagged ? &m->unexp_tag : &m->unexp_msg, *it;
	iwd_list_foreach(h, it)
	{
		struct iwd_unexp *u = iwd_container_of(it, struct iwd_unexp, link);
		if (claim_ctx) {
			if (!u->claimed || u->claim_ctx != claim_ctx)
				continue;
		} else {
			if (u->claimed)
				continue;
			if (!addr_match(m, src, u->src))
				continue;
			if (tagged && !iwd_tag_match(u->tag, tag, ignore))
				continue;
		}
		if (!peek) {
			iwd_list_remove(&u->link);
			m->nunexp--;
		}
		return u;
	}
	return NULL;
}

struct iwd_rx *iwd_match_cancel(struct iwd_match *m, void *context)
{
	struct iwd_list *hs[2] = {&m->posted_msg, &m->posted_tag}, *it;
	int i;
	for (i = 0; i < 2; i++) {
		iwd_list_foreach(hs[i], it)
		{
			struct iwd_rx *rx = iwd_container_of(it, struct iwd_rx, link);
			if (rx->context == context) {
				iwd_list_remove(&rx->link);
				return rx;
			}
		}
	}
	return NULL;
}

size_t iwd_iov_len(const struct iovec *iov, size_t cnt)
{
	size_t i, n = 0;
	for (i = 0; i < cnt; i++)
		n += iov[i].iov_len;
	return n;
}

size_t iwd_iov_copy_in(const struct iovec *iov, size_t cnt, size_t off, const void *src, size_t len)
{
	size_t i, done = 0;
	for (i = 0; i < cnt && done < len; i++) {
		size_t n;
		if (off >= iov[i].iov_len) {
			off -= iov[i].iov_len;
			continue;
		}
		n = iov[i].iov_len - off;
		if (n > len - done)
			n = len - done;
		memcpy((char *)iov[i].iov_base + off, (const char *)src + done, n);
		done += n;
		off = 0;
	}
	return done;
}

size_t iwd_iov_copy_out(void *dst, const struct iovec *iov, size_t cnt, size_t len)
{
	size_t i, done = 0;
	for (i = 0; i < cnt && done < len; i++) {
		size_t n = iov[i].iov_len;
		if (n > len - done)
			n = len - done;
		if (n && !iov[i].iov_base)
			break; /* refused before (iwd_check_iov): never a crash */
		if (n)
			memcpy((char *)dst + done, iov[i].iov_base, n);
		done += n;
	}
	return done;
}
