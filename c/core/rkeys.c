/*
 * rkeys.c — the session's memory regions by STag (rkeys.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rkeys.h"

static uint32_t hash(uint32_t rkey, uint32_t cap)
{
	return (rkey * 2654435761u) & (cap - 1);
}

void iwvi_rkeys_init(struct iwvi_rkeys *k)
{
	memset(k, 0, sizeof *k);
	pthread_mutex_init(&k->mu, NULL);
}

void iwvi_rkeys_free(struct iwvi_rkeys *k)
{
	free(k->t);
	k->t = NULL;
	k->cap = k->n = 0;
	pthread_mutex_destroy(&k->mu);
}

void iwvi_rkeys_lock(struct iwvi_rkeys *k)
{
	pthread_mutex_lock(&k->mu);
}

void iwvi_rkeys_unlock(struct iwvi_rkeys *k)
{
	pthread_mutex_unlock(&k->mu);
}

/* put inserts e into t of cap entries (room guaranteed). */
static void put(struct iwvi_rkey_ent *t, uint32_t cap, const struct iwvi_rkey_ent *e)
{
	for (uint32_t i = hash(e->rkey, cap), k = 0; k < cap; i = (i + 1) & (cap - 1), k++) {
		if (!t[i].used || t[i].rkey == e->rkey) {
			t[i] = *e;
			t[i].used = 1;
			return;
		}
	}
}

static int find_index(const struct iwvi_rkeys *k, uint32_t rkey)
{
	if (k->cap == 0)
		return -1;
	for (uint32_t i = hash(rkey, k->cap), j = 0; j < k->cap; i = (i + 1) & (k->cap - 1), j++) {
		if (!k->t[i].used)
			return -1;
		if (k->t[i].rkey == rkey)
			return (int)i;
	}
	return -1;
}

int iwvi_rkeys_add(struct iwvi_rkeys *k, const struct iwvi_rkey_ent *e)
{
	pthread_mutex_lock(&k->mu);
	if (find_index(k, e->rkey) < 0 && (k->n + 1) * 2 > k->cap) { /* at most half full */
		uint32_t cap = k->cap ? k->cap * 2 : 64;
		struct iwvi_rkey_ent *t = calloc(cap, sizeof *t);
		if (!t || cap < k->cap) {
			free(t);
			pthread_mutex_unlock(&k->mu);
			return -ENOMEM;
		}
		for (uint32_t i = 0; i < k->cap; i++)
			if (k->t[i].used)
				put(t, cap, &k->t[i]);
		free(k->t);
		k->t = t;
		k->cap = cap;
	}
	if (find_index(k, e->rkey) < 0)
		k->n++;
	put(k->t, k->cap, e);
	pthread_mutex_unlock(&k->mu);
	return 0;
}

void iwvi_rkeys_del(struct iwvi_rkeys *k, uint32_t rkey)
{
	pthread_mutex_lock(&k->mu);
	int at = find_index(k, rkey);
	if (at >= 0) {
		/* Backward-shift deletion: no tombstones, probes stay short. */
		uint32_t m = k->cap - 1, i = (uint32_t)at, j = i;
		k->t[i].used = 0;
		for (uint32_t step = 0; step < k->cap; step++) {
			j = (j + 1) & m;
			if (!k->t[j].used)
				break;
			uint32_t h = hash(k->t[j].rkey, k->cap);
			/* Move j into the hole i unless its home lies cyclically in (i, j]. */
			if (((j - h) & m) >= ((j - i) & m)) {
				k->t[i] = k->t[j];
				k->t[j].used = 0;
				i = j;
			}
		}
		k->n--;
	}
	pthread_mutex_unlock(&k->mu);
}

const struct iwvi_rkey_ent *iwvi_rkeys_find(const struct iwvi_rkeys *k, uint32_t rkey)
{
	int i = find_index(k, rkey);
	return i < 0 ? NULL : &k->t[i];
}
