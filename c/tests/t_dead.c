/*
 * t_dead — a daemon killed under a live session: every call fails with
 * -ENODEV (never hangs, never raises SIGPIPE), and calls blocked in
 * iwv_get_cq_event, iwv_cm_get_event and iwv_get_async_event return.
 *
 * Protocol with the Go test: this program prints READY once its objects
 * exist and its waiters block, the test kills the daemon (SIGKILL) and
 * writes a line on stdin. Times are printed, not asserted (the Go test
 * bounds the whole run).
 */
#include "testlib.h"

#include <pthread.h>
#include <unistd.h>

static struct iwv_session *s;
static struct iwv_comp_channel *ch;
static int cq_ret, cm_ret, async_ret, fatal_seen;

static void *cq_waiter(void *arg)
{
	struct iwv_cq *cq;
	(void)arg;
	cq_ret = iwv_get_cq_event(ch, &cq, -1);
	return NULL;
}

static void *cm_waiter(void *arg)
{
	struct iwv_cm_event ev;
	(void)arg;
	cm_ret = iwv_cm_get_event(s, &ev, -1);
	return NULL;
}

static void *async_waiter(void *arg)
{
	struct iwv_async_event ev;
	(void)arg;
	for (int i = 0; i < 10; i++) {
		async_ret = iwv_get_async_event(s, &ev, -1);
		if (async_ret < 0)
			break;
		if (ev.type == IWV_EVENT_DEVICE_FATAL)
			fatal_seen++;
	}
	return NULL;
}

/* until_enodev retries a data-path call (bounded) until it reports the
 * dead session; returns the milliseconds it took. */
#define UNTIL_ENODEV(what, expr)                                                                 \
	do {                                                                                     \
		long long t0_ = mono_ms();                                                       \
		int r_ = 0;                                                                      \
		for (int i_ = 0; i_ < 1000000 && mono_ms() - t0_ < scaled_ms(5000); i_++) {      \
			r_ = (expr);                                                             \
			if (r_ == -ENODEV)                                                       \
				break;                                                           \
			usleep(100);                                                             \
		}                                                                                \
		if (r_ != -ENODEV) {                                                             \
			fprintf(stderr, "%s: %s returned %d, not -ENODEV\n", what, #expr, r_);   \
			exit(1);                                                                 \
		}                                                                                \
		printf("%s: -ENODEV after %lld ms\n", what, mono_ms() - t0_);                    \
	} while (0)

int main(void)
{
	struct iwv_pd *pd, *pd2;
	struct iwv_cq *cq, *cq2;
	struct iwv_qp *qp;
	struct iwv_buffer *buf;
	struct iwv_mr *mr;
	struct iwv_listener *l;
	struct iwv_wc wc;
	pthread_t t1, t2, t3;

	s = open_session(sock_a(), "t_dead");
	OK(s, iwv_alloc_pd(s, &pd));
	OK(s, iwv_create_comp_channel(s, &ch));
	OK(s, iwv_create_cq(s, 16, ch, &cq));
	OK(s, iwv_req_notify_cq(cq, 0));
	OK(s, iwv_alloc_buffer(s, 4096, &buf));
	OK(s, iwv_reg_mr(pd, iwv_buffer_addr(buf), 4096, IWV_ACCESS_LOCAL_WRITE, &mr));
	struct iwv_qp_init_attr qa = {.qp_type = IWV_QPT_UD, .send_cq = cq, .recv_cq = cq,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	OK(s, iwv_create_qp(pd, &qa, &qp));
	OK(s, iwv_modify_qp(qp, IWV_QPS_INIT));
	OK(s, iwv_modify_qp(qp, IWV_QPS_RTR));
	OK(s, iwv_modify_qp(qp, IWV_QPS_RTS));
	OK(s, iwv_listen(s, ":0", 0, &l));
	CHECK(pthread_create(&t1, NULL, cq_waiter, NULL) == 0);
	CHECK(pthread_create(&t2, NULL, cm_waiter, NULL) == 0);
	CHECK(pthread_create(&t3, NULL, async_waiter, NULL) == 0);
	usleep(100000);
	printf("READY\n");
	fflush(stdout);
	char line[64];
	CHECK(fgets(line, sizeof line, stdin) != NULL);
	long long t0 = mono_ms();

	/* Blocked waiters return. */
	CHECK(pthread_join(t1, NULL) == 0);
	CHECK(pthread_join(t2, NULL) == 0);
	CHECK(pthread_join(t3, NULL) == 0);
	printf("waiters returned after %lld ms\n", mono_ms() - t0);
	CHECK(cq_ret == -ENODEV && cm_ret == -ENODEV && async_ret == -ENODEV && fatal_seen == 1);

	/* Data path */
	struct iwv_av dst;
	OK(s, iwv_qp_av(qp, &dst));
	struct iwv_sge sg = {.addr = (uintptr_t)iwv_buffer_addr(buf), .length = 10, .lkey = iwv_mr_lkey(mr)};
	struct iwv_send_wr sw = {.wr_id = 1, .num_sge = 1, .sg_list = &sg, .av = &dst};
	struct iwv_recv_wr rw = {.wr_id = 2, .num_sge = 1, .sg_list = &sg};
	UNTIL_ENODEV("post-send", iwv_post_send(qp, &sw, 1));
	UNTIL_ENODEV("post-recv", iwv_post_recv(qp, &rw, 1));
	UNTIL_ENODEV("poll-cq", iwv_poll_cq(cq, 1, &wc));
	UNTIL_ENODEV("req-notify-cq", iwv_req_notify_cq(cq, 0));
	UNTIL_ENODEV("session-status", iwv_session_status(s));

	/* Control path: at once. */
	struct iwv_device_attr da;
	FAILS(s, ENODEV, iwv_query_device(s, &da));
	printf("query-device: %s\n", iwv_last_error(s));
	FAILS(s, ENODEV, iwv_alloc_pd(s, &pd2));
	FAILS(s, ENODEV, iwv_create_cq(s, 4, NULL, &cq2));
	FAILS(s, ENODEV, iwv_reg_mr(pd, iwv_buffer_addr(buf), 100, 0, &mr));
	FAILS(s, ENODEV, iwv_modify_qp(qp, IWV_QPS_ERR));
	FAILS(s, ENODEV, iwv_listen(s, ":0", 0, &l));
	FAILS(s, ENODEV, iwv_alloc_buffer(s, 4096, &buf));
	FAILS(s, ENODEV, iwv_get_cq_event(ch, &cq2, 1000));
	struct iwv_cm_event cev;
	FAILS(s, ENODEV, iwv_cm_get_event(s, &cev, 1000));
	/* Destroying on a dead session releases the client's side: 0. */
	OK(s, iwv_destroy_qp(qp));
	OK(s, iwv_destroy_cq(cq));
	printf("all calls failed with ENODEV; total %lld ms\n", mono_ms() - t0);
	iwv_close(s);
	printf("PASS\n");
	return 0;
}
