/* zcrpc — the transport layer: workers, connections, listeners.
 *
 * Threading: a zcrpc_worker is driven by exactly one thread at a time
 * (run-to-completion, like an eRPC Rpc or a UCX worker). Every function taking
 * a worker, or a connection/listener that belongs to it, must be called from
 * that thread. Use one worker per thread. Callbacks run only from inside
 * zcrpc_worker_progress(), never inside the call that submitted the work.
 * The one exception is zcrpc_worker_post(), which any thread may call to
 * hand a function to the worker's thread.
 *
 * Connections follow rdma_create_ep(3): the active side resolves with
 * rdma_getaddrinfo + rdma_create_ep (on a short-lived setup thread, so the
 * worker never blocks), the passive side listens on an rdma_create_ep id whose
 * channel is polled non-blocking. No call blocks on the network without a
 * deadline.
 *
 * Ownership: every zcrpc_conn handle the application receives (from
 * zcrpc_connect() or a listener's on_accept) belongs to the application,
 * which must release it with zcrpc_conn_destroy(), also after it closed.
 * zcrpc_worker_destroy() releases whatever the application did not.
 *
 * ABI (docs/abi.md): a struct with a `size` first member is passed in; set
 * it with the struct's _init() (or to its sizeof), so a library newer than
 * the header keeps the defaults of fields added since. Counters are read
 * through a size argument: pass sizeof(*out); the library writes no more.
 * New fields are only ever appended, where a struct says "new fields go
 * here".
 */
#ifndef ZCRPC_TRANSPORT_H
#define ZCRPC_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "zcrpc/export.h"
#include "zcrpc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zcrpc_context zcrpc_context;
typedef struct zcrpc_worker zcrpc_worker;
typedef struct zcrpc_conn zcrpc_conn;
typedef struct zcrpc_listener zcrpc_listener;
typedef struct zcrpc_mr zcrpc_mr;

/**
 * zcrpc_context_create - open every RDMA device librdmacm knows, with one
 * protection domain each. A context may be shared by several workers (pass
 * it in zcrpc_worker_opts.context), so memory registered once with
 * zcrpc_mr_register() is usable by all of them. Safe to use from several
 * threads once created.
 *
 * On success *@out holds one reference, owned by the caller and released
 * with zcrpc_context_destroy(); workers and registrations hold their own, so
 * the context lives until the last of them is gone.
 * Errors: INVALID_ARGUMENT (NULL @out), UNAVAILABLE (no RDMA device or no
 * rdma_ucm; zcrpc_last_error() says which, and how to add Soft-RoCE),
 * RESOURCE_EXHAUSTED.
 */
ZCRPC_API zcrpc_status zcrpc_context_create(zcrpc_context **out);

/**
 * zcrpc_last_error - why the calling thread's last zcrpc_context_create() or
 * zcrpc_worker_create() failed, where the status alone does not say it: e.g.
 * "no RDMA device found ...; ... rdma link add rxe0 type rxe netdev eth0
 * ...". "" after one that succeeded. Any thread; the string belongs to the
 * calling thread and stays valid until its next create call.
 */
ZCRPC_API const char *zcrpc_last_error(void);

/** Drops the caller's reference to @ctx. NULL is a no-op. */
ZCRPC_API void zcrpc_context_destroy(zcrpc_context *ctx);

/** Worker settings. Initialise with zcrpc_worker_opts_init(). */
typedef struct zcrpc_worker_opts {
	size_t size;		 /**< sizeof(zcrpc_worker_opts), set by init */
	uint32_t
		recv_depth; /**< a connection's receive window: the most credits
			     * its peer may hold (receives come from the shared
			     * queue, recv_budget); default 64, 2..32768 */
	uint32_t send_depth;	 /**< send slots per connection; default 64, >= 1 */
	uint32_t max_msg;	 /**< largest message payload in bytes; default 4096, 1..8 MiB */
	uint8_t ack_timeout_exp; /**< RDMA_OPTION_ID_ACK_TIMEOUT as an exponent n: 4.096 us * 2^n; default 16 (268 ms) */
	uint8_t retry_count;	 /**< transport retries, 0..6 (7 would mean forever on rxe); default 6 */
	uint8_t rnr_retry_count; /**< receiver-not-ready retries, 0..7; default 0 (credits prevent RNR) */
	uint32_t pool_max_slots; /**< limit of the worker's pool, per size class; default 65536 */
	zcrpc_context *context;	 /**< shared device context, or NULL for a private one */
	/**
	 * Idle time (ms) after which an ESTABLISHED connection gets a
	 * keepalive probe (a 0-byte RDMA WRITE, docs/protocol.md §6); a
	 * peer that no longer answers fails the connection with UNAVAILABLE
	 * after about (retry_count + 1) ACK timeouts. Default 1000; 0
	 * disables. While a connection is established the worker wakes from
	 * a sleeping progress every keepalive_ms / 2 to check.
	 */
	uint32_t keepalive_ms;
	/**
	 * Receives per device the worker's shared receive queue may hold,
	 * shared by all its connections on that device (docs/design.md
	 * "Shared receive path"): posted as connections need them, given
	 * back when the last connection closes; each costs one pool slot of
	 * 8 + max_msg bytes (rounded to 64). Clamped to the device's
	 * max_srq_wr. A connection is refused (RESOURCE_EXHAUSTED) when the
	 * budget cannot promise its guaranteed credits (recv_share). 0 = the
	 * default, 32768. (64 bits wide so it lies past the struct's old
	 * end, not in its padding: docs/abi.md.)
	 */
	uint64_t recv_budget;
	/**
	 * Credits guaranteed to each connection (at most its recv_depth); a
	 * busy one gets more, up to recv_depth, while the budget has them.
	 * 0 = the default, 16.
	 */
	uint32_t recv_share;
	/* New fields go here (0 must mean the old behaviour: docs/abi.md). */
} zcrpc_worker_opts;

/** Fills @opts with the defaults documented above (and sets opts->size). */
ZCRPC_API void zcrpc_worker_opts_init_sized(zcrpc_worker_opts *opts,
					    size_t size);
/* An inline, so the size is the caller's own sizeof: a library newer
 * than the caller's header never writes past its struct (docs/abi.md). */
static inline void zcrpc_worker_opts_init(zcrpc_worker_opts *opts)
{
	zcrpc_worker_opts_init_sized(opts, sizeof(*opts));
}

/**
 * zcrpc_worker_create - make a worker: CM event channel, epoll fd, timerfd,
 * eventfd, a completion channel per device, and a registered memory pool
 * (two size classes: 256-byte slots and slots of 8 + max_msg bytes, grown in
 * regions up to pool_max_slots each). The worker uses opts->context (taking
 * a reference) or makes a private context.
 *
 * @opts may be NULL for defaults; it is copied. On success *@out is set and
 * owned by the caller (release with zcrpc_worker_destroy()).
 * Errors: INVALID_ARGUMENT (bad option), RESOURCE_EXHAUSTED (out of memory or
 * file descriptors), UNAVAILABLE (no RDMA device, or rdma_ucm not loaded;
 * zcrpc_last_error() says which, and how to add Soft-RoCE).
 */
ZCRPC_API zcrpc_status zcrpc_worker_create(const zcrpc_worker_opts *opts,
					   zcrpc_worker **out);

/**
 * zcrpc_worker_destroy - close every connection and listener of the worker
 * (without waiting for the peers), join its setup threads and free it. All
 * handles that belonged to it become invalid. No callback runs, and
 * functions still queued by zcrpc_worker_post() are freed without running.
 * NULL is a no-op. Must not be called from inside a callback.
 */
ZCRPC_API void zcrpc_worker_destroy(zcrpc_worker *w);

/**
 * zcrpc_worker_progress - run the worker: CM events, accepts, completions,
 * timers, and the callbacks they cause. Each call makes bounded progress on
 * every source, so steady traffic starves none: the functions posted before
 * it, at most 64 completions per connection, and the epoll set (CM events,
 * connect requests, setup-thread results, device events) when it found
 * nothing else or 100 us passed since it last read it.
 *
 * @timeout_ms: 0 polls once without sleeping (busy-poll mode); > 0 sleeps up
 * to that long on the worker's fd when there is nothing to do; < 0 sleeps
 * until something happens. Returns OK, or INTERNAL if the event loop itself
 * failed (zcrpc_worker_get_error() says why), or FAILED_PRECONDITION when called
 * from inside a callback.
 */
ZCRPC_API zcrpc_status zcrpc_worker_progress(zcrpc_worker *w, int timeout_ms);

/**
 * zcrpc_worker_get_error - the worker's error string: the last thing that went
 * wrong inside it that no status carries in full (why progress returned
 * INTERNAL, a completion channel that could not be made, an event on a
 * listener); "" when nothing did, or for NULL. Owned by the worker: valid
 * until it is destroyed, overwritten by the next such error. Worker thread.
 */
ZCRPC_API const char *zcrpc_worker_get_error(const zcrpc_worker *w);

/** The worker's device context (a borrowed pointer, valid while the worker
 * lives): register memory with it for zcrpc_conn_write(). */
ZCRPC_API zcrpc_context *zcrpc_worker_get_context(const zcrpc_worker *w);

/**
 * zcrpc_worker_get_fd - the worker's epoll file descriptor, for the application's
 * own poll/epoll loop: when it is readable, call zcrpc_worker_progress(w, 0).
 * Owned by the worker; do not close it. Completions only wake the fd after a
 * zcrpc_worker_progress() call with a non-zero timeout or zcrpc_worker_arm().
 */
ZCRPC_API int zcrpc_worker_get_fd(const zcrpc_worker *w);

/**
 * zcrpc_worker_arm - prepare to sleep on zcrpc_worker_get_fd(): request
 * completion notifications on every connection. Returns OK when it is safe to
 * sleep, or RESOURCE_EXHAUSTED ("busy") when work is already pending and
 * zcrpc_worker_progress() should be called first.
 */
ZCRPC_API zcrpc_status zcrpc_worker_arm(zcrpc_worker *w);

/**
 * zcrpc_worker_post - run @fn(@w, @arg) on the worker's thread, from inside
 * a later zcrpc_worker_progress() (never inside this call, even when called
 * on the worker's thread). Unlike every other function taking a worker,
 * this one may be called from ANY thread, concurrently. Posted functions
 * run in the order they were posted (FIFO over all threads), each exactly
 * once, like any other callback: they may use the worker and its
 * connections, and post again (that post runs in a later progress call).
 * A worker sleeping in zcrpc_worker_progress() or on zcrpc_worker_get_fd() is
 * woken.
 *
 * Ownership: @arg stays the caller's; the library only hands it to @fn.
 * Functions still queued when zcrpc_worker_destroy() runs are dropped, not
 * run: a caller that must know whether @fn ran must not destroy the worker
 * with posts in flight (nor post to a worker being destroyed).
 * Errors: INVALID_ARGUMENT (NULL @w or @fn), RESOURCE_EXHAUSTED (out of
 * memory; nothing was queued).
 */
ZCRPC_API zcrpc_status zcrpc_worker_post(zcrpc_worker *w,
					 void (*fn)(zcrpc_worker *worker,
						    void *fn_arg),
					 void *arg);

/** Connection states, in the order a connection goes through them. */
typedef enum zcrpc_conn_state {
	ZCRPC_CONN_CONNECTING = 0, /**< resolving, connecting or accepting */
	ZCRPC_CONN_ESTABLISHED = 1, /**< messages flow */
	ZCRPC_CONN_CLOSED = 2,	    /**< closed or failed; see zcrpc_conn_get_status() */
} zcrpc_conn_state;

/**
 * Callbacks of a connection. All run on the worker's thread from inside
 * zcrpc_worker_progress(). Each may call zcrpc_conn_send(),
 * zcrpc_conn_close() and zcrpc_conn_destroy() on the connection.
 * Initialise with zcrpc_conn_handlers_init() (or set @size to its sizeof);
 * the struct is copied wherever it is passed.
 */
typedef struct zcrpc_conn_handlers {
	size_t size; /**< sizeof(zcrpc_conn_handlers), set by init */
	/**
	 * State change: ESTABLISHED (status OK) for connections made with
	 * zcrpc_connect(), and CLOSED for every connection, exactly once, with
	 * OK after an orderly close (this side's, or the peer's when its CLOSE
	 * message arrived: docs/protocol.md §5) and otherwise why it failed:
	 * UNAVAILABLE (refused, unreachable, peer died or lost without a
	 * close, or closed by a peer that sends no CLOSE), DEADLINE_EXCEEDED
	 * (connect deadline), INTERNAL (peer broke the protocol),
	 * UNAUTHENTICATED (key proof refused, or a key on one side only), ...
	 */
	void (*on_state)(zcrpc_conn *conn, zcrpc_conn_state state,
			 zcrpc_status status, void *arg);
	/**
	 * A message arrived. @data (@len bytes, registered memory owned by
	 * the library) is valid only until the callback returns.
	 */
	void (*on_recv)(zcrpc_conn *conn, const void *data, size_t len,
			void *arg);
	void *arg; /**< passed to every callback */
	/**
	 * A zcrpc_conn_write() finished: OK once the data is in the peer's
	 * memory, or why it failed. Runs exactly once per accepted write,
	 * before the connection's CLOSED callback. May be NULL.
	 */
	void (*on_write_done)(zcrpc_conn *conn, void *user_ctx,
			      zcrpc_status status, void *arg);
	/**
	 * The peer's RDMA WRITE with immediate of @len bytes into memory this
	 * side granted has landed; @imm is the peer's 32-bit value. @len is
	 * that one work request's byte count: for a transfer split into
	 * pieces (zcrpc_conn_write_piece()) only the last piece's. May be
	 * NULL (the write still costs the peer one credit).
	 */
	void (*on_write_imm)(zcrpc_conn *conn, uint32_t imm, size_t len,
			     void *arg);
	/**
	 * A send refused with RESOURCE_EXHAUSTED (no credit, no ring room)
	 * would now succeed: credits or ring room came back. Runs once per
	 * refusal episode. May be NULL.
	 */
	void (*on_writable)(zcrpc_conn *conn, void *arg);
	/**
	 * A zcrpc_grant_revoke() finished: OK once no peer write can reach
	 * the window any more, UNAVAILABLE when the connection failed or
	 * closed first. Runs exactly once per accepted revoke, before the
	 * connection's CLOSED callback. May be NULL.
	 */
	void (*on_revoked)(zcrpc_conn *conn, void *user_ctx,
			   zcrpc_status status, void *arg);
	/* New callbacks go here (NULL must mean none: docs/abi.md). */
} zcrpc_conn_handlers;

/** Clears @h (every callback NULL, @arg NULL) and sets h->size. */
ZCRPC_API void zcrpc_conn_handlers_init_sized(zcrpc_conn_handlers *h,
					      size_t size);
/* An inline, so the size is the caller's own sizeof: a library newer
 * than the caller's header never writes past its struct (docs/abi.md). */
static inline void zcrpc_conn_handlers_init(zcrpc_conn_handlers *h)
{
	zcrpc_conn_handlers_init_sized(h, sizeof(*h));
}

/** Active-side connect settings. Initialise with zcrpc_connect_opts_init(). */
typedef struct zcrpc_connect_opts {
	size_t size;	  /**< sizeof(zcrpc_connect_opts), set by init */
	int timeout_ms;	  /**< connect deadline; default 10000; must be > 0 */
	const char *src_addr; /**< local address to bind, or NULL */
	uint32_t recv_depth;  /**< receive window for this connection; 0 = the worker's */
	uint32_t send_depth;  /**< send queue depth for this connection; 0 = the worker's */
	/**
	 * Admission (docs/protocol.md §1, §2): the pre-shared key of a server
	 * listening with one, @psk_len bytes (16..64), or NULL for none. The
	 * connection then proves the key in its first message and reports
	 * ESTABLISHED only once the server accepted the proof; a refused
	 * proof, or a server without a key, closes it with UNAUTHENTICATED.
	 * Copied by zcrpc_connect(); the caller keeps its own buffer.
	 */
	const void *psk;
	size_t psk_len;
	/** Who this client says it is, covered by the proof (copied; up to
	 * 64 bytes; NULL = empty). Only sent when @psk is set. */
	const char *identity;
	/**
	 * The IP type-of-service byte (DSCP << 2 | ECN, 1..255) of this
	 * connection's traffic: RoCE v2 and iWARP put it in the IP header
	 * (the traffic class), and the kernel maps it to the priority (on
	 * RoCE the service level / PFC class). Set with RDMA_OPTION_ID_TOS
	 * before the route is resolved; the server's side of the connection
	 * follows the client's request. 0 (the default) leaves the kernel's
	 * default (`default_roce_tos`, normally 0). Above 255:
	 * INVALID_ARGUMENT. zcrpc_conn_get_info() reads back what the queue
	 * pair carries. InfiniBand takes its service level from the subnet
	 * manager's path record; zcrpc sets none itself (docs/devices.md).
	 */
	uint32_t tos;
	/**
	 * Pinning the path: the RDMA device (its name, e.g. "mlx5_1"; copied)
	 * or NULL for the one the route picks; its @port (0 = 1); and the GID
	 * table entry whose address becomes the connection's source
	 * (@gid_index, an IPv4-mapped or global IPv6 GID of RoCE; 0 = the
	 * port's first GID with an IP address — entry 0 itself is always the
	 * link-local default GID there). rdma_cm then uses that address's GID
	 * of its default RoCE type, which zcrpc_conn_get_info() reports. The
	 * route is checked after resolution: one over another device or port
	 * fails the connection FAILED_PRECONDITION naming both. An unknown
	 * device, a port it lacks, a GID without an address, or @src_addr
	 * given too: INVALID_ARGUMENT (zcrpc_last_error() says which).
	 * InfiniBand connects through IPoIB: give @src_addr instead.
	 */
	const char *device;
	uint32_t port;
	uint32_t gid_index;
	/* New fields go here (0 must mean the old behaviour: docs/abi.md). */
} zcrpc_connect_opts;

/** Limits of zcrpc_connect_opts.psk / zcrpc_listen_opts.psk (bytes). */
#define ZCRPC_PSK_MIN 16
#define ZCRPC_PSK_MAX 64
/** Longest zcrpc_connect_opts.identity (bytes). */
#define ZCRPC_IDENTITY_MAX 64

/** Fills @opts with the defaults documented above. */
ZCRPC_API void zcrpc_connect_opts_init_sized(zcrpc_connect_opts *opts,
					     size_t size);
/* An inline, so the size is the caller's own sizeof: a library newer
 * than the caller's header never writes past its struct (docs/abi.md). */
static inline void zcrpc_connect_opts_init(zcrpc_connect_opts *opts)
{
	zcrpc_connect_opts_init_sized(opts, sizeof(*opts));
}

/**
 * zcrpc_connect - start connecting to @host:@port (numeric address or name;
 * port as a decimal string). Returns at once: the result is reported through
 * handlers->on_state (ESTABLISHED, or CLOSED with the error) from a later
 * zcrpc_worker_progress(). Address and route resolution run on a setup
 * thread; the deadline covers resolution and connection.
 *
 * @opts may be NULL; both structs are copied. On success *@out is the new
 * connection, owned by the caller (zcrpc_conn_destroy()).
 * Errors: INVALID_ARGUMENT (NULL host/port/handlers, bad option, a psk
 * outside 16..64 bytes or an identity above 64), RESOURCE_EXHAUSTED (out
 * of memory or threads).
 */
ZCRPC_API zcrpc_status zcrpc_connect(zcrpc_worker *w, const char *host,
				     const char *port,
				     const zcrpc_connect_opts *opts,
				     const zcrpc_conn_handlers *handlers,
				     zcrpc_conn **out);

/** Listener settings. Initialise with zcrpc_listen_opts_init(). */
typedef struct zcrpc_listen_opts {
	size_t size; /**< sizeof(zcrpc_listen_opts), set by init */
	int backlog; /**< rdma_listen backlog; default 128 */
	/**
	 * A connection was accepted and is ESTABLISHED (and, with a psk,
	 * proved the key; never before). The application now
	 * owns @conn (zcrpc_conn_destroy()); its callbacks are
	 * @conn_handlers until changed with zcrpc_conn_set_handlers().
	 */
	void (*on_accept)(zcrpc_listener *l, zcrpc_conn *conn, void *arg);
	void *arg; /**< passed to on_accept */
	/**
	 * Callbacks given to each accepted connection; copied by
	 * zcrpc_listen() (the caller's struct may go away after it), NULL for
	 * none. A pointer, so the handlers can grow without moving the
	 * fields after it.
	 */
	const zcrpc_conn_handlers *conn_handlers;
	uint32_t recv_depth; /**< receive window of accepted connections; 0 = the worker's */
	uint32_t send_depth; /**< send queue depth of accepted connections; 0 = the worker's */
	/**
	 * Admission: a pre-shared key (@psk_len bytes, 16..64; copied by
	 * zcrpc_listen()), or NULL to admit every well-formed request. With a
	 * key, a request from a client without one is rejected
	 * (UNAUTHENTICATED); an accepted connection posts only 2 receives and
	 * is handed to on_accept only after its first message proved the key
	 * (HMAC-SHA-256 over a fresh nonce, docs/protocol.md §1); anything
	 * else closes it, and counts in zcrpc_worker_stats.rejected_auth.
	 * The worker's max_msg must be at least 100 bytes.
	 */
	const void *psk;
	size_t psk_len;
	/** Connections in their handshake at once (accepted, not yet
	 * ESTABLISHED or not yet authenticated); requests beyond it are
	 * rejected with RESOURCE_EXHAUSTED. Default 128; 0 = the default. */
	uint32_t max_handshakes;
	/** Deadline from the connect request until the connection is handed
	 * to on_accept (ESTABLISHED and, with a key, authenticated); then it
	 * is closed and everything it held is released. Default 10000;
	 * 0 = the default. */
	int handshake_timeout_ms;
	/** Connections this listener holds at once, counted from the connect
	 * request until the connection is torn down (after it closed, or was
	 * destroyed), handshakes included; a request beyond it is rejected
	 * with RESOURCE_EXHAUSTED and the reason "connection limit of N
	 * reached", which the client reports, and counted in
	 * zcrpc_worker_stats.rejected_conn_limit. 0 = unlimited (the
	 * default). */
	uint32_t max_connections;
	/** The same count per source address (IPv4 or IPv6 of the connecting
	 * peer): a request beyond it is rejected with RESOURCE_EXHAUSTED,
	 * "per-source connection limit of N reached for ADDR"
	 * (rejected_source_limit), so one client cannot take every connection
	 * of the server. Default 64; 0 = unlimited. */
	uint32_t max_conns_per_source;
	/* New fields go here (0 must mean the old behaviour: docs/abi.md). */
} zcrpc_listen_opts;

/** Fills @opts with the defaults documented above (conn_handlers NULL). */
ZCRPC_API void zcrpc_listen_opts_init_sized(zcrpc_listen_opts *opts,
					    size_t size);
/* An inline, so the size is the caller's own sizeof: a library newer
 * than the caller's header never writes past its struct (docs/abi.md). */
static inline void zcrpc_listen_opts_init(zcrpc_listen_opts *opts)
{
	zcrpc_listen_opts_init_sized(opts, sizeof(*opts));
}

/**
 * zcrpc_listen - listen on @host (NULL = every address) and @port ("0" = an
 * ephemeral port; see zcrpc_listener_get_port()). Connection requests are
 * accepted from inside zcrpc_worker_progress(); a request with a malformed
 * handshake or a protocol version this side does not speak is rejected with
 * a reason the client reports.
 *
 * On success *@out is owned by the caller (zcrpc_listener_destroy()).
 * @opts and *opts->conn_handlers are copied.
 * Errors: INVALID_ARGUMENT (NULL port/opts/on_accept, bad address, a psk
 * outside 16..64 bytes, a psk on a worker whose max_msg is below 100,
 * negative handshake_timeout_ms),
 * ALREADY_EXISTS (address in use), UNAVAILABLE (no RDMA device for the
 * address), RESOURCE_EXHAUSTED.
 */
ZCRPC_API zcrpc_status zcrpc_listen(zcrpc_worker *w, const char *host,
				    const char *port,
				    const zcrpc_listen_opts *opts,
				    zcrpc_listener **out);

/** The port the listener is bound to (host byte order). */
ZCRPC_API uint16_t zcrpc_listener_get_port(const zcrpc_listener *l);

/**
 * zcrpc_listener_destroy - stop listening and free the listener. Connections
 * already accepted are not affected; requests not yet accepted are rejected.
 * NULL is a no-op.
 */
ZCRPC_API void zcrpc_listener_destroy(zcrpc_listener *l);

/**
 * zcrpc_conn_send - send one message of @len bytes (0..max_msg of the
 * receiver). The bytes are copied into a registered pool slot before the
 * call returns (counted in copied_bytes), so @data stays the caller's; use
 * zcrpc_msg_alloc() + zcrpc_conn_send_msg() to send without the copy. A
 * message larger than the peer accepts is refused, never truncated.
 *
 * Errors: INVALID_ARGUMENT (NULL data with len > 0, len above the peer's
 * max_msg), FAILED_PRECONDITION (not ESTABLISHED), RESOURCE_EXHAUSTED (no
 * credit from the peer, send queue full, or pool at its limit right now:
 * progress the worker and try again; zcrpc_conn_can_send() tells when).
 */
ZCRPC_API zcrpc_status zcrpc_conn_send(zcrpc_conn *conn, const void *data,
				       size_t len);

/** Non-zero when zcrpc_conn_send() of one message would not fail with
 * RESOURCE_EXHAUSTED. */
ZCRPC_API int zcrpc_conn_can_send(const zcrpc_conn *conn);

/**
 * A message buffer in the worker's registered pool: fill @data (up to
 * @capacity bytes) and send it with zcrpc_conn_send_msg() without a copy.
 * @id names the slot; treat it as opaque. A fixed layout that never grows
 * (docs/abi.md).
 */
typedef struct zcrpc_msg {
	void *data;
	size_t capacity;
	uint64_t id;
} zcrpc_msg;

/**
 * zcrpc_msg_alloc - take a pool slot with room for a @len-byte message.
 * The caller owns it until zcrpc_conn_send_msg() succeeds or
 * zcrpc_msg_free(). Errors: INVALID_ARGUMENT (@len above max_msg),
 * RESOURCE_EXHAUSTED (the pool is at its limit: free or send some first).
 */
ZCRPC_API zcrpc_status zcrpc_msg_alloc(zcrpc_worker *w, size_t len,
				       zcrpc_msg *out);

/**
 * zcrpc_msg_free - give back a slot the caller owns (from zcrpc_msg_alloc()
 * or zcrpc_conn_recv_keep()); @m is cleared. Errors: INVALID_ARGUMENT
 * (unknown slot), FAILED_PRECONDITION (already freed or sent).
 */
ZCRPC_API zcrpc_status zcrpc_msg_free(zcrpc_worker *w, zcrpc_msg *m);

/**
 * zcrpc_conn_send_msg - send the first @len bytes of @m, in place. On OK the
 * slot belongs to the library (it returns to the pool when the send
 * completes) and @m is cleared; on any error the caller still owns it.
 * Errors as zcrpc_conn_send(), plus INVALID_ARGUMENT when @len exceeds the
 * slot or @m is not a slot the caller owns.
 */
ZCRPC_API zcrpc_status zcrpc_conn_send_msg(zcrpc_conn *conn, zcrpc_msg *m,
					   size_t len);

/**
 * zcrpc_conn_recv_keep - only inside on_recv: keep the message being
 * delivered instead of letting the library repost its slot. *@out then
 * describes it (data, length as capacity) and the caller owns it until
 * zcrpc_msg_free(). The library replaces the receive from the pool before
 * returning the credit; while the pool has no slot to spare, the credit is
 * withheld, which slows the peer down instead of dropping anything.
 * Errors: FAILED_PRECONDITION (not inside on_recv of @conn).
 */
ZCRPC_API zcrpc_status zcrpc_conn_recv_keep(zcrpc_conn *conn, zcrpc_msg *out);

/** Access flags for zcrpc_mr_register(). */
#define ZCRPC_MR_REMOTE_WRITE 0x1u /**< may be granted to peers as a write target (zcrpc_mr_grant) */

/**
 * zcrpc_mr_register - register @len bytes at @addr with @ctx, so they can
 * be the source of zcrpc_conn_write() on any connection of a worker using
 * @ctx, or (with ZCRPC_MR_REMOTE_WRITE) a write target granted with
 * zcrpc_mr_grant(). Registered on the devices the context's workers use
 * (on every device while none is used yet), and on another device when a
 * worker's first connection there comes (that connection fails
 * RESOURCE_EXHAUSTED naming the device if the registration is refused
 * then); zcrpc_device_info.registered_bytes shows the cost per device. The registration itself never grants
 * remote access: with ZCRPC_MR_REMOTE_WRITE it is registered for local
 * write and memory-window binding only (IBV_ACCESS_MW_BIND, never
 * IBV_ACCESS_REMOTE_WRITE), so its own rkey lets no peer in; peers write
 * only through the windows zcrpc_mr_grant() binds. The memory stays the
 * caller's and must outlive the registration; nothing is copied.
 * Errors: INVALID_ARGUMENT, RESOURCE_EXHAUSTED (pinning refused: check
 * `ulimit -l`).
 */
ZCRPC_API zcrpc_status zcrpc_mr_register(zcrpc_context *ctx, void *addr,
					 size_t len, unsigned flags,
					 zcrpc_mr **out);

/** Deregisters @mr (no write may still use it, and every grant on it must
 * have been revoked or its connection destroyed). NULL is a no-op. */
ZCRPC_API void zcrpc_mr_deregister(zcrpc_mr *mr);

/** Where a peer may write: address, length and key, for one connection.
 * A fixed layout that never grows (its encoding is the wire format). */
typedef struct zcrpc_remote_region {
	uint64_t addr;
	uint64_t len;
	uint32_t rkey;
	uint32_t reserved; /**< 0 */
} zcrpc_remote_region;

/** Bytes of an encoded zcrpc_remote_region (docs/protocol.md §4). */
#define ZCRPC_REMOTE_REGION_LEN 24

/** A revocable grant: one memory window bound on one connection. */
typedef struct zcrpc_grant zcrpc_grant;

/**
 * zcrpc_mr_grant - let the peer of @conn RDMA WRITE into exactly @len bytes
 * at @offset of @mr, until the grant is revoked. A type-2 memory window of
 * the worker's protection domain is bound to that range on @conn's queue
 * pair (an IBV_WR_BIND_MW on its send queue, which costs a send-queue slot
 * but no peer credit); *@out describes it with the window's rkey, which no
 * other connection can use and which reaches nothing outside the range.
 * Send the description to the peer (zcrpc_remote_region_encode()) AFTER
 * this call: the bind precedes every later send on the connection. A
 * window whose bind fails fails the connection (UNAVAILABLE).
 *
 * Ownership: *@grant belongs to the caller until it passes it to
 * zcrpc_grant_revoke() (exactly once), or until the connection is
 * destroyed, which frees every grant of it. @grant may be NULL: the window
 * then stays bound until the connection closes. Grants of a connection
 * that closed grant nothing any more (its queue pair is in error).
 * @mr must outlive the grant.
 * Errors: INVALID_ARGUMENT (NULL, zero length, @mr of another context),
 * FAILED_PRECONDITION (@mr lacks ZCRPC_MR_REMOTE_WRITE, or @conn is not
 * ESTABLISHED or is closing), OUT_OF_RANGE, RESOURCE_EXHAUSTED (no memory
 * window could be allocated, or the connection's send queue has no room
 * for the bind right now: progress and retry).
 */
ZCRPC_API zcrpc_status zcrpc_mr_grant(const zcrpc_mr *mr, zcrpc_conn *conn,
				      size_t offset, size_t len,
				      zcrpc_remote_region *out,
				      zcrpc_grant **grant);

/**
 * zcrpc_grant_revoke - revoke @g: an IBV_WR_LOCAL_INV of its window is
 * posted (a send-queue slot, no peer credit), and the connection's
 * on_revoked(@user_ctx) handler runs exactly once from a later
 * zcrpc_worker_progress(): with OK once the invalidate completed — from
 * then on no write of the peer can reach the memory (a write through the
 * old rkey fails the peer's connection with a remote access error) — or
 * with UNAVAILABLE when the connection failed or closed first (its queue
 * pair is in error, so nothing can be written either), always before the
 * connection's CLOSED callback. Only then may the memory be reused or
 * read as final.
 *
 * A peer write already on the wire when the window is invalidated fails
 * the peer's connection: revoke only when the peer can no longer write
 * (its write-with-immediate arrived, or it acknowledged a cancellation),
 * unless the peer is not trusted.
 * @g is the library's from this call on (also on error). Returns OK, or
 * UNAVAILABLE when the connection is already closed or closing: the window
 * is gone with its queue pair, nothing can be written, and on_revoked does
 * not run. INVALID_ARGUMENT for NULL.
 */
ZCRPC_API zcrpc_status zcrpc_grant_revoke(zcrpc_grant *g, void *user_ctx);

/** Writes @r as ZCRPC_REMOTE_REGION_LEN little-endian bytes into @buf. */
ZCRPC_API void zcrpc_remote_region_encode(const zcrpc_remote_region *r,
					  uint8_t *buf);

/** Parses what zcrpc_remote_region_encode() wrote. Errors:
 * INVALID_ARGUMENT (short buffer, zero length, non-zero reserved field). */
ZCRPC_API zcrpc_status zcrpc_remote_region_decode(const void *buf, size_t len,
						  zcrpc_remote_region *out);

/**
 * zcrpc_conn_write - RDMA WRITE @len bytes from @src (at @src_offset) into
 * the region @dst the peer granted (at @dst_offset), with immediate data
 * *@imm when @imm is not NULL (the peer's on_write_imm then runs once it
 * landed; that costs one credit, like a message). Transfers larger than
 * zcrpc_conn_write_piece() are split into several WRITEs of that size
 * (only the last, the remainder, carries the immediate). Queued when the send queue is full; the result comes once
 * through on_write_done(@user_ctx). The caller keeps @src's memory unchanged
 * until then. Both ranges are checked before anything is posted.
 * Errors: INVALID_ARGUMENT (NULL, zero length), OUT_OF_RANGE (outside @src
 * or outside @dst), FAILED_PRECONDITION (not ESTABLISHED, or @src from
 * another context), RESOURCE_EXHAUSTED (out of memory).
 */
ZCRPC_API zcrpc_status zcrpc_conn_write(zcrpc_conn *conn, const zcrpc_mr *src,
					size_t src_offset, size_t len,
					const zcrpc_remote_region *dst,
					uint64_t dst_offset,
					const uint32_t *imm, void *user_ctx);

/**
 * zcrpc_conn_write_piece - the largest RDMA WRITE one work request carries on
 * @conn: the smaller of this side's and the peer's limit (each its port's
 * max_msg_sz, exchanged in the hello; this side's alone when the peer did
 * not announce one). A transfer of N bytes reaches the peer as
 * ceil(N / piece) WRITEs, the last one of N - (ceil(N / piece) - 1) * piece
 * bytes carrying the immediate: what a receiver checks the immediate's
 * byte count against (docs/protocol.md §4). 0 for NULL. Any thread once
 * the connection is ESTABLISHED.
 */
ZCRPC_API size_t zcrpc_conn_write_piece(const zcrpc_conn *conn);

/**
 * zcrpc_conn_close - start an orderly close: writes not yet posted are
 * cancelled, a CLOSE message tells the peer (its CLOSED reads OK, not a
 * crash; docs/protocol.md §5), what was posted drains, then rdma_disconnect.
 * on_state(CLOSED, OK) follows from a later progress call. Idempotent.
 */
ZCRPC_API void zcrpc_conn_close(zcrpc_conn *conn);

/**
 * zcrpc_conn_destroy - close if needed and release the handle. No callback
 * runs for this connection afterwards. An established connection sends its
 * CLOSE message first, and the release waits up to 200 ms for it to reach
 * the peer, which then reads an orderly close. May be called from inside
 * the connection's own callbacks (the memory is freed after the callback
 * returns). NULL is a no-op.
 */
ZCRPC_API void zcrpc_conn_destroy(zcrpc_conn *conn);

/** Replaces the connection's callbacks (@h is copied). Errors:
 * INVALID_ARGUMENT (NULL, or @h->size not set by zcrpc_conn_handlers_init). */
ZCRPC_API zcrpc_status zcrpc_conn_set_handlers(zcrpc_conn *conn,
					       const zcrpc_conn_handlers *h);

/** Current state. */
ZCRPC_API zcrpc_conn_state zcrpc_conn_get_state(const zcrpc_conn *conn);

/** Why the connection closed (OK while open or after an orderly close). */
ZCRPC_API zcrpc_status zcrpc_conn_get_status(const zcrpc_conn *conn);

/** A human-readable detail for zcrpc_conn_get_status(); "" when none. The string
 * is owned by the connection and valid until it is destroyed. */
ZCRPC_API const char *zcrpc_conn_get_error(const zcrpc_conn *conn);

/** Per-connection counters, read with zcrpc_conn_get_stats(). */
typedef struct zcrpc_conn_stats {
	uint64_t msgs_sent, msgs_recv;	 /**< data messages */
	uint64_t bytes_sent, bytes_recv; /**< data payload bytes */
	uint64_t copied_bytes;		 /**< bytes memcpy'd on the data path (zcrpc_conn_send) */
	uint64_t writes, write_bytes;	 /**< completed zcrpc_conn_write() calls and bytes */
	uint64_t write_imms_recv;	 /**< peer writes with immediate received */
	uint64_t credit_updates_sent;	 /**< explicit credit messages */
	uint64_t credit_stalls;		 /**< sends refused for lack of credit */
	uint64_t rnr_events;		 /**< receiver-not-ready errors (should stay 0) */
	uint32_t recv_posted; /**< receives of the worker's shared receive queue
			       *   promised to this connection now (the peer's
			       *   credits and those owed back to it) */
	uint32_t peer_recv_depth; /**< credits the peer granted at connect (its
				   *   guaranteed share; a peer with shared
				   *   receives grants more while busy) */
	uint32_t peer_max_msg;		 /**< largest message the peer accepts */
	uint32_t max_inline;		 /**< inline size the QP was granted */
	uint64_t keepalives_sent;	 /**< keepalive probes posted */
	uint64_t grants;		 /**< memory windows bound (zcrpc_mr_grant) */
	uint64_t revokes;		 /**< windows invalidated (zcrpc_grant_revoke completed) */
	uint64_t wr_deferred;		 /**< work requests held back until the send
					  *   queue drained for a window bind or
					  *   invalidate (docs/design.md) */
	uint64_t flushed_wcs;	/**< flush completions collected at teardown
				 *   (every WR not yet completed gets one) */
	uint64_t unflushed_wrs; /**< WRs posted at teardown when the last
				 *   signaled one's completion did not come
				 *   within 100 ms (should stay 0) */
	uint32_t recv_share;   /**< credits this side lets the peer hold now:
				*   its guaranteed part up to recv_depth
				*   (docs/design.md "Shared receive path") */
	uint32_t credits;      /**< credits this side holds now */
	uint64_t share_raises; /**< times the peer's share was doubled */
	uint64_t credits_released; /**< credits this side gave back while idle
				      (RELEASE) */
	uint64_t wr_unsignaled; /**< send-queue work requests posted without a
				   completion of their own (reaped by a later
				   signaled one: docs/design.md "Send ring
				   and signaling") */
				/* New counters go here. */
} zcrpc_conn_stats;

/**
 * zcrpc_conn_get_stats - copy the connection's counters into @out, whose
 * size is @out_size (pass sizeof(*out)): at most @out_size bytes are
 * written, so a caller built with an older, shorter struct gets the
 * counters it knows. Nothing is written for a NULL @conn.
 */
ZCRPC_API void zcrpc_conn_get_stats(const zcrpc_conn *conn,
				    zcrpc_conn_stats *out, size_t out_size);

/** zcrpc_conn_info.transport */
#define ZCRPC_TRANSPORT_IB    1u /**< InfiniBand */
#define ZCRPC_TRANSPORT_ROCE  2u /**< RoCE (IB transport over Ethernet) */
#define ZCRPC_TRANSPORT_IWARP 3u /**< iWARP (siw, irdma, cxgb4) */
/** zcrpc_conn_info.grant_path: how zcrpc_mr_grant() grants on it. */
#define ZCRPC_GRANT_WINDOW       1u /**< a type-2 memory window per grant */
#define ZCRPC_GRANT_REGISTRATION 2u /**< a registration per grant (no windows:
				      *   docs/design.md "Grants without memory
				      *   windows") */
/** zcrpc_conn_info.write_end: how a write with a value reaches the peer. */
#define ZCRPC_WRITE_END_IMM  1u /**< RDMA WRITE with immediate data */
#define ZCRPC_WRITE_END_MSG  2u /**< RDMA WRITE, then a WRITTEN message */
#define ZCRPC_WRITE_END_NONE 3u /**< neither: writes with a value fail */

/** What a connection runs on and the data path chosen for it from both
 * sides' device profiles, read with zcrpc_conn_get_info(). */
typedef struct zcrpc_conn_info {
	char device[64];      /**< the RDMA device, e.g. "rxe0", "siw0" */
	char provider[16];    /**< "rxe", "siw", "mlx5" or "other" */
	uint32_t port;	      /**< the device's port number */
	uint32_t transport;   /**< ZCRPC_TRANSPORT_* */
	uint32_t grant_path;  /**< ZCRPC_GRANT_* */
	uint32_t write_end;   /**< ZCRPC_WRITE_END_* */
	uint32_t max_inline;  /**< inline bytes the queue pair was granted */
	uint32_t active_first; /**< 1: iWARP's rule, the active side sends the
				*   first message (the passive side waits) */
	/** The queue pair's address vector as the device holds it
	 * (ibv_query_qp): the GRH traffic class (the ToS on RoCE v2), the
	 * service level, and the source GID index. 0 on iWARP, whose queue
	 * pairs have no address vector. */
	uint32_t traffic_class, service_level, gid_index;
} zcrpc_conn_info;

/** What the context learned about one of its devices and the paths it
 * selects there, read with zcrpc_context_get_device_info(). */
typedef struct zcrpc_device_info {
	char name[64];	      /**< the RDMA device, e.g. "rxe0", "siw0" */
	char provider[16];    /**< "rxe", "siw", "mlx5" or "other" */
	char summary[256];    /**< one line: what was detected, the paths chosen */
	uint32_t transport;   /**< ZCRPC_TRANSPORT_* */
	uint32_t port_state;  /**< port 1's state now (IBV_PORT_*: 4 ACTIVE) */
	uint32_t active_mtu;  /**< port 1's active MTU in bytes */
	uint32_t grant_path;  /**< ZCRPC_GRANT_* on this device */
	uint32_t write_end;   /**< ZCRPC_WRITE_END_IMM or _MSG on this device */
	uint32_t active_first; /**< 1: iWARP, the active side sends first */
	uint32_t inline_ask;  /**< inline bytes a new queue pair asks for */
	uint32_t max_qp_wr, max_sge, max_srq_wr, max_cqe, max_mw;
	uint32_t max_msg_sz; /**< port 1's largest message (an RDMA WRITE piece) */
	uint32_t removed;    /**< 1: the device was removed (DEVICE_REMOVAL) */
	uint32_t reserved;   /**< 0 */
	/** 1: a worker of the context has used the device (a connection
	 * there): pools and the application's memory are registered on it
	 * from then on. Until a first device is used, the application's
	 * registrations go on every device (so the call that registers sees
	 * a bad range or the locked-memory limit); afterwards only on the
	 * devices in use, and on another device when it comes into use. */
	uint32_t in_use;
	uint32_t reserved2; /**< 0 */
	/** Bytes registered on this device now (worker pools, the
	 * application's memory, bulk buffers, grant spares): what the
	 * locked-memory limit (ulimit -l) is charged for it. */
	uint64_t registered_bytes;
} zcrpc_device_info;

/** The number of devices @ctx uses (0 for NULL); their indexes are
 * 0 .. count - 1. Any thread. */
ZCRPC_API int zcrpc_context_device_count(const zcrpc_context *ctx);

/** The RDMA devices librdmacm listed beyond the most a context uses (8),
 * left unused (each named in a warning at zcrpc_context_create); 0 for
 * NULL. Any thread. */
ZCRPC_API int zcrpc_context_skipped_devices(const zcrpc_context *ctx);

/**
 * zcrpc_context_get_device_info - copy what @ctx knows about its device
 * @idx into @out (at most @out_size bytes: pass sizeof(*out)); the port's
 * state is queried now. Any thread. Errors: INVALID_ARGUMENT (NULL, or no
 * device @idx).
 */
ZCRPC_API zcrpc_status zcrpc_context_get_device_info(zcrpc_context *ctx, int idx,
						     zcrpc_device_info *out,
						     size_t out_size);

/**
 * zcrpc_conn_get_info - copy what @conn runs on into @out (at most
 * @out_size bytes: pass sizeof(*out)). Zeroes @out for a connection that
 * has no device yet (resolving its address). Nothing is written for NULL.
 * Worker thread only.
 */
ZCRPC_API void zcrpc_conn_get_info(const zcrpc_conn *conn,
				   zcrpc_conn_info *out, size_t out_size);

/** Per-worker counters: its connections' totals (including destroyed ones)
 * and its pool. Read with zcrpc_worker_get_stats(). */
typedef struct zcrpc_worker_stats {
	uint64_t msgs_sent, msgs_recv, bytes_sent, bytes_recv;
	uint64_t copied_bytes; /**< bytes memcpy'd on the data path */
	uint64_t writes, write_bytes, write_imms_recv;
	uint64_t credit_stalls, rnr_events;
	uint32_t conns;		     /**< connections alive */
	uint32_t pool_in_use;	     /**< pool slots taken (receives posted, messages held) */
	uint32_t pool_capacity;	     /**< pool slots allocated and registered */
	uint64_t pool_exhausted;     /**< times a pool class was at its limit */
	uint64_t pool_bad_frees;     /**< double or stale frees refused */
	uint64_t keepalives_sent;    /**< keepalive probes posted */
	uint64_t async_events;	     /**< device async events this worker acted on
				      *   (port down/up, QP/CQ errors) */
	uint64_t grants;	     /**< memory windows bound */
	uint64_t revokes;	     /**< windows invalidated */
	uint64_t rejected_auth;	     /**< connections refused for a missing, bad or replayed key proof */
	uint64_t rejected_busy;	     /**< connect requests refused: max_handshakes in progress */
	uint64_t handshake_timeouts; /**< accepted connections closed at handshake_timeout_ms */
	uint32_t handshakes;	     /**< accepted connections in their handshake right now */
	uint64_t wr_deferred;	     /**< work requests held back behind a window
				      *   bind or invalidate (see zcrpc_conn_stats) */
	uint64_t flushed_wcs;	     /**< flush completions collected at teardown */
	uint64_t unflushed_wrs;	     /**< WRs whose flush did not come (should stay 0) */
	/** receives the shared receive queues may hold (recv_budget per
	 * device in use) */
	uint32_t recv_budget;
	uint32_t recv_posted;	/**< receives in the shared receive queues now */
	uint32_t recv_promised; /**< of them, promised to connections as credits */
	/** connections refused: the receive budget could not promise their
	 * guaranteed credits (also counted in rejected_setup when passive) */
	uint64_t rejected_budget;
	/* Connect requests refused, by reason (each logged, and reported to
	 * the client in its REJECT; with rejected_busy and rejected_auth): */
	uint64_t rejected_hello;      /**< malformed handshake, another protocol
				       *   version, retry_count 7 */
	uint64_t rejected_conn_limit; /**< max_connections reached */
	uint64_t rejected_source_limit; /**< max_conns_per_source reached */
	uint64_t rejected_setup;	/**< the connection could not be set up
					 *   (no pool slot for its receives, out of
					 *   memory, the device's limits, its port
					 *   down): RESOURCE_EXHAUSTED or the setup's
					 *   status, with the reason */
	/* The worker's completion queues (shared by its connections on a
	 * device, docs/design.md "Shared completion queues"): */
	uint64_t cqs;	      /**< CQs now, over all devices */
	uint64_t cq_entries;  /**< their entries, summed */
	uint64_t cqs_created; /**< CQs made since the worker was created */
	uint64_t cqs_resized; /**< times a CQ grew for a connection joining */
			      /* New counters go here. */
} zcrpc_worker_stats;

/** Copies the worker's counters into @out, at most @out_size bytes (pass
 * sizeof(*out)); all zero for a NULL @w. */
ZCRPC_API void zcrpc_worker_get_stats(const zcrpc_worker *w,
				      zcrpc_worker_stats *out, size_t out_size);

#ifdef __cplusplus
}
#endif

#endif /* ZCRPC_TRANSPORT_H */
