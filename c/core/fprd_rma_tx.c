/*
 * fprd_rma_tx.c — RDMA Write-Record sent by the rank on its RD QP's socket
 * (fprd_rma_tx.h; the page's RD halves: proto/fastpath_rd.go, wire.h).
 *
 * The numbering, the copy and the ring entry follow fprd.c send_owned
 * exactly (the daemon imports both alike, verbsd/rd/fastpath_import.go);
 * only the DDP part differs: a tagged segment (RFC 5041 §4.2) with the
 * iwarpd profile's Write-Record header (docs/wire-format.md §8).
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "fastpath.h"
#include "fastpath_wrec.h"
#include "fprd_rma_tx.h"

#define WREC_BODY_HDR FP_WREC_BODY_HDR          /* 26: what a copy holds before the payload */
#define WREC_PREFIX (FP_KEYS_LEN + FP_RD_HDR_LEN) /* 32: key and RD headers */

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

/* epoch moves whenever the rank loses the socket: each release it made,
 * each renew that found the engine owning (fprd_rma_tx.h). */
static uint32_t epoch(const struct iwvi_fp_rd *r)
{
	return (uint32_t)(r->own.lost + r->released);
}

size_t iwvi_fp_rd_write_max(const struct iwvi_fp_rd *r)
{
	/* A Send's payload sits after 18 octets of untagged DDP header, a
	 * Write's after 26: the same datagram and copy hold 8 fewer. */
	return r->max_payload > WREC_BODY_HDR - FP_DDP_UNTAGGED_LEN ? r->max_payload - (WREC_BODY_HDR - FP_DDP_UNTAGGED_LEN)
								     : 0;
}

/* ack_fields: as fprd.c (llp/rd ackHeader): Window, Echoed Incarnation,
 * Cumulative Ack = RcvNext, no SACK. */
static void ack_fields(const uint8_t *s, struct fp_rd_hdr *h)
{
	h->flags |= FP_RDF_EXTSACK;
	h->inc = ld32(s, W_OFF_FP_RD_OUR_INC);
	h->echoed = ld32(s, W_OFF_FP_RD_PEER_INC);
	if ((ld32(s, W_OFF_FP_RD_STATE) & W_FP_RD_RECV) && h->echoed != 0) {
		h->flags |= FP_RDF_ACK;
		h->window = w_get16(s + W_OFF_FP_RD_ADV_WND);
		h->cum_ack = ld32(s, W_OFF_FP_RD_RCV_NEXT);
	}
}

/* write_owned sends while the rank owns the socket (Busy set). */
static int write_owned(struct iwvi_fp_rd *r, struct iwvi_fp_rd_rma *t, int slot, uint32_t stag, uint64_t to,
		       const struct iovec *iov, size_t count, size_t len, uint64_t cookie)
{
	uint8_t *s = slot_base(r, slot);
	uint32_t state = ld32(s, W_OFF_FP_RD_STATE);
	if (!(state & W_FP_RD_VALID) || !(state & W_FP_RD_SEND) || t->n >= IWVI_FP_RMA_MAX)
		return -EAGAIN;
	uint32_t next = ld32(s, W_OFF_FP_RD_NEXT_SEQ), n = ld32(s, W_OFF_FP_RD_OUT_N);
	uint32_t head = ld32(s, W_OFF_FP_RD_OUT_HEAD), limit = ld32(s, W_OFF_FP_RD_LIMIT);
	uint32_t inflight = ld32(s, W_OFF_FP_RD_IN_FLIGHT);
	if (inflight > W_FP_RD_RING)
		inflight = W_FP_RD_RING;
	if (n >= inflight || head >= W_FP_RD_RING || (n > 0 && !fp_seq_less(next, limit)))
		return -EAGAIN;
	/* Q: the Write completes on the ACK; without asking, the peer would
	 * hold it for its ACK delay (verbsd/rd/send.go sets Q on the last
	 * Write-Record queued; the rank cannot know what follows). */
	struct fp_rd_hdr h = {.type = FP_RD_DATA, .seq = next, .flags = FP_RDF_ACKREQ};
	ack_fields(s, &h);
	uint32_t *msnp = (uint32_t *)(void *)(r->own.page + W_OFF_FP_RD_SEND_MSN);
	uint32_t msn = __atomic_load_n(msnp, __ATOMIC_RELAXED) + 1;
	struct fp_wrec w = {.qkey = ld32(s, W_OFF_FP_RD_QKEY), .src_qkey = r->qkey, .stag = stag, .to = to,
			    .record_id = msn, .crc = (uint8_t)(r->crc != 0)};
	uint8_t b[WREC_PREFIX + W_FP_RD_COPY_LEN + FP_CRC_LEN];
	ssize_t dl = iwvi_fp_wrec_build(b, sizeof b, &w, &h, iov, count, len);
	if (dl < 0)
		return -EMSGSIZE;
	size_t body = (size_t)dl - WREC_PREFIX - FP_CRC_LEN;
	if (body < W_FP_RD_MIN_BODY || body > W_FP_RD_COPY_LEN)
		return -EMSGSIZE;
	/* The copy and its entry first, then the numbers (fprd.c). */
	uint32_t j = (head + n) % W_FP_RD_RING;
	memcpy(r->own.page + W_OFF_FP_RD_COPIES + ((size_t)slot * W_FP_RD_RING + j) * W_FP_RD_COPY_LEN,
	       b + WREC_PREFIX, body);
	uint8_t *e = s + W_OFF_FP_RD_RING + (size_t)j * W_FP_RD_ENTRY_LEN;
	st32(e, W_OFF_FP_RD_ENTRY_SEQ, next);
	st32(e, W_OFF_FP_RD_ENTRY_LEN, (uint32_t)body);
	st64(e, W_OFF_FP_RD_ENTRY_SENT_AT, iwvi_now_ns());
	st32(s, W_OFF_FP_RD_NEXT_SEQ, next + 1);
	st32(s, W_OFF_FP_RD_OUT_N, n + 1);
	__atomic_store_n(msnp, msn, __ATOMIC_RELAXED);
	if (h.flags & FP_RDF_ACK) {
		st32(s, W_OFF_FP_RD_UNACKED, 0);
		st32(s, W_OFF_FP_RD_ACK_DUE, 0);
	}
	struct sockaddr_in to_addr;
	iwvi_fp_rd_peer(r, slot, &to_addr);
	t->e[t->n++] = (struct iwvi_fp_rd_rma_ent){.cookie = cookie, .seq = next, .epoch = epoch(r),
						   .our_inc = h.inc, .peer = to_addr, .slot = slot};
	t->writes++;
	/* Refused by the kernel: lost like a drop, the daemon resends the copy. */
	iwvi_fp_rd_flush(r); /* the queued Sends have the earlier numbers */
	(void)sendto(r->own.sock, b, (size_t)dl, MSG_DONTWAIT, (struct sockaddr *)&to_addr, sizeof to_addr);
	r->sent++;
	return 0;
}

int iwvi_fp_rd_write(struct iwvi_fp_rd *r, struct iwvi_fp_rd_rma *t, int slot, uint32_t stag, uint64_t to,
		     const struct iovec *iov, size_t count, size_t len, uint64_t cookie)
{
	if (slot < 0 || slot >= W_FP_RD_SLOTS)
		return -EINVAL;
	if (len > iwvi_fp_rd_write_max(r))
		return -EMSGSIZE;
	if (len > 0 && len - 1 > UINT64_MAX - to)
		return -EINVAL; /* TO + length wraps: the daemon's WCLocLenErr */
	if (r->own.in_busy)
		return write_owned(r, t, slot, stag, to, iov, count, len, cookie);
	if (!iwvi_fp_own_renew(&r->own))
		return -EAGAIN;
	int rc = write_owned(r, t, slot, stag, to, iov, count, len, cookie);
	iwvi_fp_own_done(&r->own);
	return rc;
}

int iwvi_fp_rd_rma_reap(struct iwvi_fp_rd *r, struct iwvi_fp_rd_rma *t, uint64_t *cookies, int max)
{
	if (t->n == 0 || max <= 0)
		return 0;
	int busy = r->own.in_busy;
	if (!busy && !iwvi_fp_own_renew(&r->own))
		return 0;
	/* The rank owns the socket: the slots are its own until done. */
	uint32_t now = epoch(r);
	int got = 0;
	unsigned keep = 0;
	for (unsigned i = 0; i < t->n; i++) {
		struct iwvi_fp_rd_rma_ent *x = &t->e[i];
		int done = 0, handback = 0;
		if (x->epoch != now) {
			/* Lost and got back since: find its peer's slot again
			 * (fprd_rma_tx.h). No slot: nothing outstanding to that
			 * peer. Another incarnation: the daemon gave the old
			 * space up, which fails the QP (flush fails it). */
			int s = iwvi_fp_rd_slot(r, &x->peer);
			handback = 1;
			if (s < 0 || ld32(slot_base(r, s), W_OFF_FP_RD_OUR_INC) != x->our_inc) {
				done = 1;
			} else {
				x->slot = s;
				x->epoch = now;
			}
		}
		if (!done && fp_seq_less(x->seq, ld32(slot_base(r, x->slot), W_OFF_FP_RD_SND_UNA)))
			done = 1;
		if (done && got < max) {
			if (handback)
				t->on_handback++;
			else
				t->on_ack++;
		}
		if (done && got < max)
			cookies[got++] = x->cookie;
		else
			t->e[keep++] = *x;
	}
	t->n = keep;
	if (!busy)
		iwvi_fp_own_done(&r->own);
	return got;
}

int iwvi_fp_rd_rma_flush(struct iwvi_fp_rd_rma *t, uint64_t *cookies, int max)
{
	int got = 0;
	unsigned keep = 0;
	for (unsigned i = 0; i < t->n; i++) {
		if (got < max)
			cookies[got++] = t->e[i].cookie;
		else
			t->e[keep++] = t->e[i];
	}
	t->n = keep;
	t->flushed += (uint64_t)got;
	return got;
}
