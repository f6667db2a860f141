/*
 * t_fi_fprma.c — fi_write over FI_EP_RDM sent by the rank itself on its
 * RD QP's socket (c/prov/iwd_fastpath_rma.c, c/core fprd_rma_tx.h; issue
 * 22, docs/fastpath.md "RDMA Writes the rank sends itself"), run by
 * test/libfabric/fastpath_rma_test.go between two processes, each on its
 * own daemon, under AddressSanitizer and UBSan, with
 * FI_IWARPD_FASTPATH_RDM=1.
 *
 *   t_fi_fprma server                  registers a window, prints
 *                                      "READY ip:port key base"
 *   t_fi_fprma client ip:port key base WRITES fi_write calls into it
 *   t_fi_fprma client ... bad         a few, then one with a key the
 *                                      server never gave: it must complete
 *                                      once, with an error
 *
 * Word i of the window receives value(i) from write i (8 octets, the rank
 * sends them itself while it owns the socket); every BIG_EVERY-th write is
 * BIG octets into the big region instead (more than one datagram: the
 * daemon sends it, the rank giving the socket back first); every 7th is an
 * fi_writemsg with FI_DELIVERY_COMPLETE. At most WINDOW writes are
 * outstanding; every PAUSE_EVERY writes the client stops polling for
 * PAUSE_MS (longer than the daemon's -fastpath-lease) with writes
 * outstanding, so that the daemon takes the socket over and their ACKs
 * reach it: those writes complete when the socket comes back. Every write
 * must complete exactly once, successfully, with its own context; then the
 * client sends "done" and the server checks every word and the big region
 * and answers with the number of wrong octets, which must be 0.
 *
 * At the end each side prints "DONE" and waits for a line on stdin before
 * it closes (the test reads the daemons' counters meanwhile), then
 * "SERVER OK" / "CLIENT OK". Every wait is bounded (T_TIMEOUT_S, scaled by
 * IWARPD_TEST_TIMEOUT_SCALE).
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
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#define FITEST_NAME "t_fi_fprma"
#include "fitest.h"

#define T_TIMEOUT_S 120
#define WRITES 3000
#define WINDOW 8
#define PAUSE_EVERY 150
#define PAUSE_MS 20
#define BIG_EVERY 97
#define BIG 3000
#define NBIG (WRITES / BIG_EVERY + 1)
#define WIN_LEN (WRITES * 8 + NBIG * BIG)
#define TAG 0x7a7aull

struct msg {
	uint32_t kind, bad;
	struct sockaddr_in from;
};
enum { M_HELLO = 1, M_DONE, M_VERDICT };

static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_cq *cq;
static struct fid_av *av;
static struct fid_ep *ep;
static struct fi_info *info, *hints;
static fi_addr_t peer = FI_ADDR_UNSPEC;
static struct msg rxm, txm;
static int rx_done, tx_done;
static unsigned char done_count[WRITES];
static unsigned outstanding;
static struct fid_mr *mr; /* the server's window */

static uint64_t value(uint32_t i) { return 0x5157000000000000ull ^ ((uint64_t)i * 0x9e3779b97f4a7c15ull); }
static unsigned char big_pat(uint32_t i, size_t j) { return (unsigned char)(i * 31 + j * 3 + 5); }

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

static void post_rx(void)
{
	rx_done = 0;
	POST(fi_trecv(ep, &rxm, sizeof(rxm), NULL, FI_ADDR_UNSPEC, TAG, 0, &rxm), "fi_trecv");
}

static void send_msg(uint32_t kind, uint32_t bad)
{
	memset(&txm, 0, sizeof(txm));
	txm.kind = kind;
	txm.bad = bad;
	if (kind == M_HELLO) {
		size_t al = sizeof(txm.from);
		CHECK(fi_getname(&ep->fid, &txm.from, &al));
	}
	tx_done = 0;
	POST(fi_tsend(ep, &txm, sizeof(txm), NULL, peer, TAG, &txm), "fi_tsend");
}

/* poll_one reads one completion (0 if none) and accounts for it. */
static int poll_one(const char *what)
{
	struct fi_cq_data_entry e;
	ssize_t n = fi_cq_read(cq, &e, 1);
	if (n == -FI_EAGAIN)
		return 0;
	if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry err;
		memset(&err, 0, sizeof(err));
		fi_cq_readerr(cq, &err, 0);
		fitest_die("%s: error completion %d (%s), provider errno %d, context %p", what, err.err,
			   fi_strerror(err.err), err.prov_errno, err.op_context);
	}
	if (n != 1)
		fitest_die("fi_cq_read (%s): %s", what, fi_strerror((int)-n));
	if (e.op_context == &rxm) {
		rx_done = 1;
	} else if (e.op_context == &txm) {
		tx_done = 1;
	} else {
		uintptr_t c = (uintptr_t)e.op_context - (uintptr_t)done_count;
		if ((uintptr_t)e.op_context < (uintptr_t)done_count || c >= WRITES)
			fitest_die("%s: a completion with an unknown context %p (flags %#llx)", what, e.op_context,
				   (unsigned long long)e.flags);
		if ((e.flags & (FI_RMA | FI_WRITE)) != (FI_RMA | FI_WRITE))
			fitest_die("write %zu completed with flags %#llx", (size_t)c, (unsigned long long)e.flags);
		if (done_count[c]++)
			fitest_die("write %zu completed twice", (size_t)c);
		outstanding--;
	}
	return 1;
}

static void wait_for(int *flag, const char *what)
{
	while (!*flag) {
		poll_one(what);
		fitest_check_deadline(what);
	}
}

static void open_ep(void)
{
	struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_DATA, .size = 256};
	struct fi_av_attr aa = {.type = FI_AV_TABLE};
	fitest_set_deadline(T_TIMEOUT_S);
	hints = fi_allocinfo();
	if (!hints)
		fitest_die("fi_allocinfo");
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_TAGGED | FI_RMA;
	hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED;
	hints->addr_format = FI_SOCKADDR_IN;
	hints->fabric_attr->prov_name = strdup("iwarpd");
	CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK(fi_domain(fabric, info, &domain, NULL));
	CHECK(fi_av_open(domain, &aa, &av, NULL));
	fitest_open_eps(domain, info, av, &ca, 1, &ep, &cq);
}

static void finish(const char *who)
{
	char line[64];
	printf("DONE\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		fitest_die("stdin closed before the go-ahead");
	{
		struct fi_cq_data_entry e;
		if (fi_cq_read(cq, &e, 1) == 1)
			fitest_die("a completion after the last message (flags %#llx)", (unsigned long long)e.flags);
	}
	fi_close(&ep->fid);
	fi_close(&cq->fid);
	if (mr)
		fi_close(&mr->fid);
	if (fitest_close(av, domain, fabric, info, hints))
		exit(1);
	printf("%s OK\n", who);
}

static void server(void)
{
	struct sockaddr_in me;
	size_t al = sizeof(me);
	char ip[INET_ADDRSTRLEN];
	unsigned char *win;
	uint32_t bad = 0;
	fitest_role = "server";
	open_ep();
	win = calloc(1, WIN_LEN);
	if (!win)
		fitest_die("calloc");
	CHECK(fi_mr_reg(domain, win, WIN_LEN, FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL));
	post_rx();
	CHECK(fi_getname(&ep->fid, &me, &al));
	inet_ntop(AF_INET, &me.sin_addr, ip, sizeof(ip));
	printf("READY %s:%u %llu %llu\n", ip, ntohs(me.sin_port), (unsigned long long)fi_mr_key(mr),
	       (unsigned long long)(uintptr_t)win);
	fflush(stdout);
	fitest_deadline_s += T_TIMEOUT_S; /* the client starts after READY */
	wait_for(&rx_done, "hello");
	if (rxm.kind != M_HELLO)
		fitest_die("first message of kind %u", rxm.kind);
	CHECK(fi_av_insert(av, &rxm.from, 1, &peer, 0, NULL) == 1 ? 0 : -FI_EINVAL);
	post_rx();
	send_msg(M_HELLO, 0);
	wait_for(&tx_done, "hello back sent");
	wait_for(&rx_done, "done"); /* the writes land meanwhile, polled or not */
	if (rxm.kind != M_DONE)
		fitest_die("message of kind %u, want done", rxm.kind);
	for (uint32_t i = 0; i < WRITES; i++) {
		if (i % BIG_EVERY == BIG_EVERY - 1) {
			const unsigned char *b = win + WRITES * 8 + (size_t)(i / BIG_EVERY) * BIG;
			for (size_t j = 0; j < BIG; j++)
				if (b[j] != big_pat(i, j) && bad++ < 5)
					fprintf(stderr, "t_fi_fprma server: big write %u octet %zu is %#x, want %#x\n", i, j,
						b[j], big_pat(i, j));
			continue;
		}
		uint64_t v;
		memcpy(&v, win + (size_t)i * 8, 8);
		if (v != value(i) && bad++ < 5)
			fprintf(stderr, "t_fi_fprma server: word %u is %#llx, want %#llx\n", i, (unsigned long long)v,
				(unsigned long long)value(i));
	}
	send_msg(M_VERDICT, bad);
	wait_for(&tx_done, "verdict sent");
	printf("CHECKED bad=%u\n", bad);
	finish("SERVER");
	free(win);
}

static void client(const char *dest, uint64_t key, uint64_t base)
{
	struct sockaddr_in sin;
	char host[64], *colon;
	static unsigned char big[BIG];
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
	post_rx();
	send_msg(M_HELLO, 0);
	wait_for(&rx_done, "hello back");
	post_rx();
	wait_for(&tx_done, "hello sent");
	for (uint32_t i = 0; i < WRITES; i++) {
		while (outstanding >= WINDOW) {
			poll_one("write completions");
			fitest_check_deadline("write completions");
		}
		void *ctx = &done_count[i];
		if (i % BIG_EVERY == BIG_EVERY - 1) {
			for (size_t j = 0; j < BIG; j++)
				big[j] = big_pat(i, j);
			POST(fi_write(ep, big, BIG, NULL, peer, base + WRITES * 8 + (uint64_t)(i / BIG_EVERY) * BIG, key, ctx),
			     "fi_write (big)");
		} else {
			uint64_t v = value(i);
			if (i % 7 == 3) {
				struct iovec iov = {&v, 8};
				struct fi_rma_iov riov = {base + (uint64_t)i * 8, 8, key};
				struct fi_msg_rma m = {.msg_iov = &iov, .iov_count = 1, .addr = peer, .rma_iov = &riov,
						       .rma_iov_count = 1, .context = ctx};
				POST(fi_writemsg(ep, &m, FI_DELIVERY_COMPLETE | FI_COMPLETION), "fi_writemsg");
			} else {
				POST(fi_write(ep, &v, 8, NULL, peer, base + (uint64_t)i * 8, key, ctx), "fi_write");
			}
		}
		outstanding++;
		if (i % PAUSE_EVERY == PAUSE_EVERY - 1)
			sleep_ms(PAUSE_MS); /* writes outstanding, nobody polling: the daemon takes over */
	}
	while (outstanding > 0) {
		poll_one("the last write completions");
		fitest_check_deadline("the last write completions");
	}
	for (uint32_t i = 0; i < WRITES; i++)
		if (done_count[i] != 1)
			fitest_die("write %u completed %u times", i, done_count[i]);
	send_msg(M_DONE, 0);
	wait_for(&tx_done, "done sent");
	wait_for(&rx_done, "verdict");
	if (rxm.kind != M_VERDICT || rxm.bad != 0)
		fitest_die("the server found %u wrong octets or words (message kind %u)", rxm.bad, rxm.kind);
	printf("WROTE %d\n", WRITES);
	finish("CLIENT");
}

/* client_bad: a few Writes, then one to a key the server never gave (the
 * target refuses it: an error message comes back). It must complete once,
 * with an error; the QP fails (the daemon has no work request to give the
 * error to: docs/fastpath.md), so nothing else is checked after it. */
static void client_bad(const char *dest, uint64_t key, uint64_t base)
{
	struct sockaddr_in sin;
	char host[64], *colon;
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
	post_rx();
	send_msg(M_HELLO, 0);
	wait_for(&rx_done, "hello back");
	wait_for(&tx_done, "hello sent");
	for (uint32_t i = 0; i < 16; i++) {
		uint64_t v = value(i);
		POST(fi_write(ep, &v, 8, NULL, peer, base + (uint64_t)i * 8, key, &done_count[i]), "fi_write");
		outstanding++;
		while (outstanding > 0) {
			poll_one("write completions");
			fitest_check_deadline("write completions");
		}
	}
	{
		double until = now_s() + 0.02; /* polling: the rank owns its socket */
		while (now_s() < until)
			poll_one("polling");
	}
	uint64_t v = 1;
	POST(fi_write(ep, &v, 8, NULL, peer, base, key ^ 0x5a5a5a, &done_count[100]), "fi_write (bad key)");
	for (;;) {
		struct fi_cq_data_entry e;
		ssize_t n = fi_cq_read(cq, &e, 1);
		if (n == 1)
			fitest_die("the refused write completed without an error (context %p)", e.op_context);
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry err;
			memset(&err, 0, sizeof(err));
			CHECK(fi_cq_readerr(cq, &err, 0));
			if (err.op_context != &done_count[100])
				fitest_die("an error completion of context %p (%d, %s)", err.op_context, err.err,
					   fi_strerror(err.err));
			printf("REFUSED err=%d (%s)\n", err.err, fi_strerror(err.err));
			break;
		}
		if (n != -FI_EAGAIN)
			fitest_die("fi_cq_read: %s", fi_strerror((int)-n));
		fitest_check_deadline("the refused write's completion");
	}
	finish("CLIENT");
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 2 && !strcmp(argv[1], "server"))
		server();
	else if (argc == 6 && !strcmp(argv[1], "client") && !strcmp(argv[5], "bad"))
		client_bad(argv[2], strtoull(argv[3], NULL, 0), strtoull(argv[4], NULL, 0));
	else if (argc == 5 && !strcmp(argv[1], "client"))
		client(argv[2], strtoull(argv[3], NULL, 0), strtoull(argv[4], NULL, 0));
	else {
		fprintf(stderr, "usage: t_fi_fprma server | client ip:port key base [bad]\n");
		return 2;
	}
	return 0;
}
