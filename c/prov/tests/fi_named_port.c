/*
 * fi_named_port — endpoints on the address an application names in
 * fi_getinfo's src_addr (fi_getinfo(3) src_addr, fi_endpoint(3),
 * fi_cm(3)); issue 19 items 1 and 3:
 *   1. MSG: a passive endpoint listens on 127.0.0.1:PORT; the endpoint
 *      opened from its connection request's info (whose src_addr is the
 *      listener's address) opens, accepts and receives a message. Before,
 *      its RC QP asked the daemon for PORT and fi_endpoint failed.
 *      A connect to the port once its listener is closed ends in
 *      FI_ECONNREFUSED.
 *   2. RDM and DGRAM: src_addr 127.0.0.1:PORT+1 / PORT+2 — ports outside
 *      the daemon's -rd-ports/-ud-ports, as fabtests' 9228 — give an
 *      endpoint whose fi_getname says that port.
 *      Both ends then call fi_shutdown and each gets FI_SHUTDOWN (before,
 *      neither did: fabtests' fi_cm_data waited forever).
 *   3. A src_addr the daemon does not serve (127.0.0.2) is refused by
 *      fi_getinfo (-FI_ENODATA), not first by fi_endpoint.
 *
 *   fi_named_port PORT     prints "fi_named_port: ok" and exits 0, else 1
 * PORT, PORT+1 and PORT+2 must be free unprivileged ports. The daemon is
 * FI_IWARPD_SOCKET's; FI_PROVIDER=^ofi_rxm,ofi_rxd (the provider's own
 * endpoints). Every wait is bounded.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>

#define FITEST_NAME "fi_named_port"
#include "fitest.h"

static struct fi_info *hints_for(enum fi_ep_type type, const char *ip, int port)
{
	struct fi_info *h = fi_allocinfo();
	struct sockaddr_in *sin = calloc(1, sizeof(*sin));
	if (!h || !sin)
		exit(1);
	h->ep_attr->type = type;
	h->caps = FI_MSG;
	h->addr_format = FI_SOCKADDR_IN;
	h->fabric_attr->prov_name = strdup("iwarpd");
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	sin->sin_family = AF_INET;
	sin->sin_port = htons((uint16_t)port);
	inet_pton(AF_INET, ip, &sin->sin_addr);
	h->src_addr = sin;
	h->src_addrlen = sizeof(*sin);
	return h;
}

/* The next event on eq, or exits 1 after 20 s naming the side whose EQ it
 * is and the event it waited for. */
static ssize_t next_event(struct fid_eq *eq, uint32_t *ev, struct fi_eq_cm_entry *e, size_t len, const char *side,
			  const char *what)
{
	double end = now_s() + 20;
	while (now_s() < end) {
		ssize_t n = fi_eq_sread(eq, ev, e, len, 100, 0);
		if (n > 0)
			return n;
		if (n == -FI_EAVAIL) {
			struct fi_eq_err_entry err = {0};
			CHECK(fi_eq_readerr(eq, &err, 0));
			return -err.err;
		}
		if (n != -FI_EAGAIN && n != -FI_ETIMEDOUT)
			CHECK(n);
	}
	fprintf(stderr, FITEST_NAME ": no EQ event in time on the %s side's EQ (waiting for %s)\n", side, what);
	exit(1);
}

/* 1. A listener on a named port accepts. */
static void msg_accept(int port)
{
	struct fi_info *h = hints_for(FI_EP_MSG, "127.0.0.1", port), *info, *cinfo;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_eq *eq, *ceq;
	struct fid_pep *pep;
	struct fid_ep *ep, *cep;
	struct fid_cq *cq, *ccq;
	struct fi_eq_attr ea = {.wait_obj = FI_WAIT_UNSPEC};
	struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_MSG, .wait_obj = FI_WAIT_NONE};
	unsigned char evbuf[sizeof(struct fi_eq_cm_entry) + 256];
	struct fi_eq_cm_entry *e = (struct fi_eq_cm_entry *)evbuf;
	struct fi_cq_msg_entry c;
	static char rbuf[32], sbuf[32] = "hello through a named port";
	struct sockaddr_in name;
	size_t alen = sizeof(name);
	uint32_t ev;
	ssize_t n;
	double end;
	int ret;

	CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, h, &info));
	CHECK(fi_fabric(info->fabric_attr, &fab, NULL));
	CHECK(fi_eq_open(fab, &ea, &eq, NULL));
	CHECK(fi_eq_open(fab, &ea, &ceq, NULL));
	CHECK(fi_domain(fab, info, &dom, NULL));
	CHECK(fi_cq_open(dom, &ca, &cq, NULL));
	CHECK(fi_cq_open(dom, &ca, &ccq, NULL));
	CHECK(fi_passive_ep(fab, info, &pep, NULL));
	CHECK(fi_pep_bind(pep, &eq->fid, 0));
	CHECK(fi_listen(pep));
	CHECK(fi_getname(&pep->fid, &name, &alen));
	EXPECT(ntohs(name.sin_port) == port, "listener on port %u, want %d", ntohs(name.sin_port), port);

	/* The client: its own info, dest_addr the listener. */
	{
		struct fi_info *ch = hints_for(FI_EP_MSG, "127.0.0.1", 0);
		free(ch->src_addr);
		ch->src_addr = NULL;
		ch->src_addrlen = 0;
		ch->dest_addr = malloc(sizeof(name));
		memcpy(ch->dest_addr, &name, sizeof(name));
		ch->dest_addrlen = sizeof(name);
		CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, ch, &cinfo));
		fi_freeinfo(ch);
	}
	CHECK(fi_endpoint(dom, cinfo, &cep, NULL));
	CHECK(fi_ep_bind(cep, &ceq->fid, 0));
	CHECK(fi_ep_bind(cep, &ccq->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_enable(cep));
	CHECK(fi_connect(cep, &name, NULL, 0));

	n = next_event(eq, &ev, e, sizeof(evbuf), "listening", "FI_CONNREQ");
	if (n < 0 || ev != FI_CONNREQ) {
		fprintf(stderr, FITEST_NAME ": no FI_CONNREQ (%zd)\n", n);
		exit(1);
	}
	ret = fi_endpoint(dom, e->info, &ep, NULL);
	EXPECT(ret == 0, "fi_endpoint from a connection request on port %d: %s", port, fi_strerror(-ret));
	if (ret)
		exit(1);
	fi_freeinfo(e->info);
	CHECK(fi_ep_bind(ep, &eq->fid, 0));
	CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_enable(ep));
	CHECK(fi_recv(ep, rbuf, sizeof(rbuf), NULL, 0, NULL));
	CHECK(fi_accept(ep, NULL, 0));
	n = next_event(eq, &ev, e, sizeof(evbuf), "accepting", "FI_CONNECTED");
	EXPECT(n > 0 && ev == FI_CONNECTED, "accepting side: %zd event %u, want FI_CONNECTED", n, ev);
	n = next_event(ceq, &ev, e, sizeof(evbuf), "connecting", "FI_CONNECTED");
	EXPECT(n > 0 && ev == FI_CONNECTED, "connecting side: %zd event %u, want FI_CONNECTED", n, ev);
	/* The connecting side leaves its send completion unread until after
	 * its FI_SHUTDOWN: having called fi_shutdown, it gets FI_SHUTDOWN all
	 * the same (before, the provider held it behind the unread completion
	 * forever, and whether this test passed hung on which completion the
	 * loop read first), and the completion stays in the CQ. */
	CHECK(fi_send(cep, sbuf, sizeof(sbuf), NULL, 0, NULL));
	for (n = -FI_EAGAIN, end = now_s() + 20; n == -FI_EAGAIN && now_s() < end;)
		n = fi_cq_read(cq, &c, 1);
	EXPECT(n == 1 && !memcmp(rbuf, sbuf, sizeof(sbuf)), "message: %zd \"%.*s\"", n, (int)sizeof(rbuf), rbuf);
	/* Both sides end it with fi_shutdown: each gets FI_SHUTDOWN (fi_cm(3),
	 * as fabtests' fi_cm_data expects). */
	CHECK(fi_shutdown(ep, 0));
	CHECK(fi_shutdown(cep, 0));
	n = next_event(eq, &ev, e, sizeof(evbuf), "accepting", "FI_SHUTDOWN");
	EXPECT(n > 0 && ev == FI_SHUTDOWN && e->fid == &ep->fid, "accepting side after fi_shutdown: %zd event %u", n,
	       ev);
	n = next_event(ceq, &ev, e, sizeof(evbuf), "connecting", "FI_SHUTDOWN");
	EXPECT(n > 0 && ev == FI_SHUTDOWN && e->fid == &cep->fid, "connecting side after fi_shutdown: %zd event %u", n,
	       ev);
	for (n = -FI_EAGAIN, end = now_s() + 20; n == -FI_EAGAIN && now_s() < end;)
		n = fi_cq_read(ccq, &c, 1);
	EXPECT(n == 1 && (c.flags & FI_SEND), "connecting side's send completion after FI_SHUTDOWN: %zd flags %#llx", n,
	       (unsigned long long)c.flags);
	n = fi_eq_read(eq, &ev, e, sizeof(evbuf), 0);
	EXPECT(n == -FI_EAGAIN, "accepting side: %zd, want no second FI_SHUTDOWN", n);
	n = fi_eq_read(ceq, &ev, e, sizeof(evbuf), 0);
	EXPECT(n == -FI_EAGAIN, "connecting side: %zd, want no second FI_SHUTDOWN", n);

	CHECK(fi_close(&ep->fid));
	CHECK(fi_close(&cep->fid));
	CHECK(fi_close(&pep->fid));
	CHECK(fi_close(&cq->fid));
	CHECK(fi_close(&ccq->fid));
	CHECK(fi_close(&dom->fid));
	CHECK(fi_close(&eq->fid));
	CHECK(fi_close(&ceq->fid));
	CHECK(fi_close(&fab->fid));
	fi_freeinfo(cinfo);
	fi_freeinfo(info);
	fi_freeinfo(h);
}

/* 1b. A connect to the port after its listener closed is refused:
 * FI_ECONNREFUSED (it said FI_EHOSTUNREACH; ofi_rxm tells the two apart). */
static void msg_refused(int port)
{
	struct fi_info *h = hints_for(FI_EP_MSG, "127.0.0.1", 0), *info;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_eq *eq;
	struct fid_cq *cq;
	struct fid_ep *ep;
	struct fi_eq_attr ea = {.wait_obj = FI_WAIT_UNSPEC};
	struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_MSG, .wait_obj = FI_WAIT_NONE};
	unsigned char evbuf[sizeof(struct fi_eq_cm_entry) + 256];
	struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	uint32_t ev;
	ssize_t n;

	inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
	CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, h, &info));
	CHECK(fi_fabric(info->fabric_attr, &fab, NULL));
	CHECK(fi_eq_open(fab, &ea, &eq, NULL));
	CHECK(fi_domain(fab, info, &dom, NULL));
	CHECK(fi_cq_open(dom, &ca, &cq, NULL));
	CHECK(fi_endpoint(dom, info, &ep, NULL));
	CHECK(fi_ep_bind(ep, &eq->fid, 0));
	CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_enable(ep));
	CHECK(fi_connect(ep, &to, NULL, 0));
	n = next_event(eq, &ev, (struct fi_eq_cm_entry *)evbuf, sizeof(evbuf), "connecting", "FI_ECONNREFUSED");
	EXPECT(n == -FI_ECONNREFUSED, "connect to a closed port: %zd (%s), want -FI_ECONNREFUSED", n,
	       n < 0 ? fi_strerror((int)-n) : "an event");
	CHECK(fi_close(&ep->fid));
	CHECK(fi_close(&cq->fid));
	CHECK(fi_close(&dom->fid));
	CHECK(fi_close(&eq->fid));
	CHECK(fi_close(&fab->fid));
	fi_freeinfo(info);
	fi_freeinfo(h);
}

/* 2. A datagram endpoint on a named port outside the daemon's ranges. */
static void dgram_port(enum fi_ep_type type, int port)
{
	struct fi_info *h = hints_for(type, "127.0.0.1", port), *info;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	struct fi_av_attr aa = {.type = FI_AV_TABLE};
	struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_MSG, .wait_obj = FI_WAIT_NONE};
	struct sockaddr_in name;
	size_t alen = sizeof(name);
	const char *what = type == FI_EP_RDM ? "RDM" : "DGRAM";
	int ret;

	CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, h, &info));
	CHECK(fi_fabric(info->fabric_attr, &fab, NULL));
	CHECK(fi_domain(fab, info, &dom, NULL));
	CHECK(fi_av_open(dom, &aa, &av, NULL));
	CHECK(fi_cq_open(dom, &ca, &cq, NULL));
	ret = fi_endpoint(dom, info, &ep, NULL);
	EXPECT(ret == 0, "%s fi_endpoint on port %d: %s", what, port, fi_strerror(-ret));
	if (!ret) {
		CHECK(fi_ep_bind(ep, &av->fid, 0));
		CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
		CHECK(fi_enable(ep));
		CHECK(fi_getname(&ep->fid, &name, &alen));
		EXPECT(ntohs(name.sin_port) == port, "%s endpoint on port %u, want %d", what, ntohs(name.sin_port),
		       port);
		CHECK(fi_close(&ep->fid));
	}
	CHECK(fi_close(&cq->fid));
	CHECK(fi_close(&av->fid));
	CHECK(fi_close(&dom->fid));
	CHECK(fi_close(&fab->fid));
	fi_freeinfo(info);
	fi_freeinfo(h);
}

int main(int argc, char **argv)
{
	struct fi_info *h, *info = NULL;
	int port, ret;

	if (argc < 2 || (port = atoi(argv[1])) < 1024 || port > 65533) {
		fprintf(stderr, "usage: " FITEST_NAME " PORT (PORT..PORT+2 free, unprivileged)\n");
		return 2;
	}
	msg_accept(port);
	msg_refused(port);
	dgram_port(FI_EP_RDM, port + 1);
	dgram_port(FI_EP_DGRAM, port + 2);

	/* 3. An address the daemon does not serve. */
	h = hints_for(FI_EP_RDM, "127.0.0.2", port);
	ret = fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, h, &info);
	EXPECT(ret == -FI_ENODATA, "fi_getinfo with src_addr 127.0.0.2 (not served): %d, want -FI_ENODATA", ret);
	fi_freeinfo(info);
	fi_freeinfo(h);

	if (failures) {
		fprintf(stderr, FITEST_NAME ": %d failures\n", failures);
		return 1;
	}
	printf(FITEST_NAME ": ok\n");
	return 0;
}
