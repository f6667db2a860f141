/*
 * t_parity — the scenarios of test/cclient's parity test, through the C
 * core. The Go test runs the same scenarios through ofverbs against the same
 * daemons and compares the completion sequences this program prints (one
 * line per completion: scenario, queue, wr_id, opcode, status, byte_len,
 * flags), so that the two clients cannot drift. Keep both in step: a change
 * here needs the same change in test/cclient/parity_test.go.
 */
#include "testlib.h"

#define BADKEY 0x7fffff00u

static void print_wc(const char *scen, const char *q, const struct iwv_wc *wc)
{
	printf("%s %s wr=%llu op=%u status=%u len=%u flags=%#x imm=%u\n", scen, q, (unsigned long long)wc->wr_id,
	       wc->opcode, wc->status, wc->byte_len, wc->flags, wc->imm);
}

static void drain(const char *scen, struct ep *e, int nsend, int nrecv)
{
	struct iwv_wc wc;
	for (int i = 0; i < nsend; i++) {
		wait_wc(e->s, e->scq, &wc);
		print_wc(scen, "send", &wc);
	}
	for (int i = 0; i < nrecv; i++) {
		wait_wc(e->s, e->rcq, &wc);
		print_wc(scen, "recv", &wc);
	}
}

static void recv1(struct ep *e, uint64_t id, size_t off, uint32_t len)
{
	struct iwv_sge g = sge_of(e, off, len);
	struct iwv_recv_wr w = {.wr_id = id, .num_sge = 1, .sg_list = &g};
	CHECK(iwv_post_recv(e->qp, &w, 1) == 1);
}

static void send1(struct ep *e, struct iwv_send_wr *w)
{
	CHECK(iwv_post_send(e->qp, w, 1) == 1);
}

/* datagram: the same steps over UD or RD. */
static void datagram(const char *scen, enum iwv_qp_type t)
{
	struct ep a, b;
	ep_open(&a, sock_a(), "parity-a", t, 1 << 16);
	ep_open(&b, sock_b(), "parity-b", t, 1 << 16);
	struct iwv_av dst;
	OK(a.s, iwv_av_from_string(a.s, &dst, iwv_qp_addr(b.qp)));
	dst.qkey = iwv_qp_qkey(b.qp); /* learned with the address, out of band */
	struct iwv_sge g;
	struct iwv_send_wr w;

	/* 1: 1000 bytes, signaled */
	recv1(&b, 100, 0, 4096);
	g = sge_of(&a, 0, 1000);
	w = (struct iwv_send_wr){.wr_id = 1, .flags = IWV_SEND_SIGNALED, .num_sge = 1, .sg_list = &g, .av = &dst};
	send1(&a, &w);
	drain(scen, &a, 1, 0);
	drain(scen, &b, 0, 1);
	/* 2: 200 bytes inline, signaled, solicited */
	recv1(&b, 101, 0, 4096);
	char msg[200] = {1, 2, 3};
	w = (struct iwv_send_wr){.wr_id = 2, .flags = IWV_SEND_SIGNALED | IWV_SEND_INLINE | IWV_SEND_SOLICITED,
				 .inline_data = msg, .inline_len = sizeof msg, .av = &dst};
	send1(&a, &w);
	drain(scen, &a, 1, 0);
	drain(scen, &b, 0, 1);
	/* 3: 64 bytes unsignaled, then 0 bytes signaled */
	recv1(&b, 102, 0, 4096);
	recv1(&b, 103, 0, 4096);
	g = sge_of(&a, 0, 64);
	w = (struct iwv_send_wr){.wr_id = 3, .num_sge = 1, .sg_list = &g, .av = &dst};
	send1(&a, &w);
	w = (struct iwv_send_wr){.wr_id = 4, .flags = IWV_SEND_SIGNALED, .av = &dst};
	send1(&a, &w);
	drain(scen, &a, 1, 0);
	drain(scen, &b, 0, 2);
	/* 3b: a Write-Record with Immediate: its record completion carries the value */
	recv1(&b, 106, 0, 4096);
	g = sge_of(&a, 0, 300);
	w = (struct iwv_send_wr){.wr_id = 6, .opcode = IWV_WR_WRITE_RECORD_WITH_IMM, .flags = IWV_SEND_SIGNALED,
				 .num_sge = 1, .sg_list = &g, .av = &dst, .remote_addr = (uintptr_t)(b.mem + 8192),
				 .rkey = iwv_mr_rkey(b.mr), .imm = 0x4321};
	send1(&a, &w);
	drain(scen, &a, 1, 0);
	drain(scen, &b, 0, 1);
	/* 4: a bad lkey fails the send */
	g = sge_of(&a, 0, 100);
	g.lkey = BADKEY;
	w = (struct iwv_send_wr){.wr_id = 5, .flags = IWV_SEND_SIGNALED, .num_sge = 1, .sg_list = &g, .av = &dst};
	send1(&a, &w);
	drain(scen, &a, 1, 0);
	/* 5: the receiver's QP to ERR flushes what is posted */
	recv1(&b, 104, 0, 4096);
	recv1(&b, 105, 0, 4096);
	OK(b.s, iwv_modify_qp(b.qp, IWV_QPS_ERR));
	drain(scen, &b, 0, 2);
	ep_close(&a);
	ep_close(&b);
}

static void rc(void)
{
	const char *scen = "rc";
	struct ep a, b;
	struct iwv_cm_event ev;
	struct iwv_listener *l;
	ep_open(&a, sock_a(), "parity-a", IWV_QPT_RC, 1 << 16);
	ep_open(&b, sock_b(), "parity-b", IWV_QPT_RC, 1 << 16);
	OK(b.s, iwv_listen(b.s, ":0", 0, &l));
	OK(a.s, iwv_connect(a.qp, iwv_listener_addr(l), NULL));
	OK(b.s, iwv_cm_get_event(b.s, &ev, scaled_ms(20000)));
	CHECK(ev.type == IWV_CM_CONNECT_REQUEST);
	OK(b.s, iwv_accept(b.s, ev.conn_id, b.qp, NULL, NULL));
	OK(a.s, iwv_cm_get_event(a.s, &ev, scaled_ms(20000)));
	CHECK(ev.type == IWV_CM_ESTABLISHED);
	struct iwv_sge g;
	struct iwv_send_wr w;

	/* 1: Send 5000 */
	recv1(&b, 100, 0, 8192);
	g = sge_of(&a, 0, 5000);
	w = (struct iwv_send_wr){.wr_id = 1, .flags = IWV_SEND_SIGNALED, .num_sge = 1, .sg_list = &g};
	send1(&a, &w);
	drain(scen, &a, 1, 0);
	drain(scen, &b, 0, 1);
	/* 2: RDMA Write 20000, RDMA Read 10000 */
	g = sge_of(&a, 0, 20000);
	w = (struct iwv_send_wr){.wr_id = 2, .opcode = IWV_WR_RDMA_WRITE, .flags = IWV_SEND_SIGNALED, .num_sge = 1,
				 .sg_list = &g, .remote_addr = (uintptr_t)(b.mem + 8192), .rkey = iwv_mr_rkey(b.mr)};
	send1(&a, &w);
	g = sge_of(&a, 30000, 10000);
	w = (struct iwv_send_wr){.wr_id = 3, .opcode = IWV_WR_RDMA_READ, .flags = IWV_SEND_SIGNALED, .num_sge = 1,
				 .sg_list = &g, .remote_addr = (uintptr_t)(b.mem + 40000), .rkey = iwv_mr_rkey(b.mr)};
	send1(&a, &w);
	drain(scen, &a, 2, 0);
	/* 3: solicited inline send */
	recv1(&b, 101, 0, 8192);
	w = (struct iwv_send_wr){.wr_id = 4, .flags = IWV_SEND_SIGNALED | IWV_SEND_INLINE | IWV_SEND_SOLICITED,
				 .inline_data = "0123456789", .inline_len = 10};
	send1(&a, &w);
	drain(scen, &a, 1, 0);
	drain(scen, &b, 0, 1);
	/* 4: Send with immediate data, RDMA Write with immediate data. The
	 * Immediate Data message of RFC 7306 consumes a receive of its own:
	 * three receives for the two. */
	recv1(&b, 102, 0, 8192);
	recv1(&b, 103, 0, 8192);
	recv1(&b, 104, 0, 8192);
	g = sge_of(&a, 0, 16);
	w = (struct iwv_send_wr){.wr_id = 6, .opcode = IWV_WR_SEND_WITH_IMM, .flags = IWV_SEND_SIGNALED, .num_sge = 1,
				 .sg_list = &g, .imm = 0x1234};
	send1(&a, &w);
	drain(scen, &a, 1, 0);
	drain(scen, &b, 0, 2);
	g = sge_of(&a, 0, 100);
	w = (struct iwv_send_wr){.wr_id = 7, .opcode = IWV_WR_RDMA_WRITE_WITH_IMM, .flags = IWV_SEND_SIGNALED,
				 .num_sge = 1, .sg_list = &g, .remote_addr = (uintptr_t)(b.mem + 50000),
				 .rkey = iwv_mr_rkey(b.mr), .imm = 0x5678};
	send1(&a, &w);
	drain(scen, &a, 1, 0);
	drain(scen, &b, 0, 1);
	/* 5: FetchAdd 10 on 5, then CmpSwap 15 -> 99 */
	uint64_t *remote = (uint64_t *)(void *)(b.mem + 60000), *result = (uint64_t *)(void *)(a.mem + 1000);
	*remote = 5;
	g = sge_of(&a, 1000, 8);
	w = (struct iwv_send_wr){.wr_id = 8, .opcode = IWV_WR_ATOMIC_FETCH_AND_ADD, .flags = IWV_SEND_SIGNALED,
				 .num_sge = 1, .sg_list = &g, .remote_addr = (uintptr_t)remote, .rkey = iwv_mr_rkey(b.mr),
				 .compare_add = 10};
	send1(&a, &w);
	drain(scen, &a, 1, 0);
	printf("rc fetch-add result=%llu remote=%llu\n", (unsigned long long)*result, (unsigned long long)*remote);
	w = (struct iwv_send_wr){.wr_id = 9, .opcode = IWV_WR_ATOMIC_CMP_AND_SWP, .flags = IWV_SEND_SIGNALED,
				 .num_sge = 1, .sg_list = &g, .remote_addr = (uintptr_t)remote, .rkey = iwv_mr_rkey(b.mr),
				 .compare_add = 15, .swap = 99};
	send1(&a, &w);
	drain(scen, &a, 1, 0);
	printf("rc cmp-swap result=%llu remote=%llu\n", (unsigned long long)*result, (unsigned long long)*remote);
	/* 6: a bad lkey fails locally */
	g = sge_of(&a, 0, 100);
	g.lkey = BADKEY;
	w = (struct iwv_send_wr){.wr_id = 5, .flags = IWV_SEND_SIGNALED, .num_sge = 1, .sg_list = &g};
	send1(&a, &w);
	drain(scen, &a, 1, 0);
	OK(b.s, iwv_listener_close(l));
	ep_close(&a);
	ep_close(&b);
}

static struct iwv_cm_event *cm_next(struct iwv_session *s, struct iwv_cm_event *ev)
{
	OK(s, iwv_cm_get_event(s, ev, scaled_ms(20000)));
	return ev;
}

static void print_pdata(const char *what, const struct iwv_cm_event *ev)
{
	printf("cm %s pdata=%.*s\n", what, (int)ev->private_data_len, (const char *)ev->private_data);
}

/* cm: the connection manager's observable outcomes (private data both
 * ways, reject with a reason, connecting to nothing, disconnect). */
static void cm(void)
{
	struct ep a, b;
	struct iwv_cm_event ev;
	struct iwv_listener *l;
	ep_open(&a, sock_a(), "parity-a", IWV_QPT_RC, 4096);
	ep_open(&b, sock_b(), "parity-b", IWV_QPT_RC, 4096);
	OK(b.s, iwv_listen(b.s, ":0", 0, &l));
	struct iwv_conn_param cp = {.private_data = "p-hello", .private_data_len = 7};
	OK(a.s, iwv_connect(a.qp, iwv_listener_addr(l), &cp));
	CHECK(cm_next(b.s, &ev)->type == IWV_CM_CONNECT_REQUEST);
	print_pdata("request", &ev);
	struct iwv_conn_param ap = {.private_data = "p-welcome", .private_data_len = 9};
	OK(b.s, iwv_accept(b.s, ev.conn_id, b.qp, &ap, NULL));
	CHECK(cm_next(b.s, &ev)->type == IWV_CM_ESTABLISHED); /* the passive QP's */
	CHECK(cm_next(a.s, &ev)->type == IWV_CM_ESTABLISHED);
	print_pdata("established", &ev);

	struct iwv_qp *q2;
	struct iwv_qp_init_attr qa = {.qp_type = IWV_QPT_RC, .send_cq = a.scq, .recv_cq = a.rcq,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	OK(a.s, iwv_create_qp(a.pd, &qa, &q2));
	OK(a.s, iwv_modify_qp(q2, IWV_QPS_INIT));
	OK(a.s, iwv_connect(q2, iwv_listener_addr(l), NULL));
	CHECK(cm_next(b.s, &ev)->type == IWV_CM_CONNECT_REQUEST);
	print_pdata("request", &ev);
	OK(b.s, iwv_reject(b.s, ev.conn_id, "p-no", 4));
	CHECK(cm_next(a.s, &ev)->type == IWV_CM_REJECTED);
	print_pdata("rejected", &ev);
	OK(a.s, iwv_destroy_qp(q2));

	char addr[IWV_ADDR_STRLEN];
	snprintf(addr, sizeof addr, "%s", iwv_listener_addr(l));
	OK(b.s, iwv_listener_close(l));
	OK(a.s, iwv_create_qp(a.pd, &qa, &q2));
	OK(a.s, iwv_modify_qp(q2, IWV_QPS_INIT));
	OK(a.s, iwv_connect(q2, addr, NULL));
	cm_next(a.s, &ev);
	printf("cm connect-failed errno=%d\n", ev.status);
	OK(a.s, iwv_destroy_qp(q2));

	OK(a.s, iwv_disconnect(a.qp, 0));
	CHECK(cm_next(a.s, &ev)->type == IWV_CM_DISCONNECTED);
	printf("cm disconnected-active errno=%d\n", ev.status);
	CHECK(cm_next(b.s, &ev)->type == IWV_CM_DISCONNECTED);
	printf("cm disconnected-passive errno=%d\n", ev.status);
	ep_close(&a);
	ep_close(&b);
}

int main(void)
{
	datagram("ud", IWV_QPT_UD);
	datagram("rd", IWV_QPT_RD);
	rc();
	cm();
	return 0;
}
