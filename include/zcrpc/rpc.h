/* zcrpc — the RPC layer: channels (client), servers, calls.
 *
 * Threading: channels and servers belong to one worker and follow its rule:
 * use them from the worker's thread only, except the functions marked
 * "any thread". A server may also be given several workers
 * (zcrpc_server_opts.workers, or threads = N for workers it makes): each
 * connection then lives on one of them, and its handlers run on that
 * worker's thread; the server's own functions say which thread they need
 * (zcrpc_server_serve() can run all the threads). A client spreads its
 * calls over workers with a channel (or several) per worker. Callbacks (call completions, handlers) run only inside
 * zcrpc_worker_progress() — never inside the call that submitted the work.
 * A synchronous call drives the worker's progress until its reply, so
 * other callbacks of that worker may run inside it; a synchronous call
 * made from inside a callback of the same worker returns
 * FAILED_PRECONDITION.
 *
 * Every call completes exactly once: OK, the server's error status with
 * its message, DEADLINE_EXCEEDED, CANCELLED,
 * UNAVAILABLE (connection lost; "closed by the server" when the server
 * closed it in order with the call in flight; "could not connect" when it
 * never came up: refused, unreachable; server going away), RESOURCE_EXHAUSTED
 * (local queue full), UNAUTHENTICATED (the server refused the channel's
 * pre-shared key, or the key is missing on one side).
 *
 * ABI (docs/abi.md; the rule of zcrpc/transport.h): options start with a
 * `size` their _init() sets; counters and zcrpc_result are written through
 * a size argument (pass sizeof(*out)); the views the library hands to
 * callbacks (zcrpc_reply, zcrpc_request) start with the `size` the library
 * filled, so code built against a newer header can tell a field an older
 * library does not fill: ZCRPC_VIEW_HAS(view, type, field).
 */
#ifndef ZCRPC_RPC_H
#define ZCRPC_RPC_H

#include <stddef.h>
#include <stdint.h>

#include "zcrpc/export.h"
#include "zcrpc/status.h"
#include "zcrpc/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zcrpc_channel zcrpc_channel;
typedef struct zcrpc_server zcrpc_server;
typedef struct zcrpc_server_call zcrpc_server_call;
struct zcrpc_picker_ops; /* zcrpc/balance.h */

/** Names a call for zcrpc_call_cancel(); 0 names none. */
typedef uint64_t zcrpc_call_id;

/** Non-zero when the library filled @field of the view @v (a pointer to a
 * zcrpc_reply or zcrpc_request, whose @size the library set). */
#define ZCRPC_VIEW_HAS(v, type, field)                                         \
	((v)->size >= offsetof(type, field) + sizeof(((type *)0)->field))

/** One metadata pair. Keys 1..255 bytes, values < 64 KiB, at most 16
 * pairs and 2 KiB per message. In callbacks the pointers are valid only
 * during the callback. A fixed layout that never grows (docs/abi.md). */
typedef struct zcrpc_md {
	const char *key;
	size_t key_len;
	const void *value;
	size_t value_len;
} zcrpc_md;

/** A piece of memory registered with zcrpc_mr_register(). A fixed layout
 * that never grows (docs/abi.md). */
typedef struct zcrpc_bulk {
	const zcrpc_mr *mr;
	size_t offset;
	size_t len;
} zcrpc_bulk;

/**
 * zcrpc_method_id - the wire id of a method: 32-bit FNV-1a of its full
 * name "/package.Service/Method". Adding methods never renumbers others.
 */
ZCRPC_API uint32_t zcrpc_method_id(const char *full_name);

/* ---- client ------------------------------------------------------------- */

/** Channel settings. Initialise with zcrpc_channel_opts_init(). */
typedef struct zcrpc_channel_opts {
	size_t size; /**< sizeof(zcrpc_channel_opts), set by init */
	int connect_timeout_ms;	    /**< per connection attempt; default 10000 */
	int64_t default_timeout_us; /**< call deadline when a call gives none; default 0 = none */
	uint32_t window;	    /**< receive window each way (calls in flight); default 1040 */
	uint32_t max_pending;	    /**< calls waiting for a connection or credits; default 4096 */
	uint32_t max_calls;	    /**< calls alive at once; default 65536 (the table grows to it as calls come) */
	int backoff_initial_ms;	    /**< first reconnect delay; default 100 */
	int backoff_max_ms;	    /**< reconnect delay cap; default 5000 (jittered +-20 %) */
	size_t bulk_threshold;	    /**< payloads above this travel by RDMA WRITE; default 16384 */
	const char *src_addr;	    /**< local address to bind, or NULL */
	/** Pre-shared key of a server that requires one (16..64 bytes,
	 * copied), or NULL; see zcrpc_connect_opts.psk. A refused key fails
	 * the connection attempt and its calls with UNAUTHENTICATED, and so
	 * do calls made until the next attempt. */
	const void *psk;
	size_t psk_len;
	const char *identity; /**< sent with the key proof (copied; <= 64 bytes), or NULL */
	/** Depth of the connection's send queue (messages posted and not yet
	 * completed), 2..32768; default 64; 0 = the window, as before. Calls
	 * beyond the send queue's room (or the peer's credits) wait in the
	 * channel's queue (max_pending) and go out as room returns; the window
	 * still bounds the calls in flight. */
	uint32_t send_depth;
	/** The IP type-of-service byte of the channel's connections (1..255;
	 * 0 = the kernel's default): zcrpc_connect_opts.tos. 64 bits wide so
	 * that it lies past the old struct's tail padding (docs/abi.md). */
	uint64_t tos;
	/** Pin the channel's connections to a device, port and GID index:
	 * zcrpc_connect_opts.device / port / gid_index (the name is copied). */
	const char *device;
	uint32_t port;
	uint32_t gid_index;
	/** Channels of zcrpc_channel_create_target() (zcrpc/balance.h): the
	 * policy that picks a backend per call, "pick_first" (NULL: the
	 * default), "round_robin", "least_outstanding" or "ring_hash"; or
	 * @picker, the application's (copied; it wins over lb_policy). */
	const char *lb_policy;
	const struct zcrpc_picker_ops *picker;
	/** The largest request payload a target channel keeps to retry the
	 * call (zcrpc_channel_set_retry; calls that never reached a server);
	 * larger ones are never retried. 0 = 65536. */
	size_t retry_buffer;
	/** Target channels: every this many ms each connected backend is asked
	 * grpc.health.v1 Check(@health_service, NULL = ""); a backend that
	 * answers NOT_SERVING (or another status than SERVING, or fails the
	 * check but UNIMPLEMENTED: a server without the service counts as
	 * serving) leaves the pick set until a check says SERVING. 0 = no
	 * checks (a backend leaves only when its connection fails or it
	 * sends GOAWAY). */
	int64_t health_check_ms;
	const char *health_service;
	/** Target channels: 1 gives this channel's backends connections of
	 * their own; 0 (the default) shares each with the other target
	 * channels of the worker whose options match (zcrpc/balance.h). */
	int no_sharing;
	/* New fields go here (0 must mean the old behaviour: docs/abi.md). */
} zcrpc_channel_opts;

/** Fills @o with the defaults documented above. */
ZCRPC_API void zcrpc_channel_opts_init_sized(zcrpc_channel_opts *o,
					     size_t size);
/* An inline, so the size is the caller's own sizeof: a library newer
 * than the caller's header never writes past its struct (docs/abi.md). */
static inline void zcrpc_channel_opts_init(zcrpc_channel_opts *o)
{
	zcrpc_channel_opts_init_sized(o, sizeof(*o));
}

/**
 * zcrpc_channel_create - a channel to the server at @host:@port. It
 * connects lazily (on the first call) and reconnects after a failure, with
 * jittered exponential backoff; calls made while it connects wait in a
 * bounded queue; when a connection attempt fails they fail UNAVAILABLE.
 * @o may be NULL; strings are copied. On success *@out is the caller's
 * (zcrpc_channel_destroy()). Errors: INVALID_ARGUMENT, RESOURCE_EXHAUSTED.
 */
ZCRPC_API zcrpc_status zcrpc_channel_create(zcrpc_worker *w, const char *host,
					    const char *port,
					    const zcrpc_channel_opts *o,
					    zcrpc_channel **out);

/**
 * zcrpc_channel_destroy - complete every outstanding call with CANCELLED
 * (their callbacks run inside this call), close the connection (in order:
 * the server sees on_disconnect OK and cancels its calls on it), free the
 * channel. Must not be called from inside one of its own callbacks. NULL
 * is a no-op.
 */
ZCRPC_API void zcrpc_channel_destroy(zcrpc_channel *ch);

/** Per-call settings. Initialise with zcrpc_call_opts_init(). */
typedef struct zcrpc_call_opts {
	size_t size;		    /**< sizeof(zcrpc_call_opts), set by init */
	int64_t timeout_us;	    /**< deadline from now; 0 = the channel's default */
	const zcrpc_md *md;	    /**< request metadata (copied at submission) */
	size_t n_md;
	const zcrpc_bulk *attachment; /**< sent in place by RDMA WRITE; keep it unchanged until the call completes */
	const zcrpc_bulk *reply_into; /**< registered memory (ZCRPC_MR_REMOTE_WRITE) the reply's attachment lands in; the server may write it only through a window revoked before the callback runs */
	size_t max_reply;	    /**< largest reply payload + attachment accepted; 0 = no limit */
	/** The call's key for a hashing policy (ring_hash: a key always
	 * reaches the same backend while the set is stable); copied; NULL =
	 * none (a random backend). Other policies ignore it. */
	const void *hash_key;
	size_t hash_key_len;
	/** ZCRPC_CALL_* bits. */
	uint64_t flags;
	/* New fields go here (0 must mean the old behaviour: docs/abi.md). */
} zcrpc_call_opts;

/** zcrpc_call_opts.flags: on a target channel with no backend to pick (none
 * resolved, all down), the call waits for one until its deadline instead
 * of failing UNAVAILABLE at once (gRPC's wait_for_ready). */
#define ZCRPC_CALL_WAIT_FOR_READY 1u

/** Fills @o with defaults (no deadline beyond the channel's, no metadata,
 * no attachments, no reply limit). */
ZCRPC_API void zcrpc_call_opts_init_sized(zcrpc_call_opts *o, size_t size);
/* An inline, so the size is the caller's own sizeof: a library newer
 * than the caller's header never writes past its struct (docs/abi.md). */
static inline void zcrpc_call_opts_init(zcrpc_call_opts *o)
{
	zcrpc_call_opts_init_sized(o, sizeof(*o));
}

/** What a call returned. Valid only during the completion callback; the
 * struct belongs to the library and its data lies in registered memory the
 * library (or @reply_into) owns. */
typedef struct zcrpc_reply {
	size_t size; /**< bytes of this struct the library filled
			(ZCRPC_VIEW_HAS) */
	zcrpc_status status;
	const char *message;	 /**< the server's (or the library's) message; "" on OK */
	const void *data;	 /**< reply payload */
	size_t len;
	const void *attachment;	 /**< reply attachment, if any */
	size_t attachment_len;
	const zcrpc_md *md;	 /**< reply metadata: the server's trailing metadata */
	size_t n_md;
	/** The server's initial metadata (zcrpc_reply_opts.initial_md);
	 * none from a server that sent only one list. */
	const zcrpc_md *initial_md;
	size_t n_initial_md;
	/* New fields go here. */
} zcrpc_reply;

typedef void (*zcrpc_call_cb)(zcrpc_channel *ch, const zcrpc_reply *reply,
			      void *arg);

/** Fills @len bytes of request payload at @dst (registered memory). */
typedef void (*zcrpc_fill_fn)(void *dst, size_t len, void *ctx);

/**
 * zcrpc_call_start - start a call of @method with a @len-byte request
 * payload that @fill writes straight into registered memory (this is how
 * protobuf-c packs without an intermediate buffer). @cb runs exactly once,
 * from a later progress call. *@id (may be NULL) names the call for
 * zcrpc_call_cancel().
 * Errors (nothing is started, @cb never runs): INVALID_ARGUMENT (NULL
 * arguments, bad metadata, reply_into not a write target),
 * RESOURCE_EXHAUSTED (too many calls, or the local queue is full),
 * FAILED_PRECONDITION (the channel is being destroyed).
 */
ZCRPC_API zcrpc_status zcrpc_call_start(zcrpc_channel *ch, uint32_t method,
					size_t len, zcrpc_fill_fn fill,
					void *fill_ctx,
					const zcrpc_call_opts *o,
					zcrpc_call_cb cb, void *arg,
					zcrpc_call_id *id);

/** zcrpc_call_start() with the payload copied from @req. */
ZCRPC_API zcrpc_status zcrpc_call_async(zcrpc_channel *ch, uint32_t method,
					const void *req, size_t len,
					const zcrpc_call_opts *o,
					zcrpc_call_cb cb, void *arg,
					zcrpc_call_id *id);

/**
 * zcrpc_call_cancel - cancel a call: its callback runs with CANCELLED from
 * the next progress call; a request not sent yet is never sent, one at
 * the server is told to stop (a late reply is dropped and counted).
 * Errors: NOT_FOUND when the call already completed (its callback ran or
 * is about to run with its real result) or never existed.
 */
ZCRPC_API zcrpc_status zcrpc_call_cancel(zcrpc_channel *ch, zcrpc_call_id id);

/** A synchronous call's result, filled by zcrpc_call() through the size
 * it is given; release with zcrpc_result_free(). */
typedef struct zcrpc_result {
	size_t size; /**< bytes zcrpc_call() filled (min of its @out_size and
			the library's sizeof) */
	zcrpc_status status;
	char *message; /**< "" on OK */
	void *data;    /**< reply payload (heap copy) */
	size_t len;
	void *attachment; /**< reply attachment (heap copy unless reply_into was given) */
	size_t attachment_len;
	/** The server's trailing and initial metadata (zcrpc_reply's), heap
	 * copies owned by the result (keys and values inside the same
	 * allocation); NULL when none. */
	zcrpc_md *md;
	size_t n_md;
	zcrpc_md *initial_md;
	size_t n_initial_md;
	/* New fields go here (filled, and owned memory allocated, only when
	 * @size covers them). */
} zcrpc_result;

/**
 * zcrpc_call - call and wait: drives the worker's progress until the call
 * completes, then copies the reply into *@out (heap memory the caller
 * frees with zcrpc_result_free()), writing at most @out_size bytes of it
 * (pass sizeof(*out)). Returns the call's status (also in out->status).
 * FAILED_PRECONDITION when called from inside a callback of the channel's
 * worker (it would deadlock the worker). INVALID_ARGUMENT, with nothing
 * written, for NULL @ch or @out or an @out_size too small for the fields
 * of the first release.
 */
ZCRPC_API zcrpc_status zcrpc_call(zcrpc_channel *ch, uint32_t method,
				  const void *req, size_t len,
				  const zcrpc_call_opts *o, zcrpc_result *out,
				  size_t out_size);

/** Frees what zcrpc_call() put in @r (the fields its r->size covers) and
 * clears them. NULL is a no-op. */
ZCRPC_API void zcrpc_result_free(zcrpc_result *r);

/** Channel counters, read with zcrpc_channel_get_stats(). */
typedef struct zcrpc_channel_stats {
	uint64_t calls_started, calls_ok, calls_failed;
	uint64_t late_replies;	 /**< replies to calls already completed, dropped */
	uint64_t queue_full;	 /**< calls refused because the local queue was full */
	uint64_t reconnects;	 /**< connection attempts after the first */
	uint64_t copied_bytes;	 /**< bytes copied by zcrpc_call_async / zcrpc_call / plain attachments */
	uint32_t in_flight;	 /**< calls alive now */
	uint32_t pending;	 /**< of which waiting to be sent */
	/**
	 * Connections torn down because the server held a reply grant of a
	 * completed call without writing for 10 s (an honest server never
	 * does: it writes as soon as it has the grant).
	 */
	uint64_t grant_timeouts;
	/**
	 * Reply attachments whose write with immediate carried another byte
	 * count than the reply announced: the call failed INTERNAL
	 * (docs/protocol.md §4); and the server's stream messages by RDMA
	 * WRITE written so (their stream ended INVALID_ARGUMENT).
	 */
	uint64_t bulk_bad_writes;
	/**
	 * Connections closed because the server broke the protocol (a
	 * malformed frame, a grant smaller than the bulk part, an unexpected
	 * frame or write). The calls on it fail UNAVAILABLE with
	 * "... protocol error from the server: <reason>" in their message;
	 * zcrpc_conn_get_error() of the connection says the same.
	 */
	uint64_t protocol_errors;
	/**
	 * CANCELs that could not be built (no pool slot, no memory), so the
	 * server learnt of the cancellation only by the call's deadline. A
	 * CANCEL that finds no credit or ring room is not lost: it waits for
	 * room, and goes with the credit kept for control frames.
	 */
	uint64_t cancels_lost;
	/** Streams (zcrpc_stream_start) started, and of those finished (their
	 * on_finish ran) with OK, and with any other status (the server's,
	 * a cancel, the deadline, the connection). */
	uint64_t streams_started, streams_ok, streams_failed;
	uint64_t streams_open; /**< started and not yet finished */
	/** Stream messages written (accepted by zcrpc_stream_write) and
	 * received (handed to on_message), and their bytes. */
	uint64_t stream_msgs_sent, stream_msgs_recv;
	uint64_t stream_bytes_sent, stream_bytes_recv;
	/** Of the messages sent, those that went by RDMA WRITE into memory
	 * the server granted (above bulk_threshold); counted when the write
	 * completed. */
	uint64_t stream_bulk_msgs;
	/** Messages that carried two or more stream frames (MESSAGE, WINDOW)
	 * written in one progress turn (docs/protocol.md §8, Batches), and
	 * the frames they carried. */
	uint64_t stream_batches, stream_batched_frames;
	/** Of the messages received, those the server wrote by RDMA WRITE
	 * into memory this channel granted (above the server's
	 * bulk_threshold); counted when they landed. */
	uint64_t stream_bulk_msgs_recv;
	/** Target channels (zcrpc/balance.h): attempts after a call's first,
	 * made without a policy (the call never reached a server) and by a
	 * zcrpc_channel_set_retry() policy; and calls that found no backend
	 * to pick (they failed UNAVAILABLE or waited). */
	uint64_t retries_transparent, retries_policy, no_backend;
	/** Target channels, hedged methods (zcrpc_retry_policy.hedge_delay_ms):
	 * attempts sent beside a call's first, and attempts cancelled because
	 * another attempt of their call answered first. */
	uint64_t hedges, hedges_cancelled;
	/* New counters go here. */
} zcrpc_channel_stats;

/** Copies the channel's counters into @out, at most @out_size bytes (pass
 * sizeof(*out)); all zero for a NULL @ch. */
ZCRPC_API void zcrpc_channel_get_stats(const zcrpc_channel *ch,
				       zcrpc_channel_stats *out,
				       size_t out_size);

/* ---- server ------------------------------------------------------------- */

/** A request as the handler sees it, like gRPC's ServerContext: the
 * struct and what it points to (@data, @attachment, @md) belong to the
 * call and stay valid, unchanged, until the call is replied to (from the
 * handler, later, or from another thread: until the reply is made), so a
 * handler replying later may keep the pointer. The data lies in
 * registered memory the library owns. */
typedef struct zcrpc_request {
	size_t size; /**< bytes of this struct the library filled
			(ZCRPC_VIEW_HAS) */
	uint32_t method_id;
	const void *data;
	size_t len;
	const void *attachment;
	size_t attachment_len;
	const zcrpc_md *md;
	size_t n_md;
	int64_t timeout_us; /**< time left when it arrived; -1 = no deadline */
	/** The attachment as registered memory: pass it as the reply's
	 * attachment to send it back in place (it stays valid until then). */
	zcrpc_bulk attachment_mr;
	/* New fields go here. */
} zcrpc_request;

/**
 * A method handler. Reply with zcrpc_server_call_reply() — inside the handler or
 * later from the worker's thread, or with zcrpc_server_call_reply_any_thread()
 * from any thread. Every call must be replied to exactly once (also after
 * its client went away: the reply then reports UNAVAILABLE and frees it).
 */
typedef void (*zcrpc_handler)(zcrpc_server_call *call,
			      const zcrpc_request *req, void *arg);

/** Server settings. Initialise with zcrpc_server_opts_init(). */
typedef struct zcrpc_server_opts {
	size_t size;		 /**< sizeof(zcrpc_server_opts), set by init */
	uint32_t window;	 /**< receive window per connection; default 1040 */
	uint32_t max_concurrent; /**< handlers running at once; 0 = no limit. Requests beyond it wait
				      in arrival order; those whose deadline passed meanwhile are never run */
	size_t bulk_threshold;	 /**< reply payloads above this travel by RDMA WRITE; default 16384 */
	void (*on_connect)(zcrpc_server *s, zcrpc_conn *conn, void *arg);
	/** A connection ended: @why OK when it closed in order (the client
	 * closed or destroyed its channel, or this server closed it),
	 * UNAVAILABLE when the client died or was cut off, ...;
	 * zcrpc_conn_get_error(@conn) says why (docs/protocol.md §5). The
	 * handlers' calls on it are cancelled. */
	void (*on_disconnect)(zcrpc_server *s, zcrpc_conn *conn,
			      zcrpc_status why, void *arg);
	void *arg;
	/** Pre-shared key clients must prove (16..64 bytes, copied), or NULL
	 * for none; see zcrpc_listen_opts.psk. Connections that fail to
	 * prove it never reach on_connect or a handler. */
	const void *psk;
	size_t psk_len;
	uint32_t max_handshakes;  /**< see zcrpc_listen_opts; 0 = default (128) */
	int handshake_timeout_ms; /**< see zcrpc_listen_opts; 0 = default (10000) */
	/** Registered memory for bulk parts (requests' and replies') at most,
	 * in bytes; 0 = default (2 GiB). Free buffers of other sizes are
	 * given back to make room when it is reached. */
	size_t bulk_cache_max;
	/** Bulk memory one connection may hold for request parts granted
	 * (or being registered) and not yet written; a request beyond it is
	 * answered RESOURCE_EXHAUSTED. 0 = default (bulk_cache_max / 4). */
	size_t bulk_conn_max;
	/** Time a client has to write a granted request part (plus 1 s per
	 * MiB of the part, counted from the grant or from the landing of the
	 * connection's previous part), and to grant a reply part: then the
	 * grant is revoked and the call answered RESOURCE_EXHAUSTED (a
	 * client writing later loses its connection), or the reply is
	 * dropped. 0 = default (10000). */
	int bulk_write_timeout_ms;
	/** Memory that stays free this long is given back: bulk buffers
	 * unused for it, and regions of the worker's pool none of whose
	 * slots was taken for it (one idle region per size class is kept as
	 * slack). Checked every idle_release_ms / 2 from the server's timer.
	 * 0 = default (10000). */
	int idle_release_ms;
	/** Connections at once; beyond it a client is rejected with
	 * RESOURCE_EXHAUSTED, "connection limit of N reached" (see
	 * zcrpc_listen_opts.max_connections). 0 = unlimited (the default). */
	uint32_t max_connections;
	/** Connections at once from one source address, handshakes included;
	 * beyond it RESOURCE_EXHAUSTED, "per-source connection limit of N
	 * reached for ADDR" (see zcrpc_listen_opts.max_conns_per_source).
	 * Default 64; 0 = unlimited. */
	uint32_t max_conns_per_source;
	/** A connection that has made no call this long after it was
	 * accepted (on_connect) is closed: the client's connection closes
	 * with DEADLINE_EXCEEDED (its error: "the peer closed the connection
	 * reporting an error (DEADLINE_EXCEEDED)"), on_disconnect sees
	 * DEADLINE_EXCEEDED and zcrpc_server_stats.idle_closed counts it. A
	 * connection that made a call (a request frame arrived) is never
	 * closed for idling. Default 30000; 0 = off. */
	int idle_timeout_ms;
	/** Depth of each connection's send queue (messages posted and not
	 * yet completed), 2..32768; default 64; 0 = the window, as before.
	 * Replies beyond its room wait in the connection's queue and go out
	 * as room returns. */
	uint32_t send_depth;
	/**
	 * A server on several workers (docs/design.md, Servers on many
	 * workers): @nworkers workers (the @w of zcrpc_server_create() among
	 * them or not; it is always one, the home worker, which owns the
	 * listener). Connections are spread over them, each to the worker
	 * with the fewest connections when it arrives; a connection lives
	 * wholly on its worker, and its handlers, on_connect, on_disconnect
	 * and any reply made with zcrpc_server_call_reply() run on that
	 * worker's thread. The array is read at create and not kept.
	 * Threading: create, register and listen on the home worker's thread
	 * before the other workers' threads start progressing them; then one
	 * thread per worker, each in zcrpc_worker_progress() (or let
	 * zcrpc_server_serve() run them); zcrpc_server_shutdown() on the home
	 * worker's thread while the others keep progressing;
	 * zcrpc_server_destroy() once no other thread runs them. 0/NULL = the
	 * home worker alone, as before (up to 64 workers).
	 */
	zcrpc_worker *const *workers;
	size_t nworkers;
	/**
	 * With zcrpc_server_create(NULL, ...): the server makes @threads
	 * workers itself (sharing one device context, each with
	 * @worker_opts, NULL = defaults), owns and destroys them, and
	 * zcrpc_server_serve() runs one thread per worker (@workers is then
	 * ignored). 0 = 1. Ignored when a worker is given.
	 */
	size_t threads;
	const zcrpc_worker_opts *worker_opts;
	/* New fields go here (0 must mean the old behaviour: docs/abi.md). */
} zcrpc_server_opts;

/** Fills @o with the defaults documented above (and sets o->size). */
ZCRPC_API void zcrpc_server_opts_init_sized(zcrpc_server_opts *o, size_t size);
/* An inline, so the size is the caller's own sizeof: a library newer
 * than the caller's header never writes past its struct (docs/abi.md). */
static inline void zcrpc_server_opts_init(zcrpc_server_opts *o)
{
	zcrpc_server_opts_init_sized(o, sizeof(*o));
}

/** zcrpc_server_create - a server on worker @w (its home worker), and on
 * o->workers too when given; @w NULL: on o->threads workers the server
 * makes (the first is the home worker). @o may be NULL. Call on @w's
 * thread (any thread with @w NULL). On success *@out is the caller's
 * (zcrpc_server_destroy()). Errors: INVALID_ARGUMENT,
 * RESOURCE_EXHAUSTED, and those of zcrpc_worker_create() for @w NULL. */
ZCRPC_API zcrpc_status zcrpc_server_create(zcrpc_worker *w,
					   const zcrpc_server_opts *o,
					   zcrpc_server **out);

/** The server's workers: 1 for a server on one worker. Any thread. */
ZCRPC_API size_t zcrpc_server_get_nworkers(const zcrpc_server *s);
/** Its worker number @i (0 = the home worker, then o->workers in their
 * order, or the workers it made), NULL past the end; borrowed, valid
 * while @s lives (register memory with its context, say). Any thread. */
ZCRPC_API zcrpc_worker *zcrpc_server_get_worker(const zcrpc_server *s,
						size_t i);

/** What zcrpc_server_serve() does. Initialise with zcrpc_serve_opts_init(). */
typedef struct zcrpc_serve_opts {
	size_t size;  /**< sizeof(zcrpc_serve_opts), set by init */
	int grace_ms; /**< the drain's grace period on a signal; default 5000 */
	/** Signals that start the graceful shutdown (SIGINT, SIGTERM, ...;
	 * up to 16), or none. zcrpc_server_serve() blocks them in its thread
	 * (so in the threads it starts) and reads them with a signalfd; the
	 * application must block them in its other threads too (or direct
	 * them with pthread_kill() at the serving thread), or the process's
	 * default action may take them. Restored when it returns. */
	const int *signals;
	size_t nsignals;
	/* New fields go here (0 must mean the old behaviour: docs/abi.md). */
} zcrpc_serve_opts;

/** Fills @o with the defaults documented above (and sets o->size). */
ZCRPC_API void zcrpc_serve_opts_init_sized(zcrpc_serve_opts *o, size_t size);
/* An inline, so the size is the caller's own sizeof (docs/abi.md). */
static inline void zcrpc_serve_opts_init(zcrpc_serve_opts *o)
{
	zcrpc_serve_opts_init_sized(o, sizeof(*o));
}

/**
 * zcrpc_server_serve - run listening server @s until it is shut down: the
 * calling thread progresses the home worker and one thread started here
 * progresses each other worker of the server (no other thread may use
 * them meanwhile). It returns when one of @o->signals arrived (then it
 * drains as zcrpc_server_shutdown(s, o->grace_ms) on every worker) or
 * when zcrpc_server_shutdown() was called from another thread (its grace
 * period), with the drain's status: OK when every call was replied to
 * (replies from other threads included), DEADLINE_EXCEEDED when the grace
 * period cut calls short, or INTERNAL when a worker's progress failed.
 * The threads are joined before it returns; @s is then shut down (destroy
 * it). @o may be NULL (no signals). Errors: INVALID_ARGUMENT,
 * FAILED_PRECONDITION (not listening, or already serving),
 * RESOURCE_EXHAUSTED (no thread or signalfd).
 */
ZCRPC_API zcrpc_status zcrpc_server_serve(zcrpc_server *s,
					  const zcrpc_serve_opts *o);

/**
 * zcrpc_server_register - serve @full_name ("/package.Service/Method") with
 * @fn. Errors: INVALID_ARGUMENT, ALREADY_EXISTS (that name, or another name
 * with the same 32-bit id, is registered: rename one), RESOURCE_EXHAUSTED.
 */
ZCRPC_API zcrpc_status zcrpc_server_register(zcrpc_server *s,
					     const char *full_name,
					     zcrpc_handler fn, void *arg);

/** Starts listening (port "0" = ephemeral). Errors as zcrpc_listen(). */
ZCRPC_API zcrpc_status zcrpc_server_listen(zcrpc_server *s, const char *host,
					   const char *port);

/** The port of the last zcrpc_server_listen(). */
ZCRPC_API uint16_t zcrpc_server_get_port(const zcrpc_server *s);

/**
 * zcrpc_server_shutdown - graceful: stop listening, tell every client
 * (GOAWAY) so new calls go elsewhere, let calls in flight finish for up to
 * @grace_ms while driving the worker's progress, then close the
 * connections in order (calls still running fail UNAVAILABLE at the
 * clients: "closed by the server"). Replies made from other threads
 * (zcrpc_server_call_reply_any_thread) are waited for too: the progress it
 * drives runs them. Returns OK when every call was replied to (no handle is
 * left), DEADLINE_EXCEEDED when the grace period cut calls short: those
 * calls are then cancelled (zcrpc_server_call_cancelled() says so, from
 * any thread) and still need their reply (it frees them) before
 * zcrpc_server_destroy(). Open streams (zcrpc/stream.h) count as calls:
 * the application may finish them within the grace; those left end
 * UNAVAILABLE with their connections (DEADLINE_EXCEEDED is returned).
 * Not from inside a callback.
 * Threading: on the (home) worker's thread. A server on several workers
 * drains all of them: every worker's thread must keep progressing it
 * meanwhile (the call progresses the home worker). While
 * zcrpc_server_serve() runs @s: from any other thread (not a handler's),
 * it asks serve to drain with @grace_ms and waits for its result.
 */
ZCRPC_API zcrpc_status zcrpc_server_shutdown(zcrpc_server *s, int grace_ms);

/** Closes everything at once and frees the server; calls not replied to
 * are released (their handles become invalid). An application replying
 * from other threads must make sure no thread uses a handle of @s any
 * more: reply to every call first — zcrpc_server_shutdown() returning OK
 * means that was done; after DEADLINE_EXCEEDED, have the helpers reply
 * (their calls read as cancelled) and drive the worker's progress until
 * zcrpc_server_get_stats() shows @running 0 — or join those threads.
 * NULL is a no-op. */
ZCRPC_API void zcrpc_server_destroy(zcrpc_server *s);

/** Reply settings: zero them and set @size to sizeof(zcrpc_reply_opts). */
typedef struct zcrpc_reply_opts {
	size_t size;		       /**< sizeof(zcrpc_reply_opts) */
	const zcrpc_md *md;	       /**< reply metadata: trailing metadata (copied) */
	size_t n_md;
	const zcrpc_bulk *attachment; /**< sent in place; unchanged until on_done */
	void (*on_done)(void *ctx, zcrpc_status st); /**< the reply left (or could not); may be NULL */
	void *ctx;
	/** The server's initial metadata (copied), sent with the reply ahead
	 * of @md; together at most 16 pairs and 2 KiB. */
	const zcrpc_md *initial_md;
	size_t n_initial_md;
	/* New fields go here (0 must mean the old behaviour: docs/abi.md). */
} zcrpc_reply_opts;

/** Fills @o with defaults (no metadata, no attachment, no on_done). */
ZCRPC_API void zcrpc_reply_opts_init_sized(zcrpc_reply_opts *o, size_t size);
/* An inline, so the size is the caller's own sizeof (docs/abi.md). */
static inline void zcrpc_reply_opts_init(zcrpc_reply_opts *o)
{
	zcrpc_reply_opts_init_sized(o, sizeof(*o));
}

/**
 * zcrpc_server_call_reply - answer @call with @status, @message (errors; may be
 * NULL) and @len bytes of payload (copied into registered memory; above
 * the bulk threshold it travels by RDMA WRITE). Worker thread only. The
 * handle is released whatever the result. A @status that is not a gRPC
 * code is sent as UNKNOWN (as gRPC does; counted in @invalid_status). An
 * error's @message travels up to 512 bytes (docs/protocol.md §7); a
 * longer one is cut at the start of the UTF-8 character the limit falls
 * in. Returns OK, or UNAVAILABLE when the client is gone (nothing sent),
 * CANCELLED when the client cancelled, DEADLINE_EXCEEDED when the call's
 * deadline passed (nothing sent), INVALID_ARGUMENT for bad arguments
 * (NULL @data with a length, a short @o, bad metadata or attachment: the
 * client gets INTERNAL). A handle already replied to is refused with
 * INVALID_ARGUMENT.
 */
ZCRPC_API zcrpc_status zcrpc_server_call_reply(zcrpc_server_call *call,
					zcrpc_status status,
					const char *message, const void *data,
					size_t len, const zcrpc_reply_opts *o);

/**
 * zcrpc_server_call_reply_fill - answer @call with OK and a @len-byte payload that
 * @fill writes straight into registered memory (no copy: how protobuf-c
 * replies are packed). Otherwise as zcrpc_server_call_reply().
 */
ZCRPC_API zcrpc_status zcrpc_server_call_reply_fill(zcrpc_server_call *call,
					     size_t len, zcrpc_fill_fn fill,
					     void *fill_ctx,
					     const zcrpc_reply_opts *o);

/**
 * zcrpc_server_call_reply_any_thread - the same from any thread: the message and
 * payload are copied now and the reply is made on the worker's thread
 * (through its handoff queue). Returns OK once queued; the handle is then
 * released (do not use it again, not even for
 * zcrpc_server_call_cancelled()). On an error (INVALID_ARGUMENT,
 * RESOURCE_EXHAUSTED) nothing is queued and the handle is still the
 * caller's. No attachments.
 */
ZCRPC_API zcrpc_status zcrpc_server_call_reply_any_thread(zcrpc_server_call *call,
						   zcrpc_status status,
						   const char *message,
						   const void *data,
						   size_t len);

/**
 * zcrpc_server_call_reply_any_thread_opts - zcrpc_server_call_reply_any_thread()
 * with reply metadata: @o's initial and trailing metadata (initial_md,
 * md) are copied now, with the message and payload, and sent with the
 * reply (also with an error status). @o may be NULL. Its attachment and
 * on_done must be NULL (no attachments from another thread). Errors
 * (nothing queued, the handle still the caller's): INVALID_ARGUMENT (also
 * an attachment or on_done, a count without its list, more than 16 pairs
 * in a list), RESOURCE_EXHAUSTED. Metadata the reply itself then refuses
 * (over the limits together) answers the call INTERNAL, as
 * zcrpc_server_call_reply() does.
 */
ZCRPC_API zcrpc_status zcrpc_server_call_reply_any_thread_opts(
	zcrpc_server_call *call, zcrpc_status status, const char *message,
	const void *data, size_t len, const zcrpc_reply_opts *o);

/** Non-zero once the client cancelled @call (or went away, or a shutdown's
 * grace ran out). Any thread, until the call is replied to: a handler that
 * replies from a helper thread may poll it there. */
ZCRPC_API int zcrpc_server_call_cancelled(const zcrpc_server_call *call);

/** Server counters, read with zcrpc_server_get_stats(). */
typedef struct zcrpc_server_stats {
	uint64_t calls, replies, unimplemented, expired_not_run, cancelled;
	/** Connections closed because the client broke the protocol
	 * (malformed frames, ...): on_disconnect gets INTERNAL, and
	 * zcrpc_conn_get_error() "protocol error from the client: <reason>". */
	uint64_t protocol_errors;
	uint64_t copied_bytes;
	uint32_t connections, running, queued;
	uint64_t bulk_bad_writes; /**< request parts whose write with immediate
				   *   carried another byte count than the part
				   *   announced: failed INVALID_ARGUMENT, the
				   *   handler never ran (docs/protocol.md §4) */
	/** Connections that ended in an orderly close, by the client
	 * (zcrpc_channel_destroy, or a close) or by this server: on_disconnect
	 * sees OK, and the handlers' calls on them were cancelled. */
	uint64_t conns_closed;
	/** Connections that ended otherwise: the client died or was cut off
	 * (UNAVAILABLE), an error; on_disconnect gets the status and
	 * zcrpc_conn_get_error() the reason. A client built before the close
	 * message (docs/protocol.md §5) lands here even when it closed. */
	uint64_t conns_lost;
	/** Replies whose status was no gRPC code, sent as UNKNOWN. */
	uint64_t invalid_status;
	/** Frames (error replies, grants, GOAWAY) that found the worker's
	 * pool empty: each waited for a slot and went out then (a grant is
	 * dropped only when its call ended meanwhile). */
	uint64_t frames_deferred;
	uint64_t bulk_refused;	/**< request parts refused RESOURCE_EXHAUSTED: the
				 *   connection's budget or the cache's cap */
	uint64_t bulk_waits;	/**< bulk parts (request or reply) that waited
				 *   for a buffer registered off the worker's
				 *   thread */
	uint64_t bulk_timeouts; /**< grants ended by bulk_write_timeout_ms */
	uint64_t bulk_pinned;	/**< bytes of bulk memory registered now */
	uint64_t bulk_in_use;	/**< of which held by calls */
	uint64_t bulk_released; /**< bytes given back so far (to make room,
				 *   or idle) */
	/** Bytes of the worker's pool (send and receive slots) registered
	 * now; it falls as idle regions are given back (idle_release_ms). */
	uint64_t pool_pinned;
	/** Connections closed because they made no call within
	 * idle_timeout_ms (also counted in conns_lost). */
	uint64_t idle_closed;
	/** Streams opened by clients and handed to their handler (also in
	 * @calls; those refused at the open are in @calls and
	 * @unimplemented, or answered UNAVAILABLE / RESOURCE_EXHAUSTED), and
	 * of those not yet finished. */
	uint64_t streams_started, streams_open;
	/** Stream messages received (handed to on_message) and written
	 * (accepted by zcrpc_stream_write), and their bytes. */
	uint64_t stream_msgs_recv, stream_msgs_sent;
	uint64_t stream_bytes_recv, stream_bytes_sent;
	/** Of the messages received, those the client wrote by RDMA WRITE
	 * into memory this server granted. */
	uint64_t stream_bulk_msgs;
	/** Messages that carried two or more stream frames (MESSAGE, WINDOW)
	 * written in one progress turn (docs/protocol.md §8, Batches), and
	 * the frames they carried. */
	uint64_t stream_batches, stream_batched_frames;
	/** Streams finished (their on_finish ran) with OK, and with any
	 * other status (the handler's, a cancel from either side, the
	 * deadline, a rule the client broke, the connection). */
	uint64_t streams_ok, streams_failed;
	/** Of those failed, the streams this server ended for what the
	 * client sent (docs/protocol.md §8): a broken rule (a message past
	 * the window or after its half-close, a second half-close) or a
	 * message it would not or could not take (above the reader's limit,
	 * no memory or bulk budget for its grant, a write that broke the
	 * grant or never came). */
	uint64_t streams_refused;
	/** Of the messages written, those that went by RDMA WRITE into
	 * memory the client granted (above bulk_threshold); counted when
	 * the write completed. */
	uint64_t stream_bulk_msgs_sent;
	/* New counters go here. */
} zcrpc_server_stats;

/** Copies the server's counters into @out, at most @out_size bytes (pass
 * sizeof(*out)); all zero for a NULL @s. One worker: its thread, exact.
 * Several workers: any thread; the sum of each worker's counters as that
 * worker last published them (at each accept and close, every 50 ms, at
 * the end of a shutdown). */
ZCRPC_API void zcrpc_server_get_stats(const zcrpc_server *s,
				      zcrpc_server_stats *out, size_t out_size);

/** The counters of worker number @i of @s alone (see
 * zcrpc_server_get_worker; with one worker, as zcrpc_server_get_stats).
 * Same threading as zcrpc_server_get_stats. INVALID_ARGUMENT for a NULL
 * @s or @out, or @i past the end. */
ZCRPC_API zcrpc_status zcrpc_server_get_worker_stats(const zcrpc_server *s,
						     size_t i,
						     zcrpc_server_stats *out,
						     size_t out_size);

#ifdef __cplusplus
}
#endif

#endif /* ZCRPC_RPC_H */
