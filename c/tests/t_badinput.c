/*
 * t_badinput — bad input returns a negative errno and an explanation, never
 * a crash: sizes, access flags, capabilities, queue overflow, addresses,
 * state transitions, private data.
 */
#include "testlib.h"

#include <netinet/in.h>
#include <stdint.h>

int main(void)
{
	struct ep a;
	ep_open(&a, sock_a(), "t_badinput", IWV_QPT_UD, 1 << 16);
	struct iwv_session *s = a.s;
	struct iwv_cq *cq;
	struct iwv_mr *mr;
	struct iwv_qp *qp;
	struct iwv_buffer *buf;
	struct iwv_srq *srq;

	/* CQ depth */
	FAILS(s, EINVAL, iwv_create_cq(s, 0, NULL, &cq));
	FAILS(s, EINVAL, iwv_create_cq(s, (1 << 16) + 1, NULL, &cq));
	CHECK(cq == NULL);
	CHECK(strstr(iwv_last_error(s), "depth") != NULL);

	/* Memory registration */
	FAILS(s, EINVAL, iwv_reg_mr(a.pd, a.mem, 0, IWV_ACCESS_LOCAL_WRITE, &mr));
	FAILS(s, EINVAL, iwv_reg_mr(a.pd, a.mem, 100, 0x100, &mr));
	FAILS(s, EINVAL, iwv_reg_mr(a.pd, a.mem, 100, IWV_ACCESS_REMOTE_WRITE, &mr));
	FAILS(s, EINVAL, iwv_alloc_buffer(s, 0, &buf));

	/* QP capabilities: beyond the device's limits the daemon refuses. */
	struct iwv_device_attr da;
	OK(s, iwv_query_device(s, &da));
	struct iwv_qp_init_attr qa = {.qp_type = IWV_QPT_UD, .send_cq = a.scq, .recv_cq = a.rcq,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = da.max_sge + 1}};
	FAILS(s, EINVAL, iwv_create_qp(a.pd, &qa, &qp));
	qa.cap.max_send_sge = 1;
	qa.cap.max_inline = da.max_inline + 1;
	FAILS(s, EINVAL, iwv_create_qp(a.pd, &qa, &qp));
	qa.cap.max_inline = 0;
	qa.cap.max_send_wr = (1 << 16) + 1;
	FAILS(s, EINVAL, iwv_create_qp(a.pd, &qa, &qp));
	qa.cap.max_send_wr = 4;
	qa.qp_type = (enum iwv_qp_type)9;
	FAILS(s, EINVAL, iwv_create_qp(a.pd, &qa, &qp));
	qa.qp_type = IWV_QPT_UD;
	qa.send_cq = NULL;
	FAILS(s, EINVAL, iwv_create_qp(a.pd, &qa, &qp));
	qa.send_cq = a.scq;
	struct iwv_srq_init_attr sa = {.max_wr = 1u << 20};
	FAILS(s, EINVAL, iwv_create_srq(a.pd, &sa, &srq));

	/* Posting: too many SGEs, too much inline, unknown flags, a full queue. */
	struct iwv_av dst;
	OK(s, iwv_av_from_string(s, &dst, iwv_qp_addr(a.qp)));
	struct iwv_send_wr nokey = {.wr_id = 1, .av = &dst};
	FAILS(s, EINVAL, iwv_post_send(a.qp, &nokey, 1));
	CHECK(strstr(iwv_last_error(s), "Q_Key") != NULL);
	dst.qkey = iwv_qp_qkey(a.qp);
	struct iwv_sge sg[8];
	for (int i = 0; i < 8; i++)
		sg[i] = sge_of(&a, (size_t)i * 64, 64);
	struct iwv_send_wr sw = {.wr_id = 1, .num_sge = 5, .sg_list = sg, .av = &dst};
	FAILS(s, EINVAL, iwv_post_send(a.qp, &sw, 1));
	char big[512] = {0};
	sw = (struct iwv_send_wr){.wr_id = 2, .flags = IWV_SEND_INLINE, .inline_data = big, .inline_len = 257, .av = &dst};
	FAILS(s, EINVAL, iwv_post_send(a.qp, &sw, 1));
	sw = (struct iwv_send_wr){.wr_id = 3, .flags = 0x80, .av = &dst};
	FAILS(s, EINVAL, iwv_post_send(a.qp, &sw, 1));
	FAILS(s, EINVAL, iwv_post_send(a.qp, NULL, 1));
	struct iwv_recv_wr rw = {.wr_id = 1, .num_sge = 5, .sg_list = sg};
	FAILS(s, EINVAL, iwv_post_recv(a.qp, &rw, 1));
	/* The RQ holds 16: a batch of 20 posts 16, then the queue is full. */
	struct iwv_recv_wr many[20];
	for (int i = 0; i < 20; i++)
		many[i] = (struct iwv_recv_wr){.wr_id = (uint64_t)i, .num_sge = 1, .sg_list = sg};
	CHECK(iwv_post_recv(a.qp, many, 20) == 16);
	FAILS(s, ENOMEM, iwv_post_recv(a.qp, many, 1));
	CHECK(strstr(iwv_last_error(s), "full") != NULL);

	/* Completion notification needs a channel. */
	FAILS(s, EINVAL, iwv_req_notify_cq(a.scq, 0));
	FAILS(s, EINVAL, iwv_poll_cq(a.scq, -1, NULL));

	/* Addresses */
	struct iwv_av av;
	FAILS(s, EINVAL, iwv_av_from_string(s, &av, "127.0.0.1"));
	FAILS(s, EINVAL, iwv_av_from_string(s, &av, "127.0.0.1:0"));
	FAILS(s, EINVAL, iwv_av_from_string(s, &av, "127.0.0.1:70000"));
	FAILS(s, EINVAL, iwv_av_from_string(s, &av, "nonsense:80"));
	FAILS(s, EINVAL, iwv_av_from_string(s, &av, "[::1]:80")); /* the device is IPv4 */
	FAILS(s, EINVAL, iwv_av_from_string(s, &av, NULL));
	OK(s, iwv_av_from_string(s, &av, "[::ffff:10.1.2.3]:4791")); /* IPv4-mapped is IPv4 */
	char txt[IWV_ADDR_STRLEN];
	OK(s, iwv_av_format(&av, txt, sizeof txt));
	CHECK(strcmp(txt, "10.1.2.3:4791") == 0);
	struct sockaddr_storage ss;
	CHECK(iwv_av_to_sockaddr(&av, &ss) == (int)sizeof(struct sockaddr_in));
	struct iwv_av back;
	OK(s, iwv_av_from_sockaddr(s, &back, (struct sockaddr *)&ss));
	CHECK(memcmp(&back, &av, sizeof av) == 0);

	/* State: RTS -> INIT is not a transition the daemon allows. */
	FAILS(s, EINVAL, iwv_modify_qp(a.qp, IWV_QPS_INIT));
	printf("bad transition: %s\n", iwv_last_error(s));

	/* CM: oversized private data, a bad address, accepting nothing. */
	struct iwv_qp *rc;
	qa.qp_type = IWV_QPT_RC;
	qa.cap.max_send_wr = 4;
	OK(s, iwv_create_qp(a.pd, &qa, &rc));
	OK(s, iwv_modify_qp(rc, IWV_QPS_INIT));
	char pdata[600] = {0};
	struct iwv_conn_param cp = {.private_data = pdata, .private_data_len = 600};
	FAILS(s, EINVAL, iwv_connect(rc, "127.0.0.1:1", &cp));
	FAILS(s, EINVAL, iwv_connect(rc, NULL, NULL));
	CHECK(iwv_accept(s, 12345, rc, NULL, NULL) < 0);
	CHECK(iwv_reject(s, 12345, NULL, 0) < 0);
	struct iwv_listener *l;
	CHECK(iwv_listen(s, "not an address", 0, &l) < 0 && l == NULL);
	FAILS(s, EINVAL, iwv_listen(s, ":0", -1, &l));
	OK(s, iwv_destroy_qp(rc));
	ep_close(&a);
	printf("PASS\n");
	return 0;
}
