/*
 * t_fi_fpreq.c — fi_read and native atomics (fi_fetch_atomic FI_SUM,
 * fi_atomic FI_SUM, fi_compare_atomic FI_CSWAP on FI_UINT64) over
 * FI_EP_RDM sent by the rank itself on its RD QP's socket
 * (c/prov/iwd_fastpath_req.c, c/core fprd_req.h; issue 22,
 * docs/fastpath.md "Reads and atomics the rank sends itself"), run by
 * test/libfabric/fastpath_req_test.go between two processes, each on its
 * own daemon, under AddressSanitizer and UBSan.
 *
 *   t_fi_fpreq server                  registers a window, prints
 *                                      "READY ip:port key base"
 *   t_fi_fpreq client ip:port key base OPS requests into it
 *   t_fi_fpreq client ... bad         a few, then a fetch-add and a Read
 *                                      with a key the server never gave:
 *                                      each completes once, with an error;
 *                                      then a good fetch-add succeeds
 *
 * Window: word 0 a fetch-add counter, word 1 a sum counter, word 2 a
 * compare-and-swap word, words RBASE.. value(i) to read, then a BIG-octet
 * pattern. Request i is, by i % 4, a Read of one word (checked against
 * value()), a fetch-add of 1 (every original value 0..n-1 must come back
 * once), an fi_atomic FI_SUM of SUMV, or a CmpSwap k -> k+1 (one at a time:
 * its result must be k); every BIG_EVERY-th a Read of BIG octets (more
 * than a datagram: the daemon sends it), every MID_EVERY-th one of MID
 * octets (one datagram of the client's at the default datagram size —
 * the rank sends it —, two of a server at -datagram-size 1472: the
 * response goes to the daemon, TestFastpathReqsMixedSizes). At most WINDOW outstanding; every
 * PAUSE_EVERY requests the client stops polling for PAUSE_MS (longer than
 * -fastpath-lease) with requests outstanding, so that the daemon takes the
 * socket over and their responses reach it. Every request completes
 * exactly once, successfully, with its context and value; the server then
 * checks the counters' final values.
 */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#define FITEST_NAME "t_fi_fpreq"
#include "fitest.h"

#define T_TIMEOUT_S 120
#define OPS 3000
#define WINDOW 8
#define PAUSE_EVERY 150
#define PAUSE_MS 20
#define BIG_EVERY 97
#define BIG 3000
#define MID_EVERY 13
#define MID 1800 /* one datagram of the client's default size, two of a peer at -datagram-size 1472 */
#define NREAD 256
#define RBASE 8
#define SUMV 1000
#define WIN_LEN ((RBASE + NREAD) * 8 + BIG)
#define TAG 0x7a7bull

struct msg {
	uint32_t kind, bad;
	uint64_t fadds, sums, cas;
	struct sockaddr_in from;
};
enum { M_HELLO = 1, M_DONE, M_VERDICT };
enum { K_READ, K_FADD, K_SUM, K_CAS, K_BIG, K_MID };

struct op {
	int kind;
	uint32_t idx;
	uint64_t expect; /* K_READ: the word; K_CAS: the compare value */
	uint64_t result;
	unsigned done;
};

static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_cq *cq;
static struct fid_av *av;
static struct fid_ep *ep;
static struct fid_mr *mr;
static struct fi_info *info, *hints;
static fi_addr_t peer = FI_ADDR_UNSPEC;
static struct msg rxm, txm;
static int rx_done, tx_done;
static struct op ops[OPS + 4];
static unsigned outstanding, cas_out;
static uint64_t fadds, sums, cas_next;
static unsigned char *fadd_seen;
static unsigned char big[BIG];

static uint64_t value(uint32_t i) { return 0x5157000000000000ull ^ ((uint64_t)i * 0x9e3779b97f4a7c15ull); }
static unsigned char big_pat(size_t j) { return (unsigned char)(j * 7 + 3); }

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
	txm.fadds = fadds;
	txm.sums = sums;
	txm.cas = cas_next;
	if (kind == M_HELLO) {
		size_t al = sizeof(txm.from);
		CHECK(fi_getname(&ep->fid, &txm.from, &al));
	}
	tx_done = 0;
	POST(fi_tsend(ep, &txm, sizeof(txm), NULL, peer, TAG, &txm), "fi_tsend");
}

/* check_op: request o completed successfully. */
static void check_op(struct op *o, uint64_t flags)
{
	size_t i = (size_t)(o - ops);
	if (o->done++)
		fitest_die("request %zu completed twice", i);
	uint64_t want = o->kind == K_READ || o->kind == K_BIG || o->kind == K_MID ? (FI_RMA | FI_READ)
			: o->kind == K_SUM			       ? (FI_ATOMIC | FI_WRITE)
								       : (FI_ATOMIC | FI_READ);
	if ((flags & want) != want)
		fitest_die("request %zu (kind %d) completed with flags %#llx", i, o->kind, (unsigned long long)flags);
	switch (o->kind) {
	case K_READ:
		if (o->result != o->expect)
			fitest_die("read %zu of word %u: %#llx, want %#llx", i, o->idx, (unsigned long long)o->result,
				   (unsigned long long)o->expect);
		break;
	case K_FADD:
		if (o->result >= OPS || fadd_seen[o->result]++)
			fitest_die("fetch-add %zu: original value %llu out of range or seen twice", i,
				   (unsigned long long)o->result);
		break;
	case K_CAS:
		if (o->result != o->expect)
			fitest_die("cmpswap %zu: original %llu, want %llu", i, (unsigned long long)o->result,
				   (unsigned long long)o->expect);
		cas_next = o->expect + 1;
		cas_out--;
		break;
	case K_BIG:
	case K_MID:
		for (size_t j = 0; j < (o->kind == K_BIG ? BIG : MID); j++)
			if (big[j] != big_pat(j))
				fitest_die("read %zu of %d octets: octet %zu is %#x, want %#x", i,
					   o->kind == K_BIG ? BIG : MID, j, big[j], big_pat(j));
		break;
	}
}

/* poll_one reads one completion (0 if none); an error completion of a
 * request is returned through *err (NULL: fatal). */
static int poll_one(const char *what, struct fi_cq_err_entry *err)
{
	struct fi_cq_data_entry e;
	ssize_t n = fi_cq_read(cq, &e, 1);
	if (n == -FI_EAGAIN)
		return 0;
	if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry x;
		memset(&x, 0, sizeof(x));
		fi_cq_readerr(cq, &x, 0);
		if (!err)
			fitest_die("%s: error completion %d (%s), provider errno %d, context %p", what, x.err,
				   fi_strerror(x.err), x.prov_errno, x.op_context);
		*err = x;
		return 2;
	}
	if (n != 1)
		fitest_die("fi_cq_read (%s): %s", what, fi_strerror((int)-n));
	if (e.op_context == &rxm) {
		rx_done = 1;
	} else if (e.op_context == &txm) {
		tx_done = 1;
	} else {
		struct op *o = e.op_context;
		if (o < ops || o >= ops + OPS + 4)
			fitest_die("%s: a completion with an unknown context %p", what, e.op_context);
		check_op(o, e.flags);
		outstanding--;
	}
	return 1;
}

static void wait_for(int *flag, const char *what)
{
	while (!*flag) {
		poll_one(what, NULL);
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
	hints->caps = FI_TAGGED | FI_RMA | FI_ATOMIC;
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
	uint64_t *win;
	uint32_t bad = 0;
	fitest_role = "server";
	open_ep();
	win = calloc(1, WIN_LEN);
	if (!win)
		fitest_die("calloc");
	for (uint32_t i = 0; i < NREAD; i++)
		win[RBASE + i] = value(i);
	for (size_t j = 0; j < BIG; j++)
		((unsigned char *)(win + RBASE + NREAD))[j] = big_pat(j);
	CHECK(fi_mr_reg(domain, win, WIN_LEN, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL));
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
	wait_for(&rx_done, "done"); /* the requests are served meanwhile, polled or not */
	if (rxm.kind != M_DONE)
		fitest_die("message of kind %u, want done", rxm.kind);
	uint64_t w0 = __atomic_load_n(&win[0], __ATOMIC_SEQ_CST), w1 = __atomic_load_n(&win[1], __ATOMIC_SEQ_CST),
		 w2 = __atomic_load_n(&win[2], __ATOMIC_SEQ_CST);
	if (w0 != rxm.fadds || w1 != rxm.sums * SUMV || w2 != rxm.cas) {
		fprintf(stderr, "t_fi_fpreq server: counters %llu %llu %llu, want %llu %llu %llu\n", (unsigned long long)w0,
			(unsigned long long)w1, (unsigned long long)w2, (unsigned long long)rxm.fadds,
			(unsigned long long)(rxm.sums * SUMV), (unsigned long long)rxm.cas);
		bad = 1;
	}
	send_msg(M_VERDICT, bad);
	wait_for(&tx_done, "verdict sent");
	printf("CHECKED bad=%u\n", bad);
	finish("SERVER");
	free(win);
}

static void connect_peer(const char *dest)
{
	struct sockaddr_in sin;
	char host[64], *colon;
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
}

/* issue posts request i of kind k. */
static void issue(uint32_t i, int k, uint64_t key, uint64_t base)
{
	struct op *o = &ops[i];
	static const uint64_t one = 1, sumv = SUMV;
	o->kind = k;
	o->idx = i % NREAD;
	switch (k) {
	case K_READ:
		o->expect = value(o->idx);
		POST(fi_read(ep, &o->result, 8, NULL, peer, base + (RBASE + o->idx) * 8, key, o), "fi_read");
		break;
	case K_BIG:
	case K_MID:
		memset(big, 0, sizeof(big));
		POST(fi_read(ep, big, k == K_BIG ? BIG : MID, NULL, peer, base + (RBASE + NREAD) * 8, key, o),
		     "fi_read (big)");
		break;
	case K_FADD:
		POST(fi_fetch_atomic(ep, &one, 1, NULL, &o->result, NULL, peer, base, key, FI_UINT64, FI_SUM, o),
		     "fi_fetch_atomic");
		fadds++;
		break;
	case K_SUM:
		POST(fi_atomic(ep, &sumv, 1, NULL, peer, base + 8, key, FI_UINT64, FI_SUM, o), "fi_atomic");
		sums++;
		break;
	default: {
		uint64_t swap = cas_next + 1;
		o->expect = cas_next;
		POST(fi_compare_atomic(ep, &swap, 1, NULL, &o->expect, NULL, &o->result, NULL, peer, base + 16, key,
				       FI_UINT64, FI_CSWAP, o),
		     "fi_compare_atomic");
		cas_out++;
	}
	}
	outstanding++;
}

static void client(const char *dest, uint64_t key, uint64_t base)
{
	fitest_role = "client";
	fadd_seen = calloc(OPS, 1);
	if (!fadd_seen)
		fitest_die("calloc");
	connect_peer(dest);
	for (uint32_t i = 0; i < OPS; i++) {
		while (outstanding >= WINDOW) {
			poll_one("request completions", NULL);
			fitest_check_deadline("request completions");
		}
		int k = (int)(i % 4);
		if (i % BIG_EVERY == BIG_EVERY - 1 || i % MID_EVERY == MID_EVERY - 1) {
			while (outstanding > 0) { /* big is one buffer */
				poll_one("before a big read", NULL);
				fitest_check_deadline("before a big read");
			}
			k = i % BIG_EVERY == BIG_EVERY - 1 ? K_BIG : K_MID;
		} else if (k == K_CAS && cas_out > 0) {
			k = K_READ;
		}
		issue(i, k, key, base);
		if (k == K_BIG || k == K_MID) {
			while (outstanding > 0) {
				poll_one("a big read", NULL);
				fitest_check_deadline("a big read");
			}
		}
		if (i % PAUSE_EVERY == PAUSE_EVERY - 1)
			sleep_ms(PAUSE_MS); /* requests outstanding, nobody polling: the daemon takes over */
	}
	while (outstanding > 0) {
		poll_one("the last completions", NULL);
		fitest_check_deadline("the last completions");
	}
	for (uint32_t i = 0; i < OPS; i++)
		if (ops[i].done != 1)
			fitest_die("request %u completed %u times", i, ops[i].done);
	for (uint64_t v = 0; v < fadds; v++)
		if (fadd_seen[v] != 1)
			fitest_die("fetch-add original value %llu seen %u times", (unsigned long long)v, fadd_seen[v]);
	send_msg(M_DONE, 0);
	wait_for(&tx_done, "done sent");
	wait_for(&rx_done, "verdict");
	if (rxm.kind != M_VERDICT || rxm.bad != 0)
		fitest_die("the server found the counters wrong (message kind %u)", rxm.kind);
	printf("REQUESTS %d fadds=%llu sums=%llu cas=%llu\n", OPS, (unsigned long long)fadds, (unsigned long long)sums,
	       (unsigned long long)cas_next);
	finish("CLIENT");
	free(fadd_seen);
}

/* refused posts o's request (with a key the server never gave) and waits
 * for its one completion: it must be an error; prints it. */
static void refused(struct op *o, const char *what)
{
	struct fi_cq_err_entry err;
	for (;;) {
		int r = poll_one(what, &err);
		if (r == 2) {
			if (err.op_context != o)
				fitest_die("an error completion of context %p (%d, %s)", err.op_context, err.err,
					   fi_strerror(err.err));
			printf("REFUSED %s err=%d (%s)\n", what, err.err, fi_strerror(err.err));
			outstanding--;
			return;
		}
		if (o->done)
			fitest_die("the refused %s completed without an error", what);
		fitest_check_deadline(what);
	}
}

/* client_bad: a few requests, then a fetch-add and a Read with a key the
 * server never gave, each while the rank polls (it owns the socket): each
 * must complete once, with an error; the QP stays up, and a good
 * fetch-add afterwards succeeds. */
static void client_bad(const char *dest, uint64_t key, uint64_t base)
{
	static const uint64_t one = 1;
	fitest_role = "client";
	fadd_seen = calloc(OPS, 1);
	if (!fadd_seen)
		fitest_die("calloc");
	connect_peer(dest);
	for (uint32_t i = 0; i < 16; i++) {
		issue(i, i % 2 ? K_FADD : K_READ, key, base);
		while (outstanding > 0) {
			poll_one("request completions", NULL);
			fitest_check_deadline("request completions");
		}
	}
	for (int round = 0; round < 2; round++) {
		double until = now_s() + 0.02; /* polling: the rank owns its socket */
		while (now_s() < until)
			poll_one("polling", NULL);
		struct op *o = &ops[OPS + round];
		outstanding++;
		if (round == 0) {
			o->kind = K_FADD;
			POST(fi_fetch_atomic(ep, &one, 1, NULL, &o->result, NULL, peer, base, key ^ 0x5a5a5a, FI_UINT64, FI_SUM,
					     o),
			     "fi_fetch_atomic (bad key)");
			refused(o, "fetch-add");
		} else {
			o->kind = K_READ;
			POST(fi_read(ep, &o->result, 8, NULL, peer, base + RBASE * 8, key ^ 0x5a5a5a, o), "fi_read (bad key)");
			refused(o, "read");
		}
	}
	issue(16, K_FADD, key, base);
	while (outstanding > 0) {
		poll_one("the good fetch-add after the refused ones", NULL);
		fitest_check_deadline("the good fetch-add after the refused ones");
	}
	if (ops[16].result != 8)
		fitest_die("the fetch-add after the refused ones: original %llu, want 8", (unsigned long long)ops[16].result);
	printf("AFTER ok\n");
	finish("CLIENT");
	free(fadd_seen);
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
		fprintf(stderr, "usage: t_fi_fpreq server | client ip:port key base [bad]\n");
		return 2;
	}
	return 0;
}
