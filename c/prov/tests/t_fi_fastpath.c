/*
 * t_fi_fastpath.c — FI_EP_DGRAM ping-pong through the provider's fast path
 * (c/prov/iwd_fastpath.c; issue 20, docs/fastpath.md "The provider"), run
 * by test/libfabric/fastpath_test.go between two processes, each on its own
 * daemon, under AddressSanitizer and UBSan.
 *
 *   t_fi_fastpath server          prints "READY ip:port", answers every
 *                                 ping with a pong of the same sequence
 *   t_fi_fastpath client ip:port  ROUNDS round trips, then bursts
 *   t_fi_fastpath -rdm ...        the same over FI_EP_RDM with tagged
 *                                 messages (fi_tsend/fi_trecv, one tag),
 *                                 for RDM's fast path (iwd_fastpath_rd.c,
 *                                 on unless FI_IWARPD_FASTPATH_RDM=0)
 *   t_fi_fastpath -rdm -tail N ...  then the client sends N more 8-octet
 *                                 messages and closes its endpoint at
 *                                 once, before it prints "DONE": fi_close
 *                                 must let them arrive (its wait for the
 *                                 acknowledgements, iwd_fprd_unacked), the
 *                                 server expects every one
 *
 * Every message carries (sequence, kind, length) and a payload pattern;
 * each side checks that every message arrives exactly once, in order, with
 * its pattern, and that every send completes exactly once. The messages
 * are mostly 8 octets (the rank reads and sends them itself while it owns
 * the socket), some 1000, and every 64th is larger than one datagram (the
 * rank leaves it to the daemon with the socket). Every PAUSE_EVERY round
 * trips one side stops polling for PAUSE_MS (longer than the daemon's
 * -fastpath-lease): the server after its pong, the client after its ping,
 * so that the next message arrives while its receiver does not poll and
 * the daemon takes the socket over and delivers it; then the side polls
 * again and asks the socket back. Then BURSTS bursts of BURST messages,
 * the server pausing after the BURST/3rd of each: completions of the rank
 * and of the daemon must reach fi_cq_read in arrival order.
 *
 * At the end each side prints "DONE" and waits for a line on stdin before
 * it closes its endpoint (the test reads the daemons' counters meanwhile),
 * then "SERVER OK" / "CLIENT OK". Every wait is bounded (T_TIMEOUT_S,
 * scaled by IWARPD_TEST_TIMEOUT_SCALE).
 */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#define FITEST_NAME "t_fi_fastpath"
#include "fitest.h"

#define T_TIMEOUT_S 120
#define ROUNDS 2000
#define PAUSE_EVERY 250
#define PAUSE_MS 20
#define BURSTS 8
#define BURST 24
#define NRX 64 /* receives kept posted */
#define BIG 3000 /* more than one datagram at MTU 1500, less than the provider's max_msg_size */
#define SLOT 4096

enum kind { K_HELLO = 1, K_PING, K_PONG, K_BURST };

struct hdr {
	uint32_t seq, kind, len;
	uint32_t pad;
	struct sockaddr_in from; /* HELLO: the client's address */
};

static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_cq *cq;
static struct fid_av *av;
static struct fid_ep *ep;
static struct fi_info *info, *hints;
static char *rxbuf;		    /* NRX receive slots */
static char txbuf[SLOT];
static uint64_t sends_posted, sends_done;
static fi_addr_t peer = FI_ADDR_UNSPEC;
static int rdm; /* -rdm: FI_EP_RDM, tagged */
static uint32_t tail; /* -tail N: N messages the client sends right before it closes */
static int small_only; /* every message 8 octets of payload (the tail) */
#define TAG 0x5a5aull

static unsigned char pat(uint32_t seq, size_t j) { return (unsigned char)(seq * 13 + j * 7 + 1); }

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

static void post_rx(size_t slot)
{
	if (rdm)
		POST(fi_trecv(ep, rxbuf + slot * SLOT, SLOT, NULL, FI_ADDR_UNSPEC, TAG, 0, (void *)(uintptr_t)(slot + 1)),
		     "fi_trecv");
	else
		POST(fi_recv(ep, rxbuf + slot * SLOT, SLOT, NULL, FI_ADDR_UNSPEC, (void *)(uintptr_t)(slot + 1)), "fi_recv");
}

/* msg_len: every 64th message is larger than a datagram, every 7th 1000
 * octets, else 8 octets of payload after the header. */
static size_t msg_len(uint32_t seq)
{
	if (small_only)
		return sizeof(struct hdr) + 8;
	if (seq % 64 == 63)
		return BIG;
	if (seq % 7 == 3)
		return 1000;
	return sizeof(struct hdr) + 8;
}

static void send_msg(uint32_t seq, uint32_t kind)
{
	struct hdr *h = (struct hdr *)txbuf;
	size_t len = msg_len(seq), j;
	memset(h, 0, sizeof(*h));
	h->seq = seq;
	h->kind = kind;
	h->len = (uint32_t)len;
	if (kind == K_HELLO) {
		size_t al = sizeof(h->from);
		CHECK(fi_getname(&ep->fid, &h->from, &al));
	}
	for (j = sizeof(*h); j < len; j++)
		txbuf[j] = (char)pat(seq, j);
	if (rdm)
		POST(fi_tsend(ep, txbuf, len, NULL, peer, TAG, (void *)(uintptr_t)(0x1000000 + seq)), "fi_tsend");
	else
		POST(fi_send(ep, txbuf, len, NULL, peer, (void *)(uintptr_t)(0x1000000 + seq)), "fi_send");
	sends_posted++;
}

/* next_msg polls until a receive completes and returns its header (the
 * slot is reposted by the caller through *slot); send completions are
 * counted on the way. */
static struct hdr *next_msg(size_t *slot, const char *what)
{
	for (;;) {
		struct fi_cq_data_entry e;
		ssize_t n = fi_cq_read(cq, &e, 1);
		if (n == 1) {
			uintptr_t c = (uintptr_t)e.op_context;
			if (e.flags & FI_SEND) {
				if (c < 0x1000000)
					fitest_die("send completion with the context of a receive (%#lx)", (unsigned long)c);
				sends_done++;
				continue;
			}
			if (!(e.flags & FI_RECV) || c < 1 || c > NRX || (rdm && !(e.flags & FI_TAGGED)))
				fitest_die("completion flags %#llx context %#lx", (unsigned long long)e.flags, (unsigned long)c);
			*slot = c - 1;
			struct hdr *h = (struct hdr *)(rxbuf + *slot * SLOT);
			if (e.len != h->len || e.len < sizeof(*h))
				fitest_die("%s: message %u of %zu octets says %u", what, h->seq, e.len, h->len);
			for (size_t j = sizeof(*h); j < e.len; j++)
				if ((unsigned char)rxbuf[*slot * SLOT + j] != pat(h->seq, j))
					fitest_die("%s: message %u octet %zu is %#x, want %#x", what, h->seq, j,
						   (unsigned char)rxbuf[*slot * SLOT + j], pat(h->seq, j));
			return h;
		}
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry err;
			memset(&err, 0, sizeof(err));
			fi_cq_readerr(cq, &err, 0);
			fitest_die("%s: error completion %d (%s), provider errno %d", what, err.err, fi_strerror(err.err),
				   err.prov_errno);
		}
		if (n != -FI_EAGAIN)
			fitest_die("fi_cq_read (%s): %s", what, fi_strerror((int)-n));
		fitest_check_deadline(what);
	}
}

/* expect takes the next message, which must be seq of kind. */
static struct hdr *expect(uint32_t seq, uint32_t kind, const char *what)
{
	size_t slot;
	struct hdr *h = next_msg(&slot, what);
	if (h->seq != seq || h->kind != kind)
		fitest_die("%s: got message %u kind %u, want %u kind %u (lost, duplicated or out of order)", what, h->seq,
			   h->kind, seq, kind);
	static struct hdr copy;
	copy = *h;
	post_rx(slot);
	return &copy;
}

static void open_ep(void)
{
	struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_DATA, .size = 256};
	struct fi_av_attr aa = {.type = FI_AV_TABLE};
	fitest_set_deadline(T_TIMEOUT_S);
	hints = fi_allocinfo();
	if (!hints)
		fitest_die("fi_allocinfo");
	hints->ep_attr->type = rdm ? FI_EP_RDM : FI_EP_DGRAM;
	hints->caps = rdm ? FI_TAGGED : FI_MSG;
	hints->addr_format = FI_SOCKADDR_IN;
	hints->rx_attr->size = NRX;
	hints->fabric_attr->prov_name = strdup("iwarpd");
	CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
	if (info->ep_attr->max_msg_size < BIG)
		fitest_die("max_msg_size %zu < %d", info->ep_attr->max_msg_size, BIG);
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK(fi_domain(fabric, info, &domain, NULL));
	CHECK(fi_av_open(domain, &aa, &av, NULL));
	fitest_open_eps(domain, info, av, &ca, 1, &ep, &cq);
	rxbuf = calloc(NRX, SLOT);
	if (!rxbuf)
		fitest_die("calloc");
	for (size_t i = 0; i < NRX; i++)
		post_rx(i);
}

/* finish: close_first (the client of -tail) closes its endpoint as soon as
 * its sends completed, before "DONE". */
static void finish(const char *who, int close_first)
{
	char line[64];
	/* Every send completes exactly once (UD: when the LLP accepted it). */
	while (sends_done < sends_posted) {
		struct fi_cq_data_entry e;
		ssize_t n = fi_cq_read(cq, &e, 1);
		if (n == 1 && (e.flags & FI_SEND))
			sends_done++;
		else if (n == 1)
			fitest_die("a receive completed after the last message");
		else if (n != -FI_EAGAIN)
			fitest_die("fi_cq_read (send completions): %s", fi_strerror((int)-n));
		fitest_check_deadline("send completions");
	}
	if (close_first) {
		fi_close(&ep->fid);
		fi_close(&cq->fid);
	}
	printf("DONE sends=%llu\n", (unsigned long long)sends_posted);
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		fitest_die("stdin closed before the go-ahead");
	if (!close_first) {
		struct fi_cq_data_entry e;
		if (fi_cq_read(cq, &e, 1) == 1)
			fitest_die("a completion after the last message (flags %#llx)", (unsigned long long)e.flags);
		if (sends_done != sends_posted)
			fitest_die("%llu send completions for %llu sends", (unsigned long long)sends_done,
				   (unsigned long long)sends_posted);
		fi_close(&ep->fid);
		fi_close(&cq->fid);
	}
	free(rxbuf);
	if (fitest_close(av, domain, fabric, info, hints))
		exit(1);
	printf("%s OK\n", who);
}

static void server(void)
{
	struct sockaddr_in me;
	size_t al = sizeof(me);
	char ip[INET_ADDRSTRLEN];
	uint32_t i;
	fitest_role = "server";
	open_ep();
	CHECK(fi_getname(&ep->fid, &me, &al));
	inet_ntop(AF_INET, &me.sin_addr, ip, sizeof(ip));
	printf("READY %s:%u\n", ip, ntohs(me.sin_port));
	fflush(stdout);
	{
		struct hdr *h = expect(0, K_HELLO, "hello");
		CHECK(fi_av_insert(av, &h->from, 1, &peer, 0, NULL) == 1 ? 0 : -FI_EINVAL);
		send_msg(0, K_HELLO);
	}
	for (i = 1; i <= ROUNDS; i++) {
		expect(i, K_PING, "ping");
		send_msg(i, K_PONG);
		if (i % PAUSE_EVERY == 0)
			sleep_ms(PAUSE_MS); /* the next ping arrives while we do not poll */
	}
	for (uint32_t b = 0; b < BURSTS; b++) {
		for (uint32_t k = 0; k < BURST; k++) {
			uint32_t seq = ROUNDS + 1 + b * BURST + k;
			expect(seq, K_BURST, "burst");
			if (k == BURST / 3)
				sleep_ms(PAUSE_MS); /* the rest arrives meanwhile: the daemon delivers it */
		}
		send_msg(ROUNDS + 1 + b, K_PONG); /* the burst's acknowledgement */
	}
	small_only = 1;
	for (uint32_t k = 0; k < tail; k++)
		expect(ROUNDS + 1 + BURSTS * BURST + k, K_BURST, "tail");
	finish("SERVER", 0);
}

static void client(const char *dest)
{
	struct sockaddr_in sin;
	char host[64], *colon;
	uint32_t i;
	fitest_role = "client";
	snprintf(host, sizeof(host), "%s", dest);
	colon = strrchr(host, ':');
	if (!colon)
		fitest_die("address %s: want ip:port", dest);
	*colon = 0;
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons((uint16_t)atoi(colon + 1));
	if (inet_pton(AF_INET, host, &sin.sin_addr) != 1)
		fitest_die("address %s", dest);
	open_ep();
	CHECK(fi_av_insert(av, &sin, 1, &peer, 0, NULL) == 1 ? 0 : -FI_EINVAL);
	send_msg(0, K_HELLO);
	expect(0, K_HELLO, "hello back");
	for (i = 1; i <= ROUNDS; i++) {
		send_msg(i, K_PING);
		if (i % PAUSE_EVERY == PAUSE_EVERY / 2)
			sleep_ms(PAUSE_MS); /* the pong arrives while we do not poll */
		expect(i, K_PONG, "pong");
	}
	for (uint32_t b = 0; b < BURSTS; b++) {
		for (uint32_t k = 0; k < BURST; k++)
			send_msg(ROUNDS + 1 + b * BURST + k, K_BURST);
		expect(ROUNDS + 1 + b, K_PONG, "burst acknowledgement");
	}
	small_only = 1;
	for (uint32_t k = 0; k < tail; k++)
		send_msg(ROUNDS + 1 + BURSTS * BURST + k, K_BURST);
	finish("CLIENT", tail > 0);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 2 && !strcmp(argv[1], "-rdm")) {
		rdm = 1;
		argc--;
		argv++;
	}
	if (argc >= 3 && !strcmp(argv[1], "-tail")) {
		tail = (uint32_t)atoi(argv[2]);
		argc -= 2;
		argv += 2;
	}
	if (argc == 2 && !strcmp(argv[1], "server"))
		server();
	else if (argc == 3 && !strcmp(argv[1], "client"))
		client(argv[2]);
	else {
		fprintf(stderr, "usage: t_fi_fastpath [-rdm] [-tail N] server | client ip:port\n");
		return 2;
	}
	return 0;
}
