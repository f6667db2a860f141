/*
 * t_fi_msgdata.c — FI_REMOTE_CQ_DATA on FI_EP_MSG endpoints of the iwarpd
 * provider between two processes over real daemons (run by
 * test/libfabric/msgdata_test.go; docs/libfabric.md "Atomics and remote CQ
 * data"): fi_senddata, fi_sendmsg(FI_REMOTE_CQ_DATA), fi_injectdata and
 * fi_writedata (fi_msg(3), fi_rma(3)). Each message takes exactly one
 * posted receive at the target, which completes with the data, its length
 * and the CQ data (RFC 7306 Send with Immediate, merged: merge_send_imm).
 *
 *   t_fi_msgdata server     prints "READY ip:port key base" (its write area),
 *                           accepts one client, checks every completion in
 *                           order, prints "SERVER OK"
 *   t_fi_msgdata client ip:port key base
 *
 * Receives are posted into a registered buffer (the daemon places the data
 * straight there) except two, which are unregistered (the provider's bounce
 * buffers, copied out at completion: each message its own memory); the
 * client sends from a registered buffer, from unregistered memory and
 * inline (fi_injectdata). Then ROUNDS round trips of 8 octets with fi_send
 * and ROUNDS with fi_senddata (the CQ data of each checked), each answered
 * by a fi_send: the client prints their mean times (information only).
 * Every wait is bounded (T_TIMEOUT_S seconds times IWARPD_TEST_TIMEOUT_SCALE).
 */
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#define FITEST_NAME "t_fi_msgdata"
#include "fitest.h"

#define T_TIMEOUT_S 60
#define SLOT (96 << 10) /* one receive's room in the server's buffer */
#define BIG (80 << 10)	/* several FPDUs */
#define WOFF 4096	/* where fi_writedata writes in the server's write area */
#define ROUNDS 300
#define PONG 16384 /* the server's ping/pong buffers in its write area */

enum kind { SENDDATA, SEND, SENDMSG, INJECTDATA, WRITEDATA, DONE };

/* The messages, in order; the server checks each receive against its entry. */
static const struct {
	enum kind kind;
	size_t len;
	uint64_t data;
	int unregistered; /* client: from malloc'ed memory; server: receive into unregistered memory */
} msgs[] = {
	{SENDDATA, 8, 0x11111111, 0},  {SEND, 33, 0, 0},	     {SENDMSG, 1000, 0x22, 0},
	{INJECTDATA, 16, 0x33, 0},     {SENDDATA, 0, 0, 0},	     {WRITEDATA, 64, 0x44, 0},
	{SENDDATA, BIG, 0xffffffff, 0}, {SENDDATA, 5000, 0x55, 1}, {SENDMSG, 1, 0x66, 1},
	{DONE, 8, 0, 0},
};
#define NMSGS (sizeof(msgs) / sizeof(msgs[0]))

static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_cq *cq;
static struct fid_eq *eq;
static struct fid_ep *ep;
static struct fi_info *info;

/* One completion; an error entry is fatal. */
static void cq_wait(struct fi_cq_data_entry *e, const char *what)
{
	for (;;) {
		ssize_t n = fi_cq_read(cq, e, 1);
		if (n == 1)
			return;
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

/* Octet j of message i. */
static unsigned char pat(size_t i, size_t j) { return (unsigned char)(i * 31 + j * 7 + (j >> 8)); }

static void open_common(const struct sockaddr_in *dest)
{
	struct fi_info *h = fi_allocinfo();
	struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_DATA, .size = 64};
	struct fi_eq_attr ea = {.wait_obj = FI_WAIT_UNSPEC};
	fitest_set_deadline(T_TIMEOUT_S);
	if (!h)
		fitest_die("fi_allocinfo");
	h->ep_attr->type = FI_EP_MSG;
	h->caps = FI_MSG | FI_RMA | FI_REMOTE_CQ_DATA;
	h->mode = FI_RX_CQ_DATA;
	h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED;
	h->domain_attr->cq_data_size = 4;
	h->addr_format = FI_SOCKADDR_IN;
	h->fabric_attr->prov_name = strdup("iwarpd");
	if (dest) {
		h->dest_addr = malloc(sizeof(*dest));
		memcpy(h->dest_addr, dest, sizeof(*dest));
		h->dest_addrlen = sizeof(*dest);
	}
	CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info));
	fi_freeinfo(h);
	if (!(info->caps & FI_REMOTE_CQ_DATA) || info->domain_attr->cq_data_size != 4)
		fitest_die("fi_getinfo: caps %#llx, cq_data_size %zu: want FI_REMOTE_CQ_DATA and 4",
		    (unsigned long long)info->caps, info->domain_attr->cq_data_size);
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK(fi_domain(fabric, info, &domain, NULL));
	CHECK(fi_cq_open(domain, &ca, &cq, NULL));
	CHECK(fi_eq_open(fabric, &ea, &eq, NULL));
}

static struct fid_ep *open_ep(struct fi_info *fi)
{
	struct fid_ep *e;
	CHECK(fi_endpoint(domain, fi, &e, NULL));
	CHECK(fi_ep_bind(e, &cq->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_ep_bind(e, &eq->fid, 0));
	CHECK(fi_enable(e));
	return e;
}

static void wait_cm(uint32_t want, struct fi_eq_cm_entry *entry)
{
	uint32_t ev;
	for (;;) {
		ssize_t n = fi_eq_sread(eq, &ev, entry, sizeof(*entry) + 64, 200, 0);
		if (n > 0) {
			if (ev != want)
				fitest_die("EQ event %u, want %u", ev, want);
			return;
		}
		if (n == -FI_EAVAIL) {
			struct fi_eq_err_entry err = {0};
			fi_eq_readerr(eq, &err, 0);
			fitest_die("EQ error %d (%s)", err.err, fi_strerror(err.err));
		}
		if (n != -FI_EAGAIN && n != -FI_ETIMEDOUT && n < 0)
			fitest_die("fi_eq_sread: %s", fi_strerror((int)-n));
		fitest_check_deadline("a connection event");
	}
}

/* Server: answers 2 * ROUNDS pings (the last ROUNDS with CQ data i) with
 * 8 octets each; b is registered (desc), and the first ping's receive was
 * posted with the messages' (a ping must never find none). */
static void pong(unsigned char *b, void *desc)
{
	size_t got = 0, sent = 0;
	int tx;
	while (got < 2 * ROUNDS || sent < got) {
		struct fi_cq_data_entry e;
		int with_data = got >= ROUNDS;
		cq_wait(&e, "a ping");
		if (e.op_context == &tx) {
			sent++;
			continue;
		}
		if (e.op_context != b || e.len != 8 || !(e.flags & FI_REMOTE_CQ_DATA) != !with_data ||
		    (with_data && e.data != got - ROUNDS))
			fitest_die("ping %zu: completion context %p flags %#llx len %zu data %#llx", got, e.op_context,
			    (unsigned long long)e.flags, e.len, (unsigned long long)e.data);
		got++;
		if (got < 2 * ROUNDS)
			CHECK(fi_recv(ep, b, 8, desc, 0, b));
		POST(fi_send(ep, b + 64, 8, desc, 0, &tx), "fi_send(pong)");
	}
}

/* Client: ROUNDS round trips of 8 octets (fi_senddata with data); the
 * mean time of one in microseconds. */
static double ping(unsigned char *b, void *desc, int data)
{
	double t0 = now_s();
	int i, tx;
	for (i = 0; i < ROUNDS; i++) {
		int seen = 0;
		CHECK(fi_recv(ep, b + 64, 8, desc, 0, b + 64));
		if (data)
			POST(fi_senddata(ep, b, 8, desc, (uint64_t)i, 0, &tx), "fi_senddata(ping)");
		else
			POST(fi_send(ep, b, 8, desc, 0, &tx), "fi_send(ping)");
		while (seen != 3) {
			struct fi_cq_data_entry e;
			cq_wait(&e, "a pong");
			if (e.op_context == &tx)
				seen |= 1;
			else if (e.op_context == b + 64 && e.len == 8 && !(e.flags & FI_REMOTE_CQ_DATA))
				seen |= 2;
			else
				fitest_die("pong %d: completion context %p flags %#llx", i, e.op_context, (unsigned long long)e.flags);
		}
	}
	return (now_s() - t0) * 1e6 / ROUNDS;
}

static int server(void)
{
	struct fid_pep *pep;
	struct fid_mr *mr;
	struct sockaddr_in sin;
	size_t nlen = sizeof(sin), i, j;
	char name[64];
	unsigned char *buf = calloc(NMSGS + 1, SLOT), *plain = calloc(NMSGS, SLOT), *warea = buf + NMSGS * SLOT;
	struct {
		struct fi_eq_cm_entry e;
		char data[64];
	} ce;

	fitest_role = "server";
	if (!buf || !plain)
		fitest_die("calloc");
	open_common(NULL);
	CHECK(fi_mr_reg(domain, buf, (NMSGS + 1) * SLOT, FI_SEND | FI_RECV | FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL));
	CHECK(fi_passive_ep(fabric, info, &pep, NULL));
	CHECK(fi_pep_bind(pep, &eq->fid, 0));
	CHECK(fi_listen(pep));
	CHECK(fi_getname(&pep->fid, &sin, &nlen));
	inet_ntop(AF_INET, &sin.sin_addr, name, sizeof(name));
	printf("READY %s:%u %llu %llu\n", name, ntohs(sin.sin_port), (unsigned long long)fi_mr_key(mr),
	       (unsigned long long)(uintptr_t)warea);
	fflush(stdout);
	fitest_deadline_s += T_TIMEOUT_S; /* the client starts after READY */
	wait_cm(FI_CONNREQ, &ce.e);
	ep = open_ep(ce.e.info);
	for (i = 0; i < NMSGS; i++) {
		void *b = (msgs[i].unregistered ? plain : buf) + i * SLOT;
		CHECK(fi_recv(ep, b, SLOT, msgs[i].unregistered ? NULL : fi_mr_desc(mr), 0, (void *)&msgs[i]));
	}
	CHECK(fi_recv(ep, warea + PONG, 8, fi_mr_desc(mr), 0, warea + PONG)); /* the first ping's */
	CHECK(fi_accept(ep, NULL, 0));
	fi_freeinfo(ce.e.info);
	wait_cm(FI_CONNECTED, &ce.e);
	for (i = 0; i < NMSGS; i++) {
		struct fi_cq_data_entry e;
		const unsigned char *got = (msgs[i].unregistered ? plain : buf) + i * SLOT;
		uint64_t want = FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA;
		size_t len = msgs[i].len;
		cq_wait(&e, "a message");
		switch (msgs[i].kind) {
		case SEND:
		case DONE:
			want = FI_RECV | FI_MSG;
			break;
		case WRITEDATA:
			want = FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA;
			got = warea + WOFF;
			break;
		default:
			break;
		}
		if (e.op_context != (void *)&msgs[i] || e.flags != want ||
		    (msgs[i].kind != WRITEDATA && e.len != len) || ((want & FI_REMOTE_CQ_DATA) && e.data != msgs[i].data))
			fitest_die("message %zu: completion context %p flags %#llx len %zu data %#llx, want %p %#llx %zu %#llx", i,
			    e.op_context, (unsigned long long)e.flags, e.len, (unsigned long long)e.data,
			    (void *)&msgs[i], (unsigned long long)want, len, (unsigned long long)msgs[i].data);
		for (j = 0; j < len; j++)
			if (got[j] != pat(i, j))
				fitest_die("message %zu: octet %zu is %u, want %u", i, j, got[j], pat(i, j));
	}
	pong(warea + PONG, fi_mr_desc(mr));
	printf("SERVER OK %zu messages, %d pings\n", NMSGS, 2 * ROUNDS);
	fi_close(&ep->fid);
	fi_close(&pep->fid);
	CHECK(fi_close(&mr->fid));
	free(buf);
	free(plain);
	return 0;
}

static void wait_sent(void *ctx, uint64_t flags, const char *what)
{
	struct fi_cq_data_entry e;
	cq_wait(&e, what);
	if (e.op_context != ctx || (e.flags & flags) != flags)
		fitest_die("%s: completion context %p flags %#llx", what, e.op_context, (unsigned long long)e.flags);
}

static int client(const char *addr, const char *keys, const char *bases)
{
	struct sockaddr_in sin;
	char host[64], *colon;
	struct fid_mr *mr;
	unsigned char *buf = malloc(NMSGS * SLOT), *heap = malloc(SLOT);
	uint64_t key = strtoull(keys, NULL, 0), base = strtoull(bases, NULL, 0);
	size_t i, j;
	int ctx;
	struct {
		struct fi_eq_cm_entry e;
		char data[64];
	} ce;

	fitest_role = "client";
	if (sscanf(addr, "%63s", host) != 1 || !(colon = strchr(host, ':')) || !buf || !heap)
		fitest_die("address %s", addr);
	*colon = 0;
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons((uint16_t)atoi(colon + 1));
	if (inet_pton(AF_INET, host, &sin.sin_addr) != 1)
		fitest_die("address %s", host);
	open_common(&sin);
	ep = open_ep(info);
	CHECK(fi_mr_reg(domain, buf, NMSGS * SLOT, FI_SEND | FI_RECV | FI_WRITE, 0, 0, 0, &mr, NULL));
	CHECK(fi_connect(ep, &sin, NULL, 0));
	wait_cm(FI_CONNECTED, &ce.e);
	/* cq_data_size is 4: wider data is refused before anything is sent. */
	if (fi_senddata(ep, buf, 8, fi_mr_desc(mr), 1ull << 32, 0, &ctx) != -FI_EINVAL ||
	    fi_injectdata(ep, buf, 8, 1ull << 32, 0) != -FI_EINVAL)
		fitest_die("CQ data beyond 32 bits was not refused with -FI_EINVAL");
	for (i = 0; i < NMSGS; i++) {
		unsigned char *src = msgs[i].unregistered ? heap : buf + i * SLOT;
		void *desc = msgs[i].unregistered ? NULL : fi_mr_desc(mr);
		size_t len = msgs[i].len;
		for (j = 0; j < len; j++)
			src[j] = pat(i, j);
		switch (msgs[i].kind) {
		case SENDDATA:
			POST(fi_senddata(ep, src, len, desc, msgs[i].data, 0, &ctx), "fi_senddata");
			wait_sent(&ctx, FI_SEND | FI_MSG, "fi_senddata");
			break;
		case SEND:
		case DONE:
			POST(fi_send(ep, src, len, desc, 0, &ctx), "fi_send");
			wait_sent(&ctx, FI_SEND | FI_MSG, "fi_send");
			break;
		case SENDMSG: {
			/* Two iovecs when there is room for them. */
			size_t first = len > 1 ? len / 10 : len;
			struct iovec iov[2] = {{src, first}, {src + first, len - first}};
			void *descs[2] = {desc, desc};
			struct fi_msg m = {.msg_iov = iov, .desc = descs, .iov_count = len > 1 ? 2 : 1, .addr = 0,
					   .context = &ctx, .data = msgs[i].data};
			POST(fi_sendmsg(ep, &m, FI_REMOTE_CQ_DATA | FI_COMPLETION), "fi_sendmsg(FI_REMOTE_CQ_DATA)");
			wait_sent(&ctx, FI_SEND | FI_MSG, "fi_sendmsg(FI_REMOTE_CQ_DATA)");
			break;
		}
		case INJECTDATA:
			/* No completion; the buffer is free at once. */
			POST(fi_injectdata(ep, src, len, msgs[i].data, 0), "fi_injectdata");
			memset(src, 0xee, len);
			break;
		case WRITEDATA:
			POST(fi_writedata(ep, src, len, desc, msgs[i].data, 0, base + WOFF, key, &ctx), "fi_writedata");
			wait_sent(&ctx, FI_RMA | FI_WRITE, "fi_writedata");
			break;
		}
	}
	{
		double plain = ping(buf, fi_mr_desc(mr), 0), data = ping(buf, fi_mr_desc(mr), 1);
		printf("LATENCY 8-octet round trip (%d each): fi_send %.1f us, fi_senddata %.1f us, ratio %.2f\n", ROUNDS,
		       plain, data, data / plain);
	}
	printf("CLIENT OK %zu messages\n", NMSGS);
	fi_close(&ep->fid);
	CHECK(fi_close(&mr->fid));
	free(buf);
	free(heap);
	return 0;
}

int main(int argc, char **argv)
{
	int ret;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 2 && strcmp(argv[1], "server") == 0)
		ret = server();
	else if (argc == 5 && strcmp(argv[1], "client") == 0)
		ret = client(argv[2], argv[3], argv[4]);
	else
		fitest_die("usage: t_fi_msgdata server | client ip:port key base (the server's READY line)");
	if (eq)
		fi_close(&eq->fid);
	if (cq)
		fi_close(&cq->fid);
	if (domain)
		fi_close(&domain->fid);
	if (fabric)
		fi_close(&fabric->fid);
	fi_freeinfo(info);
	return ret;
}
