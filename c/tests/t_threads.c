/*
 * t_threads — the session mutex under load: threads creating and destroying
 * objects at once, one thread blocked in iwv_cm_get_event and one in
 * iwv_get_async_event (released by timeouts), and a data-path thread that
 * ping-pongs UD messages on its own queues meanwhile (the data path takes
 * no lock). Run under ASan+UBSan by test/cclient.
 */
#include "testlib.h"

#include <pthread.h>

#define WORKERS 4
#define ROUNDS 40

static struct iwv_session *s;
static int stop;

static void *worker(void *arg)
{
	(void)arg;
	for (int i = 0; i < ROUNDS; i++) {
		struct iwv_pd *pd;
		struct iwv_cq *cq;
		struct iwv_qp *qp;
		struct iwv_buffer *buf;
		struct iwv_mr *mr;
		OK(s, iwv_alloc_pd(s, &pd));
		OK(s, iwv_create_cq(s, 8, NULL, &cq));
		OK(s, iwv_alloc_buffer(s, 4096, &buf));
		OK(s, iwv_reg_mr(pd, iwv_buffer_addr(buf), 4096, IWV_ACCESS_LOCAL_WRITE, &mr));
		struct iwv_qp_init_attr qa = {.qp_type = i % 2 ? IWV_QPT_RC : IWV_QPT_UD, .send_cq = cq, .recv_cq = cq,
					      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
		OK(s, iwv_create_qp(pd, &qa, &qp));
		OK(s, iwv_modify_qp(qp, IWV_QPS_INIT));
		struct iwv_qp_attr at;
		OK(s, iwv_query_qp(qp, &at));
		CHECK(at.state == IWV_QPS_INIT && at.qp_num == iwv_qp_num(qp));
		OK(s, iwv_destroy_qp(qp));
		OK(s, iwv_dereg_mr(mr));
		OK(s, iwv_free_buffer(buf));
		OK(s, iwv_destroy_cq(cq));
		OK(s, iwv_dealloc_pd(pd));
	}
	return NULL;
}

static void *cm_waiter(void *arg)
{
	(void)arg;
	struct iwv_cm_event ev;
	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
		int r = iwv_cm_get_event(s, &ev, 20);
		CHECK(r == -ETIMEDOUT);
	}
	return NULL;
}

static void *async_waiter(void *arg)
{
	(void)arg;
	struct iwv_async_event ev;
	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
		int r = iwv_get_async_event(s, &ev, 20);
		CHECK(r == -ETIMEDOUT);
	}
	return NULL;
}

/* pingpong sends n messages between two UD QPs of the session. */
static void *pingpong(void *arg)
{
	struct iwv_pd *pd;
	struct iwv_cq *cq;
	struct iwv_qp *q[2];
	struct iwv_buffer *buf;
	struct iwv_mr *mr;
	struct iwv_wc wc;
	int n = 0;
	(void)arg;
	OK(s, iwv_alloc_pd(s, &pd));
	OK(s, iwv_create_cq(s, 16, NULL, &cq));
	OK(s, iwv_alloc_buffer(s, 4096, &buf));
	OK(s, iwv_reg_mr(pd, iwv_buffer_addr(buf), 4096, IWV_ACCESS_LOCAL_WRITE, &mr));
	struct iwv_qp_init_attr qa = {.qp_type = IWV_QPT_UD, .send_cq = cq, .recv_cq = cq,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	for (int i = 0; i < 2; i++) {
		OK(s, iwv_create_qp(pd, &qa, &q[i]));
		OK(s, iwv_modify_qp(q[i], IWV_QPS_INIT));
		OK(s, iwv_modify_qp(q[i], IWV_QPS_RTR));
		OK(s, iwv_modify_qp(q[i], IWV_QPS_RTS));
	}
	struct iwv_av av[2];
	OK(s, iwv_qp_av(q[0], &av[0]));
	OK(s, iwv_qp_av(q[1], &av[1]));
	struct iwv_sge g = {.addr = (uintptr_t)iwv_buffer_addr(buf), .length = 64, .lkey = iwv_mr_lkey(mr)};
	for (; n < 200 && !__atomic_load_n(&stop, __ATOMIC_ACQUIRE); n++) {
		int to = n % 2;
		struct iwv_recv_wr rw = {.wr_id = (uint64_t)n, .num_sge = 1, .sg_list = &g};
		CHECK(iwv_post_recv(q[to], &rw, 1) == 1);
		struct iwv_send_wr sw = {.wr_id = (uint64_t)n, .flags = IWV_SEND_SIGNALED, .num_sge = 1, .sg_list = &g,
					 .av = &av[to]};
		CHECK(iwv_post_send(q[1 - to], &sw, 1) == 1);
		int got = 0;
		for (int k = 0; k < 2; k++) {
			wait_wc(s, cq, &wc);
			CHECK(wc.status == IWV_WC_SUCCESS && wc.wr_id == (uint64_t)n);
			got |= wc.opcode == IWV_WC_RECV ? 1 : 2;
		}
		CHECK(got == 3);
	}
	printf("pingpong: %d round trips beside the control threads\n", n);
	OK(s, iwv_destroy_qp(q[0]));
	OK(s, iwv_destroy_qp(q[1]));
	OK(s, iwv_dereg_mr(mr));
	OK(s, iwv_free_buffer(buf));
	OK(s, iwv_destroy_cq(cq));
	OK(s, iwv_dealloc_pd(pd));
	return NULL;
}

int main(void)
{
	pthread_t w[WORKERS], cmw, aw, pp;
	s = open_session(sock_a(), "t_threads");
	CHECK(pthread_create(&cmw, NULL, cm_waiter, NULL) == 0);
	CHECK(pthread_create(&aw, NULL, async_waiter, NULL) == 0);
	CHECK(pthread_create(&pp, NULL, pingpong, NULL) == 0);
	for (int i = 0; i < WORKERS; i++)
		CHECK(pthread_create(&w[i], NULL, worker, NULL) == 0);
	for (int i = 0; i < WORKERS; i++)
		CHECK(pthread_join(w[i], NULL) == 0);
	CHECK(pthread_join(pp, NULL) == 0);
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	CHECK(pthread_join(cmw, NULL) == 0);
	CHECK(pthread_join(aw, NULL) == 0);
	printf("%d threads x %d rounds of create/destroy ok\n", WORKERS, ROUNDS);
	iwv_close(s);
	printf("PASS\n");
	return 0;
}
