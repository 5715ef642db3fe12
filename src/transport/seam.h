/* zcrpc — the seam between the RPC layer and a transport. Not installed.
 *
 * What it is: the one private interface src/rpc uses besides the public
 * transport API (include/zcrpc/transport.h). It shows no transport
 * structure: prototypes, the timer the RPC layer embeds, and the table of
 * connection verbs. src/rpc includes this file and never
 * src/transport/internal.h (tests/seam_check.sh checks the objects).
 *
 * Who implements it: the RDMA transport, in src/transport/seam.c (its
 * connection verbs, zcrpc__rdma_conn_ops, and the worker and memory
 * verbs), timer.c (the timers) and worker.c (the clock).
 *
 * The rule: the transport never calls back into the RPC layer except
 * through the public handlers the RPC layer gave it (zcrpc_conn_handlers,
 * zcrpc_listen_opts.on_accept, functions passed to zcrpc_worker_post) and
 * the timers' fn below. Nothing here calls back or blocks.
 *
 * A second transport (TCP, say) plugs in as nng's transports do (one ops
 * table per role, src/sp/transport.h): its connection object starts with a
 * struct zcrpc__conn_base pointing at its own struct zcrpc__conn_ops, and
 * the RPC layer reaches the verbs through the connection, never through
 * the kind. The public zcrpc_conn_* verbs would then dispatch the same
 * way; today only the RDMA transport exists and implements them directly.
 */
#ifndef ZCRPC_TRANSPORT_SEAM_H
#define ZCRPC_TRANSPORT_SEAM_H

#include <stddef.h>
#include <stdint.h>

#include "zcrpc/transport.h"
#include "../core/list.h"

/* ---- connection verbs, one table per connection kind --------------------- */

struct zcrpc__conn_ops {
	const char *kind; /* "rdma" */
	/* The connection is going down: its close was asked (by either
	 * side, or for an error) or it is CLOSED. */
	int (*closing)(const zcrpc_conn *c);
	/* The peer closed it in order (its CLOSE message arrived). */
	int (*peer_closed)(const zcrpc_conn *c);
	/* The orderly close for a reason (a protocol error, say), reported
	 * as @st and @why (copied) when it completes, instead of OK. */
	void (*abort)(zcrpc_conn *c, zcrpc_status st, const char *why);
	/* Sends @m (as zcrpc_conn_send_msg) with the credit kept for
	 * control frames (a CANCEL), which ordinary messages leave alone:
	 * it goes while an ordinary message would wait for credit.
	 * RESOURCE_EXHAUSTED when even that credit or the ring's room is
	 * gone (the caller keeps the frame for on_writable). */
	zcrpc_status (*send_urgent)(zcrpc_conn *c, zcrpc_msg *m, size_t len);
	/* The feature bits both hellos carried (0 before the handshake):
	 * the RPC layer reads ZCRPC_SEAM_FEAT_STREAMS. */
	uint32_t (*features)(const zcrpc_conn *c);
	/* The largest message the peer takes (its hello's max_msg; 0
	 * before the handshake). */
	uint32_t (*peer_max_msg)(const zcrpc_conn *c);
};

/* The connection's peer speaks streams (docs/protocol.md §8). */
#define ZCRPC_SEAM_FEAT_STREAMS 0x80U
/* ... and moves a client's large stream messages by RDMA WRITE. */
#define ZCRPC_SEAM_FEAT_STREAM_BULK 0x200U
/* ... and takes several frames in one message (docs/protocol.md §8). */
#define ZCRPC_SEAM_FEAT_BATCH 0x400U
/* ... and moves a server's large stream messages by RDMA WRITE. */
#define ZCRPC_SEAM_FEAT_SERVER_STREAM_BULK 0x800U
/* ... and drains in order: GOAWAY answered, refusals marked REFUSED. */
#define ZCRPC_SEAM_FEAT_DRAIN 0x1000U

/* The first member of every connection object, whatever its kind. */
struct zcrpc__conn_base {
	const struct zcrpc__conn_ops *ops;
};

static inline const struct zcrpc__conn_ops *
zcrpc__conn_ops_of(const zcrpc_conn *c)
{
	return ((const struct zcrpc__conn_base *)(const void *)c)->ops;
}

static inline int zcrpc__conn_closing(const zcrpc_conn *c)
{
	return zcrpc__conn_ops_of(c)->closing(c);
}

static inline int zcrpc__conn_peer_closed(const zcrpc_conn *c)
{
	return zcrpc__conn_ops_of(c)->peer_closed(c);
}

static inline zcrpc_status zcrpc__conn_send_urgent(zcrpc_conn *c, zcrpc_msg *m,
						   size_t len)
{
	return zcrpc__conn_ops_of(c)->send_urgent(c, m, len);
}

static inline int zcrpc__conn_has_streams(const zcrpc_conn *c)
{
	return (zcrpc__conn_ops_of(c)->features(c) & ZCRPC_SEAM_FEAT_STREAMS) != 0;
}

static inline int zcrpc__conn_has_stream_bulk(const zcrpc_conn *c)
{
	return (zcrpc__conn_ops_of(c)->features(c) &
		ZCRPC_SEAM_FEAT_STREAM_BULK) != 0;
}

static inline int zcrpc__conn_has_server_stream_bulk(const zcrpc_conn *c)
{
	return (zcrpc__conn_ops_of(c)->features(c) &
		ZCRPC_SEAM_FEAT_SERVER_STREAM_BULK) != 0;
}

static inline int zcrpc__conn_has_drain(const zcrpc_conn *c)
{
	return (zcrpc__conn_ops_of(c)->features(c) & ZCRPC_SEAM_FEAT_DRAIN) != 0;
}

static inline int zcrpc__conn_has_batch(const zcrpc_conn *c)
{
	return (zcrpc__conn_ops_of(c)->features(c) & ZCRPC_SEAM_FEAT_BATCH) != 0;
}

/* ops->abort with a printf-style reason (cut at 192 bytes). */
void zcrpc__conn_abort(zcrpc_conn *c, zcrpc_status st, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* ---- the worker ---------------------------------------------------------- */

/* Its largest message payload (zcrpc_worker_opts.max_msg). */
uint32_t zcrpc__worker_max_msg(const zcrpc_worker *w);
/* Inside zcrpc_worker_progress() of @w (a callback is running): what may
 * not wait for progress (sync calls, shutdown) refuses. */
int zcrpc__worker_in_progress(const zcrpc_worker *w);
/* Its message pool: gives back regions free for @idle_ns or longer
 * (returns how many), and the bytes registered now. */
uint32_t zcrpc__worker_pool_trim(zcrpc_worker *w, int64_t now, int64_t idle_ns);
size_t zcrpc__worker_pool_pinned(const zcrpc_worker *w);

/* ---- registered memory --------------------------------------------------- */

/* Where @mr starts. */
void *zcrpc__mr_addr(const zcrpc_mr *mr);
/* @len bytes at @off lie inside @mr, @mr has every flag of @flags
 * (ZCRPC_MR_*), and, when @ctx is not NULL, belongs to @ctx. */
int zcrpc__mr_covers(const zcrpc_mr *mr, const zcrpc_context *ctx, size_t off,
		     size_t len, unsigned flags);

/* ---- the clock and timers ------------------------------------------------ */

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t zcrpc__now_ns(void);
/* Sets the calling thread's zcrpc_last_error() (worker.c); for the RPC
 * layer's functions that report why they failed that way (announce.c). */
void zcrpc__set_last_error(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

/* A one-shot timer embedded in its owner (a channel, a server), run from
 * the worker's progress: fn(t, now) once @due_ns has passed. The fields
 * are the transport's (timer.c); the owner sets fn and zeroes the rest. */
struct zcrpc__timer {
	int64_t due_ns; /* 0 = not armed */
	void (*fn)(struct zcrpc__timer *t, int64_t now);
	/* timer.c's own: the heap links, or the batch being run */
	struct zcrpc__timer *left, *right, *parent;
	struct zcrpc__list due_link;
	uint64_t seq; /* start order: ties run first-started first */
	unsigned in_heap : 1, in_due : 1;
};

/* Arms @t for @due_ns, or keeps it armed for an earlier time. */
void zcrpc__timer_start(zcrpc_worker *w, struct zcrpc__timer *t,
			int64_t due_ns);
/* Disarms @t; its fn does not run again until the next start. */
void zcrpc__timer_stop(zcrpc_worker *w, struct zcrpc__timer *t);

/* ---- the end of a progress turn ----------------------------------------- */

/* A hook embedded in its owner, run once at the end of the worker's
 * current (or next) progress turn, before it may sleep: what the owner
 * gathered in the turn goes out as one (a batch of stream frames). The
 * owner sets fn and initialises link (zcrpc__list_init) once. */
struct zcrpc__turn_hook {
	struct zcrpc__list link; /* w->turn_end while due */
	void (*fn)(struct zcrpc__turn_hook *h);
};

/* Makes @h due (a no-op while it is). */
void zcrpc__worker_at_turn_end(zcrpc_worker *w, struct zcrpc__turn_hook *h);
/* It is not due any more (its owner goes). */
void zcrpc__turn_hook_cancel(struct zcrpc__turn_hook *h);

/* ---- a server on several workers (listener.c) ---------------------------- */

/* Spreads listener @l's new connections over @workers (@n of them, @l's
 * own among them or not): each connect request is admitted on @l's worker,
 * then handed to the worker with the fewest connections (docs/design.md,
 * Servers on many workers), whose thread runs its on_accept. Call once,
 * on @l's worker before it accepts. INVALID_ARGUMENT, RESOURCE_EXHAUSTED. */
zcrpc_status zcrpc__listener_spread(zcrpc_listener *l,
				    zcrpc_worker *const *workers, size_t n);
/* The worker connection @c belongs to (its thread runs its callbacks). */
zcrpc_worker *zcrpc__conn_worker(const zcrpc_conn *c);

#endif /* ZCRPC_TRANSPORT_SEAM_H */
