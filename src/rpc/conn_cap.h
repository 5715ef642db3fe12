/* zcrpc — the process's count of client connections, its cap and idle
 * eviction (zcrpc_set_conn_cap, zcrpc/balance.h). Each channel is a
 * holder: it takes a unit for every connection it makes and puts it back
 * when the connection leaves it. A holder whose one connection is idle
 * says so (zcrpc__cap_idle); at the cap, a take picks the holder idle the
 * longest, marks it evicted and tells it (@evict, under the module's
 * mutex: it must only post), taking over its unit; the holder then closes
 * that connection without putting the unit back. The idle mark is an
 * atomic, so the holder's thread goes busy again without a lock and an
 * evictor on another worker's thread never waits for it. Everything else
 * runs on the holder's own thread. */
#ifndef ZCRPC_RPC_CONN_CAP_H
#define ZCRPC_RPC_CONN_CAP_H

#include <stdatomic.h>
#include <stdint.h>

#include "../core/list.h"
#include "zcrpc/status.h"

struct zcrpc__capholder {
	struct zcrpc__list link; /* every holder with units (conn_cap.c) */
	/* >0: its connection is idle since then (ns) and may be evicted;
	 * 0: busy, or no connection; -1: evicted: one of its units was
	 * taken over, its connection must close. */
	_Atomic int64_t idle;
	uint32_t held;	/* units it holds (its thread) */
	unsigned linked : 1;
	uint64_t id;	/* names it for posts (conn_cap.c sets it) */
	/* Tells the holder it was evicted: called under the module's mutex,
	 * from any thread; must not block or call back into this module. */
	void (*evict)(struct zcrpc__capholder *h);
};

/* A unit for a new connection of @h: OK (under the cap, or an idle
 * connection's unit taken over), or RESOURCE_EXHAUSTED with the reason in
 * @why (the cap reached and none idle). */
zcrpc_status zcrpc__cap_take(struct zcrpc__capholder *h, char *why,
			     size_t why_len);
/* One of @h's connections left it: its unit goes back (unless it was the
 * evicted one, whose unit another holder took). */
void zcrpc__cap_put(struct zcrpc__capholder *h);
/* @h's one connection is idle from @now_ns on. */
void zcrpc__cap_idle(struct zcrpc__capholder *h, int64_t now_ns);
/* @h's connection is about to carry work: 0, it may; 1, it was evicted
 * (its unit is gone and counted so): close it and make another. */
int zcrpc__cap_busy(struct zcrpc__capholder *h);
/* From the eviction's post: 1 when @h is still evicted (its unit is gone
 * and counted so: close the idle connection), 0 when that was dealt with
 * already. */
int zcrpc__cap_evicted(struct zcrpc__capholder *h);
/* The idle timeout: when @h has been idle at least the timeout at @now_ns,
 * its unit goes back and 1 is returned (close the connection). */
int zcrpc__cap_idle_expired(struct zcrpc__capholder *h, int64_t now_ns);
/* The idle timeout in ns (0 = none). */
int64_t zcrpc__cap_idle_ns(void);
/* @h goes (its channel is destroyed): its units go back. */
void zcrpc__cap_leave(struct zcrpc__capholder *h);
/* The holder named @id, or NULL when it left: for the eviction's post,
 * which runs on the holder's thread, the only one it leaves on. */
struct zcrpc__capholder *zcrpc__cap_find(uint64_t id);

/* Target channels' subchannels, for zcrpc_get_conn_cap_stats(). */
void zcrpc__cap_count_sub(int delta_subs, int delta_shares);

#endif /* ZCRPC_RPC_CONN_CAP_H */
