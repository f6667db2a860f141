/*
 * t_fastpath.c — drives the fast-path codec (c/core/fastpath.h) for
 * test/fastpath, which checks every answer against the Go encoders and
 * decoders (llp/dgram, ddp, rdmap). One command per line on stdin, one
 * answer line per command on stdout (numbers decimal, octets hex, "-"
 * for none):
 *
 *   crc HEX                         -> TABLE HW|- DISPATCH      (%08x)
 *   send RD QKEY SRCQKEY MSN MO IMM SOLICITED HASIMM LAST CRC
 *        FLAGS WINDOW INC ECHOED SEQ CUMACK SACK PAYLOAD
 *                                   -> FLAT IOVCNT IOV          (iov concatenated)
 *   ack QKEY SRCQKEY FLAGS WINDOW INC ECHOED SEQ CUMACK SACK CRC -> HEX
 *   rd QKEY CRC PEER OURINC PEERINC RCVNEXT SNDUNA SNDNEXT HEX -> fields (put_rx)
 *   ud QKEY CRC HEX                 -> fields
 *   maxpayload SIZE RD IMM          -> N
 *   fuzz ITERATIONS SEED            -> ok COUNTS...  (bounded random input)
 *   bench ITERATIONS                -> ns per encode+CRC / parse of an 8 B Send
 *
 * Built by the c/Makefile with the other C tests (so make c-asan runs it
 * through ASan/UBSan's compiler) and by test/fastpath with
 * -fsanitize=address,undefined from c/core/fastpath*.c directly.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/fastpath.h"
#include "../core/fastpath_wrec.h"
#include "../core/fastpath_req.h"

static char *next_tok(char **s)
{
	char *t = strtok_r(NULL, " \t\n", s);
	if (!t) {
		fprintf(stderr, "t_fastpath: missing field\n");
		exit(2);
	}
	return t;
}

static uint32_t num(char **s)
{
	return (uint32_t)strtoul(next_tok(s), NULL, 0);
}

/* hex decodes t ("-" = empty) into a malloc'd buffer; *n its length. */
static uint8_t *unhex(const char *t, size_t *n)
{
	size_t l = strcmp(t, "-") == 0 ? 0 : strlen(t);
	uint8_t *b = malloc(l / 2 + 1);
	if (!b)
		exit(3);
	for (size_t i = 0; i + 1 < l; i += 2) {
		unsigned v;
		if (sscanf(t + i, "%2x", &v) != 1) {
			fprintf(stderr, "t_fastpath: bad hex\n");
			exit(2);
		}
		b[i / 2] = (uint8_t)v;
	}
	*n = l / 2;
	return b;
}

static void puthex(const uint8_t *b, size_t n)
{
	if (n == 0)
		fputs("-", stdout);
	for (size_t i = 0; i < n; i++)
		printf("%02x", b[i]);
}

static void put_rx(enum fp_class c, const struct fp_rx *x)
{
	printf("%d %s %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u\n", (int)c,
	       iwvi_fp_reason_name(x->reason), x->qkey, x->src_qkey, x->crc, x->has_rd, x->rd_version, x->rd.type,
	       x->rd.flags, x->rd.window, x->rd.inc, x->rd.echoed, x->rd.seq, x->rd.cum_ack, x->rd.sack, x->acked,
	       x->has_ddp, x->tagged, x->last, x->opcode, x->solicited, x->has_imm, x->qn, x->msn, x->mo, x->imm,
	       x->payload_off, x->payload_len);
}

/* wrec qkey src_qkey stag to_hi to_lo record_id crc flags window inc
 * echoed seq cum_ack sack payload: the rank's Write-Record datagram
 * (fastpath_wrec.h), the payload given as two iovec pieces. */
static void cmd_wrec(char **s)
{
	struct fp_wrec w = {0};
	struct fp_rd_hdr h = {0};
	w.qkey = num(s);
	w.src_qkey = num(s);
	w.stag = num(s);
	w.to = (uint64_t)num(s) << 32;
	w.to |= num(s);
	w.record_id = num(s);
	w.crc = (uint8_t)num(s);
	h.flags = (uint8_t)num(s);
	h.window = (uint16_t)num(s);
	h.inc = num(s);
	h.echoed = num(s);
	h.seq = num(s);
	h.cum_ack = num(s);
	h.sack = num(s);
	size_t n;
	uint8_t *p = unhex(next_tok(s), &n);
	struct iovec iov[2] = {{p, n / 3}, {p + n / 3, n - n / 3}};
	size_t cap = FP_KEYS_LEN + FP_RD_HDR_LEN + FP_WREC_BODY_HDR + n + FP_CRC_LEN;
	uint8_t *flat = malloc(cap);
	if (!flat)
		exit(3);
	memset(flat, 0xaa, cap);
	if (iwvi_fp_wrec_build(flat, cap - 1, &w, &h, iov, 2, n) != -ENOBUFS || flat[0] != 0xaa) {
		printf("error short buffer accepted\n");
	} else {
		ssize_t l = iwvi_fp_wrec_build(flat, cap, &w, &h, iov, 2, n);
		if (l < 0)
			printf("error %zd\n", l);
		else {
			puthex(flat, (size_t)l);
			putchar('\n');
		}
	}
	free(flat);
	free(p);
}

/* req qkey src_qkey crc flags window inc echoed seq cum_ack sack opcode msn
 * a..k: the rank's Read Request (opcode 1: sink_stag sink_to_hi sink_to_lo
 * size src_stag src_to_hi src_to_lo) or Atomic Request (opcode 10: op
 * req_id stag to_hi to_lo add_hi add_lo addmask_hi addmask_lo cmp_hi
 * cmp_lo cmpmask_hi cmpmask_lo) datagram (fastpath_req.h). */
static void cmd_req(char **s)
{
	struct fp_rd_hdr h = {0};
	struct fp_req q = {0};
	uint32_t qkey = num(s), src_qkey = num(s);
	int crc = (int)num(s);
	h.flags = (uint8_t)num(s);
	h.window = (uint16_t)num(s);
	h.inc = num(s);
	h.echoed = num(s);
	h.seq = num(s);
	h.cum_ack = num(s);
	h.sack = num(s);
	q.opcode = (uint8_t)num(s);
	q.msn = num(s);
	if (q.opcode == FP_OP_READ_REQUEST) {
		q.sink_stag = num(s);
		q.sink_to = (uint64_t)num(s) << 32;
		q.sink_to |= num(s);
		q.size = num(s);
		q.src_stag = num(s);
		q.src_to = (uint64_t)num(s) << 32;
		q.src_to |= num(s);
	} else {
		q.atomic_op = (uint8_t)num(s);
		q.req_id = num(s);
		q.stag = num(s);
		uint64_t *w[] = {&q.to, &q.add_swap, &q.add_swap_mask, &q.compare, &q.compare_mask};
		for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) {
			*w[i] = (uint64_t)num(s) << 32;
			*w[i] |= num(s);
		}
	}
	uint8_t b[FP_KEYS_LEN + FP_RD_HDR_LEN + FP_REQ_MAX_BODY + FP_CRC_LEN + 1];
	memset(b, 0xaa, sizeof b);
	ssize_t want = (ssize_t)(FP_KEYS_LEN + FP_RD_HDR_LEN + FP_DDP_UNTAGGED_LEN + FP_CRC_LEN) +
		       (q.opcode == FP_OP_READ_REQUEST ? FP_READ_REQ_LEN : FP_ATOMIC_REQ_LEN);
	if (iwvi_fp_req_build(b, (size_t)want - 1, qkey, src_qkey, &h, &q, crc) != -ENOBUFS || b[0] != 0xaa) {
		printf("error short buffer accepted\n");
		return;
	}
	ssize_t l = iwvi_fp_req_build(b, sizeof b, qkey, src_qkey, &h, &q, crc);
	if (l != want) {
		printf("error length %zd, want %zd\n", l, want);
		return;
	}
	puthex(b, (size_t)l);
	putchar('\n');
}

static void cmd_crc(char **s)
{
	size_t n;
	uint8_t *b = unhex(next_tok(s), &n);
	printf("%08x ", iwvi_fp_crc32c_table(0, b, n));
	if (iwvi_fp_crc32c_has_hw())
		printf("%08x ", iwvi_fp_crc32c_hw(0, b, n));
	else
		printf("- ");
	/* Incremental: two pieces give the CRC of the whole. */
	uint32_t c = iwvi_fp_crc32c(iwvi_fp_crc32c(0, b, n / 3), b + n / 3, n - n / 3);
	printf("%08x\n", c);
	free(b);
}

static void cmd_send(char **s)
{
	struct fp_send f = {0};
	struct fp_rd_hdr h = {0};
	int rd = (int)num(s);
	f.qkey = num(s);
	f.src_qkey = num(s);
	f.msn = num(s);
	f.mo = num(s);
	f.imm = num(s);
	f.solicited = (uint8_t)num(s);
	f.has_imm = (uint8_t)num(s);
	f.last = (uint8_t)num(s);
	f.crc = (uint8_t)num(s);
	h.flags = (uint8_t)num(s);
	h.window = (uint16_t)num(s);
	h.inc = num(s);
	h.echoed = num(s);
	h.seq = num(s);
	h.cum_ack = num(s);
	h.sack = num(s);
	h.type = FP_RD_ACK; /* ignored: built as DATA */
	size_t n;
	uint8_t *p = unhex(next_tok(s), &n);
	size_t cap = FP_MAX_HDR + n + FP_CRC_LEN;
	uint8_t *flat = malloc(cap);
	if (!flat)
		exit(3);
	ssize_t l = iwvi_fp_send_build(flat, cap, &f, rd ? &h : NULL, p, n);
	struct fp_dgram d;
	int e = iwvi_fp_send_iov(&d, &f, rd ? &h : NULL, p, n);
	if (l < 0 || e != 0) {
		printf("error %zd %d\n", l, e);
		goto out;
	}
	/* A buffer one octet short is refused and left alone. */
	memset(flat, 0xaa, cap);
	if (iwvi_fp_send_build(flat, (size_t)l - 1, &f, rd ? &h : NULL, p, n) != -ENOBUFS || flat[0] != 0xaa) {
		printf("error short buffer accepted\n");
		goto out;
	}
	iwvi_fp_send_build(flat, cap, &f, rd ? &h : NULL, p, n);
	puthex(flat, (size_t)l);
	printf(" %d ", d.iovcnt);
	size_t tot = 0;
	for (int i = 0; i < d.iovcnt; i++) {
		if (d.iov[i].iov_len == 0) {
			printf("empty-iov");
			continue;
		}
		puthex(d.iov[i].iov_base, d.iov[i].iov_len);
		tot += d.iov[i].iov_len;
	}
	if (tot != d.len)
		printf(" len-mismatch %zu %zu", tot, d.len);
	if (n > 0 && d.iov[1].iov_base != p)
		printf(" payload-copied");
	printf("\n");
out:
	free(flat);
	free(p);
}

static void cmd_ack(char **s)
{
	struct fp_rd_hdr h = {0};
	uint32_t qkey = num(s), src = num(s);
	h.flags = (uint8_t)num(s);
	h.window = (uint16_t)num(s);
	h.inc = num(s);
	h.echoed = num(s);
	h.seq = num(s);
	h.cum_ack = num(s);
	h.sack = num(s);
	int crc = (int)num(s);
	uint8_t b[FP_RD_ACK_LEN];
	if (iwvi_fp_rd_ack_build(b, sizeof b - 1, qkey, src, &h, crc) != -ENOBUFS) {
		printf("error short buffer accepted\n");
		return;
	}
	ssize_t l = iwvi_fp_rd_ack_build(b, sizeof b, qkey, src, &h, crc);
	if (l != FP_RD_ACK_LEN) {
		printf("error %zd\n", l);
		return;
	}
	puthex(b, (size_t)l);
	printf("\n");
}

/* parse copies the datagram into a buffer of exactly its size, so that
 * ASan sees any read past it. */
static void cmd_parse(char **s, int rd)
{
	struct fp_rx_qp qp = {0};
	struct fp_rd_peer peer = {0};
	qp.qkey = num(s);
	qp.crc = (uint8_t)num(s);
	int have = 0;
	if (rd) {
		have = (int)num(s);
		peer.our_inc = num(s);
		peer.peer_inc = num(s);
		peer.rcv_next = num(s);
		peer.snd_una = num(s);
		peer.snd_next = num(s);
	}
	size_t n;
	uint8_t *b = unhex(next_tok(s), &n);
	uint8_t *exact = malloc(n ? n : 1);
	if (!exact)
		exit(3);
	memcpy(exact, b, n);
	struct fp_rx x;
	enum fp_class c = rd ? iwvi_fp_rd_classify(exact, n, &qp, have ? &peer : NULL, &x)
			     : iwvi_fp_ud_classify(exact, n, &qp, &x);
	put_rx(c, &x);
	free(exact);
	free(b);
}

/* xorshift64*: deterministic, seeded by the Go test. */
static uint64_t rng;

static uint64_t rnd(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 2685821657736338717ull;
}

/* check_rx asserts what must hold whatever the input: a Send's payload
 * lies inside the datagram, before its trailer; a non-daemon class has no
 * reason; the reason is named. */
static void check_rx(enum fp_class c, const struct fp_rx *x, size_t n)
{
	if (x->reason >= FP_R_COUNT || (c != FP_CLASS_DAEMON && x->reason != FP_R_NONE) ||
	    (c == FP_CLASS_DAEMON && x->reason == FP_R_NONE)) {
		printf("error class %d reason %d\n", (int)c, (int)x->reason);
		exit(1);
	}
	if (c == FP_CLASS_SEND &&
	    ((size_t)x->payload_off + x->payload_len + FP_CRC_LEN != n || x->payload_off > n)) {
		printf("error payload %u+%u in %zu\n", x->payload_off, x->payload_len, n);
		exit(1);
	}
}

static void cmd_fuzz(char **s)
{
	unsigned long iters = num(s);
	rng = num(s) | 1;
	unsigned long counts[3][FP_R_COUNT] = {{0}};
	uint8_t seed[128];
	struct fp_send f = {.qkey = 0x11223344, .src_qkey = 5, .msn = 1, .last = 1, .crc = 1};
	struct fp_rd_hdr h = {.flags = FP_RDF_EXTSACK | FP_RDF_ACK, .window = 64, .inc = 7, .echoed = 9, .seq = 3,
			      .cum_ack = 2};
	struct fp_rd_peer peer = {.our_inc = 9, .peer_inc = 7, .rcv_next = 3, .snd_una = 1, .snd_next = 4};
	struct fp_rx_qp qp = {.qkey = 0x11223344, .crc = 1};
	for (unsigned long i = 0; i < iters; i++) {
		size_t n;
		uint8_t *b;
		uint64_t mode = rnd() % 4;
		if (mode == 0) { /* random bytes, random size */
			n = rnd() % 96;
			b = malloc(n ? n : 1);
			for (size_t k = 0; k < n; k++)
				b[k] = (uint8_t)rnd();
		} else { /* a valid datagram, mutated and cut */
			f.has_imm = rnd() & 1;
			uint8_t pl[16];
			size_t pn = rnd() % sizeof pl;
			for (size_t k = 0; k < pn; k++)
				pl[k] = (uint8_t)rnd();
			ssize_t l = mode == 3 ? iwvi_fp_rd_ack_build(seed, sizeof seed, qp.qkey, 5, &h, 1)
					      : iwvi_fp_send_build(seed, sizeof seed, &f, mode == 1 ? &h : NULL, pl, pn);
			if (l < 0) {
				printf("error build %zd\n", l);
				exit(1);
			}
			n = (size_t)l;
			for (uint64_t k = rnd() % 4; k > 0; k--)
				seed[rnd() % n] ^= (uint8_t)(1u << (rnd() % 8));
			if (rnd() % 4 == 0)
				n = rnd() % (n + 1);
			b = malloc(n ? n : 1);
			memcpy(b, seed, n);
		}
		struct fp_rx x;
		qp.crc = rnd() % 8 != 0; /* mostly on; off lets mutations past the CRC */
		enum fp_class c = iwvi_fp_rd_classify(b, n, &qp, rnd() & 1 ? &peer : NULL, &x);
		check_rx(c, &x, n);
		counts[c][x.reason]++;
		c = iwvi_fp_ud_classify(b, n, &qp, &x);
		check_rx(c, &x, n);
		counts[c][x.reason]++;
		free(b);
	}
	printf("ok send %lu ack %lu", counts[FP_CLASS_SEND][0], counts[FP_CLASS_ACK][0]);
	for (int r = 1; r < FP_R_COUNT; r++)
		printf(" %s %lu", iwvi_fp_reason_name((enum fp_reason)r), counts[FP_CLASS_DAEMON][r]);
	printf("\n");
}

static double now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* cmd_bench: an 8 B RD Send, as the rank would build it for sendmsg
 * (headers + CRC over headers and payload, iovec) and parse it (CRC check,
 * headers, classification). Prints figures, asserts nothing about time. */
static void cmd_bench(char **s)
{
	unsigned long iters = num(s);
	uint8_t payload[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	struct fp_send f = {.qkey = 0x8b3a5c21, .src_qkey = 0x42f0e17d, .msn = 1, .last = 1, .crc = 1};
	struct fp_rd_hdr h = {.flags = FP_RDF_EXTSACK | FP_RDF_ACK, .window = 128, .inc = 7, .echoed = 9, .seq = 1,
			      .cum_ack = 1};
	struct fp_rd_peer peer = {.our_inc = 9, .peer_inc = 7, .rcv_next = 1, .snd_una = 1, .snd_next = 1};
	struct fp_rx_qp qp = {.qkey = 0x8b3a5c21, .crc = 1};
	struct fp_dgram d;
	volatile uint32_t sink = 0;
	double t0 = now_ns();
	for (unsigned long i = 0; i < iters; i++) {
		f.msn = (uint32_t)i;
		h.seq = (uint32_t)i;
		iwvi_fp_send_iov(&d, &f, &h, payload, sizeof payload);
		sink += d.trailer[0];
	}
	double t1 = now_ns();
	uint8_t flat[FP_MAX_HDR + 8 + FP_CRC_LEN];
	ssize_t l = iwvi_fp_send_build(flat, sizeof flat, &f, &h, payload, sizeof payload);
	peer.rcv_next = h.seq;
	struct fp_rx x;
	unsigned long sends = 0;
	double t2 = now_ns();
	for (unsigned long i = 0; i < iters; i++)
		sends += iwvi_fp_rd_classify(flat, (size_t)l, &qp, &peer, &x) == FP_CLASS_SEND;
	double t3 = now_ns();
	struct fp_rx_qp ud = {.qkey = 0x8b3a5c21, .crc = 1};
	ssize_t lu = iwvi_fp_send_build(flat, sizeof flat, &f, NULL, payload, sizeof payload);
	double t4 = now_ns();
	for (unsigned long i = 0; i < iters; i++)
		sends += iwvi_fp_ud_classify(flat, (size_t)lu, &ud, &x) == FP_CLASS_SEND;
	double t5 = now_ns();
	for (unsigned long i = 0; i < iters; i++)
		sink += iwvi_fp_crc32c_table((uint32_t)i, flat, (size_t)l);
	double t6 = now_ns();
	for (unsigned long i = 0; i < iters; i++)
		sink += iwvi_fp_crc32c((uint32_t)i, flat, (size_t)l);
	double t7 = now_ns();
	printf("rd-send-%zd-octets encode+crc %.1f ns, rd parse+crc+classify %.1f ns, ud-send-%zd-octets parse %.1f ns, "
	       "crc of %zd octets: table %.1f ns, dispatch (%s) %.1f ns (sends %lu of %lu, sink %u)\n",
	       l, (t1 - t0) / (double)iters, (t3 - t2) / (double)iters, lu, (t5 - t4) / (double)iters, l,
	       (t6 - t5) / (double)iters, iwvi_fp_crc32c_has_hw() ? "sse4.2" : "table", (t7 - t6) / (double)iters, sends,
	       2 * iters, sink);
}

int main(void)
{
	char *line = NULL;
	size_t cap = 0;
	while (getline(&line, &cap, stdin) > 0) {
		char *save = NULL;
		char *cmd = strtok_r(line, " \t\n", &save);
		if (!cmd)
			continue;
		if (strcmp(cmd, "crc") == 0)
			cmd_crc(&save);
		else if (strcmp(cmd, "send") == 0)
			cmd_send(&save);
		else if (strcmp(cmd, "wrec") == 0)
			cmd_wrec(&save);
		else if (strcmp(cmd, "req") == 0)
			cmd_req(&save);
		else if (strcmp(cmd, "ack") == 0)
			cmd_ack(&save);
		else if (strcmp(cmd, "rd") == 0)
			cmd_parse(&save, 1);
		else if (strcmp(cmd, "ud") == 0)
			cmd_parse(&save, 0);
		else if (strcmp(cmd, "maxpayload") == 0) {
			uint32_t size = num(&save), rd = num(&save), imm = num(&save);
			printf("%zu\n", iwvi_fp_max_payload(size, (int)rd, (int)imm));
		} else if (strcmp(cmd, "fuzz") == 0)
			cmd_fuzz(&save);
		else if (strcmp(cmd, "bench") == 0)
			cmd_bench(&save);
		else {
			fprintf(stderr, "t_fastpath: unknown command %s\n", cmd);
			return 2;
		}
		fflush(stdout);
	}
	free(line);
	return 0;
}
