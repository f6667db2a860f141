/*
 * iwd_eq.c — event queues (fi_eq(3)): connection events of MSG endpoints
 * (FI_CONNREQ, FI_CONNECTED, FI_SHUTDOWN, and errors such as a rejection),
 * pulled from the fabric session's CM events when the EQ is read.
 *
 * An FI_SHUTDOWN is read only after the application has read the
 * successful completions its endpoint made before the connection ended;
 * events behind it are not held up. The daemon publishes a completion
 * before it reports the end of the connection, and ofi_rxm closes the
 * connection's endpoint on FI_SHUTDOWN — which discards its unread
 * completions (fi_endpoint(3) fi_close) — before it reads the CQ again:
 * without the hold, a last message that came with the shutdown (fi_pingpong's
 * "fin") was lost and its receiver waited forever.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "iwd.h"

struct iwd_eq_ev {
	struct iwd_list link;
	uint32_t event;
	int is_err;
	int (*ready)(void *arg); /* held until ready(arg), then NULL */
	void *arg;
	size_t len;
	unsigned char data[];
};

static int push(struct iwd_eq *eq, uint32_t event, const void *entry, size_t len, int is_err,
		int (*ready)(void *arg), void *arg)
{
	struct iwd_eq_ev *ev = malloc(sizeof(*ev) + len);
	if (!ev)
		return -FI_ENOMEM;
	ev->event = event;
	ev->is_err = is_err;
	ev->ready = ready;
	ev->arg = arg;
	ev->len = len;
	memcpy(ev->data, entry, len);
	iwd_list_insert_tail(&eq->events, &ev->link);
	eq->nevents++;
	iwd_wait_signal(eq->efd);
	return 0;
}

int iwd_eq_push(struct iwd_eq *eq, uint32_t event, const void *entry, size_t len, int is_err)
{
	return push(eq, event, entry, len, is_err, NULL, NULL);
}

int iwd_eq_push_after(struct iwd_eq *eq, uint32_t event, const void *entry, size_t len, int (*ready)(void *arg),
		      void *arg)
{
	return push(eq, event, entry, len, 0, ready, arg);
}

/* The oldest event that may be read now, or NULL; fab->lock is held. The
 * endpoint an event waits for is alive: closing it purges its events
 * under this lock before its queues go (iwd_ep_msg.c msg_disconnect). */
static struct iwd_eq_ev *first_ready(struct iwd_eq *eq)
{
	struct iwd_list *it;
	iwd_list_foreach(&eq->events, it)
	{
		struct iwd_eq_ev *ev = iwd_container_of(it, struct iwd_eq_ev, link);
		if (ev->ready && ev->ready(ev->arg))
			ev->ready = NULL;
		if (!ev->ready)
			return ev;
	}
	return NULL;
}

void iwd_eq_purge(struct iwd_eq *eq, const struct fid *fid)
{
	struct iwd_list *it, *tmp;
	if (!eq)
		return;
	iwd_list_foreach_safe(&eq->events, it, tmp)
	{
		struct iwd_eq_ev *ev = iwd_container_of(it, struct iwd_eq_ev, link);
		/* Every entry (fi_eq_entry, fi_eq_cm_entry, fi_eq_err_entry)
		 * starts with the fid it is about. */
		const struct fid *about = NULL;
		if (ev->len >= sizeof(about))
			memcpy(&about, ev->data, sizeof(about));
		if (about == fid) {
			iwd_list_remove(it);
			eq->nevents--;
			free(ev);
		}
	}
}

static ssize_t eq_read_locked(struct iwd_eq *eq, uint32_t *event, void *buf, size_t len, uint64_t flags)
{
	struct iwd_eq_ev *ev = first_ready(eq);
	if (!ev)
		return -FI_EAGAIN;
	if (ev->is_err)
		return -FI_EAVAIL;
	if (len < ev->len)
		return -FI_ETOOSMALL;
	if (event)
		*event = ev->event;
	if (buf)
		memcpy(buf, ev->data, ev->len);
	len = ev->len;
	if (!(flags & FI_PEEK)) {
		iwd_list_remove(&ev->link);
		eq->nevents--;
		free(ev);
	}
	return (ssize_t)len;
}

static ssize_t eq_read(struct fid_eq *eq_fid, uint32_t *event, void *buf, size_t len, uint64_t flags)
{
	struct iwd_eq *eq = iwd_container_of(eq_fid, struct iwd_eq, eq_fid);
	ssize_t ret;
	iwd_cm_progress(eq->fab);
	pthread_mutex_lock(&eq->fab->lock);
	ret = eq_read_locked(eq, event, buf, len, flags);
	pthread_mutex_unlock(&eq->fab->lock);
	if (ret == -FI_EAGAIN && iwv_session_status(eq->fab->s))
		return -FI_ENODEV;
	return ret;
}

static ssize_t eq_readerr(struct fid_eq *eq_fid, struct fi_eq_err_entry *buf, uint64_t flags)
{
	struct iwd_eq *eq = iwd_container_of(eq_fid, struct iwd_eq, eq_fid);
	struct iwd_eq_ev *ev;
	ssize_t ret = -FI_EAGAIN;
	if (!buf)
		return -FI_EINVAL;
	iwd_cm_progress(eq->fab);
	pthread_mutex_lock(&eq->fab->lock);
	ev = first_ready(eq);
	if (ev) {
		if (ev->is_err) {
			size_t n = ev->len < sizeof(*buf) ? ev->len : sizeof(*buf);
			void *err_data = buf->err_data;
			memcpy(buf, ev->data, n);
			buf->err_data = err_data;
			buf->err_data_size = 0;
			ret = (ssize_t)sizeof(*buf);
			if (!(flags & FI_PEEK)) {
				iwd_list_remove(&ev->link);
				eq->nevents--;
				free(ev);
			}
		}
	}
	pthread_mutex_unlock(&eq->fab->lock);
	return ret;
}

static ssize_t eq_write(struct fid_eq *eq_fid, uint32_t event, const void *buf, size_t len, uint64_t flags)
{
	struct iwd_eq *eq = iwd_container_of(eq_fid, struct iwd_eq, eq_fid);
	int ret;
	pthread_mutex_lock(&eq->fab->lock);
	ret = iwd_eq_push(eq, event, buf, len, (flags & (1ull << 60)) != 0 /* libfabric util's error flag */);
	pthread_mutex_unlock(&eq->fab->lock);
	return ret ? ret : (ssize_t)len;
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static ssize_t eq_sread(struct fid_eq *eq_fid, uint32_t *event, void *buf, size_t len, int timeout, uint64_t flags)
{
	struct iwd_eq *eq = iwd_container_of(eq_fid, struct iwd_eq, eq_fid);
	int64_t deadline = timeout >= 0 ? now_ms() + timeout : -1;
	struct pollfd pfd[2];
	pfd[0].fd = eq->efd;
	pfd[0].events = POLLIN;
	pfd[1].fd = iwv_event_fd(eq->fab->s);
	pfd[1].events = POLLIN;
	for (;;) {
		uint64_t v;
		int left, most;
		ssize_t ret = eq_read(eq_fid, event, buf, len, flags);
		if (ret != -FI_EAGAIN)
			return ret;
		left = deadline < 0 ? 1000 : (int)(deadline - now_ms());
		if (left <= 0)
			return -FI_EAGAIN;
		/* A held event is freed by a CQ read, which signals no
		 * descriptor here: look again soon. Otherwise wake at least
		 * every second to notice a dead daemon. */
		pthread_mutex_lock(&eq->fab->lock);
		most = eq->nevents ? 10 : 1000;
		pthread_mutex_unlock(&eq->fab->lock);
		if (poll(pfd, pfd[1].fd >= 0 ? 2 : 1, left > most ? most : left) < 0 && errno != EINTR)
			return -FI_EOTHER;
		if (read(eq->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
			return -FI_EOTHER;
	}
}

static const char *eq_strerror(struct fid_eq *eq_fid, int prov_errno, const void *err_data, char *buf, size_t len)
{
	const char *s = prov_errno ? strerror(prov_errno) : "no error";
	IWD_UNUSED(eq_fid);
	IWD_UNUSED(err_data);
	if (buf && len) {
		snprintf(buf, len, "iwarpd: %s", s);
		return buf;
	}
	return s;
}

int iwd_eq_trywait(struct iwd_eq *eq)
{
	int ret;
	iwd_cm_progress(eq->fab);
	pthread_mutex_lock(&eq->fab->lock);
	ret = first_ready(eq) ? -FI_EAGAIN : 0;
	pthread_mutex_unlock(&eq->fab->lock);
	return ret;
}

static int eq_control(struct fid *fid, int command, void *arg)
{
	struct iwd_eq *eq = iwd_container_of(fid, struct iwd_eq, eq_fid.fid);
	switch (command) {
	case FI_GETWAIT:
		if (eq->wait_obj != FI_WAIT_FD || !arg)
			return -FI_EINVAL;
		*(int *)arg = eq->epfd;
		return 0;
	case FI_GETWAITOBJ:
		if (!arg)
			return -FI_EINVAL;
		*(enum fi_wait_obj *)arg = eq->wait_obj;
		return 0;
	default:
		return -FI_ENOSYS;
	}
}

static int eq_close(struct fid *fid)
{
	struct iwd_eq *eq = iwd_container_of(fid, struct iwd_eq, eq_fid.fid);
	struct iwd_list *it, *tmp;
	if (eq->refs)
		return -FI_EBUSY;
	pthread_mutex_lock(&eq->fab->lock);
	iwd_list_remove(&eq->link);
	eq->fab->refs--;
	pthread_mutex_unlock(&eq->fab->lock);
	iwd_list_foreach_safe(&eq->events, it, tmp)
	{
		iwd_list_remove(it);
		free(iwd_container_of(it, struct iwd_eq_ev, link));
	}
	iwd_wait_fini(eq->efd, eq->epfd);
	free(eq);
	return 0;
}

static struct fi_ops_eq eq_ops = {
	.size = sizeof(struct fi_ops_eq),
	.read = eq_read,
	.readerr = eq_readerr,
	.write = eq_write,
	.sread = eq_sread,
	.strerror = eq_strerror,
};

static struct fi_ops eq_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = eq_close,
	.bind = iwd_no_bind,
	.control = eq_control,
	.ops_open = iwd_no_ops_open,
};

int iwd_eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr, struct fid_eq **out, void *context)
{
	struct iwd_fabric *fab = iwd_container_of(fabric, struct iwd_fabric, fabric_fid);
	struct iwd_eq *eq;
	enum fi_wait_obj w = attr ? attr->wait_obj : FI_WAIT_UNSPEC;
	if (!out)
		return -FI_EINVAL;
	if (w != FI_WAIT_NONE && w != FI_WAIT_UNSPEC && w != FI_WAIT_FD)
		return -FI_ENOSYS;
	eq = calloc(1, sizeof(*eq));
	if (!eq)
		return -FI_ENOMEM;
	eq->fab = fab;
	eq->wait_obj = w == FI_WAIT_UNSPEC ? FI_WAIT_FD : w;
	iwd_list_init(&eq->events);
	eq->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	eq->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (eq->efd < 0 || eq->epfd < 0) {
		iwd_wait_fini(eq->efd, eq->epfd);
		free(eq);
		return -FI_ENOMEM;
	}
	{
		struct epoll_event ev = {.events = EPOLLIN};
		int sfd = iwv_event_fd(fab->s);
		if (epoll_ctl(eq->epfd, EPOLL_CTL_ADD, eq->efd, &ev) ||
		    (sfd >= 0 && epoll_ctl(eq->epfd, EPOLL_CTL_ADD, sfd, &ev))) {
			iwd_wait_fini(eq->efd, eq->epfd);
			free(eq);
			return -FI_ENOMEM;
		}
	}
	eq->eq_fid.fid.fclass = FI_CLASS_EQ;
	eq->eq_fid.fid.context = context;
	eq->eq_fid.fid.ops = &eq_fi_ops;
	eq->eq_fid.ops = &eq_ops;
	pthread_mutex_lock(&fab->lock);
	iwd_list_insert_tail(&fab->eqs, &eq->link);
	fab->refs++;
	pthread_mutex_unlock(&fab->lock);
	*out = &eq->eq_fid;
	return 0;
}
