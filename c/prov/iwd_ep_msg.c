/*
 * iwd_ep_msg.c — FI_EP_MSG over an RC queue pair (fi_cm(3)): fi_connect
 * and fi_accept through the daemon's connection manager (MPA over TCP,
 * RFC 5044; connection data up to IWD_CM_DATA_SIZE octets travels as MPA
 * private data), FI_CONNECTED / FI_SHUTDOWN events, fi_shutdown. The data
 * path is iwd_ep_dgram.c's and RMA iwd_rma.c's.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iwd.h"

enum { CM_IDLE = 0, CM_CONNECTING = 1, CM_CONNECTED = 2, CM_SHUTDOWN = 3 };

static struct iwd_ep *ep_of(struct fid_ep *f) { return iwd_container_of(f, struct iwd_ep, ep_fid); }

struct iwd_connreq_pub { /* the head of iwd_pep.c's struct iwd_connreq */
	struct fid fid;
	uint32_t conn_id;
};

int iwd_msg_enable(struct iwd_ep *ep)
{
	int ret = iwd_dgram_enable(ep);
	if (ret)
		return ret;
	return 0;
}

void iwd_msg_register(struct iwd_ep *ep)
{
	struct iwd_fabric *fab = ep->dom->fab;
	pthread_mutex_lock(&fab->lock);
	if (iwd_list_empty(&ep->cm_link))
		iwd_list_insert_tail(&fab->msg_eps, &ep->cm_link);
	pthread_mutex_unlock(&fab->lock);
}

void iwd_msg_fini(struct iwd_ep *ep)
{
	struct iwd_fabric *fab = ep->dom->fab;
	if (ep->cm_state == CM_CONNECTED)
		iwv_disconnect(ep->qp, 1);
	pthread_mutex_lock(&fab->lock);
	iwd_list_remove(&ep->cm_link);
	/* No event names ep from here on (CM dispatch no longer finds it),
	 * so none waits in iwd_msg_drained for queues about to go. */
	iwd_eq_purge(ep->eq, &ep->ep_fid.fid);
	pthread_mutex_unlock(&fab->lock);
}

int iwd_msg_drained(struct iwd_ep *ep)
{
	int unread;
	iwd_lock(ep->dom);
	iwd_ep_progress(ep);
	unread = iwd_cq_has_owned(ep->rx_cq, ep) || iwd_cq_has_owned(ep->tx_cq, ep);
	iwd_unlock(ep->dom);
	return !unread;
}

static struct iwd_ep *ep_of_qp(struct iwd_fabric *fab, struct iwv_qp *qp)
{
	struct iwd_list *it;
	iwd_list_foreach(&fab->msg_eps, it)
	{
		struct iwd_ep *ep = iwd_container_of(it, struct iwd_ep, cm_link);
		if (ep->qp == qp)
			return ep;
	}
	return NULL;
}

static void push_connected(struct iwd_ep *ep, const void *data, size_t dlen)
{
	unsigned char buf[sizeof(struct fi_eq_cm_entry) + IWD_CM_DATA_SIZE];
	struct fi_eq_cm_entry *e = (struct fi_eq_cm_entry *)buf;
	if (dlen > IWD_CM_DATA_SIZE)
		dlen = IWD_CM_DATA_SIZE;
	memset(buf, 0, sizeof(buf));
	e->fid = &ep->ep_fid.fid;
	if (dlen)
		memcpy(e->data, data, dlen);
	if (ep->eq)
		iwd_eq_push(ep->eq, FI_CONNECTED, buf, sizeof(*e) + dlen, 0);
}

/* The end of a connection: FI_SHUTDOWN, read after ep's earlier
 * completions (iwd_eq.c). */
static void push_shutdown(struct iwd_ep *ep)
{
	struct fi_eq_cm_entry e;
	memset(&e, 0, sizeof(e));
	e.fid = &ep->ep_fid.fid;
	if (ep->eq)
		iwd_eq_push_after(ep->eq, FI_SHUTDOWN, &e, sizeof(e), ep);
}

static void push_err(struct iwd_ep *ep, int err, int prov_errno)
{
	struct fi_eq_err_entry e;
	memset(&e, 0, sizeof(e));
	e.fid = &ep->ep_fid.fid;
	e.context = ep->ep_fid.fid.context;
	e.err = err;
	e.prov_errno = prov_errno;
	if (ep->eq)
		iwd_eq_push(ep->eq, 0, &e, sizeof(e), 1);
}

void iwd_msg_cm_event(struct iwd_fabric *fab, struct iwv_cm_event *ev)
{
	struct iwd_ep *ep = ep_of_qp(fab, ev->qp);
	if (!ep)
		return;
	switch (ev->type) {
	case IWV_CM_ESTABLISHED:
		if (ep->cm_state == CM_CONNECTED)
			return; /* fi_accept reported it already */
		ep->cm_state = CM_CONNECTED;
		iwd_parse_sockaddr(ev->local, &ep->name);
		iwd_parse_sockaddr(ev->peer, &ep->peer);
		push_connected(ep, ev->private_data, ev->private_data_len);
		break;
	case IWV_CM_REJECTED:
		ep->cm_state = CM_IDLE;
		push_err(ep, FI_ECONNREFUSED, ev->status);
		break;
	case IWV_CM_UNREACHABLE:
		ep->cm_state = CM_IDLE;
		push_err(ep, FI_EHOSTUNREACH, ev->status);
		break;
	case IWV_CM_TIMED_OUT:
		ep->cm_state = CM_IDLE;
		push_err(ep, FI_ETIMEDOUT, ev->status);
		break;
	case IWV_CM_CONNECTION_ERROR:
		if (ep->cm_state == CM_CONNECTED) {
			ep->cm_state = CM_SHUTDOWN;
			push_shutdown(ep);
		} else {
			ep->cm_state = CM_IDLE;
			push_err(ep, FI_ECONNRESET, ev->status);
		}
		break;
	case IWV_CM_DISCONNECTED:
		if (ep->cm_state == CM_SHUTDOWN)
			return; /* our own fi_shutdown */
		ep->cm_state = CM_SHUTDOWN;
		push_shutdown(ep);
		break;
	default:
		break;
	}
}

static int ensure_enabled(struct iwd_ep *ep)
{
	int ret = 0;
	if (!ep->eq)
		return -FI_ENOEQ;
	if (!ep->enabled)
		ret = fi_enable(&ep->ep_fid);
	if (!ret)
		iwd_msg_register(ep);
	return ret;
}

static int msg_connect(struct fid_ep *f, const void *addr, const void *param, size_t paramlen)
{
	struct iwd_ep *ep = ep_of(f);
	const struct sockaddr_in *sin = addr;
	struct iwv_conn_param p;
	char ip[INET_ADDRSTRLEN], dst[IWV_ADDR_STRLEN];
	int ret;

	if (!sin && ep->info->dest_addr)
		sin = ep->info->dest_addr;
	if (!sin || sin->sin_family != AF_INET || paramlen > IWD_CM_DATA_SIZE || (paramlen && !param))
		return -FI_EINVAL;
	ret = ensure_enabled(ep);
	if (ret)
		return ret;
	if (ep->cm_state != CM_IDLE)
		return -FI_EOPBADSTATE;
	inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof(ip));
	snprintf(dst, sizeof(dst), "%s:%u", ip, ntohs(sin->sin_port));
	memset(&p, 0, sizeof(p));
	p.private_data = param;
	p.private_data_len = (uint16_t)paramlen;
	ep->cm_state = CM_CONNECTING;
	ep->peer = *sin;
	ret = iwv_connect(ep->qp, dst, &p);
	if (ret) {
		ep->cm_state = CM_IDLE;
		IWD_WARN(FI_LOG_EP_CTRL, "iwarpd: connecting to %s: %s\n", dst, iwv_last_error(ep->dom->fab->s));
		return iwd_errno(ret);
	}
	return 0;
}

static int msg_accept(struct fid_ep *f, const void *param, size_t paramlen)
{
	struct iwd_ep *ep = ep_of(f);
	struct iwd_connreq_pub *cr;
	struct iwv_conn_param p;
	struct iwv_cm_event *ev;
	struct iwd_fabric *fab = ep->dom->fab;
	int ret;

	if (!ep->info->handle || ep->info->handle->fclass != FI_CLASS_CONNREQ || paramlen > IWD_CM_DATA_SIZE ||
	    (paramlen && !param))
		return -FI_EINVAL;
	ret = ensure_enabled(ep);
	if (ret)
		return ret;
	cr = (struct iwd_connreq_pub *)ep->info->handle;
	memset(&p, 0, sizeof(p));
	p.private_data = param;
	p.private_data_len = (uint16_t)paramlen;
	ev = calloc(1, sizeof(*ev));
	if (!ev)
		return -FI_ENOMEM;
	ep->cm_state = CM_CONNECTING;
	ret = iwv_accept(fab->s, cr->conn_id, ep->qp, &p, ev);
	if (ret) {
		ep->cm_state = CM_IDLE;
		IWD_WARN(FI_LOG_EP_CTRL, "iwarpd: accepting a connection: %s\n", iwv_last_error(fab->s));
		free(ev);
		return iwd_errno(ret);
	}
	pthread_mutex_lock(&fab->lock);
	ep->cm_state = CM_CONNECTED;
	iwd_parse_sockaddr(ev->local, &ep->name);
	iwd_parse_sockaddr(ev->peer, &ep->peer);
	push_connected(ep, NULL, 0);
	pthread_mutex_unlock(&fab->lock);
	free(ev);
	free(cr);
	ep->info->handle = NULL;
	return 0;
}

static int msg_shutdown(struct fid_ep *f, uint64_t flags)
{
	struct iwd_ep *ep = ep_of(f);
	int ret;
	IWD_UNUSED(flags);
	if (ep->cm_state != CM_CONNECTED)
		return 0;
	ep->cm_state = CM_SHUTDOWN;
	ret = iwv_disconnect(ep->qp, 0);
	return ret == -ENODEV ? 0 : iwd_errno(ret);
}

static int msg_getpeer(struct fid_ep *f, void *addr, size_t *addrlen)
{
	struct iwd_ep *ep = ep_of(f);
	size_t n;
	if (!addrlen)
		return -FI_EINVAL;
	n = *addrlen;
	*addrlen = sizeof(struct sockaddr_in);
	if (n < sizeof(struct sockaddr_in))
		return -FI_ETOOSMALL;
	memcpy(addr, &ep->peer, sizeof(ep->peer));
	return 0;
}

static int msg_getname(fid_t fid, void *addr, size_t *addrlen)
{
	struct iwd_ep *ep = iwd_container_of(fid, struct iwd_ep, ep_fid.fid);
	if (ep->name.sin_family != AF_INET) {
		ep->name.sin_family = AF_INET;
		ep->name.sin_addr = ep->dom->fab->addr.sin_addr;
	}
	return iwd_ep_getname(fid, addr, addrlen);
}

static int msg_setname(fid_t fid, void *addr, size_t addrlen)
{
	IWD_UNUSED(fid);
	IWD_UNUSED(addr);
	IWD_UNUSED(addrlen);
	return -FI_ENOSYS;
}

static int msg_listen(struct fid_pep *pep)
{
	IWD_UNUSED(pep);
	return -FI_ENOSYS;
}

static int msg_reject(struct fid_pep *pep, fid_t handle, const void *param, size_t paramlen)
{
	IWD_UNUSED(pep);
	IWD_UNUSED(handle);
	IWD_UNUSED(param);
	IWD_UNUSED(paramlen);
	return -FI_ENOSYS;
}

static int msg_join(struct fid_ep *ep, const void *addr, uint64_t flags, struct fid_mc **mc, void *context)
{
	IWD_UNUSED(ep);
	IWD_UNUSED(addr);
	IWD_UNUSED(flags);
	IWD_UNUSED(mc);
	IWD_UNUSED(context);
	return -FI_ENOSYS;
}

struct fi_ops_cm iwd_msg_cm_ops = {
	.size = sizeof(struct fi_ops_cm),
	.setname = msg_setname,
	.getname = msg_getname,
	.getpeer = msg_getpeer,
	.connect = msg_connect,
	.listen = msg_listen,
	.accept = msg_accept,
	.reject = msg_reject,
	.shutdown = msg_shutdown,
	.join = msg_join,
};
