/* zcrpc — the RPC layer: channels (client), servers, calls.
 *
 * Threading: channels and servers belong to one worker and follow its rule:
 * use them from the worker's thread only, except the functions marked
 * "any thread". Callbacks (call completions, handlers) run only inside
 * zcrpc_worker_progress() — never inside the call that submitted the work.
 * A synchronous call drives the worker's progress until its reply, so
 * other callbacks of that worker may run inside it; a synchronous call
 * made from inside a callback of the same worker returns
 * FAILED_PRECONDITION.
 *
 * Every call completes exactly once: OK, the server's error status with
 * its message, DEADLINE_EXCEEDED, CANCELLED, UNAVAILABLE (connection lost,
 * refused, server going away), RESOURCE_EXHAUSTED (local queue full),
 * UNAUTHENTICATED (the server refused the channel's pre-shared key, or
 * the key is missing on one side).
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

/** Names a call for zcrpc_call_cancel(); 0 names none. */
typedef uint64_t zcrpc_call_id;

/** One metadata pair. Keys 1..255 bytes, values < 64 KiB, at most 16
 * pairs and 2 KiB per message. In callbacks the pointers are valid only
 * during the callback. */
typedef struct zcrpc_md {
	const char *key;
	size_t key_len;
	const void *value;
	size_t value_len;
} zcrpc_md;

/** A piece of memory registered with zcrpc_mr_register(). */
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
	size_t size;		    /**< sizeof(zcrpc_channel_opts) */
	int connect_timeout_ms;	    /**< per connection attempt; default 10000 */
	int64_t default_timeout_us; /**< call deadline when a call gives none; default 0 = none */
	uint32_t window;	    /**< receive window each way (calls in flight); default 1040 */
	uint32_t max_pending;	    /**< calls waiting for a connection or credits; default 4096 */
	uint32_t max_calls;	    /**< calls alive at once; default 65536 */
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
} zcrpc_channel_opts;

/** Fills @o with the defaults documented above. */
ZCRPC_API void zcrpc_channel_opts_init(zcrpc_channel_opts *o);

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
 * (their callbacks run inside this call), close the connection, free the
 * channel. Must not be called from inside one of its own callbacks. NULL
 * is a no-op.
 */
ZCRPC_API void zcrpc_channel_destroy(zcrpc_channel *ch);

/** Per-call settings. Initialise with zcrpc_call_opts_init(). */
typedef struct zcrpc_call_opts {
	size_t size;		    /**< sizeof(zcrpc_call_opts) */
	int64_t timeout_us;	    /**< deadline from now; 0 = the channel's default */
	const zcrpc_md *md;	    /**< request metadata (copied at submission) */
	size_t n_md;
	const zcrpc_bulk *attachment; /**< sent in place by RDMA WRITE; keep it unchanged until the call completes */
	const zcrpc_bulk *reply_into; /**< registered memory (ZCRPC_MR_REMOTE_WRITE) the reply's attachment lands in; the server may write it only through a window revoked before the callback runs */
	size_t max_reply;	    /**< largest reply payload + attachment accepted; 0 = no limit */
} zcrpc_call_opts;

/** Fills @o with defaults (no deadline beyond the channel's, no metadata,
 * no attachments, no reply limit). */
ZCRPC_API void zcrpc_call_opts_init(zcrpc_call_opts *o);

/** What a call returned. Valid only during the completion callback; the
 * data lies in registered memory the library (or @reply_into) owns. */
typedef struct zcrpc_reply {
	zcrpc_status status;
	const char *message;	 /**< the server's (or the library's) message; "" on OK */
	const void *data;	 /**< reply payload */
	size_t len;
	const void *attachment;	 /**< reply attachment, if any */
	size_t attachment_len;
	const zcrpc_md *md;	 /**< reply metadata */
	size_t n_md;
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

/** A synchronous call's result; release with zcrpc_result_free(). */
typedef struct zcrpc_result {
	zcrpc_status status;
	char *message; /**< "" on OK */
	void *data;    /**< reply payload (heap copy) */
	size_t len;
	void *attachment; /**< reply attachment (heap copy unless reply_into was given) */
	size_t attachment_len;
} zcrpc_result;

/**
 * zcrpc_call - call and wait: drives the worker's progress until the call
 * completes, then copies the reply into *@out (heap memory the caller
 * frees with zcrpc_result_free()). Returns the call's status (also in
 * out->status). FAILED_PRECONDITION when called from inside a callback of
 * the channel's worker (it would deadlock the worker).
 */
ZCRPC_API zcrpc_status zcrpc_call(zcrpc_channel *ch, uint32_t method,
				  const void *req, size_t len,
				  const zcrpc_call_opts *o, zcrpc_result *out);

/** Frees what zcrpc_call() put in @r and clears it. NULL is a no-op. */
ZCRPC_API void zcrpc_result_free(zcrpc_result *r);

/** Channel counters. */
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
	 * Connections closed because the server broke the protocol (a
	 * malformed frame, a grant smaller than the bulk part, an unexpected
	 * frame or write). The calls on it fail UNAVAILABLE with
	 * "... protocol error from the server: <reason>" in their message;
	 * zcrpc_conn_error() of the connection says the same.
	 */
	uint64_t protocol_errors;
} zcrpc_channel_stats;

ZCRPC_API void zcrpc_channel_get_stats(const zcrpc_channel *ch,
				       zcrpc_channel_stats *out);

/* ---- server ------------------------------------------------------------- */

/** A request as the handler sees it. The struct itself is valid only
 * during the handler call (copy it to reply later); what it points to
 * (@data, @attachment, @md) stays valid until the call is replied to and
 * lies in registered memory the library owns. */
typedef struct zcrpc_request {
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
} zcrpc_request;

/**
 * A method handler. Reply with zcrpc_call_reply() — inside the handler or
 * later from the worker's thread, or with zcrpc_call_reply_any_thread()
 * from any thread. Every call must be replied to exactly once (also after
 * its client went away: the reply then reports UNAVAILABLE and frees it).
 */
typedef void (*zcrpc_handler)(zcrpc_server_call *call,
			      const zcrpc_request *req, void *arg);

/** Server settings. Initialise with zcrpc_server_opts_init(). */
typedef struct zcrpc_server_opts {
	size_t size;		 /**< sizeof(zcrpc_server_opts) */
	uint32_t window;	 /**< receive window per connection; default 1040 */
	uint32_t max_concurrent; /**< handlers running at once; 0 = no limit. Requests beyond it wait
				      in arrival order; those whose deadline passed meanwhile are never run */
	size_t bulk_threshold;	 /**< reply payloads above this travel by RDMA WRITE; default 16384 */
	void (*on_connect)(zcrpc_server *s, zcrpc_conn *conn, void *arg);
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
} zcrpc_server_opts;

ZCRPC_API void zcrpc_server_opts_init(zcrpc_server_opts *o);

/** zcrpc_server_create - a server on worker @w. @o may be NULL. On success
 * *@out is the caller's (zcrpc_server_destroy()). */
ZCRPC_API zcrpc_status zcrpc_server_create(zcrpc_worker *w,
					   const zcrpc_server_opts *o,
					   zcrpc_server **out);

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
ZCRPC_API uint16_t zcrpc_server_port(const zcrpc_server *s);

/**
 * zcrpc_server_shutdown - graceful: stop listening, tell every client
 * (GOAWAY) so new calls go elsewhere, let calls in flight finish for up to
 * @grace_ms while driving the worker's progress, then close the
 * connections (calls still running are answered UNAVAILABLE to the
 * clients). Returns OK when everything drained, DEADLINE_EXCEEDED when the
 * grace period cut calls short. Not from inside a callback.
 */
ZCRPC_API zcrpc_status zcrpc_server_shutdown(zcrpc_server *s, int grace_ms);

/** Closes everything at once and frees the server; calls not replied to
 * are released (their handles become invalid). NULL is a no-op. */
ZCRPC_API void zcrpc_server_destroy(zcrpc_server *s);

/** Reply settings. */
typedef struct zcrpc_reply_opts {
	size_t size;		       /**< sizeof(zcrpc_reply_opts) */
	const zcrpc_md *md;	       /**< reply metadata (copied) */
	size_t n_md;
	const zcrpc_bulk *attachment; /**< sent in place; unchanged until on_done */
	void (*on_done)(void *ctx, zcrpc_status st); /**< the reply left (or could not); may be NULL */
	void *ctx;
} zcrpc_reply_opts;

/**
 * zcrpc_call_reply - answer @call with @status, @message (errors; may be
 * NULL) and @len bytes of payload (copied into registered memory; above
 * the bulk threshold it travels by RDMA WRITE). Worker thread only. The
 * handle is released whatever the result. Returns OK, or UNAVAILABLE when
 * the client is gone (nothing sent), CANCELLED when the client cancelled,
 * DEADLINE_EXCEEDED when the call's deadline passed (nothing sent).
 */
ZCRPC_API zcrpc_status zcrpc_call_reply(zcrpc_server_call *call,
					zcrpc_status status,
					const char *message, const void *data,
					size_t len, const zcrpc_reply_opts *o);

/**
 * zcrpc_call_reply_fill - answer @call with OK and a @len-byte payload that
 * @fill writes straight into registered memory (no copy: how protobuf-c
 * replies are packed). Otherwise as zcrpc_call_reply().
 */
ZCRPC_API zcrpc_status zcrpc_call_reply_fill(zcrpc_server_call *call,
					     size_t len, zcrpc_fill_fn fill,
					     void *fill_ctx,
					     const zcrpc_reply_opts *o);

/**
 * zcrpc_call_reply_any_thread - the same from any thread: the message and
 * payload are copied now and the reply is made on the worker's thread
 * (through its handoff queue). Returns OK once queued. No attachments.
 */
ZCRPC_API zcrpc_status zcrpc_call_reply_any_thread(zcrpc_server_call *call,
						   zcrpc_status status,
						   const char *message,
						   const void *data,
						   size_t len);

/** Non-zero once the client cancelled @call (or went away). */
ZCRPC_API int zcrpc_server_call_cancelled(const zcrpc_server_call *call);

/** Server counters. */
typedef struct zcrpc_server_stats {
	uint64_t calls, replies, unimplemented, expired_not_run, cancelled;
	/** Connections closed because the client broke the protocol
	 * (malformed frames, ...): on_disconnect gets INTERNAL, and
	 * zcrpc_conn_error() "protocol error from the client: <reason>". */
	uint64_t protocol_errors;
	uint64_t copied_bytes;
	uint32_t connections, running, queued;
} zcrpc_server_stats;

ZCRPC_API void zcrpc_server_get_stats(const zcrpc_server *s,
				      zcrpc_server_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* ZCRPC_RPC_H */
