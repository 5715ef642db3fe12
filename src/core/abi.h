/* zcrpc — the one ABI rule for structs that cross the public API
 * (docs/abi.md), as two helpers every entry point uses, and the table of
 * the oldest layout each in-struct may have.
 *
 * In-structs (options, handlers) start with `size_t size`, set by their
 * _init() to the caller's sizeof. The library starts from its defaults,
 * copies min(size, sizeof) bytes over them, and refuses a size below the
 * struct's minimum (no release had such a layout: the struct was not
 * initialised) or bytes past its own sizeof that are not zero (a newer
 * caller set a field this library does not know).
 * Out-structs (stats, zcrpc_result) are written through a size the caller
 * passes: the library never writes more than that many bytes.
 */
#ifndef ZCRPC_CORE_ABI_H
#define ZCRPC_CORE_ABI_H

#include <stddef.h>

#include "zcrpc/rpc.h"
#include "zcrpc/stream.h"
#include "zcrpc/status.h"
#include "zcrpc/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes from the start of @T to the end of its member @F: the size of a
 * layout that ended with @F. */
#define ZCRPC__LAYOUT_END(T, F) (offsetof(T, F) + sizeof(((T *)0)->F))

/* The smallest size each in-struct may carry: the oldest layout the
 * library accepts. Once a release is tagged these never grow (docs/abi.md);
 * each is the layout the library already accepted before the rule. */
#define ZCRPC__MIN_WORKER_OPTS	 offsetof(zcrpc_worker_opts, pool_max_slots)
#define ZCRPC__MIN_CONN_HANDLERS offsetof(zcrpc_conn_handlers, on_write_done)
#define ZCRPC__MIN_CONNECT_OPTS	 offsetof(zcrpc_connect_opts, recv_depth)
#define ZCRPC__MIN_LISTEN_OPTS	 offsetof(zcrpc_listen_opts, recv_depth)
#define ZCRPC__MIN_CHANNEL_OPTS	 ZCRPC__LAYOUT_END(zcrpc_channel_opts, identity)
#define ZCRPC__MIN_CALL_OPTS	 ZCRPC__LAYOUT_END(zcrpc_call_opts, max_reply)
#define ZCRPC__MIN_SERVER_OPTS                                                 \
	ZCRPC__LAYOUT_END(zcrpc_server_opts, idle_release_ms)
#define ZCRPC__MIN_REPLY_OPTS ZCRPC__LAYOUT_END(zcrpc_reply_opts, ctx)
/* zcrpc_result is an out-struct with a minimum: zcrpc_call() must be able
 * to store the status, message and payload. */
#define ZCRPC__MIN_STREAM_HANDLERS ZCRPC__LAYOUT_END(zcrpc_stream_handlers, arg)
#define ZCRPC__MIN_STREAM_OPTS ZCRPC__LAYOUT_END(zcrpc_stream_opts, n_md)
#define ZCRPC__MIN_RESULT ZCRPC__LAYOUT_END(zcrpc_result, attachment_len)

/*
 * zcrpc__abi_in - read the caller's in-struct @src (whose first member is
 * `size_t size`) into the library's @dst of @dst_size bytes, which already
 * holds the defaults: copies min(src->size, @dst_size) bytes, keeps the
 * defaults of the fields an older caller's struct ends before, and sets
 * dst's size to @dst_size. INVALID_ARGUMENT, with @dst untouched, when
 * src->size is below @min_size or a byte past @dst_size is not zero.
 */
zcrpc_status zcrpc__abi_in(void *dst, size_t dst_size, const void *src,
			   size_t min_size);

/*
 * zcrpc__abi_out - copy the library's @src (@src_size bytes, its sizeof)
 * into the caller's out-struct @dst, whose size the caller gave as
 * @dst_size: at most that many bytes are written (an older caller's
 * shorter struct gets the fields it knows). Returns the bytes written.
 */
size_t zcrpc__abi_out(void *dst, size_t dst_size, const void *src,
		      size_t src_size);

/*
 * zcrpc__abi_sized_init - zero the first min(@dst_size, @lib_size) bytes of
 * a struct whose first member is `size_t size` and store that count in it:
 * for zcrpc_result (through the caller's size) and for the views the
 * library hands to callbacks (zcrpc_reply, zcrpc_request: its own sizeof),
 * so a reader can tell which fields the library filled. Returns the count.
 */
size_t zcrpc__abi_sized_init(void *dst, size_t dst_size, size_t lib_size);

/*
 * zcrpc__abi_init - what every in-struct's _init_sized() ends with: the
 * library's defaults @defaults (@lib_size bytes) into the caller's struct
 * of @dst_size bytes (the caller's sizeof, passed by the inline _init() of
 * its header): at most @dst_size bytes are written, bytes past @lib_size
 * (a newer caller's fields) are zeroed, and dst's size is set to
 * @dst_size. A @dst_size too small to hold the size member writes nothing.
 */
void zcrpc__abi_init(void *dst, size_t dst_size, const void *defaults,
		     size_t lib_size);

/* The usual calls: @dst and @src are the library's own full structs. */
#define ZCRPC__ABI_IN(dst, src, min)                                           \
	zcrpc__abi_in((dst), sizeof(*(dst)), (src), (min))
#define ZCRPC__ABI_OUT(dst, dst_size, src)                                     \
	zcrpc__abi_out((dst), (dst_size), (src), sizeof(*(src)))

#ifdef __cplusplus
}
#endif

#endif /* ZCRPC_CORE_ABI_H */
