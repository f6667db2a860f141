/*
 * iwd_av.c — address vectors (fi_av(3)): FI_SOCKADDR_IN addresses of
 * datagram QPs (the device IP and the QP's UDP port). FI_AV_TABLE and
 * FI_AV_MAP both hand out the table index as fi_addr_t (FI_AV_MAP lets the
 * provider choose any value). A hash on (ip, port) answers FI_SOURCE
 * lookups of receive completions.
 *
 * Duplicates (fi_av(3) NOTES leaves them to the provider): inserting an
 * address the AV already holds returns the fi_addr it already has and
 * counts one more reference; fi_av_remove drops one reference and the entry
 * goes when the last is removed (libfabric's util AV does the same). So one
 * peer has one fi_addr, and a directed receive naming it matches the
 * fi_addr its messages report (MPI_Intercomm_create re-inserts peers).
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iwd.h"

static uint64_t sin_key(const struct sockaddr_in *s)
{
	return ((uint64_t)s->sin_addr.s_addr << 16) | s->sin_port;
}

static size_t hash_of(uint64_t k, size_t cap)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	return (size_t)k & (cap - 1);
}

static int hash_grow(struct iwd_av *av)
{
	size_t ncap = av->hash_cap ? av->hash_cap * 2 : 64, i;
	uint32_t *nh = calloc(ncap, sizeof(uint32_t));
	if (!nh)
		return -FI_ENOMEM;
	for (i = 0; i < av->count; i++) {
		size_t h;
		if (!av->tab[i].used)
			continue;
		h = hash_of(sin_key(&av->tab[i].sin), ncap);
		while (nh[h])
			h = (h + 1) & (ncap - 1);
		nh[h] = (uint32_t)(i + 1);
	}
	free(av->hash);
	av->hash = nh;
	av->hash_cap = ncap;
	return 0;
}

static void hash_rebuild(struct iwd_av *av)
{
	size_t cap = av->hash_cap;
	av->hash_cap /= 2;
	if (!av->hash_cap) {
		free(av->hash);
		av->hash = NULL;
		av->hash_cap = 0;
		hash_grow(av);
		return;
	}
	hash_grow(av);
	IWD_UNUSED(cap);
}

static fi_addr_t lookup_sin(struct iwd_av *av, const struct sockaddr_in *sin)
{
	uint64_t k = sin_key(sin);
	size_t h, n;
	if (!av->hash_cap)
		return FI_ADDR_NOTAVAIL;
	h = hash_of(k, av->hash_cap);
	for (n = 0; n < av->hash_cap && av->hash[h]; n++) {
		struct iwd_av_entry *e = &av->tab[av->hash[h] - 1];
		if (e->used && sin_key(&e->sin) == k)
			return av->hash[h] - 1;
		h = (h + 1) & (av->hash_cap - 1);
	}
	return FI_ADDR_NOTAVAIL;
}

fi_addr_t iwd_av_reverse(struct iwd_av *av, const uint8_t ip[16], uint16_t port)
{
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
	if (!av)
		return FI_ADDR_NOTAVAIL;
	memcpy(&sin.sin_addr, ip + 12, 4); /* IPv4-mapped */
	return lookup_sin(av, &sin);
}

const struct iwv_av *iwd_av_lookup(struct iwd_av *av, fi_addr_t addr)
{
	if (!av || addr >= av->count || !av->tab[addr].used)
		return NULL;
	return &av->tab[addr].vav;
}

static int insert_one(struct iwd_av *av, const struct sockaddr_in *sin, fi_addr_t *out)
{
	struct iwd_av_entry *e;
	fi_addr_t existing;
	int ret;

	if (sin->sin_family != AF_INET || !sin->sin_port)
		return -FI_EINVAL;
	/* An address already here keeps its fi_addr (see the top of the file). */
	existing = lookup_sin(av, sin);
	if (existing != FI_ADDR_NOTAVAIL) {
		av->tab[existing].used++;
		*out = existing;
		return 0;
	}
	if (av->count == av->cap) {
		size_t ncap = av->cap ? av->cap * 2 : 64;
		struct iwd_av_entry *nt = realloc(av->tab, ncap * sizeof(*nt));
		if (!nt)
			return -FI_ENOMEM;
		av->tab = nt;
		av->cap = ncap;
	}
	if ((av->count + 1) * 2 > av->hash_cap) {
		ret = hash_grow(av);
		if (ret)
			return ret;
	}
	e = &av->tab[av->count];
	memset(e, 0, sizeof(*e));
	e->sin = *sin;
	e->vav.family = 4;
	e->vav.port = ntohs(sin->sin_port);
	e->vav.ip[10] = 0xff;
	e->vav.ip[11] = 0xff;
	memcpy(&e->vav.ip[12], &sin->sin_addr, 4);
	e->used = 1;
	{
		size_t h = hash_of(sin_key(sin), av->hash_cap);
		while (av->hash[h])
			h = (h + 1) & (av->hash_cap - 1);
		av->hash[h] = (uint32_t)(av->count + 1);
	}
	*out = av->count++;
	return 0;
}

static int av_insert(struct fid_av *av_fid, const void *addr, size_t count, fi_addr_t *fi_addr, uint64_t flags,
		     void *context)
{
	struct iwd_av *av = iwd_container_of(av_fid, struct iwd_av, av_fid);
	const struct sockaddr_in *sin = addr;
	size_t i;
	int n = 0, ret;

	IWD_UNUSED(context);
	if (flags & ~(uint64_t)(FI_MORE | FI_SYNC_ERR))
		return -FI_EINVAL;
	if (count && !addr)
		return -FI_EINVAL;
	iwd_lock(av->dom);
	for (i = 0; i < count; i++) {
		fi_addr_t a = FI_ADDR_NOTAVAIL;
		ret = insert_one(av, &sin[i], &a);
		if (ret) {
			IWD_WARN(FI_LOG_AV, "iwarpd: address %zu of %zu is not an AF_INET address with a port\n", i, count);
			if (flags & FI_SYNC_ERR && context)
				((int *)context)[i] = -ret;
		} else {
			n++;
			/* fi_av(3) FI_SYNC_ERR: every entry gets its result, 0 for
			 * an address inserted. */
			if (flags & FI_SYNC_ERR && context)
				((int *)context)[i] = 0;
		}
		if (fi_addr)
			fi_addr[i] = a;
	}
	iwd_unlock(av->dom);
	return n;
}

static int av_insertsvc(struct fid_av *av_fid, const char *node, const char *service, fi_addr_t *fi_addr,
			uint64_t flags, void *context)
{
	struct sockaddr_in sin = {.sin_family = AF_INET};
	char *end;
	long port;
	if (!node || !service)
		return -FI_EINVAL;
	if (inet_pton(AF_INET, node, &sin.sin_addr) != 1)
		return -FI_EINVAL;
	port = strtol(service, &end, 10);
	if (*end || port <= 0 || port > 65535)
		return -FI_EINVAL;
	sin.sin_port = htons((uint16_t)port);
	return av_insert(av_fid, &sin, 1, fi_addr, flags, context);
}

static int av_insertsym(struct fid_av *av_fid, const char *node, size_t nodecnt, const char *service,
			size_t svccnt, fi_addr_t *fi_addr, uint64_t flags, void *context)
{
	struct in_addr base;
	long port0;
	size_t i, j, k = 0;
	int n = 0;
	if (!node || !service || inet_pton(AF_INET, node, &base) != 1)
		return -FI_EINVAL;
	port0 = strtol(service, NULL, 10);
	if (port0 <= 0 || port0 + (long)svccnt > 65536)
		return -FI_EINVAL;
	for (i = 0; i < nodecnt; i++) {
		for (j = 0; j < svccnt; j++, k++) {
			struct sockaddr_in sin = {.sin_family = AF_INET};
			int r;
			sin.sin_addr.s_addr = htonl(ntohl(base.s_addr) + (uint32_t)i);
			sin.sin_port = htons((uint16_t)(port0 + (long)j));
			r = av_insert(av_fid, &sin, 1, fi_addr ? &fi_addr[k] : NULL, flags, context);
			if (r > 0)
				n += r;
		}
	}
	return n;
}

static int av_remove(struct fid_av *av_fid, fi_addr_t *fi_addr, size_t count, uint64_t flags)
{
	struct iwd_av *av = iwd_container_of(av_fid, struct iwd_av, av_fid);
	size_t i;
	int ret = 0;
	IWD_UNUSED(flags);
	iwd_lock(av->dom);
	for (i = 0; i < count; i++) {
		if (fi_addr[i] >= av->count || !av->tab[fi_addr[i]].used) {
			ret = -FI_EINVAL;
			continue;
		}
		av->tab[fi_addr[i]].used--; /* one reference per insert */
	}
	hash_rebuild(av);
	iwd_unlock(av->dom);
	return ret;
}

static int av_lookup(struct fid_av *av_fid, fi_addr_t fi_addr, void *addr, size_t *addrlen)
{
	struct iwd_av *av = iwd_container_of(av_fid, struct iwd_av, av_fid);
	size_t n;
	if (!addrlen)
		return -FI_EINVAL;
	iwd_lock(av->dom);
	if (fi_addr >= av->count || !av->tab[fi_addr].used) {
		iwd_unlock(av->dom);
		return -FI_EINVAL;
	}
	n = *addrlen < sizeof(struct sockaddr_in) ? *addrlen : sizeof(struct sockaddr_in);
	if (addr)
		memcpy(addr, &av->tab[fi_addr].sin, n);
	*addrlen = sizeof(struct sockaddr_in);
	iwd_unlock(av->dom);
	return 0;
}

static const char *av_straddr(struct fid_av *av_fid, const void *addr, char *buf, size_t *len)
{
	const struct sockaddr_in *sin = addr;
	char ip[INET_ADDRSTRLEN] = "?";
	char tmp[64];
	size_t n;
	IWD_UNUSED(av_fid);
	if (!addr || !buf || !len)
		return NULL;
	inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof(ip));
	n = (size_t)snprintf(tmp, sizeof(tmp), "fi_sockaddr_in://%s:%u", ip, ntohs(sin->sin_port)) + 1;
	if (*len)
		snprintf(buf, *len, "%s", tmp);
	*len = n;
	return buf;
}

static int av_close(struct fid *fid)
{
	struct iwd_av *av = iwd_container_of(fid, struct iwd_av, av_fid.fid);
	if (av->refs)
		return -FI_EBUSY;
	iwd_lock(av->dom);
	av->dom->refs--;
	iwd_unlock(av->dom);
	free(av->tab);
	free(av->hash);
	free(av);
	return 0;
}

static int av_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	IWD_UNUSED(fid);
	IWD_UNUSED(bfid);
	IWD_UNUSED(flags);
	return -FI_ENOSYS; /* asynchronous insertion (an EQ) is not offered: inserts are synchronous */
}

static struct fi_ops_av av_ops = {
	.size = sizeof(struct fi_ops_av),
	.insert = av_insert,
	.insertsvc = av_insertsvc,
	.insertsym = av_insertsym,
	.remove = av_remove,
	.lookup = av_lookup,
	.straddr = av_straddr,
};

static struct fi_ops av_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = av_close,
	.bind = av_bind,
	.control = iwd_no_control,
	.ops_open = iwd_no_ops_open,
};

int iwd_av_open(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **out, void *context)
{
	struct iwd_domain *dom = iwd_container_of(domain, struct iwd_domain, domain_fid);
	struct iwd_av *av;
	if (!attr || !out)
		return -FI_EINVAL;
	if (attr->type != FI_AV_UNSPEC && attr->type != FI_AV_MAP && attr->type != FI_AV_TABLE)
		return -FI_EINVAL;
	if (attr->name || (attr->flags & (FI_READ | FI_SYMMETRIC)) & FI_READ)
		return -FI_ENOSYS; /* shared (named) AVs are not offered */
	if (attr->rx_ctx_bits)
		return -FI_ENOSYS;
	av = calloc(1, sizeof(*av));
	if (!av)
		return -FI_ENOMEM;
	av->dom = dom;
	av->type = attr->type == FI_AV_UNSPEC ? FI_AV_TABLE : attr->type;
	attr->type = av->type;
	av->av_fid.fid.fclass = FI_CLASS_AV;
	av->av_fid.fid.context = context;
	av->av_fid.fid.ops = &av_fi_ops;
	av->av_fid.ops = &av_ops;
	iwd_lock(dom);
	dom->refs++;
	iwd_unlock(dom);
	*out = &av->av_fid;
	return 0;
}
