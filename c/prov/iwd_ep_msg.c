/*
 * iwd_ep_msg.c — FI_EP_MSG over an RC queue pair (fi_cm(3)): fi_connect
 * and fi_accept through the daemon's connection manager (MPA over TCP,
 * RFC 5044; connection data up to IWD_CM_DATA_SIZE octets travels as MPA
 * private data), FI_CONNECTED / FI_SHUTDOWN events, fi_shutdown; the MSG
 * endpoint object, its ops and open. The data path is iwd_ep_dgram.c's and
 * RMA iwd_rma.c's.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iwd_dgram.h"
#include "iwd_srx.h"

/* CM_SHUTDOWN: this side called fi_shutdown; CM_CLOSED: FI_SHUTDOWN given. */
/* CM_ACCEPTING: inside fi_accept, which reports FI_CONNECTED itself. */
enum { CM_IDLE = 0, CM_CONNECTING = 1, CM_CONNECTED = 2, CM_SHUTDOWN = 3, CM_CLOSED = 4, CM_ACCEPTING = 5 };

/* A MSG endpoint: the DGRAM object's data path plus the connection. */
struct iwd_msg_ep {
	struct iwd_dgram_ep dg;         /* first: an iwd_ep pointer is one */
	int cm_state;
	struct iwd_cm_obj cm;           /* fab->cm_objs, keyed by the QP */
	struct sockaddr_in peer;
	uint16_t from_port; /* opened on a passive endpoint's address: connect from its port */
	int ended_accepting; /* the connection ended inside fi_accept: FI_SHUTDOWN after its FI_CONNECTED */
	struct iwd_srx *srx; /* fi_ep_bind(ep, srx): receives come from it (iwd_srx.c) */
	int app_shutdown;    /* the application called fi_shutdown: its FI_SHUTDOWN is not held (msg_drained) */
};

static struct iwd_msg_ep *msg_of(struct iwd_ep *ep) { return iwd_container_of(ep, struct iwd_msg_ep, dg.ep); }
static struct iwd_ep *ep_of(struct fid_ep *f) { return iwd_container_of(f, struct iwd_ep, ep_fid); }

struct iwd_connreq_pub { /* the head of iwd_pep.c's struct iwd_connreq */
	struct fid fid;
	uint32_t conn_id;
};

static void cm_event(struct iwd_cm_obj *obj, struct iwv_cm_event *ev);

/* Makes CM events about the QP come to this endpoint. */
static void msg_register(struct iwd_ep *ep)
{
	struct iwd_fabric *fab = ep->dom->fab;
	struct iwd_msg_ep *m = msg_of(ep);
	pthread_mutex_lock(&fab->lock);
	if (iwd_list_empty(&m->cm.link)) {
		m->cm.key = ep->qp;
		m->cm.event = cm_event;
		iwd_cm_register(fab, &m->cm);
	}
	pthread_mutex_unlock(&fab->lock);
}

/* fi_close, before the QP goes (ops->disconnect). */
static void msg_disconnect(struct iwd_ep *ep)
{
	struct iwd_fabric *fab = ep->dom->fab;
	if (msg_of(ep)->cm_state == CM_CONNECTED)
		iwv_disconnect(ep->qp, 1);
	pthread_mutex_lock(&fab->lock);
	iwd_cm_unregister(&msg_of(ep)->cm);
	/* No event names ep from here on (CM dispatch no longer finds it),
	 * so none waits in msg_drained for queues about to go. */
	iwd_eq_purge(ep->eq, &ep->ep_fid.fid);
	pthread_mutex_unlock(&fab->lock);
}

/* Pulls ep's completions from the daemon and reports whether the
 * application has read every successful one (the readiness of its
 * FI_SHUTDOWN, iwd_eq_push_after); fab->lock is held, the domain lock is
 * not. The hold is for an application that closes the endpoint on
 * FI_SHUTDOWN before it reads the CQ (ofi_rxm, which never calls
 * fi_shutdown): one that called fi_shutdown (fi_cm(3)) has ended the
 * connection itself and gets FI_SHUTDOWN at once — unread completions stay
 * in the CQ until fi_close. Before, an unread send completion held the
 * FI_SHUTDOWN of a side that had called fi_shutdown forever (CI:
 * fi_named_port's connecting side). */
static int msg_drained(void *arg)
{
	struct iwd_ep *ep = arg;
	int unread;
	if (msg_of(ep)->app_shutdown)
		return 1;
	iwd_lock(ep->dom);
	iwd_ep_progress(ep);
	unread = iwd_cq_has_owned(ep->rx_cq, ep) || iwd_cq_has_owned(ep->tx_cq, ep);
	iwd_unlock(ep->dom);
	return !unread;
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
		iwd_eq_push_after(ep->eq, FI_SHUTDOWN, &e, sizeof(e), msg_drained, ep);
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

/* A CM event about the endpoint's QP (m->cm.event); the fabric lock is held. */
static void cm_event(struct iwd_cm_obj *obj, struct iwv_cm_event *ev)
{
	struct iwd_msg_ep *m = iwd_container_of(obj, struct iwd_msg_ep, cm);
	struct iwd_ep *ep = &m->dg.ep;
	if (m->cm_state == CM_ACCEPTING && (ev->type == IWV_CM_DISCONNECTED || ev->type == IWV_CM_CONNECTION_ERROR)) {
		/* Another thread reads the EQ while fi_accept has not reported
		 * FI_CONNECTED yet: fi_accept reports the end after it. */
		m->ended_accepting = 1;
		return;
	}
	switch (ev->type) {
	case IWV_CM_ESTABLISHED:
		/* Only a connect in progress: fi_accept reported FI_CONNECTED
		 * already, and the application may have called fi_shutdown
		 * since (a second FI_CONNECTED, with the peer's data, then came
		 * before FI_SHUTDOWN: fabtests' fi_cm_data read -FI_ETOOSMALL). */
		if (msg_of(ep)->cm_state != CM_CONNECTING)
			return;
		msg_of(ep)->cm_state = CM_CONNECTED;
		iwd_parse_sockaddr(ev->local, &ep->name);
		iwd_parse_sockaddr(ev->peer, &msg_of(ep)->peer);
		push_connected(ep, ev->private_data, ev->private_data_len);
		break;
	case IWV_CM_REJECTED:
		msg_of(ep)->cm_state = CM_IDLE;
		push_err(ep, FI_ECONNREFUSED, ev->status);
		break;
	case IWV_CM_UNREACHABLE:
		/* A TCP connect refused (nobody listens on the port) is the
		 * peer's refusal, FI_ECONNREFUSED as for a rejected request. */
		msg_of(ep)->cm_state = CM_IDLE;
		push_err(ep, ev->status == ECONNREFUSED ? FI_ECONNREFUSED : FI_EHOSTUNREACH, ev->status);
		break;
	case IWV_CM_TIMED_OUT:
		msg_of(ep)->cm_state = CM_IDLE;
		push_err(ep, FI_ETIMEDOUT, ev->status);
		break;
	case IWV_CM_CONNECTION_ERROR:
		if (msg_of(ep)->cm_state == CM_CONNECTED || msg_of(ep)->cm_state == CM_SHUTDOWN) {
			msg_of(ep)->cm_state = CM_CLOSED;
			push_shutdown(ep);
		} else {
			msg_of(ep)->cm_state = CM_IDLE;
			push_err(ep, FI_ECONNRESET, ev->status);
		}
		break;
	case IWV_CM_DISCONNECTED:
		/* The connection is over, whoever ended it: FI_SHUTDOWN, once —
		 * after this side's own fi_shutdown too, as verbs (rdma_cm's
		 * DISCONNECTED) and tcp report it, and as both sides calling
		 * fi_shutdown expect (fabtests' fi_cm_data; issue 19). */
		if (msg_of(ep)->cm_state == CM_CLOSED)
			return;
		msg_of(ep)->cm_state = CM_CLOSED;
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
		msg_register(ep);
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
	if (msg_of(ep)->cm_state != CM_IDLE)
		return -FI_EOPBADSTATE;
	inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof(ip));
	snprintf(dst, sizeof(dst), "%s:%u", ip, ntohs(sin->sin_port));
	memset(&p, 0, sizeof(p));
	p.private_data = param;
	p.private_data_len = (uint16_t)paramlen;
	p.local_port = msg_of(ep)->from_port;
	msg_of(ep)->cm_state = CM_CONNECTING;
	msg_of(ep)->peer = *sin;
	ret = iwv_connect(ep->qp, dst, &p);
	if (ret) {
		msg_of(ep)->cm_state = CM_IDLE;
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
	msg_of(ep)->cm_state = CM_ACCEPTING;
	ret = iwv_accept(fab->s, cr->conn_id, ep->qp, &p, ev);
	if (ret) {
		msg_of(ep)->cm_state = CM_IDLE;
		IWD_WARN(FI_LOG_EP_CTRL, "iwarpd: accepting a connection: %s\n", iwv_last_error(fab->s));
		free(ev);
		return iwd_errno(ret);
	}
	pthread_mutex_lock(&fab->lock);
	msg_of(ep)->cm_state = CM_CONNECTED;
	iwd_parse_sockaddr(ev->local, &ep->name);
	iwd_parse_sockaddr(ev->peer, &msg_of(ep)->peer);
	push_connected(ep, NULL, 0);
	if (msg_of(ep)->ended_accepting) {
		msg_of(ep)->cm_state = CM_CLOSED;
		push_shutdown(ep);
	}
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
	struct iwd_fabric *fab = ep->dom->fab;
	int connected;
	IWD_UNUSED(flags);
	/* Under fab->lock, as cm_event: a DISCONNECTED dispatched meanwhile
	 * (the peer's fi_shutdown) is not overwritten, and a held FI_SHUTDOWN
	 * is released (msg_drained) whichever came first. */
	pthread_mutex_lock(&fab->lock);
	connected = msg_of(ep)->cm_state == CM_CONNECTED;
	if (connected || msg_of(ep)->cm_state == CM_SHUTDOWN || msg_of(ep)->cm_state == CM_CLOSED)
		msg_of(ep)->app_shutdown = 1;
	if (connected)
		msg_of(ep)->cm_state = CM_SHUTDOWN;
	pthread_mutex_unlock(&fab->lock);
	if (!connected)
		return 0;
	ret = iwv_disconnect(ep->qp, 0);
	return ret == -ENODEV ? 0 : iwd_errno(ret);
}

static int msg_getpeer(struct fid_ep *f, void *addr, size_t *addrlen)
{
	return iwd_give_sockaddr(&msg_of(ep_of(f))->peer, addr, addrlen);
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

static struct fi_ops_cm msg_cm_ops = {
	.size = sizeof(struct fi_ops_cm),
	.setname = iwd_no_setname,
	.getname = msg_getname,
	.getpeer = msg_getpeer,
	.connect = msg_connect,
	.listen = iwd_no_listen,
	.accept = msg_accept,
	.reject = iwd_no_reject,
	.shutdown = msg_shutdown,
	.join = iwd_no_join,
};

/* A transmit goes to the connected peer (ops->tx_dest). */
static int msg_tx_dest(struct iwd_ep *ep, fi_addr_t dest, const struct iwv_av **av)
{
	IWD_UNUSED(dest);
	*av = NULL;
	return msg_of(ep)->cm_state == CM_CONNECTED ? 0 : -FI_ENOTCONN;
}

/* RMA Write over RC (ops->rma_write): with FI_REMOTE_CQ_DATA an RDMA Write
 * with Immediate (RFC 7306; 32-bit data, consuming a receive at the
 * target: FI_RX_CQ_DATA mode). */
static int msg_rma_write(struct iwd_ep *ep, struct iwv_send_wr *wr, uint64_t op_flags, uint64_t data, size_t len,
			 const struct iwv_av *av)
{
	IWD_UNUSED(len);
	IWD_UNUSED(av);
	wr->opcode = IWV_WR_RDMA_WRITE;
	if (op_flags & FI_REMOTE_CQ_DATA) {
		wr->opcode = IWV_WR_RDMA_WRITE_WITH_IMM;
		wr->imm = (uint32_t)data;
	}
	return iwd_ep_post_send(ep, wr);
}

/* fi_close of an MSG endpoint (ops->fini; the domain lock is held): each
 * receive still posted is reported as an FI_ECANCELED error completion
 * that outlives the endpoint (no owner, so iwd_cq_purge keeps it), as a
 * verbs QP's flush does. ofi_rxm posts rx_attr->size buffers of its own on
 * every connection and takes them back only from those completions, read
 * right after fi_close (rxm_close_conn, rxm_flush_msg_cq): without them a
 * connection refused and retried leaked its buffers, ~1 GB/s (issue 19
 * item 2). */
static void msg_fini(struct iwd_ep *ep)
{
	struct iwd_list *it;
	if (msg_of(ep)->srx)
		iwd_srx_detach(msg_of(ep)->srx, ep);
	if (ep->rx_cq)
		iwd_list_foreach(&iwd_dgram(ep)->rx_reqs, it)
		{
			struct iwd_rxreq *rr = iwd_container_of(it, struct iwd_rxreq, link);
			iwd_cq_push_err(ep->rx_cq, rr->context, FI_RECV | FI_MSG, 0, NULL, 0, 0, 0, FI_ECANCELED, 0,
					FI_ADDR_NOTAVAIL);
		}
	iwd_dgram_fini(ep);
}

/* A completion: a receive of the shared receive context goes to it. */
static void msg_wc(struct iwd_ep *ep, struct iwv_wc *wc)
{
	struct iwd_wr *w = (struct iwd_wr *)(uintptr_t)wc->wr_id;
	if (msg_of(ep)->srx && w->kind == IWD_WR_RX_REQ)
		iwd_srx_wc(msg_of(ep)->srx, ep, wc);
	else
		iwd_dgram_wc(ep, wc);
}

/* fi_enable: an endpoint on a shared receive context has no receive queue
 * of its own (its bounce pool keeps one slot: iwd_pool_init wants one). */
static int msg_enable(struct iwd_ep *ep)
{
	if (msg_of(ep)->srx && !ep->rq_depth)
		ep->rq_depth = 1;
	return iwd_dgram_enable(ep);
}

/* fi_ep_bind(ep, srx) (fi_endpoint(3)), before fi_enable: the RC QP,
 * made at fi_endpoint, is made again on the srx's SRQ (the QP is in INIT,
 * unconnected). Every other binding is the common one. */
static const struct fi_ops *base_fi_ops;
static struct fi_ops msg_fi_ops;
static pthread_once_t msg_fi_once = PTHREAD_ONCE_INIT;

static int msg_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	struct iwd_ep *ep = iwd_container_of(fid, struct iwd_ep, ep_fid.fid);
	struct iwd_msg_ep *m = msg_of(ep);
	struct iwd_srx *srx;
	int ret;
	if (!bfid || bfid->fclass != FI_CLASS_SRX_CTX)
		return __atomic_load_n(&base_fi_ops, __ATOMIC_ACQUIRE)->bind(fid, bfid, flags);
	srx = iwd_srx_of(bfid);
	if (!srx)
		return -FI_EINVAL;
	iwd_lock(ep->dom);
	if (ep->enabled || m->srx) {
		iwd_unlock(ep->dom);
		return ep->enabled ? -FI_EOPBADSTATE : -FI_EINVAL;
	}
	iwv_destroy_qp(ep->qp);
	iwv_destroy_cq(ep->vcq);
	ep->qp = NULL;
	ep->vcq = NULL;
	/* rx depth: the receive completions its CQ must hold */
	ret = iwd_ep_create_qp_srq(ep, IWV_QPT_RC, iwd_ep_rx_depth(ep->info), iwd_srx_srq(srx));
	if (ret) {
		/* Leave the endpoint as it was: a QP of its own. */
		if (ep->qp)
			iwv_destroy_qp(ep->qp);
		if (ep->vcq)
			iwv_destroy_cq(ep->vcq);
		ep->qp = NULL;
		ep->vcq = NULL;
		if (iwd_ep_create_qp(ep, IWV_QPT_RC, iwd_ep_rx_depth(ep->info)))
			IWD_WARN(FI_LOG_EP_CTRL, "iwarpd: the endpoint lost its QP; close it\n");
		iwd_unlock(ep->dom);
		return ret;
	}
	m->srx = srx;
	iwd_srx_attach(srx, ep);
	iwd_unlock(ep->dom);
	return 0;
}

static void msg_fi_init(void)
{
	msg_fi_ops = *__atomic_load_n(&base_fi_ops, __ATOMIC_ACQUIRE);
	msg_fi_ops.bind = msg_bind;
}

static const struct iwd_ep_ops msg_ops = {
	.datagram = 0,
	.enable = msg_enable,
	.disconnect = msg_disconnect,
	.fini = msg_fini,
	.progress = iwd_ep_progress,
	.wc = msg_wc,
	.cancel = iwd_dgram_cancel,
	.tx_dest = msg_tx_dest,
	.rma_write = msg_rma_write,
};

int iwd_msg_ep_open(struct iwd_domain *dom, struct fi_info *info, struct fid_ep **out, void *context)
{
	struct iwd_msg_ep *m = calloc(1, sizeof(*m));
	struct iwd_ep *ep;
	int ret;
	if (!m)
		return -FI_ENOMEM;
	ep = &m->dg.ep;
	iwd_ep_init(ep, dom, info, context, &msg_ops);
	iwd_dgram_init(&m->dg);
	m->dg.stage_large = 1;
	iwd_list_init(&m->cm.link);
	ep->cq_data_max = UINT32_MAX; /* cq_data_size 4 */
	ep->ep_fid.rma = &iwd_rma_ops;
	ep->ep_fid.atomic = &iwd_atomic_ops;
	ep->ep_fid.cm = &msg_cm_ops;
	__atomic_store_n(&base_fi_ops, ep->ep_fid.fid.ops, __ATOMIC_RELEASE); /* iwd_ep_init's: the same every time */
	pthread_once(&msg_fi_once, msg_fi_init);
	ep->ep_fid.fid.ops = &msg_fi_ops;
	/* fi_endpoint(3): info->handle a passive endpoint: the active one takes
	 * its address (fi_getname says it; fi_connect connects from it). */
	if (info->handle && info->handle->fclass == FI_CLASS_PEP) {
		struct sockaddr_in sin;
		size_t len = sizeof(sin);
		if (!fi_getname(info->handle, &sin, &len) && sin.sin_family == AF_INET) {
			ep->name = sin;
			m->from_port = ntohs(sin.sin_port);
		}
	}
	ret = ep->info ? iwd_ep_create_qp(ep, IWV_QPT_RC, iwd_ep_rx_depth(info)) : -FI_ENOMEM;
	return iwd_ep_opened(ep, ret, out);
}
