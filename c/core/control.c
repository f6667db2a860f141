/*
 * control.c — the control connection (proto/control.go): one message per
 * SOCK_SEQPACKET record, a 16-octet little-endian header (magic, version,
 * op, seq, status) and a JSON body, descriptors as SCM_RIGHTS (unix(7),
 * cmsg(3)). One request is in flight per session (the session mutex); events
 * that arrive meanwhile are queued (events.c). Sends use MSG_NOSIGNAL: a dead
 * daemon is -ENODEV, never SIGPIPE.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

static const char *const op_names[] = {
	[W_OP_HELLO] = "hello", [W_OP_QUERY_DEVICE] = "query-device", [W_OP_QUERY_PORT] = "query-port",
	[W_OP_ALLOC_PD] = "alloc-pd", [W_OP_DEALLOC_PD] = "dealloc-pd", [W_OP_REG_MR] = "reg-mr",
	[W_OP_DEREG_MR] = "dereg-mr", [W_OP_CREATE_COMP_CHANNEL] = "create-comp-channel",
	[W_OP_DESTROY_COMP_CHANNEL] = "destroy-comp-channel", [W_OP_CREATE_CQ] = "create-cq",
	[W_OP_DESTROY_CQ] = "destroy-cq", [W_OP_CREATE_QP] = "create-qp", [W_OP_MODIFY_QP] = "modify-qp",
	[W_OP_QUERY_QP] = "query-qp", [W_OP_DESTROY_QP] = "destroy-qp", [W_OP_CREATE_SRQ] = "create-srq",
	[W_OP_DESTROY_SRQ] = "destroy-srq", [W_OP_INSPECT] = "inspect", [W_OP_LISTEN] = "listen",
	[W_OP_CLOSE_LISTENER] = "close-listener", [W_OP_ACCEPT] = "accept", [W_OP_REJECT] = "reject",
	[W_OP_CONNECT] = "connect", [W_OP_DISCONNECT] = "disconnect", [W_OP_ATTACH_MCAST] = "attach-mcast",
	[W_OP_DETACH_MCAST] = "detach-mcast", [W_OP_RESERVE_PORT] = "reserve-port",
};

static const char *op_name(unsigned op)
{
	if (op < sizeof op_names / sizeof op_names[0] && op_names[op])
		return op_names[op];
	return "request";
}

#define MSG_DAEMON_GONE "iwarpd: daemon closed the session; restart iwarpd and open a new session"

int64_t iwvi_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int iwvi_poll_ms(int64_t deadline)
{
	if (deadline < 0)
		return -1;
	int64_t left = deadline - iwvi_now_ns();
	if (left <= 0)
		return -ETIMEDOUT;
	return (int)((left + 999999) / 1000000);
}

int iwvi_send_msg(int sock, uint16_t version, uint16_t op, uint32_t seq, const char *body, size_t len, const int *fds,
	     int nfds)
{
	uint8_t hdr[W_HEADER_LEN];
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * W_MAX_FDS)];
	} cm;
	struct iovec iov[2] = {{hdr, sizeof hdr}, {(void *)(uintptr_t)body, len}};
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = len ? 2 : 1};

	if (nfds > W_MAX_FDS || W_HEADER_LEN + len > W_MAX_MESSAGE)
		return -EMSGSIZE;
	w_put32(hdr, W_MAGIC);
	w_put16(hdr + 4, version);
	w_put16(hdr + 6, op);
	w_put32(hdr + 8, seq);
	w_put32(hdr + 12, 0);
	if (nfds > 0) {
		memset(&cm, 0, sizeof cm);
		mh.msg_control = cm.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
	}
	for (;;) {
		ssize_t n = sendmsg(sock, &mh, MSG_NOSIGNAL);
		if (n >= 0)
			return 0;
		if (errno == EINTR)
			continue;
		if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN || errno == EBADF)
			return -ENODEV;
		return -errno;
	}
}

int iwvi_recv_msg(int sock, uint8_t *buf, int timeout_ms, size_t *len, int *fds, int *nfds)
{
	int64_t deadline = timeout_ms < 0 ? -1 : iwvi_now_ns() + (int64_t)timeout_ms * 1000000LL;
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * W_MAX_FDS)];
	} cm;
	*nfds = 0;
	for (;;) {
		struct iovec iov = {buf, W_MAX_MESSAGE};
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof cm.buf};
		ssize_t n = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			int wait = iwvi_poll_ms(deadline);
			if (wait == -ETIMEDOUT)
				return -ETIMEDOUT;
			struct pollfd p = {.fd = sock, .events = POLLIN};
			if (poll(&p, 1, wait) < 0 && errno != EINTR)
				return -errno;
			continue;
		}
		if (n < 0)
			return errno == ECONNRESET || errno == ENOTCONN || errno == EBADF ? -ENODEV : -errno;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			for (int i = 0; i < k; i++) {
				int fd;
				memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
				if (*nfds < W_MAX_FDS)
					fds[(*nfds)++] = fd;
				else
					close(fd);
			}
		}
		if (n == 0)
			return -ENODEV;
		if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC) || n < W_HEADER_LEN || w_get32(buf) != W_MAGIC) {
			for (int i = 0; i < *nfds; i++)
				close(fds[i]);
			*nfds = 0;
			return -EPROTO;
		}
		*len = (size_t)n;
		return 0;
	}
}

void iwvi_session_end(struct iwv_session *s)
{
	__atomic_store_n(&s->dead, 1, __ATOMIC_RELEASE);
	iwvi_update_evfd(s);
}

int iwvi_session_dead(struct iwv_session *s)
{
	if (__atomic_load_n(&s->dead, __ATOMIC_ACQUIRE))
		return 1;
	int64_t now = iwvi_now_ns();
	if (now - __atomic_load_n(&s->last_check, __ATOMIC_RELAXED) < IWV_LIVENESS_NS)
		return 0;
	__atomic_store_n(&s->last_check, now, __ATOMIC_RELAXED);
	struct pollfd p = {.fd = s->sock, .events = 0};
	if (poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR | POLLNVAL))) {
		__atomic_store_n(&s->dead, 1, __ATOMIC_RELEASE);
		return 1;
	}
	return 0;
}

IWV_EXPORT int iwv_session_status(struct iwv_session *s)
{
	__atomic_store_n(&s->last_check, 0, __ATOMIC_RELAXED);
	return iwvi_session_dead(s) ? iwvi_seterr(s, ENODEV, MSG_DAEMON_GONE) : 0;
}

static void close_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		close(fds[i]);
}

/* handle_unsolicited dispatches an event; returns 1 if the message was one. */
static int handle_unsolicited(struct iwv_session *s, unsigned op, const uint8_t *body, size_t len)
{
	if (op == W_OP_EVENT) {
		iwvi_dispatch_event(s, body, len);
		return 1;
	}
	if (op == W_OP_CM_EVENT) {
		iwvi_dispatch_cm_event(s, body, len);
		return 1;
	}
	return 0;
}

int iwvi_pump(struct iwv_session *s)
{
	for (int i = 0; i < 4096; i++) {
		size_t len;
		int fds[W_MAX_FDS], nfds;
		int r = iwvi_recv_msg(s->sock, s->buf, 0, &len, fds, &nfds);
		close_fds(fds, nfds);
		if (r == -ETIMEDOUT)
			break;
		if (r == -EPROTO)
			continue;
		if (r < 0) {
			iwvi_session_end(s);
			break;
		}
		handle_unsolicited(s, w_get16(s->buf + 6), s->buf + W_HEADER_LEN, len - W_HEADER_LEN);
	}
	iwvi_update_evfd(s);
	return __atomic_load_n(&s->dead, __ATOMIC_ACQUIRE) ? -ENODEV : 0;
}

int iwvi_call_locked(struct iwv_session *s, enum w_op op, json_t *body, const int *fds, int nfds, json_t **reply)
{
	const char *name = op_name(op);
	char *text = NULL;
	size_t tlen = 0;
	int r;

	if (reply)
		*reply = NULL;
	if (__atomic_load_n(&s->dead, __ATOMIC_ACQUIRE)) {
		json_decref(body);
		return iwvi_seterr(s, ENODEV, "%s: " MSG_DAEMON_GONE, name);
	}
	if (body) {
		text = json_dumps(body, JSON_COMPACT);
		json_decref(body);
		if (!text)
			return iwvi_seterr(s, ENOMEM, "%s: encoding the request", name);
		tlen = strlen(text);
	}
	uint32_t seq = ++s->seq;
	r = iwvi_send_msg(s->sock, s->abi, (uint16_t)op, seq, text, tlen, fds, nfds);
	free(text);
	if (r == -ENODEV) {
		iwvi_session_end(s);
		return iwvi_seterr(s, ENODEV, "%s: " MSG_DAEMON_GONE, name);
	}
	if (r < 0)
		return iwvi_seterr(s, r, "%s: sending the request", name);
	s->calls++;
	s->reg_mr_calls += op == W_OP_REG_MR;
	s->dereg_mr_calls += op == W_OP_DEREG_MR;
	int64_t deadline = iwvi_now_ns() + (int64_t)IWV_CALL_TIMEOUT_MS * 1000000LL;
	for (;;) {
		size_t len;
		int rfds[W_MAX_FDS], rn;
		int64_t left = deadline - iwvi_now_ns();
		r = iwvi_recv_msg(s->sock, s->buf, left > 0 ? (int)(left / 1000000) : 0, &len, rfds, &rn);
		close_fds(rfds, rn); /* no reply after hello carries descriptors */
		if (r == -EPROTO)
			continue; /* a message we cannot read: skip it, as ofverbs does */
		if (r == -ETIMEDOUT)
			return iwvi_seterr(s, ETIMEDOUT, "%s: iwarpd did not answer within %d s", name, IWV_CALL_TIMEOUT_MS / 1000);
		if (r < 0) {
			iwvi_session_end(s);
			return iwvi_seterr(s, ENODEV, "%s: " MSG_DAEMON_GONE, name);
		}
		unsigned hop = w_get16(s->buf + 6);
		const uint8_t *b = s->buf + W_HEADER_LEN;
		size_t blen = len - W_HEADER_LEN;
		if (handle_unsolicited(s, hop, b, blen))
			continue;
		if (hop != (op | W_OP_REPLY) || w_get32(s->buf + 8) != seq)
			continue; /* stray */
		iwvi_update_evfd(s);
		uint16_t ver = w_get16(s->buf + 4);
		if (ver != IWV_ABI_VERSION)
			return iwvi_seterr(s, EPROTO,
				      "%s: ABI version mismatch: this client speaks version %d, the daemon %d; run a client and a daemon from the same release",
				      name, IWV_ABI_VERSION, ver);
		uint32_t status = w_get32(s->buf + 12);
		json_t *j = iwvi_jparse(b, blen);
		if (status) {
			char msg[400];
			iwvi_jget_str(j, "error", msg, sizeof msg);
			json_decref(j);
			return iwvi_seterr(s, (int)status, "%s: %s", name, msg);
		}
		if (blen > 0 && !j)
			return iwvi_seterr(s, EPROTO, "%s: undecodable reply body", name);
		if (reply)
			*reply = j;
		else
			json_decref(j);
		return 0;
	}
}

int iwvi_call(struct iwv_session *s, enum w_op op, json_t *body, const int *fds, int nfds, json_t **reply)
{
	pthread_mutex_lock(&s->mu);
	int r = iwvi_call_locked(s, op, body, fds, nfds, reply);
	pthread_mutex_unlock(&s->mu);
	return r;
}

/* destroy_handle asks the daemon to destroy an object. On a session that is
 * over there is nothing to destroy (the daemon dropped everything): 0. */
int iwvi_destroy_handle(struct iwv_session *s, enum w_op op, uint32_t handle)
{
	json_t *b = json_object();
	if (!b || iwvi_jset_u64(b, "handle", handle)) {
		json_decref(b);
		return iwvi_seterr(s, ENOMEM, "%s", op_name(op));
	}
	int r = iwvi_call(s, op, b, NULL, 0, NULL);
	if (r == -ENODEV)
		return 0;
	return r;
}

IWV_EXPORT void iwv_session_stats(struct iwv_session *s, struct iwv_session_stats *out)
{
	pthread_mutex_lock(&s->mu);
	out->control_calls = s->calls;
	out->reg_mr_calls = s->reg_mr_calls;
	out->dereg_mr_calls = s->dereg_mr_calls;
	pthread_mutex_unlock(&s->mu);
}
