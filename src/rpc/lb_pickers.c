/* zcrpc — the built-in load-balancing policies (zcrpc_picker_ops):
 * - pick_first: the first backend in the resolver's order that is READY
 *   (else the first connecting or idle one): every call to one server,
 *   the next one only when it fails;
 * - round_robin: the READY backends in turn (the others while none is);
 * - least_outstanding: the READY backend with the fewest calls in flight
 *   (sent and waiting for its window), ties in turn: a backend that
 *   stalls (its calls do not come back) stops getting new ones;
 * - ring_hash: consistent hashing of the call's hash_key on a ring of
 *   RING_POINTS points per backend (hashed from its address), skipping
 *   DOWN backends: a key reaches the same backend while the set is
 *   stable, and a backend leaving moves only its own keys.
 * docs/balancing.md. */
#include "lb_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Picks among the backends in @st (READY first, then any not DOWN),
 * starting at @from and going round; -1 when none. */
static int next_usable(const zcrpc_backend_info *b, size_t n, size_t from)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (b[(from + i) % n].state == ZCRPC_BACKEND_READY)
			return (int)((from + i) % n);
	for (i = 0; i < n; i++)
		if (b[(from + i) % n].state != ZCRPC_BACKEND_DOWN)
			return (int)((from + i) % n);
	return -1;
}

static int pick_first(void *state, const zcrpc_backend_info *b, size_t n,
		      const void *key, size_t key_len, void *arg)
{
	(void)state, (void)key, (void)key_len, (void)arg;
	return next_usable(b, n, 0);
}

/* round_robin and least_outstanding keep a turn counter. */
static zcrpc_status turn_update(void **state, const zcrpc_backend_info *b,
				size_t n, void *arg)
{
	(void)b, (void)n, (void)arg;
	if (!*state) {
		*state = calloc(1, sizeof(size_t));
		if (!*state)
			return ZCRPC_RESOURCE_EXHAUSTED;
	}
	return ZCRPC_OK;
}

static void free_state(void *state, void *arg)
{
	(void)arg;
	free(state);
}

static int round_robin(void *state, const zcrpc_backend_info *b, size_t n,
		       const void *key, size_t key_len, void *arg)
{
	size_t *turn = state;
	int i;

	(void)key, (void)key_len, (void)arg;
	if (!n)
		return -1;
	i = next_usable(b, n, *turn % n);
	if (i >= 0)
		*turn = (size_t)i + 1;
	return i;
}

static int least_outstanding(void *state, const zcrpc_backend_info *b,
			     size_t n, const void *key, size_t key_len,
			     void *arg)
{
	size_t *turn = state, i, from;
	int best = -1, pass;

	(void)key, (void)key_len, (void)arg;
	if (!n)
		return -1;
	from = *turn % n;
	/* pass 0: the READY ones; pass 1 (none was): any not DOWN */
	for (pass = 0; pass < 2 && best < 0; pass++)
		for (i = 0; i < n; i++) {
			size_t k = (from + i) % n;

			if (b[k].state == ZCRPC_BACKEND_DOWN ||
			    (!pass && b[k].state != ZCRPC_BACKEND_READY))
				continue;
			if (best < 0 || b[k].in_flight < b[best].in_flight)
				best = (int)k;
		}
	*turn = from + 1;
	return best;
}

/* ---- ring_hash ---- */

#define RING_POINTS 256

struct ring_point {
	uint64_t h;
	uint32_t backend;
};

struct ring {
	struct ring_point *p;
	size_t n;
	uint64_t rng;
};

/* 64-bit FNV-1a, then splitmix64's finaliser (FNV alone clusters the
 * points of addresses that differ in their last bytes). */
static uint64_t hash64(const void *data, size_t len, uint64_t seed)
{
	const unsigned char *p = data;
	uint64_t h = 0xcbf29ce484222325ULL ^ seed;
	size_t i;

	for (i = 0; i < len; i++) {
		h ^= p[i];
		h *= 0x100000001b3ULL;
	}
	h ^= h >> 30;
	h *= 0xbf58476d1ce4e5b9ULL;
	h ^= h >> 27;
	h *= 0x94d049bb133111ebULL;
	h ^= h >> 31;
	return h;
}

static int point_cmp(const void *a, const void *b)
{
	const struct ring_point *x = a, *y = b;

	if (x->h != y->h)
		return x->h < y->h ? -1 : 1;
	return x->backend < y->backend ? -1 : x->backend > y->backend;
}

static zcrpc_status ring_update(void **state, const zcrpc_backend_info *b,
				size_t n, void *arg)
{
	struct ring *r = *state;
	struct ring_point *p = NULL;
	char addr[ZCRPC_HOST_MAX + ZCRPC_PORT_MAX + 4];
	size_t i, j, len;

	(void)arg;
	if (!r) {
		r = calloc(1, sizeof(*r));
		if (!r)
			return ZCRPC_RESOURCE_EXHAUSTED;
		r->rng = 0x9e3779b97f4a7c15ULL;
		*state = r;
	}
	if (n) {
		p = malloc(n * RING_POINTS * sizeof(*p));
		if (!p)
			return ZCRPC_RESOURCE_EXHAUSTED;
	}
	for (i = 0; i < n; i++) {
		len = (size_t)snprintf(addr, sizeof(addr), "%s:%s", b[i].host,
				       b[i].port);
		for (j = 0; j < RING_POINTS; j++) {
			p[i * RING_POINTS + j].h = hash64(addr, len, j);
			p[i * RING_POINTS + j].backend = (uint32_t)i;
		}
	}
	if (n)
		qsort(p, n * RING_POINTS, sizeof(*p), point_cmp);
	free(r->p);
	r->p = p;
	r->n = n * RING_POINTS;
	return ZCRPC_OK;
}

static int ring_pick(void *state, const zcrpc_backend_info *b, size_t n,
		     const void *key, size_t key_len, void *arg)
{
	struct ring *r = state;
	uint64_t h;
	size_t lo = 0, hi, i;

	(void)n, (void)arg;
	if (!r->n)
		return -1;
	if (key) {
		h = hash64(key, key_len, 0);
	} else { /* no key: anywhere (xorshift) */
		r->rng ^= r->rng << 13;
		r->rng ^= r->rng >> 7;
		r->rng ^= r->rng << 17;
		h = r->rng;
	}
	hi = r->n;
	while (lo < hi) { /* the first point at or after h */
		size_t mid = lo + (hi - lo) / 2;

		if (r->p[mid].h < h)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (i = 0; i < r->n; i++) {
		const struct ring_point *pt = &r->p[(lo + i) % r->n];

		if (b[pt->backend].state != ZCRPC_BACKEND_DOWN)
			return (int)pt->backend;
	}
	return -1;
}

static void ring_destroy(void *state, void *arg)
{
	struct ring *r = state;

	(void)arg;
	if (r)
		free(r->p);
	free(r);
}

static const zcrpc_picker_ops builtins[] = {
	{sizeof(zcrpc_picker_ops), "pick_first", NULL, pick_first, NULL,
	 NULL},
	{sizeof(zcrpc_picker_ops), "round_robin", turn_update, round_robin,
	 free_state, NULL},
	{sizeof(zcrpc_picker_ops), "least_outstanding", turn_update,
	 least_outstanding, free_state, NULL},
	{sizeof(zcrpc_picker_ops), "ring_hash", ring_update, ring_pick,
	 ring_destroy, NULL},
};

const zcrpc_picker_ops *zcrpc__lb_builtin_picker(const char *name)
{
	size_t i;

	for (i = 0; i < sizeof(builtins) / sizeof(builtins[0]); i++)
		if (!strcmp(builtins[i].name, name))
			return &builtins[i];
	return NULL;
}
