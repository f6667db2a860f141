/*
 * fi_progress — does data move while the target computes? (fi_domain(3),
 * "Progress": FI_PROGRESS_AUTO vs FI_PROGRESS_MANUAL for data_progress.)
 *
 * Two processes over an FI_EP_RDM endpoint of any provider (-p): the
 * target registers a buffer, then "computes": it spins without calling
 * libfabric until the initiator reports on the out-of-band TCP socket
 * that its operation completed, or until -b milliseconds have passed.
 * The initiator does one operation of -s octets:
 *   write   fi_write into the target's buffer (RMA)
 *   read    fi_read from the target's buffer (RMA)
 *   send    fi_send into a receive the target posted before computing
 *           (above the eager limit: a rendezvous, whose data the target's
 *           provider must fetch)
 * With -n COUNT (write, read) the -s octets go as COUNT operations of
 * size/COUNT octets (the last takes the rest), posted back to back, and
 * the initiator reports when all completed: a write's target must not need
 * a call per operation (over iwarpd RDM each fi_write once took one of the
 * target's bounce receives, FI_IWARPD_RX_BUFS: past them the writes
 * waited for the target).
 * The initiator reports when it completed. The target prints one line:
 *   progress <op> <size> progressed|waited <initiator ms> <busy ms>
 * "progressed": the operation completed while the target computed (the
 * provider moved the data without the target's calls); "waited": only
 * after the target called libfabric again. Then the data is checked.
 *
 *   fi_progress -p PROV -o write -s 4194304 -b 2000 -P 7000 [-n COUNT] (target)
 *   fi_progress -p PROV -o write -s 4194304 -b 2000 -P 7000 127.0.0.1  (initiator)
 * Exit status: 0 (either verdict) when the data arrived intact, 1 on error.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#define FITEST_NAME "fi_progress"
#include "fitest.h"

struct oob_info { /* target -> initiator, host order (same host or same arch) */
	uint64_t addr, key, len;
	size_t namelen;
	char name[64];
};

static struct fid_fabric *fab;
static struct fid_domain *dom;
static struct fid_ep *ep;
static struct fid_av *av;
static struct fid_cq *cq;
static struct fi_info *info;

static double now_ms(void) { return now_s() * 1e3; }

static void xfer(int fd, void *buf, size_t n, int send_it)
{
	char *p = buf;
	while (n) {
		ssize_t r = send_it ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
		if (r <= 0) {
			fprintf(stderr, "fi_progress: out-of-band socket: %s\n", r ? strerror(errno) : "closed");
			exit(1);
		}
		p += r;
		n -= (size_t)r;
	}
}

/* wait_cq reads one completion, bounded by limit_ms. */
static void wait_cq(double limit_ms, const char *what)
{
	struct fi_cq_data_entry e;
	double end = now_ms() + limit_ms;
	for (;;) {
		ssize_t r = fi_cq_read(cq, &e, 1);
		if (r == 1)
			return;
		if (r == -FI_EAVAIL) {
			struct fi_cq_err_entry err = {0};
			fi_cq_readerr(cq, &err, 0);
			fprintf(stderr, "fi_progress: %s failed: %s\n", what, fi_strerror(err.err));
			exit(1);
		}
		if (r != -FI_EAGAIN)
			CHECK(r);
		if (now_ms() > end) {
			fprintf(stderr, "fi_progress: %s: no completion within %.0f ms\n", what, limit_ms);
			exit(1);
		}
	}
}

/* POST_QUIET retries an operation the provider refuses with -FI_EAGAIN (a
 * connection being set up, a full queue), driving progress meanwhile. */
#define POST_QUIET(call)                                                              \
	do {                                                                    \
		ssize_t r_;                                                     \
		double end_ = now_ms() + 30000;                                 \
		while ((r_ = (call)) == -FI_EAGAIN && now_ms() < end_) {        \
			struct fi_cq_data_entry e_;                             \
			if (fi_cq_read(cq, &e_, 1) == 1) {                      \
				fprintf(stderr, "fi_progress: unexpected completion\n"); \
				exit(1);                                        \
			}                                                       \
		}                                                               \
		CHECK(r_);                                                      \
	} while (0)

static void open_ep(const char *prov)
{
	struct fi_info *hints = fi_allocinfo();
	struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_DATA};
	struct fi_av_attr ava = {.type = FI_AV_TABLE};
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG | FI_RMA;
	hints->mode = FI_CONTEXT;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->fabric_attr->prov_name = strdup(prov);
	CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &info));
	fi_freeinfo(hints);
	CHECK(fi_fabric(info->fabric_attr, &fab, NULL));
	CHECK(fi_domain(fab, info, &dom, NULL));
	CHECK(fi_cq_open(dom, &cqa, &cq, NULL));
	CHECK(fi_av_open(dom, &ava, &av, NULL));
	CHECK(fi_endpoint(dom, info, &ep, NULL));
	CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_ep_bind(ep, &av->fid, 0));
	CHECK(fi_enable(ep));
}

static uint8_t pattern(size_t i) { return (uint8_t)(i * 7 + (i >> 9) * 3 + 1); }

int main(int argc, char **argv)
{
	const char *prov = "iwarpd", *op = "write", *peer = NULL;
	size_t size = 4 << 20;
	size_t count = 1;
	int busy = 2000, port = 0, opt, fd;
	while ((opt = getopt(argc, argv, "p:o:s:b:P:n:")) != -1) {
		switch (opt) {
		case 'p': prov = optarg; break;
		case 'o': op = optarg; break;
		case 's': size = strtoull(optarg, NULL, 0); break;
		case 'b': busy = atoi(optarg); break;
		case 'P': port = atoi(optarg); break;
		case 'n': count = strtoull(optarg, NULL, 0); break;
		default:
			fprintf(stderr, "usage: fi_progress -p PROV -o write|read|send -s SIZE -b BUSY_MS -P PORT [-n COUNT] [TARGET_IP]\n");
			return 1;
		}
	}
	if (optind < argc)
		peer = argv[optind];
	if (!port || (strcmp(op, "write") && strcmp(op, "read") && strcmp(op, "send"))) {
		fprintf(stderr, "fi_progress: -P and -o write|read|send are required\n");
		return 1;
	}
	if (count < 1 || count > size || count > 4096 || (count > 1 && !strcmp(op, "send"))) {
		fprintf(stderr, "fi_progress: -n wants 1..4096 operations of at least one octet, write or read\n");
		return 1;
	}

	/* Out-of-band TCP: the target listens, the initiator connects. */
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	if (peer) {
		inet_pton(AF_INET, peer, &sa.sin_addr);
		fd = socket(AF_INET, SOCK_STREAM, 0);
		int ok = -1;
		for (int i = 0; i < 200 && ok; i++) { /* the target may not listen yet: 10 s */
			ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
			if (ok) {
				close(fd);
				usleep(50000);
				fd = socket(AF_INET, SOCK_STREAM, 0);
			}
		}
		if (ok) {
			fprintf(stderr, "fi_progress: connecting to %s:%d: %s\n", peer, port, strerror(errno));
			return 1;
		}
	} else {
		int one = 1, l = socket(AF_INET, SOCK_STREAM, 0);
		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(l, (struct sockaddr *)&sa, sizeof(sa)) || listen(l, 1)) {
			fprintf(stderr, "fi_progress: listening on port %d: %s\n", port, strerror(errno));
			return 1;
		}
		fd = accept(l, NULL, NULL);
		close(l);
		if (fd < 0) {
			fprintf(stderr, "fi_progress: accept: %s\n", strerror(errno));
			return 1;
		}
	}

	open_ep(prov);
	uint8_t *buf = aligned_alloc(4096, (size + 4095) / 4096 * 4096);
	uint8_t small[64] = {0};
	struct fid_mr *mr, *smr;
	struct fi_context ctx[4];
	fi_addr_t other;
	struct oob_info me = {0}, it;
	CHECK(fi_mr_reg(dom, buf, size, FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0,
			0, 0, &mr, NULL));
	CHECK(fi_mr_reg(dom, small, sizeof(small), FI_SEND | FI_RECV, 0, 1, 0, &smr, NULL));
	if (info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
		CHECK(fi_mr_bind(mr, &ep->fid, 0));
		CHECK(fi_mr_enable(mr));
		CHECK(fi_mr_bind(smr, &ep->fid, 0));
		CHECK(fi_mr_enable(smr));
	}
	me.namelen = sizeof(me.name);
	CHECK(fi_getname(&ep->fid, me.name, &me.namelen));
	me.addr = (info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)buf : 0;
	me.key = fi_mr_key(mr);
	me.len = size;
	xfer(fd, &me, sizeof(me), 1);
	xfer(fd, &it, sizeof(it), 0);
	if (fi_av_insert(av, it.name, 1, &other, 0, NULL) != 1) {
		fprintf(stderr, "fi_progress: fi_av_insert failed\n");
		return 1;
	}

	/* Warm-up: one message each way (connections, address resolution). */
	if (peer) {
		POST_QUIET(fi_send(ep, small, 8, fi_mr_desc(smr), other, &ctx[0]));
		wait_cq(30000, "warm-up send");
		POST_QUIET(fi_recv(ep, small, sizeof(small), fi_mr_desc(smr), FI_ADDR_UNSPEC, &ctx[1]));
		wait_cq(30000, "warm-up receive");
	} else {
		POST_QUIET(fi_recv(ep, small, sizeof(small), fi_mr_desc(smr), FI_ADDR_UNSPEC, &ctx[1]));
		wait_cq(30000, "warm-up receive");
		POST_QUIET(fi_send(ep, small, 8, fi_mr_desc(smr), other, &ctx[0]));
		wait_cq(30000, "warm-up send");
	}

	char go = 'g', done = 'd';
	if (!peer) {
		/* Target. */
		for (size_t i = 0; i < size; i++)
			buf[i] = strcmp(op, "read") ? 0 : pattern(i);
		if (!strcmp(op, "send"))
			POST_QUIET(fi_recv(ep, buf, size, fi_mr_desc(mr), FI_ADDR_UNSPEC, &ctx[2]));
		xfer(fd, &go, 1, 1);
		/* Compute: no libfabric call until the initiator is done or busy ms. */
		double t0 = now_ms(), init_ms = 0;
		int progressed = 0;
		volatile uint64_t work = 0;
		while (now_ms() - t0 < busy) {
			struct pollfd p = {.fd = fd, .events = POLLIN};
			for (int k = 0; k < 100000; k++)
				work += (uint64_t)k * 2654435761u;
			if (poll(&p, 1, 0) == 1) {
				progressed = 1;
				break;
			}
		}
		double busy_ms = now_ms() - t0;
		if (!strcmp(op, "send"))
			wait_cq(30000, "the rendezvous receive");
		/* Drive the provider until the initiator reports (bounded). */
		for (double end = now_ms() + 30000; !progressed;) {
			struct pollfd p = {.fd = fd, .events = POLLIN};
			struct fi_cq_data_entry e;
			ssize_t r = fi_cq_read(cq, &e, 1);
			if (r < 0 && r != -FI_EAGAIN)
				CHECK(r);
			if (poll(&p, 1, 1) == 1)
				break;
			if (now_ms() > end) {
				fprintf(stderr, "fi_progress: the initiator did not report within 30 s\n");
				return 1;
			}
		}
		xfer(fd, &init_ms, sizeof(init_ms), 0);
		/* An iWARP RDMA Write completes at the initiator once TCP has
		 * it (RFC 5040: completion at the Data Source says nothing of
		 * placement at the Data Sink), so the last octets may still be
		 * on their way: wait for them, bounded. */
		int bad = 0;
		if (strcmp(op, "read")) {
			size_t first_bad = 0;
			for (double end = now_ms() + 10000;;) {
				while (first_bad < size && buf[first_bad] == pattern(first_bad))
					first_bad++;
				if (first_bad == size)
					break;
				if (now_ms() > end) {
					fprintf(stderr, "fi_progress: octet %zu is %#x, want %#x (10 s after the initiator completed)\n",
						first_bad, buf[first_bad], pattern(first_bad));
					bad = 1;
					break;
				}
				struct fi_cq_data_entry e;
				ssize_t r = fi_cq_read(cq, &e, 1);
				if (r < 0 && r != -FI_EAGAIN)
					CHECK(r);
				usleep(1000);
			}
		}
		xfer(fd, &done, 1, 1);
		printf("progress %s %zu %s %.1f %.1f\n", op, size, progressed ? "progressed" : "waited", init_ms,
		       busy_ms);
		fflush(stdout);
		if (bad)
			return 1;
	} else {
		/* Initiator. */
		for (size_t i = 0; i < size; i++)
			buf[i] = strcmp(op, "read") ? pattern(i) : 0;
		xfer(fd, &go, 1, 0);
		double t0 = now_ms();
		size_t chunk = size / count, completed = 0;
		for (size_t i = 0; i < count; i++) {
			size_t off = i * chunk, n = i + 1 == count ? size - off : chunk;
			ssize_t r;
			double end = now_ms() + 30000 + busy;
			for (;;) {
				if (!strcmp(op, "write"))
					r = fi_write(ep, buf + off, n, fi_mr_desc(mr), other, it.addr + off, it.key, &ctx[2]);
				else if (!strcmp(op, "read"))
					r = fi_read(ep, buf + off, n, fi_mr_desc(mr), other, it.addr + off, it.key, &ctx[2]);
				else
					r = fi_send(ep, buf, size, fi_mr_desc(mr), other, &ctx[2]);
				if (r != -FI_EAGAIN || now_ms() > end)
					break;
				struct fi_cq_data_entry e; /* a full queue: earlier operations complete */
				ssize_t c = fi_cq_read(cq, &e, 1);
				if (c == 1)
					completed++;
				else if (c != -FI_EAGAIN)
					wait_cq(0, op); /* reports the error */
			}
			CHECK(r);
		}
		for (; completed < count; completed++)
			wait_cq(30000 + busy, op);
		double ms = now_ms() - t0;
		xfer(fd, &ms, sizeof(ms), 1); /* also ends the target's computing */
		xfer(fd, &done, 1, 0);
		if (!strcmp(op, "read"))
			for (size_t i = 0; i < size; i++)
				if (buf[i] != pattern(i)) {
					fprintf(stderr, "fi_progress: octet %zu read is %#x, want %#x\n", i, buf[i], pattern(i));
					return 1;
				}
	}
	fi_close(&ep->fid);
	fi_close(&mr->fid);
	fi_close(&smr->fid);
	fi_close(&av->fid);
	fi_close(&cq->fid);
	fi_close(&dom->fid);
	fi_close(&fab->fid);
	fi_freeinfo(info);
	free(buf);
	close(fd);
	return 0;
}
