/*
 * fi_semantics — what fabtests' unit and functional tests found the
 * provider saying wrongly (issue 19 items 4 and 5), each against its man
 * page:
 *   getinfo  fi_getinfo(3)/fi_endpoint(3): tx_attr/rx_attr caps hold no
 *            FI_REMOTE_CQ_DATA, FI_LOCAL_COMM, FI_REMOTE_COMM; an MSG
 *            msg_order hint the endpoint cannot keep (FI_ORDER_DATA) gets
 *            no MSG info, FI_ORDER_STRICT is kept and returned; a
 *            control_progress FI_PROGRESS_AUTO hint is honoured; an
 *            FI_MR_BASIC hint gets mr_mode FI_MR_BASIC; RDM offers
 *            FI_REMOTE_CQ_DATA with its cq_data_size and fi_inject_writedata
 *            works; RDM and DGRAM name provider-specific protocols (not
 *            FI_PROTO_IWARP_RDM, FI_PROTO_UDP), MSG FI_PROTO_IWARP.
 *   av       fi_av(3) FI_SYNC_ERR: a good address's entry is set to 0.
 *   signal   fi_cq(3) fi_cq_signal: a blocked fi_cq_sread (no timeout)
 *            returns (alarm(30) stops a hang).
 *   inject   fi_msg(3): fi_sendmsg with the FI_INJECT flag completes;
 *            fi_inject does not.
 * One process, RDM endpoints on the daemon named by FI_IWARPD_SOCKET with
 * FI_PROVIDER=^ofi_rxm,ofi_rxd.
 *   fi_semantics           prints "fi_semantics: ok" and exits 0, else 1
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_rma.h>

#define FITEST_NAME "fi_semantics"
#include "fitest.h"

#define BAD_ATTR_CAPS (FI_REMOTE_CQ_DATA | FI_LOCAL_COMM | FI_REMOTE_COMM)

static struct fi_info *base_hints(enum fi_ep_type type, uint64_t caps)
{
	struct fi_info *h = fi_allocinfo();
	if (!h)
		exit(1);
	h->ep_attr->type = type;
	h->caps = caps;
	h->mode = ~0ull;
	h->fabric_attr->prov_name = strdup("iwarpd");
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	return h;
}

static void getinfo(void)
{
	struct fi_info *h, *info, *fi;
	int ret;

	/* tx/rx caps of every type, no hints. */
	CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, NULL, &info));
	for (fi = info; fi; fi = fi->next) {
		if (strcmp(fi->fabric_attr->prov_name, "iwarpd"))
			continue;
		EXPECT(!(fi->tx_attr->caps & BAD_ATTR_CAPS), "ep type %d: tx_attr caps %s", fi->ep_attr->type,
		       fi_tostr(&fi->tx_attr->caps, FI_TYPE_CAPS));
		EXPECT(!(fi->rx_attr->caps & BAD_ATTR_CAPS), "ep type %d: rx_attr caps %s", fi->ep_attr->type,
		       fi_tostr(&fi->rx_attr->caps, FI_TYPE_CAPS));
		EXPECT(!(fi->rx_attr->caps & ~fi->caps), "ep type %d: rx_attr caps beyond info caps", fi->ep_attr->type);
		EXPECT(fi->ep_attr->type == FI_EP_MSG ? fi->ep_attr->protocol == FI_PROTO_IWARP
						       : (fi->ep_attr->protocol & FI_PROV_SPECIFIC) != 0,
		       "ep type %d: protocol %s", fi->ep_attr->type, fi_tostr(&fi->ep_attr->protocol, FI_TYPE_PROTOCOL));
		if (fi->domain_attr->cq_data_size)
			EXPECT(fi->caps & FI_REMOTE_CQ_DATA, "ep type %d: cq_data_size %zu without FI_REMOTE_CQ_DATA",
			       fi->ep_attr->type, fi->domain_attr->cq_data_size);
	}
	fi_freeinfo(info);

	/* MSG ordering: what it keeps, and a refusal of what it cannot. */
	h = base_hints(FI_EP_MSG, FI_MSG);
	h->tx_attr->msg_order = FI_ORDER_DATA;
	ret = fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, h, &info);
	EXPECT(ret == -FI_ENODATA, "MSG with tx msg_order FI_ORDER_DATA: %d, want -FI_ENODATA", ret);
	if (!ret)
		fi_freeinfo(info);
	h->tx_attr->msg_order = FI_ORDER_STRICT;
	h->rx_attr->msg_order = FI_ORDER_STRICT;
	CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, h, &info));
	EXPECT((info->tx_attr->msg_order & FI_ORDER_STRICT) == FI_ORDER_STRICT &&
		       (info->rx_attr->msg_order & FI_ORDER_STRICT) == FI_ORDER_STRICT,
	       "MSG msg_order tx %#llx rx %#llx, want FI_ORDER_STRICT", (unsigned long long)info->tx_attr->msg_order,
	       (unsigned long long)info->rx_attr->msg_order);
	EXPECT(info->ep_attr->max_order_raw_size && info->ep_attr->max_order_war_size &&
		       info->ep_attr->max_order_waw_size,
	       "MSG keeps RAW/WAR/WAW but max_order sizes %zu/%zu/%zu", info->ep_attr->max_order_raw_size,
	       info->ep_attr->max_order_war_size, info->ep_attr->max_order_waw_size);
	fi_freeinfo(info);
	fi_freeinfo(h);

	/* Control progress AUTO asked, AUTO given. */
	h = base_hints(FI_EP_RDM, FI_MSG);
	h->domain_attr->control_progress = FI_PROGRESS_AUTO;
	CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, h, &info));
	EXPECT(info->domain_attr->control_progress == FI_PROGRESS_AUTO, "control_progress %d, want AUTO",
	       info->domain_attr->control_progress);
	fi_freeinfo(info);
	fi_freeinfo(h);

	/* FI_MR_BASIC in, FI_MR_BASIC out. */
	h = base_hints(FI_EP_RDM, FI_MSG | FI_RMA);
	h->domain_attr->mr_mode = FI_MR_BASIC;
	ret = fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, h, &info);
	EXPECT(ret == 0, "FI_MR_BASIC hint: %d", ret);
	if (!ret) {
		EXPECT(info->domain_attr->mr_mode == FI_MR_BASIC, "FI_MR_BASIC hint: mr_mode %#x",
		       info->domain_attr->mr_mode);
		fi_freeinfo(info);
	}
	fi_freeinfo(h);
}

static void on_alarm(int sig)
{
	(void)sig;
	static const char m[] = FITEST_NAME ": a blocked fi_cq_sread ignored fi_cq_signal (30 s)\n";
	if (write(2, m, sizeof(m) - 1) < 0)
		_exit(1);
	_exit(1);
}

struct side {
	struct fid_ep *ep;
	struct fid_cq *cq;
	fi_addr_t peer;
};

static ssize_t next(struct side *s, struct fi_cq_data_entry *e)
{
	double end = now_s() + 10;
	while (now_s() < end) {
		ssize_t r = fi_cq_read(s->cq, e, 1);
		if (r != -FI_EAGAIN)
			return r;
	}
	return -FI_EAGAIN;
}

int main(void)
{
	struct fi_info *hints = base_hints(FI_EP_RDM, FI_MSG | FI_RMA), *info;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_av *av;
	struct fid_cq *wcq;
	struct fid_mr *mr;
	struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_DATA, .wait_obj = FI_WAIT_UNSPEC};
	struct fi_av_attr ava = {.type = FI_AV_TABLE};
	struct side a, b;
	struct sockaddr_in addrs[2];
	int sync_err[2] = {-1, 0};
	fi_addr_t fa[2];
	char name[64], rbuf[4][32], sbuf[32] = "injected", target[64] = {0};
	size_t namelen = sizeof(name);
	struct fi_context ctx[4];
	struct fi_cq_data_entry e;
	struct iovec iov = {sbuf, sizeof(sbuf)};
	struct fi_msg msg = {.msg_iov = &iov, .iov_count = 1, .context = &ctx[2]};
	ssize_t r;

	getinfo();

	CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &info));
	EXPECT(info->caps & FI_REMOTE_CQ_DATA, "RDM info without FI_REMOTE_CQ_DATA");
	CHECK(fi_fabric(info->fabric_attr, &fab, NULL));
	CHECK(fi_domain(fab, info, &dom, NULL));
	CHECK(fi_av_open(dom, &ava, &av, NULL));

	/* signal: a read with no timeout, woken by the signal alone. */
	CHECK(fi_cq_open(dom, &cqa, &wcq, NULL));
	CHECK(fi_cq_signal(wcq));
	signal(SIGALRM, on_alarm);
	alarm(30);
	r = fi_cq_sread(wcq, &e, 1, NULL, -1);
	alarm(0);
	EXPECT(r == -FI_EAGAIN || r == -FI_ECANCELED, "fi_cq_sread after fi_cq_signal: %zd", r);
	CHECK(fi_close(&wcq->fid));

	struct side *sides[2] = {&a, &b};
	for (int i = 0; i < 2; i++) {
		struct side *s = sides[i];
		CHECK(fi_cq_open(dom, &cqa, &s->cq, NULL));
		CHECK(fi_endpoint(dom, info, &s->ep, NULL));
		CHECK(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV));
		CHECK(fi_ep_bind(s->ep, &av->fid, 0));
		CHECK(fi_enable(s->ep));
	}

	/* av: one good address, one bad (no port). */
	CHECK(fi_getname(&b.ep->fid, name, &namelen));
	memcpy(&addrs[0], name, sizeof(addrs[0]));
	addrs[1] = addrs[0];
	addrs[1].sin_port = 0;
	r = fi_av_insert(av, addrs, 2, fa, FI_SYNC_ERR, sync_err);
	EXPECT(r == 1, "fi_av_insert of a good and a bad address: %zd, want 1", r);
	EXPECT(sync_err[0] == 0, "FI_SYNC_ERR: the good address's entry is %d, want 0", sync_err[0]);
	EXPECT(sync_err[1] != 0, "FI_SYNC_ERR: the bad address's entry is 0");
	a.peer = fa[0];

	/* inject: fi_inject has no completion, fi_sendmsg(FI_INJECT) one. */
	for (int i = 0; i < 2; i++)
		CHECK(fi_recv(b.ep, rbuf[i], sizeof(rbuf[i]), NULL, FI_ADDR_UNSPEC, &ctx[i]));
	CHECK(fi_inject(a.ep, sbuf, sizeof(sbuf), a.peer));
	msg.addr = a.peer;
	CHECK(fi_sendmsg(a.ep, &msg, FI_INJECT));
	for (int i = 0; i < 2; i++)
		EXPECT(next(&b, &e) == 1, "receive %d did not complete", i);
	r = next(&a, &e);
	EXPECT(r == 1 && e.op_context == &ctx[2], "fi_sendmsg(FI_INJECT): %zd, context %p, want %p", r,
	       r == 1 ? e.op_context : NULL, (void *)&ctx[2]);
	r = fi_cq_read(a.cq, &e, 1);
	EXPECT(r == -FI_EAGAIN, "a second send completion (fi_inject's?): %zd, context %p", r,
	       r == 1 ? e.op_context : NULL);

	/* fi_inject_writedata: the CQ data reaches the target. */
	CHECK(fi_mr_reg(dom, target, sizeof(target), FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL));
	r = fi_inject_writedata(a.ep, sbuf, 8, 0x5eed, a.peer, (uint64_t)(uintptr_t)target, fi_mr_key(mr));
	EXPECT(r == 0, "fi_inject_writedata: %zd (%s)", r, fi_strerror((int)-r));
	if (!r) {
		r = next(&b, &e);
		EXPECT(r == 1 && (e.flags & FI_REMOTE_CQ_DATA) && e.data == 0x5eed && !memcmp(target, sbuf, 8),
		       "fi_inject_writedata at the target: %zd flags %#llx data %#llx", r,
		       (unsigned long long)e.flags, (unsigned long long)e.data);
	}

	for (int i = 0; i < 2; i++) {
		fi_close(&sides[i]->ep->fid);
		fi_close(&sides[i]->cq->fid);
	}
	fi_close(&mr->fid);
	return fitest_close(av, dom, fab, info, hints);
}
