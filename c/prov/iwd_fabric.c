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
	fab->fabric_fid.fid.fclass = FI_CLASS_FABRIC;
	fab->fabric_fid.fid.context = context;
	fab->fabric_fid.fid.ops = &fabric_fi_ops;
	fab->fabric_fid.ops = &fabric_ops;
	fab->fabric_fid.api_version = IWD_FI_VERSION;
	*fabric = &fab->fabric_fid;
	return 0;
}
