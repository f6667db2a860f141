/*
 * fprd.c — the rank's side of an RD QP's fast path (fprd.h; the page's
 * RD halves: proto/fastpath_rd.go, mirrored in wire.h).
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "fastpath.h"
#include "fprd.h"
#include "fprd_rma_rx.h"

/* The page's words are read by the engine while the rank writes them (the
 * retransmission deadline): relaxed atomics, naturally aligned. */
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

int iwvi_fp_rd_attach(struct iwv_qp *qp, struct iwvi_fp_rd *r)
{
	memset(r, 0, sizeof *r);
	if (qp->type != IWV_QPT_RD) {
		r->own.sock = -1;
		return iwvi_seterr(qp->s, EINVAL, "fastpath-page: QP %u is not RD", qp->handle);
	}
	struct iwv_port_attr pa;
	int rc = iwv_query_port(qp->s, &pa);
	if (rc < 0)
		return rc;
	rc = iwvi_fp_own_attach_flags(qp, &r->own, W_FP_FLAG_GRO); /* iwvi_fp_own_peek_gro in iwvi_fp_rd_poll */
	if (rc < 0)
		return rc;
	r->qkey = iwv_qp_qkey(qp);
	r->crc = r->own.crc; /* the QP's: off when created with no_crc */
	size_t m = iwvi_fp_max_payload(pa.datagram_size, 1, 0);
	size_t room = W_FP_RD_COPY_LEN - FP_DDP_UNTAGGED_LEN;
	r->max_payload = m < room ? m : room;
	return 0;
}

void iwvi_fp_rd_detach(struct iwvi_fp_rd *r)
{
	iwvi_fp_own_detach(&r->own);
}

int iwvi_fp_rd_slot(const struct iwvi_fp_rd *r, const struct sockaddr_in *peer)
{
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	for (int i = 0; i < W_FP_RD_SLOTS; i++) {
		const uint8_t *s = slot_base(r, i);
		if (!(ld32(s, W_OFF_FP_RD_STATE) & W_FP_RD_VALID))
			continue;
		if (w_get16(s + W_OFF_FP_RD_PORT) == ntohs(peer->sin_port) &&
		    memcmp(s + W_OFF_FP_RD_ADDR, mapped, sizeof mapped) == 0 &&
		    memcmp(s + W_OFF_FP_RD_ADDR + 12, &peer->sin_addr, 4) == 0)
			return i;
	}
	return -1;
}

static void slot_addr(const uint8_t *s, struct sockaddr_in *a)
{
	memset(a, 0, sizeof *a);
	a->sin_family = AF_INET;
	a->sin_port = htons(w_get16(s + W_OFF_FP_RD_PORT));
	memcpy(&a->sin_addr, s + W_OFF_FP_RD_ADDR + 12, 4);
}

int iwvi_fp_rd_peer(const struct iwvi_fp_rd *r, int slot, struct sockaddr_in *peer)
{
	if (slot < 0 || slot >= W_FP_RD_SLOTS || !(ld32(slot_base(r, slot), W_OFF_FP_RD_STATE) & W_FP_RD_VALID))
		return -EINVAL;
	slot_addr(slot_base(r, slot), peer);
	return 0;
}

/* ack_fields fills h's acknowledgement of slot s as llp/rd's ackHeader
 * does: Window, Echoed Incarnation, Cumulative Ack = RcvNext, no SACK. */
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

/* send_owned sends while the rank owns the socket (Busy set). */
static int send_owned(struct iwvi_fp_rd *r, int slot, const void *payload, size_t len, int solicited)
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
	if (head >= W_FP_RD_RING)
		return -EAGAIN;
	if (n >= inflight || (n > 0 && !fp_seq_less(next, limit)))
		return -ENOBUFS; /* until an ACK: poll, then send again */
	struct fp_rd_hdr h = {.type = FP_RD_DATA, .seq = next};
	ack_fields(s, &h);
	if (n + 1 >= inflight || !fp_seq_less(next + 1, limit))
		h.flags |= FP_RDF_ACKREQ; /* the window is now full: ask for an ACK at once (llp/rd Send) */
	uint32_t *msnp = (uint32_t *)(void *)(r->own.page + W_OFF_FP_RD_SEND_MSN);
	uint32_t msn = __atomic_load_n(msnp, __ATOMIC_RELAXED) + 1;
	struct fp_send fs = {.qkey = ld32(s, W_OFF_FP_RD_QKEY), .src_qkey = r->qkey, .msn = msn, .last = 1,
			     .solicited = (uint8_t)(solicited != 0), .crc = (uint8_t)(r->crc != 0)};
	uint8_t own_b[sizeof r->tx[0].b];
	uint8_t *b = r->batch ? r->tx[r->txn].b : own_b;
	ssize_t dl = iwvi_fp_send_build(b, sizeof own_b, &fs, &h, payload, len);
	if (dl < 0)
		return dl == -ENOBUFS ? -EMSGSIZE : (int)dl;
	size_t body = (size_t)dl - FP_KEYS_LEN - FP_RD_HDR_LEN - FP_CRC_LEN;
	if (body < W_FP_RD_MIN_BODY || body > W_FP_RD_COPY_LEN)
		return -EMSGSIZE;
	/* The copy and its entry first, then the numbers: the engine reads
	 * them only after Busy is clear. */
	uint32_t j = (head + n) % W_FP_RD_RING;
	memcpy(r->own.page + W_OFF_FP_RD_COPIES + ((size_t)slot * W_FP_RD_RING + j) * W_FP_RD_COPY_LEN,
	       b + FP_KEYS_LEN + FP_RD_HDR_LEN, body);
	uint8_t *e = s + W_OFF_FP_RD_RING + (size_t)j * W_FP_RD_ENTRY_LEN;
	st32(e, W_OFF_FP_RD_ENTRY_SEQ, next);
	st32(e, W_OFF_FP_RD_ENTRY_LEN, (uint32_t)body);
	st64(e, W_OFF_FP_RD_ENTRY_SENT_AT, iwvi_now_ns());
	st32(s, W_OFF_FP_RD_NEXT_SEQ, next + 1);
	st32(s, W_OFF_FP_RD_OUT_N, n + 1);
	__atomic_store_n(msnp, msn, __ATOMIC_RELAXED);
	if (h.flags & FP_RDF_ACK) { /* the piggybacked ACK settles what was owed */
		st32(s, W_OFF_FP_RD_UNACKED, 0);
		st32(s, W_OFF_FP_RD_ACK_DUE, 0);
		r->ack_now &= ~(1u << slot);
	}
	struct sockaddr_in to;
	slot_addr(s, &to);
	r->sent++;
	if (r->batch) {
		r->tx[r->txn].to = to;
		r->tx[r->txn].len = (size_t)dl;
		if (++r->txn == IWVI_FP_RD_TX_BATCH)
			iwvi_fp_rd_flush(r);
		return 0;
	}
	/* A datagram the kernel refuses is lost like one the network drops:
	 * the daemon retransmits the copy. */
	(void)sendto(r->own.sock, b, (size_t)dl, MSG_DONTWAIT, (struct sockaddr *)&to, sizeof to);
	return 0;
}

void iwvi_fp_rd_flush(struct iwvi_fp_rd *r)
{
	struct mmsghdr m[IWVI_FP_RD_TX_BATCH];
	struct iovec v[IWVI_FP_RD_TX_BATCH];
	unsigned n = r->txn;
	if (n == 0)
		return;
	memset(m, 0, sizeof m);
	for (unsigned i = 0; i < n; i++) {
		v[i] = (struct iovec){.iov_base = r->tx[i].b, .iov_len = r->tx[i].len};
		m[i].msg_hdr.msg_name = &r->tx[i].to;
		m[i].msg_hdr.msg_namelen = sizeof r->tx[i].to;
		m[i].msg_hdr.msg_iov = &v[i];
		m[i].msg_hdr.msg_iovlen = 1;
	}
	/* Refused (all or the rest after the first error): lost like a
	 * network drop, the daemon retransmits the copies. One retry for the
	 * rest after a partial send (a full socket buffer, EINTR). */
	int k = sendmmsg(r->own.sock, m, n, MSG_DONTWAIT);
	if (k > 0 && (unsigned)k < n)
		(void)sendmmsg(r->own.sock, m + k, n - (unsigned)k, MSG_DONTWAIT);
	r->txn = 0;
	r->flushes++;
	r->flushed += n;
}

int iwvi_fp_rd_send(struct iwvi_fp_rd *r, int slot, const void *payload, size_t len, int solicited)
{
	if (slot < 0 || slot >= W_FP_RD_SLOTS)
		return -EINVAL;
	if (len > r->max_payload)
		return -EMSGSIZE;
	if (r->own.in_busy) /* from iwvi_fp_rd_poll's deliver */
		return send_owned(r, slot, payload, len, solicited);
	if (!iwvi_fp_own_renew(&r->own))
		return -EAGAIN;
	int rc = send_owned(r, slot, payload, len, solicited);
	iwvi_fp_own_done(&r->own);
	return rc;
}

/* iwvi_fp_rd_apply_ack takes an acknowledgement (classified: CumAck within
 * [SndUna, NextSeq], no SACK) into slot s. */
void iwvi_fp_rd_apply_ack(uint8_t *s, const struct fp_rd_hdr *h)
{
	uint32_t una = ld32(s, W_OFF_FP_RD_SND_UNA), n = ld32(s, W_OFF_FP_RD_OUT_N);
	uint32_t head = ld32(s, W_OFF_FP_RD_OUT_HEAD) % W_FP_RD_RING;
	for (uint32_t k = 0; k < W_FP_RD_RING && una != h->cum_ack && n > 0; k++) {
		head = (head + 1) % W_FP_RD_RING;
		n--;
		una++;
	}
	st32(s, W_OFF_FP_RD_OUT_HEAD, head);
	st32(s, W_OFF_FP_RD_OUT_N, n);
	st32(s, W_OFF_FP_RD_SND_UNA, una);
	if (fp_seq_less_eq(ld32(s, W_OFF_FP_RD_ACK_CUM), h->cum_ack)) {
		st32(s, W_OFF_FP_RD_ACK_CUM, h->cum_ack);
		st32(s, W_OFF_FP_RD_LIMIT, h->cum_ack + h->window);
	}
}

/* FP_RD_ACK_BATCH: a poll that took Sends leaves their ACK owed — the
 * next Send the application makes to that peer carries it piggybacked
 * (datagram-iwarp.md "Proposed profile": "Acks may be piggybacked on data") — unless a
 * peer is owed this many; the next poll that takes no Send, a release or the
 * daemon's take-over sends what is still owed. Deferring is safe: the
 * lease (-fastpath-lease, 1 ms) is shorter than llp/rd's smallest RTO
 * (2 ms), so an ACK is never later than the sender's retransmission; and
 * the batch is half the sender's ring (W_FP_RD_RING, 16), and a
 * sender whose window or ring is now full asks for an ACK at once (Q,
 * FP_RDF_ACKREQ), which the poll that takes it sends. */
#define FP_RD_ACK_BATCH 8

/* send_acks_owed acknowledges, once per peer, what the rank took, for
 * every peer owed at least min Sends' acknowledgement (1: every peer owed
 * any). */
static void send_acks_owed(struct iwvi_fp_rd *r, uint32_t min)
{
	iwvi_fp_rd_flush(r); /* the data first, then what may acknowledge more */
	for (int i = 0; i < W_FP_RD_SLOTS; i++) {
		uint8_t *s = slot_base(r, i);
		if (!(ld32(s, W_OFF_FP_RD_STATE) & W_FP_RD_VALID) || !ld32(s, W_OFF_FP_RD_ACK_DUE))
			continue;
		if (ld32(s, W_OFF_FP_RD_UNACKED) < min && !(r->ack_now & (1u << i)))
			continue;
		struct fp_rd_hdr h = {.type = FP_RD_ACK};
		ack_fields(s, &h);
		uint8_t b[FP_RD_ACK_LEN];
		if (iwvi_fp_rd_ack_build(b, sizeof b, ld32(s, W_OFF_FP_RD_QKEY), r->qkey, &h, r->crc) < 0)
			continue;
		struct sockaddr_in to;
		slot_addr(s, &to);
		(void)sendto(r->own.sock, b, sizeof b, MSG_DONTWAIT, (struct sockaddr *)&to, sizeof to);
		st32(s, W_OFF_FP_RD_UNACKED, 0);
		st32(s, W_OFF_FP_RD_ACK_DUE, 0);
		r->ack_now &= ~(1u << i);
		r->acks_out++;
	}
}

/* send_acks acknowledges everything owed (a release, a hand-over). */
static void send_acks(struct iwvi_fp_rd *r)
{
	send_acks_owed(r, 1);
}

int iwvi_fp_rd_release(struct iwvi_fp_rd *r)
{
	if (r->own.in_busy) {
		send_acks(r);
	} else if (iwvi_fp_own_owned(&r->own) && iwvi_fp_own_renew(&r->own)) {
		send_acks(r);
	} else {
		iwvi_fp_rd_flush(r);
		return 0;
	}
	r->released++;
	return iwvi_fp_own_release(&r->own); /* clears Busy first */
}

int iwvi_fp_rd_poll(struct iwvi_fp_rd *r, int max, iwvi_fp_rd_deliver deliver, void *arg)
{
	iwvi_fp_rd_flush(r);
	if (!iwvi_fp_own_renew(&r->own))
		return 0;
	struct fp_rx_qp rq = {.qkey = r->qkey, .crc = (uint8_t)(r->crc != 0)};
	uint8_t b[W_FP_RD_COPY_LEN + FP_MAX_HDR + FP_CRC_LEN];
	int got = 0;
	for (int k = 0; k < max; k++) {
		struct sockaddr_storage src;
		int coalesced;
		ssize_t n = iwvi_fp_own_peek_gro(&r->own, b, sizeof b, &src, &coalesced);
		if (n == -EAGAIN)
			break;
		if (n < 0) {
			iwvi_fp_own_done(&r->own);
			return (int)n;
		}
		int slot = src.ss_family == AF_INET ? iwvi_fp_rd_slot(r, (struct sockaddr_in *)&src) : -1;
		struct fp_rx rx;
		enum fp_class c = FP_CLASS_DAEMON;
		uint8_t *s = NULL;
		rx.reason = FP_R_COALESCED; /* several datagrams (UDP_GRO): the daemon's */
		if (slot >= 0 && n <= (ssize_t)sizeof b && !coalesced) {
			s = slot_base(r, slot);
			uint32_t state = ld32(s, W_OFF_FP_RD_STATE);
			struct fp_rd_peer p = {.our_inc = ld32(s, W_OFF_FP_RD_OUR_INC),
					       .peer_inc = ld32(s, W_OFF_FP_RD_PEER_INC),
					       .rcv_next = (state & W_FP_RD_RECV) ? ld32(s, W_OFF_FP_RD_RCV_NEXT) : 0,
					       .snd_una = ld32(s, W_OFF_FP_RD_SND_UNA),
					       .snd_next = ld32(s, W_OFF_FP_RD_NEXT_SEQ)};
			c = iwvi_fp_rd_classify(b, (size_t)n, &rq, &p, &rx);
		}
		if (c == FP_CLASS_DAEMON && s && (rx.reason == FP_R_TAGGED || rx.reason == FP_R_OPCODE)) {
			int rc = iwvi_fp_rd_rma_rx(r, slot, b, (size_t)n, &rx); /* RDMA at the target: fprd_rma_rx.h */
			if (rc < 0) {
				iwvi_fp_own_done(&r->own);
				return rc;
			}
			if (rc > 0)
				continue;
		}
		if (c == FP_CLASS_DAEMON) {
			/* The daemon's: it imports what the rank took so far
			 * (and acknowledges it). */
			r->release_reason = s || coalesced ? (int)rx.reason : FP_R_NO_PEER;
			r->released++;
			send_acks(r);
			iwvi_fp_own_release(&r->own);
			return got;
		}
		int rc = iwvi_fp_own_drop(&r->own);
		if (rc < 0) {
			iwvi_fp_own_done(&r->own);
			return rc;
		}
		if (rx.acked) {
			iwvi_fp_rd_apply_ack(s, &rx.rd);
			r->acks_in++;
		}
		if (c == FP_CLASS_SEND) {
			st32(s, W_OFF_FP_RD_RCV_NEXT, rx.rd.seq + 1);
			uint32_t u = ld32(s, W_OFF_FP_RD_UNACKED);
			st32(s, W_OFF_FP_RD_UNACKED, u < 0xffff ? u + 1 : u);
			st32(s, W_OFF_FP_RD_ACK_DUE, 1);
			if (rx.rd.flags & FP_RDF_ACKREQ)
				r->ack_now |= 1u << slot; /* the sender's window is full */
			r->taken++;
			got++;
			if (deliver)
				deliver(arg, slot, b + rx.payload_off, rx.payload_len, rx.imm, rx.has_imm);
			if (!r->own.in_busy)
				return got; /* deliver released the socket */
		}
	}
	/* A poll that took Sends defers their ACK (FP_RD_ACK_BATCH): in a
	 * request-response exchange the response carries it. */
	send_acks_owed(r, got > 0 ? FP_RD_ACK_BATCH : 1);
	iwvi_fp_own_done(&r->own);
	return got;
}

unsigned iwvi_fp_rd_outstanding(const struct iwvi_fp_rd *r)
{
	unsigned n = 0;
	for (int i = 0; i < W_FP_RD_SLOTS; i++) {
		const uint8_t *s = slot_base(r, i);
		if (ld32(s, W_OFF_FP_RD_STATE) & W_FP_RD_VALID)
			n += ld32(s, W_OFF_FP_RD_OUT_N);
	}
	return n;
}
