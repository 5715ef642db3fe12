/* zcrpc — a listener's connection limits: connections counted from the
 * connect request until torn down, handshakes included, in all
 * (max_connections) and per source address (max_conns_per_source), so one
 * client cannot take every connection of a server (docs/design.md,
 * Admission). The per-source counts live in a small open-addressing table
 * (linear probing, backward-shift deletion) keyed by the address. The
 * counts belong to the listener's worker alone: a connection handed to
 * another worker (a server on several workers) gives its count back
 * through zcrpc__listener_remote_release, posted to that worker. */
#include "internal.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void zcrpc__limits_source(struct rdma_cm_id *id, uint8_t key[16], char *text,
			  size_t text_len)
{
	const struct sockaddr *sa = rdma_get_peer_addr(id);

	memset(key, 0, 16);
	snprintf(text, text_len, "an unknown address");
	if (sa && sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)sa;

		key[10] = key[11] = 0xff; /* ::ffff:a.b.c.d */
		memcpy(key + 12, &in->sin_addr, 4);
		inet_ntop(AF_INET, &in->sin_addr, text, (socklen_t)text_len);
	} else if (sa && sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)sa;

		memcpy(key, &in6->sin6_addr, 16);
		inet_ntop(AF_INET6, &in6->sin6_addr, text, (socklen_t)text_len);
	}
	/* Anything else (AF_IB: zcrpc resolves IP addresses only) counts as
	 * one source, the all-zero key. */
}

static uint32_t hash(const uint8_t key[16])
{
	uint32_t h = 2166136261u; /* FNV-1a */
	int i;

	for (i = 0; i < 16; i++)
		h = (h ^ key[i]) * 16777619u;
	return h;
}

/* The entry of @key, or the free one where it would go. */
static struct zcrpc__src_count *slot(const zcrpc_listener *l,
				     const uint8_t key[16])
{
	uint32_t mask = l->sources_cap - 1, i = hash(key) & mask;

	while (l->sources[i].n && memcmp(l->sources[i].key, key, 16))
		i = (i + 1) & mask;
	return &l->sources[i];
}

static uint32_t count_of(const zcrpc_listener *l, const uint8_t key[16])
{
	return l->sources_cap ? slot(l, key)->n : 0;
}

/* Doubles the table (16 entries at first). Returns 0, or -1 out of memory. */
static int grow(zcrpc_listener *l)
{
	uint32_t cap = l->sources_cap ? l->sources_cap * 2 : 16, i,
		 old = l->sources_cap;
	struct zcrpc__src_count *prev = l->sources;

	l->sources = calloc(cap, sizeof(*l->sources));
	if (!l->sources) {
		l->sources = prev;
		return -1;
	}
	l->sources_cap = cap;
	for (i = 0; i < old; i++)
		if (prev[i].n)
			*slot(l, prev[i].key) = prev[i];
	free(prev);
	return 0;
}

/* Frees the entry at @e and moves later entries of its run back into the
 * hole, so every lookup still finds its key before a free entry. */
static void remove_at(zcrpc_listener *l, struct zcrpc__src_count *e)
{
	uint32_t mask = l->sources_cap - 1;
	uint32_t hole = (uint32_t)(e - l->sources), i = hole;

	for (;;) {
		uint32_t home;

		i = (i + 1) & mask;
		if (!l->sources[i].n)
			break;
		home = hash(l->sources[i].key) & mask;
		/* Movable when its home is not cyclically in (hole, i]. */
		if (((i - home) & mask) >= ((i - hole) & mask)) {
			l->sources[hole] = l->sources[i];
			hole = i;
		}
	}
	l->sources[hole].n = 0;
	l->sources_used--;
}

zcrpc_status zcrpc__limits_admit(zcrpc_listener *l, const uint8_t key[16],
				 const char *src_text, char *why,
				 size_t why_len)
{
	uint32_t max = l->opts.max_connections,
		 per = l->opts.max_conns_per_source;

	if (max && l->conns >= max) {
		l->w->rejected_conn_limit++;
		snprintf(why, why_len, "connection limit of %u reached", max);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	if (per && count_of(l, key) >= per) {
		l->w->rejected_source_limit++;
		snprintf(why, why_len,
			 "per-source connection limit of %u reached for %s",
			 per, src_text);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	return ZCRPC_OK;
}

/* The index of @w in @l's workers (0 for a listener on one worker). */
uint32_t zcrpc__listener_widx(const zcrpc_listener *l, const zcrpc_worker *w)
{
	uint32_t i;

	for (i = 1; i < l->nworkers; i++)
		if (l->workers[i] == w)
			return i;
	return 0;
}

zcrpc_status zcrpc__limits_count(zcrpc_listener *l, const uint8_t key[16],
				 uint32_t wi)
{
	struct zcrpc__src_count *e;

	if (l->opts.max_conns_per_source) {
		/* At most half full, so probe runs stay short. */
		if ((l->sources_used + 1) * 2 > l->sources_cap && grow(l))
			return ZCRPC_RESOURCE_EXHAUSTED;
		e = slot(l, key);
		if (!e->n) {
			memcpy(e->key, key, 16);
			l->sources_used++;
		}
		e->n++;
	}
	l->conns++;
	if (l->wconns)
		l->wconns[wi]++;
	return ZCRPC_OK;
}

void zcrpc__limits_uncount(zcrpc_listener *l, const uint8_t key[16],
			   int src_counted, uint32_t wi)
{
	struct zcrpc__src_count *e;

	l->conns--;
	if (l->wconns && l->wconns[wi])
		l->wconns[wi]--;
	if (!src_counted || !l->sources_cap)
		return;
	e = slot(l, key);
	if (e->n && --e->n == 0)
		remove_at(l, e);
}

zcrpc_status zcrpc__limits_take(zcrpc_listener *l, zcrpc_conn *c,
				const uint8_t key[16])
{
	if (zcrpc__limits_count(l, key, 0) != ZCRPC_OK)
		return ZCRPC_RESOURCE_EXHAUSTED;
	if (l->opts.max_conns_per_source) {
		memcpy(c->src_key, key, 16);
		c->src_counted = 1;
	}
	c->counted_by = l;
	return ZCRPC_OK;
}

void zcrpc__limits_release(zcrpc_conn *c)
{
	zcrpc_listener *l = c->counted_by;
	int src_counted = c->src_counted;

	if (!l)
		return;
	c->counted_by = NULL;
	c->src_counted = 0;
	if (l->nworkers > 1 && l->w != c->w) {
		/* A connection handed to another worker: the counts are the
		 * listener's, on its own thread (listener.c). */
		zcrpc__listener_remote_release(l, c->w, c->src_key, src_counted,
					       0);
		return;
	}
	zcrpc__limits_uncount(l, c->src_key, src_counted, 0);
}

void zcrpc__limits_fini(zcrpc_listener *l)
{
	struct zcrpc__list *it;
	zcrpc_conn *c;

	zcrpc__foreach_conn(c, it, l->w)
		if (c->counted_by == l) {
			c->counted_by = NULL;
			c->src_counted = 0;
		}
	free(l->sources);
	l->sources = NULL;
	l->sources_cap = l->sources_used = 0;
}
