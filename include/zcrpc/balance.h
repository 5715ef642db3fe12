/* zcrpc — channels over many servers: a channel made from a target string
 * ("ipv4:10.0.0.1:7000,10.0.0.2:7000", "file:/etc/kv.list", a scheme of
 * a resolver the application registered) resolves it into a set of
 * backends and picks one per call (pick_first, round_robin,
 * least_outstanding, ring_hash, or a picker of the application's).
 *
 * Such a channel is an ordinary zcrpc_channel: zcrpc_call_start(),
 * zcrpc_call(), zcrpc_call_cancel(), zcrpc_stream_start(), the protobuf-c
 * stubs and zcrpc_channel_destroy() take it, and callbacks get it as their
 * @ch. Behind it, each backend has a connection (made lazily, remade
 * with the channel's backoff), shared with the worker's other target
 * channels whose options match. A backend whose connection fails or
 * that sends GOAWAY leaves the pick set at once and comes back when its
 * backoff ends and a new connection comes up. docs/balancing.md tells the
 * whole design.
 *
 * Threading: as every channel's (zcrpc/rpc.h): the worker's thread only,
 * except zcrpc_resolver_set() and zcrpc_resolver_register() (any thread).
 *
 * ABI: as zcrpc/rpc.h (docs/abi.md): options and views start with a size.
 */
#ifndef ZCRPC_BALANCE_H
#define ZCRPC_BALANCE_H

#include <stddef.h>
#include <stdint.h>

#include "zcrpc/export.h"
#include "zcrpc/rpc.h"
#include "zcrpc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Longest host (name or numeric address) and port of a backend. */
#define ZCRPC_HOST_MAX 255
#define ZCRPC_PORT_MAX 15
/** Most backends one channel keeps. */
#define ZCRPC_MAX_BACKENDS 1024

/** One resolved server. A fixed layout that never grows (docs/abi.md). */
typedef struct zcrpc_address {
	const char *host; /**< numeric IPv4/IPv6 address or a name */
	const char *port; /**< decimal port */
} zcrpc_address;

/* ---- resolvers ----------------------------------------------------------- */

/** The channel's end of one resolution, handed to a resolver's start. */
typedef struct zcrpc_resolver zcrpc_resolver;

/**
 * A resolver of target scheme @scheme ("consul" for "consul:NAME"). All
 * hooks run on the channel's worker thread. Zero it, set @size, @scheme,
 * @start and @stop.
 */
typedef struct zcrpc_resolver_ops {
	size_t size;	    /**< sizeof(zcrpc_resolver_ops) */
	const char *scheme; /**< letters, digits, '+', '-', '.'; <= 31 bytes */
	/** Begin resolving @name (the target after "scheme:"): report the set
	 * with zcrpc_resolver_set(), now or later, as often as it changes.
	 * *@state is the resolver's, handed to the other hooks. A status
	 * other than OK refuses the target: zcrpc_channel_create_target()
	 * returns it (INVALID_ARGUMENT for a name that does not parse). */
	zcrpc_status (*start)(zcrpc_resolver *r, const char *name,
			      void **state, void *arg);
	/** Resolve again: a backend failed, or @interval_ms passed. May be
	 * NULL (a resolver that reports changes by itself). */
	void (*refresh)(void *state, void *arg);
	/** The channel goes: stop. After stop returns, @r is invalid and
	 * zcrpc_resolver_set() with it must not be called (a resolver with a
	 * thread of its own joins it here). */
	void (*stop)(void *state, void *arg);
	void *arg;
	/** How often refresh runs besides failures; 0 = only on failures. */
	int interval_ms;
	/* New fields go here (0 must mean the old behaviour). */
} zcrpc_resolver_ops;

/**
 * zcrpc_resolver_register - add @ops (copied, with its scheme) to the
 * process's resolvers, for zcrpc_channel_create_target(). Any thread.
 * ALREADY_EXISTS for a scheme taken (the built-in ipv4, ipv6, file too),
 * INVALID_ARGUMENT (NULL, a short @size, no start or stop, a bad scheme),
 * RESOURCE_EXHAUSTED (16 registered already, or no memory).
 */
ZCRPC_API zcrpc_status zcrpc_resolver_register(const zcrpc_resolver_ops *ops);

/**
 * zcrpc_resolver_set - the backends of @r's target are now @addrs[0..@n)
 * (copied; duplicates count once). @n 0 with a status other than OK says
 * why resolution failed (kept for the calls that find no backend: they
 * fail UNAVAILABLE with @why in their message); a failed resolution
 * keeps the set it had. Any thread: the set takes effect on the
 * channel's worker thread, from a later progress call.
 * INVALID_ARGUMENT for NULL @r, an address with a NULL, empty or too
 * long host or port, or more than ZCRPC_MAX_BACKENDS; RESOURCE_EXHAUSTED
 * (no memory). Nothing changes on an error.
 */
ZCRPC_API zcrpc_status zcrpc_resolver_set(zcrpc_resolver *r,
					  const zcrpc_address *addrs, size_t n,
					  zcrpc_status st, const char *why);

/* ---- pickers ------------------------------------------------------------- */

/** A backend's state, as the picker sees it. */
typedef enum zcrpc_backend_state {
	ZCRPC_BACKEND_IDLE = 0,	      /**< no connection; one may be made now */
	ZCRPC_BACKEND_CONNECTING = 1, /**< its connection is being made */
	ZCRPC_BACKEND_READY = 2,      /**< connected */
	ZCRPC_BACKEND_DOWN = 3,	      /**< failed, waiting out its backoff:
				       * not to be picked */
} zcrpc_backend_state;

/** One backend, as pickers and zcrpc_channel_get_backends() see it. The
 * strings belong to the channel (valid until the set changes). */
typedef struct zcrpc_backend_info {
	size_t size; /**< bytes the library filled */
	const char *host, *port;
	zcrpc_backend_state state;
	uint32_t in_flight; /**< calls alive on its connection (sent or waiting for it), those of every target channel sharing it */
	uint32_t credits_used; /**< of its window: receive slots those calls hold at the server */
	uint64_t picks;	       /**< calls (and retries) sent to it */
	uint64_t calls_ok, calls_failed; /**< its attempts' outcomes */
	/* New fields go here. */
} zcrpc_backend_info;

/**
 * A load-balancing policy. Zero it, set @size, @name and @pick. Hooks run
 * on the channel's worker thread.
 */
typedef struct zcrpc_picker_ops {
	size_t size;	  /**< sizeof(zcrpc_picker_ops) */
	const char *name; /**< for messages and zcrpc_channel_opts.lb_policy */
	/** The backend set changed (also once at first, maybe with @n 0):
	 * rebuild what the picker keeps, in *@state (NULL at first). May be
	 * NULL. A status other than OK keeps the old state. */
	zcrpc_status (*update)(void **state, const zcrpc_backend_info *b,
			       size_t n, void *arg);
	/** Pick for one call (@key: its zcrpc_call_opts.hash_key, or NULL):
	 * an index in @b whose state is not DOWN, or -1 for none. @b is the
	 * set last given to update, with state and load fresh. */
	int (*pick)(void *state, const zcrpc_backend_info *b, size_t n,
		    const void *key, size_t key_len, void *arg);
	void (*destroy)(void *state, void *arg); /**< may be NULL */
	void *arg;
	/* New fields go here (NULL must mean the old behaviour). */
} zcrpc_picker_ops;

/* ---- channels over a target ---------------------------------------------- */

/**
 * zcrpc_channel_create_target - a channel to the servers @target names:
 * - "ipv4:ADDR:PORT[,ADDR:PORT...]", "ipv6:[ADDR]:PORT[,...]": that list;
 * - "file:PATH": one "HOST:PORT" or "[V6]:PORT" per line ('#' starts a
 *   comment), re-read when the file changes (checked every second);
 * - "dns:NAME:PORT": NAME's A and AAAA records with PORT; "dns:NAME"
 *   without a port: NAME's SRV records ("_kv._tcp.example.org"), their
 *   targets' addresses with their ports, lowest priority first;
 *   "dns://AUTHORITY/..." asks only the DNS server AUTHORITY ("IP[:PORT]",
 *   "[V6][:PORT]"), "dns:///..." (or no "//") the system's. Resolved with
 *   c-ares on a thread of the channel's own: again after a backend failed
 *   (at most once a second) and when the answer's smallest TTL ends (kept
 *   within 1..30 s); a failed resolution keeps the set and is tried again
 *   after 1 s, doubling to 30 s;
 * - "etcd:http://HOST:PORT/PREFIX": the values ("HOST:PORT", "[V6]:PORT")
 *   of the keys PREFIX/... in etcd (its v3 HTTP/JSON gateway; PREFIX
 *   without the slashes around it), from a thread of the resolver's own,
 *   watched for changes and read again after a backend failed and every
 *   30 s; values that do not parse are skipped (zcrpc_server_announce()
 *   puts servers there);
 * - "SCHEME:NAME" of a resolver given to zcrpc_resolver_register();
 * - "HOST:PORT" without a scheme: that one server, as
 *   zcrpc_channel_create().
 * @o (may be NULL) sets every backend's connection and the balancing
 * (lb_policy, picker); strings are copied. A resolver that has not
 * reported yet, or reported no backend, leaves calls without a backend:
 * they wait (ZCRPC_CALL_WAIT_FOR_READY) or fail UNAVAILABLE.
 * On success *@out is the caller's (zcrpc_channel_destroy()). Errors:
 * INVALID_ARGUMENT (NULL, a target that does not parse, an unknown scheme
 * or lb_policy, bad options), RESOURCE_EXHAUSTED, or what the resolver's
 * start returned.
 */
ZCRPC_API zcrpc_status zcrpc_channel_create_target(zcrpc_worker *w,
						   const char *target,
						   const zcrpc_channel_opts *o,
						   zcrpc_channel **out);

/**
 * zcrpc_channel_get_backends - copies up to @max of @ch's current backends
 * into @out (each written through @info_size: pass sizeof(*out)), in the
 * resolver's order; returns how many there are (a channel made by
 * zcrpc_channel_create() has one). 0 for NULL @ch.
 */
ZCRPC_API size_t zcrpc_channel_get_backends(const zcrpc_channel *ch,
					    zcrpc_backend_info *out,
					    size_t max, size_t info_size);

/* ---- connections shared and capped -------------------------------------- */

/*
 * Target channels on one worker share their backends' connections: a
 * backend whose address and connection options (every field of
 * zcrpc_channel_opts but the balancing ones: lb_policy, picker,
 * retry_buffer, health_check_ms, health_service, default_timeout_us,
 * no_sharing) match another target channel's backend on the same worker
 * uses that backend's connection (its "subchannel"), so N channels to a
 * service hold one connection per server, not N. A channel made by
 * zcrpc_channel_create() is a connection of its own, never shared (the
 * path with nothing between the call and the connection).
 */

/** The process's client connections: how many its channels may hold at
 * once, and how long one may stay idle. Initialise with
 * zcrpc_conn_cap_opts_init(). */
typedef struct zcrpc_conn_cap_opts {
	size_t size; /**< sizeof(zcrpc_conn_cap_opts), set by init */
	/** Connections the process's channels (all workers, plain and
	 * target channels' alike) may hold at once, counting those being
	 * made; 0 = no cap (the default). At the cap a new connection closes
	 * the least recently used idle one (connected, no call, stream or
	 * grant on it), on whichever worker holds it, in order (the server
	 * sees an orderly close); its channel connects again at its next
	 * call. With none idle the new connection is refused: its calls fail
	 * RESOURCE_EXHAUSTED ("connection cap ... reached"). Lowering the cap
	 * below the connections held closes none at once; they go as new
	 * ones need room or as they idle out. */
	uint32_t max_conns;
	/** A channel's connection idle this long (ms) is closed in order and
	 * made again at the channel's next call; 0 = never (the default).
	 * Health checks (zcrpc_channel_opts.health_check_ms) are calls. */
	int64_t idle_timeout_ms;
	/* New fields go here (0 must mean the old behaviour). */
} zcrpc_conn_cap_opts;

ZCRPC_API void zcrpc_conn_cap_opts_init_sized(zcrpc_conn_cap_opts *o,
					      size_t size);
static inline void zcrpc_conn_cap_opts_init(zcrpc_conn_cap_opts *o)
{
	zcrpc_conn_cap_opts_init_sized(o, sizeof(*o));
}

/**
 * zcrpc_set_conn_cap - set the process's connection cap and idle timeout
 * (@o copied; NULL: no cap, no timeout). Any thread; it applies to the
 * connections made and the idle periods begun from then on.
 * INVALID_ARGUMENT (a short @size, a negative timeout).
 */
ZCRPC_API zcrpc_status zcrpc_set_conn_cap(const zcrpc_conn_cap_opts *o);

/** The process's client connections, read with zcrpc_get_conn_cap_stats(). */
typedef struct zcrpc_conn_cap_stats {
	size_t size;	    /**< bytes the library filled */
	uint32_t open;	    /**< connections channels hold now (made or being made) */
	uint32_t max_conns; /**< the cap (0 = none) */
	uint64_t evicted;   /**< idle connections closed to make room at the cap */
	uint64_t idle_closed; /**< closed after idle_timeout_ms */
	uint64_t refused;   /**< connections refused at the cap, none idle */
	uint32_t subchannels; /**< target channels' backend connections alive (shared or not) */
	uint32_t shares;    /**< of their users, those beyond each one's first: backends that use another's */
	/* New fields go here. */
} zcrpc_conn_cap_stats;

/** Copies the process's connection counters into @out (written through
 * @out_size: pass sizeof(*out)). Any thread. */
ZCRPC_API void zcrpc_get_conn_cap_stats(zcrpc_conn_cap_stats *out, size_t out_size);

/* ---- retries ------------------------------------------------------------- */

/** How a method's calls are retried. Initialise with
 * zcrpc_retry_policy_init(). */
typedef struct zcrpc_retry_policy {
	size_t size;		 /**< sizeof(zcrpc_retry_policy), set by init */
	uint32_t max_attempts;	 /**< 2..10 (the first attempt counts); default 3 */
	int initial_backoff_ms;	 /**< before the second attempt; default 10 */
	int max_backoff_ms;	 /**< cap of the doubling delay; default 1000 (jittered +-20 %) */
	/** Statuses that retry: bit (1 << status); default
	 * 1 << ZCRPC_UNAVAILABLE. */
	uint32_t retryable;
	/** Hedging instead of retrying (gRPC's hedging policy): 0 = retries
	 * as above (the default). > 0: a call is sent to one backend and,
	 * every this many ms without an answer, to one more it was not sent
	 * to yet, up to @max_attempts in flight at once; the first answer
	 * that is OK or whose status is not in @retryable is the call's, and
	 * the other attempts are cancelled (a CANCEL to their servers; their
	 * answers are dropped). An answer in @retryable sends the next
	 * attempt at once; when none is left it is the call's. The backoff
	 * fields are not used. Calls with an attachment or a reply_into (the
	 * caller's memory) or a payload above retry_buffer are not hedged:
	 * they are attempted one at a time, retried by the fields above. */
	int hedge_delay_ms;
	/* New fields go here (0 must mean the old behaviour). */
} zcrpc_retry_policy;

ZCRPC_API void zcrpc_retry_policy_init_sized(zcrpc_retry_policy *p,
					     size_t size);
static inline void zcrpc_retry_policy_init(zcrpc_retry_policy *p)
{
	zcrpc_retry_policy_init_sized(p, sizeof(*p));
}

/**
 * zcrpc_channel_set_retry - mark @method idempotent on @ch and retry its
 * failed calls by @p (copied; NULL removes the mark). A call is attempted
 * again, on a backend picked anew, after a status in p->retryable, while
 * attempts remain and its deadline (which covers every attempt) has not
 * passed, or hedged (p->hedge_delay_ms). Calls of any method that
 * provably never reached a server
 * (never sent, or failed for want of a connection before a byte went)
 * are retried without a policy, once per backend. Only for channels of
 * zcrpc_channel_create_target(); before their first call: INVALID_ARGUMENT
 * (NULL @ch, bad @p), FAILED_PRECONDITION (another channel, or calls were
 * made), RESOURCE_EXHAUSTED (no memory, or 64 methods marked).
 */
ZCRPC_API zcrpc_status zcrpc_channel_set_retry(zcrpc_channel *ch,
					       uint32_t method,
					       const zcrpc_retry_policy *p);

/* ---- health (grpc.health.v1) ---------------------------------------------- */

/** The method every server serves: grpc.health.v1's Check (request a
 * HealthCheckRequest, reply a HealthCheckResponse, protobuf-encoded). */
#define ZCRPC_HEALTH_CHECK "/grpc.health.v1.Health/Check"
/** ... and Watch (a server-streaming method: one HealthCheckRequest, then
 * a HealthCheckResponse at once and at every change of that service's
 * status; SERVICE_UNKNOWN for one never set; NOT_SERVING and the end of
 * the stream when the server shuts down gracefully). */
#define ZCRPC_HEALTH_WATCH "/grpc.health.v1.Health/Watch"

/** grpc.health.v1's HealthCheckResponse.ServingStatus. */
typedef enum zcrpc_serving_status {
	ZCRPC_SERVING_UNKNOWN = 0,
	ZCRPC_SERVING_SERVING = 1,
	ZCRPC_SERVING_NOT_SERVING = 2,
	ZCRPC_SERVING_SERVICE_UNKNOWN = 3,
} zcrpc_serving_status;

/**
 * zcrpc_server_set_serving - what @s's health service answers for
 * @service ("" = the server as a whole, SERVING from zcrpc_server_create
 * on; a service never set is answered NOT_FOUND, as gRPC's). Every server
 * serves ZCRPC_HEALTH_CHECK (so registering that name yourself fails
 * ALREADY_EXISTS); a graceful shutdown sets every service NOT_SERVING
 * before its GOAWAY (a check that reaches it before the GOAWAY says so;
 * those after are refused with the other calls). Any thread. INVALID_ARGUMENT (NULL, a name over 200
 * bytes, a status out of range), RESOURCE_EXHAUSTED (32 services).
 */
ZCRPC_API zcrpc_status zcrpc_server_set_serving(zcrpc_server *s,
						const char *service,
						zcrpc_serving_status status);

/* ---- servers announcing themselves ------------------------------------- */

typedef struct zcrpc_announcement zcrpc_announcement;

/** How a server announces itself. Initialise with
 * zcrpc_announce_opts_init(). */
typedef struct zcrpc_announce_opts {
	size_t size; /**< sizeof(zcrpc_announce_opts), set by init */
	/** The lease's time to live, seconds (2..3600): a server that dies
	 * stops renewing it and its key goes this long after. Default 5. */
	int ttl_s;
	/* New fields go here (0 must mean the old behaviour). */
} zcrpc_announce_opts;

ZCRPC_API void zcrpc_announce_opts_init_sized(zcrpc_announce_opts *o,
					      size_t size);
static inline void zcrpc_announce_opts_init(zcrpc_announce_opts *o)
{
	zcrpc_announce_opts_init_sized(o, sizeof(*o));
}

/**
 * zcrpc_server_announce - register @s, reached at @addr ("HOST:PORT", the
 * address clients connect to), in the registry @registry names:
 * "etcd:http://HOST:PORT/PREFIX" puts the key PREFIX/HOST:PORT (value
 * @addr) under a lease of o->ttl_s seconds that the server renews while
 * it lives (from a thread of its own), so that channels of target
 * "etcd:http://HOST:PORT/PREFIX" find it, and lose it within the ttl when
 * the process dies. A graceful zcrpc_server_shutdown() withdraws it
 * (revokes the lease) before its GOAWAY; so does
 * zcrpc_announcement_withdraw(). *@out (may be NULL) is the caller's
 * handle, valid until withdrawn or the server is destroyed. It waits for
 * etcd's answers to the grant and the put (2 s each at most); the
 * shutdown and zcrpc_server_destroy() wait up to 1 s per announcement for
 * the revoke. Worker thread. Errors: INVALID_ARGUMENT (a registry or address that does not
 * parse, bad options), UNAVAILABLE (the registry did not answer, or
 * refused: the message via zcrpc_last_error()), RESOURCE_EXHAUSTED.
 */
ZCRPC_API zcrpc_status zcrpc_server_announce(zcrpc_server *s,
					     const char *registry,
					     const char *addr,
					     const zcrpc_announce_opts *o,
					     zcrpc_announcement **out);

/** Withdraws @a at once (revokes its lease) and frees it. NULL is a
 * no-op. Worker thread. */
ZCRPC_API void zcrpc_announcement_withdraw(zcrpc_announcement *a);

#ifdef __cplusplus
}
#endif

#endif /* ZCRPC_BALANCE_H */
