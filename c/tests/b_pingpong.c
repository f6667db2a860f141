/*
 * b_pingpong — a benchmark program (not a test): UD ping-pong latency
 * through the C core between a session on daemon A ($IWV_TEST_SOCK_A) and
 * one on daemon B ($IWV_TEST_SOCK_B), one thread each, busy polling.
 * Usage: b_pingpong [iterations [size]]. Waits as iwarp-perf does: polls
 * with sched_yield between empty polls for 50 us, then arms the CQ and
 * blocks on its completion channel. Prints the median and 99th percentile
 * of half the round trip, in microseconds; compare with
 * `iwarp-perf -t ud -m lat -s SIZE` (ofverbs) on the same daemons.
 */
#include "testlib.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>

static int iters = 10000, size = 8;

struct side {
	struct ep e;
	struct iwv_av peer;
	struct iwv_comp_channel *ch;
	struct iwv_cq *cq; /* receive CQ on the channel */
	int initiator;
	double *rtt;
};

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void post_recv(struct side *s)
{
	struct iwv_sge g = sge_of(&s->e, 4096, 4096);
	struct iwv_recv_wr w = {.wr_id = 1, .num_sge = 1, .sg_list = &g};
	CHECK(iwv_post_recv(s->e.qp, &w, 1) == 1);
}

static void wait_recv(struct side *s)
{
	struct iwv_wc wc[4];
	long long until = now_ns() + 50000;
	for (;;) {
		int n = iwv_poll_cq(s->cq, 4, wc);
		OK(s->e.s, n);
		if (n > 0) {
			CHECK(wc[0].status == IWV_WC_SUCCESS);
			return;
		}
		if (now_ns() < until) {
			sched_yield();
			continue;
		}
		OK(s->e.s, iwv_req_notify_cq(s->cq, 0));
		n = iwv_poll_cq(s->cq, 4, wc);
		OK(s->e.s, n);
		if (n > 0) {
			CHECK(wc[0].status == IWV_WC_SUCCESS);
			return;
		}
		struct iwv_cq *got;
		OK(s->e.s, iwv_get_cq_event(s->ch, &got, 10000));
		iwv_ack_cq_events(got, 1);
	}
}

static void send_one(struct side *s, int i)
{
	struct iwv_sge g = sge_of(&s->e, 0, (uint32_t)size);
	/* signal every 8th send; drain the send CQ on the way */
	struct iwv_send_wr w = {.wr_id = (uint64_t)i, .num_sge = 1, .sg_list = &g, .av = &s->peer,
				.flags = (i % 8 == 0) ? IWV_SEND_SIGNALED : 0};
	if (size <= 64) {
		w.flags |= IWV_SEND_INLINE;
	}
	CHECK(iwv_post_send(s->e.qp, &w, 1) == 1);
	struct iwv_wc wc[4];
	OK(s->e.s, iwv_poll_cq(s->e.scq, 4, wc));
}

static void *run(void *arg)
{
	struct side *s = arg;
	post_recv(s);
	for (int i = 0; i < iters; i++) {
		if (s->initiator) {
			long long t0 = now_ns();
			send_one(s, i);
			wait_recv(s);
			post_recv(s);
			s->rtt[i] = (now_ns() - t0) / 1000.0;
		} else {
			wait_recv(s);
			post_recv(s);
			send_one(s, i);
		}
	}
	return NULL;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	if (argc > 1)
		iters = atoi(argv[1]);
	if (argc > 2)
		size = atoi(argv[2]);
	CHECK(iters > 0 && size > 0 && size <= 4096);
	struct side a = {.initiator = 1}, b = {0};
	ep_open(&a.e, sock_a(), "b_pingpong", IWV_QPT_UD, 1 << 16);
	ep_open(&b.e, sock_b(), "b_pingpong", IWV_QPT_UD, 1 << 16);
	/* Receive through a CQ bound to a completion channel. */
	struct side *sides[2] = {&a, &b};
	for (int i = 0; i < 2; i++) {
		struct side *x = sides[i];
		struct iwv_qp_init_attr qa = {.qp_type = IWV_QPT_UD, .send_cq = x->e.scq,
					      .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1, .max_inline = 64}};
		OK(x->e.s, iwv_create_comp_channel(x->e.s, &x->ch));
		OK(x->e.s, iwv_create_cq(x->e.s, 64, x->ch, &x->cq));
		qa.recv_cq = x->cq;
		OK(x->e.s, iwv_destroy_qp(x->e.qp));
		OK(x->e.s, iwv_create_qp(x->e.pd, &qa, &x->e.qp));
		OK(x->e.s, iwv_modify_qp(x->e.qp, IWV_QPS_INIT));
		OK(x->e.s, iwv_modify_qp(x->e.qp, IWV_QPS_RTR));
		OK(x->e.s, iwv_modify_qp(x->e.qp, IWV_QPS_RTS));
	}
	OK(a.e.s, iwv_qp_av(b.e.qp, &a.peer));
	OK(b.e.s, iwv_qp_av(a.e.qp, &b.peer));
	a.rtt = calloc((size_t)iters, sizeof(double));
	CHECK(a.rtt);
	pthread_t ta, tb;
	CHECK(pthread_create(&tb, NULL, run, &b) == 0);
	CHECK(pthread_create(&ta, NULL, run, &a) == 0);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	qsort(a.rtt, (size_t)iters, sizeof(double), cmp);
	printf("C core UD ping-pong, %d B, %d iterations: half round trip median %.2f us, p99 %.2f us\n", size, iters,
	       a.rtt[iters / 2] / 2, a.rtt[iters * 99 / 100] / 2);
	free(a.rtt);
	for (int i = 0; i < 2; i++) {
		OK(sides[i]->e.s, iwv_destroy_qp(sides[i]->e.qp));
		OK(sides[i]->e.s, iwv_create_qp(sides[i]->e.pd, &(struct iwv_qp_init_attr){.qp_type = IWV_QPT_UD,
			.send_cq = sides[i]->e.scq, .recv_cq = sides[i]->e.rcq}, &sides[i]->e.qp));
		OK(sides[i]->e.s, iwv_destroy_cq(sides[i]->cq));
		OK(sides[i]->e.s, iwv_destroy_comp_channel(sides[i]->ch));
	}
	ep_close(&a.e);
	ep_close(&b.e);
	return 0;
}
