/*
 * fpown.h — the rank's side of the hand-over of a UD QP's socket
 * (issue 20; docs/design-small-messages.md "Security: a socket in the
 * client's hands", docs/fastpath.md; the page: proto/fastpath.go, the
 * engine's side: verbsd/rnic/fastpath.go).
 *
 * A QP whose socket this process made (qpsock.c) gets a fast-path page
 * (iwvi_fp_own_attach). The engine owns the socket at first; the rank asks
 * for it (iwvi_fp_own_acquire: Want, and the doorbell if the engine
 * sleeps), and the engine gives it back at the end of a pass. While it
 * owns it, the rank brackets every read of the socket with
 * iwvi_fp_own_renew (renews the lease, sets Busy, full barrier, then looks
 * at Owner) and iwvi_fp_own_done (clears Busy); a renew that finds the
 * engine owning asks for the socket back and says no. A lease older than
 * the daemon's -fastpath-lease lets the engine take the socket over; it
 * reads only once it has seen Busy clear, so no datagram is read by both.
 * The rank reads its CQ before its socket (what the engine read while it
 * owned the socket completes there first).
 *
 * Internal to libiwverbs (hidden symbols), not yet used by the provider.
 * Memory orders are explicit (__atomic builtins): the Busy store and the
 * Owner load are sequentially consistent (the Dekker pair with the
 * engine's compare-and-swap of Owner and load of Busy); Busy is cleared
 * with release order after the last read. One thread per QP uses it.
 */
#ifndef IWV_FPOWN_H
#define IWV_FPOWN_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "internal.h"

struct iwvi_fp_own {
	struct iwv_qp *qp;
	int sock;           /* the QP's socket (qp->sock) */
	uint8_t *page;      /* the mapped page (W_FP_PAGE_LEN octets; RD: W_FP_RD_PAGE_LEN) */
	size_t len;
	int crc;            /* the QP's CRC32c: 1 on (the default), 0 created with no_crc (wire-format.md §6 rule 4) */
	int in_busy;        /* between a renew that returned 1 and done */
	uint64_t renews, lost; /* renewals; renewals that found the engine owning */
};

/* iwvi_fp_own_attach makes qp's page (a sealed memfd, Magic and Version
 * written) and hands it to the daemon (fastpath-page). qp must be UD with
 * its socket made by this process (or RD: the longer page of fprd.h;
 * iwvi_fp_rd_attach). 0 or a negative errno (the session's error says
 * why). */
int iwvi_fp_own_attach(struct iwv_qp *qp, struct iwvi_fp_own *o);

/* iwvi_fp_own_attach_flags is iwvi_fp_own_attach writing the page's Flags
 * (W_FP_FLAG_*) too. W_FP_FLAG_GRO: the rank reads with
 * iwvi_fp_own_peek_gro, and the daemon keeps UDP_GRO on the socket. */
int iwvi_fp_own_attach_flags(struct iwv_qp *qp, struct iwvi_fp_own *o, uint16_t flags);

/* iwvi_fp_own_detach unmaps the page (the QP keeps it until destroyed:
 * call after iwv_destroy_qp, or the engine keeps the socket). */
void iwvi_fp_own_detach(struct iwvi_fp_own *o);

/* iwvi_fp_own_owned: 1 if Owner says the rank (acquire order). */
int iwvi_fp_own_owned(const struct iwvi_fp_own *o);

/* iwvi_fp_own_want sets Want and rings the doorbell if the engine sleeps. */
void iwvi_fp_own_want(struct iwvi_fp_own *o);

/* iwvi_fp_own_acquire: 1 if the rank owns the socket; else asks for it
 * (iwvi_fp_own_want) and returns 0 — poll the CQ and try again. */
int iwvi_fp_own_acquire(struct iwvi_fp_own *o);

/* iwvi_fp_own_renew renews the lease (CLOCK_MONOTONIC now), sets Busy and
 * returns 1 if the rank owns the socket: it may read it until
 * iwvi_fp_own_done. Else it clears Busy, asks for the socket back and
 * returns 0. */
int iwvi_fp_own_renew(struct iwvi_fp_own *o);

/* iwvi_fp_own_done clears Busy after the last read of a renew. */
void iwvi_fp_own_done(struct iwvi_fp_own *o);

/* iwvi_fp_own_release gives the socket to the engine (Owner from rank to
 * engine by compare-and-swap; outside renew/done) and rings the doorbell
 * if it sleeps: for what the rank leaves to the daemon. 1 if it owned it,
 * 0 if not. */
int iwvi_fp_own_release(struct iwvi_fp_own *o);

/* iwvi_fp_own_withdraw takes back a Want the engine has not served yet
 * (clears it) and gives back a socket that a Want of before was already
 * handed back with: the rank is about to stop calling (a bulk transfer
 * the daemon moves while the application computes), and a socket handed
 * back to it then would wait for the lease's end before the engine read it
 * again (docs/libfabric.md "Progress while both ranks compute"). */
void iwvi_fp_own_withdraw(struct iwvi_fp_own *o);

/* iwvi_fp_own_recv reads the datagram at the head of the socket into
 * buf[0, cap) with MSG_DONTWAIT (never the file's flags: the engine shares
 * the file description) and flags (MSG_PEEK: it stays queued). Only
 * between a renew that returned 1 and done: -EPERM otherwise. Returns its
 * length (MSG_TRUNC: the whole length even if cap is smaller), -EAGAIN
 * when the socket is empty, or another negative errno. src (may be NULL)
 * receives the source address. */
ssize_t iwvi_fp_own_recv(struct iwvi_fp_own *o, void *buf, size_t cap, int flags, struct sockaddr_storage *src);

/* iwvi_fp_own_peek_gro is iwvi_fp_own_recv(MSG_PEEK) on a socket with
 * UDP_GRO on (W_FP_FLAG_GRO): *coalesced is set when the buffer at the
 * head holds several datagrams (the kernel's UDP_GRO control message;
 * udp(7)), which the rank leaves to the daemon. */
ssize_t iwvi_fp_own_peek_gro(struct iwvi_fp_own *o, void *buf, size_t cap, struct sockaddr_storage *src, int *coalesced);

/* iwvi_fp_own_set_gro turns UDP_GRO (udp(7)) on the socket on or off:
 * the rank keeps it off while it serves its socket itself (every datagram
 * then reaches it alone) and on while a bulk transfer leaves the socket to
 * the daemon (which reads either form). Off only while the receive
 * queue is empty: a buffer coalesced before would be read as one datagram
 * (-EBUSY: UDP_GRO is on again, try later). The caller owns the socket
 * (Busy set: iwvi_fp_own_renew), so that the engine never reads it
 * between the two. 0 or a negative errno. */
int iwvi_fp_own_set_gro(struct iwvi_fp_own *o, int on);

/* iwvi_fp_own_drop takes the head datagram out of the socket (after a
 * MSG_PEEK said the rank serves it): 0, -EAGAIN, -EPERM as above. */
int iwvi_fp_own_drop(struct iwvi_fp_own *o);

/* The daemon's counts in the page (information: iwarpctl shows the
 * daemon's own). */
uint64_t iwvi_fp_own_takeovers(const struct iwvi_fp_own *o);
uint64_t iwvi_fp_own_handbacks(const struct iwvi_fp_own *o);

#endif
