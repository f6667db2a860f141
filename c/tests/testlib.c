/* testlib.c — see testlib.h. */
#include "testlib.h"

#include <time.h>
#include <unistd.h>

const char *sock_a(void)
{
	const char *s = getenv("IWV_TEST_SOCK_A");
	CHECK(s && *s);
	return s;
}

const char *sock_b(void)
{
	const char *s = getenv("IWV_TEST_SOCK_B");
	return s && *s ? s : sock_a();
}

struct iwv_session *open_session(const char *sock, const char *name)
{
	struct iwv_open_attr a = {.socket = sock, .client_name = name};
	struct iwv_session *s;
	int r = iwv_open(&a, &s);
	if (r < 0) {
		fprintf(stderr, "iwv_open(%s) = %d: %s\n", sock, r, iwv_last_error(NULL));
		exit(1);
	}
	return s;
}

int scaled_ms(int ms)
{
	const char *f = getenv("IWARPD_TEST_TIMEOUT_SCALE");
	double x = f ? atof(f) : 1;
	return (int)(ms * (x > 0 ? x : 1));
}

long long mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

void wait_wc(struct iwv_session *s, struct iwv_cq *cq, struct iwv_wc *wc)
{
	long long deadline = mono_ms() + scaled_ms(10000);
	for (long i = 0; i < 100000000L; i++) {
		int n = iwv_poll_cq(cq, 1, wc);
		OK(s, n);
		if (n == 1)
			return;
		if (mono_ms() > deadline)
			break;
		if (i > 1000)
			usleep(100);
	}
	fprintf(stderr, "no completion within %d ms\n", scaled_ms(10000));
	exit(1);
}

void expect_no_wc(struct iwv_cq *cq)
{
	struct iwv_wc wc;
	usleep(50000);
	int n = iwv_poll_cq(cq, 1, &wc);
	if (n != 0) {
		fprintf(stderr, "unexpected completion: n=%d wr_id=%llu status=%d\n", n, (unsigned long long)wc.wr_id,
			wc.status);
		exit(1);
	}
}

void ep_open(struct ep *e, const char *sock, const char *name, enum iwv_qp_type t, size_t len)
{
	memset(e, 0, sizeof *e);
	e->s = open_session(sock, name);
	OK(e->s, iwv_alloc_pd(e->s, &e->pd));
	OK(e->s, iwv_create_cq(e->s, 64, NULL, &e->scq));
	OK(e->s, iwv_create_cq(e->s, 64, NULL, &e->rcq));
	OK(e->s, iwv_alloc_buffer(e->s, len, &e->buf));
	e->mem = iwv_buffer_addr(e->buf);
	e->len = len;
	OK(e->s, iwv_reg_mr(e->pd, e->mem, len,
			    IWV_ACCESS_LOCAL_WRITE | IWV_ACCESS_REMOTE_WRITE | IWV_ACCESS_REMOTE_READ |
				    IWV_ACCESS_REMOTE_ATOMIC,
			    &e->mr));
	struct iwv_qp_init_attr qa = {
		.qp_type = t,
		.send_cq = e->scq,
		.recv_cq = e->rcq,
		.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 4, .max_recv_sge = 4, .max_inline = 256},
	};
	OK(e->s, iwv_create_qp(e->pd, &qa, &e->qp));
	if (t != IWV_QPT_RC) {
		OK(e->s, iwv_modify_qp(e->qp, IWV_QPS_INIT));
		OK(e->s, iwv_modify_qp(e->qp, IWV_QPS_RTR));
		OK(e->s, iwv_modify_qp(e->qp, IWV_QPS_RTS));
	} else {
		OK(e->s, iwv_modify_qp(e->qp, IWV_QPS_INIT));
	}
}

void ep_close(struct ep *e)
{
	OK(e->s, iwv_destroy_qp(e->qp));
	OK(e->s, iwv_dereg_mr(e->mr));
	OK(e->s, iwv_free_buffer(e->buf));
	OK(e->s, iwv_destroy_cq(e->scq));
	OK(e->s, iwv_destroy_cq(e->rcq));
	OK(e->s, iwv_dealloc_pd(e->pd));
	iwv_close(e->s);
}

struct iwv_sge sge_of(struct ep *e, size_t off, uint32_t len)
{
	struct iwv_sge g = {.addr = (uintptr_t)(e->mem + off), .length = len, .lkey = iwv_mr_lkey(e->mr)};
	return g;
}
