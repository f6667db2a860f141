/*
 * fi_cm_race — FI_CONNECTED carries the accept's data even when the
 * connection ends at once (fi_cm(3): "the param argument of fi_accept ...
 * will be returned to the active side in the FI_CONNECTED event"): a
 * responder that accepts and closes right away, as fabtests' fi_cm_data
 * server does (fi_accept, then fi_shutdown), must give the active side
 * FI_CONNECTED with its data, then FI_SHUTDOWN — never FI_SHUTDOWN first.
 * The daemon queued the connection's end (the engine's) and its start (the
 * connecting goroutine's) from two goroutines, and now and then the end
 * came first: fi_cm_data read a 16-octet FI_SHUTDOWN where it wanted
 * FI_CONNECTED with 16 + N octets (issue 19).
 *
 * The responder is a raw MPA peer on a thread of this program (RFC 5044
 * §7.1, RFC 6581): it reads the MPA Request, writes a Reply with private
 * data and closes the TCP connection in the same breath, ROUNDS times.
 * The active side is the provider's MSG endpoint on the daemon named by
 * FI_IWARPD_SOCKET (at 127.0.0.1).
 *
 *   fi_cm_race [PROV]     prints "fi_cm_race: ok" and exits 0, else 1
 * Every wait is bounded (seconds times IWARPD_TEST_TIMEOUT_SCALE).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#define FITEST_NAME "fi_cm_race"
#include "fitest.h"

#define ROUNDS 100
#define MPA_HDR 20 /* key (16), flags, revision, private data length (RFC 5044 §7.1) */
#define MPA_ENHANCED 0x10
#define MPA_IRD_ORD_LEN 4 /* RFC 6581 §9.1, first in the private data of revision 2 enhanced */

static int lfd;

/* Reads exactly n octets (or fails). */
static int read_full(int fd, unsigned char *p, size_t n)
{
	while (n) {
		ssize_t r = read(fd, p, n);
		if (r <= 0)
			return -1;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

/* The accept data of round i. */
static void accept_data(int i, char *buf, size_t len)
{
	snprintf(buf, len, "accepted, round %03d", i);
}

/* The responder: per connection, the MPA Request in, the Reply with
 * accept data out, and the connection closed at once. */
static void *responder(void *arg)
{
	unsigned char req[MPA_HDR + 512], rep[MPA_HDR + 512];
	char data[32];
	int i;
	(void)arg;
	for (i = 0; i < ROUNDS; i++) {
		int c = accept(lfd, NULL, NULL);
		size_t pd, own, off = MPA_HDR;
		if (c < 0)
			fitest_die("responder: accept: %m");
		if (read_full(c, req, MPA_HDR))
			fitest_die("responder: round %d: no MPA Request", i);
		pd = (size_t)req[18] << 8 | req[19];
		if (pd > sizeof(req) - MPA_HDR || read_full(c, req + MPA_HDR, pd))
			fitest_die("responder: round %d: MPA Request private data (%zu)", i, pd);
		accept_data(i, data, sizeof(data));
		own = strlen(data);
		memcpy(rep, "MPA ID Rep Frame", 16);
		rep[16] = req[16]; /* the Request's C (CRC) and enhanced bits, no markers, no reject */
		rep[17] = req[17];
		if (req[17] == 2 && (req[16] & MPA_ENHANCED)) {
			/* IRD/ORD: ours are the initiator's ORD and IRD, no peer-to-peer bits */
			rep[MPA_HDR] = req[MPA_HDR + 2] & 0x3f;
			rep[MPA_HDR + 1] = req[MPA_HDR + 3];
			rep[MPA_HDR + 2] = req[MPA_HDR] & 0x3f;
			rep[MPA_HDR + 3] = req[MPA_HDR + 1];
			off += MPA_IRD_ORD_LEN;
		}
		memcpy(rep + off, data, own);
		off += own;
		rep[18] = (unsigned char)((off - MPA_HDR) >> 8);
		rep[19] = (unsigned char)(off - MPA_HDR);
		if (write(c, rep, off) != (ssize_t)off)
			fitest_die("responder: round %d: writing the MPA Reply: %m", i);
		close(c);
	}
	return NULL;
}

/* The next EQ event within secs (scaled); an error event is -err. */
static ssize_t next_event(struct fid_eq *eq, uint32_t *ev, struct fi_eq_cm_entry *e, size_t len, double secs)
{
	double end = now_s() + secs * fitest_scale();
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
	fitest_die("no EQ event in time");
	return 0;
}

int main(int argc, char **argv)
{
	struct fi_info *hints = fi_allocinfo(), *info;
	struct fi_eq_attr ea = {.wait_obj = FI_WAIT_UNSPEC};
	struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_MSG, .wait_obj = FI_WAIT_NONE};
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_eq *eq;
	struct fid_cq *cq;
	struct sockaddr_in sin = {.sin_family = AF_INET};
	socklen_t slen = sizeof(sin);
	unsigned char evbuf[sizeof(struct fi_eq_cm_entry) + 256];
	struct fi_eq_cm_entry *e = (struct fi_eq_cm_entry *)evbuf;
	pthread_t th;
	int i, early = 0, nodata = 0;

	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) || listen(lfd, 16) ||
	    getsockname(lfd, (struct sockaddr *)&sin, &slen))
		fitest_die("the responder's listening socket: %m");
	if (pthread_create(&th, NULL, responder, NULL))
		fitest_die("pthread_create");

	hints->ep_attr->type = FI_EP_MSG;
	hints->caps = FI_MSG;
	hints->fabric_attr->prov_name = strdup(argc > 1 ? argv[1] : "iwarpd");
	CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
	CHECK(fi_fabric(info->fabric_attr, &fab, NULL));
	CHECK(fi_eq_open(fab, &ea, &eq, NULL));
	CHECK(fi_domain(fab, info, &dom, NULL));
	CHECK(fi_cq_open(dom, &ca, &cq, NULL));
	for (i = 0; i < ROUNDS; i++) {
		char want[32];
		struct fid_ep *ep;
		uint32_t ev;
		ssize_t n;
		fitest_set_deadline(10);
		accept_data(i, want, sizeof(want));
		CHECK(fi_endpoint(dom, info, &ep, NULL));
		CHECK(fi_ep_bind(ep, &eq->fid, 0));
		CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
		CHECK(fi_enable(ep));
		CHECK(fi_connect(ep, &sin, "hello", 5));
		n = next_event(eq, &ev, e, sizeof(evbuf), 10);
		if (n < 0)
			fitest_die("round %d: the connect failed: %s", i, fi_strerror((int)-n));
		if (ev != FI_CONNECTED) {
			early++;
			EXPECT(0, "round %d: event %u (%zd octets) before FI_CONNECTED", i, ev, n);
		} else if ((size_t)n != sizeof(*e) + strlen(want) || memcmp(e->data, want, strlen(want))) {
			nodata++;
			EXPECT(0, "round %d: FI_CONNECTED of %zd octets, want %zu with \"%s\"", i, n,
			       sizeof(*e) + strlen(want), want);
		}
		if (ev == FI_CONNECTED) {
			n = next_event(eq, &ev, e, sizeof(evbuf), 10);
			EXPECT(n > 0 && ev == FI_SHUTDOWN && e->fid == &ep->fid, "round %d: after FI_CONNECTED: %zd, event %u",
			       i, n, ev);
		}
		CHECK(fi_close(&ep->fid));
	}
	pthread_join(th, NULL);
	close(lfd);
	printf("fi_cm_race: %d rounds: %d ended before FI_CONNECTED, %d FI_CONNECTED without the accept data\n", ROUNDS,
	       early, nodata);
	fi_close(&cq->fid);
	fi_close(&eq->fid);
	fi_close(&dom->fid);
	fi_close(&fab->fid);
	fi_freeinfo(info);
	fi_freeinfo(hints);
	if (failures) {
		fprintf(stderr, "fi_cm_race: %d failures\n", failures);
		return 1;
	}
	printf("fi_cm_race: ok\n");
	return 0;
}
