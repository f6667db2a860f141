/*
 * iwd_util_wait.c — the wait object of CQs, counters and EQs (FI_WAIT_FD,
 * fi_control(3) FI_GETWAIT): an eventfd the provider signals when it makes
 * a completion or event itself, and an epoll descriptor over it and the
 * domain's completion channel (the daemon's completions), on which
 * fi_cq_sread / fi_cntr_wait block and applications poll.
 */
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "iwd.h"

int iwd_wait_init(struct iwd_domain *dom, int *efd, int *epfd)
{
	struct epoll_event ev = {.events = EPOLLIN};
	*efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	*epfd = epoll_create1(EPOLL_CLOEXEC);
	if (*efd < 0 || *epfd < 0)
		goto fail;
	ev.data.u32 = 0;
	if (epoll_ctl(*epfd, EPOLL_CTL_ADD, *efd, &ev))
		goto fail;
	ev.data.u32 = 1;
	if (epoll_ctl(*epfd, EPOLL_CTL_ADD, iwv_comp_channel_fd(dom->chan), &ev))
		goto fail;
	return 0;
fail:
	IWD_WARN(FI_LOG_CQ, "iwarpd: wait object: %s\n", strerror(errno));
	iwd_wait_fini(*efd, *epfd);
	*efd = *epfd = -1;
	return -FI_ENOMEM;
}

void iwd_wait_fini(int efd, int epfd)
{
	if (efd >= 0)
		close(efd);
	if (epfd >= 0)
		close(epfd);
}

void iwd_wait_signal(int efd)
{
	uint64_t one = 1;
	if (efd >= 0 && write(efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		IWD_WARN(FI_LOG_CQ, "iwarpd: signalling a waiter: %s\n", strerror(errno));
}

int iwd_wait_block(struct iwd_domain *dom, int efd, int epfd, int timeout_ms)
{
	struct epoll_event ev[2];
	uint64_t v;
	int n = epoll_wait(epfd, ev, 2, timeout_ms);
	IWD_UNUSED(dom);
	if (n < 0)
		return errno == EINTR ? 0 : -FI_EOTHER;
	if (efd >= 0 && read(efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		return -FI_EOTHER;
	return n;
}
