/* zcrpc — protobuf-c glue: protoc-c's own generated service stubs over
 * zcrpc channels and servers.
 *
 * A method "Method" of service "pkg.Service" travels as the zcrpc method
 * "/pkg.Service/Method" (zcrpc_method_id() of that name). Requests are
 * packed with protobuf_c_message_pack() straight into registered memory;
 * replies are unpacked from where they landed. Unpacking draws on an
 * allocator with a byte budget (ZCRPC_PB_UNPACK_BUDGET plus twice the
 * message's wire size): protobuf-c has no nesting limit, so a small hostile
 * message cannot make the peer allocate without bound.
 *
 * Threading follows rpc.h: a client service belongs to its channel's
 * worker; its closures run from zcrpc_worker_progress().
 *
 * Metadata (zcrpc_md, rpc.h's limits: 16 pairs and 2 KiB per message in
 * all) goes both ways on the closure path as on the raw API: a client
 * sends request metadata with zcrpc_pb_client_set_opts() and reads the
 * reply's initial and trailing metadata with zcrpc_pb_get_last_md() (or
 * zcrpc_pb_get_reply_md(), also in a zcrpc_pb_done_fn); a handler reads
 * the request's with zcrpc_pb_server_get_request() and sets the reply's
 * with zcrpc_pb_set_reply_md() before its closure.
 */
#ifndef ZCRPC_PB_H
#define ZCRPC_PB_H

#include <protobuf-c/protobuf-c.h>

#include "zcrpc/export.h"
#include "zcrpc/rpc.h"
#include "zcrpc/status.h"
#include "zcrpc/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Fixed part of the unpack budget, in bytes (64 MiB). */
#define ZCRPC_PB_UNPACK_BUDGET ((size_t)64 << 20)

/* ---- client ------------------------------------------------------------- */

/**
 * zcrpc_pb_client_create - a ProtobufCService for descriptor @d whose
 * invoke() calls the method over @ch, so protoc-c's generated stubs
 * (foo__bar(service, &req, closure, closure_data)) work unchanged.
 *
 * Each invoke starts one asynchronous call and returns. The closure runs
 * exactly once, from a later zcrpc_worker_progress() of @ch's worker, with
 * the unpacked reply (valid only during the closure: it is freed when the
 * closure returns) or with NULL on any failure; zcrpc_pb_get_last_status()
 * tells why. When the call cannot even start (RESOURCE_EXHAUSTED,
 * INVALID_ARGUMENT, ...) the closure runs with NULL before invoke returns.
 *
 * @ch must outlive the service. protobuf_c_service_destroy() (or @out's
 * destroy) frees the service; calls still in flight keep it alive until
 * they complete (destroying @ch completes them with CANCELLED).
 * Errors: INVALID_ARGUMENT (NULL arguments, @d not a service descriptor or
 * one without names: protoc-c writes none with optimize_for = CODE_SIZE),
 * RESOURCE_EXHAUSTED.
 */
ZCRPC_API zcrpc_status zcrpc_pb_client_create(zcrpc_channel *ch,
					      const ProtobufCServiceDescriptor *d,
					      ProtobufCService **out);

/**
 * zcrpc_pb_client_set_opts - call options for the calls @svc starts from
 * now on (deadline, metadata, attachments, max_reply). The struct is
 * copied; what it points to (metadata, attachment, reply_into) must stay
 * valid while calls use it. NULL restores the defaults. Errors:
 * INVALID_ARGUMENT (@svc not made by zcrpc_pb_client_create()).
 */
ZCRPC_API zcrpc_status zcrpc_pb_client_set_opts(ProtobufCService *svc,
						const zcrpc_call_opts *o);

/**
 * zcrpc_pb_get_last_status - the status of the call of @svc that completed
 * last (ZCRPC_OK before any): inside a closure, that closure's call. On
 * closure(NULL) this is the server's status (UNIMPLEMENTED, INTERNAL, ...),
 * DEADLINE_EXCEEDED, UNAVAILABLE, RESOURCE_EXHAUSTED (reply above
 * max_reply, or above the unpack budget), or INTERNAL when the reply does
 * not unpack. *@message (may be NULL) gets its message, owned by @svc and
 * valid until the next call of @svc completes. UNKNOWN when @svc was not
 * made by zcrpc_pb_client_create().
 */
ZCRPC_API zcrpc_status zcrpc_pb_get_last_status(const ProtobufCService *svc,
					    const char **message);

/**
 * zcrpc_pb_get_last_md - the reply metadata of the call of @svc that
 * completed last (as zcrpc_pb_get_last_status(): inside a closure, that
 * closure's call): the server's initial metadata in *@initial, *@n_initial
 * and its trailing metadata in *@trailing, *@n_trailing (each pointer may
 * be NULL; NULL and 0 for none). Also on closure(NULL): a server's error
 * reply carries metadata too; a call that failed at the client (could not
 * start, deadline, ...) has none. Copies owned by @svc, valid as long as
 * the last status message is: until the next call of @svc completes (or
 * @svc is destroyed). Worker thread, as the closures. Errors:
 * INVALID_ARGUMENT (@svc not made by zcrpc_pb_client_create(); the outputs
 * then read none).
 */
ZCRPC_API zcrpc_status zcrpc_pb_get_last_md(const ProtobufCService *svc,
					    const zcrpc_md **initial,
					    size_t *n_initial,
					    const zcrpc_md **trailing,
					    size_t *n_trailing);

/**
 * zcrpc_pb_get_reply_md - inside a completion the glue runs on this thread
 * (a zcrpc_pb_done_fn of zcrpc_pb_call_async(), what the generated typed
 * asynchronous stubs use, or a closure of a zcrpc_pb_client_create()
 * service): the metadata of the reply it completes, as
 * zcrpc_pb_get_last_md() gives it. The pointers are the library's, valid
 * only during that callback (copy what you keep): zero-copy. Errors:
 * FAILED_PRECONDITION outside such a callback (the outputs then read
 * none). zcrpc_pb_done_fn keeps its shape (ABI): this getter is how its
 * callbacks reach the metadata.
 */
ZCRPC_API zcrpc_status zcrpc_pb_get_reply_md(const zcrpc_md **initial,
					     size_t *n_initial,
					     const zcrpc_md **trailing,
					     size_t *n_trailing);

/* ---- calls by message (what generated typed stubs use) ------------------- */

/** Any function, passed through to a zcrpc_pb_done_fn untouched. */
typedef void (*zcrpc_pb_fn)(void);

/** Completion of zcrpc_pb_call_async(): runs once, from progress. @reply is
 * NULL unless @status is OK and is freed when the callback returns;
 * @message is "" on OK. @fn and @arg are what the call was given. */
typedef void (*zcrpc_pb_done_fn)(zcrpc_status status, const char *message,
				 const ProtobufCMessage *reply, zcrpc_pb_fn fn,
				 void *arg);

/**
 * zcrpc_pb_call_async - call @method with @req packed straight into
 * registered memory; the reply is unpacked as @reply_desc (budgeted) and
 * handed to @done. @req may be freed when this returns. Errors as
 * zcrpc_call_start() (then @done never runs).
 */
ZCRPC_API zcrpc_status zcrpc_pb_call_async(zcrpc_channel *ch, uint32_t method,
					   const ProtobufCMessage *req,
					   const ProtobufCMessageDescriptor *reply_desc,
					   const zcrpc_call_opts *o,
					   zcrpc_pb_done_fn done, zcrpc_pb_fn fn,
					   void *arg, zcrpc_call_id *id);

/**
 * zcrpc_pb_call - call and wait (zcrpc_call(): the request is packed and
 * copied once; FAILED_PRECONDITION from inside a callback of the
 * channel's worker). Returns the call's status. On OK *@reply is the
 * unpacked reply, the caller's: free it with
 * protobuf_c_message_free_unpacked(*reply, NULL) (or the generated
 * foo__free_unpacked(..., NULL)); otherwise *@reply is NULL and *@message
 * (may be NULL) a heap string the caller frees with free(). A reply
 * attachment is kept only when it lands in o->reply_into.
 */
ZCRPC_API zcrpc_status zcrpc_pb_call(zcrpc_channel *ch, uint32_t method,
				     const ProtobufCMessage *req,
				     const ProtobufCMessageDescriptor *reply_desc,
				     const zcrpc_call_opts *o,
				     ProtobufCMessage **reply, char **message);

/* ---- server ------------------------------------------------------------- */

/**
 * zcrpc_pb_server_register - serve every method of @svc (for instance a
 * static `Foo__Bar_Service impl = FOO__BAR__INIT(my_)`) on @s as
 * "/pkg.Service/Method". @svc must outlive @s.
 *
 * For each request the handler unpacks it (budgeted allocator; a payload
 * that does not unpack is answered INTERNAL, one beyond the budget
 * RESOURCE_EXHAUSTED, and the connection stays),
 * refuses a method whose handler slot is NULL with UNIMPLEMENTED, then
 * calls svc->invoke(svc, index, request, closure, closure_data). The
 * handler calls closure(reply, closure_data) exactly once — inside the
 * handler, or later from any thread (on another thread than the worker's
 * the reply goes through zcrpc_server_call_reply_any_thread()). The request
 * message stays valid until then, and is freed after it; the reply is
 * packed and copied, so the handler keeps ownership of it. closure_data is
 * an opaque handle, not a pointer: a closure called again (or with a
 * closure_data that names no call in progress) is ignored and counted
 * (zcrpc_pb_server_get_closures_ignored()), from any thread.
 * closure(NULL, closure_data) answers with the status set by
 * zcrpc_pb_set_status(), INTERNAL by default (zcrpc_pb_reply_error() does
 * both). A closure never called leaks the call, as a zcrpc handler that
 * never replies does. The handler's own state: zcrpc_pb_server_register_opts()
 * gives it a context pointer (zcrpc_pb_server_get_ctx()).
 *
 * Errors: INVALID_ARGUMENT (also for a descriptor without names, as
 * protoc-c writes with optimize_for = CODE_SIZE), and
 * zcrpc_server_register()'s: ALREADY_EXISTS
 * (a method's name or id is taken), RESOURCE_EXHAUSTED. On an error the
 * methods registered before the failing one stay registered.
 */
ZCRPC_API zcrpc_status zcrpc_pb_server_register(zcrpc_server *s,
						ProtobufCService *svc);

/**
 * A registration with options for zcrpc_pb_server_register_opts(). Zero
 * it, set @size to sizeof(zcrpc_pb_server_opts), then @service and what
 * else is wanted.
 */
typedef struct zcrpc_pb_server_opts {
	size_t size; /**< sizeof(zcrpc_pb_server_opts) */
	ProtobufCService *service; /**< served as zcrpc_pb_server_register() */
	/** Handed to the handlers: zcrpc_pb_server_get_ctx(closure_data). */
	void *ctx;
	/** The indices of the methods to serve (as
	 * zcrpc_pb_server_register_methods()), read during the registration
	 * only; NULL: every method. */
	const unsigned *methods;
	size_t n_methods;
	/* New fields go here (0 must mean the old behaviour: docs/abi.md). */
} zcrpc_pb_server_opts;

/**
 * zcrpc_pb_server_register_opts - zcrpc_pb_server_register() (or
 * _register_methods() with @o->methods) of @o->service, whose handlers get
 * @o->ctx from zcrpc_pb_server_get_ctx(). @o is not copied: the glue
 * reads it at each call (zcrpc_server_register() has one pointer per
 * method and no destructor, so the glue keeps nothing of its own that
 * would outlive the server), so it must stay valid and unchanged while @s
 * lives, as the service does (a static, or a member of the state @ctx
 * points to). Errors as zcrpc_pb_server_register_methods();
 * INVALID_ARGUMENT also for a NULL @o or a @size below this layout's.
 */
ZCRPC_API zcrpc_status zcrpc_pb_server_register_opts(zcrpc_server *s,
						     const zcrpc_pb_server_opts *o);

/**
 * zcrpc_pb_server_get_ctx - inside a handler of a registered service: the
 * ctx of its zcrpc_pb_server_opts (NULL for one registered by
 * zcrpc_pb_server_register() or _register_methods(), and once the closure
 * ran). Any thread while the call is in the handler's hands.
 */
ZCRPC_API void *zcrpc_pb_server_get_ctx(const void *closure_data);

/**
 * zcrpc_pb_set_reply_md - inside a handler of a registered service: the
 * reply's initial metadata (@initial, @n_initial) and trailing metadata
 * (@trailing, @n_trailing), sent with the reply the following closure
 * makes: closure(message) and closure(NULL) alike (an error reply carries
 * metadata too). Both lists are copied now (the caller's memory may go
 * when this returns); a second call replaces both. From any thread that
 * holds the call, as the closure may be called from any thread (off the
 * worker's, the reply and its metadata travel through
 * zcrpc_server_call_reply_any_thread_opts()). Errors: INVALID_ARGUMENT
 * (@closure_data names no call in progress, a count without its list, a
 * pair rpc.h does not allow, or both lists together beyond rpc.h's limits
 * of 16 pairs and 2 KiB), RESOURCE_EXHAUSTED; after an error the previous
 * metadata stays.
 */
ZCRPC_API zcrpc_status zcrpc_pb_set_reply_md(void *closure_data,
					     const zcrpc_md *initial,
					     size_t n_initial,
					     const zcrpc_md *trailing,
					     size_t n_trailing);

/**
 * zcrpc_pb_reply_error - inside a handler of a registered service, instead
 * of its closure: answers the call with @status and @message (copied; may
 * be NULL), as zcrpc_pb_set_status() then closure(NULL, @closure_data)
 * would (so OK is answered INTERNAL: reply OK with the closure and a
 * message). The call's metadata (zcrpc_pb_set_reply_md()) goes with it.
 * Counts as the closure: the handle is spent, a later closure (or a second
 * reply_error) is ignored and counted. Any thread, as the closure.
 */
ZCRPC_API void zcrpc_pb_reply_error(void *closure_data, zcrpc_status status,
				    const char *message);

/**
 * zcrpc_pb_set_status - inside a handler of a registered service: the
 * status (and message, copied; may be NULL) a following
 * closure(NULL, @closure_data) answers with. Ignored when @status is OK.
 */
ZCRPC_API void zcrpc_pb_set_status(void *closure_data, zcrpc_status status,
				   const char *message);

/**
 * zcrpc_pb_set_reply_attachment - inside a handler of a registered service:
 * send @attachment (registered memory, sent in place by RDMA WRITE) with
 * the reply the following closure(message) makes; the caller receives it as
 * the reply's attachment. Keep the memory unchanged until @on_done(@ctx,
 * status) runs (may be NULL). The closure must then run on the worker's
 * thread. Errors: INVALID_ARGUMENT.
 */
ZCRPC_API zcrpc_status zcrpc_pb_set_reply_attachment(
	void *closure_data, const zcrpc_bulk *attachment,
	void (*on_done)(void *ctx, zcrpc_status st), void *ctx);

/**
 * zcrpc_pb_server_get_request - inside a handler of a registered service: the
 * zcrpc request behind @closure_data (metadata, deadline, attachment),
 * valid and unchanged until the closure runs, also when the closure runs
 * later or from another thread (it belongs to the call). NULL once the
 * closure ran.
 */
ZCRPC_API const zcrpc_request *zcrpc_pb_server_get_request(const void *closure_data);

/** zcrpc_pb_server_get_call - the zcrpc call behind @closure_data, e.g. for
 * zcrpc_server_call_cancelled(); valid until the closure runs. */
ZCRPC_API zcrpc_server_call *zcrpc_pb_server_get_call(const void *closure_data);

/** zcrpc_pb_server_get_closures_ignored - closure calls ignored so far in this
 * process because their closure_data named no call in progress (a closure
 * called twice). Any thread. */
ZCRPC_API uint64_t zcrpc_pb_server_get_closures_ignored(void);

/* ---- streams of messages (zcrpc/stream.h; what generated stubs use) ------
 *
 * A streaming method's messages are protobuf-c messages, one per stream
 * message: written packed straight into registered memory, received
 * unpacked with the budgeted allocator above. Everything else (windows,
 * half-close, pause, metadata, the stream's user pointer) is the raw
 * stream's: the callbacks get the zcrpc_stream, and every zcrpc_stream_*
 * function works on it, under stream.h's rules (worker thread only).
 */

/**
 * zcrpc_pb_stream_write - zcrpc_stream_write() of @msg, packed straight
 * into the frame's registered memory (zcrpc_stream_write_fill()). @msg
 * stays the caller's; it may be freed when this returns. Errors as
 * zcrpc_stream_write(): INVALID_ARGUMENT also for a NULL @msg and for a
 * message whose packed size is above zcrpc_stream_max_message().
 */
ZCRPC_API zcrpc_status zcrpc_pb_stream_write(zcrpc_stream *s,
					     const ProtobufCMessage *msg);

/**
 * zcrpc_pb_stream_unpack - unpack the @len bytes at @data (a stream's
 * message, never read beyond) as @desc with the budgeted allocator
 * (ZCRPC_PB_UNPACK_BUDGET plus twice @len). OK: *@out is the message, the
 * caller's: free it with protobuf_c_message_free_unpacked(*out, NULL).
 * Otherwise *@out is NULL and the status is INTERNAL (the bytes are not
 * that message), RESOURCE_EXHAUSTED (beyond the budget) or
 * INVALID_ARGUMENT (NULL arguments, @desc not a message descriptor).
 */
ZCRPC_API zcrpc_status zcrpc_pb_stream_unpack(const ProtobufCMessageDescriptor *desc,
					      const void *data, size_t len,
					      ProtobufCMessage **out);

/** A typed on_message as the glue calls it: @msg is the unpacked message
 * (the library's, freed when the callback returns), @fn and @arg what the
 * handlers gave (on_message_fn, arg). Generated stubs cast @fn back to the
 * method's typed callback. */
typedef void (*zcrpc_pb_stream_msg_fn)(zcrpc_stream *s,
				       const ProtobufCMessage *msg,
				       zcrpc_pb_fn fn, void *arg);

/**
 * The callbacks of a stream of protobuf-c messages: those of
 * zcrpc_stream_handlers, with on_message given the message unpacked as
 * @in. Zero the struct, set @size to sizeof(zcrpc_pb_stream_handlers),
 * then the ones wanted; a NULL callback is skipped.
 *
 * A message that does not unpack as @in (or exceeds the unpack budget)
 * reaches no on_message and ends the stream: a server's stream is
 * finished with INTERNAL (RESOURCE_EXHAUSTED beyond the budget) and
 * "message does not unpack as <type>", which the client's on_finish
 * reads and the server's on_finish reads too; a client's stream is
 * cancelled (the server's on_finish reads CANCELLED) and its own on_finish
 * reads INTERNAL (or RESOURCE_EXHAUSTED) with that message instead of
 * CANCELLED. Messages after it are not delivered.
 */
typedef struct zcrpc_pb_stream_handlers {
	size_t size; /**< sizeof(zcrpc_pb_stream_handlers) */
	/** The type of the messages that arrive (a client's replies, a
	 * server's requests). Required. */
	const ProtobufCMessageDescriptor *in;
	/** Server: as zcrpc_stream_handlers.on_open (optional here). */
	void (*on_open)(zcrpc_stream *s, const zcrpc_stream_open *open,
			void *arg);
	/** Client: the server's initial metadata. */
	void (*on_headers)(zcrpc_stream *s, const zcrpc_md *md, size_t n_md,
			   void *arg);
	zcrpc_pb_stream_msg_fn on_message;
	zcrpc_pb_fn on_message_fn; /**< passed to on_message untouched */
	/** Server: the client half-closed. */
	void (*on_half_close)(zcrpc_stream *s, void *arg);
	void (*on_writable)(zcrpc_stream *s, void *arg);
	/** The last callback, always run once (required on a client). */
	void (*on_finish)(zcrpc_stream *s, const zcrpc_stream_end *end,
			  void *arg);
	void *arg;
	/* New fields go here (NULL must mean the old behaviour). */
} zcrpc_pb_stream_handlers;

/**
 * zcrpc_pb_stream_start - zcrpc_stream_start() of @method on @ch with the
 * typed callbacks @h (copied). *@out is the stream, the library's until
 * on_finish returns; write with zcrpc_pb_stream_write(), half-close with
 * zcrpc_stream_close_send(). Errors as zcrpc_stream_start() (nothing
 * starts, no callback runs): INVALID_ARGUMENT also for a NULL @h->in or
 * on_finish, RESOURCE_EXHAUSTED without memory.
 */
ZCRPC_API zcrpc_status zcrpc_pb_stream_start(zcrpc_channel *ch, uint32_t method,
					     const zcrpc_stream_opts *o,
					     const zcrpc_pb_stream_handlers *h,
					     zcrpc_stream **out);

/**
 * zcrpc_pb_server_register_stream - zcrpc_server_register_stream() of
 * @full_name ("/pkg.Service/Method") with the typed callbacks @h. @h is
 * not copied: it must stay valid and unchanged while @s lives (as a
 * service given to zcrpc_pb_server_register() does). Answer with
 * zcrpc_pb_stream_write() and zcrpc_stream_finish(). Errors as
 * zcrpc_server_register_stream(); INVALID_ARGUMENT also for a NULL
 * @h->in.
 */
ZCRPC_API zcrpc_status zcrpc_pb_server_register_stream(zcrpc_server *s,
						       const char *full_name,
						       const zcrpc_pb_stream_handlers *h);

/**
 * zcrpc_pb_server_register_methods - zcrpc_pb_server_register() of the
 * @n methods of @svc whose indices are in @methods only (the unary
 * methods of a service that also has streaming ones, which protoc-c's
 * service cannot serve). Errors as zcrpc_pb_server_register();
 * INVALID_ARGUMENT also for an index beyond the service's methods.
 */
ZCRPC_API zcrpc_status zcrpc_pb_server_register_methods(zcrpc_server *s,
							ProtobufCService *svc,
							const unsigned *methods,
							size_t n);

#ifdef __cplusplus
}
#endif

#endif /* ZCRPC_PB_H */
