/*
 * session.c — opening and closing a session (ofverbs/context.go): connect to
 * the control socket, Hello (ABI check), receive the doorbell eventfd and
 * the status page memfd, map the page read-only; device and port queries.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "internal.h"

IWV_EXPORT int iwv_default_socket(char *buf, size_t len)
{
	const char *env = getenv(IWV_ENV_SOCKET);
	int n;
	if (env && *env)
		n = snprintf(buf, len, "%s", env);
	else if (geteuid() == 0)
		n = snprintf(buf, len, "/run/iwarpd/iwarpd.sock");
	else if ((env = getenv("XDG_RUNTIME_DIR")) && *env)
		n = snprintf(buf, len, "%s/iwarpd/iwarpd.sock", env);
	else {
		const char *tmp = getenv("TMPDIR"); /* Go's os.TempDir */
		n = snprintf(buf, len, "%s/iwarpd-%u/iwarpd.sock", tmp && *tmp ? tmp : "/tmp", (unsigned)geteuid());
	}
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void free_session(struct iwv_session *s)
{
	close_fd(&s->sock);
	close_fd(&s->doorbell);
	close_fd(&s->async_efd);
	close_fd(&s->cm_efd);
	close_fd(&s->epfd);
	if (s->status.mem)
		munmap(s->status.mem, s->status.len);
	iwvi_evq_free(&s->async_q);
	iwvi_evq_free(&s->cm_q);
	free(s->buf);
	pthread_mutex_destroy(&s->mu);
	iwvi_rkeys_free(&s->rkeys);
	free(s);
}

/* hello exchanges Hello with the daemon (synchronously, before the session
 * is shared). On success the two descriptors are in fds. */
static int hello(struct iwv_session *s, const char *path, const char *client, int timeout_ms, int fds[2])
{
	/* The address space the session's application-memory MRs refer to:
	 * this process's own, opened by itself and handed over at hello
	 * (proto HelloRequest.ProcessMem, docs/memory-registration.md). Without
	 * /proc the session works and such registrations fail, saying why. */
	int memfd = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
	json_t *req = json_object();
	if (!req || iwvi_jset_u64(req, "abi", s->abi) || iwvi_jset_str(req, "client", client) ||
	    (memfd >= 0 && json_object_set_new(req, "process_mem", json_true()))) {
		json_decref(req);
		if (memfd >= 0)
			close(memfd);
		return iwvi_seterr_open(ENOMEM, "hello: encoding the request");
	}
	char *text = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	if (!text) {
		if (memfd >= 0)
			close(memfd);
		return iwvi_seterr_open(ENOMEM, "hello: encoding the request");
	}
	int r = iwvi_send_msg(s->sock, s->abi, W_OP_HELLO, 1, text, strlen(text), memfd >= 0 ? &memfd : NULL, memfd >= 0 ? 1 : 0);
	free(text);
	if (memfd >= 0)
		close(memfd);
	if (r < 0)
		return iwvi_seterr_open(ENODEV, "hello: iwarpd at %s closed the connection", path);
	int64_t deadline = iwvi_now_ns() + (int64_t)timeout_ms * 1000000LL;
	for (;;) {
		size_t len;
		int rfds[W_MAX_FDS], n;
		int64_t left = deadline - iwvi_now_ns();
		r = iwvi_recv_msg(s->sock, s->buf, left > 0 ? (int)(left / 1000000) : 0, &len, rfds, &n);
		if (r == -ETIMEDOUT)
			return iwvi_seterr_open(ETIMEDOUT, "hello: iwarpd at %s did not answer within %d ms", path, timeout_ms);
		if (r == -EPROTO)
			return iwvi_seterr_open(EPROTO, "hello: malformed message from %s", path);
		if (r < 0)
			return iwvi_seterr_open(ENODEV, "hello: iwarpd at %s closed the session", path);
		unsigned op = w_get16(s->buf + 6);
		uint16_t ver = w_get16(s->buf + 4);
		uint32_t status = w_get32(s->buf + 12);
		json_t *j = iwvi_jparse(s->buf + W_HEADER_LEN, len - W_HEADER_LEN);
		char msg[400] = "";
		iwvi_jget_str(j, "error", msg, sizeof msg);
		int ok = 0;
		if (op == W_OP_EVENT)
			r = 1; /* skip */
		else if (ver != IWV_ABI_VERSION)
			r = iwvi_seterr_open(EPROTO,
					"hello: ABI version mismatch: this client speaks version %d, the daemon %d; run a client and a daemon from the same release (daemon says: %s)",
					IWV_ABI_VERSION, ver, msg);
		else if (op != (W_OP_HELLO | W_OP_REPLY) || w_get32(s->buf + 8) != 1)
			r = iwvi_seterr_open(EPROTO, "hello: daemon answered op %#x seq %u", op, w_get32(s->buf + 8));
		else if (status)
			r = iwvi_seterr_open((int)status, "hello: %s", msg);
		else if (!j || iwvi_jget_u64(j, "abi") != IWV_ABI_VERSION)
			r = iwvi_seterr_open(EPROTO, "hello: reply undecodable or of another ABI");
		else if (n != 2)
			r = iwvi_seterr_open(EPROTO, "hello: reply carried %d descriptors, want 2 (doorbell, status page)", n);
		else
			ok = 1;
		if (!ok) {
			for (int i = 0; i < n; i++)
				close(rfds[i]);
			json_decref(j);
			if (r == 1)
				continue;
			return r;
		}
		iwvi_jget_str(j, "daemon", s->daemon, sizeof s->daemon);
		iwvi_jget_str(j, "device", s->device, sizeof s->device);
		iwvi_jget_str(j, "addr", s->addr, sizeof s->addr);
		s->id = iwvi_jget_u64(j, "session");
		s->netns_cookie = iwvi_jget_u64(j, "netns_cookie");
		json_decref(j);
		fds[0] = rfds[0];
		fds[1] = rfds[1];
		return 0;
	}
}

/* map_status maps the daemon's status page read-only (taking fd). */
static int map_status(struct iwv_session *s, int fd)
{
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW) || fstat(fd, &st) < 0 ||
	    st.st_size < W_STATUS_PAGE_LEN) {
		close(fd);
		return iwvi_seterr_open(EPROTO, "hello: the status page is not a sealed memfd of at least %d bytes", W_STATUS_PAGE_LEN);
	}
	void *mem = mmap(NULL, W_STATUS_PAGE_LEN, PROT_READ, MAP_SHARED, fd, 0);
	int err = errno;
	close(fd);
	if (mem == MAP_FAILED)
		return iwvi_seterr_open(err, "hello: mapping the status page");
	s->status.mem = mem;
	s->status.len = W_STATUS_PAGE_LEN;
	if (w_get32(mem) != W_STATUS_MAGIC)
		return iwvi_seterr_open(EPROTO, "hello: status page: bad magic %#x", w_get32(mem));
	s->asleep = (uint32_t *)(void *)((uint8_t *)mem + W_OFF_STATUS_ASLEEP);
	return 0;
}

IWV_EXPORT int iwv_open(const struct iwv_open_attr *attr, struct iwv_session **out)
{
	struct iwv_open_attr a = {0};
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int r, fds[2] = {-1, -1};

	*out = NULL;
	if (attr)
		a = *attr;
	if (a.socket) {
		if (strlen(a.socket) >= sizeof path)
			return iwvi_seterr_open(ENAMETOOLONG, "open: socket path %s", a.socket);
		strcpy(path, a.socket);
	} else if (iwv_default_socket(path, sizeof path) < 0) {
		return iwvi_seterr_open(ENAMETOOLONG, "open: the default socket path is too long");
	}
	struct iwv_session *s = calloc(1, sizeof *s);
	if (!s)
		return iwvi_seterr_open(ENOMEM, "open");
	pthread_mutex_init(&s->mu, NULL);
	iwvi_rkeys_init(&s->rkeys);
	s->sock = s->doorbell = s->async_efd = s->cm_efd = s->epfd = -1;
	s->abi = a.abi ? a.abi : IWV_ABI_VERSION;
	if (!(s->buf = malloc(W_MAX_MESSAGE))) {
		r = iwvi_seterr_open(ENOMEM, "open");
		goto fail;
	}
	s->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s->sock < 0) {
		r = iwvi_seterr_open(errno, "open: socket");
		goto fail;
	}
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	strcpy(sa.sun_path, path);
	if (connect(s->sock, (struct sockaddr *)&sa, sizeof sa) < 0) {
		r = iwvi_seterr_open(ENODEV, "open: no iwarpd answers at %s (%s); start iwarpd or set " IWV_ENV_SOCKET, path,
				strerror(errno));
		goto fail;
	}
	r = hello(s, path, a.client_name ? a.client_name : program_invocation_short_name,
		  a.hello_timeout_ms > 0 ? a.hello_timeout_ms : 10000, fds);
	if (r < 0)
		goto fail;
	s->doorbell = fds[0];
	if ((r = map_status(s, fds[1])) < 0)
		goto fail;
	s->client_sockets = iwvi_client_sockets(s->netns_cookie); /* qpsock.c */
	unsigned char tmp[16];
	s->addr_family = inet_pton(AF_INET, s->addr, tmp) == 1 ? 4 : inet_pton(AF_INET6, s->addr, tmp) == 1 ? 6 : 0;
	if (s->addr_family == 6 && memcmp(tmp, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12) == 0)
		s->addr_family = 4;
	s->async_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s->cm_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (s->async_efd < 0 || s->cm_efd < 0 || s->epfd < 0) {
		r = iwvi_seterr_open(errno, "open: eventfd/epoll");
		goto fail;
	}
	int watch[3] = {s->sock, s->async_efd, s->cm_efd};
	for (int i = 0; i < 3; i++) {
		struct epoll_event ev = {.events = EPOLLIN, .data.fd = watch[i]};
		if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, watch[i], &ev) < 0) {
			r = iwvi_seterr_open(errno, "open: epoll_ctl");
			goto fail;
		}
	}
	*out = s;
	return 0;
fail:
	free_session(s);
	return r;
}

IWV_EXPORT void iwv_close(struct iwv_session *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	__atomic_store_n(&s->dead, 1, __ATOMIC_RELEASE);
	close_fd(&s->sock); /* ends the session: the daemon reclaims everything */
	for (struct iwv_qp *q = s->qps, *n; q; q = n) {
		n = q->next;
		if (q->sock >= 0)
			close(q->sock);
		iwvi_region_close(&q->r);
		free(q);
	}
	for (struct iwv_srq *q = s->srqs, *n; q; q = n) {
		n = q->next;
		iwvi_region_close(&q->r);
		free(q);
	}
	for (struct iwv_cq *c = s->cqs, *n; c; c = n) {
		n = c->next;
		iwvi_region_close(&c->r);
		free(c);
	}
	for (struct iwv_comp_channel *c = s->channels, *n; c; c = n) {
		n = c->next;
		close(c->efd);
		pthread_mutex_destroy(&c->mu);
		free(c->pending);
		free(c);
	}
	for (struct iwv_mr *m = s->mrs, *n; m; m = n) {
		n = m->next;
		free(m);
	}
	for (struct iwv_pd *p = s->pds, *n; p; p = n) {
		n = p->next;
		free(p);
	}
	for (struct iwv_buffer *b = s->buffers, *n; b; b = n) {
		n = b->next;
		iwvi_buffer_release(b);
		free(b);
	}
	for (struct iwv_listener *l = s->listeners, *n; l; l = n) {
		n = l->next;
		free(l);
	}
	pthread_mutex_unlock(&s->mu);
	free_session(s);
}

IWV_EXPORT const char *iwv_device_name(const struct iwv_session *s)
{
	return s->device;
}
IWV_EXPORT const char *iwv_daemon_version(const struct iwv_session *s)
{
	return s->daemon;
}
IWV_EXPORT const char *iwv_device_addr(const struct iwv_session *s)
{
	return s->addr;
}
IWV_EXPORT uint64_t iwv_session_id(const struct iwv_session *s)
{
	return s->id;
}

IWV_EXPORT int iwv_query_device(struct iwv_session *s, struct iwv_device_attr *a)
{
	json_t *j;
	int r = iwvi_call(s, W_OP_QUERY_DEVICE, NULL, NULL, 0, &j);
	if (r < 0)
		return r;
	memset(a, 0, sizeof *a);
	iwvi_jget_str(j, "name", a->name, sizeof a->name);
	a->max_qp = (uint32_t)iwvi_jget_u64(j, "max_qp");
	a->max_qp_wr = (uint32_t)iwvi_jget_u64(j, "max_qp_wr");
	a->max_sge = (uint32_t)iwvi_jget_u64(j, "max_sge");
	a->max_cq = (uint32_t)iwvi_jget_u64(j, "max_cq");
	a->max_cqe = (uint32_t)iwvi_jget_u64(j, "max_cqe");
	a->max_mr = (uint32_t)iwvi_jget_u64(j, "max_mr");
	a->max_mr_size = iwvi_jget_u64(j, "max_mr_size");
	a->max_registered = iwvi_jget_u64(j, "max_registered_bytes");
	a->max_pd = (uint32_t)iwvi_jget_u64(j, "max_pd");
	a->max_srq = (uint32_t)iwvi_jget_u64(j, "max_srq");
	a->max_srq_wr = (uint32_t)iwvi_jget_u64(j, "max_srq_wr");
	a->max_inline = (uint32_t)iwvi_jget_u64(j, "max_inline");
	a->max_msg_ud = (uint32_t)iwvi_jget_u64(j, "max_msg_ud");
	a->datagram_size = (uint32_t)iwvi_jget_u64(j, "datagram_size");
	a->max_comp_channel = (uint32_t)iwvi_jget_u64(j, "max_comp_channel");
	a->atomic_cap = (uint32_t)iwvi_jget_u64(j, "atomic_cap");
	a->max_qp_rd_atom = (uint32_t)iwvi_jget_u64(j, "max_qp_rd_atom");
	a->max_qp_init_rd_atom = (uint32_t)iwvi_jget_u64(j, "max_qp_init_rd_atom");
	json_decref(j);
	return 0;
}

IWV_EXPORT int iwv_query_port(struct iwv_session *s, struct iwv_port_attr *a)
{
	json_t *j;
	char ports[32];
	unsigned first = 0, last = 0;
	int r = iwvi_call(s, W_OP_QUERY_PORT, NULL, NULL, 0, &j);
	if (r < 0)
		return r;
	memset(a, 0, sizeof *a);
	iwvi_jget_str(j, "state", a->state, sizeof a->state);
	iwvi_jget_str(j, "addr", a->addr, sizeof a->addr);
	a->datagram_size = (uint32_t)iwvi_jget_u64(j, "datagram_size");
	iwvi_jget_str(j, "ud_ports", ports, sizeof ports);
	if (sscanf(ports, "%u-%u", &first, &last) == 2 && first <= 65535 && last <= 65535) {
		a->ud_port_first = (uint16_t)first;
		a->ud_port_last = (uint16_t)last;
	}
	a->unpriv_port_start = (uint16_t)iwvi_jget_u64(j, "unpriv_port_start");
	a->priv_bind = iwvi_jget_bool(j, "priv_bind");
	json_decref(j);
	return 0;
}
