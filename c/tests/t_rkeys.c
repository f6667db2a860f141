/*
 * t_rkeys.c — the session's table of memory regions by STag (c/core
 * rkeys.h), against a plain array: random adds (growing the table past
 * several doublings), replacements and deletions (backward shifts), every
 * key looked up after each step. No daemon. Run by test/fastpath
 * (own_rma_test.go TestRkeysTable). Prints "ok N" at the end.
 */
#include "testlib.h"

#include <stdint.h>

#include "../core/rkeys.h"

#define KEYS 3000

static uint32_t rnd(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(*s >> 32);
}

int main(void)
{
	static uint32_t keys[KEYS];
	static uint64_t val[KEYS];
	static int live[KEYS];
	struct iwvi_rkeys k;
	iwvi_rkeys_init(&k);
	uint64_t seed = 42;
	for (int i = 0; i < KEYS; i++) {
		/* Clustered keys (as a daemon's counter would give) and random ones. */
		keys[i] = i % 2 ? (uint32_t)i * 64u : rnd(&seed);
		for (int j = 0; j < i; j++)
			if (keys[j] == keys[i])
				keys[i] ^= 0x80000000u | (uint32_t)i;
	}
	long steps = 0;
	for (int round = 0; round < 4; round++) {
		for (int step = 0; step < 20000; step++, steps++) {
			int i = (int)(rnd(&seed) % KEYS);
			if (!live[i] || rnd(&seed) % 3) {
				struct iwvi_rkey_ent e = {.rkey = keys[i], .addr = rnd(&seed), .len = (uint64_t)step + 1};
				CHECK(iwvi_rkeys_add(&k, &e) == 0);
				live[i] = 1;
				val[i] = e.addr;
			} else {
				iwvi_rkeys_del(&k, keys[i]);
				live[i] = 0;
			}
			if (step % 97 == 0 || (round == 3 && step % 7 == 0)) {
				iwvi_rkeys_lock(&k);
				unsigned n = 0;
				for (int j = 0; j < KEYS; j++) {
					const struct iwvi_rkey_ent *f = iwvi_rkeys_find(&k, keys[j]);
					if (live[j]) {
						CHECK(f != NULL && f->rkey == keys[j] && f->addr == val[j]);
						n++;
					} else {
						CHECK(f == NULL);
					}
				}
				CHECK(n == k.n);
				iwvi_rkeys_unlock(&k);
			}
		}
		/* Empty it half the time: the table must come back to nothing. */
		if (round % 2 == 1) {
			for (int j = 0; j < KEYS; j++) {
				iwvi_rkeys_del(&k, keys[j]);
				live[j] = 0;
			}
			CHECK(k.n == 0);
		}
	}
	iwvi_rkeys_free(&k);
	printf("ok %ld\n", steps);
	return 0;
}
