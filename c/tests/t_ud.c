/*
 * t_ud — UD and RD send/receive between two daemons (sock A and B): the
 * receive completion's length and source address, inline sends from
 * inline_data and from SGEs, scatter over several SGEs, a shared receive
 * queue, and the completion channel (arm, wait, event, re-arm).
 */
#include "testlib.h"

#include <arpa/inet.h>
#include <poll.h>

static void check_src(const struct iwv_wc *wc, struct iwv_qp *from)
{
	struct iwv_av av, src = {0};
	CHECK(wc->flags & IWV_WC_FLAG_SRC_VALID);
	OK(NULL, iwv_qp_av(from, &av));
	memcpy(src.ip, wc->src_ip, 16);
	src.port = wc->src_port;
	src.family = av.family;
	CHECK(memcmp(src.ip, av.ip, 16) == 0);
	CHECK(src.port == av.port);
}

static void datagram(enum iwv_qp_type t, const char *name)
{
	struct ep a, b;
	struct iwv_wc wc;
	ep_open(&a, sock_a(), "t_ud-a", t, 1 << 16);
	ep_open(&b, sock_b(), "t_ud-b", t, 1 << 16);
	struct iwv_av dst;
	OK(a.s, iwv_av_from_string(a.s, &dst, iwv_qp_addr(b.qp)));
	CHECK(dst.qkey == 0 && iwv_qp_qkey(b.qp) != 0);
	dst.qkey = iwv_qp_qkey(b.qp); /* the peer's Q_Key, learned with its address */

	/* 1: one SGE */
	struct iwv_sge rs = sge_of(&b, 0, 4096);
	struct iwv_recv_wr rw = {.wr_id = 100, .num_sge = 1, .sg_list = &rs};
	CHECK(iwv_post_recv(b.qp, &rw, 1) == 1);
	for (int i = 0; i < 1000; i++)
		a.mem[i] = (char)(i * 7);
	struct iwv_sge ss = sge_of(&a, 0, 1000);
	struct iwv_send_wr sw = {.wr_id = 1, .opcode = IWV_WR_SEND, .flags = IWV_SEND_SIGNALED, .num_sge = 1,
				 .sg_list = &ss, .av = &dst};
	CHECK(iwv_post_send(a.qp, &sw, 1) == 1);
	wait_wc(a.s, a.scq, &wc);
	CHECK(wc.wr_id == 1 && wc.status == IWV_WC_SUCCESS && wc.opcode == IWV_WC_SEND);
	wait_wc(b.s, b.rcq, &wc);
	CHECK(wc.wr_id == 100 && wc.status == IWV_WC_SUCCESS && wc.opcode == IWV_WC_RECV && wc.byte_len == 1000);
	CHECK(wc.qp_num == iwv_qp_num(b.qp));
	check_src(&wc, a.qp);
	CHECK(memcmp(a.mem, b.mem, 1000) == 0);

	/* 2: inline from inline_data, scattered over three receive SGEs */
	char msg[200];
	for (int i = 0; i < 200; i++)
		msg[i] = (char)(255 - i);
	struct iwv_sge r3[3] = {sge_of(&b, 8192, 50), sge_of(&b, 9000, 50), sge_of(&b, 10000, 4096)};
	rw = (struct iwv_recv_wr){.wr_id = 101, .num_sge = 3, .sg_list = r3};
	CHECK(iwv_post_recv(b.qp, &rw, 1) == 1);
	sw = (struct iwv_send_wr){.wr_id = 2, .flags = IWV_SEND_SIGNALED | IWV_SEND_INLINE, .inline_data = msg,
				  .inline_len = sizeof msg, .av = &dst};
	CHECK(iwv_post_send(a.qp, &sw, 1) == 1);
	wait_wc(a.s, a.scq, &wc);
	CHECK(wc.wr_id == 2 && wc.status == IWV_WC_SUCCESS);
	wait_wc(b.s, b.rcq, &wc);
	CHECK(wc.wr_id == 101 && wc.status == IWV_WC_SUCCESS && wc.byte_len == 200);
	CHECK(memcmp(b.mem + 8192, msg, 50) == 0 && memcmp(b.mem + 9000, msg + 50, 50) == 0 &&
	      memcmp(b.mem + 10000, msg + 100, 100) == 0);

	/* 3: inline gathered from two SGEs of unregistered memory (stack) */
	char part1[30] = "first part of the message, ";
	char part2[30] = "second part";
	struct iwv_sge in2[2] = {{.addr = (uintptr_t)part1, .length = 27}, {.addr = (uintptr_t)part2, .length = 11}};
	rw = (struct iwv_recv_wr){.wr_id = 102, .num_sge = 1, .sg_list = &rs};
	CHECK(iwv_post_recv(b.qp, &rw, 1) == 1);
	sw = (struct iwv_send_wr){.wr_id = 3, .flags = IWV_SEND_SIGNALED | IWV_SEND_INLINE, .num_sge = 2,
				  .sg_list = in2, .av = &dst};
	CHECK(iwv_post_send(a.qp, &sw, 1) == 1);
	wait_wc(a.s, a.scq, &wc);
	CHECK(wc.wr_id == 3 && wc.status == IWV_WC_SUCCESS);
	wait_wc(b.s, b.rcq, &wc);
	CHECK(wc.wr_id == 102 && wc.byte_len == 38 && memcmp(b.mem, "first part of the message, second part", 38) == 0);

	/* 4: unsignaled sends complete nothing; a batch of 4 in one post */
	for (int i = 0; i < 4; i++) {
		struct iwv_recv_wr r = {.wr_id = 200 + (uint64_t)i, .num_sge = 1, .sg_list = &rs};
		CHECK(iwv_post_recv(b.qp, &r, 1) == 1);
	}
	struct iwv_sge s4 = sge_of(&a, 0, 64);
	struct iwv_send_wr batch[4];
	for (int i = 0; i < 4; i++)
		batch[i] = (struct iwv_send_wr){.wr_id = 10 + (uint64_t)i, .num_sge = 1, .sg_list = &s4, .av = &dst,
						.flags = i == 3 ? IWV_SEND_SIGNALED : 0};
	CHECK(iwv_post_send(a.qp, batch, 4) == 4);
	wait_wc(a.s, a.scq, &wc);
	CHECK(wc.wr_id == 13);
	for (int i = 0; i < 4; i++) {
		wait_wc(b.s, b.rcq, &wc);
		CHECK(wc.wr_id == 200 + (uint64_t)i && wc.byte_len == 64);
	}
	expect_no_wc(a.scq);
	printf("%s send/recv ok\n", name);
	ep_close(&a);
	ep_close(&b);
}

/* srq_and_channel: receives from an SRQ, completions waited for on a
 * completion channel. */
static void srq_and_channel(void)
{
	struct ep a;
	struct iwv_wc wc;
	ep_open(&a, sock_a(), "t_ud-srq", IWV_QPT_UD, 1 << 16);
	struct iwv_session *s = open_session(sock_b(), "t_ud-chan");
	struct iwv_pd *pd;
	struct iwv_comp_channel *ch;
	struct iwv_cq *cq, *got;
	struct iwv_srq *srq;
	struct iwv_qp *qp;
	struct iwv_buffer *buf;
	struct iwv_mr *mr;
	OK(s, iwv_alloc_pd(s, &pd));
	OK(s, iwv_create_comp_channel(s, &ch));
	OK(s, iwv_create_cq(s, 16, ch, &cq));
	struct iwv_srq_init_attr sa = {.max_wr = 8, .max_sge = 1};
	OK(s, iwv_create_srq(pd, &sa, &srq));
	struct iwv_qp_init_attr qa = {.qp_type = IWV_QPT_UD, .send_cq = cq, .recv_cq = cq, .srq = srq,
				      .cap = {.max_send_wr = 4, .max_send_sge = 1}};
	OK(s, iwv_create_qp(pd, &qa, &qp));
	OK(s, iwv_modify_qp(qp, IWV_QPS_INIT));
	OK(s, iwv_modify_qp(qp, IWV_QPS_RTR));
	OK(s, iwv_modify_qp(qp, IWV_QPS_RTS));
	OK(s, iwv_alloc_buffer(s, 8192, &buf));
	OK(s, iwv_reg_mr(pd, iwv_buffer_addr(buf), 8192, IWV_ACCESS_LOCAL_WRITE, &mr));
	struct iwv_sge rs = {.addr = (uintptr_t)iwv_buffer_addr(buf), .length = 8192, .lkey = iwv_mr_lkey(mr)};
	struct iwv_recv_wr rw[2] = {{.wr_id = 1, .num_sge = 1, .sg_list = &rs}, {.wr_id = 2, .num_sge = 1, .sg_list = &rs}};
	CHECK(iwv_post_srq_recv(srq, rw, 2) == 2);
	FAILS(s, EINVAL, iwv_post_recv(qp, rw, 1));

	/* Nothing armed, nothing to wait for. */
	FAILS(s, ETIMEDOUT, iwv_get_cq_event(ch, &got, 0));
	OK(s, iwv_req_notify_cq(cq, 0));
	struct iwv_av dst;
	OK(a.s, iwv_av_from_string(a.s, &dst, iwv_qp_addr(qp)));
	struct iwv_sge ss = sge_of(&a, 0, 333);
	struct iwv_send_wr sw = {.wr_id = 9, .flags = IWV_SEND_SIGNALED, .num_sge = 1, .sg_list = &ss, .av = &dst};
	FAILS(a.s, EINVAL, iwv_post_send(a.qp, &sw, 1)); /* no Q_Key named */
	sw.remote_qkey = iwv_qp_qkey(qp);
	CHECK(iwv_post_send(a.qp, &sw, 1) == 1);
	/* The channel's descriptor becomes readable. */
	struct pollfd p = {.fd = iwv_comp_channel_fd(ch), .events = POLLIN};
	CHECK(poll(&p, 1, scaled_ms(10000)) == 1);
	OK(s, iwv_get_cq_event(ch, &got, scaled_ms(10000)));
	CHECK(got == cq);
	iwv_ack_cq_events(cq, 1);
	wait_wc(s, cq, &wc);
	CHECK(wc.wr_id == 1 && wc.byte_len == 333 && wc.opcode == IWV_WC_RECV);
	/* Disarmed: a second message gives no event until re-armed. */
	CHECK(iwv_post_send(a.qp, &sw, 1) == 1);
	wait_wc(s, cq, &wc);
	CHECK(wc.wr_id == 2);
	FAILS(s, ETIMEDOUT, iwv_get_cq_event(ch, &got, 100));
	wait_wc(a.s, a.scq, &wc);
	wait_wc(a.s, a.scq, &wc);
	printf("srq and completion channel ok\n");
	iwv_close(s);
	ep_close(&a);
}

/* qp_sockets: a datagram QP's socket is this process's own (ABI 5), bound
 * to the QP's address; with IWARPD_QP_SOCKET=daemon it is iwarpd's, and a
 * message goes between the two kinds. */
static void qp_sockets(void)
{
	struct ep a, b;
	struct iwv_wc wc;
	ep_open(&a, sock_a(), "t_ud-sock-a", IWV_QPT_UD, 4096);
	setenv(IWV_ENV_QP_SOCKET, "daemon", 1);
	ep_open(&b, sock_a(), "t_ud-sock-b", IWV_QPT_UD, 4096);
	unsetenv(IWV_ENV_QP_SOCKET);
	int fd = iwv_qp_socket(a.qp), type = 0;
	CHECK(fd >= 0 && iwv_qp_socket(b.qp) == -1);
	socklen_t tl = sizeof type;
	CHECK(getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_DGRAM);
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	struct iwv_av av, bound;
	CHECK(getsockname(fd, (struct sockaddr *)&ss, &sl) == 0);
	OK(a.s, iwv_av_from_sockaddr(a.s, &bound, (struct sockaddr *)&ss));
	OK(a.s, iwv_qp_av(a.qp, &av));
	CHECK(bound.port == av.port && memcmp(bound.ip, av.ip, 16) == 0);
	struct iwv_av dst;
	OK(a.s, iwv_qp_av(b.qp, &dst));
	struct iwv_sge rs = sge_of(&b, 0, 64), ss1 = sge_of(&a, 0, 64);
	struct iwv_recv_wr rw = {.wr_id = 7, .num_sge = 1, .sg_list = &rs};
	struct iwv_send_wr sw = {.wr_id = 8, .opcode = IWV_WR_SEND, .flags = IWV_SEND_SIGNALED, .num_sge = 1,
				 .sg_list = &ss1, .av = &dst};
	CHECK(iwv_post_recv(b.qp, &rw, 1) == 1);
	CHECK(iwv_post_send(a.qp, &sw, 1) == 1);
	wait_wc(a.s, a.scq, &wc);
	CHECK(wc.wr_id == 8 && wc.status == IWV_WC_SUCCESS);
	wait_wc(b.s, b.rcq, &wc);
	CHECK(wc.wr_id == 7 && wc.status == IWV_WC_SUCCESS && wc.byte_len == 64);
	check_src(&wc, a.qp);
	printf("qp sockets ok\n");
	ep_close(&b);
	ep_close(&a);
}

int main(void)
{
	qp_sockets();
	datagram(IWV_QPT_UD, "UD");
	datagram(IWV_QPT_RD, "RD");
	srq_and_channel();
	printf("PASS\n");
	return 0;
}
