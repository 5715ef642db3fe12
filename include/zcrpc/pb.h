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
 */
#ifndef ZCRPC_PB_H
#define ZCRPC_PB_H

#include <protobuf-c/protobuf-c.h>

#include "zcrpc/export.h"
#include "zcrpc/rpc.h"
#include "zcrpc/status.h"

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
 * zcrpc_pb_set_status(), INTERNAL by default. A closure never called
 * leaks the call, as a zcrpc handler that never replies does.
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

#ifdef __cplusplus
}
#endif

#endif /* ZCRPC_PB_H */
