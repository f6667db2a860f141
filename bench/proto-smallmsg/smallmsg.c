/* smallmsg: a standalone prototype of iwarpd's small-message path (issue 20).
 *
 * Not production code: it reproduces the topology of two nodes on one
 * machine — on each node a rank (the MPI process: polls its CQ with
 * sched_yield between empty polls and never blocks, as Open MPI's progress
 * loop over the provider does) and a daemon (the engine: passes over its
 * rings and its UDP socket, sched_yield between empty passes for a poll
 * window, then epoll_wait on its doorbell and socket) — and measures 8 B
 * one-way latency (ping-pong) and message rate (windows of W sends, one
 * reply), for the candidate designs of docs/design-small-messages.md:
 *
 *   tcp   two ranks, TCP_NODELAY over loopback, recv(MSG_DONTWAIT)+yield (the
 *         libfabric tcp / ob1 reference)
 *   udp   two ranks, raw UDP, same polling (the kernel floor)
 *   a     today: rank -> SQ ring -> daemon -> UDP -> daemon -> CQ ring -> rank;
 *         the daemon acks (every 2nd datagram at once, piggybacked on DATA)
 *         and completes sends when acknowledged
 *   b     the rank sends its datagram itself on its QP's socket (the daemon's,
 *         handed over: here inherited across fork), sequence numbers from
 *         shared memory; receive and ACK processing stay in the daemon
 *   c     b + the rank receives from its QP's socket while it polls (holding
 *         a lease it renews each poll); the daemon keeps the socket out of its
 *         epoll set while the lease is fresh and takes over when it expires
 *   d     a, but the waits hand off: the daemon blocks at once (no poll
 *         window, no yield) and the rank, after -rwin, sleeps on a futex the
 *         daemon wakes when it writes a CQE
 *
 * Daemon options: -dwin US (poll window, 0 = block at once), -dpoll
 * epoll|recv (an empty pass asks epoll_wait(0), then recvs; or recvs on
 * the socket directly: one system call fewer). Layout: -cpus
 * rankA,daemonA,rankB,daemonB (-1 = unbound).
 *
 * Build: cc -O2 -Wall -Wextra -o smallmsg smallmsg.c
 * Run:   bench/proto-smallmsg/run.sh (both layouts, every design, ratios)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RING 512
#define MSG 8
#define ACK_EVERY 2
#define ACK_DELAY_NS 200000L
#define LEASE_NS 1000000L

enum { T_DATA = 1, T_ACK = 2 };
struct wire {
	uint32_t type, seq, ack, len;
	uint8_t data[MSG];
};
struct ent {
	uint32_t kind, seq; /* kind: 0 send request / recv CQE, 1 send CQE */
	uint8_t data[MSG];
};
struct ring {
	_Alignas(64) _Atomic uint32_t head;
	_Alignas(64) _Atomic uint32_t tail;
	_Alignas(64) struct ent e[RING];
};
/* One node's shared memory (rank <-> daemon). */
struct node {
	struct ring sq, cq;
	_Alignas(64) _Atomic uint32_t dasleep; /* daemon asleep: ring the doorbell */
	_Alignas(64) _Atomic uint32_t rwait;   /* rank sleeps on cq.tail (design d) */
	/* RD state in shared memory (b, c): snd_nxt written by the rank,
	 * rcv_nxt by whoever owns receive, ack_sent by whoever last sent an ACK. */
	_Alignas(64) _Atomic uint32_t snd_nxt;
	_Atomic uint32_t snd_una;
	_Atomic uint32_t rcv_nxt;
	_Atomic uint32_t ack_sent;
	_Alignas(64) _Atomic uint32_t owner; /* c: 1 rank owns the socket, 0 daemon */
	_Atomic int64_t lease;               /* c: rank's last poll (ns) */
	_Atomic uint32_t busy;               /* c: the rank is inside its socket section */
	_Atomic uint32_t want;               /* c: the rank asks for the socket back */
	_Atomic uint32_t takeovers, handbacks; /* c: counted, printed on stderr */
	_Atomic uint32_t quit;
};

static char mode = 'a';
static int compute_us; /* rank B stops polling this long every 100 round trips */
static int ackdrain; /* c: the rank acks once per drained poll (>= 2 unacked) */
static int dwin_us = 50, rwin_us = -1, dpoll_recv, iters = 20000, reps = 5, window = 64, rate;
static int cpus[4] = {-1, -1, -1, -1};

static int64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000L + t.tv_nsec;
}
static void die(const char *w)
{
	perror(w);
	exit(2);
}
static void pin(int cpu)
{
	cpu_set_t s;
	prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the run (nor keep its lock) */
	if (cpu < 0)
		return;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	if (sched_setaffinity(0, sizeof(s), &s))
		die("sched_setaffinity");
}
static int ring_push(struct ring *r, const struct ent *e)
{
	uint32_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
	if (t - atomic_load_explicit(&r->head, memory_order_acquire) == RING)
		return 0;
	r->e[t % RING] = *e;
	atomic_store_explicit(&r->tail, t + 1, memory_order_seq_cst);
	return 1;
}
static int ring_pop(struct ring *r, struct ent *e)
{
	uint32_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
	if (h == atomic_load_explicit(&r->tail, memory_order_acquire))
		return 0;
	*e = r->e[h % RING];
	atomic_store_explicit(&r->head, h + 1, memory_order_release);
	return 1;
}
static void futex_wait(_Atomic uint32_t *w, uint32_t v)
{
	syscall(SYS_futex, w, FUTEX_WAIT, v, NULL, NULL, 0);
}
static void futex_wake(_Atomic uint32_t *w)
{
	syscall(SYS_futex, w, FUTEX_WAKE, 1, NULL, NULL, 0);
}
static void bell(int fd)
{
	uint64_t one = 1;
	if (write(fd, &one, 8) != 8)
		die("doorbell");
}

/* ---- daemon ---- */
struct dctx {
	struct node *n;
	int sock, bellfd, ep;
	uint32_t unacked; /* DATA delivered, not acknowledged */
	int64_t first_unacked;
	int armed; /* c: socket in the epoll set */
};

static void send_ack(int sock, uint32_t rcv_nxt)
{
	struct wire w = {.type = T_ACK, .ack = rcv_nxt};
	if (send(sock, &w, sizeof(w), 0) < 0 && errno != EAGAIN)
		die("send ack");
}
/* deliver: RD receive processing for one datagram (whoever owns the socket
 * runs it: the daemon, or the rank in design c). Returns CQEs written. */
static int rd_input(struct node *n, int sock, const struct wire *w, uint32_t *unacked, int64_t *first,
		    int to_cq, int *got)
{
	int cqes = 0;
	uint32_t una = atomic_load(&n->snd_una);
	struct ent e = {0};
	while ((int32_t)(w->ack - una) > 0) { /* sends acknowledged: complete them */
		e.kind = 1;
		e.seq = una++;
		if (to_cq)
			cqes += ring_push(&n->cq, &e);
	}
	atomic_store(&n->snd_una, una);
	if (w->type == T_DATA) {
		uint32_t r = atomic_load(&n->rcv_nxt);
		if (w->seq == r) {
			atomic_store(&n->rcv_nxt, r + 1);
			e.kind = 0;
			e.seq = w->seq;
			memcpy(e.data, w->data, MSG);
			if (to_cq)
				cqes += ring_push(&n->cq, &e);
			else
				(*got)++;
			if ((*unacked)++ == 0)
				*first = now_ns();
			if (*unacked >= (to_cq || !ackdrain ? ACK_EVERY : 1u << 30)) {
				send_ack(sock, r + 1);
				atomic_store(&n->ack_sent, r + 1);
				*unacked = 0;
			}
		}
	}
	return cqes;
}

static void wake_rank(struct node *n)
{
	if (atomic_load(&n->rwait)) {
		atomic_store(&n->rwait, 0);
		futex_wake(&n->cq.tail);
	}
}

static void arm(struct dctx *d, int on)
{
	struct epoll_event ev = {.events = on ? EPOLLIN : 0, .data.fd = d->sock};
	if (d->armed == on)
		return;
	if (epoll_ctl(d->ep, EPOLL_CTL_MOD, d->sock, &ev))
		die("epoll_ctl");
	d->armed = on;
}

static int daemon_pass(struct dctx *d)
{
	struct node *n = d->n;
	int work = 0, completed = 0;
	struct ent e;
	struct wire w;
	while (ring_pop(&n->sq, &e)) { /* a, d: the rank's send requests */
		uint32_t r = atomic_load(&n->rcv_nxt);
		w = (struct wire){.type = T_DATA, .seq = atomic_fetch_add(&n->snd_nxt, 1), .ack = r, .len = MSG};
		memcpy(w.data, e.data, MSG);
		if (send(d->sock, &w, sizeof(w), 0) < 0)
			die("daemon send");
		atomic_store(&n->ack_sent, r);
		d->unacked = 0;
		work = 1;
	}
	if (mode == 'b' && atomic_load(&n->ack_sent) == atomic_load(&n->rcv_nxt))
		d->unacked = 0; /* the rank's DATA carried our ACK */
	/* c: the daemon touches the socket only once it owns it and the rank
	 * has left its socket section (Dekker: owner store, busy load). */
	int own = mode != 'c' || (!atomic_load(&n->owner) && !atomic_load(&n->busy));
	if (own && mode == 'c' && !d->unacked && atomic_load(&n->ack_sent) != atomic_load(&n->rcv_nxt)) {
		d->unacked = atomic_load(&n->rcv_nxt) - atomic_load(&n->ack_sent); /* taken over: owed ACKs */
		d->first_unacked = now_ns();
	}
	if (own) {
		int readable = 1;
		if (!dpoll_recv) {
			struct epoll_event evs[4];
			int k = epoll_wait(d->ep, evs, 4, 0), i;
			readable = 0;
			for (i = 0; i < k; i++)
				readable |= evs[i].data.fd == d->sock;
		}
		while (readable && recv(d->sock, &w, sizeof(w), MSG_DONTWAIT) == sizeof(w)) {
			completed += rd_input(n, d->sock, &w, &d->unacked, &d->first_unacked, 1, NULL);
			work = 1;
		}
	}
	if (d->unacked && now_ns() - d->first_unacked > ACK_DELAY_NS) {
		send_ack(d->sock, atomic_load(&n->rcv_nxt));
		d->unacked = 0;
	}
	if (completed)
		wake_rank(n);
	if (mode == 'c' && own && atomic_load(&n->want) && !atomic_load(&n->owner)) {
		/* hand back at the pass boundary: after our CQEs, before the rank's recv */
		arm(d, 0);
		atomic_store(&n->want, 0);
		atomic_fetch_add(&n->handbacks, 1);
		atomic_store(&n->owner, 1);
	}
	return work ? 1 + (completed > 0) : 0;
}

static void run_daemon(struct node *n, int sock, int bellfd)
{
	struct dctx d = {.n = n, .sock = sock, .bellfd = bellfd, .armed = 1};
	struct epoll_event ev = {.events = EPOLLIN, .data.fd = sock};
	int64_t last = now_ns();
	if ((d.ep = epoll_create1(0)) < 0 || epoll_ctl(d.ep, EPOLL_CTL_ADD, sock, &ev))
		die("epoll");
	ev.data.fd = bellfd;
	ev.events = EPOLLIN | EPOLLET;
	if (epoll_ctl(d.ep, EPOLL_CTL_ADD, bellfd, &ev))
		die("epoll bell");
	if (mode == 'c')
		arm(&d, 0);
	while (!atomic_load(&n->quit)) {
		int w = daemon_pass(&d);
		int64_t t = now_ns();
		if (w) {
			last = t;
			if (w == 2 && mode != 'd')
				sched_yield();
			continue;
		}
		if (t - last < (int64_t)dwin_us * 1000 && mode != 'd') {
			sched_yield();
			continue;
		}
		atomic_store(&n->dasleep, 1);
		if (n->sq.head != n->sq.tail) {
			atomic_store(&n->dasleep, 0);
			continue;
		}
		int timeout = -1;
		if (d.unacked)
			timeout = 1;
		if (mode == 'c') { /* lease: take the socket over once the rank stops polling */
			int64_t age = t - atomic_load(&n->lease);
			if (atomic_load(&n->owner) && age > LEASE_NS) {
				uint32_t one = 1;
				if (atomic_compare_exchange_strong(&n->owner, &one, 0)) {
					atomic_fetch_add(&n->takeovers, 1);
					arm(&d, 1);
				}
			} else if (atomic_load(&n->owner)) {
				arm(&d, 0);
				timeout = (int)((LEASE_NS - age) / 1000000) + 1;
			}
		}
		struct epoll_event evs[4];
		epoll_wait(d.ep, evs, 4, timeout);
		atomic_store(&n->dasleep, 0);
		last = now_ns();
	}
}

/* ---- rank ---- */
struct rctx {
	struct node *n;
	int sock, bellfd, peer; /* peer: baseline socket (tcp/udp) */
	uint32_t unacked;
	int64_t first;
	long sends_done, got;
};

static void rank_send(struct rctx *r, uint32_t v)
{
	struct node *n = r->n;
	if (mode == 't' || mode == 'u') {
		uint8_t b[MSG] = {0};
		memcpy(b, &v, 4);
		if (send(r->peer, b, MSG, 0) != MSG)
			die("send");
		return;
	}
	if (mode == 'a' || mode == 'd') {
		struct ent e = {0};
		memcpy(e.data, &v, 4);
		while (!ring_push(&n->sq, &e))
			sched_yield();
		if (atomic_load(&n->dasleep))
			bell(r->bellfd);
		return;
	}
	/* b, c: the datagram goes out from here; the daemon sees snd_nxt. */
	uint32_t rn = atomic_load(&n->rcv_nxt);
	struct wire w = {.type = T_DATA, .seq = atomic_load(&n->snd_nxt), .ack = rn, .len = MSG};
	memcpy(w.data, &v, 4);
	atomic_store(&n->snd_nxt, w.seq + 1);
	if (send(r->sock, &w, sizeof(w), 0) != sizeof(w))
		die("rank send");
	atomic_store(&n->ack_sent, rn);
	r->unacked = 0;
	if (mode == 'b' && atomic_load(&n->dasleep))
		bell(r->bellfd); /* it must arm the retransmission timer */
}

/* rank_poll: one poll of the progress loop; returns messages received. */
static int rank_poll(struct rctx *r)
{
	struct node *n = r->n;
	int got = 0;
	if (mode == 't' || mode == 'u') {
		static uint8_t buf[MSG * 4096];
		static size_t have;
		ssize_t k = recv(r->peer, buf + have, sizeof(buf) - have, MSG_DONTWAIT);
		if (k > 0) {
			if (mode == 'u')
				return 1;
			have += (size_t)k;
			got = (int)(have / MSG);
			have %= MSG;
		}
		return got;
	}
	struct ent e;
	while (ring_pop(&n->cq, &e)) { /* first: what the daemon delivered came earlier */
		if (e.kind == 1)
			r->sends_done++;
		else
			got++;
	}
	if (mode == 'c') {
		struct wire w;
		atomic_store_explicit(&n->lease, now_ns(), memory_order_relaxed);
		atomic_store(&n->busy, 1);
		if (!atomic_load(&n->owner)) {
			/* The daemon took the socket over (we stopped polling longer than
			 * the lease): it delivers into the CQ; ask for the socket back, the
			 * daemon returns it at its next pass boundary. */
			atomic_store(&n->busy, 0);
			if (!atomic_load(&n->want)) {
				atomic_store(&n->want, 1);
				if (atomic_load(&n->dasleep))
					bell(r->bellfd);
			}
		} else {
			int dummy = 0;
			while (recv(r->sock, &w, sizeof(w), MSG_DONTWAIT) == sizeof(w)) {
				uint32_t before = atomic_load(&n->snd_una);
				rd_input(n, r->sock, &w, &r->unacked, &r->first, 0, &dummy);
				r->sends_done += atomic_load(&n->snd_una) - before;
			}
			got += dummy;
			if (ackdrain && r->unacked >= ACK_EVERY) {
				send_ack(r->sock, atomic_load(&n->rcv_nxt));
				atomic_store(&n->ack_sent, atomic_load(&n->rcv_nxt));
				r->unacked = 0;
			}
			if (r->unacked && now_ns() - r->first > ACK_DELAY_NS) {
				send_ack(r->sock, atomic_load(&n->rcv_nxt));
				atomic_store(&n->ack_sent, atomic_load(&n->rcv_nxt));
				r->unacked = 0;
			}
			atomic_store(&n->busy, 0);
		}
	}
	return got;
}

/* rank_wait: poll until want messages arrived (and, with sends, until every
 * send is complete): sched_yield between empty polls; with -rwin >= 0 sleep
 * on the CQ's futex after rwin µs (design d). */
static void rank_wait(struct rctx *r, int want, long sends)
{
	int64_t start = now_ns();
	int have = 0;
	for (;;) {
		have += rank_poll(r);
		if (have >= want && (r->sends_done >= sends || mode == 't' || mode == 'u'))
			return;
		if (rwin_us >= 0 && now_ns() - start >= (int64_t)rwin_us * 1000) {
			uint32_t t = atomic_load(&r->n->cq.tail);
			atomic_store(&r->n->rwait, 1);
			if (t == atomic_load(&r->n->cq.tail) && r->n->cq.head == t)
				futex_wait(&r->n->cq.tail, t);
			continue;
		}
		sched_yield();
	}
}

static int cmpd(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void run_rank(int who, struct rctx *r, int resfd)
{
	long sent = 0;
	double res[64];
	int rep, i;
	if (mode == 'c') {
		atomic_store(&r->n->lease, now_ns());
		atomic_store(&r->n->owner, 1);
	}
	for (rep = 0; rep <= reps; rep++) { /* rep 0 warms up */
		int n = rep ? iters : iters / 10;
		int64_t t0 = now_ns();
		for (i = 0; i < n; i++) {
			if (!rate) {
				if (who == 0) {
					rank_send(r, (uint32_t)i);
					sent++;
					rank_wait(r, 1, sent);
				} else {
					rank_wait(r, 1, sent);
					rank_send(r, (uint32_t)i);
					sent++;
					if (compute_us && i % 100 == 99)
						usleep((useconds_t)compute_us); /* computes: no progress calls */
				}
				continue;
			}
			if (who == 0) {
				int k;
				for (k = 0; k < window; k++)
					rank_send(r, (uint32_t)k);
				sent += window;
				rank_wait(r, 1, sent);
			} else {
				rank_wait(r, window, sent);
				rank_send(r, 0);
				sent++;
			}
		}
		int64_t dt = now_ns() - t0;
		if (rep && who == 0)
			res[rep - 1] = rate ? (double)n * window / (dt / 1e9) / 1e6 : dt / 1e3 / (2.0 * n);
	}
	if (who == 0) {
		char line[128];
		qsort(res, (size_t)reps, sizeof(double), cmpd);
		int k = snprintf(line, sizeof(line), "%.3f %.3f %.3f\n", res[reps / 2], res[0], res[reps - 1]);
		if (write(resfd, line, (size_t)k) != k)
			die("result");
	}
}

static int udp_sock(int port)
{
	int s = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int sz = 4 << 20;
	setsockopt(s, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)))
		die("udp bind");
	return s;
}
static void udp_connect(int s, int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (connect(s, (struct sockaddr *)&a, sizeof(a)))
		die("udp connect");
}

static struct node *dbg_nodes;
static void on_alarm(int sig)
{
	int i;
	(void)sig;
	for (i = 0; dbg_nodes && i < 2; i++) {
		struct node *n = &dbg_nodes[i];
		fprintf(stderr, "node %d: sq %u/%u cq %u/%u snd_nxt %u snd_una %u rcv_nxt %u asleep %u rwait %u owner %u\n", i,
			n->sq.head, n->sq.tail, n->cq.head, n->cq.tail, n->snd_nxt, n->snd_una, n->rcv_nxt, n->dasleep,
			n->rwait, n->owner);
	}
	_exit(3);
}

int main(int argc, char **argv)
{
	int i, port = 27400 + (getpid() % 200) * 2;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "0";
		if (!strcmp(a, "-mode"))
			mode = v[0], i++;
		else if (!strcmp(a, "-dwin"))
			dwin_us = atoi(v), i++;
		else if (!strcmp(a, "-rwin"))
			rwin_us = atoi(v), i++;
		else if (!strcmp(a, "-dpoll"))
			dpoll_recv = !strcmp(v, "recv"), i++;
		else if (!strcmp(a, "-n"))
			iters = atoi(v), i++;
		else if (!strcmp(a, "-reps"))
			reps = atoi(v), i++;
		else if (!strcmp(a, "-compute"))
			compute_us = atoi(v), i++;
		else if (!strcmp(a, "-ackdrain"))
			ackdrain = 1;
		else if (!strcmp(a, "-rate"))
			rate = 1;
		else if (!strcmp(a, "-window"))
			window = atoi(v), i++;
		else if (!strcmp(a, "-cpus"))
			sscanf(v, "%d,%d,%d,%d", &cpus[0], &cpus[1], &cpus[2], &cpus[3]), i++;
		else {
			fprintf(stderr, "usage: smallmsg -mode t|u|a|b|c|d [-dwin US] [-rwin US] [-dpoll epoll|recv] [-ackdrain] [-compute US] "
					"[-n N] [-reps R] [-rate [-window W]] [-cpus rA,dA,rB,dB]\n");
			return 2;
		}
	}
	if (reps > 64)
		reps = 64;
	int resp[2];
	if (pipe(resp))
		die("pipe");
	pid_t kids[4];
	int nk = 0;
	if (mode == 't' || mode == 'u') {
		int a, b;
		if (mode == 'u') {
			a = udp_sock(port);
			b = udp_sock(port + 1);
			udp_connect(a, port + 1);
			udp_connect(b, port);
		} else {
			int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
			struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
						 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
			setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
			if (bind(l, (struct sockaddr *)&sa, sizeof(sa)) || listen(l, 1))
				die("tcp listen");
			a = socket(AF_INET, SOCK_STREAM, 0);
			if (connect(a, (struct sockaddr *)&sa, sizeof(sa)))
				die("tcp connect");
			b = accept(l, NULL, NULL);
			setsockopt(a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			setsockopt(b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			close(l);
		}
		for (i = 0; i < 2; i++) {
			if ((kids[nk++] = fork()) == 0) {
				struct rctx r = {.peer = i ? b : a};
				pin(cpus[i * 2]);
				run_rank(i, &r, resp[1]);
				_exit(0);
			}
		}
	} else {
		struct node *nodes = mmap(NULL, 2 * sizeof(struct node), PROT_READ | PROT_WRITE,
					  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (nodes == MAP_FAILED)
			die("mmap");
		dbg_nodes = nodes;
		if (getenv("SMALLMSG_DEBUG")) {
			signal(SIGALRM, on_alarm);
			alarm(5);
		}
		/* The QP's socket: created by the daemon (here before fork); in b and
		 * c the rank uses the same socket (SCM_RIGHTS in the real design). */
		int s[2] = {udp_sock(port), udp_sock(port + 1)};
		udp_connect(s[0], port + 1);
		udp_connect(s[1], port);
		int bells[2] = {eventfd(0, EFD_NONBLOCK), eventfd(0, EFD_NONBLOCK)};
		for (i = 0; i < 2; i++) {
			if ((kids[nk++] = fork()) == 0) {
				pin(cpus[i * 2 + 1]);
				run_daemon(&nodes[i], s[i], bells[i]);
				_exit(0);
			}
			if ((kids[nk++] = fork()) == 0) {
				struct rctx r = {.n = &nodes[i], .sock = s[i], .bellfd = bells[i]};
				pin(cpus[i * 2]);
				run_rank(i, &r, resp[1]);
				while (nodes[i].sq.head != nodes[i].sq.tail) /* the daemon sends the last reply */
					sched_yield();
				atomic_store(&nodes[i].quit, 1);
				bell(bells[i]);
				_exit(0);
			}
		}
		/* ranks exit first; then the daemons see quit */
		for (i = 0; i < nk; i++) {
			int st = 0;
			if (i % 2 == 1 && waitpid(kids[i], &st, 0) > 0 && st)
				fprintf(stderr, "smallmsg: rank %d: status %#x\n", i / 2, st);
		}
		for (i = 0; i < 2; i++) {
			atomic_store(&nodes[i].quit, 1);
			bell(bells[i]);
		}
		if (mode == 'c')
			fprintf(stderr, "smallmsg: take-overs A %u B %u, hand-backs A %u B %u\n", nodes[0].takeovers,
				nodes[1].takeovers, nodes[0].handbacks, nodes[1].handbacks);
	}
	char line[128];
	ssize_t k = read(resp[0], line, sizeof(line) - 1);
	for (i = 0; i < nk; i++)
		waitpid(kids[i], NULL, 0);
	if (k <= 0)
		return 1;
	line[k] = 0;
	fputs(line, stdout);
	return 0;
}
