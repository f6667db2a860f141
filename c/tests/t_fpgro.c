/*
 * t_fpgro.c — iwvi_fp_own_set_gro never leaves a coalesced buffer to be
 * read as one datagram (c/core fpown.c; docs/fastpath.md "UDP_GRO and
 * buffers coalesced before the switch").
 *
 * A buffer the kernel coalesced while UDP_GRO was on stays whole in the
 * socket's queue; once UDP_GRO is off, recvmsg hands it over without its
 * UDP_GRO control message, so its datagrams read as one: the first's
 * headers, the others as its payload (with CRC on a bad CRC, drop_crc on
 * the MPI runs of issue 20; with CRC off wrong octets delivered). Over
 * loopback, real sockets: a GSO send of three 102-octet datagrams lands
 * coalesced in a UDP_GRO socket; switching UDP_GRO off must then be
 * refused (-EBUSY, UDP_GRO on again) and the buffer read with its control
 * message (102 octets a datagram); once the queue is empty the switch
 * goes through, and a GSO send then arrives as three datagrams. No daemon
 * is needed: the function touches only the socket.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../core/fpown.h"
#include "testlib.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

enum { SEG = 102, NSEG = 3 };

/* send_gso sends NSEG datagrams of SEG octets (octet i of datagram k is
 * k*SEG+i) as one UDP_SEGMENT send to dst. */
static void send_gso(int fd, const struct sockaddr_in *dst)
{
	uint8_t buf[SEG * NSEG];
	for (size_t i = 0; i < sizeof buf; i++)
		buf[i] = (uint8_t)i;
	union {
		struct cmsghdr h;
		uint8_t b[CMSG_SPACE(sizeof(uint16_t))];
	} ctl;
	memset(&ctl, 0, sizeof ctl);
	struct iovec v = {.iov_base = buf, .iov_len = sizeof buf};
	struct msghdr m = {.msg_name = (void *)dst, .msg_namelen = sizeof *dst, .msg_iov = &v, .msg_iovlen = 1,
			   .msg_control = ctl.b, .msg_controllen = sizeof ctl.b};
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_UDP;
	c->cmsg_type = UDP_SEGMENT;
	c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
	uint16_t seg = SEG;
	memcpy(CMSG_DATA(c), &seg, sizeof seg);
	CHECK(sendmsg(fd, &m, 0) == (ssize_t)sizeof buf);
}

/* recv_one reads the buffer at the head of fd (waiting a bounded time)
 * and returns its length; *gso is its UDP_GRO segment size, 0 if none. */
static ssize_t recv_one(int fd, uint8_t *buf, size_t cap, int *gso)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	CHECK(poll(&p, 1, scaled_ms(5000)) == 1);
	union {
		struct cmsghdr h;
		uint8_t b[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct iovec v = {.iov_base = buf, .iov_len = cap};
	struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1, .msg_control = ctl.b, .msg_controllen = sizeof ctl.b};
	ssize_t n = recvmsg(fd, &m, MSG_DONTWAIT);
	CHECK(n > 0);
	*gso = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
		if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO)
			memcpy(gso, CMSG_DATA(c), sizeof *gso);
	return n;
}

/* queued waits (bounded) until fd has a buffer queued. */
static void queued(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	CHECK(poll(&p, 1, scaled_ms(5000)) == 1);
}

int main(void)
{
	int rx = socket(AF_INET, SOCK_DGRAM, 0), tx = socket(AF_INET, SOCK_DGRAM, 0);
	CHECK(rx >= 0 && tx >= 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	CHECK(bind(rx, (struct sockaddr *)&a, sizeof a) == 0);
	socklen_t al = sizeof a;
	CHECK(getsockname(rx, (struct sockaddr *)&a, &al) == 0);
	int one = 1;
	if (setsockopt(rx, SOL_UDP, UDP_GRO, &one, sizeof one) < 0) {
		printf("SKIP: no UDP_GRO (%s)\n", strerror(errno));
		return 0;
	}
	struct iwvi_fp_own o = {.sock = rx};
	uint8_t buf[4096];
	int gso;

	/* 1. A coalesced buffer queued: the switch is refused. */
	send_gso(tx, &a);
	queued(rx);
	int rc = iwvi_fp_own_set_gro(&o, 0);
	if (rc != -EBUSY) {
		ssize_t n = recv_one(rx, buf, sizeof buf, &gso);
		fprintf(stderr, "UDP_GRO switched off over a queued buffer (rc %d): read as %zd octets, UDP_GRO size %d "
				"(one datagram of %zd octets where %d of %d were sent)\n",
			rc, n, gso, n, NSEG, SEG);
		return 1;
	}
	ssize_t n = recv_one(rx, buf, sizeof buf, &gso);
	/* Coalesced (one buffer, its size given) or, had the kernel not
	 * coalesced it, the first datagram alone: never more than SEG octets
	 * without a segment size. */
	CHECK((gso == SEG && n == SEG * NSEG) || (gso == 0 && n == SEG));
	for (ssize_t i = 0; i < n; i++)
		CHECK(buf[i] == (uint8_t)i);
	while (gso == 0 && n == SEG) { /* drain the rest of a segmented send */
		struct pollfd p = {.fd = rx, .events = POLLIN};
		if (poll(&p, 1, 0) != 1)
			break;
		n = recv_one(rx, buf, sizeof buf, &gso);
		CHECK(n == SEG && gso == 0);
	}

	/* 2. An empty queue: the switch goes through, and what arrives after
	 * it is segmented at the socket (three datagrams, no size given). */
	CHECK(iwvi_fp_own_set_gro(&o, 0) == 0);
	send_gso(tx, &a);
	for (int k = 0; k < NSEG; k++) {
		n = recv_one(rx, buf, sizeof buf, &gso);
		CHECK(n == SEG && gso == 0);
		for (ssize_t i = 0; i < n; i++)
			CHECK(buf[i] == (uint8_t)(k * SEG + i));
	}

	/* 3. On again: always allowed. */
	CHECK(iwvi_fp_own_set_gro(&o, 1) == 0);
	close(tx);
	close(rx);
	printf("PASS\n");
	return 0;
}
