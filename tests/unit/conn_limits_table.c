/* Host check of a listener's connection limits (src/transport/conn_limits.c)
 * without a device: a zeroed worker and listener, connections taken and
 * released in random order from many source addresses; after every step
 * the per-source and total counts must match a plain array model, admit()
 * must refuse exactly at the limits, and every key must still be found
 * (the table's backward-shift deletion keeps probe runs whole). Called
 * from test_conn_limits.cc. */
#define _GNU_SOURCE
#include "transport/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn_limits_table.h"

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

static void key_of(unsigned src, uint8_t key[16])
{
	memset(key, 0, 16);
	key[10] = key[11] = 0xff;
	/* addresses that share low bits, so hashes collide in small tables */
	key[12] = 10;
	key[13] = (uint8_t)(src >> 16);
	key[14] = (uint8_t)(src >> 8);
	key[15] = (uint8_t)src;
}

int zcrpc_test_conn_limits(unsigned sources, unsigned per, unsigned max,
			   unsigned rounds, char *err, size_t errlen)
{
	zcrpc_worker *w = calloc(1, sizeof(*w));
	zcrpc_listener *l = calloc(1, sizeof(*l));
	unsigned *model = calloc(sources, sizeof(*model));
	unsigned cap = rounds, n = 0, total = 0, i, r, refused = 0;
	zcrpc_conn **conns = calloc(cap, sizeof(*conns));
	unsigned *src_of = calloc(cap, sizeof(*src_of));
	uint64_t rng = 0x6c696d697473ULL;
	int rc = -1;

	if (!w || !l || !model || !conns || !src_of) {
		fail(err, errlen, "out of memory");
		goto out;
	}
	zcrpc__list_init(&w->conns);
	l->w = w;
	l->opts.max_conns_per_source = per;
	l->opts.max_connections = max;
	for (r = 0; r < rounds; r++) {
		uint8_t key[16];
		char why[128];
		zcrpc_status st;

		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		if (n && (rng >> 60) < 7) { /* release a random one */
			unsigned k = (unsigned)(rng % n);

			zcrpc__limits_release(conns[k]);
			zcrpc__limits_release(conns[k]); /* idempotent */
			model[src_of[k]]--;
			total--;
			free(conns[k]);
			conns[k] = conns[--n];
			src_of[k] = src_of[n];
		} else { /* a request from a random source */
			unsigned s = (unsigned)((rng >> 8) % sources);
			int want_ok = (!per || model[s] < per) &&
				      (!max || total < max);

			key_of(s, key);
			st = zcrpc__limits_admit(l, key, "src", why,
						 sizeof(why));
			if ((st == ZCRPC_OK) != want_ok) {
				fail(err, errlen,
				     "round %u: source %u with %u (limit %u), "
				     "%u in all: admit said %s (%s)",
				     r, s, model[s], per, total,
				     zcrpc_status_str(st), why);
				goto out;
			}
			if (st != ZCRPC_OK) {
				refused++;
				continue;
			}
			conns[n] = calloc(1, sizeof(**conns));
			if (!conns[n] ||
			    zcrpc__limits_take(l, conns[n], key) != ZCRPC_OK) {
				fail(err, errlen, "round %u: take failed", r);
				goto out;
			}
			src_of[n++] = s;
			model[s]++;
			total++;
		}
		if (l->conns != total) {
			fail(err, errlen,
			     "round %u: %u counted, %u in the model", r,
			     l->conns, total);
			goto out;
		}
		if (per && r % 64 == 0) { /* every source's count, found */
			unsigned used = 0;

			for (i = 0; i < sources; i++) {
				used += model[i] != 0;
				if (!model[i])
					continue;
				/* a source at its limit is refused; below,
				 * admitted */
				key_of(i, key);
				st = zcrpc__limits_admit(l, key, "src", why,
							 sizeof(why));
				if ((st == ZCRPC_OK) !=
				    ((model[i] < per) &&
				     (!max || total < max))) {
					fail(err, errlen,
					     "round %u: source %u with %u of "
					     "%u: %s",
					     r, i, model[i], per,
					     zcrpc_status_str(st));
					goto out;
				}
			}
			if (used != l->sources_used) {
				fail(err, errlen,
				     "round %u: %u sources in the table, %u in "
				     "the model",
				     r, l->sources_used, used);
				goto out;
			}
		}
	}
	if (!refused && (per || max)) {
		fail(err, errlen,
		     "no request was ever refused: the limits were not "
		     "reached");
		goto out;
	}
	while (n) { /* everything released: an empty table */
		zcrpc__limits_release(conns[--n]);
		free(conns[n]);
	}
	if (l->conns || l->sources_used) {
		fail(err, errlen, "after every release: %u counted, %u sources",
		     l->conns, l->sources_used);
		goto out;
	}
	rc = 0;
out:
	while (n)
		free(conns[--n]);
	if (l)
		zcrpc__limits_fini(l);
	free(conns);
	free(src_of);
	free(model);
	free(l);
	free(w);
	return rc;
}
