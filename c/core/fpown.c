/*
 * fpown.c — the rank's side of the hand-over of a UD QP's socket
 * (fpown.h; proto/fastpath.go is the layout's reference).
 */
#include <errno.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fpown.h"

static uint32_t *word32(const struct iwvi_fp_own *o, size_t off)
{
	return (uint32_t *)(void *)(o->page + off);
}

static int64_t *lease_word(const struct iwvi_fp_own *o)
{
	return (int64_t *)(void *)(o->page + W_OFF_FP_LEASE);
}

static uint64_t *word64(const struct iwvi_fp_own *o, size_t off)
{
	return (uint64_t *)(void *)(o->page + off);
}

int iwvi_fp_own_attach(struct iwv_qp *qp, struct iwvi_fp_own *o)
{
	return iwvi_fp_own_attach_flags(qp, o, 0);
}

int iwvi_fp_own_attach_flags(struct iwv_qp *qp, struct iwvi_fp_own *o, uint16_t flags)
{
	struct iwv_session *s = qp->s;
	memset(o, 0, sizeof *o);
	o->sock = -1;
	if (qp->type != IWV_QPT_UD && qp->type != IWV_QPT_RD)
		return iwvi_seterr(s, EOPNOTSUPP, "fastpath-page: only UD and RD QPs have a fast path");
	if (qp->sock < 0)
		return iwvi_seterr(s, EINVAL, "fastpath-page: QP %u's socket is iwarpd's (%s=daemon or another network namespace): "
					      "the fast path reads the process's own socket", qp->handle, IWV_ENV_QP_SOCKET);
	struct region r;
	/* An RD QP's page carries its RD halves (fprd.h). */
	int err = iwvi_region_create(&r, "fastpath", qp->type == IWV_QPT_RD ? W_FP_RD_PAGE_LEN : W_FP_PAGE_LEN);
	if (err < 0)
		return iwvi_seterr(s, -err, "fastpath-page: a page for QP %u: %s", qp->handle, strerror(-err));
	w_put32((uint8_t *)r.mem + W_OFF_FP_MAGIC, W_FP_MAGIC);
	w_put16((uint8_t *)r.mem + W_OFF_FP_VERSION, W_FP_VERSION);
	w_put16((uint8_t *)r.mem + W_OFF_FP_FLAGS, flags);
	json_t *req = json_object();
	if (!req || iwvi_jset_u64(req, "qp", qp->handle)) {
		json_decref(req);
		iwvi_region_close(&r);
		return iwvi_seterr(s, ENOMEM, "fastpath-page");
	}
	json_t *rep = NULL;
	int fds[1] = {r.fd};
	int rc = iwvi_call(s, W_OP_FASTPATH_PAGE, req, fds, 1, &rep);
	json_decref(rep);
	if (rc < 0) {
		iwvi_region_close(&r);
		return rc;
	}
	close(r.fd); /* the daemon has its own; the mapping stays */
	o->qp = qp;
	o->sock = qp->sock;
	o->crc = !qp->no_crc;
	o->page = r.mem;
	o->len = r.len;
	return 0;
}

void iwvi_fp_own_detach(struct iwvi_fp_own *o)
{
	if (o->page)
		munmap(o->page, o->len);
	o->page = NULL;
	o->qp = NULL;
	o->sock = -1;
}

int iwvi_fp_own_owned(const struct iwvi_fp_own *o)
{
	return __atomic_load_n(word32(o, W_OFF_FP_OWNER), __ATOMIC_ACQUIRE) == W_FP_OWNER_RANK;
}

void iwvi_fp_own_want(struct iwvi_fp_own *o)
{
	uint32_t *want = word32(o, W_OFF_FP_WANT);
	if (__atomic_load_n(want, __ATOMIC_RELAXED) == 0)
		__atomic_store_n(want, 1, __ATOMIC_SEQ_CST);
	/* After the sequentially consistent store (or one before it): the
	 * engine stores Asleep, then rescans its QPs' work (Want included). */
	iwvi_ring_doorbell(o->qp->s);
}

int iwvi_fp_own_acquire(struct iwvi_fp_own *o)
{
	if (iwvi_fp_own_owned(o))
		return 1;
	iwvi_fp_own_want(o);
	return 0;
}

int iwvi_fp_own_renew(struct iwvi_fp_own *o)
{
	uint32_t *busy = word32(o, W_OFF_FP_BUSY);
	o->renews++;
	__atomic_store_n(lease_word(o), iwvi_now_ns(), __ATOMIC_RELAXED);
	/* Dekker with the engine: Busy is stored, a full barrier, then Owner
	 * is loaded (seq_cst store and load); the engine compares-and-swaps
	 * Owner, then loads Busy. If we see our Owner, the engine sees Busy
	 * and does not read until we clear it. */
	__atomic_store_n(busy, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(word32(o, W_OFF_FP_OWNER), __ATOMIC_SEQ_CST) == W_FP_OWNER_RANK) {
		o->in_busy = 1;
		return 1;
	}
	__atomic_store_n(busy, 0, __ATOMIC_RELEASE);
	o->lost++;
	iwvi_fp_own_want(o);
	return 0;
}

void iwvi_fp_own_done(struct iwvi_fp_own *o)
{
	o->in_busy = 0;
	/* Release: every read of this renew happens before the engine can
	 * see Busy clear and read the socket itself. */
	__atomic_store_n(word32(o, W_OFF_FP_BUSY), 0, __ATOMIC_RELEASE);
}

int iwvi_fp_own_release(struct iwvi_fp_own *o)
{
	uint32_t expect = W_FP_OWNER_RANK;
	if (o->in_busy)
		iwvi_fp_own_done(o);
	int ok = __atomic_compare_exchange_n(word32(o, W_OFF_FP_OWNER), &expect, W_FP_OWNER_DAEMON, 0, __ATOMIC_SEQ_CST,
					     __ATOMIC_SEQ_CST);
	if (ok)
		iwvi_ring_doorbell(o->qp->s);
	return ok;
}

void iwvi_fp_own_withdraw(struct iwvi_fp_own *o)
{
	/* Want first (sequentially consistent): an engine serving the QP
	 * after this store gives nothing back; one that gave it back before
	 * has stored Owner = rank, which the load below sees. */
	__atomic_store_n(word32(o, W_OFF_FP_WANT), 0, __ATOMIC_SEQ_CST);
	if (iwvi_fp_own_owned(o))
		iwvi_fp_own_release(o);
}

ssize_t iwvi_fp_own_recv(struct iwvi_fp_own *o, void *buf, size_t cap, int flags, struct sockaddr_storage *src)
{
	if (!o->in_busy)
		return -EPERM;
	socklen_t sl = sizeof *src;
	ssize_t n = recvfrom(o->sock, buf, cap, flags | MSG_DONTWAIT | MSG_TRUNC, (struct sockaddr *)src,
			     src ? &sl : NULL);
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	return n;
}

ssize_t iwvi_fp_own_peek_gro(struct iwvi_fp_own *o, void *buf, size_t cap, struct sockaddr_storage *src, int *coalesced)
{
	union {
		struct cmsghdr h;
		uint8_t b[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct iovec v = {.iov_base = buf, .iov_len = cap};
	struct msghdr m = {.msg_name = src, .msg_namelen = src ? sizeof *src : 0, .msg_iov = &v, .msg_iovlen = 1,
			   .msg_control = ctl.b, .msg_controllen = sizeof ctl.b};
	*coalesced = 0;
	if (!o->in_busy)
		return -EPERM;
	ssize_t n = recvmsg(o->sock, &m, MSG_PEEK | MSG_DONTWAIT | MSG_TRUNC);
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	/* A control buffer too small for what the kernel had (MSG_CTRUNC)
	 * is taken as coalesced too: the daemon reads it. */
	if (m.msg_flags & MSG_CTRUNC)
		*coalesced = 1;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
		if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO)
			*coalesced = 1;
	return n;
}

int iwvi_fp_own_set_gro(struct iwvi_fp_own *o, int on)
{
	if (o->sock < 0)
		return -EBADF;
	if (setsockopt(o->sock, SOL_UDP, UDP_GRO, &on, sizeof on) < 0)
		return -errno;
	if (on)
		return 0;
	/* A buffer the kernel coalesced while UDP_GRO was on stays whole in
	 * the receive queue, and once UDP_GRO is off recvmsg hands it over
	 * without its UDP_GRO control message (net/ipv4/udp.c: the message
	 * is written only while the socket has UDP_GRO on): read so, its
	 * datagrams look like one — the first's headers, the rest as its
	 * payload (a bad CRC; with CRC off, wrong octets delivered). Only an
	 * empty queue can be switched: what arrives from now on is segmented
	 * at the socket. Else UDP_GRO goes back on, so that whatever is
	 * queued is read with its control message, and the caller tries
	 * again later. (An RD datagram is never empty: a peek of 0 octets
	 * with MSG_TRUNC returns the length of the one at the head.) */
	uint8_t b;
	ssize_t n = recv(o->sock, &b, 0, MSG_PEEK | MSG_DONTWAIT | MSG_TRUNC);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	int one = 1;
	if (setsockopt(o->sock, SOL_UDP, UDP_GRO, &one, sizeof one) < 0)
		return -errno;
	return -EBUSY;
}

int iwvi_fp_own_drop(struct iwvi_fp_own *o)
{
	uint8_t b;
	ssize_t n = iwvi_fp_own_recv(o, &b, 0, 0, NULL);
	return n < 0 ? (int)n : 0;
}

uint64_t iwvi_fp_own_takeovers(const struct iwvi_fp_own *o)
{
	return __atomic_load_n(word64(o, W_OFF_FP_TAKEOVERS), __ATOMIC_RELAXED);
}

uint64_t iwvi_fp_own_handbacks(const struct iwvi_fp_own *o)
{
	return __atomic_load_n(word64(o, W_OFF_FP_HANDBACKS), __ATOMIC_RELAXED);
}
