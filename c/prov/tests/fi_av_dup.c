/*
 * fi_av_dup — an address inserted into an AV more than once (fi_av(3)
 * NOTES leaves duplicates to the provider; iwarpd returns the fi_addr the
 * address already has and counts references, docs/libfabric.md "Address
 * vectors"): every fi_addr the inserts returned names the peer, a receive
 * with FI_DIRECTED_RECV naming any of them matches that peer's messages
 * (posted before the message or after it arrived) and no other peer's, the
 * completion's source (fi_cq_readfrom, FI_SOURCE) is that fi_addr, and
 * fi_av_remove drops one insert: the peer stays until the last is removed,
 * then it can be inserted again. Open MPI's MPI_Intercomm_create re-inserts
 * peers it knows and hung when a duplicate got an fi_addr of its own.
 *
 * One process, three RDM endpoints (a and c send, b receives) on the daemon
 * named by FI_IWARPD_SOCKET.
 *   fi_av_dup [PROV]       prints "fi_av_dup: ok" and exits 0, else 1
 */
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#define FITEST_NAME "fi_av_dup"
#include "fitest.h"

enum { LEN = 32, TAG = 7 };

struct side {
	struct fid_ep *ep;
	struct fid_cq *cq;
	char name[64];
	size_t namelen;
};

/* next reads one completion of s with its source (bounded: 10 s); an
 * error completion is a failure. */
static void next(struct side *s, struct fi_cq_tagged_entry *e, fi_addr_t *src)
{
	double end = now_s() + 10;
	while (now_s() < end) {
		ssize_t r = fi_cq_readfrom(s->cq, e, 1, src);
		if (r == 1)
			return;
		if (r == -FI_EAVAIL) {
			struct fi_cq_err_entry err = {0};
			CHECK(fi_cq_readerr(s->cq, &err, 0));
			fprintf(stderr, "fi_av_dup: error completion: %s\n", fi_strerror(err.err));
			exit(1);
		}
		if (r != -FI_EAGAIN)
			CHECK(r);
	}
	fprintf(stderr, "fi_av_dup: no completion within 10 s\n");
	exit(1);
}

/* send_from sends msg (tagged with TAG when tagged) from s to dest and
 * waits for the send completion. */
static void send_from(struct side *s, fi_addr_t dest, const char *msg, int tagged)
{
	static char buf[LEN];
	struct fi_cq_tagged_entry e;
	fi_addr_t src;
	snprintf(buf, sizeof buf, "%s", msg);
	if (tagged)
		CHECK(fi_tsend(s->ep, buf, LEN, NULL, dest, TAG, NULL));
	else
		CHECK(fi_send(s->ep, buf, LEN, NULL, dest, NULL));
	next(s, &e, &src);
}

/* post posts one receive on b (directed at src, or FI_ADDR_UNSPEC). */
static void post(struct side *b, char *buf, fi_addr_t src, int tagged, struct fi_context *ctx)
{
	memset(buf, 0, LEN);
	if (tagged)
		CHECK(fi_trecv(b->ep, buf, LEN, NULL, src, TAG, 0, ctx));
	else
		CHECK(fi_recv(b->ep, buf, LEN, NULL, src, ctx));
}

/* expect_recv reads b's next completion: it must be ctx's, hold want and
 * report the source want_src. */
static void expect_recv(struct side *b, struct fi_context *ctx, const char *buf, const char *want, fi_addr_t want_src,
			const char *what)
{
	struct fi_cq_tagged_entry e;
	fi_addr_t src = FI_ADDR_NOTAVAIL;
	next(b, &e, &src);
	EXPECT(e.op_context == ctx, "%s: completion of context %p, want %p", what, e.op_context, (void *)ctx);
	EXPECT(!strcmp(buf, want), "%s: the receive holds '%s', want '%s'", what, buf, want);
	EXPECT(src == want_src, "%s: source fi_addr %llu, want %llu", what, (unsigned long long)src,
	       (unsigned long long)want_src);
}

/* directed checks, for one fi_addr naming a (and both kinds of receive),
 * that a directed receive takes a's message and not c's: once posted
 * before both messages arrive, once after they wait as unexpected. */
static void directed(struct side *a, struct side *b, struct side *c, fi_addr_t a_addr, fi_addr_t c_addr,
		     fi_addr_t b_addr, const char *label)
{
	static char rbuf[2][LEN];
	struct fi_context ctx[2];
	char what[128];
	for (int tagged = 0; tagged < 2; tagged++) {
		/* Posted first: c's message must not take it. */
		post(b, rbuf[0], a_addr, tagged, &ctx[0]);
		send_from(c, b_addr, "from c", tagged);
		send_from(a, b_addr, "from a", tagged);
		snprintf(what, sizeof what, "%s, %s, posted receive", label, tagged ? "tagged" : "untagged");
		expect_recv(b, &ctx[0], rbuf[0], "from a", a_addr, what);
		post(b, rbuf[1], FI_ADDR_UNSPEC, tagged, &ctx[1]);
		snprintf(what, sizeof what, "%s, %s, c's message to a wildcard receive", label,
			 tagged ? "tagged" : "untagged");
		expect_recv(b, &ctx[1], rbuf[1], "from c", c_addr, what);

		/* Unexpected: both wait; the directed receive takes a's. */
		send_from(c, b_addr, "from c", tagged);
		send_from(a, b_addr, "from a", tagged);
		post(b, rbuf[0], a_addr, tagged, &ctx[0]);
		snprintf(what, sizeof what, "%s, %s, unexpected message", label, tagged ? "tagged" : "untagged");
		expect_recv(b, &ctx[0], rbuf[0], "from a", a_addr, what);
		post(b, rbuf[1], FI_ADDR_UNSPEC, tagged, &ctx[1]);
		snprintf(what, sizeof what, "%s, %s, c's unexpected message to a wildcard receive", label,
			 tagged ? "tagged" : "untagged");
		expect_recv(b, &ctx[1], rbuf[1], "from c", c_addr, what);
	}
}

int main(int argc, char **argv)
{
	struct fi_info *hints = fi_allocinfo(), *info;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_av *av;
	struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_TAGGED};
	struct fi_av_attr ava = {.type = FI_AV_TABLE};
	struct side a, b, c;
	struct side *sides[3] = {&a, &b, &c};
	fi_addr_t a1, a23[2], b_addr, c_addr, again;
	struct sockaddr_in twice[2]; /* fi_av_insert takes an array of the format's addresses */
	char got[64];
	size_t len;

	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG | FI_TAGGED | FI_DIRECTED_RECV | FI_SOURCE;
	hints->fabric_attr->prov_name = strdup(argc > 1 ? argv[1] : "iwarpd");
	CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &info));
	CHECK(fi_fabric(info->fabric_attr, &fab, NULL));
	CHECK(fi_domain(fab, info, &dom, NULL));
	CHECK(fi_av_open(dom, &ava, &av, NULL));
	for (int i = 0; i < 3; i++) {
		struct side *s = sides[i];
		CHECK(fi_cq_open(dom, &cqa, &s->cq, NULL));
		CHECK(fi_endpoint(dom, info, &s->ep, NULL));
		CHECK(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV));
		CHECK(fi_ep_bind(s->ep, &av->fid, 0));
		CHECK(fi_enable(s->ep));
		s->namelen = sizeof(s->name);
		CHECK(fi_getname(&s->ep->fid, s->name, &s->namelen));
	}
	EXPECT(fi_av_insert(av, b.name, 1, &b_addr, 0, NULL) == 1, "fi_av_insert of b");
	EXPECT(fi_av_insert(av, a.name, 1, &a1, 0, NULL) == 1, "fi_av_insert of a");
	EXPECT(fi_av_insert(av, c.name, 1, &c_addr, 0, NULL) == 1, "fi_av_insert of c");
	/* a again, twice in one call (Open MPI inserts one at a time; both
	 * ways must give the fi_addr a already has). */
	EXPECT(a.namelen == sizeof(twice[0]), "fi_getname gave %zu octets, want a sockaddr_in", a.namelen);
	memcpy(&twice[0], a.name, sizeof(twice[0]));
	memcpy(&twice[1], a.name, sizeof(twice[1]));
	EXPECT(fi_av_insert(av, twice, 2, a23, 0, NULL) == 2, "fi_av_insert of a, twice more");
	EXPECT(a23[0] == a1 && a23[1] == a1, "a inserted three times got fi_addr %llu, %llu, %llu: want one",
	       (unsigned long long)a1, (unsigned long long)a23[0], (unsigned long long)a23[1]);

	directed(&a, &b, &c, a1, c_addr, b_addr, "first insert");
	directed(&a, &b, &c, a23[1], c_addr, b_addr, "third insert");

	/* Remove drops one insert: a stays until the last is removed. */
	CHECK(fi_av_remove(av, &a1, 1, 0));
	CHECK(fi_av_remove(av, &a23[0], 1, 0));
	len = sizeof(got);
	EXPECT(fi_av_lookup(av, a23[1], got, &len) == 0 && len == a.namelen && !memcmp(got, a.name, len),
	       "fi_av_lookup of a after two of its three inserts were removed");
	directed(&a, &b, &c, a23[1], c_addr, b_addr, "after two removes");
	CHECK(fi_av_remove(av, &a23[1], 1, 0));
	len = sizeof(got);
	EXPECT(fi_av_lookup(av, a1, got, &len) == -FI_EINVAL, "fi_av_lookup of a after its last insert was removed");
	EXPECT(fi_av_remove(av, &a1, 1, 0) == -FI_EINVAL, "a fourth fi_av_remove of a");

	/* Removal followed by re-insertion (fi_av(3) NOTES): a works again. */
	EXPECT(fi_av_insert(av, a.name, 1, &again, 0, NULL) == 1, "fi_av_insert of a after removal");
	directed(&a, &b, &c, again, c_addr, b_addr, "re-inserted");

	for (int i = 0; i < 3; i++) {
		fi_close(&sides[i]->ep->fid);
		fi_close(&sides[i]->cq->fid);
	}
	return fitest_close(av, dom, fab, info, hints);
}
