/*
 * ring.h — the single-producer single-consumer rings of proto/queue.go, as
 * internal/shm/ring.go implements them in Go.
 *
 * Memory ordering matches Go's sync/atomic (sequentially consistent): the
 * producer fills a slot, then publishes it by a store of the producer index
 * (a release store, made sequentially consistent so that the following load
 * of the status page's Asleep word cannot be ordered before it — the
 * engine stores Asleep, then rescans the rings: Dekker's pattern, no lost
 * wake-up). The consumer loads the producer index (acquire), copies the
 * entries out, then stores the consumer index with release. Indices are
 * free-running; the other side's index is untrusted and checked on every
 * load (a lie is -EIO, never an out-of-bounds access).
 *
 * The index loads are sequentially consistent too (plain loads on x86 and
 * ldar on arm64, so no cost where it matters): a consumer that arms a CQ
 * (a sequentially consistent store of the Arm word) and then re-reads the
 * producer index must not have that load ordered before the store — the
 * daemon publishes a CQE, then reads Arm, the mirror image.
 */
#ifndef IWV_RING_H
#define IWV_RING_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "wire.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the rings' index words are little-endian native atomics: little-endian hosts only"
#endif

struct ring {
	uint8_t *mem;
	uint8_t *entries;
	uint32_t depth, mask, stride;
	uint32_t *producer, *consumer, *arm, *overrun;
	uint32_t head, pub;  /* producer side: next slot, last published */
	uint32_t tail, rel;  /* consumer side: next slot, last released */
	/* Our side of the ring, one user at a time: iwv_post_send/recv/srq_recv
	 * and iwv_poll_cq hold it for the whole call (a lock per SQ, RQ, SRQ
	 * and CQ, as ofverbs' per-queue mutex and siw's sq_lock/rq_lock), so
	 * several threads may post to or poll one queue. A default mutex holds
	 * no resources: nothing destroys it. */
	pthread_mutex_t lock;
};

/* ring_init lays a fresh ring (header written) over mem, which holds
 * w_ring_bytes(depth, stride) zeroed octets. */
static inline void ring_init(struct ring *r, void *mem, enum w_ring_kind kind, uint32_t depth, uint32_t stride,
			     uint16_t abi)
{
	uint8_t *b = mem;
	memset(b, 0, W_RING_HEADER_LEN);
	w_put32(b + W_OFF_RING_MAGIC, W_RING_MAGIC);
	w_put16(b + W_OFF_RING_VERSION, abi);
	w_put16(b + W_OFF_RING_KIND, (uint16_t)kind);
	w_put32(b + W_OFF_RING_DEPTH, depth);
	w_put32(b + W_OFF_RING_STRIDE, stride);
	pthread_mutex_init(&r->lock, NULL);
	r->mem = b;
	r->entries = b + W_RING_HEADER_LEN;
	r->depth = depth;
	r->mask = depth - 1;
	r->stride = stride;
	r->producer = (uint32_t *)(void *)(b + W_OFF_RING_PRODUCER);
	r->consumer = (uint32_t *)(void *)(b + W_OFF_RING_CONSUMER);
	r->arm = (uint32_t *)(void *)(b + W_OFF_RING_ARM);
	r->overrun = (uint32_t *)(void *)(b + W_OFF_RING_OVERRUN);
	r->head = r->pub = r->tail = r->rel = 0;
}

static inline uint8_t *ring_slot(const struct ring *r, uint32_t i)
{
	return r->entries + (size_t)(i & r->mask) * r->stride;
}

/* ring_next returns the next free slot (visible to the consumer at the next
 * ring_publish), NULL with *err 0 when the ring is full, NULL with *err
 * -EIO when the consumer index is impossible. */
static inline uint8_t *ring_next(struct ring *r, int *err)
{
	uint32_t cons = __atomic_load_n(r->consumer, __ATOMIC_SEQ_CST);
	uint32_t used = r->head - cons;
	*err = 0;
	if (used > r->depth) {
		*err = -EIO;
		return NULL;
	}
	if (used == r->depth)
		return NULL;
	return ring_slot(r, r->head++);
}

static inline void ring_publish(struct ring *r)
{
	if (r->head != r->pub) {
		__atomic_store_n(r->producer, r->head, __ATOMIC_SEQ_CST);
		r->pub = r->head;
	}
}

/* ring_available returns how many published entries wait, or -EIO. */
static inline int64_t ring_available(struct ring *r)
{
	uint32_t prod = __atomic_load_n(r->producer, __ATOMIC_SEQ_CST);
	uint32_t n = prod - r->tail;
	if (n > r->depth)
		return -EIO;
	return n;
}

static inline void ring_release(struct ring *r)
{
	if (r->tail != r->rel) {
		__atomic_store_n(r->consumer, r->tail, __ATOMIC_RELEASE);
		r->rel = r->tail;
	}
}

#endif
