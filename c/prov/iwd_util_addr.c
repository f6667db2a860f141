/*
 * iwd_util_addr.c — addresses: the "a.b.c.d:port" strings libiwverbs
 * speaks (listener, CM event and device addresses) as the sockaddr_in
 * that libfabric's FI_SOCKADDR_IN names (fi_getinfo(3) addr_format), and
 * handing one to fi_getname / fi_getpeer (fi_cm(3)).
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iwd.h"

int iwd_parse_sockaddr(const char *ipport, struct sockaddr_in *sin)
{
	char buf[IWV_ADDR_STRLEN];
	char *colon;
	long port;
	memset(sin, 0, sizeof(*sin));
	snprintf(buf, sizeof(buf), "%s", ipport);
	colon = strrchr(buf, ':');
	if (!colon)
		return -FI_EINVAL;
	*colon = 0;
	port = strtol(colon + 1, NULL, 10);
	if (port < 0 || port > 65535)
		return -FI_EINVAL;
	sin->sin_family = AF_INET;
	sin->sin_port = htons((uint16_t)port);
	if (!buf[0])
		return 0;
	if (inet_pton(AF_INET, buf, &sin->sin_addr) != 1)
		return -FI_EINVAL;
	return 0;
}

int iwd_give_sockaddr(const struct sockaddr_in *sin, void *addr, size_t *addrlen)
{
	size_t n;
	if (!addrlen)
		return -FI_EINVAL;
	n = *addrlen;
	*addrlen = sizeof(struct sockaddr_in);
	if (n < sizeof(struct sockaddr_in))
		return -FI_ETOOSMALL;
	if (!addr)
		return -FI_EINVAL;
	memcpy(addr, sin, sizeof(struct sockaddr_in));
	return 0;
}
