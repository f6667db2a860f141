/*
 * iwd_fastpath.c — an endpoint's rank reads and sends on its UD QP's own
 * socket while the application polls (iwd_fastpath.h; docs/fastpath.md
 * "The provider", docs/libfabric.md "The fast path").
 *
 * The hand-over is c/core's (fpown.h): each read of the socket lies
 * between a renew (lease, Busy, Owner) and done; the engine takes the
 * socket over once the lease is older than the daemon's -fastpath-lease.
 * Posted receives follow the socket (fprq.h): the rank places into the
 * receive at the ring's consumer index and consumes it itself. Order of
 * completions: the verbs CQ is polled empty before the socket is read,
 * and again after every hand-back (IWD_FP_REPOLL); the rank's own
 * completions go into the provider's CQ (struct iwd_cq) at once, so what
 * the daemon completed before it gave the socket back comes first, and
 * what the rank completed comes before anything the daemon completes after
 * a take-over. A datagram the rank does not serve (several datagrams,
 * Write-Record, a Terminate, anything malformed, a Send larger than the
 * receive) stays in the socket and the socket goes to the daemon, which
 * serves it as always.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>

#include "iwd_fastpath.h"

#include "fastpath.h"
#include "fpown.h"
#include "fprq.h"

/* At most this many datagrams per progress call: a rank that polls comes
 * back within microseconds, and the CQ is polled in between. */
#define FP_BATCH 16

struct iwd_fp {
	struct iwvi_fp_own own;
	int owned;            /* the last renew found the socket ours */
	uint32_t qkey;        /* our QP's Q_Key */
	uint32_t msn;         /* MSN of the Sends the rank sends (see iwd_fp_send) */
	size_t max_payload;   /* largest Send one datagram carries */
	uint8_t buf[FP_MAX_DATAGRAM + 1]; /* one peeked datagram; +1: a longer one shows as such */
	uint8_t txbuf[FP_MAX_DATAGRAM];   /* a gathered payload of several iovecs */
};

void iwd_fp_attach(struct iwd_ep *ep)
{
	struct iwd_fp *fp;
	int ret;
	if (!iwd_env.fastpath || !ep->qp || ep->fp || iwv_qp_socket(ep->qp) < 0)
		return;
	fp = calloc(1, sizeof(*fp));
	if (!fp)
		return;
	ret = iwvi_fp_own_attach(ep->qp, &fp->own);
	if (ret < 0) {
		IWD_INFO(FI_LOG_EP_CTRL, "iwarpd: no fast path for this endpoint: %s\n", iwv_last_error(ep->dom->fab->s));
		free(fp);
		return;
	}
	iwvi_fp_rq_attach(&fp->own); /* its receives follow the socket: no doorbell for them while the rank owns it */
	fp->qkey = iwv_qp_qkey(ep->qp);
	fp->msn = 0x80000000u;
	fp->max_payload = iwvi_fp_max_payload(ep->dom->fab->dev.datagram_size, 0, 0);
	ep->fp = fp;
	iwvi_fp_own_acquire(&fp->own); /* ask for the socket: the engine gives it at the end of a service */
}

void iwd_fp_detach(struct iwd_ep *ep)
{
	if (!ep->fp)
		return;
	iwvi_fp_own_detach(&ep->fp->own);
	free(ep->fp);
	ep->fp = NULL;
}

/* give_back leaves the head datagram to the daemon with the socket. */
static void give_back(struct iwd_fp *fp)
{
	iwvi_fp_own_release(&fp->own); /* ends Busy too */
	fp->owned = 0;
}

static void src_of(const struct sockaddr_storage *ss, struct iwv_wc *wc)
{
	static const uint8_t v4prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
		memcpy(wc->src_ip, v4prefix, 12);
		memcpy(wc->src_ip + 12, &in->sin_addr, 4);
		wc->src_port = ntohs(in->sin_port);
	} else {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
		memcpy(wc->src_ip, &in6->sin6_addr, 16);
		wc->src_port = ntohs(in6->sin6_port);
	}
	wc->flags |= IWV_WC_FLAG_SRC_VALID;
}

/* place copies the payload across the receive's SGEs; 0, or -1 when it
 * does not fit (the daemon completes that receive with its error). */
static int place(const struct iwvi_fp_rqe *rqe, const uint8_t *p, size_t n)
{
	size_t cap = 0, i;
	for (i = 0; i < rqe->num_sge; i++)
		cap += rqe->sge[i].length;
	if (n > cap)
		return -1;
	for (i = 0; i < rqe->num_sge && n; i++) {
		size_t c = n < rqe->sge[i].length ? n : rqe->sge[i].length;
		memcpy((void *)(uintptr_t)rqe->sge[i].addr, p, c);
		p += c;
		n -= c;
	}
	return 0;
}

/* one serves the datagram at the head of the socket, between a renew and
 * done: 1 placed and completed into *wc, 0 nothing to do now (empty, no
 * receive posted), -1 given to the daemon. */
static int one(struct iwd_fp *fp, struct iwv_wc *wc)
{
	struct sockaddr_storage ss;
	struct iwvi_fp_rqe rqe;
	struct fp_rx rx;
	struct fp_rx_qp q = {.qkey = fp->qkey, .crc = (uint8_t)fp->own.crc}; /* the QP's (FI_IWARPD_DGRAM_CRC) */
	ssize_t n;
	int ret;

	n = iwvi_fp_own_recv(&fp->own, fp->buf, sizeof(fp->buf), MSG_PEEK, &ss);
	if (n == -EAGAIN)
		return 0;
	if (n < 0 || (size_t)n >= sizeof(fp->buf) ||
	    iwvi_fp_ud_classify(fp->buf, (size_t)n, &q, &rx) != FP_CLASS_SEND) {
		give_back(fp); /* the daemon serves it (and counts what it drops) */
		return -1;
	}
	ret = iwvi_fp_rq_head(&fp->own, &rqe);
	if (ret == -EAGAIN)
		return 0; /* no receive: the Send waits in the socket, as the daemon leaves it (parked) */
	if (ret < 0 || place(&rqe, fp->buf + rx.payload_off, rx.payload_len) < 0) {
		give_back(fp); /* too long for the receive, or more SGEs than we place: the daemon's */
		return -1;
	}
	if (iwvi_fp_own_drop(&fp->own) < 0 || iwvi_fp_rq_consume(&fp->own) < 0) {
		/* Cannot be: we own the socket and peeked it. The receive is
		 * not consumed: the daemon places the datagram again. */
		give_back(fp);
		return -1;
	}
	memset(wc, 0, sizeof(*wc));
	wc->wr_id = rqe.wr_id;
	wc->status = IWV_WC_SUCCESS;
	wc->opcode = IWV_WC_RECV;
	wc->byte_len = rx.payload_len;
	wc->qp_num = 0;
	if (rx.solicited)
		wc->flags |= IWV_WC_FLAG_SOLICITED;
	if (rx.has_imm) {
		wc->flags |= IWV_WC_FLAG_IMM;
		wc->imm = rx.imm;
	}
	src_of(&ss, wc);
	return 1;
}

int iwd_fp_progress(struct iwd_ep *ep)
{
	struct iwd_fp *fp = ep->fp;
	struct iwv_wc wc;
	int i, r;
	if (!fp || ep->dom->dead)
		return 0;
	for (i = 0; i < FP_BATCH; i++) {
		if (!iwvi_fp_own_renew(&fp->own)) {
			fp->owned = 0; /* asked for it back (Want) */
			return 0;
		}
		if (!fp->owned) {
			/* Just handed back: the daemon's completions of what it
			 * read are in the verbs CQ; they come first. */
			iwvi_fp_own_done(&fp->own);
			fp->owned = 1;
			return IWD_FP_REPOLL;
		}
		r = one(fp, &wc);
		if (r < 0)
			return 0; /* released: Busy is clear */
		iwvi_fp_own_done(&fp->own);
		if (r == 0)
			return 0;
		ep->ops->wc(ep, &wc);
	}
	return 0;
}

int iwd_fp_send(struct iwd_ep *ep, const struct iovec *iov, size_t count, size_t len, const struct iwv_av *av)
{
	struct iwd_fp *fp = ep->fp;
	struct fp_send s;
	struct fp_dgram d;
	struct sockaddr_storage ss;
	socklen_t sl;
	struct msghdr mh;
	const void *payload = NULL;
	static const uint8_t v4prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

	/* Only while the rank owns the socket, and behind no send of ours the
	 * daemon still has (send after send order, FI_ORDER_SAS). */
	if (!fp || !fp->owned || ep->sq_used || len > fp->max_payload || !av || !iwvi_fp_own_owned(&fp->own))
		return -FI_EAGAIN;
	if (count == 1)
		payload = iov[0].iov_base;
	else if (count > 1) {
		iwd_iov_copy_out(fp->txbuf, iov, count, len);
		payload = fp->txbuf;
	}
	memset(&ss, 0, sizeof(ss));
	if (av->family == 4 && !memcmp(av->ip, v4prefix, 12)) {
		struct sockaddr_in *in = (struct sockaddr_in *)&ss;
		in->sin_family = AF_INET;
		in->sin_port = htons(av->port);
		memcpy(&in->sin_addr, av->ip + 12, 4);
		sl = sizeof(*in);
	} else {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(av->port);
		memcpy(&in6->sin6_addr, av->ip, 16);
		sl = sizeof(*in6);
	}
	/* The MSN: the daemon numbers this QP's Sends from 1 and the rank
	 * from 2^31, so the two never meet in practice; a receiver keys only
	 * the segments of larger messages by MSN (verbsd/ud reassembly), and
	 * the rank sends whole ones. */
	memset(&s, 0, sizeof(s));
	s.qkey = IWD_QKEY;
	s.src_qkey = fp->qkey;
	s.msn = fp->msn++;
	s.last = 1;
	s.crc = (uint8_t)fp->own.crc;
	if (iwvi_fp_send_iov(&d, &s, NULL, payload, len) < 0)
		return -FI_EAGAIN;
	memset(&mh, 0, sizeof(mh));
	mh.msg_name = &ss;
	mh.msg_namelen = sl;
	mh.msg_iov = d.iov;
	mh.msg_iovlen = (size_t)d.iovcnt;
	/* MSG_DONTWAIT always: the file description is shared with the
	 * engine. A full socket buffer or any error: the daemon sends it. */
	if (sendmsg(fp->own.sock, &mh, MSG_DONTWAIT) != (ssize_t)d.len)
		return -FI_EAGAIN;
	return 0;
}

void iwd_fp_idle(struct iwd_ep *ep)
{
	if (ep->fp && ep->fp->owned)
		give_back(ep->fp);
}

int iwd_fp_owned(const struct iwd_ep *ep)
{
	return ep->fp && ep->fp->owned;
}
