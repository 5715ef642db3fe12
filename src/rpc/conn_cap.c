/* zcrpc — the process's client connections: their count, the cap and the
 * idle eviction (conn_cap.h), and zcrpc_set_conn_cap / zcrpc_get_conn_cap_stats.
 * One mutex guards the count and the holders' list; it is taken when a
 * connection is made or leaves, never per call. */
#include "conn_cap.h"

#include "zcrpc/balance.h"
#include "../core/abi.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static pthread_mutex_t cap_mu = PTHREAD_MUTEX_INITIALIZER;
static struct zcrpc__list holders = {&holders, &holders};
static uint64_t next_id = 1;
static uint32_t open_units, max_units;
static uint64_t n_evicted, n_idle_closed, n_refused;
static uint32_t n_subs, n_shares;
static _Atomic int64_t idle_ns;

static void link_locked(struct zcrpc__capholder *h)
{
	if (h->linked)
		return;
	h->id = next_id++;
	zcrpc__list_push_back(&holders, &h->link);
	h->linked = 1;
}

/* The holder idle the longest, now marked evicted; NULL when none is. */
static struct zcrpc__capholder *evict_one_locked(void)
{
	struct zcrpc__list *n;

	for (;;) {
		struct zcrpc__capholder *best = NULL;
		int64_t best_t = 0;

		zcrpc__list_foreach(n, &holders) {
			struct zcrpc__capholder *h = zcrpc__container_of(
				n, struct zcrpc__capholder, link);
			int64_t t = atomic_load(&h->idle);

			if (t > 0 && (!best || t < best_t)) {
				best = h;
				best_t = t;
			}
		}
		if (!best)
			return NULL;
		/* it may have gone busy meanwhile: then look again */
		if (atomic_compare_exchange_strong(&best->idle, &best_t, -1))
			return best;
	}
}

zcrpc_status zcrpc__cap_take(struct zcrpc__capholder *h, char *why,
			     size_t why_len)
{
	struct zcrpc__capholder *victim;

	pthread_mutex_lock(&cap_mu);
	link_locked(h);
	if (max_units && open_units >= max_units) {
		victim = evict_one_locked();
		if (!victim) {
			n_refused++;
			snprintf(why, why_len,
				 "the process's connection cap (%u) is reached "
				 "and no connection is idle",
				 max_units);
			pthread_mutex_unlock(&cap_mu);
			return ZCRPC_RESOURCE_EXHAUSTED;
		}
		n_evicted++;
		victim->evict(victim); /* its unit is ours now */
	} else {
		open_units++;
	}
	h->held++;
	pthread_mutex_unlock(&cap_mu);
	return ZCRPC_OK;
}

void zcrpc__cap_put(struct zcrpc__capholder *h)
{
	int64_t t;

	if (!h->held)
		return;
	h->held--;
	t = atomic_load(&h->idle);
	for (;;) {
		if (t == -1) { /* the evicted one: its unit was taken over */
			if (atomic_compare_exchange_strong(&h->idle, &t, 0))
				return;
		} else if (t == 0 ||
			   atomic_compare_exchange_strong(&h->idle, &t, 0)) {
			break; /* no longer idle: nobody can evict it now */
		}
	}
	pthread_mutex_lock(&cap_mu);
	open_units--;
	pthread_mutex_unlock(&cap_mu);
}

void zcrpc__cap_idle(struct zcrpc__capholder *h, int64_t now_ns)
{
	int64_t busy = 0;

	if (now_ns <= 0)
		now_ns = 1;
	if (h->held) /* an evicted mark (-1) stays until it is dealt with */
		atomic_compare_exchange_strong(&h->idle, &busy, now_ns);
}

/* Takes @h's idle mark back: 1 when it had been evicted (its unit gone:
 * held drops), 0 otherwise. */
static int unmark(struct zcrpc__capholder *h)
{
	int64_t t = atomic_load(&h->idle);

	while (t > 0)
		if (atomic_compare_exchange_weak(&h->idle, &t, 0))
			return 0;
	if (t == -1) {
		atomic_store(&h->idle, 0);
		h->held--;
		return 1;
	}
	return 0;
}

int zcrpc__cap_busy(struct zcrpc__capholder *h)
{
	if (!atomic_load_explicit(&h->idle, memory_order_relaxed))
		return 0;
	return unmark(h);
}

int zcrpc__cap_evicted(struct zcrpc__capholder *h)
{
	if (atomic_load(&h->idle) != -1)
		return 0;
	return unmark(h);
}

int zcrpc__cap_idle_expired(struct zcrpc__capholder *h, int64_t now_ns)
{
	int64_t t = atomic_load(&h->idle), limit = atomic_load(&idle_ns);

	if (t <= 0 || !limit || now_ns - t < limit)
		return 0;
	if (!atomic_compare_exchange_strong(&h->idle, &t, 0))
		return 0; /* evicted meanwhile: that path closes it */
	h->held--;
	pthread_mutex_lock(&cap_mu);
	open_units--;
	n_idle_closed++;
	pthread_mutex_unlock(&cap_mu);
	return 1;
}

int64_t zcrpc__cap_idle_ns(void)
{
	return atomic_load_explicit(&idle_ns, memory_order_relaxed);
}

void zcrpc__cap_leave(struct zcrpc__capholder *h)
{
	pthread_mutex_lock(&cap_mu);
	if (atomic_load(&h->idle) == -1 && h->held)
		h->held--; /* that unit is another's now */
	open_units -= h->held;
	h->held = 0;
	atomic_store(&h->idle, 0);
	if (h->linked) {
		zcrpc__list_remove(&h->link);
		h->linked = 0;
	}
	pthread_mutex_unlock(&cap_mu);
}

struct zcrpc__capholder *zcrpc__cap_find(uint64_t id)
{
	struct zcrpc__capholder *found = NULL;
	struct zcrpc__list *n;

	pthread_mutex_lock(&cap_mu);
	zcrpc__list_foreach(n, &holders) {
		struct zcrpc__capholder *h =
			zcrpc__container_of(n, struct zcrpc__capholder, link);

		if (h->id == id) {
			found = h;
			break;
		}
	}
	pthread_mutex_unlock(&cap_mu);
	return found;
}

void zcrpc__cap_count_sub(int delta_subs, int delta_shares)
{
	pthread_mutex_lock(&cap_mu);
	n_subs += (uint32_t)delta_subs;
	n_shares += (uint32_t)delta_shares;
	pthread_mutex_unlock(&cap_mu);
}

void zcrpc_conn_cap_opts_init_sized(zcrpc_conn_cap_opts *caller, size_t size)
{
	zcrpc_conn_cap_opts d;

	memset(&d, 0, sizeof(d));
	d.size = sizeof(d);
	zcrpc__abi_init(caller, size, &d, sizeof(d));
}

zcrpc_status zcrpc_set_conn_cap(const zcrpc_conn_cap_opts *o)
{
	zcrpc_conn_cap_opts d;

	zcrpc_conn_cap_opts_init(&d);
	if (o && ZCRPC__ABI_IN(&d, o, ZCRPC__LAYOUT_END(zcrpc_conn_cap_opts,
						       idle_timeout_ms)) !=
			 ZCRPC_OK)
		return ZCRPC_INVALID_ARGUMENT;
	if (d.idle_timeout_ms < 0 || d.idle_timeout_ms > INT64_MAX / 1000000)
		return ZCRPC_INVALID_ARGUMENT;
	pthread_mutex_lock(&cap_mu);
	max_units = d.max_conns;
	atomic_store(&idle_ns, d.idle_timeout_ms * 1000000);
	pthread_mutex_unlock(&cap_mu);
	return ZCRPC_OK;
}

void zcrpc_get_conn_cap_stats(zcrpc_conn_cap_stats *out, size_t out_size)
{
	zcrpc_conn_cap_stats s;

	if (!out)
		return;
	memset(&s, 0, sizeof(s));
	s.size = sizeof(s);
	pthread_mutex_lock(&cap_mu);
	s.open = open_units;
	s.max_conns = max_units;
	s.evicted = n_evicted;
	s.idle_closed = n_idle_closed;
	s.refused = n_refused;
	s.subchannels = n_subs;
	s.shares = n_shares;
	pthread_mutex_unlock(&cap_mu);
	ZCRPC__ABI_OUT(out, out_size, &s);
}
