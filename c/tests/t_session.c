/*
 * t_session — Hello, the ABI check, the default socket path rules, device
 * and port queries, and creating and destroying every kind of object.
 */
#include "testlib.h"

#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

static void default_socket(void)
{
	char buf[256];
	setenv("IWARPD_SOCKET", "/x/y.sock", 1);
	OK(NULL, iwv_default_socket(buf, sizeof buf));
	CHECK(strcmp(buf, "/x/y.sock") == 0);
	unsetenv("IWARPD_SOCKET");
	if (geteuid() == 0) {
		OK(NULL, iwv_default_socket(buf, sizeof buf));
		CHECK(strcmp(buf, "/run/iwarpd/iwarpd.sock") == 0);
	} else {
		setenv("XDG_RUNTIME_DIR", "/run/user/9", 1);
		OK(NULL, iwv_default_socket(buf, sizeof buf));
		CHECK(strcmp(buf, "/run/user/9/iwarpd/iwarpd.sock") == 0);
		unsetenv("XDG_RUNTIME_DIR");
		setenv("TMPDIR", "/tmpx", 1);
		OK(NULL, iwv_default_socket(buf, sizeof buf));
		char want[64];
		snprintf(want, sizeof want, "/tmpx/iwarpd-%u/iwarpd.sock", (unsigned)geteuid());
		CHECK(strcmp(buf, want) == 0);
	}
	FAILS(NULL, ENAMETOOLONG, iwv_default_socket(buf, 4));
	printf("default socket ok\n");
}

static void hello(void)
{
	struct iwv_session *s;
	struct iwv_open_attr a = {.socket = sock_a(), .abi = IWV_ABI_VERSION + 1};
	FAILS(NULL, EPROTO, iwv_open(&a, &s));
	CHECK(s == NULL);
	CHECK(strstr(iwv_last_error(NULL), "ABI version mismatch") != NULL);
	printf("version mismatch: %s\n", iwv_last_error(NULL));

	struct iwv_open_attr none = {.socket = "/nonexistent/iwarpd.sock"};
	FAILS(NULL, ENODEV, iwv_open(&none, &s));
	CHECK(strstr(iwv_last_error(NULL), "start iwarpd") != NULL);

	/* The default path follows IWARPD_SOCKET. */
	setenv("IWARPD_SOCKET", sock_a(), 1);
	OK(NULL, iwv_open(NULL, &s));
	unsetenv("IWARPD_SOCKET");
	CHECK(iwv_abi_version() == IWV_ABI_VERSION);
	CHECK(iwv_device_name(s)[0] != 0);
	CHECK(iwv_daemon_version(s)[0] != 0);
	CHECK(iwv_session_id(s) != 0);
	OK(s, iwv_session_status(s));
	struct iwv_device_attr da;
	OK(s, iwv_query_device(s, &da));
	CHECK(strcmp(da.name, iwv_device_name(s)) == 0);
	CHECK(da.max_qp > 0 && da.max_qp_wr > 0 && da.max_sge > 0 && da.max_cqe > 0 && da.max_inline > 0);
	struct iwv_port_attr pa;
	OK(s, iwv_query_port(s, &pa));
	CHECK(strcmp(pa.state, "active") == 0);
	CHECK(pa.ud_port_first > 0 && pa.ud_port_first <= pa.ud_port_last);
	CHECK(pa.unpriv_port_start > 0);
	CHECK(geteuid() != 0 || pa.priv_bind); /* root may bind privileged ports */
	printf("device %s (daemon %s, addr %s): max_qp %u max_qp_wr %u max_sge %u max_inline %u; ports %u-%u\n",
	       da.name, iwv_daemon_version(s), iwv_device_addr(s), da.max_qp, da.max_qp_wr, da.max_sge, da.max_inline,
	       pa.ud_port_first, pa.ud_port_last);
	iwv_close(s);
	iwv_close(NULL);
}

static void objects(void)
{
	struct iwv_session *s = open_session(sock_a(), "t_session");
	struct iwv_pd *pd;
	struct iwv_buffer *buf;
	struct iwv_mr *mr, *mr2;
	struct iwv_comp_channel *ch;
	struct iwv_cq *cq, *cq2;
	struct iwv_srq *srq;
	struct iwv_qp *ud, *rd, *rc, *srqqp;
	struct iwv_listener *l;

	OK(s, iwv_alloc_pd(s, &pd));
	OK(s, iwv_alloc_buffer(s, 10000, &buf));
	CHECK(iwv_buffer_len(buf) == 10000);
	char *mem = iwv_buffer_addr(buf);
	CHECK(mem[0] == 0 && mem[9999] == 0);
	OK(s, iwv_reg_mr(pd, mem + 100, 5000, IWV_ACCESS_LOCAL_WRITE | IWV_ACCESS_REMOTE_WRITE, &mr));
	CHECK(!iwv_mr_is_process(mr) && iwv_mr_addr(mr) == mem + 100 && iwv_mr_len(mr) == 5000);
	CHECK(iwv_mr_lkey(mr) != 0);
	OK(s, iwv_reg_mr(pd, mem, 10000, IWV_ACCESS_REMOTE_READ, &mr2));
	CHECK(iwv_mr_lkey(mr2) != iwv_mr_lkey(mr));
	OK(s, iwv_create_comp_channel(s, &ch));
	CHECK(iwv_comp_channel_fd(ch) >= 0);
	OK(s, iwv_create_cq(s, 100, ch, &cq));
	CHECK(iwv_cq_depth(cq) == 128);
	OK(s, iwv_create_cq(s, 1, NULL, &cq2));
	CHECK(iwv_cq_depth(cq2) == 1 && !iwv_cq_overrun(cq2));
	struct iwv_srq_init_attr sa = {.max_wr = 10, .max_sge = 2};
	OK(s, iwv_create_srq(pd, &sa, &srq));

	struct iwv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq2,
				      .cap = {.max_send_wr = 5, .max_recv_wr = 3, .max_send_sge = 2, .max_recv_sge = 2, .max_inline = 64}};
	qa.qp_type = IWV_QPT_UD;
	OK(s, iwv_create_qp(pd, &qa, &ud));
	struct iwv_qp_cap cap;
	iwv_qp_cap(ud, &cap);
	CHECK(cap.max_send_wr == 8 && cap.max_recv_wr == 4);
	CHECK(iwv_qp_type(ud) == IWV_QPT_UD && iwv_qp_addr(ud)[0] != 0);
	struct iwv_av av;
	OK(s, iwv_qp_av(ud, &av));
	char txt[IWV_ADDR_STRLEN];
	OK(s, iwv_av_format(&av, txt, sizeof txt));
	CHECK(strcmp(txt, iwv_qp_addr(ud)) == 0);
	CHECK(iwv_qp_qkey(ud) != 0 && av.qkey == iwv_qp_qkey(ud));
	qa.qp_type = IWV_QPT_RD;
	qa.qkey = 0x1234abcd;
	OK(s, iwv_create_qp(pd, &qa, &rd));
	CHECK(iwv_qp_qkey(rd) == 0x1234abcd);
	qa.qkey = 0;
	qa.qp_type = IWV_QPT_RC;
	OK(s, iwv_create_qp(pd, &qa, &rc));
	FAILS(s, EINVAL, iwv_qp_av(rc, &av));
	qa.qp_type = IWV_QPT_UD;
	qa.srq = srq;
	OK(s, iwv_create_qp(pd, &qa, &srqqp));

	struct iwv_qp_attr at;
	OK(s, iwv_query_qp(ud, &at));
	CHECK(at.state == IWV_QPS_RESET && at.qp_type == IWV_QPT_UD && at.qp_num == iwv_qp_num(ud));
	CHECK(strcmp(at.addr, iwv_qp_addr(ud)) == 0 && at.cap.max_send_wr == 8);
	OK(s, iwv_modify_qp_qkey(ud, IWV_QPS_INIT, 0x55aa55aa));
	CHECK(iwv_qp_qkey(ud) == 0x55aa55aa);
	OK(s, iwv_modify_qp(ud, IWV_QPS_RTR));
	OK(s, iwv_modify_qp(ud, IWV_QPS_RTS));
	OK(s, iwv_query_qp(ud, &at));
	CHECK(at.state == IWV_QPS_RTS && at.qkey == 0x55aa55aa);
	OK(s, iwv_listen(s, ":0", 0, &l));
	CHECK(strchr(iwv_listener_addr(l), ':') && strcmp(strrchr(iwv_listener_addr(l), ':'), ":0") != 0);

	/* In use: the daemon refuses. */
	FAILS(s, EBUSY, iwv_dealloc_pd(pd));
	FAILS(s, EBUSY, iwv_destroy_cq(cq));
	FAILS(s, EBUSY, iwv_destroy_comp_channel(ch));
	FAILS(s, EBUSY, iwv_destroy_srq(srq));
	printf("busy: %s\n", iwv_last_error(s));

	OK(s, iwv_listener_close(l));
	OK(s, iwv_destroy_qp(srqqp));
	OK(s, iwv_destroy_qp(rc));
	OK(s, iwv_destroy_qp(rd));
	OK(s, iwv_destroy_qp(ud));
	OK(s, iwv_destroy_srq(srq));
	OK(s, iwv_destroy_cq(cq));
	OK(s, iwv_destroy_cq(cq2));
	OK(s, iwv_destroy_comp_channel(ch));
	OK(s, iwv_dereg_mr(mr));
	OK(s, iwv_dereg_mr(mr2));
	OK(s, iwv_free_buffer(buf));
	OK(s, iwv_dealloc_pd(pd));

	/* Objects left behind are released by iwv_close (ASan checks leaks). */
	OK(s, iwv_alloc_pd(s, &pd));
	OK(s, iwv_create_cq(s, 4, NULL, &cq));
	OK(s, iwv_alloc_buffer(s, 4096, &buf));
	qa.srq = NULL;
	qa.send_cq = qa.recv_cq = cq;
	OK(s, iwv_create_qp(pd, &qa, &ud));
	iwv_close(s);
	printf("objects ok\n");
}

/* fork_child: a child forked after iwv_open that does not touch the
 * parent's session can open its own; the parent's goes on. */
static void fork_child(void)
{
	struct iwv_session *s = open_session(sock_a(), "t_session-parent");
	struct iwv_device_attr da;
	OK(s, iwv_query_device(s, &da));
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		struct iwv_session *c;
		struct iwv_open_attr a = {.socket = sock_a(), .client_name = "t_session-child"};
		if (iwv_open(&a, &c) < 0 || iwv_query_device(c, &da) < 0 || iwv_session_id(c) == iwv_session_id(s))
			_exit(3);
		iwv_close(c);
		_exit(0);
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	OK(s, iwv_query_device(s, &da));
	struct iwv_pd *pd;
	OK(s, iwv_alloc_pd(s, &pd));
	OK(s, iwv_dealloc_pd(pd));
	iwv_close(s);
	printf("fork ok\n");
}

int main(void)
{
	default_socket();
	hello();
	objects();
	fork_child();
	printf("PASS\n");
	return 0;
}
