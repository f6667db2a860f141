/*
 * iwd_fabric.c — the fabric (fi_fabric(3)): one libiwverbs session with the
 * daemon, shared by the fabric's domains, passive endpoints and EQs, so that
 * a connection request heard by a listener can be accepted onto a QP of any
 * domain of the fabric.
 */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "iwd.h"

/* warn_no_daemon says, at FI_LOG_WARN and once per process (fi_getinfo runs
 * this for every query, Open MPI queries many times), why no session opened:
 * the socket path, the variables that name it and the command that starts
 * the daemon (docs/mpi.md "Troubleshooting"). Without it a user saw only
 * Open MPI's "PML cm cannot be selected". Later failures stay at info. */
static void warn_no_daemon(const char *path, const char *why)
{
	static int warned;
	if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED)) {
		IWD_WARN(FI_LOG_CORE,
			 "iwarpd: the provider is unusable: no iwarpd daemon answers at %s (%s). Start one with "
			 "`iwarpd -socket %s` (or `systemctl start iwarpd`), or name a running daemon's socket in "
			 "FI_IWARPD_SOCKET (else IWARPD_SOCKET); docs/mpi.md \"Troubleshooting\"\n",
			 path, why, path);
		return;
	}
	IWD_INFO(FI_LOG_CORE, "iwarpd: no daemon at %s (%s); start iwarpd or set FI_IWARPD_SOCKET / IWARPD_SOCKET\n",
		 path, why);
}

int iwd_session_open(struct iwv_session **s)
{
	struct iwv_open_attr a = {
		.socket = iwd_env.socket,
		.client_name = NULL,
		.hello_timeout_ms = iwd_env.timeout_ms,
	};
	int ret = iwv_open(&a, s);
	if (ret) {
		char path[256] = "";
		if (iwd_env.socket)
			snprintf(path, sizeof(path), "%s", iwd_env.socket);
		else
			iwv_default_socket(path, sizeof(path));
		warn_no_daemon(path, iwv_last_error(NULL));
		*s = NULL;
		return iwd_errno(ret);
	}
	return 0;
}

int iwd_parse_sockaddr(const char *ipport, struct sockaddr_in *sin)
{
	char buf[IWV_ADDR_STRLEN];
	char *colon;
	long port;
	memset(sin, 0, sizeof(*sin));
	snprintf(buf, sizeof(buf), "%s", ipport);
	colon = strrchr(buf, ':');
	if (!colon)
		return -FI_EINVAL;
	*colon = 0;
	port = strtol(colon + 1, NULL, 10);
	if (port < 0 || port > 65535)
		return -FI_EINVAL;
	sin->sin_family = AF_INET;
	sin->sin_port = htons((uint16_t)port);
	if (!buf[0])
		return 0;
	if (inet_pton(AF_INET, buf, &sin->sin_addr) != 1)
		return -FI_EINVAL;
	return 0;
}

static int fabric_close(struct fid *fid)
{
	struct iwd_fabric *fab = iwd_container_of(fid, struct iwd_fabric, fabric_fid.fid);
	if (fab->refs)
		return -FI_EBUSY;
	iwv_close(fab->s);
	pthread_mutex_destroy(&fab->lock);
	free(fab);
	return 0;
}

static int fabric_trywait(struct fid_fabric *fabric, struct fid **fids, int count)
{
	int i, ret;
	IWD_UNUSED(fabric);
	for (i = 0; i < count; i++) {
		switch (fids[i]->fclass) {
		case FI_CLASS_CQ:
			ret = iwd_cq_trywait(iwd_container_of(fids[i], struct iwd_cq, cq_fid.fid));
			break;
		case FI_CLASS_CNTR:
			ret = iwd_cntr_trywait(iwd_container_of(fids[i], struct iwd_cntr, cntr_fid.fid));
			break;
		case FI_CLASS_EQ:
			ret = iwd_eq_trywait(iwd_container_of(fids[i], struct iwd_eq, eq_fid.fid));
			break;
		default:
			return -FI_EINVAL;
		}
		if (ret)
			return ret;
	}
	return 0;
}

static int wait_open(struct fid_fabric *fabric, struct fi_wait_attr *attr, struct fid_wait **waitset)
{
	IWD_UNUSED(fabric);
	IWD_UNUSED(attr);
	IWD_UNUSED(waitset);
	return -FI_ENOSYS; /* CQs, counters and EQs carry their own FI_WAIT_FD */
}

static struct fi_ops_fabric fabric_ops = {
	.size = sizeof(struct fi_ops_fabric),
	.domain = iwd_domain_open,
	.passive_ep = iwd_passive_ep,
	.eq_open = iwd_eq_open,
	.wait_open = wait_open,
	.trywait = fabric_trywait,
};

static struct fi_ops fabric_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = fabric_close,
	.bind = iwd_no_bind,
	.control = iwd_no_control,
	.ops_open = iwd_no_ops_open,
};

int iwd_fabric_open(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context)
{
	struct iwd_fabric *fab;
	int ret;

	if (attr && attr->name && strcmp(attr->name, IWD_FABRIC_NAME))
		return -FI_ENODATA;
	fab = calloc(1, sizeof(*fab));
	if (!fab)
		return -FI_ENOMEM;
	ret = iwd_session_open(&fab->s);
	if (ret) {
		IWD_WARN(FI_LOG_FABRIC, "iwarpd: cannot open a session with the daemon: %s\n", fi_strerror(-ret));
		free(fab);
		return ret;
	}
	ret = iwv_query_device(fab->s, &fab->dev);
	if (ret) {
		IWD_WARN(FI_LOG_FABRIC, "iwarpd: query-device: %s\n", iwv_last_error(fab->s));
		iwv_close(fab->s);
		free(fab);
		return iwd_errno(ret);
	}
	fab->addr.sin_family = AF_INET;
	inet_pton(AF_INET, iwv_device_addr(fab->s), &fab->addr.sin_addr);
	pthread_mutex_init(&fab->lock, NULL);
	iwd_list_init(&fab->eqs);
	iwd_list_init(&fab->cm_objs);
	iwd_list_init(&fab->msg_eps);
	fab->fabric_fid.fid.fclass = FI_CLASS_FABRIC;
	fab->fabric_fid.fid.context = context;
	fab->fabric_fid.fid.ops = &fabric_fi_ops;
	fab->fabric_fid.ops = &fabric_ops;
	fab->fabric_fid.api_version = IWD_FI_VERSION;
	*fabric = &fab->fabric_fid;
	return 0;
}

int iwd_no_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	IWD_UNUSED(fid);
	IWD_UNUSED(bfid);
	IWD_UNUSED(flags);
	return -FI_ENOSYS;
}

int iwd_no_control(struct fid *fid, int command, void *arg)
{
	IWD_UNUSED(fid);
	IWD_UNUSED(command);
	IWD_UNUSED(arg);
	return -FI_ENOSYS;
}

int iwd_no_ops_open(struct fid *fid, const char *name, uint64_t flags, void **ops, void *context)
{
	IWD_UNUSED(fid);
	IWD_UNUSED(name);
	IWD_UNUSED(flags);
	IWD_UNUSED(ops);
	IWD_UNUSED(context);
	return -FI_ENOSYS;
}
