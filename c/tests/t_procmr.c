/*
 * t_procmr — memory the application owns (heap, stack, static), registered
 * with iwv_reg_mr outside any iwv_alloc_buffer buffer (the process form of
 * proto.RegMRRequest: the daemon reaches it through /proc/self/mem):
 * UD send from the heap into the stack, RC RDMA Write into static memory
 * and RDMA Read from the heap of the peer; heap pages adopted into a memfd
 * in place (iwv_adopt_buffer) as the target of an RD FetchAdd. Run by
 * test/cclient (TestProcessMR).
 */
#include "testlib.h"

#include <stdint.h>

static char static_target[20000];

static void cm_wait(struct iwv_session *s, struct iwv_cm_event *ev, enum iwv_cm_event_type want)
{
	OK(s, iwv_cm_get_event(s, ev, scaled_ms(20000)));
	CHECK(ev->type == want);
}

static void ud(void)
{
	struct ep a, b;
	struct iwv_wc wc;
	struct iwv_mr *smr, *rmr;
	ep_open(&a, sock_a(), "procmr-a", IWV_QPT_UD, 4096);
	ep_open(&b, sock_b(), "procmr-b", IWV_QPT_UD, 4096);
	char *heap = malloc(3000);
	char stack[3000];
	CHECK(heap);
	for (int i = 0; i < 3000; i++)
		heap[i] = (char)(i * 11);
	memset(stack, 0, sizeof stack);
	OK(a.s, iwv_reg_mr(a.pd, heap, 3000, 0, &smr));
	OK(b.s, iwv_reg_mr(b.pd, stack, sizeof stack, IWV_ACCESS_LOCAL_WRITE, &rmr));
	CHECK(iwv_mr_is_process(smr) && iwv_mr_is_process(rmr));
	struct iwv_sge rs = {.addr = (uintptr_t)stack, .length = sizeof stack, .lkey = iwv_mr_lkey(rmr)};
	struct iwv_recv_wr rw = {.wr_id = 1, .num_sge = 1, .sg_list = &rs};
	CHECK(iwv_post_recv(b.qp, &rw, 1) == 1);
	struct iwv_av dst;
	OK(a.s, iwv_qp_av(b.qp, &dst));
	struct iwv_sge ss = {.addr = (uintptr_t)heap, .length = 3000, .lkey = iwv_mr_lkey(smr)};
	struct iwv_send_wr sw = {.wr_id = 2, .flags = IWV_SEND_SIGNALED, .num_sge = 1, .sg_list = &ss, .av = &dst};
	CHECK(iwv_post_send(a.qp, &sw, 1) == 1);
	wait_wc(a.s, a.scq, &wc);
	CHECK(wc.wr_id == 2 && wc.status == IWV_WC_SUCCESS);
	wait_wc(b.s, b.rcq, &wc);
	CHECK(wc.wr_id == 1 && wc.status == IWV_WC_SUCCESS && wc.byte_len == 3000);
	CHECK(memcmp(stack, heap, 3000) == 0);
	OK(a.s, iwv_dereg_mr(smr));
	OK(b.s, iwv_dereg_mr(rmr));
	free(heap);
	ep_close(&a);
	ep_close(&b);
	printf("UD heap -> stack ok\n");
}

static void rc(void)
{
	struct ep a, b;
	struct iwv_cm_event ev;
	struct iwv_listener *l;
	struct iwv_wc wc;
	struct iwv_mr *amr, *tmr, *hmr;
	ep_open(&a, sock_a(), "procmr-a", IWV_QPT_RC, 4096);
	ep_open(&b, sock_b(), "procmr-b", IWV_QPT_RC, 4096);
	OK(b.s, iwv_listen(b.s, ":0", 0, &l));
	OK(a.s, iwv_connect(a.qp, iwv_listener_addr(l), NULL));
	cm_wait(b.s, &ev, IWV_CM_CONNECT_REQUEST);
	OK(b.s, iwv_accept(b.s, ev.conn_id, b.qp, NULL, NULL));
	cm_wait(a.s, &ev, IWV_CM_ESTABLISHED);

	char *src = malloc(20000), *heap = malloc(10000);
	CHECK(src && heap);
	for (int i = 0; i < 20000; i++)
		src[i] = (char)(i * 5 + 3);
	for (int i = 0; i < 10000; i++)
		heap[i] = (char)(i ^ 0x33);
	OK(a.s, iwv_reg_mr(a.pd, src, 20000, IWV_ACCESS_LOCAL_WRITE, &amr));
	OK(b.s, iwv_reg_mr(b.pd, static_target, sizeof static_target, IWV_ACCESS_LOCAL_WRITE | IWV_ACCESS_REMOTE_WRITE, &tmr));
	OK(b.s, iwv_reg_mr(b.pd, heap, 10000, IWV_ACCESS_REMOTE_READ, &hmr));
	struct iwv_sge g = {.addr = (uintptr_t)src, .length = 20000, .lkey = iwv_mr_lkey(amr)};
	struct iwv_send_wr w = {.wr_id = 1, .opcode = IWV_WR_RDMA_WRITE, .flags = IWV_SEND_SIGNALED, .num_sge = 1,
				.sg_list = &g, .remote_addr = (uintptr_t)static_target, .rkey = iwv_mr_rkey(tmr)};
	CHECK(iwv_post_send(a.qp, &w, 1) == 1);
	wait_wc(a.s, a.scq, &wc);
	CHECK(wc.wr_id == 1 && wc.status == IWV_WC_SUCCESS);
	/* The Write completed when sent; a Read behind it returns after it landed. */
	g = (struct iwv_sge){.addr = (uintptr_t)src, .length = 10000, .lkey = iwv_mr_lkey(amr)};
	w = (struct iwv_send_wr){.wr_id = 2, .opcode = IWV_WR_RDMA_READ, .flags = IWV_SEND_SIGNALED, .num_sge = 1,
				 .sg_list = &g, .remote_addr = (uintptr_t)heap, .rkey = iwv_mr_rkey(hmr)};
	char copy[20000];
	memcpy(copy, src, sizeof copy);
	CHECK(iwv_post_send(a.qp, &w, 1) == 1);
	wait_wc(a.s, a.scq, &wc);
	CHECK(wc.wr_id == 2 && wc.status == IWV_WC_SUCCESS && wc.byte_len == 10000);
	CHECK(memcmp(static_target, copy, 20000) == 0);
	CHECK(memcmp(src, heap, 10000) == 0);
	OK(a.s, iwv_dereg_mr(amr));
	OK(b.s, iwv_dereg_mr(tmr));
	OK(b.s, iwv_dereg_mr(hmr));
	free(src);
	free(heap);
	OK(b.s, iwv_listener_close(l));
	ep_close(&a);
	ep_close(&b);
	printf("RC write into static, read from heap ok\n");
}

/* Pages of the heap adopted into a memfd in place (iwv_adopt_buffer): the
 * contents survive both ways, and the region takes remote atomics (RD
 * FetchAdd), which process memory refuses. */
static void adopt(void)
{
	struct ep a, b;
	struct iwv_wc wc;
	struct iwv_mr *mr;
	struct iwv_buffer *buf;
	const size_t len = 2 * 4096;
	uint64_t *mem;
	ep_open(&a, sock_a(), "adopt-a", IWV_QPT_RD, 4096);
	ep_open(&b, sock_b(), "adopt-b", IWV_QPT_RD, 4096);
	CHECK(posix_memalign((void **)&mem, 4096, len) == 0);
	for (size_t i = 0; i < len / 8; i++)
		mem[i] = 0x1000 + i;
	const int acc = IWV_ACCESS_LOCAL_WRITE | IWV_ACCESS_REMOTE_WRITE | IWV_ACCESS_REMOTE_ATOMIC;
	CHECK(iwv_reg_mr(b.pd, &mem[3], 8, acc, &mr) == -EOPNOTSUPP);
	CHECK(iwv_adopt_buffer(b.s, (char *)mem + 8, len, &buf) == -EINVAL); /* not page-aligned */
	OK(b.s, iwv_adopt_buffer(b.s, mem, len, &buf));
	for (size_t i = 0; i < len / 8; i++)
		CHECK(mem[i] == 0x1000 + i);
	OK(b.s, iwv_reg_mr(b.pd, &mem[3], 8, acc, &mr));
	CHECK(!iwv_mr_is_process(mr));
	struct iwv_av dst;
	OK(a.s, iwv_qp_av(b.qp, &dst));
	struct iwv_sge res = sge_of(&a, 0, 8);
	struct iwv_send_wr w = {.wr_id = 7, .opcode = IWV_WR_ATOMIC_FETCH_AND_ADD, .flags = IWV_SEND_SIGNALED,
				.num_sge = 1, .sg_list = &res, .av = &dst, .remote_addr = (uintptr_t)&mem[3],
				.rkey = iwv_mr_rkey(mr), .compare_add = 100};
	CHECK(iwv_post_send(a.qp, &w, 1) == 1);
	wait_wc(a.s, a.scq, &wc);
	CHECK(wc.wr_id == 7 && wc.status == IWV_WC_SUCCESS);
	uint64_t orig;
	memcpy(&orig, (char *)iwv_buffer_addr(a.buf), 8);
	CHECK(orig == 0x1003);
	CHECK(__atomic_load_n(&mem[3], __ATOMIC_SEQ_CST) == 0x1003 + 100);
	OK(b.s, iwv_dereg_mr(mr));
	OK(b.s, iwv_free_buffer(buf)); /* private pages again, same contents */
	CHECK(mem[3] == 0x1003 + 100 && mem[0] == 0x1000 && mem[len / 8 - 1] == 0x1000 + len / 8 - 1);
	mem[5] = 42;
	CHECK(mem[5] == 42);
	free(mem);
	ep_close(&a);
	ep_close(&b);
	printf("RD FetchAdd into adopted heap pages ok\n");
}

int main(void)
{
	ud();
	rc();
	adopt();
	printf("PASS\n");
	return 0;
}
