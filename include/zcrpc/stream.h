/* zcrpc — streaming calls: server-streaming, client-streaming and
 * bidirectional, as gRPC defines them, over one connection of a channel.
 *
 * A stream is one call that carries any number of messages each way, in
 * order: the client opens it (method, deadline, initial metadata), both
 * sides write messages, the client half-closes when it has written all,
 * and the server ends it with a final status and trailing metadata.
 * Either side may cancel. The call's deadline covers the whole stream.
 * The four method kinds are ways of using the same stream: a
 * server-streaming client writes one message and half-closes, a
 * client-streaming server writes one message before its status.
 *
 * Flow control is per stream (docs/protocol.md §8): a writer may have at
 * most a window of messages its reader has not consumed yet, so a slow
 * reader slows its own writer and never another stream or the unary calls
 * on the connection. zcrpc_stream_write() copies the message and returns
 * RESOURCE_EXHAUSTED when the window is closed; on_writable says when it
 * opened again. A reader consumes a message when its on_message returns,
 * unless it paused the stream (zcrpc_stream_pause()): then messages that
 * arrive wait in the library, at most one window of them, until
 * zcrpc_stream_resume().
 *
 * Threading: every function here is for the worker thread that owns the
 * stream (the channel's worker, or the worker of the server's connection:
 * its callbacks run there), like the connection functions; from another
 * thread, post to that worker with zcrpc_worker_post(). Callbacks never
 * run inside a zcrpc_stream_* call: they run from the worker's progress
 * (the fill function of zcrpc_stream_write_fill(), which writes the
 * message, is no callback of the stream: it runs inside that call).
 *
 * Ownership: the library owns every zcrpc_stream. It stays valid from
 * zcrpc_stream_start() (client) or on_open (server) until on_finish
 * returns, and on_finish runs exactly once for every stream (also when
 * the connection is lost, the channel or server is destroyed, or the
 * peer cancels). Messages and metadata given to a callback are valid only
 * during that callback; what the application passes in is copied before
 * the call returns.
 */
#ifndef ZCRPC_STREAM_H
#define ZCRPC_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "zcrpc/export.h"
#include "zcrpc/rpc.h"
#include "zcrpc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zcrpc_stream zcrpc_stream;

/** What on_open tells a server about a new stream. Valid only during
 * on_open (copy what is kept). */
typedef struct zcrpc_stream_open {
	size_t size;	    /**< bytes the library filled (ZCRPC_VIEW_HAS) */
	uint32_t method_id; /**< the method's wire id (zcrpc_method_id()) */
	const zcrpc_md *md; /**< the client's initial metadata */
	size_t n_md;
	int64_t timeout_us; /**< time left when it arrived; -1 = no deadline */
	/* New fields go here. */
} zcrpc_stream_open;

/** How a stream ended, given to on_finish. Valid only during on_finish. */
typedef struct zcrpc_stream_end {
	size_t size; /**< bytes the library filled (ZCRPC_VIEW_HAS) */
	zcrpc_status status;
	const char *message; /**< "" on OK */
	const zcrpc_md *md;  /**< trailing metadata (the client's view of the server's); none on the server */
	size_t n_md;
	/* New fields go here. */
} zcrpc_stream_end;

/** A stream's callbacks; zero the struct, set @size to
 * sizeof(zcrpc_stream_handlers), then the ones wanted. A NULL callback is
 * skipped. @arg is passed to each; per-stream state goes in
 * zcrpc_stream_set_user(). */
typedef struct zcrpc_stream_handlers {
	size_t size; /**< sizeof(zcrpc_stream_handlers) */
	/** Server: a client opened a stream of this method. Set per-stream
	 * state here; write, finish or wait for messages. Required for a
	 * server's method, ignored on the client. */
	void (*on_open)(zcrpc_stream *s, const zcrpc_stream_open *open,
			void *arg);
	/** Client: the server's initial metadata (at most once, before its
	 * first message; not at all when the server sent none). */
	void (*on_headers)(zcrpc_stream *s, const zcrpc_md *md, size_t n_md,
			   void *arg);
	/** A message from the peer, in order. */
	void (*on_message)(zcrpc_stream *s, const void *data, size_t len,
			   void *arg);
	/** Server: the client half-closed (it writes no more messages). */
	void (*on_half_close)(zcrpc_stream *s, void *arg);
	/** Write again: the write window, closed by a RESOURCE_EXHAUSTED
	 * write, is open again, or a write refused for want of a pool slot
	 * or memory may now find one (see zcrpc_stream_write). */
	void (*on_writable)(zcrpc_stream *s, void *arg);
	/** The stream ended; the last callback, always run once. The stream
	 * is freed when it returns. */
	void (*on_finish)(zcrpc_stream *s, const zcrpc_stream_end *end,
			  void *arg);
	void *arg;
	/* New fields go here (NULL must mean the old behaviour). */
} zcrpc_stream_handlers;

/** A client stream's settings. Initialise with zcrpc_stream_opts_init(). */
typedef struct zcrpc_stream_opts {
	size_t size;	    /**< sizeof(zcrpc_stream_opts), set by init */
	int64_t timeout_us; /**< deadline over the whole stream; 0 = the channel's default */
	const zcrpc_md *md; /**< initial metadata (copied) */
	size_t n_md;
	/** The largest message this client reads; a larger one ends the
	 * stream RESOURCE_EXHAUSTED (the server is told). 0 = 4 MiB. */
	size_t max_message;
	/* New fields go here (0 must mean the old behaviour: docs/abi.md). */
} zcrpc_stream_opts;

ZCRPC_API void zcrpc_stream_opts_init_sized(zcrpc_stream_opts *o, size_t size);
/* An inline, so the size is the caller's own sizeof (docs/abi.md). */
static inline void zcrpc_stream_opts_init(zcrpc_stream_opts *o)
{
	zcrpc_stream_opts_init_sized(o, sizeof(*o));
}

/**
 * zcrpc_stream_start - open a stream of @method on @ch. Its callbacks are
 * @h's (copied); *@out is the stream, the library's until on_finish
 * returns. Messages may be written at once (they wait for the
 * connection). Errors (nothing is started, no callback runs):
 * INVALID_ARGUMENT (NULL arguments, no on_finish, bad metadata or
 * timeout), RESOURCE_EXHAUSTED (no memory or pool slot),
 * FAILED_PRECONDITION (the channel is being destroyed). A server that does
 * not speak streams ends the stream UNIMPLEMENTED.
 */
ZCRPC_API zcrpc_status zcrpc_stream_start(zcrpc_channel *ch, uint32_t method,
					  const zcrpc_stream_opts *o,
					  const zcrpc_stream_handlers *h,
					  zcrpc_stream **out);

/**
 * zcrpc_server_register_stream - serve streaming method @full_name on @s
 * with @h (copied; on_open and on_finish required). Before listening, as
 * zcrpc_server_register(). A unary call of it is answered UNIMPLEMENTED,
 * as a stream of a unary method is. ALREADY_EXISTS, INVALID_ARGUMENT,
 * RESOURCE_EXHAUSTED, FAILED_PRECONDITION.
 */
ZCRPC_API zcrpc_status zcrpc_server_register_stream(
	zcrpc_server *s, const char *full_name, const zcrpc_stream_handlers *h);

/**
 * zcrpc_stream_write - send one message of @len bytes (copied; 0 is a
 * message too). OK once queued in order. A client's message above its
 * channel's bulk_threshold, on a connection that is up, is copied into
 * the channel's registered memory and goes by RDMA WRITE into memory the
 * server grants (the server's on_message reads it where it landed); a
 * server's message above the server's bulk_threshold is copied into the
 * server's registered memory and goes by RDMA WRITE into memory the
 * client grants (the client's on_message reads it there); another message
 * larger than one frame (or the peer's hello lacks the feature) goes in
 * pieces as the window lets them (docs/protocol.md §8). Either way the next write is refused
 * RESOURCE_EXHAUSTED until the message went (on_writable follows); a
 * half-close or finish made meanwhile goes after it. RESOURCE_EXHAUSTED when the window is closed (on_writable follows)
 * or no pool slot or memory is free (on_writable follows too, about a
 * millisecond later, whether or not one is free by then); INVALID_ARGUMENT
 * for NULL @data with a length or a message above
 * zcrpc_stream_max_message();
 * FAILED_PRECONDITION after this side's half-close or finish, or once the
 * stream ended (its on_finish is due).
 */
ZCRPC_API zcrpc_status zcrpc_stream_write(zcrpc_stream *s, const void *data,
					  size_t len);

/**
 * zcrpc_stream_write_fill - zcrpc_stream_write() of a @len-byte message
 * that @fill writes straight into registered memory (the frame's own
 * slot: this is how protobuf-c packs a stream's messages without an
 * intermediate buffer; a message larger than a frame is written into the
 * heap copy its pieces go from). @fill(dst, @len, @ctx) runs once, inside this
 * call, and only when the message is queued (OK) and @len is not 0; it
 * must write exactly @len bytes and call no zcrpc function. The same
 * rules and errors as zcrpc_stream_write(): INVALID_ARGUMENT also for a
 * NULL @fill with a length.
 */
ZCRPC_API zcrpc_status zcrpc_stream_write_fill(zcrpc_stream *s, size_t len,
					       zcrpc_fill_fn fill, void *ctx);

/**
 * zcrpc_stream_write_bulk - zcrpc_stream_write() of the @src->len bytes of
 * registered memory at @src (zcrpc_mr_register() on the stream's worker's
 * context; the registration needs no remote access), without a copy when
 * the message goes by RDMA WRITE (above the writing side's bulk_threshold,
 * on a connection that takes such messages: the device reads it in
 * place); otherwise copied from there as zcrpc_stream_write() copies. The
 * memory stays the caller's, and must neither change nor go until the
 * stream's next on_writable (which this write always brings, once the
 * message went and the window is open) or its on_finish: an in-place
 * message's on_finish waits until the device can no longer read it (its
 * write completed, the peer took no grant within the server's write time
 * limit, or the connection went). Only zcrpc_channel_destroy() and
 * zcrpc_server_destroy() run on_finish earlier; the memory is no longer
 * read once they returned. Errors as zcrpc_stream_write();
 * INVALID_ARGUMENT also for a NULL @src, a length of 0 or memory @src->mr
 * does not cover.
 */
ZCRPC_API zcrpc_status zcrpc_stream_write_bulk(zcrpc_stream *s,
					       const zcrpc_bulk *src);

/** Non-zero while a write would not be refused for the window. */
ZCRPC_API int zcrpc_stream_can_write(const zcrpc_stream *s);

/** The largest message zcrpc_stream_write() takes on @s (4 MiB; a reader
 * may take less: zcrpc_stream_opts.max_message). */
ZCRPC_API size_t zcrpc_stream_max_message(const zcrpc_stream *s);

/**
 * zcrpc_stream_close_send - client: half-close (no more messages; the
 * server's on_half_close follows them). FAILED_PRECONDITION when already
 * half-closed or ended, INVALID_ARGUMENT on a server's stream.
 */
ZCRPC_API zcrpc_status zcrpc_stream_close_send(zcrpc_stream *s);

/**
 * zcrpc_stream_send_headers - server: send initial metadata (copied)
 * before the first message. FAILED_PRECONDITION when a message or headers
 * went already or the stream ended; INVALID_ARGUMENT on a client's stream
 * or for bad metadata; RESOURCE_EXHAUSTED without a pool slot.
 */
ZCRPC_API zcrpc_status zcrpc_stream_send_headers(zcrpc_stream *s,
						 const zcrpc_md *md,
						 size_t n_md);

/**
 * zcrpc_stream_finish - server: end the stream with @status, @message (may
 * be NULL; up to 512 bytes travel) and trailing metadata @md (copied). Its
 * on_finish follows with @status. FAILED_PRECONDITION when it ended
 * already (cancelled, deadline, connection lost: its on_finish is due),
 * INVALID_ARGUMENT on a client's stream or for bad metadata.
 */
ZCRPC_API zcrpc_status zcrpc_stream_finish(zcrpc_stream *s,
					   zcrpc_status status,
					   const char *message,
					   const zcrpc_md *md, size_t n_md);

/**
 * zcrpc_stream_cancel - either side: end the stream CANCELLED and tell the
 * peer (its on_finish reads CANCELLED). on_finish follows. NOT_FOUND when
 * it ended already.
 */
ZCRPC_API zcrpc_status zcrpc_stream_cancel(zcrpc_stream *s);

/** Stop consuming messages: those that arrive wait (at most one window)
 * and the writer is let send no more. */
ZCRPC_API void zcrpc_stream_pause(zcrpc_stream *s);
/** Consume again: waiting messages go to on_message from the next
 * progress, then the writer gets its window back. */
ZCRPC_API void zcrpc_stream_resume(zcrpc_stream *s);

/** The application's pointer for @s (NULL until set). */
ZCRPC_API void zcrpc_stream_set_user(zcrpc_stream *s, void *user);
ZCRPC_API void *zcrpc_stream_get_user(const zcrpc_stream *s);

#ifdef __cplusplus
}
#endif

#endif /* ZCRPC_STREAM_H */
