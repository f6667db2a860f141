/*
 * t_fi_atomic.c — FI_ATOMIC and FI_REMOTE_CQ_DATA of the iwarpd provider
 * between processes over real daemons (run by test/libfabric/atomic_test.go).
 *
 *   t_fi_atomic server rdm|msg NCLIENTS M K
 *       registers a heap (not page-aligned) target of 8 words with
 *       FI_REMOTE_READ|FI_REMOTE_WRITE, prints "READY addr key base", adds
 *       LOCAL to the counter with CPU atomics while the clients run, takes
 *       every client's senddata/tsenddata/writedata and "done" (its ID: a run
 *       that times out names the clients whose "done" never came), then prints
 *       "COUNTER c SUM s PROTECTED p" and checks them.
 *   t_fi_atomic client rdm|msg ip:port key base ID M K
 *       M FI_SUM fetch-adds of 1 on the counter (prints "FETCH v..."), K
 *       rounds of a CSWAP lock protecting a read-modify-write by RMA, the
 *       compare/fetch/non-fetch/inject/v/msg forms, the FI_ATOMIC_READ form,
 *       invalid datatype/op/count (the fi_atomic(3) errors), a misaligned
 *       target (FI_EACCES), fi_senddata/fi_tsenddata/fi_writedata.
 *
 *       Then the operations the provider runs as CmpSwap loops: 32-bit
 *       fetch-adds on both halves of a word, FI_MAX from every client, and
 *       one client's own word through ATOMIC_WRITE, BOR, BAND, BXOR, MIN,
 *       MAX, a 32-bit CSWAP and ATOMIC_READ (every fetched value checked).
 *
 * Target words: 0 counter, 1 lock, 2 protected, 3 sum, 4 scratch, 5 two
 * 32-bit counters, 6 max, 8.. writedata area, 24.. each client's own word.
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
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#define FITEST_NAME "t_fi_atomic"
#include "fitest.h"

#define T_TIMEOUT_S 60
#define NWORDS 48
#define W_COUNTER 0
#define W_LOCK 1
#define W_PROT 2
#define W_SUM 3
#define W_SCRATCH 4
#define W_E32 5  /* two 32-bit counters (low and high half): the provider's CmpSwap loop */
#define W_EMAX 6 /* FI_MAX of every client's values */
#define W_WDATA 8 /* + client id (at most 16 clients) */
#define W_PRIV 24 /* + client id: one client's sequence of emulated operations */
#define PRIV_FINAL 0x7fffffff9ull
#define LOCAL_ADDS 500
#define DONE_TAG 0x77
#define MAXC 16

static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_av *av;
static struct fid_cq *cq;
static struct fid_eq *eq;
static struct fid_ep *ep;
static struct fi_info *info;
static fi_addr_t peer = FI_ADDR_UNSPEC;
static int is_msg;
static int last_prov_errno; /* of the last error completion (the verbs status) */

/* Reads one completion (entry) or an error entry (returns its err). */
static int cq_wait(struct fi_cq_data_entry *e, const char *what)
{
	for (;;) {
		ssize_t n = fi_cq_read(cq, e, 1);
		if (n == 1)
			return 0;
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry err;
			memset(&err, 0, sizeof(err));
			if (fi_cq_readerr(cq, &err, 0) != 1)
				fitest_die("fi_cq_readerr after -FI_EAVAIL");
			memset(e, 0, sizeof(*e));
			e->op_context = err.op_context;
			e->flags = err.flags;
			last_prov_errno = err.prov_errno;
			return err.err;
		}
		if (n != -FI_EAGAIN)
			fitest_die("fi_cq_read (%s): %s", what, fi_strerror((int)-n));
		fitest_check_deadline(what);
	}
}

static struct fi_info *hints_for(const char *type)
{
	struct fi_info *h = fi_allocinfo();
	if (!h)
		fitest_die("fi_allocinfo");
	is_msg = strcmp(type, "msg") == 0;
	h->ep_attr->type = is_msg ? FI_EP_MSG : FI_EP_RDM;
	h->caps = FI_MSG | FI_RMA | FI_ATOMIC | FI_REMOTE_CQ_DATA | (is_msg ? 0 : FI_TAGGED);
	h->mode = FI_RX_CQ_DATA;
	h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED;
	h->domain_attr->cq_data_size = 4;
	h->addr_format = FI_SOCKADDR_IN;
	h->fabric_attr->prov_name = strdup("iwarpd");
	return h;
}

static void open_common(struct fi_info *fi)
{
	struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_DATA, .size = 256};
	struct fi_eq_attr ea = {.wait_obj = FI_WAIT_UNSPEC};
	if (!(fi->caps & FI_ATOMIC) || !(fi->caps & FI_REMOTE_CQ_DATA))
		fitest_die("fi_getinfo: caps %#llx lack FI_ATOMIC or FI_REMOTE_CQ_DATA", (unsigned long long)fi->caps);
	if (fi->domain_attr->cq_data_size < 4)
		fitest_die("cq_data_size %zu < 4", fi->domain_attr->cq_data_size);
	CHECK(fi_fabric(fi->fabric_attr, &fabric, NULL));
	CHECK(fi_domain(fabric, fi, &domain, NULL));
	CHECK(fi_cq_open(domain, &ca, &cq, NULL));
	if (is_msg) {
		CHECK(fi_eq_open(fabric, &ea, &eq, NULL));
	} else {
		struct fi_av_attr aa = {.type = FI_AV_TABLE};
		CHECK(fi_av_open(domain, &aa, &av, NULL));
	}
}

static struct fid_ep *open_ep(struct fi_info *fi)
{
	struct fid_ep *e;
	CHECK(fi_endpoint(domain, fi, &e, NULL));
	CHECK(fi_ep_bind(e, &cq->fid, FI_TRANSMIT | FI_RECV));
	if (is_msg)
		CHECK(fi_ep_bind(e, &eq->fid, 0));
	else
		CHECK(fi_ep_bind(e, &av->fid, 0));
	CHECK(fi_enable(e));
	return e;
}

/* The next connection event: want, or (want 0) FI_CONNREQ or FI_CONNECTED;
 * FI_SHUTDOWN of a client that finished already is skipped. */
static uint32_t wait_cm(uint32_t want, struct fi_eq_cm_entry *entry)
{
	uint32_t ev;
	for (;;) {
		ssize_t n = fi_eq_sread(eq, &ev, entry, sizeof(*entry) + 64, 200, 0);
		if (n > 0) {
			if (ev == FI_SHUTDOWN)
				continue;
			if (want ? ev != want : ev != FI_CONNREQ && ev != FI_CONNECTED)
				fitest_die("EQ event %u, want %u", ev, want);
			return ev;
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

/* ---------------- server ---------------- */

struct rxslot {
	uint64_t buf[2];
};

static int server(int argc, char **argv)
{
	int nclients, m, k, i;
	struct fi_info *h, *fi;
	struct fid_mr *mr;
	struct fid_pep *pep = NULL;
	struct fid_ep *eps[MAXC];
	int neps = 0;
	static struct rxslot slots[4 * MAXC + 8];
	static struct rxslot tslots[MAXC];
	char *raw = malloc(NWORDS * 8 + 8);
	volatile uint64_t *tgt;
	int nsend = 0, ntsend = 0, nwdata = 0, ndone = 0, local = 0;
	int done_from[MAXC] = {0}; /* whose "done" came (a stuck run names the others) */
	char name[64];
	size_t nlen = sizeof(struct sockaddr_in);
	struct sockaddr_in sin;

	fitest_role = "server";
	if (argc < 4)
		fitest_die("usage: server rdm|msg NCLIENTS M K");
	nclients = atoi(argv[1]);
	m = atoi(argv[2]);
	k = atoi(argv[3]);
	if (nclients < 1 || nclients > MAXC)
		fitest_die("NCLIENTS 1..%d", MAXC);
	h = hints_for(argv[0]);
	CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &fi));
	fi_freeinfo(h);
	info = fi;
	open_common(fi);
	/* A heap target that is not page-aligned: the provider adopts its pages. */
	if (!raw)
		fitest_die("malloc");
	tgt = (volatile uint64_t *)(void *)(((uintptr_t)raw + 7) & ~(uintptr_t)7);
	memset((void *)tgt, 0, NWORDS * 8);
	CHECK(fi_mr_reg(domain, (void *)tgt, NWORDS * 8, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL));
	/* CPU atomics of the owner count too (atomic against remote atomics). */
	if (is_msg) {
		CHECK(fi_passive_ep(fabric, fi, &pep, NULL));
		CHECK(fi_pep_bind(pep, &eq->fid, 0));
		CHECK(fi_listen(pep));
		CHECK(fi_getname(&pep->fid, &sin, &nlen));
	} else {
		ep = open_ep(fi);
		CHECK(fi_getname(&ep->fid, &sin, &nlen));
		for (i = 0; i < 4 * nclients + 4; i++)
			CHECK(fi_recv(ep, slots[i].buf, sizeof(slots[i].buf), NULL, FI_ADDR_UNSPEC, &slots[i]));
		for (i = 0; i < nclients; i++)
			CHECK(fi_trecv(ep, tslots[i].buf, sizeof(tslots[i].buf), NULL, FI_ADDR_UNSPEC, DONE_TAG, 0,
				       &tslots[i]));
	}
	inet_ntop(AF_INET, &sin.sin_addr, name, sizeof(name));
	printf("READY %s:%u %llu %llu\n", name, ntohs(sin.sin_port), (unsigned long long)fi_mr_key(mr),
	       (unsigned long long)(uintptr_t)tgt);
	fflush(stdout);
	/* The clients start after READY and give up after T_TIMEOUT_S: this
	 * ends well before the test's own timeout (3 T_TIMEOUT_S), so that a
	 * message that never came is named (below) rather than killed. */
	fitest_set_deadline(2 * T_TIMEOUT_S);

	if (is_msg) {
		/* One connection per client, each with receives for writedata and
		 * done; requests and establishments of several clients interleave. */
		int connected = 0;
		while (connected < nclients) {
			struct {
				struct fi_eq_cm_entry e;
				char data[64];
			} ce;
			uint32_t ev = wait_cm(0, &ce.e);
			if (ev == FI_CONNECTED) {
				connected++;
				continue;
			}
			if (neps == nclients)
				fitest_die("more connection requests than clients");
			eps[neps] = open_ep(ce.e.info);
			for (i = 0; i < 4; i++) {
				struct rxslot *s = &slots[neps * 4 + i];
				CHECK(fi_recv(eps[neps], s->buf, sizeof(s->buf), NULL, 0, s));
			}
			CHECK(fi_accept(eps[neps], NULL, 0));
			fi_freeinfo(ce.e.info);
			neps++;
			while (local < LOCAL_ADDS / 2) { /* interleave with the first clients' atomics */
				__atomic_fetch_add(&tgt[W_COUNTER], 1, __ATOMIC_SEQ_CST);
				local++;
			}
		}
	}
	while (ndone < nclients) {
		struct fi_cq_data_entry e;
		ssize_t n;
		if (local < LOCAL_ADDS) {
			__atomic_fetch_add(&tgt[W_COUNTER], 1, __ATOMIC_SEQ_CST);
			local++;
		}
		n = fi_cq_read(cq, &e, 1);
		if (n == -FI_EAGAIN) {
			if (now_s() > fitest_deadline_s) {
				for (i = 0; i < nclients; i++)
					if (!done_from[i])
						fprintf(stderr, "t_fi_atomic server: no \"done\" from client %d\n", i);
				/* The provider's account of the endpoint (its fast
				 * path's counts, FI_LOG_LEVEL=info) before the verdict. */
				if (ep)
					fi_close(&ep->fid);
				fitest_die("timed out waiting for the clients: %d senddata, %d tsenddata, %d writedata and %d "
					   "done of %d clients arrived",
					   nsend, ntsend, nwdata, ndone, nclients);
			}
			continue;
		}
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry err = {0};
			fi_cq_readerr(cq, &err, 0);
			if (is_msg && err.err == FI_ECANCELED)
				continue; /* the receives left when a finished client disconnected */
			fitest_die("receive error %d (%s), flags %#llx, provider errno %d", err.err, fi_strerror(err.err),
			    (unsigned long long)err.flags, err.prov_errno);
		}
		if (n != 1)
			fitest_die("fi_cq_read: %s", fi_strerror((int)-n));
		if (e.flags & FI_RMA) {
			uint64_t id = e.data & 0xffff;
			if (!(e.flags & FI_REMOTE_WRITE) || !(e.flags & FI_REMOTE_CQ_DATA) || (e.data >> 16) != 0xD0D0 ||
			    id >= (uint64_t)nclients)
				fitest_die("writedata completion: flags %#llx data %#llx", (unsigned long long)e.flags,
				    (unsigned long long)e.data);
			if (tgt[W_WDATA + id] != 0xAB00 + id)
				fitest_die("writedata of client %llu: the Write's data is %#llx, not placed before the CQ data",
				    (unsigned long long)id, (unsigned long long)tgt[W_WDATA + id]);
			nwdata++;
		} else if (e.flags & FI_TAGGED) {
			struct rxslot *s = e.op_context;
			if (!(e.flags & FI_REMOTE_CQ_DATA) || (e.data >> 16) != 0x7E7E || e.len != 8 ||
			    s->buf[0] != (e.data & 0xffff))
				fitest_die("tsenddata completion: flags %#llx data %#llx len %zu payload %llu",
				    (unsigned long long)e.flags, (unsigned long long)e.data, e.len,
				    (unsigned long long)s->buf[0]);
			ntsend++;
		} else if (e.flags & FI_RECV) {
			struct rxslot *s = e.op_context;
			if (e.flags & FI_REMOTE_CQ_DATA) {
				if ((e.data >> 16) != 0x5E5E || e.len != 8 || s->buf[0] != (e.data & 0xffff))
					fitest_die("senddata completion: data %#llx len %zu payload %llu", (unsigned long long)e.data,
					    e.len, (unsigned long long)s->buf[0]);
				nsend++;
			} else if (e.len == 16 && s->buf[0] == 0xD09E && s->buf[1] < (uint64_t)nclients) {
				ndone++;
				done_from[s->buf[1]]++;
			} else {
				fitest_die("unexpected message: flags %#llx len %zu", (unsigned long long)e.flags, e.len);
			}
			if (!is_msg)
				CHECK(fi_recv(ep, s->buf, sizeof(s->buf), NULL, FI_ADDR_UNSPEC, s));
		} else {
			fitest_die("unexpected completion flags %#llx", (unsigned long long)e.flags);
		}
	}
	while (local < LOCAL_ADDS) {
		__atomic_fetch_add(&tgt[W_COUNTER], 1, __ATOMIC_SEQ_CST);
		local++;
	}
	printf("COUNTER %llu SUM %llu PROTECTED %llu SENDDATA %d TSENDDATA %d WRITEDATA %d\n",
	       (unsigned long long)tgt[W_COUNTER], (unsigned long long)tgt[W_SUM], (unsigned long long)tgt[W_PROT],
	       nsend, ntsend, nwdata);
	/* Each client: m fetch-adds of 1 (+1 FI_ATOMIC_READ of 0) on the counter;
	 * non-fetch sums of 3*m + 5 + 7 + 11 + (-2) + 2; k lock rounds. */
	if (tgt[W_COUNTER] != (uint64_t)nclients * m + LOCAL_ADDS)
		fitest_die("counter %llu, want %llu", (unsigned long long)tgt[W_COUNTER],
		    (unsigned long long)nclients * m + LOCAL_ADDS);
	if (tgt[W_SUM] != (uint64_t)nclients * (3 * (uint64_t)m + 5 + 7 + 11))
		fitest_die("sum %llu, want %llu", (unsigned long long)tgt[W_SUM],
		    (unsigned long long)nclients * (3 * (uint64_t)m + 23));
	if (tgt[W_PROT] != (uint64_t)nclients * k)
		fitest_die("protected counter %llu, want %llu: the CSWAP lock did not exclude", (unsigned long long)tgt[W_PROT],
		    (unsigned long long)nclients * k);
	if (tgt[W_LOCK] != 0)
		fitest_die("lock left at %llu", (unsigned long long)tgt[W_LOCK]);
	{
		uint32_t half[2];
		memcpy(half, (const void *)&tgt[W_E32], sizeof(half));
		if (half[0] != (uint32_t)(nclients * m) || half[1] != (uint32_t)(nclients * m))
			fitest_die("32-bit counters %u and %u, want %d each", half[0], half[1], nclients * m);
	}
	if (tgt[W_EMAX] != (uint64_t)nclients * 1000 + (uint64_t)m - 1)
		fitest_die("FI_MAX word %llu, want %llu", (unsigned long long)tgt[W_EMAX],
		    (unsigned long long)nclients * 1000 + (uint64_t)m - 1);
	for (i = 0; i < nclients; i++)
		if (tgt[W_PRIV + i] != PRIV_FINAL)
			fitest_die("client %d's word %#llx after its emulated operations, want %#llx", i,
			    (unsigned long long)tgt[W_PRIV + i], PRIV_FINAL);
	if (nsend != nclients || ntsend != (is_msg ? 0 : nclients) || nwdata != nclients)
		fitest_die("CQ data: %d senddata, %d tsenddata, %d writedata for %d clients", nsend, ntsend, nwdata, nclients);
	/* RD: the ACK of a client's last message ("done") goes out once when
	 * this endpoint's QP is destroyed and can be lost; the daemon's linger
	 * acknowledges the client's retransmission (docs/rd.md, "Destroying a
	 * QP"): the endpoint closes at once. */
	for (i = 0; i < neps; i++)
		fi_close(&eps[i]->fid);
	if (ep)
		fi_close(&ep->fid);
	if (pep)
		fi_close(&pep->fid);
	CHECK(fi_close(&mr->fid));
	/* The adopted pages are private again and keep their contents. */
	if (tgt[W_SUM] != (uint64_t)nclients * (3 * (uint64_t)m + 23))
		fitest_die("target changed when its MR closed");
	free(raw);
	printf("SERVER OK\n");
	return 0;
}

/* ---------------- client ---------------- */

static uint64_t key, base;

static uint64_t fetch(enum fi_op op, enum fi_datatype dt, int64_t v, uint64_t word, const char *what)
{
	struct fi_cq_data_entry e;
	uint64_t res = 0xdeadbeef;
	int ctx, err;
	POST(fi_fetch_atomic(ep, &v, 1, NULL, &res, NULL, peer, base + 8 * word, key, dt, op, &ctx), what);
	err = cq_wait(&e, what);
	if (err)
		fitest_die("%s: completion error %d (%s)", what, err, fi_strerror(err));
	if (e.op_context != &ctx || !(e.flags & FI_ATOMIC) || !(e.flags & FI_READ))
		fitest_die("%s: completion context/flags %#llx", what, (unsigned long long)e.flags);
	return res;
}

static uint64_t cswap(uint64_t cmp, uint64_t swp, uint64_t word, const char *what)
{
	struct fi_cq_data_entry e;
	uint64_t res = 0xdeadbeef;
	int ctx, err;
	POST(fi_compare_atomic(ep, &swp, 1, NULL, &cmp, NULL, &res, NULL, peer, base + 8 * word, key, FI_UINT64,
			       FI_CSWAP, &ctx),
	     what);
	err = cq_wait(&e, what);
	if (err)
		fitest_die("%s: completion error %d (%s)", what, err, fi_strerror(err));
	if (e.op_context != &ctx || !(e.flags & FI_ATOMIC))
		fitest_die("%s: completion context/flags %#llx", what, (unsigned long long)e.flags);
	return res;
}

static void wait_ok(void *ctx, uint64_t want_flags, const char *what)
{
	struct fi_cq_data_entry e;
	int err = cq_wait(&e, what);
	if (err)
		fitest_die("%s: completion error %d (%s), verbs status %d", what, err, fi_strerror(err), last_prov_errno);
	if (e.op_context != ctx || (e.flags & want_flags) != want_flags)
		fitest_die("%s: completion context %p/%p flags %#llx", what, e.op_context, ctx, (unsigned long long)e.flags);
}

static void expect(ssize_t got, ssize_t want, const char *what)
{
	if (got != want)
		fitest_die("%s = %zd (%s), want %zd (%s)", what, got, fi_strerror((int)-got), want, fi_strerror((int)-want));
}

static void validity(void)
{
	size_t cnt = 0;
	struct fi_atomic_attr attr;
	uint64_t v = 1, r;
	uint32_t v32 = 1;
	expect(fi_atomicvalid(ep, FI_UINT64, FI_SUM, &cnt), 0, "fi_atomicvalid(UINT64, SUM)");
	if (cnt != 1)
		fitest_die("fi_atomicvalid count %zu", cnt);
	expect(fi_atomicvalid(ep, FI_INT64, FI_SUM, &cnt), 0, "fi_atomicvalid(INT64, SUM)");
	expect(fi_fetch_atomicvalid(ep, FI_UINT64, FI_ATOMIC_READ, &cnt), 0, "fi_fetch_atomicvalid(ATOMIC_READ)");
	expect(fi_compare_atomicvalid(ep, FI_INT64, FI_CSWAP, &cnt), 0, "fi_compare_atomicvalid(INT64, CSWAP)");
	expect(fi_atomicvalid(ep, FI_DOUBLE, FI_SUM, &cnt), -FI_EOPNOTSUPP, "fi_atomicvalid(DOUBLE, SUM)");
	expect(fi_atomicvalid(ep, FI_UINT32, FI_SUM, &cnt), 0, "fi_atomicvalid(UINT32, SUM)");
	expect(fi_atomicvalid(ep, FI_INT32, FI_BXOR, &cnt), 0, "fi_atomicvalid(INT32, BXOR)");
	expect(fi_atomicvalid(ep, FI_UINT64, FI_ATOMIC_WRITE, &cnt), 0, "fi_atomicvalid(UINT64, ATOMIC_WRITE)");
	expect(fi_atomicvalid(ep, FI_UINT64, FI_CSWAP, &cnt), -FI_EOPNOTSUPP, "fi_atomicvalid(UINT64, CSWAP)");
	expect(fi_atomicvalid(ep, FI_UINT64, FI_ATOMIC_READ, &cnt), -FI_EOPNOTSUPP, "fi_atomicvalid(ATOMIC_READ)");
	expect(fi_fetch_atomicvalid(ep, FI_UINT64, FI_MIN, &cnt), 0, "fi_fetch_atomicvalid(MIN)");
	expect(fi_compare_atomicvalid(ep, FI_UINT32, FI_CSWAP, &cnt), 0, "fi_compare_atomicvalid(UINT32, CSWAP)");
	expect(fi_fetch_atomicvalid(ep, FI_UINT16, FI_SUM, &cnt), -FI_EOPNOTSUPP, "fi_fetch_atomicvalid(UINT16)");
	expect(fi_atomicvalid(ep, FI_UINT64, FI_LOR, &cnt), -FI_EOPNOTSUPP, "fi_atomicvalid(LOR)");
	expect(fi_compare_atomicvalid(ep, FI_UINT64, FI_MSWAP, &cnt), -FI_EOPNOTSUPP, "fi_compare_atomicvalid(MSWAP)");
	expect(fi_query_atomic(domain, FI_UINT64, FI_SUM, &attr, 0), 0, "fi_query_atomic(SUM)");
	if (attr.count != 1 || attr.size != 8)
		fitest_die("fi_query_atomic: count %zu size %zu", attr.count, attr.size);
	expect(fi_query_atomic(domain, FI_INT64, FI_CSWAP, &attr, FI_COMPARE_ATOMIC), 0, "fi_query_atomic(CSWAP)");
	expect(fi_query_atomic(domain, FI_UINT64, FI_CSWAP, &attr, 0), -FI_EOPNOTSUPP, "fi_query_atomic(CSWAP, write)");
	expect(fi_query_atomic(domain, FI_FLOAT, FI_SUM, &attr, FI_FETCH_ATOMIC), -FI_EOPNOTSUPP,
	       "fi_query_atomic(FLOAT)");
	expect(fi_query_atomic(domain, FI_UINT32, FI_ATOMIC_WRITE, &attr, FI_FETCH_ATOMIC), 0,
	       "fi_query_atomic(UINT32, ATOMIC_WRITE, fetch)");
	if (attr.count != 1 || attr.size != 4)
		fitest_die("fi_query_atomic(UINT32): count %zu size %zu", attr.count, attr.size);
	/* The data calls refuse the same, before anything is sent. */
	expect(fi_atomic(ep, &v32, 1, NULL, peer, base, key, FI_UINT16, FI_SUM, NULL), -FI_EOPNOTSUPP,
	       "fi_atomic(UINT16)");
	expect(fi_atomic(ep, &v, 1, NULL, peer, base, key, FI_UINT64, FI_PROD, NULL), -FI_EOPNOTSUPP,
	       "fi_atomic(PROD)");
	expect(fi_fetch_atomic(ep, &v, 1, NULL, &r, NULL, peer, base, key, FI_DOUBLE, FI_MAX, NULL), -FI_EOPNOTSUPP,
	       "fi_fetch_atomic(DOUBLE, MAX)");
	expect(fi_atomic(ep, &v, 2, NULL, peer, base, key, FI_UINT64, FI_SUM, NULL), -FI_EMSGSIZE, "fi_atomic(count 2)");
	expect(fi_atomic(ep, &v, 0, NULL, peer, base, key, FI_UINT64, FI_SUM, NULL), -FI_EINVAL, "fi_atomic(count 0)");
}

static void nonfetch_sums(int m)
{
	int64_t three = 3, five = 5, seven = 7, eleven = 11, minus2 = -2, plus2 = 2;
	struct fi_ioc ioc = {.addr = &seven, .count = 1};
	struct fi_rma_ioc rioc = {.addr = base + 8 * W_SUM, .count = 1, .key = key};
	struct fi_msg_atomic msg = {.msg_iov = &ioc, .iov_count = 1, .addr = peer, .rma_iov = &rioc,
				    .rma_iov_count = 1, .datatype = FI_UINT64, .op = FI_SUM};
	int ctx[4], i;
	for (i = 0; i < m; i++) {
		POST(fi_atomic(ep, &three, 1, NULL, peer, base + 8 * W_SUM, key, FI_UINT64, FI_SUM, &ctx[0]), "fi_atomic");
		wait_ok(&ctx[0], FI_ATOMIC | FI_WRITE, "fi_atomic(SUM 3)");
	}
	POST(fi_inject_atomic(ep, &five, 1, peer, base + 8 * W_SUM, key, FI_UINT64, FI_SUM), "fi_inject_atomic");
	POST(fi_atomicv(ep, &ioc, NULL, 1, peer, base + 8 * W_SUM, key, FI_UINT64, FI_SUM, &ctx[1]), "fi_atomicv");
	wait_ok(&ctx[1], FI_ATOMIC | FI_WRITE, "fi_atomicv(SUM 7)");
	ioc.addr = &eleven;
	msg.context = &ctx[2];
	POST(fi_atomicmsg(ep, &msg, FI_COMPLETION), "fi_atomicmsg");
	wait_ok(&ctx[2], FI_ATOMIC | FI_WRITE, "fi_atomicmsg(SUM 11)");
	/* FI_INT64: two's complement, -2 then +2 */
	POST(fi_atomic(ep, &minus2, 1, NULL, peer, base + 8 * W_SUM, key, FI_INT64, FI_SUM, &ctx[3]), "fi_atomic(-2)");
	wait_ok(&ctx[3], FI_ATOMIC, "fi_atomic(INT64 -2)");
	POST(fi_atomic(ep, &plus2, 1, NULL, peer, base + 8 * W_SUM, key, FI_INT64, FI_SUM, &ctx[3]), "fi_atomic(+2)");
	wait_ok(&ctx[3], FI_ATOMIC, "fi_atomic(INT64 +2)");
}

static void lock_rounds(int id, int k)
{
	uint64_t me = (uint64_t)id + 1, got, val = 0;
	int i, spins, rctx, wctx;
	for (i = 0; i < k; i++) {
		for (spins = 0; (got = cswap(0, me, W_LOCK, "lock acquire")) != 0; spins++) {
			if (got == me)
				fitest_die("lock already held by me");
			fitest_check_deadline("the lock");
		}
		/* Critical section: a non-atomic read-modify-write by RMA. */
		POST(fi_read(ep, &val, 8, NULL, peer, base + 8 * W_PROT, key, &rctx), "fi_read");
		wait_ok(&rctx, FI_RMA | FI_READ, "fi_read(protected)");
		val++;
		POST(fi_write(ep, &val, 8, NULL, peer, base + 8 * W_PROT, key, &wctx), "fi_write");
		wait_ok(&wctx, FI_RMA | FI_WRITE, "fi_write(protected)");
		got = cswap(me, 0, W_LOCK, "lock release");
		if (got != me)
			fitest_die("lock release found %llu, not me (%llu): mutual exclusion broken", (unsigned long long)got,
			    (unsigned long long)me);
	}
}

static void compare_forms(int id)
{
	/* scratch word: a failing compare leaves it, a matching one swaps; the
	 * clients run concurrently, so each uses cswap on a value only it writes. */
	uint64_t mine = 0x1000 + (uint64_t)id, got, cur, other = 0x5555;
	uint64_t res = 0;
	struct fi_ioc ioc = {.addr = &other, .count = 1}, cioc = {.addr = &mine, .count = 1},
		      rioc = {.addr = &res, .count = 1};
	int ctx;
	do {
		cur = fetch(FI_ATOMIC_READ, FI_UINT64, 0, W_SCRATCH, "FI_ATOMIC_READ scratch");
		got = cswap(cur, mine, W_SCRATCH, "cswap scratch");
		fitest_check_deadline("scratch");
	} while (got != cur);
	/* Wrong compare: nothing changes (unless another client swapped meanwhile). */
	got = cswap(mine + 0x10000, 0x9999, W_SCRATCH, "cswap wrong compare");
	if (got == mine + 0x10000)
		fitest_die("cswap with a compare nobody wrote matched");
	/* compwritev: compare mine (if still there) with swap other, then back */
	POST(fi_compare_atomicv(ep, &ioc, NULL, 1, &cioc, NULL, 1, &rioc, NULL, 1, peer, base + 8 * W_SCRATCH, key,
				FI_UINT64, FI_CSWAP, &ctx),
	     "fi_compare_atomicv");
	wait_ok(&ctx, FI_ATOMIC | FI_READ, "fi_compare_atomicv");
	if (res == mine) {
		/* it swapped: put 0 back with fi_compare_atomicmsg */
		uint64_t zero = 0;
		struct fi_ioc z = {.addr = &zero, .count = 1}, c2 = {.addr = &other, .count = 1};
		struct fi_rma_ioc ri = {.addr = base + 8 * W_SCRATCH, .count = 1, .key = key};
		struct fi_msg_atomic msg = {.msg_iov = &z, .iov_count = 1, .addr = peer, .rma_iov = &ri,
					    .rma_iov_count = 1, .datatype = FI_UINT64, .op = FI_CSWAP, .context = &ctx};
		POST(fi_compare_atomicmsg(ep, &msg, &c2, NULL, 1, &rioc, NULL, 1, FI_COMPLETION), "fi_compare_atomicmsg");
		wait_ok(&ctx, FI_ATOMIC, "fi_compare_atomicmsg");
	}
	/* fetch forms: readwritev and readwritemsg of FI_ATOMIC_READ */
	{
		struct fi_ioc r1 = {.addr = &res, .count = 1};
		struct fi_rma_ioc ri = {.addr = base + 8 * W_COUNTER, .count = 1, .key = key};
		struct fi_msg_atomic msg = {.iov_count = 0, .addr = peer, .rma_iov = &ri, .rma_iov_count = 1,
					    .datatype = FI_UINT64, .op = FI_ATOMIC_READ, .context = &ctx};
		POST(fi_fetch_atomicmsg(ep, &msg, &r1, NULL, 1, FI_COMPLETION), "fi_fetch_atomicmsg");
		wait_ok(&ctx, FI_ATOMIC | FI_READ, "fi_fetch_atomicmsg(ATOMIC_READ)");
		if (res == 0)
			fitest_die("FI_ATOMIC_READ of the counter read 0 after this client's fetch-adds");
	}
}

/* One fetching operation on an arbitrary octet offset (32-bit halves). */
static uint64_t fetch_at(enum fi_op op, enum fi_datatype dt, uint64_t v, uint64_t off, const char *what)
{
	struct fi_cq_data_entry e;
	uint64_t res = 0;
	int ctx, err;
	POST(fi_fetch_atomic(ep, &v, 1, NULL, &res, NULL, peer, base + off, key, dt, op, &ctx), what);
	err = cq_wait(&e, what);
	if (err)
		fitest_die("%s: completion error %d (%s)", what, err, fi_strerror(err));
	if (e.op_context != &ctx || !(e.flags & FI_ATOMIC) || !(e.flags & FI_READ))
		fitest_die("%s: completion context/flags %#llx", what, (unsigned long long)e.flags);
	return res;
}

static void want(uint64_t got, uint64_t wanted, const char *what)
{
	if (got != wanted)
		fitest_die("%s fetched %#llx, want %#llx", what, (unsigned long long)got, (unsigned long long)wanted);
}

/* The operations iwd_atomic_cas.c runs as CmpSwap loops. */
static void emulated(int id, int m)
{
	uint64_t prev[2] = {0, 0}, got, off = 8 * (W_PRIV + (uint64_t)id), bor = 0x400000000ull, two = 2;
	uint32_t cmp32 = 0xffffffffu, one32 = 1;
	int h, i, ctx;
	for (i = 0; i < m; i++)
		for (h = 0; h < 2; h++) {
			/* 32-bit fetch-adds on both halves; a client's own results increase. */
			got = fetch_at(FI_SUM, i % 2 ? FI_INT32 : FI_UINT32, 1, 8 * W_E32 + 4 * (uint64_t)h, "32-bit fetch-add");
			if (got > 0xffffffffu || (i > 0 && got <= prev[h]))
				fitest_die("32-bit fetch-add on half %d: %#llx after %#llx", h, (unsigned long long)got,
				    (unsigned long long)prev[h]);
			prev[h] = got;
		}
	for (i = 0; i < m; i++)
		fetch_at(FI_MAX, FI_UINT64, (uint64_t)(id + 1) * 1000 + (uint64_t)i, 8 * W_EMAX, "FI_MAX");
	/* This client's own word: every original value is known. */
	want(fetch_at(FI_ATOMIC_WRITE, FI_UINT64, 0xf0f0, off, "ATOMIC_WRITE"), 0, "ATOMIC_WRITE");
	want(fetch_at(FI_BOR, FI_UINT64, 0x0f00, off, "BOR"), 0xf0f0, "BOR");
	want(fetch_at(FI_BAND, FI_UINT64, 0x0ff0, off, "BAND"), 0xfff0, "BAND");
	want(fetch_at(FI_BXOR, FI_UINT64, 0x00ff, off, "BXOR"), 0x0ff0, "BXOR");
	want(fetch_at(FI_MIN, FI_UINT64, 5, off, "MIN"), 0x0f0f, "MIN");
	want(fetch_at(FI_MAX, FI_UINT64, 3, off, "MAX"), 5, "MAX (no change)");
	want(fetch_at(FI_MIN, FI_INT64, (uint64_t)-7, off, "INT64 MIN"), 5, "INT64 MIN");
	want(fetch_at(FI_MAX, FI_INT32, (uint64_t)(uint32_t)-9, off, "INT32 MAX"), 0xfffffff9u, "INT32 MAX (no change)");
	/* high half: 0xffffffff -> 0 by a 32-bit CSWAP, then 2 by a non-fetching 32-bit SUM */
	{
		uint64_t res = 0;
		uint32_t swp = 0;
		POST(fi_compare_atomic(ep, &swp, 1, NULL, &cmp32, NULL, &res, NULL, peer, base + off + 4, key, FI_UINT32,
				       FI_CSWAP, &ctx),
		     "32-bit CSWAP");
		wait_ok(&ctx, FI_ATOMIC | FI_READ, "32-bit CSWAP");
		want(res, 0xffffffffu, "32-bit CSWAP");
	}
	POST(fi_atomic(ep, &two, 1, NULL, peer, base + off + 4, key, FI_UINT32, FI_SUM, &ctx), "fi_atomic(UINT32 SUM)");
	wait_ok(&ctx, FI_ATOMIC | FI_WRITE, "fi_atomic(UINT32 SUM)");
	POST(fi_inject_atomic(ep, &one32, 1, peer, base + off + 4, key, FI_UINT32, FI_BXOR), "fi_inject_atomic(BXOR)");
	POST(fi_atomic(ep, &bor, 1, NULL, peer, base + off, key, FI_UINT64, FI_BOR, &ctx), "fi_atomic(BOR)");
	wait_ok(&ctx, FI_ATOMIC | FI_WRITE, "fi_atomic(BOR)");
	/* The injected BXOR (bit 32) and the BOR (bit 34) commute; the inject
	 * reports no completion, so read until both are in. */
	while ((got = fetch_at(FI_ATOMIC_READ, FI_UINT64, 0, off, "ATOMIC_READ")) != PRIV_FINAL) {
		if ((got & 0xffffffffu) != 0xfffffff9u)
			fitest_die("client word %#llx while waiting for the injected BXOR", (unsigned long long)got);
		fitest_check_deadline("the injected BXOR");
	}
	want(fetch_at(FI_ATOMIC_READ, FI_UINT32, 0, off, "32-bit ATOMIC_READ"), 0xfffffff9u, "32-bit ATOMIC_READ");
}

static void misaligned(void)
{
	uint64_t v = 1, res;
	struct fi_cq_data_entry e;
	int ctx, err;
	POST(fi_fetch_atomic(ep, &v, 1, NULL, &res, NULL, peer, base + 8 * W_SCRATCH + 4, key, FI_UINT64, FI_SUM, &ctx),
	     "misaligned fetch");
	err = cq_wait(&e, "misaligned fetch");
	if (err != FI_EACCES)
		fitest_die("a misaligned target completed with %d (%s), want FI_EACCES", err, fi_strerror(err));
	if (e.op_context != &ctx)
		fitest_die("misaligned: error entry context");
}

static void cq_data(int id)
{
	uint64_t payload = (uint64_t)id, word = 0xAB00 + (uint64_t)id;
	int ctx[3];
	ssize_t r;
	/* MSG: a Send with Immediate merged into one receive (merge_send_imm);
	 * t_fi_msgdata.c checks every form. */
	POST(fi_senddata(ep, &payload, 8, NULL, 0x5E5E0000u | (uint64_t)id, peer, &ctx[0]), "fi_senddata");
	wait_ok(&ctx[0], FI_SEND | FI_MSG, "fi_senddata");
	if (is_msg) {
		r = fi_senddata(ep, &payload, 8, NULL, 1ull << 40, peer, &ctx[0]);
		expect(r, -FI_EINVAL, "fi_senddata of 41-bit data on MSG (cq_data_size 4)");
	} else {
		POST(fi_tsenddata(ep, &payload, 8, NULL, 0x7E7E0000u | (uint64_t)id, peer, DONE_TAG, &ctx[1]),
		     "fi_tsenddata");
		wait_ok(&ctx[1], FI_SEND | FI_TAGGED, "fi_tsenddata");
	}
	POST(fi_writedata(ep, &word, 8, NULL, 0xD0D00000u | (uint64_t)id, peer, base + 8 * (W_WDATA + (uint64_t)id), key,
			  &ctx[2]),
	     "fi_writedata");
	wait_ok(&ctx[2], FI_RMA | FI_WRITE, "fi_writedata");
	if (is_msg)
		expect(fi_writedata(ep, &word, 8, NULL, 1ull << 40, peer, base, key, &ctx[2]), -FI_EINVAL,
		       "fi_writedata of 41-bit data on MSG (cq_data_size 4)");
}

static int client(int argc, char **argv)
{
	struct fi_info *h, *fi;
	struct sockaddr_in sin;
	char host[64], *colon;
	int id, m, k, i, ctx;
	uint64_t *fetched, done[2] = {0xD09E, 0};
	double t0, t1, t2;

	fitest_role = "client";
	if (argc < 7)
		fitest_die("usage: client rdm|msg ip:port key base ID M K");
	snprintf(host, sizeof(host), "%s", argv[1]);
	colon = strchr(host, ':');
	if (!colon)
		fitest_die("address %s", argv[1]);
	*colon = 0;
	key = strtoull(argv[2], NULL, 0);
	base = strtoull(argv[3], NULL, 0);
	id = atoi(argv[4]);
	m = atoi(argv[5]);
	k = atoi(argv[6]);
	fitest_set_deadline(T_TIMEOUT_S);
	h = hints_for(argv[0]);
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons((uint16_t)atoi(colon + 1));
	if (inet_pton(AF_INET, host, &sin.sin_addr) != 1)
		fitest_die("address %s", host);
	if (is_msg) {
		h->dest_addr = malloc(sizeof(sin));
		memcpy(h->dest_addr, &sin, sizeof(sin));
		h->dest_addrlen = sizeof(sin);
	}
	CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &fi));
	fi_freeinfo(h);
	info = fi;
	open_common(fi);
	ep = open_ep(fi);
	if (is_msg) {
		struct {
			struct fi_eq_cm_entry e;
			char data[64];
		} ce;
		CHECK(fi_connect(ep, &sin, NULL, 0));
		wait_cm(FI_CONNECTED, &ce.e);
		peer = 0;
	} else {
		if (fi_av_insert(av, &sin, 1, &peer, 0, NULL) != 1)
			fitest_die("fi_av_insert %s", argv[1]);
	}
	validity();
	fetched = calloc((size_t)m, sizeof(*fetched));
	t0 = now_s();
	for (i = 0; i < m; i++)
		fetched[i] = fetch(FI_SUM, i % 2 ? FI_INT64 : FI_UINT64, 1, W_COUNTER, "fetch-add");
	t1 = now_s();
	for (i = 0; i < m; i++) { /* the baseline: an 8-octet RDMA Read of the same word */
		uint64_t v;
		POST(fi_read(ep, &v, 8, NULL, peer, base + 8 * W_COUNTER, key, &ctx), "fi_read(baseline)");
		wait_ok(&ctx, FI_RMA | FI_READ, "fi_read(baseline)");
	}
	t2 = now_s();
	/* Information only (no assertion): the clients run concurrently. */
	printf("LATENCY fetch-add %.1f us, 8-octet read %.1f us, ratio %.2f\n", (t1 - t0) * 1e6 / m,
	       (t2 - t1) * 1e6 / m, (t1 - t0) / (t2 - t1));
	printf("FETCH");
	for (i = 0; i < m; i++)
		printf(" %llu", (unsigned long long)fetched[i]);
	printf("\n");
	fflush(stdout);
	for (i = 1; i < m; i++)
		if (fetched[i] <= fetched[i - 1])
			fitest_die("fetch-add results not increasing: %llu then %llu", (unsigned long long)fetched[i - 1],
			    (unsigned long long)fetched[i]);
	free(fetched);
	nonfetch_sums(m);
	lock_rounds(id, k);
	compare_forms(id);
	emulated(id, m);
	if (!is_msg)
		misaligned(); /* on RC the responder's Terminate would end the connection */
	cq_data(id);
	done[1] = (uint64_t)id;
	POST(fi_send(ep, done, sizeof(done), NULL, peer, &ctx), "fi_send(done)");
	wait_ok(&ctx, FI_SEND, "fi_send(done)");
	fi_close(&ep->fid);
	printf("CLIENT %d: CLIENT OK\n", id);
	return 0;
}

int main(int argc, char **argv)
{
	int ret;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 2 && strcmp(argv[1], "server") == 0)
		ret = server(argc - 2, argv + 2);
	else if (argc >= 2 && strcmp(argv[1], "client") == 0)
		ret = client(argc - 2, argv + 2);
	else
		fitest_die("usage: t_fi_atomic server|client ...");
	if (eq)
		fi_close(&eq->fid);
	if (av)
		fi_close(&av->fid);
	if (cq)
		fi_close(&cq->fid);
	if (domain)
		fi_close(&domain->fid);
	if (fabric)
		fi_close(&fabric->fid);
	fi_freeinfo(info);
	return ret;
}
