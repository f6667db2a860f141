/*
 * iwd_fastpath_rd.c — an RDM endpoint's rank sends and receives its small
 * eager messages on its RD QP's own socket while the application polls
 * (iwd_fastpath.h; docs/fastpath.md "The provider's RDM endpoints",
 * docs/libfabric.md "The fast path"). On unless FI_IWARPD_FASTPATH_RDM=0.
 *
 * c/core fprd.h does the RD protocol's steady state: the rank numbers its
 * datagrams from the page's slot of a proven peer and keeps a copy there
 * for the daemon to retransmit; it takes only in-order one-segment Sends
 * and ACKs, and gives the socket to the daemon for anything else. This
 * file puts the RDM endpoint on top of it, as iwd_fastpath.c does the
 * DGRAM one:
 *  - order of arrivals: the verbs CQ is polled empty before the socket is
 *    read, and again after every hand-back (IWD_FP_REPOLL); the rank hands
 *    each Send it takes to iwd_rdm_rx_msg at once, as a bounce receive's
 *    completion would be (no bounce receive is consumed: the message is
 *    matched and copied out during the call);
 *  - order of sends: a work request posted to the daemon gives the socket
 *    back first (iwd_fprd_before_post, from iwd_ep_post_send), and the
 *    rank sends itself only while none of the endpoint's is with the
 *    daemon (sq_used 0), so its datagrams never overtake one the daemon
 *    has (RD numbers both in one sequence per peer);
 *  - a send the rank made completes when the kernel accepted it (as
 *    libfabric's tcp provider completes a send written into its socket);
 *    fi_close waits, bounded, until they are acknowledged (ep_linger,
 *    iwd_fprd_unacked), as a TCP close lets the kernel deliver what the
 *    socket still holds.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>

#include "iwd_fastpath.h"
#include "iwd_rdm.h"

#include "fprd.h"
#include "fprd_rma_tx.h"
#include "fprd_req.h"

#define FP_BATCH 16

/* IWD_FPRD_SMALL_RUN: the messages of one datagram in a row (sent or
 * received, through the daemon) after which a bulk endpoint asks for its
 * socket back (iwd_fprd_note). */
#define IWD_FPRD_SMALL_RUN 8

/* IWD_FPRD_BULK_NS: a bulk spell also ends this long after its last bulk
 * message (RMA alone, Reads or atomics through the daemon, notes none). */
#define IWD_FPRD_BULK_NS 20000000

struct iwd_fprd {
	struct iwvi_fp_rd rd;
	int owned; /* the socket is ours and the CQ was polled after it came back */
	int unacked; /* the rank sent Sends itself that may not be acknowledged yet (iwd_fprd_unacked) */
	uint64_t window_full; /* sends refused -FI_EAGAIN: the window or ring full after a progress (information) */
	int blocked;          /* the last send was refused so: the peer must run (iwd_fprd_owned says 0) */
	/* Bulk (iwd_fprd_note): the endpoint's messages need the daemon; the
	 * rank does not ask for the socket back until small_run small ones
	 * in a row. */
	int bulk;
	unsigned small_run;
	int64_t bulk_at; /* iwvi_now_ns of the last bulk message */
	/* UDP_GRO as the rank last set it (-1: as the daemon left it, on):
	 * off while the rank serves the socket itself, so that every
	 * datagram reaches it alone and none is left to the daemon for
	 * having been coalesced with others; on for a bulk spell, so that a
	 * multi-datagram message reaches the daemon as one buffer per GSO
	 * send of its peer (docs/fastpath.md "UDP_GRO stays on for a rank
	 * that reads it"). */
	int gro;
	uint64_t bulk_spells; /* times the endpoint turned bulk (information) */
	struct iwd_ep *ep;
	uint8_t txbuf[W_FP_RD_COPY_LEN]; /* header and payload gathered */
	struct iwvi_fp_rd_rma rma;       /* the rank's pending Writes (iwd_fastpath_rma.c) */
	struct iwvi_fp_rd_reqs reqs;     /* the rank's Reads and atomics (iwd_fastpath_req.c) */
};

void iwd_fprd_attach(struct iwd_ep *ep)
{
	struct iwd_fprd *f;
	/* The rank's RD codec follows the QP's CRC setting (c/core fprd.c:
	 * FI_IWARPD_DGRAM_CRC=off makes QPs with no_crc, whose datagrams
	 * carry a zero trailer that nobody checks). */
	if (!iwd_env.fastpath_rdm || !ep->qp || ep->fprd || iwv_qp_socket(ep->qp) < 0)
		return;
	f = calloc(1, sizeof(*f));
	if (!f)
		return;
	f->gro = -1;
	if (iwvi_fp_rd_attach(ep->qp, &f->rd) < 0) {
		IWD_INFO(FI_LOG_EP_CTRL, "iwarpd: no fast path for this RDM endpoint: %s\n", iwv_last_error(ep->dom->fab->s));
		free(f);
		return;
	}
	f->rd.batch = 1; /* iwd_fprd_progress flushes: before any completion the application reads */
	f->rd.reqs = &f->reqs;
	f->ep = ep;
	ep->fprd = f;
	iwvi_fp_own_acquire(&f->rd.own); /* the engine gives it at the end of a service */
}

void iwd_fprd_detach(struct iwd_ep *ep)
{
	if (!ep->fprd)
		return;
	IWD_INFO(FI_LOG_EP_DATA, "iwarpd: RDM fast path: %llu writes sent by the rank, %llu completed on an ACK, %llu at a hand-back, %llu failed\n",
		 (unsigned long long)ep->fprd->rma.writes, (unsigned long long)ep->fprd->rma.on_ack,
		 (unsigned long long)ep->fprd->rma.on_handback, (unsigned long long)ep->fprd->rma.flushed);
	IWD_INFO(FI_LOG_EP_DATA, "iwarpd: RDM fast path: %llu reads and %llu atomics sent by the rank, %llu completed on their "
		 "response, %llu after a take-over, %llu in error, %llu flushed\n",
		 (unsigned long long)ep->fprd->reqs.reads, (unsigned long long)ep->fprd->reqs.atomics,
		 (unsigned long long)ep->fprd->reqs.on_resp, (unsigned long long)ep->fprd->reqs.on_handback,
		 (unsigned long long)ep->fprd->reqs.failed, (unsigned long long)ep->fprd->reqs.flushed);
	IWD_INFO(FI_LOG_EP_DATA, "iwarpd: RDM fast path: served by the rank as a target: %llu Write-Records, %llu Reads, "
		 "%llu atomics (%llu CmpSwap, %llu of them finding another value)\n",
		 (unsigned long long)ep->fprd->rd.rma_wrecs, (unsigned long long)ep->fprd->rd.rma_reads,
		 (unsigned long long)ep->fprd->rd.rma_atomics, (unsigned long long)ep->fprd->rd.rma_cmpswaps,
		 (unsigned long long)ep->fprd->rd.rma_cmpswaps_unequal);
	IWD_INFO(FI_LOG_EP_DATA, "iwarpd: RDM fast path: %llu sends sent by the rank, %llu taken, %llu refused for a full window, "
		 "%llu datagrams in %llu flushes\n",
		 (unsigned long long)ep->fprd->rd.sent, (unsigned long long)ep->fprd->rd.taken,
		 (unsigned long long)ep->fprd->window_full, (unsigned long long)ep->fprd->rd.flushed,
		 (unsigned long long)ep->fprd->rd.flushes);
	IWD_INFO(FI_LOG_EP_DATA, "iwarpd: RDM fast path: %llu ACKs in, %llu ACKs out, %llu releases, %llu renewals "
		 "(%llu found the daemon owning), %llu take-overs and %llu hand-backs by the daemon, %llu bulk spells "
		 "(the socket left with the daemon)\n",
		 (unsigned long long)ep->fprd->rd.acks_in, (unsigned long long)ep->fprd->rd.acks_out,
		 (unsigned long long)ep->fprd->rd.released, (unsigned long long)ep->fprd->rd.own.renews,
		 (unsigned long long)ep->fprd->rd.own.lost, (unsigned long long)iwvi_fp_own_takeovers(&ep->fprd->rd.own),
		 (unsigned long long)iwvi_fp_own_handbacks(&ep->fprd->rd.own), (unsigned long long)ep->fprd->bulk_spells);
	iwvi_fp_rd_detach(&ep->fprd->rd);
	free(ep->fprd);
	ep->fprd = NULL;
}

/* deliver: a Send the rank took from slot's peer, in order. */
static void deliver(void *arg, int slot, const uint8_t *payload, size_t len, uint32_t imm, int has_imm)
{
	static const uint8_t v4prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	struct iwd_fprd *f = arg;
	struct sockaddr_in peer;
	struct iwv_wc wc;
	IWD_UNUSED(imm);
	IWD_UNUSED(has_imm); /* RDM sends none (its CQ data is in the header) */
	memset(&wc, 0, sizeof(wc));
	wc.status = IWV_WC_SUCCESS;
	wc.opcode = IWV_WC_RECV;
	wc.byte_len = (uint32_t)len;
	if (iwvi_fp_rd_peer(&f->rd, slot, &peer) == 0) {
		memcpy(wc.src_ip, v4prefix, 12);
		memcpy(wc.src_ip + 12, &peer.sin_addr, 4);
		wc.src_port = ntohs(peer.sin_port);
		wc.flags |= IWV_WC_FLAG_SRC_VALID;
	}
	iwd_rdm_rx_msg(f->ep, payload, (uint32_t)len, &wc);
}

/* fprd_gro sets UDP_GRO on the socket as f->gro says it should be. A
 * kernel that refuses leaves it as it was, and so does a receive queue
 * not empty when it is to go off (iwvi_fp_own_set_gro: a buffer coalesced
 * before would be read as one datagram; the next hand-back tries again):
 * the rank leaves coalesced buffers to the daemon either way (fprd.c). */
static void fprd_gro(struct iwd_fprd *f, int on)
{
	if (f->gro == on)
		return;
	if (iwvi_fp_own_set_gro(&f->rd.own, on) == 0)
		f->gro = on;
}

int iwd_fprd_progress(struct iwd_ep *ep)
{
	struct iwd_fprd *f = ep->fprd;
	uint64_t released;
	if (!f || ep->dom->dead)
		return 0;
	/* The rank's queued Sends go out at every progress (iwvi_fp_rd_flush):
	 * their completions, already in the CQ, are read after one. */
	iwvi_fp_rd_flush(&f->rd);
	if (!f->owned) {
		/* Bulk: the socket stays with the daemon, which serves the
		 * endpoint's messages anyway (each multi-datagram message or
		 * rendezvous would take it back: a release, a wake-up of the
		 * engine and a hand-back per message). Only a hand-back of a
		 * Want from before is taken. */
		if (f->bulk && iwvi_now_ns() - f->bulk_at > IWD_FPRD_BULK_NS)
			f->bulk = 0;
		if (f->bulk && !iwvi_fp_own_owned(&f->rd.own))
			return 0;
		if (!iwvi_fp_own_renew(&f->rd.own))
			return 0; /* asked for it back (Want) */
		/* Just handed back: the daemon's completions of what it read
		 * are in the verbs CQ; they come first. The hand-back may
		 * give datagrams still unacknowledged back to the page's
		 * rings (verbsd rd/fastpath_out.go: responses, error messages
		 * and the rank's own copies the daemon took over, which it
		 * then forgets): while any is there, fi_close lingers for it
		 * (counted under this renewal, Busy set). Clearing the mark
		 * at every hand-back let a close destroy the QP with the
		 * rank's last Send given back unacknowledged and lost on the
		 * wire: its peer never got it (TestAtomicsNetns/rdm-loss5). */
		f->unacked = iwvi_fp_rd_outstanding(&f->rd) > 0;
		/* UDP_GRO is switched while Busy is set, so that the engine
		 * does not read the socket between the switch and the check
		 * of its queue (iwvi_fp_own_set_gro), and set again at every
		 * hand-back: the engine turns it on when it takes the socket
		 * (verbsd rd/fastpath.go fpBegin). */
		f->gro = -1;
		fprd_gro(f, f->bulk);
		iwvi_fp_own_done(&f->rd.own);
		f->owned = 1;
		iwd_fprd_rma_reap(ep, &f->rd, &f->rma); /* handed back: what the daemon took over was acknowledged */
		iwd_fprd_req_reap(ep, &f->rd);           /* and every request it took over answered */
		return IWD_FP_REPOLL;
	}
	released = f->rd.released;
	iwvi_fp_rd_poll(&f->rd, FP_BATCH, deliver, f);
	iwd_fprd_rma_reap(ep, &f->rd, &f->rma);
	iwd_fprd_req_reap(ep, &f->rd);
	iwvi_fp_rd_flush(&f->rd); /* what deliver's handlers sent */
	if (!iwvi_fp_own_owned(&f->rd.own)) {
		f->owned = 0; /* released (a datagram for the daemon) or taken over */
		/* Left to the daemon: a segment of a larger message, or RDMA
		 * the rank does not serve (a Read of more than a datagram): a
		 * bulk message arrives (iwd_fprd_note). */
		if (f->rd.released != released &&
		    (f->rd.release_reason == FP_R_SEGMENTED || f->rd.release_reason == FP_R_TAGGED ||
		     f->rd.release_reason == FP_R_OPCODE))
			iwd_fprd_note(ep, SIZE_MAX, 0);
	} else if (f->unacked) {
		/* The slots are read under a renewal (Busy set, the Owner seen
		 * ours after it): the engine can take the socket over between
		 * an unguarded look at Owner and the read, and its import
		 * clears the slots, so that the rank would read "nothing
		 * outstanding" while the daemon holds its unacknowledged
		 * copies, and fi_close would destroy the QP (ep_linger) before
		 * the daemon resent them: a lost last message was never
		 * delivered (TestAtomicsNetns/rdm-loss5). */
		if (iwvi_fp_own_renew(&f->rd.own)) {
			if (iwvi_fp_rd_outstanding(&f->rd) == 0)
				f->unacked = 0;
			iwvi_fp_own_done(&f->rd.own);
		} else {
			f->owned = 0; /* taken over: the next hand-back counts what is still outstanding */
		}
	}
	return 0;
}

int iwd_fprd_send(struct iwd_ep *ep, const void *hdr, size_t hlen, const struct iovec *iov, size_t count, size_t len,
		  const struct iwv_av *av)
{
	struct iwd_fprd *f = ep->fprd;
	struct sockaddr_storage ss;
	int slot, ret;
	if (!f || !f->owned || ep->sq_used || !av || hlen + len > f->rd.max_payload || hlen + len > sizeof(f->txbuf))
		return -FI_EAGAIN;
	if (iwv_av_to_sockaddr(av, &ss) < 0 || ss.ss_family != AF_INET)
		return -FI_EAGAIN;
	slot = iwvi_fp_rd_slot(&f->rd, (const struct sockaddr_in *)&ss);
	if (slot < 0)
		return -FI_EAGAIN;
	memcpy(f->txbuf, hdr, hlen);
	iwd_iov_copy_out(f->txbuf + hlen, iov, count, len);
	ret = iwvi_fp_rd_send(&f->rd, slot, f->txbuf, hlen + len, 0);
	if (ret == -ENOBUFS) {
		/* The peer's window or our ring is full: take its ACK (the
		 * datagram that filled it asked for one at once) and try
		 * again; still full, the application retries after progress
		 * (-FI_ENOBUFS), rather than the socket going back to the
		 * daemon for a message that only has to wait for an ACK. */
		iwd_fprd_progress(ep);
		if (!f->owned || ep->sq_used)
			return -FI_EAGAIN;
		slot = iwvi_fp_rd_slot(&f->rd, (const struct sockaddr_in *)&ss);
		if (slot < 0)
			return -FI_EAGAIN;
		ret = iwvi_fp_rd_send(&f->rd, slot, f->txbuf, hlen + len, 0);
		if (ret == -ENOBUFS) {
			f->window_full++;
			f->blocked = 1;
			return -FI_ENOBUFS;
		}
	}
	if (ret < 0)
		return -FI_EAGAIN;
	f->unacked = 1;
	f->blocked = 0;
	return 0;
}

void iwd_fprd_note(struct iwd_ep *ep, size_t octets, int rndv)
{
	struct iwd_fprd *f = ep->fprd;
	if (!f)
		return;
	if (rndv || octets > f->rd.max_payload) {
		if (!f->bulk)
			f->bulk_spells++;
		f->bulk = 1;
		f->small_run = 0;
		f->bulk_at = iwvi_now_ns();
		fprd_gro(f, 1);
	} else if (f->bulk && ++f->small_run >= IWD_FPRD_SMALL_RUN) {
		f->bulk = 0; /* the next progress asks for the socket back */
	}
}

void iwd_fprd_leave(struct iwd_ep *ep, size_t octets)
{
	struct iwd_fprd *f = ep->fprd;
	if (!f)
		return;
	iwd_fprd_note(ep, octets, 1);
	iwvi_fp_rd_flush(&f->rd);
	iwvi_fp_own_withdraw(&f->rd.own);
	f->owned = 0;
}

int iwd_fprd_unacked(struct iwd_ep *ep)
{
	return ep->fprd && ep->fprd->unacked;
}

int iwd_fprd_describe(const struct iwd_ep *ep, char *buf, size_t len)
{
	const struct iwd_fprd *f = ep->fprd;
	if (!f)
		return snprintf(buf, len, "no RDM fast path");
	return snprintf(buf, len,
			"socket %s, %s, %u of the rank's datagrams outstanding in the page, %llu sends by the rank, "
			"%llu releases, %d Writes pending",
			f->owned ? "the rank's" : "with the daemon", f->unacked ? "sends unacknowledged" : "sends acknowledged",
			f->owned ? iwvi_fp_rd_outstanding(&f->rd) : 0, (unsigned long long)f->rd.sent,
			(unsigned long long)f->rd.released, (int)f->rma.n);
}

void iwd_fprd_before_post(struct iwd_ep *ep)
{
	struct iwd_fprd *f = ep->fprd;
	if (!f)
		return;
	iwvi_fp_rd_release(&f->rd);
	f->owned = 0;
}

void iwd_fprd_idle(struct iwd_ep *ep)
{
	iwd_fprd_before_post(ep);
}

/* ---- RMA Writes the rank sends itself (iwd_fastpath_rma.c) ---- */

int iwd_fprd_write(struct iwd_ep *ep, const struct iovec *iov, size_t count, size_t len, const struct iwv_av *av,
		   uint64_t addr, uint64_t key, void *context, uint64_t op_flags)
{
	struct iwd_fprd *f = ep->fprd;
	if (!f || !f->owned || ep->sq_used)
		return -FI_EAGAIN;
	return iwd_fprd_rma_write(ep, &f->rd, &f->rma, iov, count, len, av, addr, key, context, op_flags);
}

int iwd_fprd_read(struct iwd_ep *ep, void *buf, size_t len, const struct iwv_av *av, uint64_t addr, uint64_t key,
		  void *context, uint64_t op_flags)
{
	struct iwd_fprd *f = ep->fprd;
	if (!f || !f->owned || ep->sq_used)
		return -FI_EAGAIN;
	return iwd_fprd_req_read(ep, &f->rd, buf, len, av, addr, key, context, op_flags);
}

int iwd_fprd_atomic(struct iwd_ep *ep, int op, uint64_t operand, uint64_t compare, void *result,
		    const struct iwv_av *av, uint64_t addr, uint64_t key, void *context, uint64_t flags, uint64_t op_flags,
		    int cntr_kind)
{
	struct iwd_fprd *f = ep->fprd;
	if (!f || !f->owned || ep->sq_used)
		return -FI_EAGAIN;
	return iwd_fprd_req_atomic(ep, &f->rd, op, operand, compare, result, av, addr, key, context, flags, op_flags,
				   cntr_kind);
}

void iwd_fprd_qp_failed(struct iwd_ep *ep)
{
	if (ep->fprd) {
		iwd_fprd_rma_fail(ep, &ep->fprd->rma);
		iwd_fprd_req_fail(ep, &ep->fprd->rd);
	}
}

int iwd_fprd_pending(const struct iwd_ep *ep)
{
	return ep->fprd ? (int)(ep->fprd->rma.n + ep->fprd->reqs.n + ep->fprd->reqs.ndone) : 0;
}

int iwd_fprd_owned(const struct iwd_ep *ep)
{
	return ep->fprd && ep->fprd->owned && !ep->fprd->blocked;
}

int iwd_fprd_with_daemon(const struct iwd_ep *ep)
{
	const struct iwd_fprd *f = ep->fprd;
	if (!f)
		return 1;
	return f->bulk && !f->owned && !iwvi_fp_own_owned(&f->rd.own) && !iwd_fprd_pending(ep);
}

int iwd_fprd_in_spell(const struct iwd_ep *ep)
{
	return ep->fprd && ep->fprd->bulk;
}

void iwd_fprd_park(struct iwd_ep *ep)
{
	struct iwd_fprd *f = ep->fprd;
	if (!f || f->owned)
		return;
	iwvi_fp_rd_flush(&f->rd);
	iwvi_fp_own_withdraw(&f->rd.own);
}
