/*
 * iwd_pep.c — passive endpoints (fi_endpoint(3), fi_cm(3)): a listener in
 * the daemon (RC over TCP with MPA); each connection request becomes an
 * FI_CONNREQ event whose info->handle names the request for fi_accept or
 * fi_reject (iwd_cm.c hands it over).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iwd.h"

struct iwd_pep {
	struct fid_pep pep_fid;
	struct iwd_fabric *fab;
	struct fi_info *info;
	struct iwd_eq *eq;
	struct iwv_listener *l;
	struct sockaddr_in name;
	struct iwd_cm_obj cm; /* fab->cm_objs, keyed by the listener */
};

/* The request behind an FI_CONNREQ (info->handle). */
struct iwd_connreq {
	struct fid fid;
	uint32_t conn_id;
	struct sockaddr_in peer;
};

static void sin_to_str(const struct sockaddr_in *sin, char *buf, size_t len, int device_if_any)
{
	char ip[INET_ADDRSTRLEN] = "";
	if (sin->sin_addr.s_addr != htonl(INADDR_ANY) || !device_if_any)
		inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof(ip));
	snprintf(buf, len, "%s:%u", ip, ntohs(sin->sin_port));
}

static int pep_listen(struct fid_pep *f)
{
	struct iwd_pep *pep = iwd_container_of(f, struct iwd_pep, pep_fid);
	char addr[IWV_ADDR_STRLEN];
	int ret;
	if (pep->l)
		return 0;
	if (!pep->eq)
		return -FI_ENOEQ;
	sin_to_str(&pep->name, addr, sizeof(addr), 1);
	ret = iwv_listen(pep->fab->s, addr, 0, &pep->l);
	if (ret) {
		IWD_WARN(FI_LOG_EP_CTRL, "iwarpd: listening on %s: %s\n", addr, iwv_last_error(pep->fab->s));
		return iwd_errno(ret);
	}
	pthread_mutex_lock(&pep->fab->lock);
	pep->cm.key = pep->l;
	pthread_mutex_unlock(&pep->fab->lock);
	iwd_parse_sockaddr(iwv_listener_addr(pep->l), &pep->name);
	if (pep->name.sin_addr.s_addr == htonl(INADDR_ANY))
		pep->name.sin_addr = pep->fab->addr.sin_addr;
	return 0;
}

static int pep_reject(struct fid_pep *f, fid_t handle, const void *param, size_t paramlen)
{
	struct iwd_pep *pep = iwd_container_of(f, struct iwd_pep, pep_fid);
	struct iwd_connreq *cr;
	int ret;
	if (!handle || handle->fclass != FI_CLASS_CONNREQ || paramlen > IWD_CM_DATA_SIZE)
		return -FI_EINVAL;
	cr = iwd_container_of(handle, struct iwd_connreq, fid);
	ret = iwv_reject(pep->fab->s, cr->conn_id, param, (uint16_t)paramlen);
	free(cr);
	return iwd_errno(ret);
}

static int pep_getname(fid_t fid, void *addr, size_t *addrlen)
{
	struct iwd_pep *pep = iwd_container_of(fid, struct iwd_pep, pep_fid.fid);
	return iwd_give_sockaddr(&pep->name, addr, addrlen);
}

static int pep_setname(fid_t fid, void *addr, size_t addrlen)
{
	struct iwd_pep *pep = iwd_container_of(fid, struct iwd_pep, pep_fid.fid);
	if (pep->l || !addr || addrlen < sizeof(struct sockaddr_in) || ((struct sockaddr *)addr)->sa_family != AF_INET)
		return -FI_EINVAL;
	memcpy(&pep->name, addr, sizeof(pep->name));
	return 0;
}

static struct fi_ops_cm pep_cm_ops = {
	.size = sizeof(struct fi_ops_cm),
	.setname = pep_setname,
	.getname = pep_getname,
	.getpeer = iwd_no_getpeer,
	.connect = iwd_no_connect,
	.listen = pep_listen,
	.accept = iwd_no_accept,
	.reject = pep_reject,
	.shutdown = iwd_no_shutdown,
	.join = iwd_no_join,
};

static int pep_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	struct iwd_pep *pep = iwd_container_of(fid, struct iwd_pep, pep_fid.fid);
	IWD_UNUSED(flags);
	if (!bfid || bfid->fclass != FI_CLASS_EQ)
		return -FI_EINVAL;
	pthread_mutex_lock(&pep->fab->lock);
	if (pep->eq)
		pep->eq->refs--;
	pep->eq = iwd_container_of(bfid, struct iwd_eq, eq_fid.fid);
	pep->eq->refs++;
	pthread_mutex_unlock(&pep->fab->lock);
	return 0;
}

static int pep_close(struct fid *fid)
{
	struct iwd_pep *pep = iwd_container_of(fid, struct iwd_pep, pep_fid.fid);
	if (pep->l)
		iwv_listener_close(pep->l);
	pthread_mutex_lock(&pep->fab->lock);
	iwd_cm_unregister(&pep->cm);
	if (pep->eq)
		pep->eq->refs--;
	pep->fab->refs--;
	pthread_mutex_unlock(&pep->fab->lock);
	fi_freeinfo(pep->info);
	free(pep);
	return 0;
}

static int pep_control(struct fid *fid, int command, void *arg)
{
	IWD_UNUSED(fid);
	IWD_UNUSED(arg);
	return command == FI_ENABLE ? 0 : -FI_ENOSYS;
}

static struct fi_ops pep_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = pep_close,
	.bind = pep_bind,
	.control = pep_control,
	.ops_open = iwd_no_ops_open,
};

static int pep_getopt(fid_t fid, int level, int optname, void *optval, size_t *optlen)
{
	IWD_UNUSED(fid);
	if (level != FI_OPT_ENDPOINT || optname != FI_OPT_CM_DATA_SIZE || !optval || !optlen)
		return -FI_ENOPROTOOPT;
	if (*optlen < sizeof(size_t))
		return -FI_ETOOSMALL;
	*(size_t *)optval = IWD_CM_DATA_SIZE;
	*optlen = sizeof(size_t);
	return 0;
}

static int pep_setopt(fid_t fid, int level, int optname, const void *optval, size_t optlen)
{
	IWD_UNUSED(fid);
	IWD_UNUSED(level);
	IWD_UNUSED(optname);
	IWD_UNUSED(optval);
	IWD_UNUSED(optlen);
	return -FI_ENOPROTOOPT;
}

static struct fi_ops_ep pep_ops = {
	.size = sizeof(struct fi_ops_ep),
	.cancel = iwd_no_cancel,
	.getopt = pep_getopt,
	.setopt = pep_setopt,
};

/* A connection request to the listener (pep->cm.event); the fabric lock
 * is held. */
static void connreq(struct iwd_cm_obj *obj, struct iwv_cm_event *ev)
{
	struct iwd_pep *pep = iwd_container_of(obj, struct iwd_pep, cm);
	struct iwd_fabric *fab = pep->fab;
	struct iwd_connreq *cr;
	struct fi_info *info;
	unsigned char buf[sizeof(struct fi_eq_cm_entry) + IWD_CM_DATA_SIZE];
	struct fi_eq_cm_entry *e = (struct fi_eq_cm_entry *)buf;
	size_t dlen = ev->private_data_len > IWD_CM_DATA_SIZE ? IWD_CM_DATA_SIZE : ev->private_data_len;

	if (!pep->eq || ev->type != IWV_CM_CONNECT_REQUEST) {
		iwv_reject(fab->s, ev->conn_id, NULL, 0);
		return;
	}
	cr = calloc(1, sizeof(*cr));
	info = fi_dupinfo(pep->info);
	if (!cr || !info) {
		free(cr);
		fi_freeinfo(info);
		iwv_reject(fab->s, ev->conn_id, NULL, 0);
		return;
	}
	cr->fid.fclass = FI_CLASS_CONNREQ;
	cr->conn_id = ev->conn_id;
	iwd_parse_sockaddr(ev->peer, &cr->peer);
	free(info->dest_addr);
	info->dest_addr = malloc(sizeof(struct sockaddr_in));
	if (info->dest_addr) {
		memcpy(info->dest_addr, &cr->peer, sizeof(cr->peer));
		info->dest_addrlen = sizeof(struct sockaddr_in);
	} else {
		info->dest_addrlen = 0;
	}
	info->handle = &cr->fid;
	memset(buf, 0, sizeof(buf));
	e->fid = &pep->pep_fid.fid;
	e->info = info;
	memcpy(e->data, ev->private_data, dlen);
	iwd_eq_push(pep->eq, FI_CONNREQ, buf, sizeof(*e) + dlen, 0);
}

int iwd_passive_ep(struct fid_fabric *fabric, struct fi_info *info, struct fid_pep **out, void *context)
{
	struct iwd_fabric *fab = iwd_container_of(fabric, struct iwd_fabric, fabric_fid);
	struct iwd_pep *pep;
	if (!info || !out || (info->ep_attr && info->ep_attr->type != FI_EP_MSG))
		return -FI_EINVAL;
	pep = calloc(1, sizeof(*pep));
	if (!pep)
		return -FI_ENOMEM;
	pep->info = fi_dupinfo(info);
	if (!pep->info) {
		free(pep);
		return -FI_ENOMEM;
	}
	pep->fab = fab;
	pep->name.sin_family = AF_INET;
	if (info->src_addr && info->src_addrlen >= sizeof(struct sockaddr_in))
		memcpy(&pep->name, info->src_addr, sizeof(pep->name));
	pep->pep_fid.fid.fclass = FI_CLASS_PEP;
	pep->pep_fid.fid.context = context;
	pep->pep_fid.fid.ops = &pep_fi_ops;
	pep->pep_fid.ops = &pep_ops;
	pep->pep_fid.cm = &pep_cm_ops;
	pthread_mutex_lock(&fab->lock);
	pep->cm.event = connreq;
	iwd_cm_register(fab, &pep->cm);
	fab->refs++;
	pthread_mutex_unlock(&fab->lock);
	*out = &pep->pep_fid;
	return 0;
}
