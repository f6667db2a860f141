/*
 * fprd_req.c — Read Requests and Atomic Requests sent by the rank on its
 * RD QP's socket, their responses taken in its poll (fprd_req.h; the
 * page's request entries: proto/fastpath_rd.go, wire.h).
 *
 * The numbering, the copy and the ring entry follow fprd_rma_tx.c (a
 * Write): the daemon imports and retransmits the copy alike. The request
 * entry of the page is written before the datagram is sent; the daemon
 * reads it only after a take-over (Busy clear), and writes its outcome
 * only while it owns the socket.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "fastpath_req.h"
#include "fprd_req.h"

#define REQ_PREFIX (FP_KEYS_LEN + FP_RD_HDR_LEN) /* 32: key and RD headers */
#define QN_ATOMIC_RESPONSE 3
#define ATOMIC_RESP_LEN 12 /* Original Request Identifier, Original Value */

static uint8_t *slot_base(const struct iwvi_fp_rd *r, int i)
{
	return r->own.page + W_OFF_FP_RD_SLOTS + (size_t)i * W_FP_RD_SLOT_LEN;
}

static uint8_t *req_entry(const struct iwvi_fp_rd *r, int k)
{
	return r->own.page + W_OFF_FP_RD_REQS + (size_t)k * W_FP_RD_REQ_LEN;
}

static uint32_t ld32(const uint8_t *s, size_t off)
{
	return __atomic_load_n((const uint32_t *)(const void *)(s + off), __ATOMIC_RELAXED);
}

static void st32(uint8_t *s, size_t off, uint32_t v)
{
	__atomic_store_n((uint32_t *)(void *)(s + off), v, __ATOMIC_RELAXED);
}

static void st64(uint8_t *s, size_t off, uint64_t v)
{
	__atomic_store_n((uint64_t *)(void *)(s + off), v, __ATOMIC_RELAXED);
}

static uint32_t get32(const uint8_t *b)
{
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

static uint64_t get64(const uint8_t *b)
{
	return (uint64_t)get32(b) << 32 | get32(b + 4);
}

size_t iwvi_fp_rd_read_max(const struct iwvi_fp_rd *r)
{
	/* A Read Response's payload follows a 14-octet tagged header: the
	 * Write's bound (26 octets of headers) keeps it one datagram. */
	size_t m = r->max_payload > 8 ? r->max_payload - 8 : 0;
	return m < W_FP_RD_COPY_LEN ? m : W_FP_RD_COPY_LEN;
}

/* send_req sends q to slot's peer as its next DATA while the rank owns the
 * socket (Busy set), and records it in entry k (fprd_rma_tx.c
 * write_owned's rules: the send right, the ring, the window). */
static int send_req(struct iwvi_fp_rd *r, int slot, struct fp_req *q, int k)
{
	uint8_t *s = slot_base(r, slot);
	uint32_t state = ld32(s, W_OFF_FP_RD_STATE);
	if (!(state & W_FP_RD_VALID) || !(state & W_FP_RD_SEND))
		return -EAGAIN;
	uint32_t next = ld32(s, W_OFF_FP_RD_NEXT_SEQ), n = ld32(s, W_OFF_FP_RD_OUT_N);
	uint32_t head = ld32(s, W_OFF_FP_RD_OUT_HEAD), limit = ld32(s, W_OFF_FP_RD_LIMIT);
	uint32_t inflight = ld32(s, W_OFF_FP_RD_IN_FLIGHT);
	if (inflight > W_FP_RD_RING)
		inflight = W_FP_RD_RING;
	if (n >= inflight || head >= W_FP_RD_RING || (n > 0 && !fp_seq_less(next, limit)))
		return -EAGAIN;
	/* No Q: the response acknowledges the request (the daemon asks for
	 * none on a Read Request or Atomic Request either). Q only when the
	 * window is now full, as fprd_rma_rx.c send_body. */
	struct fp_rd_hdr h = {.type = FP_RD_DATA, .seq = next, .flags = FP_RDF_EXTSACK};
	h.inc = ld32(s, W_OFF_FP_RD_OUR_INC);
	h.echoed = ld32(s, W_OFF_FP_RD_PEER_INC);
	if ((state & W_FP_RD_RECV) && h.echoed != 0) {
		h.flags |= FP_RDF_ACK;
		h.window = w_get16(s + W_OFF_FP_RD_ADV_WND);
		h.cum_ack = ld32(s, W_OFF_FP_RD_RCV_NEXT);
	}
	if (n + 1 >= inflight || !fp_seq_less(next + 1, limit))
		h.flags |= FP_RDF_ACKREQ;
	uint32_t *msnp = (uint32_t *)(void *)(r->own.page + W_OFF_FP_RD_READ_REQ_MSN);
	q->msn = __atomic_load_n(msnp, __ATOMIC_RELAXED) + 1;
	uint32_t *idp = (uint32_t *)(void *)(r->own.page + W_OFF_FP_RD_NEXT_REQ_ID);
	if (q->opcode == FP_OP_ATOMIC_REQUEST)
		q->req_id = __atomic_load_n(idp, __ATOMIC_RELAXED) + 1; /* verbsd/rd/atomic.go prepareAtomic */
	uint8_t b[REQ_PREFIX + FP_REQ_MAX_BODY + FP_CRC_LEN];
	ssize_t dl = iwvi_fp_req_build(b, sizeof b, ld32(s, W_OFF_FP_RD_QKEY), r->qkey, &h, q, r->crc);
	if (dl < 0)
		return -EMSGSIZE;
	size_t body = (size_t)dl - REQ_PREFIX - FP_CRC_LEN;
	/* The copy and its ring entry, the request entry, then the numbers. */
	uint32_t j = (head + n) % W_FP_RD_RING;
	memcpy(r->own.page + W_OFF_FP_RD_COPIES + ((size_t)slot * W_FP_RD_RING + j) * W_FP_RD_COPY_LEN,
	       b + REQ_PREFIX, body);
	uint8_t *e = s + W_OFF_FP_RD_RING + (size_t)j * W_FP_RD_ENTRY_LEN;
	st32(e, W_OFF_FP_RD_ENTRY_SEQ, next);
	st32(e, W_OFF_FP_RD_ENTRY_LEN, (uint32_t)body);
	st64(e, W_OFF_FP_RD_ENTRY_SENT_AT, (uint64_t)iwvi_now_ns());
	struct iwvi_fp_rd_req_ent *x = &r->reqs->e[k];
	int atomic = q->opcode == FP_OP_ATOMIC_REQUEST;
	x->kind = atomic ? W_FP_RD_REQ_ATOMIC : W_FP_RD_REQ_READ;
	x->slot = slot;
	x->msn = q->msn;
	x->id = atomic ? q->req_id : q->sink_stag;
	x->to = atomic ? 0 : q->sink_to;
	x->order = r->reqs->next_order++;
	uint8_t *pe = req_entry(r, k);
	st32(pe, W_OFF_FP_RD_REQ_KIND, x->kind);
	st32(pe, W_OFF_FP_RD_REQ_SLOT, (uint32_t)slot);
	st32(pe, W_OFF_FP_RD_REQ_MSN, x->msn);
	st32(pe, W_OFF_FP_RD_REQ_ID, x->id);
	st32(pe, W_OFF_FP_RD_REQ_LEN_W, x->len);
	st64(pe, W_OFF_FP_RD_REQ_SINK_TO, x->to);
	st32(pe, W_OFF_FP_RD_REQ_STATE, W_FP_RD_REQ_SENT);
	st32(s, W_OFF_FP_RD_NEXT_SEQ, next + 1);
	st32(s, W_OFF_FP_RD_OUT_N, n + 1);
	__atomic_store_n(msnp, q->msn, __ATOMIC_RELAXED);
	if (atomic)
		__atomic_store_n(idp, q->req_id, __ATOMIC_RELAXED);
	if (h.flags & FP_RDF_ACK) {
		st32(s, W_OFF_FP_RD_UNACKED, 0);
		st32(s, W_OFF_FP_RD_ACK_DUE, 0);
	}
	r->reqs->n++;
	struct sockaddr_in to_addr;
	iwvi_fp_rd_peer(r, slot, &to_addr);
	iwvi_fp_rd_flush(r); /* the queued Sends have the earlier numbers */
	/* Refused by the kernel: lost like a drop, the daemon resends the copy. */
	(void)sendto(r->own.sock, b, (size_t)dl, MSG_DONTWAIT, (struct sockaddr *)&to_addr, sizeof to_addr);
	r->sent++;
	return 0;
}

/* post finds a free entry and sends q while the rank owns the socket. */
static int post(struct iwvi_fp_rd *r, int slot, struct fp_req *q, void *sink, uint32_t len, uint64_t cookie)
{
	if (!r->reqs || slot < 0 || slot >= W_FP_RD_SLOTS)
		return r->reqs ? -EINVAL : -EAGAIN;
	if (r->reqs->n + r->reqs->ndone >= W_FP_RD_REQS)
		return -EAGAIN; /* the done list must hold every completion */
	int k = -1;
	for (int i = 0; i < W_FP_RD_REQS && k < 0; i++)
		if (r->reqs->e[i].kind == 0)
			k = i;
	if (k < 0)
		return -EAGAIN;
	int busy = r->own.in_busy;
	if (!busy && !iwvi_fp_own_renew(&r->own))
		return -EAGAIN;
	/* A free entry of ours is free in the page: the daemon writes only
	 * entries the rank marked sent (fastpath_req.go). */
	struct iwvi_fp_rd_req_ent *x = &r->reqs->e[k];
	x->cookie = cookie;
	x->sink = sink;
	x->len = len;
	int rc = send_req(r, slot, q, k);
	if (rc != 0)
		x->kind = 0;
	if (!busy)
		iwvi_fp_own_done(&r->own);
	return rc;
}

int iwvi_fp_rd_read(struct iwvi_fp_rd *r, int slot, uint32_t src_stag, uint64_t src_to, void *sink, size_t len,
		    uint64_t cookie)
{
	if (len == 0 || len > iwvi_fp_rd_read_max(r))
		return -EMSGSIZE;
	if (len - 1 > UINT64_MAX - src_to)
		return -EINVAL; /* the daemon's WCLocQPOpErr */
	/* The sink STag names nothing of the daemon's: the response is the
	 * rank's (or, taken over, the page's); its TO is the sink address. */
	struct fp_req q = {.opcode = FP_OP_READ_REQUEST, .sink_stag = 0, .sink_to = (uint64_t)(uintptr_t)sink,
			   .size = (uint32_t)len, .src_stag = src_stag, .src_to = src_to};
	int rc = post(r, slot, &q, sink, (uint32_t)len, cookie);
	if (rc == 0)
		r->reqs->reads++;
	return rc;
}

int iwvi_fp_rd_atomic(struct iwvi_fp_rd *r, int slot, int op, uint32_t stag, uint64_t to, uint64_t add_swap,
		      uint64_t compare, void *result, uint64_t cookie)
{
	if (op < 0 || op > 2 || to % 8 != 0)
		return -EINVAL;
	struct fp_req q = {.opcode = FP_OP_ATOMIC_REQUEST, .atomic_op = (uint8_t)op, .stag = stag, .to = to,
			   .add_swap = add_swap, .compare = compare};
	if (op != 0) /* verbsd/rnic/semantics.go AtomicRequest: CmpSwap with full masks */
		q.add_swap_mask = ~(uint64_t)0;
	if (op == 2)
		q.compare_mask = ~(uint64_t)0;
	int rc = post(r, slot, &q, result, 8, cookie);
	if (rc == 0)
		r->reqs->atomics++;
	return rc;
}

/* complete moves entry k to the done list with status. */
static void complete(struct iwvi_fp_rd_reqs *t, int k, int status, uint32_t term)
{
	struct iwvi_fp_rd_req_ent *x = &t->e[k];
	if (t->ndone < W_FP_RD_REQS)
		t->done[t->ndone++] = (struct iwvi_fp_rd_req_done){.cookie = x->cookie, .status = status, .term = term};
	if (status != IWV_WC_SUCCESS)
		t->failed++;
	x->kind = 0;
	t->n--;
}

int iwvi_fp_rd_req_rx(struct iwvi_fp_rd *r, int slot, const uint8_t *seg, size_t len, const struct fp_rx *rx)
{
	struct iwvi_fp_rd_reqs *t = r->reqs;
	if (!t || t->n == 0 || !rx->has_ddp || len < 2 || (seg[0] & 0x03) != 1 || seg[1] >> 6 != 1 || !(seg[0] & 0x40))
		return 0;
	int k = -1;
	const uint8_t *payload;
	size_t plen;
	if (rx->tagged) {
		if ((seg[1] & 0x0f) != FP_OP_READ_RESPONSE || len < FP_DDP_TAGGED_LEN)
			return 0;
		/* The oldest Read outstanding to this peer: Read Responses come
		 * in the order of their requests. */
		for (int i = 0; i < W_FP_RD_REQS; i++) {
			const struct iwvi_fp_rd_req_ent *x = &t->e[i];
			if (x->kind == W_FP_RD_REQ_READ && x->slot == slot && (k < 0 || x->order < t->e[k].order))
				k = i;
		}
		payload = seg + FP_DDP_TAGGED_LEN;
		plen = len - FP_DDP_TAGGED_LEN;
		if (k < 0 || get32(seg + 2) != t->e[k].id || get64(seg + 6) != t->e[k].to || plen != t->e[k].len)
			return 0; /* not this Read's whole response: the daemon's to judge */
	} else {
		if (rx->qn != QN_ATOMIC_RESPONSE || rx->opcode != FP_OP_ATOMIC_RESPONSE || rx->mo != 0 ||
		    len != FP_DDP_UNTAGGED_LEN + ATOMIC_RESP_LEN)
			return 0;
		uint32_t id = get32(seg + FP_DDP_UNTAGGED_LEN);
		for (int i = 0; i < W_FP_RD_REQS && k < 0; i++)
			if (t->e[i].kind == W_FP_RD_REQ_ATOMIC && t->e[i].slot == slot && t->e[i].id == id)
				k = i;
		if (k < 0)
			return 0;
		payload = seg + FP_DDP_UNTAGGED_LEN + 4;
		plen = 8;
	}
	int rc = iwvi_fp_own_drop(&r->own); /* taken out first: completed at most once */
	if (rc < 0)
		return rc;
	struct iwvi_fp_rd_req_ent *x = &t->e[k];
	if (x->kind == W_FP_RD_REQ_ATOMIC) {
		uint64_t v = get64(payload);
		if (x->sink)
			memcpy(x->sink, &v, sizeof v);
	} else if (x->sink) {
		memcpy(x->sink, payload, plen);
	}
	st32(req_entry(r, k), W_OFF_FP_RD_REQ_STATE, 0);
	t->on_resp++;
	complete(t, k, IWV_WC_SUCCESS, 0);
	return 1;
}

int iwvi_fp_rd_req_reap(struct iwvi_fp_rd *r, struct iwvi_fp_rd_req_done *out, int max)
{
	struct iwvi_fp_rd_reqs *t = r->reqs;
	if (!t || max <= 0)
		return 0;
	if (t->n > 0) {
		int busy = r->own.in_busy;
		if (busy || iwvi_fp_own_renew(&r->own)) {
			/* The rank owns the socket: an entry the daemon resolved
			 * stays as it is until the rank frees it. */
			for (int k = 0; k < W_FP_RD_REQS && t->ndone < W_FP_RD_REQS; k++) {
				struct iwvi_fp_rd_req_ent *x = &t->e[k];
				uint8_t *pe = req_entry(r, k);
				uint32_t st = x->kind ? __atomic_load_n((uint32_t *)(void *)(pe + W_OFF_FP_RD_REQ_STATE),
									__ATOMIC_ACQUIRE)
						      : 0;
				if (st == W_FP_RD_REQ_DONE) {
					if (x->sink)
						memcpy(x->sink, r->own.page + W_OFF_FP_RD_REQ_DATA + (size_t)k * W_FP_RD_COPY_LEN,
						       x->len);
					st32(pe, W_OFF_FP_RD_REQ_STATE, 0);
					t->on_handback++;
					complete(t, k, IWV_WC_SUCCESS, 0);
				} else if (st == W_FP_RD_REQ_FAILED) {
					int status = (int)ld32(pe, W_OFF_FP_RD_REQ_STATUS);
					uint32_t term = ld32(pe, W_OFF_FP_RD_REQ_TERM);
					st32(pe, W_OFF_FP_RD_REQ_STATE, 0);
					t->on_handback++;
					/* Never a success: a status of 0 from the
					 * page is the daemon's error all the same. */
					complete(t, k, status != IWV_WC_SUCCESS ? status : IWV_WC_REM_OP_ERR, term);
				}
			}
			if (!busy)
				iwvi_fp_own_done(&r->own);
		}
	}
	int got = 0;
	while (got < max && (unsigned)got < t->ndone) {
		out[got] = t->done[got];
		got++;
	}
	memmove(t->done, t->done + got, (t->ndone - (unsigned)got) * sizeof t->done[0]);
	t->ndone -= (unsigned)got;
	return got;
}

int iwvi_fp_rd_req_flush(struct iwvi_fp_rd *r, struct iwvi_fp_rd_req_done *out, int max)
{
	struct iwvi_fp_rd_reqs *t = r->reqs;
	if (!t)
		return 0;
	for (int k = 0; k < W_FP_RD_REQS && t->ndone < W_FP_RD_REQS; k++)
		if (t->e[k].kind) {
			t->flushed++;
			complete(t, k, IWV_WC_WR_FLUSH_ERR, 0);
		}
	return iwvi_fp_rd_req_reap(r, out, max);
}
