/*
 * av.c — address vectors (proto/addrvec.go): the destination of a datagram
 * work request, kept by the client and copied into every SQE. Checked as
 * ofverbs.CreateAH checks an address handle.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const uint8_t v4prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
static const uint8_t zero16[16];

int iwvi_av_check(struct iwv_session *s, const struct iwv_av *av)
{
	int mapped = memcmp(av->ip, v4prefix, 12) == 0;
	if (av->flags)
		return iwvi_seterr(s, EINVAL, "address vector: unknown flags %#x", av->flags);
	if (av->port == 0)
		return iwvi_seterr(s, EINVAL, "address vector: port 0");
	if (av->family == W_AV_IPV4 && !mapped)
		return iwvi_seterr(s, EINVAL, "address vector: IPv4 family with a non-IPv4-mapped address");
	if (av->family == W_AV_IPV6 && (mapped || memcmp(av->ip, zero16, 16) == 0))
		return iwvi_seterr(s, EINVAL, "address vector: IPv6 family with an IPv4-mapped or unspecified address");
	if (av->family != W_AV_IPV4 && av->family != W_AV_IPV6)
		return iwvi_seterr(s, EINVAL, "address vector: unknown family %d", av->family);
	if (s && s->addr_family && s->addr_family != av->family)
		return iwvi_seterr(s, EINVAL, "address vector: not of the device's address family (%s)", s->addr);
	return 0;
}

IWV_EXPORT int iwv_av_from_sockaddr(struct iwv_session *s, struct iwv_av *av, const struct sockaddr *sa)
{
	memset(av, 0, sizeof *av);
	if (!sa)
		return s ? iwvi_seterr(s, EINVAL, "address vector: no address") : -EINVAL;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
		av->family = W_AV_IPV4;
		av->port = ntohs(in->sin_port);
		memcpy(av->ip, v4prefix, 12);
		memcpy(av->ip + 12, &in->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
		memcpy(av->ip, &in6->sin6_addr, 16);
		av->port = ntohs(in6->sin6_port);
		av->family = memcmp(av->ip, v4prefix, 12) == 0 ? W_AV_IPV4 : W_AV_IPV6;
	} else {
		return s ? iwvi_seterr(s, EINVAL, "address vector: address family %d", sa->sa_family) : -EINVAL;
	}
	int r = iwvi_av_check(s, av);
	if (r < 0)
		memset(av, 0, sizeof *av);
	return r;
}

IWV_EXPORT int iwv_av_from_string(struct iwv_session *s, struct iwv_av *av, const char *addr)
{
	char host[INET6_ADDRSTRLEN + 2];
	memset(av, 0, sizeof *av);
	const char *colon = addr ? strrchr(addr, ':') : NULL;
	if (!colon || (size_t)(colon - addr) >= sizeof host)
		goto bad;
	size_t hl = (size_t)(colon - addr);
	memcpy(host, addr, hl);
	host[hl] = 0;
	char *end;
	unsigned long port = strtoul(colon + 1, &end, 10);
	if (*end || colon[1] == 0 || port == 0 || port > 65535)
		goto bad;
	struct sockaddr_storage ss = {0};
	if (host[0] == '[' && hl >= 2 && host[hl - 1] == ']') {
		host[hl - 1] = 0;
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		if (inet_pton(AF_INET6, host + 1, &in6->sin6_addr) != 1)
			goto bad;
	} else {
		struct sockaddr_in *in = (struct sockaddr_in *)&ss;
		in->sin_family = AF_INET;
		in->sin_port = htons((uint16_t)port);
		if (inet_pton(AF_INET, host, &in->sin_addr) != 1)
			goto bad;
	}
	return iwv_av_from_sockaddr(s, av, (struct sockaddr *)&ss);
bad:
	return s ? iwvi_seterr(s, EINVAL, "address %s: want ip:port or [ip6]:port", addr ? addr : "(null)") : -EINVAL;
}

IWV_EXPORT int iwv_av_format(const struct iwv_av *av, char *buf, size_t len)
{
	char ip[INET6_ADDRSTRLEN];
	int n;
	if (av->family == W_AV_IPV4) {
		if (!inet_ntop(AF_INET, av->ip + 12, ip, sizeof ip))
			return -EINVAL;
		n = snprintf(buf, len, "%s:%u", ip, av->port);
	} else if (av->family == W_AV_IPV6) {
		if (!inet_ntop(AF_INET6, av->ip, ip, sizeof ip))
			return -EINVAL;
		n = snprintf(buf, len, "[%s]:%u", ip, av->port);
	} else {
		return -EINVAL;
	}
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

IWV_EXPORT int iwv_av_to_sockaddr(const struct iwv_av *av, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof *ss);
	if (av->family == W_AV_IPV4) {
		struct sockaddr_in *in = (struct sockaddr_in *)ss;
		in->sin_family = AF_INET;
		in->sin_port = htons(av->port);
		memcpy(&in->sin_addr, av->ip + 12, 4);
		return (int)sizeof *in;
	}
	if (av->family == W_AV_IPV6) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(av->port);
		memcpy(&in6->sin6_addr, av->ip, 16);
		return (int)sizeof *in6;
	}
	return -EINVAL;
}
