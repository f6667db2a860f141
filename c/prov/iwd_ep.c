/*
 * iwd_ep.c — fi_endpoint(3): the one place that picks an endpoint type.
 * Each type is its own object with its own iwd_ep_ops (iwd.h), opened by
 * its own file: FI_EP_RDM by iwd_rdm_ops.c, FI_EP_DGRAM by iwd_ep_dgram.c,
 * FI_EP_MSG by iwd_ep_msg.c. Nothing after this asks which type it has.
 */
#include "iwd.h"

int iwd_ep_open(struct fid_domain *domain, struct fi_info *info, struct fid_ep **out, void *context)
{
	struct iwd_domain *dom = iwd_container_of(domain, struct iwd_domain, domain_fid);
	int ret;

	ret = iwd_check_info(info);
	if (ret)
		return ret;
	if (!out)
		return -FI_EINVAL;
	if (iwd_domain_check(dom))
		return -FI_ENODEV;
	switch (info->ep_attr->type) {
	case FI_EP_RDM:
		return iwd_rdm_ep_open(dom, info, out, context);
	case FI_EP_DGRAM:
		return iwd_dgram_ep_open(dom, info, out, context);
	case FI_EP_MSG:
		return iwd_msg_ep_open(dom, info, out, context);
	default:
		return -FI_EINVAL;
	}
}
