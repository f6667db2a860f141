/*
 * qpsock.c — client-made QP sockets (ABI 5; ofverbs/qpsock.go,
 * docs/design-small-messages.md "Security: a socket in the client's hands"):
 * the UDP socket of a UD or RD QP is made and bound by this process, so its
 * datagrams carry this process's credentials (uid for the firewall's owner
 * match, its cgroup), then handed to the daemon with create-qp
 * (SCM_RIGHTS, descriptor 1) after the daemon reserved its port
 * (reserve-port). The QP keeps its copy (qp->sock) for the fast path
 * (design step 3) and closes it when destroyed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"

#ifndef SO_NETNS_COOKIE
#define SO_NETNS_COOKIE 71 /* socket(7), Linux 5.14 */
#endif

/* netns_cookie returns SO_NETNS_COOKIE of this process's network namespace,
 * 0 when the kernel does not say. */
static uint64_t netns_cookie(void)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	uint64_t v = 0;
	socklen_t len = sizeof v;
	if (getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, &v, &len) < 0 || len != sizeof v)
		v = 0;
	close(fd);
	return v;
}

int iwvi_client_sockets(uint64_t daemon_cookie)
{
	const char *env = getenv(IWV_ENV_QP_SOCKET);
	if (env && strcmp(env, "daemon") == 0)
		return 0;
	return daemon_cookie != 0 && netns_cookie() == daemon_cookie;
}

/* parse_addr reads "ip:port" or "[ip6]:port" into ss. */
static int parse_addr(const char *addr, struct sockaddr_storage *ss, socklen_t *sl)
{
	char host[INET6_ADDRSTRLEN + 2];
	const char *colon = strrchr(addr, ':');
	if (!colon || (size_t)(colon - addr) >= sizeof host)
		return -EINVAL;
	size_t hl = (size_t)(colon - addr);
	memcpy(host, addr, hl);
	host[hl] = 0;
	char *end;
	unsigned long port = strtoul(colon + 1, &end, 10);
	if (*end || colon[1] == 0 || port == 0 || port > 65535)
		return -EINVAL;
	memset(ss, 0, sizeof *ss);
	if (host[0] == '[' && hl >= 2 && host[hl - 1] == ']') {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
		host[hl - 1] = 0;
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		*sl = sizeof *in6;
		return inet_pton(AF_INET6, host + 1, &in6->sin6_addr) == 1 ? 0 : -EINVAL;
	}
	struct sockaddr_in *in = (struct sockaddr_in *)ss;
	in->sin_family = AF_INET;
	in->sin_port = htons((uint16_t)port);
	*sl = sizeof *in;
	return inet_pton(AF_INET, host, &in->sin_addr) == 1 ? 0 : -EINVAL;
}

int iwvi_qp_socket(struct iwv_session *s, enum iwv_qp_type type, uint16_t port, int *fd, uint16_t *bound)
{
	*fd = -1;
	int err = EADDRINUSE;
	/* A port another process took between the reservation and the bind
	 * (the daemon holds none meanwhile) is reserved again, a few times. */
	for (int attempt = 0; attempt < 3; attempt++) {
		json_t *rep, *req = json_object();
		if (!req || iwvi_jset_u64(req, "type", (uint64_t)type) || (port && iwvi_jset_u64(req, "port", port))) {
			json_decref(req);
			return iwvi_seterr(s, ENOMEM, "reserve-port");
		}
		int r = iwvi_call(s, W_OP_RESERVE_PORT, req, NULL, 0, &rep);
		if (r < 0)
			return r;
		char addr[IWV_ADDR_STRLEN] = "";
		iwvi_jget_str(rep, "addr", addr, sizeof addr);
		json_decref(rep);
		struct sockaddr_storage ss;
		socklen_t sl;
		if (parse_addr(addr, &ss, &sl) < 0)
			return iwvi_seterr(s, EPROTO, "reserve-port: the daemon reserved \"%s\", not an address", addr);
		int sock = socket(ss.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_UDP);
		if (sock < 0)
			return iwvi_seterr(s, errno, "create-qp: socket for the QP");
		if (bind(sock, (struct sockaddr *)&ss, sl) == 0) {
			*fd = sock;
			*bound = ss.ss_family == AF_INET ? ntohs(((struct sockaddr_in *)&ss)->sin_port)
							 : ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
			return 0;
		}
		err = errno;
		close(sock);
		if (err != EADDRINUSE || port)
			break;
	}
	return iwvi_seterr(s, err, "create-qp: binding the QP's socket to the port iwarpd reserved: %s (set %s=daemon to let iwarpd make it)",
			   strerror(err), IWV_ENV_QP_SOCKET);
}
