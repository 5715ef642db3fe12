/* zcrpc — the cache of registered buffers for bulk parts (bulk_cache.c),
 * one per channel and per server. */
#ifndef ZCRPC_RPC_BULK_CACHE_H
#define ZCRPC_RPC_BULK_CACHE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "zcrpc/transport.h"

#define ZCRPC_BULK_MIN_SHIFT 16 /* 64 KiB */
#define ZCRPC_BULK_CLASSES   17 /* up to 4 GiB */

struct zcrpc__bulkbuf {
	struct zcrpc__bulkbuf *next;
	void *ptr;
	size_t cap;
	unsigned cls;
	zcrpc_mr *mr;	       /* registered with ZCRPC_MR_REMOTE_WRITE */
	int64_t freed_ns;      /* when it went back to the free list */
	int64_t keep_until_ns; /* not deregistered before: a window of a
				* closed connection may still be bound */
};

struct zcrpc__bulk_job;

/* Used from the owner's worker thread only, except what the lock guards
 * (the thread's queues) and @pinned. */
struct zcrpc__bulk_cache {
	zcrpc_context *ctx;
	struct zcrpc__bulkbuf *free[ZCRPC_BULK_CLASSES]; /* newest first */
	size_t limit;					 /* the cap */
	size_t total;	      /* registered or promised, and not given back */
	size_t in_use;	      /* handed out */
	size_t free_bytes;    /* on the free lists */
	uint64_t released;    /* bytes given back (evicted or idle) */
	uint64_t evicted;     /* buffers given back to make room at the cap */
	unsigned growing;     /* registrations promised, not yet collected */
	atomic_size_t pinned; /* bytes registered right now */
	/* the cache's thread: registers and deregisters off the worker */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_t thread;
	int thread_up, stop;
	struct zcrpc__bulk_job *jobs, *jobs_tail; /* to the thread, FIFO */
	struct zcrpc__bulk_job *done;		  /* back from it */
};

struct zcrpc__bulk_stats {
	size_t pinned, total, in_use, free_bytes;
	uint64_t released, evicted;
	unsigned growing;
};

void zcrpc__bulk_init(struct zcrpc__bulk_cache *c, zcrpc_context *ctx,
		      size_t limit);
/* The bytes a part of @len bytes takes (its class's size). */
size_t zcrpc__bulk_cap_of(size_t len);
/* A buffer of at least @len bytes now: from the free list, or registered
 * here (on the caller's thread). RESOURCE_EXHAUSTED at the limit (after
 * giving back free buffers of other classes) or when registering failed;
 * INVALID_ARGUMENT for 0 or more than ZCRPC_BULK_MAX bytes. */
zcrpc_status zcrpc__bulk_get(struct zcrpc__bulk_cache *c, size_t len,
			     struct zcrpc__bulkbuf **out);
/* The same without registering on this thread: OK with *@out from the free
 * list, or UNAVAILABLE when a buffer is being registered on the cache's
 * thread, delivered for @ref by a later zcrpc__bulk_collect(); errors as
 * zcrpc__bulk_get(). */
zcrpc_status zcrpc__bulk_get_async(struct zcrpc__bulk_cache *c, size_t len,
				   uint32_t ref, struct zcrpc__bulkbuf **out);
/* Delivers the registrations that finished, oldest first: fn(arg, ref, b),
 * b NULL when it failed; the callee owns b (zcrpc__bulk_put when unused).
 * Returns how many; c->growing says whether more are coming. */
unsigned zcrpc__bulk_collect(struct zcrpc__bulk_cache *c,
			     void (*fn)(void *arg, uint32_t ref,
					struct zcrpc__bulkbuf *b),
			     void *arg);
void zcrpc__bulk_put(struct zcrpc__bulk_cache *c, struct zcrpc__bulkbuf *b);
/* Gives back the free buffers unused for @idle_ns or longer; returns the
 * bytes. */
size_t zcrpc__bulk_trim(struct zcrpc__bulk_cache *c, int64_t now,
			int64_t idle_ns);
void zcrpc__bulk_get_stats(const struct zcrpc__bulk_cache *c,
			   struct zcrpc__bulk_stats *out);
/* Joins the thread and frees every buffer; none may be handed out. */
void zcrpc__bulk_fini(struct zcrpc__bulk_cache *c);

/* The byte count the WRITE WITH IMMEDIATE of a @len-byte part carries when
 * the writer splits at @piece (zcrpc_conn_write_piece): @len itself, or the
 * remainder after the full pieces. What a receiver checks (protocol §5). */
size_t zcrpc__bulk_last_piece(size_t len, size_t piece);

/* Zeroes the first @len bytes of a grant target at @p when a @len-byte part
 * would be split at @piece: only the last piece's byte count can be checked,
 * so bytes the writer skipped must not show what the memory held before. */
void zcrpc__bulk_scrub(void *p, size_t len, size_t piece);
/* The same for a grant to @conn's peer: everything when its writes end
 * with a WRITTEN message, whose length the device does not check. */
void zcrpc__bulk_scrub_for(const zcrpc_conn *conn, void *p, size_t len);

#endif /* ZCRPC_RPC_BULK_CACHE_H */
