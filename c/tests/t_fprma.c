/*
 * t_fprma.c — the target of RDMA on an RD QP whose rank serves its socket
 * itself (c/core/fprd_rma_rx.h; issue 22), for test/fastpath
 * (own_rma_test.go), which runs it against real daemons:
 *
 *   t_fprma SOCK serve PAUSE_EVERY   own the socket while polling; after
 *                                    8 requests the rank served, then every
 *                                    PAUSE_EVERY more, stop polling until
 *                                    the daemon took the socket over (it
 *                                    serves the next)
 *   t_fprma SOCK daemon              never ask for the socket: the daemon
 *                                    serves everything
 *
 * Its QP is RD with quiet_records (as the provider's RDM endpoints). It
 * registers, in one buffer of the session, four regions: "rw" (remote
 * write, read and atomic), "ro" (remote read), "none" (local only) and
 * "pd2" (every right, but in another PD), and one region of process
 * memory "proc" (remote write and read); each filled with a pattern. It
 * prints "ready ADDR QKEY" and "regions NAME=RKEY:ADDR:LEN ..." and then
 * serves (polls its socket, or only its CQ) until a line arrives on
 * stdin; it prints
 *   "result wrecs=W reads=R atomics=A takeovers=T handbacks=H released=L
 *    acks_in=I acks_out=O pauses=P"
 * and waits for a second line before it destroys its QP. Every wait is
 * bounded (IWARPD_TEST_TIMEOUT_SCALE).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "testlib.h"

#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <unistd.h>

#include "../core/fprd.h"

#define REGION 8192
#define NREGIONS 4

static const char *const names[NREGIONS] = {"rw", "ro", "none", "pd2"};
static const int rights[NREGIONS] = {
	IWV_ACCESS_LOCAL_WRITE | IWV_ACCESS_REMOTE_WRITE | IWV_ACCESS_REMOTE_READ | IWV_ACCESS_REMOTE_ATOMIC,
	IWV_ACCESS_LOCAL_WRITE | IWV_ACCESS_REMOTE_READ,
	IWV_ACCESS_LOCAL_WRITE,
	IWV_ACCESS_LOCAL_WRITE | IWV_ACCESS_REMOTE_WRITE | IWV_ACCESS_REMOTE_READ | IWV_ACCESS_REMOTE_ATOMIC,
};

struct target {
	struct iwv_session *s;
	struct iwv_pd *pd, *pd2;
	struct iwv_cq *cq;
	struct iwv_qp *qp;
	struct iwv_buffer *buf;
	struct iwv_mr *mr[NREGIONS], *proc_mr;
	char *mem, *proc;
	struct iwvi_fp_rd fp;
	int nofp;
	long pauses;
};

static void setup(struct target *t, const char *sock)
{
	memset(t, 0, sizeof *t);
	t->s = open_session(sock, "t_fprma");
	OK(t->s, iwv_alloc_pd(t->s, &t->pd));
	OK(t->s, iwv_alloc_pd(t->s, &t->pd2));
	OK(t->s, iwv_create_cq(t->s, 256, NULL, &t->cq));
	OK(t->s, iwv_alloc_buffer(t->s, NREGIONS * REGION, &t->buf));
	t->mem = iwv_buffer_addr(t->buf);
	for (int i = 0; i < NREGIONS; i++) {
		char *m = t->mem + i * REGION;
		for (int k = 0; k < REGION; k++)
			m[k] = (char)(i * 16 + k * 7);
		OK(t->s, iwv_reg_mr(i == 3 ? t->pd2 : t->pd, m, REGION, rights[i], &t->mr[i]));
	}
	t->proc = aligned_alloc(4096, REGION);
	CHECK(t->proc != NULL);
	for (int k = 0; k < REGION; k++)
		t->proc[k] = (char)(0x55 + k * 3);
	OK(t->s, iwv_reg_mr(t->pd, t->proc, REGION,
			    IWV_ACCESS_LOCAL_WRITE | IWV_ACCESS_REMOTE_WRITE | IWV_ACCESS_REMOTE_READ, &t->proc_mr));
	CHECK(iwv_mr_is_process(t->proc_mr));
	struct iwv_qp_init_attr qa = {.qp_type = IWV_QPT_RD, .send_cq = t->cq, .recv_cq = t->cq, .quiet_records = 1,
				      .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1}};
	OK(t->s, iwv_create_qp(t->pd, &qa, &t->qp));
	OK(t->s, iwv_modify_qp(t->qp, IWV_QPS_INIT));
	OK(t->s, iwv_modify_qp(t->qp, IWV_QPS_RTR));
	OK(t->s, iwv_modify_qp(t->qp, IWV_QPS_RTS));
	OK(t->s, iwvi_fp_rd_attach(t->qp, &t->fp));
	printf("ready %s %u\n", iwv_qp_addr(t->qp), iwv_qp_qkey(t->qp));
	printf("regions");
	for (int i = 0; i < NREGIONS; i++)
		printf(" %s=%u:%llu:%d", names[i], iwv_mr_rkey(t->mr[i]), (unsigned long long)(uintptr_t)(t->mem + i * REGION),
		       REGION);
	printf(" proc=%u:%llu:%d\n", iwv_mr_rkey(t->proc_mr), (unsigned long long)(uintptr_t)t->proc, REGION);
	fflush(stdout);
}

static void teardown(struct target *t)
{
	OK(t->s, iwv_destroy_qp(t->qp));
	iwvi_fp_rd_detach(&t->fp);
	for (int i = 0; i < NREGIONS; i++)
		OK(t->s, iwv_dereg_mr(t->mr[i]));
	OK(t->s, iwv_dereg_mr(t->proc_mr));
	free(t->proc);
	OK(t->s, iwv_free_buffer(t->buf));
	OK(t->s, iwv_destroy_cq(t->cq));
	OK(t->s, iwv_dealloc_pd(t->pd2));
	OK(t->s, iwv_dealloc_pd(t->pd));
	iwv_close(t->s);
}

static int stdin_ready(void)
{
	struct pollfd p = {.fd = 0, .events = POLLIN};
	return poll(&p, 1, 0) > 0;
}

static void wait_line(void)
{
	char line[64];
	if (!fgets(line, sizeof line, stdin))
		return;
}

static uint64_t served(const struct target *t)
{
	return t->fp.rma_wrecs + t->fp.rma_reads + t->fp.rma_atomics;
}

/* pause_for_takeover stops polling until the daemon takes the socket over
 * (t_fprd.c's): first it gets the socket back if the daemon has it. */
static void pause_for_takeover(struct target *t)
{
	long long deadline = mono_ms() + scaled_ms(10000);
	while (!iwvi_fp_own_acquire(&t->fp.own) && mono_ms() < deadline)
		usleep(100);
	if (!iwvi_fp_own_owned(&t->fp.own))
		return; /* a stream of daemon work keeps it: served by the daemon anyway */
	uint64_t before = iwvi_fp_own_takeovers(&t->fp.own);
	deadline = mono_ms() + scaled_ms(10000);
	while (iwvi_fp_own_takeovers(&t->fp.own) == before && mono_ms() < deadline)
		usleep(500);
	if (iwvi_fp_own_takeovers(&t->fp.own) == before) {
		fprintf(stderr, "t_fprma: no take-over within %d ms of a pause\n", scaled_ms(10000));
		exit(1);
	}
	t->pauses++;
}

/* The first pause comes after FIRST_PAUSE requests served (or `every`,
 * if fewer): on a loaded machine the daemon serves most of a stream (each
 * lapse of the rank's lease is a take-over), and the rank served as few as
 * 40 of about 3700 requests in a run. */
#define FIRST_PAUSE 8

static void serve(struct target *t, long every)
{
	uint64_t next_pause = every < FIRST_PAUSE ? (uint64_t)every : FIRST_PAUSE;
	long long deadline = mono_ms() + scaled_ms(300000);
	for (long i = 0; i < 2000000000L && mono_ms() < deadline; i++) {
		struct iwv_wc wc[8];
		int n = iwv_poll_cq(t->cq, 8, wc);
		OK(t->s, n);
		CHECK(n == 0); /* quiet records, nothing posted: no completion */
		uint64_t had = served(t);
		if (!t->nofp) {
			if (!iwvi_fp_own_owned(&t->fp.own))
				iwvi_fp_own_want(&t->fp.own);
			else if (iwvi_fp_rd_poll(&t->fp, 16, NULL, NULL) < 0)
				break;
		}
		if (served(t) == had) {
			if (i % 256 == 0 && stdin_ready())
				break;
			sched_yield(); /* busy, as an MPI rank in its progress loop */
		}
		if (every > 0 && served(t) >= next_pause) {
			next_pause = served(t) + (uint64_t)every;
			pause_for_takeover(t);
		}
	}
	if (!t->nofp)
		iwvi_fp_rd_release(&t->fp); /* the ACKs owed, then the socket to the daemon */
	printf("result wrecs=%llu reads=%llu atomics=%llu takeovers=%llu handbacks=%llu released=%llu acks_in=%llu "
	       "acks_out=%llu pauses=%ld\n",
	       (unsigned long long)t->fp.rma_wrecs, (unsigned long long)t->fp.rma_reads,
	       (unsigned long long)t->fp.rma_atomics, (unsigned long long)iwvi_fp_own_takeovers(&t->fp.own),
	       (unsigned long long)iwvi_fp_own_handbacks(&t->fp.own), (unsigned long long)t->fp.released,
	       (unsigned long long)t->fp.acks_in, (unsigned long long)t->fp.acks_out, t->pauses);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: t_fprma SOCK serve PAUSE_EVERY | daemon\n");
		return 2;
	}
	struct target t;
	setup(&t, argv[1]);
	if (strcmp(argv[2], "serve") == 0 && argc == 4) {
		serve(&t, atol(argv[3]));
	} else if (strcmp(argv[2], "daemon") == 0 && argc == 3) {
		t.nofp = 1;
		serve(&t, 0);
	} else {
		fprintf(stderr, "t_fprma: unknown mode %s\n", argv[2]);
		return 2;
	}
	wait_line(); /* the line that stopped serve */
	wait_line();
	teardown(&t);
	return 0;
}
