/*
 * t_qshare — one queue, several threads (verbs.h "Threads"): four threads
 * post sends to the same QP's send queue, two post receives to the same
 * receive queue, and two poll each CQ, all at once, over an RD pair
 * (reliable: nothing may be lost). Every work request completes exactly
 * once, with its own wr_id, on the queue it was posted to. Run under
 * ASan+UBSan and under TSan (make -C c tsan) by test/cclient.
 */
#include "testlib.h"

#include <pthread.h>
#include <sched.h>

enum { SENDERS = 4, RECEIVERS = 2, POLLERS = 2, PER_SENDER = 250, MSGS = SENDERS * PER_SENDER, LEN = 64 };

static struct iwv_session *s;
static struct iwv_qp *qa, *qb;
static struct iwv_cq *scq, *rcq;
static struct iwv_mr *mr;
static char *mem;
static struct iwv_av dst;
static int sent_seen[MSGS], recv_seen[MSGS]; /* atomic counters */
static int done_send, done_recv;             /* atomic */

/* post retries a post that found the queue full (-ENOMEM), bounded. */
static void post_send_one(uint64_t id)
{
	struct iwv_sge g = {.addr = (uintptr_t)mem, .length = LEN, .lkey = iwv_mr_lkey(mr)};
	struct iwv_send_wr w = {.wr_id = id, .flags = IWV_SEND_SIGNALED, .num_sge = 1, .sg_list = &g, .av = &dst};
	long long end = mono_ms() + scaled_ms(20000);
	int r;
	while ((r = iwv_post_send(qa, &w, 1)) == -ENOMEM && mono_ms() < end)
		sched_yield();
	OK(s, r);
}

static void *sender(void *arg)
{
	int t = (int)(intptr_t)arg;
	for (int i = 0; i < PER_SENDER; i++)
		post_send_one((uint64_t)(t * PER_SENDER + i));
	return NULL;
}

static void *receiver(void *arg)
{
	int t = (int)(intptr_t)arg;
	for (int i = t; i < MSGS; i += RECEIVERS) {
		struct iwv_sge g = {.addr = (uintptr_t)(mem + 4096 + (size_t)i * LEN), .length = LEN,
				    .lkey = iwv_mr_lkey(mr)};
		struct iwv_recv_wr w = {.wr_id = (uint64_t)i, .num_sge = 1, .sg_list = &g};
		OK(s, iwv_post_recv(qb, &w, 1));
	}
	return NULL;
}

/* poller drains cq until every work request of its kind completed. */
static void *poller(void *arg)
{
	int is_recv = (int)(intptr_t)arg;
	struct iwv_cq *cq = is_recv ? rcq : scq;
	int *seen = is_recv ? recv_seen : sent_seen, *done = is_recv ? &done_recv : &done_send;
	long long end = mono_ms() + scaled_ms(30000);
	while (__atomic_load_n(done, __ATOMIC_ACQUIRE) < MSGS && mono_ms() < end) {
		struct iwv_wc wc[8];
		int n = iwv_poll_cq(cq, 8, wc);
		OK(s, n);
		for (int i = 0; i < n; i++) {
			CHECK(wc[i].status == IWV_WC_SUCCESS);
			CHECK(wc[i].opcode == (is_recv ? IWV_WC_RECV : IWV_WC_SEND));
			CHECK(wc[i].wr_id < MSGS);
			__atomic_add_fetch(&seen[wc[i].wr_id], 1, __ATOMIC_RELAXED);
			__atomic_add_fetch(done, 1, __ATOMIC_RELEASE);
		}
		if (!n)
			sched_yield();
	}
	return NULL;
}

int main(void)
{
	pthread_t snd[SENDERS], rcv[RECEIVERS], pol[2 * POLLERS];
	struct iwv_pd *pd;
	struct iwv_buffer *buf;
	size_t size = 4096 + (size_t)MSGS * LEN;

	s = open_session(sock_a(), "t_qshare");
	OK(s, iwv_alloc_pd(s, &pd));
	OK(s, iwv_create_cq(s, 2 * MSGS, NULL, &scq));
	OK(s, iwv_create_cq(s, 2 * MSGS, NULL, &rcq));
	OK(s, iwv_alloc_buffer(s, size, &buf));
	mem = iwv_buffer_addr(buf);
	OK(s, iwv_reg_mr(pd, mem, size, IWV_ACCESS_LOCAL_WRITE, &mr));
	struct iwv_qp_init_attr a = {.qp_type = IWV_QPT_RD, .send_cq = scq, .recv_cq = scq,
				     .cap = {.max_send_wr = 64, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	OK(s, iwv_create_qp(pd, &a, &qa));
	a.send_cq = a.recv_cq = rcq;
	a.cap.max_send_wr = 4;
	a.cap.max_recv_wr = MSGS;
	OK(s, iwv_create_qp(pd, &a, &qb));
	struct iwv_qp *qs[2] = {qa, qb};
	for (int i = 0; i < 2; i++) {
		OK(s, iwv_modify_qp(qs[i], IWV_QPS_INIT));
		OK(s, iwv_modify_qp(qs[i], IWV_QPS_RTR));
		OK(s, iwv_modify_qp(qs[i], IWV_QPS_RTS));
	}
	OK(s, iwv_qp_av(qb, &dst));
	dst.qkey = iwv_qp_qkey(qb);

	/* The receive queue first, from two threads at once, then the rest. */
	for (int i = 0; i < RECEIVERS; i++)
		CHECK(pthread_create(&rcv[i], NULL, receiver, (void *)(intptr_t)i) == 0);
	for (int i = 0; i < RECEIVERS; i++)
		CHECK(pthread_join(rcv[i], NULL) == 0);
	for (int i = 0; i < 2 * POLLERS; i++)
		CHECK(pthread_create(&pol[i], NULL, poller, (void *)(intptr_t)(i % 2)) == 0);
	for (int i = 0; i < SENDERS; i++)
		CHECK(pthread_create(&snd[i], NULL, sender, (void *)(intptr_t)i) == 0);
	for (int i = 0; i < SENDERS; i++)
		CHECK(pthread_join(snd[i], NULL) == 0);
	for (int i = 0; i < 2 * POLLERS; i++)
		CHECK(pthread_join(pol[i], NULL) == 0);

	for (int i = 0; i < MSGS; i++) {
		if (sent_seen[i] != 1 || recv_seen[i] != 1) {
			fprintf(stderr, "work request %d: %d send and %d receive completions, want 1 each\n", i,
				sent_seen[i], recv_seen[i]);
			exit(1);
		}
	}
	printf("%d senders, %d receive posters, %d pollers per CQ on one QP pair: %d messages, each once\n", SENDERS,
	       RECEIVERS, POLLERS, MSGS);
	OK(s, iwv_destroy_qp(qa));
	OK(s, iwv_destroy_qp(qb));
	OK(s, iwv_dereg_mr(mr));
	OK(s, iwv_free_buffer(buf));
	OK(s, iwv_destroy_cq(scq));
	OK(s, iwv_destroy_cq(rcq));
	OK(s, iwv_dealloc_pd(pd));
	iwv_close(s);
	printf("PASS\n");
	return 0;
}
