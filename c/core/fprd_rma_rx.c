/*
 * fprd_rma_rx.c — the rank serving RDMA at the target of an RD QP's fast
 * path (fprd_rma_rx.h; the daemon's side of the same messages:
 * verbsd/rd/recv.go deliver, wrec_rd.go, atomic.go; the wire:
 * docs/wire-format.md §4, §7, §8).
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "fprd_rma_rx.h"
#include "fprd_req.h"

/* Sizes of the RDMAP headers after the DDP header (RFC 5040 §4.4, RFC
 * 7306 §5.1–5.2, wire-format.md §8). */
#define WREC_HDR_LEN 12
#define READ_REQ_LEN 28
#define ATOMIC_REQ_LEN 52
#define ATOMIC_RESP_LEN 12
#define ATOMIC_LEN 8

/* RFC 7306 operation codes. */
#define ATOMIC_FETCH_ADD 0
#define ATOMIC_SWAP 1
#define ATOMIC_CMP_SWAP 2

/* RDMAP queue numbers of untagged messages (RFC 5040 §5.1, RFC 7306). */
#define QN_READ_REQUEST 1
#define QN_ATOMIC_RESPONSE 3

static inline uint32_t get32(const uint8_t *b)
{
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

static inline uint64_t get64(const uint8_t *b)
{
	return (uint64_t)get32(b) << 32 | get32(b + 4);
}

static inline uint8_t *put32(uint8_t *b, uint32_t v)
{
	b[0] = (uint8_t)(v >> 24);
	b[1] = (uint8_t)(v >> 16);
	b[2] = (uint8_t)(v >> 8);
	b[3] = (uint8_t)v;
	return b + 4;
}

static inline uint8_t *put64(uint8_t *b, uint64_t v)
{
	return put32(put32(b, (uint32_t)(v >> 32)), (uint32_t)v);
}

static uint8_t *slot_base(const struct iwvi_fp_rd *r, int i)
{
	return r->own.page + W_OFF_FP_RD_SLOTS + (size_t)i * W_FP_RD_SLOT_LEN;
}

static uint32_t ld32(const uint8_t *s, size_t off)
{
	return __atomic_load_n((const uint32_t *)(const void *)(s + off), __ATOMIC_RELAXED);
}

static void st32(uint8_t *s, size_t off, uint32_t v)
{
	__atomic_store_n((uint32_t *)(void *)(s + off), v, __ATOMIC_RELAXED);
}

static void st64(uint8_t *s, size_t off, int64_t v)
{
	__atomic_store_n((int64_t *)(void *)(s + off), v, __ATOMIC_RELAXED);
}

/* can_send reports whether the rank may send one DATA datagram to slot s
 * now (fprd.c send_owned's rule: the send right, the ring, the window). */
static int can_send(const uint8_t *s)
{
	uint32_t state = ld32(s, W_OFF_FP_RD_STATE);
	if (!(state & W_FP_RD_VALID) || !(state & W_FP_RD_SEND))
		return 0;
	uint32_t next = ld32(s, W_OFF_FP_RD_NEXT_SEQ), n = ld32(s, W_OFF_FP_RD_OUT_N);
	uint32_t head = ld32(s, W_OFF_FP_RD_OUT_HEAD), limit = ld32(s, W_OFF_FP_RD_LIMIT);
	uint32_t inflight = ld32(s, W_OFF_FP_RD_IN_FLIGHT);
	if (inflight > W_FP_RD_RING)
		inflight = W_FP_RD_RING;
	return !(n >= inflight || head >= W_FP_RD_RING || (n > 0 && !fp_seq_less(next, limit)));
}

/* send_body sends body[0, len) — a DDP segment: header, RDMAP header,
 * payload — as the next RD DATA datagram to slot's peer, the ACK of what
 * the rank took piggybacked, its copy in the outstanding ring first (as
 * fprd.c send_owned does for a Send). can_send was true. */
static void send_body(struct iwvi_fp_rd *r, int slot, const uint8_t *body, size_t len)
{
	uint8_t *s = slot_base(r, slot);
	uint32_t next = ld32(s, W_OFF_FP_RD_NEXT_SEQ), n = ld32(s, W_OFF_FP_RD_OUT_N);
	uint32_t head = ld32(s, W_OFF_FP_RD_OUT_HEAD), limit = ld32(s, W_OFF_FP_RD_LIMIT);
	uint32_t inflight = ld32(s, W_OFF_FP_RD_IN_FLIGHT);
	if (inflight > W_FP_RD_RING)
		inflight = W_FP_RD_RING;
	uint8_t flags = FP_RDF_EXTSACK;
	uint16_t window = 0;
	uint32_t cum = 0, echoed = ld32(s, W_OFF_FP_RD_PEER_INC);
	if ((ld32(s, W_OFF_FP_RD_STATE) & W_FP_RD_RECV) && echoed != 0) { /* fprd.c ack_fields */
		flags |= FP_RDF_ACK;
		window = w_get16(s + W_OFF_FP_RD_ADV_WND);
		cum = ld32(s, W_OFF_FP_RD_RCV_NEXT);
	}
	if (n + 1 >= inflight || !fp_seq_less(next + 1, limit))
		flags |= FP_RDF_ACKREQ; /* the window is now full: ask for an ACK at once */
	uint8_t d[FP_KEYS_LEN + FP_RD_HDR_LEN + W_FP_RD_COPY_LEN + FP_CRC_LEN];
	uint8_t *p = put32(d, ld32(s, W_OFF_FP_RD_QKEY));
	p = put32(p, r->qkey);
	p[0] = FP_RD_VERSION << 4 | FP_RD_DATA; /* dgram.RDHeader.Append */
	p[1] = flags;
	p[2] = (uint8_t)(window >> 8);
	p[3] = (uint8_t)window;
	p = put32(p + 4, ld32(s, W_OFF_FP_RD_OUR_INC));
	p = put32(p, echoed);
	p = put32(p, next);
	p = put32(p, cum);
	p = put32(p, 0);
	memcpy(p, body, len);
	p += len;
	uint32_t crc = r->crc ? iwvi_fp_crc32c(0, d, (size_t)(p - d)) : 0;
	p[0] = (uint8_t)crc; /* little-endian trailer (wire-format.md §1) */
	p[1] = (uint8_t)(crc >> 8);
	p[2] = (uint8_t)(crc >> 16);
	p[3] = (uint8_t)(crc >> 24);
	p += FP_CRC_LEN;
	uint32_t j = (head + n) % W_FP_RD_RING;
	memcpy(r->own.page + W_OFF_FP_RD_COPIES + ((size_t)slot * W_FP_RD_RING + j) * W_FP_RD_COPY_LEN, body, len);
	uint8_t *e = s + W_OFF_FP_RD_RING + (size_t)j * W_FP_RD_ENTRY_LEN;
	st32(e, W_OFF_FP_RD_ENTRY_SEQ, next);
	st32(e, W_OFF_FP_RD_ENTRY_LEN, (uint32_t)len);
	st64(e, W_OFF_FP_RD_ENTRY_SENT_AT, iwvi_now_ns());
	st32(s, W_OFF_FP_RD_NEXT_SEQ, next + 1);
	st32(s, W_OFF_FP_RD_OUT_N, n + 1);
	if (flags & FP_RDF_ACK) { /* the piggybacked ACK settles what was owed */
		st32(s, W_OFF_FP_RD_UNACKED, 0);
		st32(s, W_OFF_FP_RD_ACK_DUE, 0);
	}
	struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(w_get16(s + W_OFF_FP_RD_PORT))};
	memcpy(&to.sin_addr, s + W_OFF_FP_RD_ADDR + 12, 4);
	/* A datagram the kernel refuses is lost like one the network drops:
	 * the daemon retransmits the copy. */
	iwvi_fp_rd_flush(r); /* the queued Sends have the earlier numbers */
	(void)sendto(r->own.sock, d, (size_t)(p - d), MSG_DONTWAIT, (struct sockaddr *)&to, sizeof to);
	r->sent++;
}

/* region is the daemon's checkRemote (verbsd/rnic/remote.go) on the
 * rank's table (locked): the STag names a region of the session in qp's
 * PD with right need, [to, to+len) inside it without wrapping. Its
 * address in this process, or NULL (the daemon refuses it: its error). */
static uint8_t *region(const struct iwvi_fp_rd *r, uint32_t stag, uint64_t to, uint64_t len, int need)
{
	const struct iwvi_rkey_ent *m = iwvi_rkeys_find(&r->own.qp->s->rkeys, stag);
	if (!m || m->pd != r->own.qp->pd || !(m->access & (uint32_t)need))
		return NULL;
	if (len > 0 && len - 1 > UINT64_MAX - to)
		return NULL; /* TO wrap */
	if (to < m->addr || to - m->addr > m->len || len > m->len - (to - m->addr))
		return NULL;
	return (uint8_t *)(uintptr_t)to; /* registered at its own address (mr.c) */
}

/* What the rank will do with a request it accepted. */
struct plan {
	uint8_t kind;           /* 1 Write-Record, 2 Read, 3 atomic */
	uint8_t *mem;           /* target or source in the rank's memory */
	const uint8_t *payload; /* Write-Record */
	size_t len;             /* Write-Record, Read: octets */
	uint32_t sink_stag;     /* Read */
	uint64_t sink_to;
	uint8_t op;             /* atomic */
	uint32_t req_id;
	uint64_t add_swap, add_swap_mask, compare, compare_mask;
};

/* judge_tagged: a Write-Record segment seg[0, len) the rank places itself
 * (deliver's version checks, writeRecordRD, AcceptWriteRecord: one whole
 * segment of a record, MO 0, L, the payload its Message Length). */
static int judge_tagged(const struct iwvi_fp_rd *r, const uint8_t *seg, size_t len, struct plan *pl)
{
	if ((seg[0] & 0x03) != 1 || seg[1] >> 6 != 1)
		return 0; /* versions: the daemon's error message */
	if ((seg[1] & 0x0f) != FP_OP_WRITE_RECORD || !r->own.qp->quiet_records || !(seg[0] & 0x40))
		return 0; /* Read Response, with Immediate (a receive), not last */
	if (len < FP_DDP_TAGGED_LEN + WREC_HDR_LEN)
		return 0;
	uint32_t stag = get32(seg + 2);
	uint64_t to = get64(seg + 6);
	const uint8_t *w = seg + FP_DDP_TAGGED_LEN;
	uint32_t msg_len = get32(w + 4), mo = get32(w + 8);
	size_t n = len - FP_DDP_TAGGED_LEN - WREC_HDR_LEN;
	if (mo != 0 || n == 0 || msg_len != n)
		return 0; /* part of a larger record, or empty */
	pl->mem = region(r, stag, to, n, IWV_ACCESS_REMOTE_WRITE);
	if (!pl->mem)
		return 0;
	pl->kind = 1;
	pl->payload = w + WREC_HDR_LEN;
	pl->len = n;
	return 1;
}

/* judge_untagged: a Read Request or Atomic Request on QN 1, one whole
 * segment of its length (readRequest, RdAtomicRequest, AtomicTarget). */
static int judge_untagged(const struct iwvi_fp_rd *r, const uint8_t *seg, size_t len, const struct fp_rx *rx,
			  struct plan *pl)
{
	if (rx->qn != QN_READ_REQUEST || rx->mo != 0 || !rx->last)
		return 0;
	const uint8_t *q = seg + FP_DDP_UNTAGGED_LEN;
	if (rx->opcode == FP_OP_READ_REQUEST) {
		if (len != FP_DDP_UNTAGGED_LEN + READ_REQ_LEN)
			return 0;
		uint32_t size = get32(q + 12);
		/* One Read Response datagram, its copy at least W_FP_RD_MIN_BODY. */
		size_t max = r->max_payload + (FP_DDP_UNTAGGED_LEN - FP_DDP_TAGGED_LEN);
		if (size > max || FP_DDP_TAGGED_LEN + (size_t)size < W_FP_RD_MIN_BODY)
			return 0;
		pl->mem = region(r, get32(q + 16), get64(q + 20), size, IWV_ACCESS_REMOTE_READ);
		if (!pl->mem)
			return 0;
		pl->kind = 2;
		pl->len = size;
		pl->sink_stag = get32(q);
		pl->sink_to = get64(q + 4);
		return 1;
	}
	if (rx->opcode != FP_OP_ATOMIC_REQUEST || len != FP_DDP_UNTAGGED_LEN + ATOMIC_REQ_LEN)
		return 0;
	pl->op = q[3] & 0x0f;
	pl->req_id = get32(q + 4);
	uint32_t stag = get32(q + 8);
	uint64_t to = get64(q + 12);
	pl->add_swap = get64(q + 20);
	pl->add_swap_mask = get64(q + 28);
	pl->compare = get64(q + 36);
	pl->compare_mask = get64(q + 44);
	if (pl->op > ATOMIC_CMP_SWAP || (pl->op == ATOMIC_FETCH_ADD && pl->add_swap_mask != 0))
		return 0; /* reserved (the daemon's error), masked FetchAdd (the daemon's) */
	if (to % ATOMIC_LEN != 0)
		return 0;
	pl->mem = region(r, stag, to, ATOMIC_LEN, IWV_ACCESS_REMOTE_ATOMIC);
	if (!pl->mem)
		return 0;
	pl->kind = 3;
	return 1;
}

/* atomic executes pl on its 8 aligned octets (rnic.AtomicExecute,
 * rdmap.AtomicRequest.Apply) and returns the original value. */
static uint64_t atomic(const struct plan *pl)
{
	uint64_t *p = (uint64_t *)(void *)pl->mem;
	if (pl->op == ATOMIC_FETCH_ADD)
		return __atomic_fetch_add(p, pl->add_swap, __ATOMIC_SEQ_CST);
	uint64_t old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
	for (;;) {
		if (pl->op == ATOMIC_CMP_SWAP && ((old ^ pl->compare) & pl->compare_mask) != 0)
			return old;
		uint64_t v = (old & ~pl->add_swap_mask) | (pl->add_swap & pl->add_swap_mask);
		if (__atomic_compare_exchange_n(p, &old, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
			return old;
	}
}

int iwvi_fp_rd_rma_rx(struct iwvi_fp_rd *r, int slot, const uint8_t *b, size_t n, const struct fp_rx *rx)
{
	if (slot < 0 || slot >= W_FP_RD_SLOTS || rx->rd.type != FP_RD_DATA || !rx->has_ddp ||
	    (rx->reason != FP_R_TAGGED && rx->reason != FP_R_OPCODE) || n < FP_KEYS_LEN + FP_RD_HDR_LEN + FP_CRC_LEN)
		return 0;
	uint8_t *s = slot_base(r, slot);
	if (!(ld32(s, W_OFF_FP_RD_STATE) & W_FP_RD_RECV))
		return 0;
	const uint8_t *seg = b + FP_KEYS_LEN + FP_RD_HDR_LEN;
	size_t len = n - FP_KEYS_LEN - FP_RD_HDR_LEN - FP_CRC_LEN;
	/* The response of a request of the rank's own (fprd_req.h). */
	int got = iwvi_fp_rd_req_rx(r, slot, seg, len, rx);
	if (got < 0)
		return got;
	if (got > 0) {
		if (rx->acked)
			iwvi_fp_rd_apply_ack(s, &rx->rd);
		st32(s, W_OFF_FP_RD_RCV_NEXT, rx->rd.seq + 1);
		uint32_t u = ld32(s, W_OFF_FP_RD_UNACKED);
		st32(s, W_OFF_FP_RD_UNACKED, u < 0xffff ? u + 1 : u);
		st32(s, W_OFF_FP_RD_ACK_DUE, 1);
		return 1;
	}
	struct plan pl;
	memset(&pl, 0, sizeof pl);
	struct iwvi_rkeys *k = &r->own.qp->s->rkeys;
	iwvi_rkeys_lock(k); /* held while the region's memory is used */
	int ok = rx->reason == FP_R_TAGGED ? judge_tagged(r, seg, len, &pl) : judge_untagged(r, seg, len, rx, &pl);
	if (ok && pl.kind != 1 && !can_send(s))
		ok = 0; /* no room for the response now: the daemon queues it */
	if (!ok) {
		iwvi_rkeys_unlock(k);
		return 0;
	}
	int rc = iwvi_fp_own_drop(&r->own); /* taken out first: executed at most once */
	if (rc < 0) {
		iwvi_rkeys_unlock(k);
		return rc;
	}
	uint8_t resp[W_FP_RD_COPY_LEN];
	size_t rl = 0;
	switch (pl.kind) {
	case 1:
		memcpy(pl.mem, pl.payload, pl.len);
		r->rma_wrecs++;
		break;
	case 2:
		resp[0] = 0x80 | 0x40 | 1;          /* T, L, DV 1 (RFC 5041 §4.2) */
		resp[1] = 1 << 6 | FP_OP_READ_RESPONSE; /* RV 1 */
		put64(put32(resp + 2, pl.sink_stag), pl.sink_to);
		memcpy(resp + FP_DDP_TAGGED_LEN, pl.mem, pl.len);
		rl = FP_DDP_TAGGED_LEN + pl.len;
		r->rma_reads++;
		break;
	default: {
		uint64_t orig = atomic(&pl);
		uint32_t *msnp = (uint32_t *)(void *)(r->own.page + W_OFF_FP_RD_ATOMIC_RESP_MSN);
		uint32_t msn = __atomic_load_n(msnp, __ATOMIC_RELAXED) + 1;
		__atomic_store_n(msnp, msn, __ATOMIC_RELAXED);
		resp[0] = 0x40 | 1; /* L, DV 1 (RFC 5041 §4.3) */
		resp[1] = 1 << 6 | FP_OP_ATOMIC_RESPONSE;
		uint8_t *p = put32(resp + 2, 0); /* RsvdULP */
		p = put32(p, QN_ATOMIC_RESPONSE);
		p = put32(p, msn);
		p = put32(p, 0); /* MO */
		p = put64(put32(p, pl.req_id), orig);
		rl = (size_t)(p - resp);
		r->rma_atomics++;
		if (pl.op == ATOMIC_CMP_SWAP) {
			r->rma_cmpswaps++;
			if (((orig ^ pl.compare) & pl.compare_mask) != 0)
				r->rma_cmpswaps_unequal++;
		}
	}
	}
	iwvi_rkeys_unlock(k);
	if (rx->acked)
		iwvi_fp_rd_apply_ack(s, &rx->rd);
	st32(s, W_OFF_FP_RD_RCV_NEXT, rx->rd.seq + 1);
	uint32_t u = ld32(s, W_OFF_FP_RD_UNACKED);
	st32(s, W_OFF_FP_RD_UNACKED, u < 0xffff ? u + 1 : u);
	st32(s, W_OFF_FP_RD_ACK_DUE, 1);
	if (rl > 0)
		send_body(r, slot, resp, rl);
	return 1;
}
