/*
 * t_rc — RC connection management and data: listen, connect with private
 * data, the connect request (peer, private data), accept with private data,
 * established on both sides, Send, RDMA Write, RDMA Read; reject with
 * private data; connecting to nothing; disconnect and its events.
 */
#include "testlib.h"

#include <poll.h>
#include <unistd.h>

static void cm_wait(struct iwv_session *s, struct iwv_cm_event *ev, enum iwv_cm_event_type want)
{
	OK(s, iwv_cm_get_event(s, ev, scaled_ms(20000)));
	if (ev->type != want) {
		fprintf(stderr, "CM event %d (status %d, %s), want %d\n", ev->type, ev->status, ev->detail, want);
		exit(1);
	}
}

/* connect_pair connects a (active) to b (passive, listening on l). */
static void connect_pair(struct ep *a, struct ep *b, struct iwv_listener *l)
{
	struct iwv_cm_event ev, est;
	const char hello[] = "hello from a";
	struct iwv_conn_param cp = {.private_data = hello, .private_data_len = sizeof hello};
	OK(a->s, iwv_connect(a->qp, iwv_listener_addr(l), &cp));
	/* The passive side's event descriptor becomes readable. */
	struct pollfd p = {.fd = iwv_event_fd(b->s), .events = POLLIN};
	CHECK(poll(&p, 1, scaled_ms(20000)) == 1);
	cm_wait(b->s, &ev, IWV_CM_CONNECT_REQUEST);
	CHECK(ev.listener == l && ev.conn_id != 0);
	CHECK(ev.private_data_len == sizeof hello && memcmp(ev.private_data, hello, sizeof hello) == 0);
	CHECK(ev.peer[0] && ev.local[0]);
	const char reply[] = "welcome";
	struct iwv_conn_param ap = {.private_data = reply, .private_data_len = sizeof reply};
	OK(b->s, iwv_accept(b->s, ev.conn_id, b->qp, &ap, &est));
	CHECK(est.type == IWV_CM_ESTABLISHED && est.qp == b->qp && est.mpa_valid && est.mpa.revision >= 1);
	/* The passive side also gets the established event of its QP. */
	cm_wait(b->s, &ev, IWV_CM_ESTABLISHED);
	CHECK(ev.qp == b->qp);
	cm_wait(a->s, &ev, IWV_CM_ESTABLISHED);
	CHECK(ev.qp == a->qp);
	CHECK(ev.private_data_len == sizeof reply && memcmp(ev.private_data, reply, sizeof reply) == 0);
	struct iwv_qp_attr at;
	OK(a->s, iwv_query_qp(a->qp, &at));
	CHECK(at.state == IWV_QPS_RTS);
	OK(b->s, iwv_query_qp(b->qp, &at));
	CHECK(at.state == IWV_QPS_RTS);
}

static void data(struct ep *a, struct ep *b)
{
	struct iwv_wc wc;
	/* Send */
	for (int i = 0; i < 5000; i++)
		a->mem[i] = (char)(i * 13);
	struct iwv_sge rs = sge_of(b, 0, 8192);
	struct iwv_recv_wr rw = {.wr_id = 7, .num_sge = 1, .sg_list = &rs};
	CHECK(iwv_post_recv(b->qp, &rw, 1) == 1);
	struct iwv_sge ss = sge_of(a, 0, 5000);
	struct iwv_send_wr sw = {.wr_id = 1, .opcode = IWV_WR_SEND, .flags = IWV_SEND_SIGNALED, .num_sge = 1, .sg_list = &ss};
	CHECK(iwv_post_send(a->qp, &sw, 1) == 1);
	wait_wc(a->s, a->scq, &wc);
	CHECK(wc.wr_id == 1 && wc.status == IWV_WC_SUCCESS && wc.opcode == IWV_WC_SEND);
	wait_wc(b->s, b->rcq, &wc);
	CHECK(wc.wr_id == 7 && wc.status == IWV_WC_SUCCESS && wc.byte_len == 5000 && wc.opcode == IWV_WC_RECV);
	CHECK(memcmp(a->mem, b->mem, 5000) == 0);

	/* RDMA Write: a's [0, 20000) to b's [20000, 40000) */
	for (int i = 0; i < 20000; i++)
		a->mem[i] = (char)(i * 3 + 1);
	ss = sge_of(a, 0, 20000);
	sw = (struct iwv_send_wr){.wr_id = 2, .opcode = IWV_WR_RDMA_WRITE, .flags = IWV_SEND_SIGNALED, .num_sge = 1,
				  .sg_list = &ss, .remote_addr = (uintptr_t)(b->mem + 20000), .rkey = iwv_mr_rkey(b->mr)};
	CHECK(iwv_post_send(a->qp, &sw, 1) == 1);
	wait_wc(a->s, a->scq, &wc);
	CHECK(wc.wr_id == 2 && wc.status == IWV_WC_SUCCESS && wc.opcode == IWV_WC_RDMA_WRITE);
	/* Over iWARP the initiator's Write completion says the message was
	 * handed to the LLP, not that it was placed at the target: wait,
	 * bounded and scaled, for the last octet, which the daemon places last
	 * (DESIGN.md §5). */
	for (int i = 0, n = scaled_ms(10000); i < n && b->mem[20000 + 19999] != a->mem[19999]; i++)
		usleep(1000);
	CHECK(memcmp(a->mem, b->mem + 20000, 20000) == 0);
	expect_no_wc(b->rcq);

	/* RDMA Read: b's [40000, 50000) into a's [50000, 60000) */
	for (int i = 0; i < 10000; i++)
		b->mem[40000 + i] = (char)(i ^ 0x5a);
	ss = sge_of(a, 50000, 10000);
	sw = (struct iwv_send_wr){.wr_id = 3, .opcode = IWV_WR_RDMA_READ, .flags = IWV_SEND_SIGNALED, .num_sge = 1,
				  .sg_list = &ss, .remote_addr = (uintptr_t)(b->mem + 40000), .rkey = iwv_mr_rkey(b->mr)};
	CHECK(iwv_post_send(a->qp, &sw, 1) == 1);
	wait_wc(a->s, a->scq, &wc);
	CHECK(wc.wr_id == 3 && wc.status == IWV_WC_SUCCESS && wc.opcode == IWV_WC_RDMA_READ && wc.byte_len == 10000);
	CHECK(memcmp(a->mem + 50000, b->mem + 40000, 10000) == 0);

	printf("RC send/write/read ok\n");
}

/* bad_rkey: an RDMA Read with a wrong rkey completes in error (the peer
 * answers with a Terminate) and ends the connection on both sides. */
static void bad_rkey(void)
{
	struct ep a, b;
	struct iwv_cm_event ev;
	struct iwv_listener *l;
	struct iwv_wc wc;
	ep_open(&a, sock_a(), "t_rc-a2", IWV_QPT_RC, 1 << 16);
	ep_open(&b, sock_b(), "t_rc-b2", IWV_QPT_RC, 1 << 16);
	OK(b.s, iwv_listen(b.s, ":0", 0, &l));
	connect_pair(&a, &b, l);
	struct iwv_sge ss = sge_of(&a, 0, 100);
	struct iwv_send_wr sw = {.wr_id = 4, .opcode = IWV_WR_RDMA_READ, .flags = IWV_SEND_SIGNALED, .num_sge = 1,
				 .sg_list = &ss, .remote_addr = (uintptr_t)b.mem, .rkey = iwv_mr_rkey(b.mr) ^ 0x100};
	CHECK(iwv_post_send(a.qp, &sw, 1) == 1);
	wait_wc(a.s, a.scq, &wc);
	CHECK(wc.wr_id == 4 && wc.status != IWV_WC_SUCCESS);
	cm_wait(a.s, &ev, IWV_CM_DISCONNECTED);
	cm_wait(b.s, &ev, IWV_CM_DISCONNECTED);
	printf("bad rkey: status %d term %#x (flags %#x)\n", wc.status, wc.term, wc.flags);
	/* The Terminate received moves a's QP to Error: an asynchronous event
	 * names it (the event descriptor is readable first). */
	struct iwv_async_event ae;
	OK(a.s, iwv_get_async_event(a.s, &ae, scaled_ms(10000)));
	CHECK(ae.type == IWV_EVENT_QP_FATAL || ae.type == IWV_EVENT_QP_ACCESS_ERR);
	CHECK(ae.qp == a.qp && ae.handle == iwv_qp_handle(a.qp));
	printf("async event %d on the QP: %s\n", ae.type, ae.detail);
	OK(b.s, iwv_listener_close(l));
	ep_close(&a);
	ep_close(&b);
}

int main(void)
{
	struct ep a, b;
	struct iwv_cm_event ev;
	struct iwv_listener *l;
	ep_open(&a, sock_a(), "t_rc-a", IWV_QPT_RC, 1 << 16);
	ep_open(&b, sock_b(), "t_rc-b", IWV_QPT_RC, 1 << 16);
	OK(b.s, iwv_listen(b.s, ":0", 4, &l));
	connect_pair(&a, &b, l);
	data(&a, &b);

	/* Reject: a new QP on a is refused with a reason. */
	struct iwv_qp *q2;
	struct iwv_qp_init_attr qa = {.qp_type = IWV_QPT_RC, .send_cq = a.scq, .recv_cq = a.rcq,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	OK(a.s, iwv_create_qp(a.pd, &qa, &q2));
	OK(a.s, iwv_modify_qp(q2, IWV_QPS_INIT));
	OK(a.s, iwv_connect(q2, iwv_listener_addr(l), NULL));
	cm_wait(b.s, &ev, IWV_CM_CONNECT_REQUEST);
	CHECK(ev.private_data_len == 0);
	const char no[] = "go away";
	OK(b.s, iwv_reject(b.s, ev.conn_id, no, sizeof no));
	cm_wait(a.s, &ev, IWV_CM_REJECTED);
	CHECK(ev.qp == q2 && ev.private_data_len == sizeof no && memcmp(ev.private_data, no, sizeof no) == 0);
	OK(a.s, iwv_destroy_qp(q2));
	printf("reject ok\n");

	/* Nothing listens there any more: unreachable. */
	char addr[IWV_ADDR_STRLEN];
	snprintf(addr, sizeof addr, "%s", iwv_listener_addr(l));
	OK(b.s, iwv_listener_close(l));
	OK(a.s, iwv_create_qp(a.pd, &qa, &q2));
	OK(a.s, iwv_modify_qp(q2, IWV_QPS_INIT));
	OK(a.s, iwv_connect(q2, addr, NULL));
	OK(a.s, iwv_cm_get_event(a.s, &ev, scaled_ms(20000)));
	CHECK(ev.qp == q2 && (ev.type == IWV_CM_UNREACHABLE || ev.type == IWV_CM_TIMED_OUT));
	CHECK(ev.status != 0);
	printf("unreachable ok: %s\n", iwv_strerror(-ev.status));
	OK(a.s, iwv_destroy_qp(q2));

	/* Disconnect: both sides see it. */
	OK(a.s, iwv_disconnect(a.qp, 0));
	cm_wait(a.s, &ev, IWV_CM_DISCONNECTED);
	CHECK(ev.qp == a.qp);
	cm_wait(b.s, &ev, IWV_CM_DISCONNECTED);
	CHECK(ev.qp == b.qp);
	FAILS(a.s, ETIMEDOUT, iwv_cm_get_event(a.s, &ev, 0));
	printf("disconnect ok\n");
	ep_close(&a);
	ep_close(&b);
	bad_rkey();
	printf("PASS\n");
	return 0;
}
