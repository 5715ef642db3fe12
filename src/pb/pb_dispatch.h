/* protobuf-c glue internals: the pure part of the server's dispatch, which
 * needs no connection (and is what tests/fuzz/fuzz_pb.c feeds hostile bytes
 * to): finding the method a request names, and unpacking its payload with
 * the budgeted allocator of pb_internal.h. */
#ifndef ZCRPC_PB_DISPATCH_H
#define ZCRPC_PB_DISPATCH_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "zcrpc/status.h"

#include "pb_internal.h"

/* The index in @d of the method whose zcrpc id (zcrpc__pb_method_id) is
 * @method_id, or -1 when there is none (the caller replies UNIMPLEMENTED). */
int zcrpc__pb_find_method(const ProtobufCServiceDescriptor *d,
			  uint32_t method_id);

/* Unpacks @len bytes at @data (never read beyond) as the input message of
 * method @mi of @d, with @pa set up here for @len bytes on the wire. Returns
 * the message, owned by the caller and freed with
 * protobuf_c_message_free_unpacked(msg, &pa->a); or NULL with *@st set to
 * RESOURCE_EXHAUSTED (the unpack budget was exceeded) or INTERNAL (the
 * bytes are not that message) and a reason in @why (@why_len bytes, may be
 * NULL). */
ProtobufCMessage *zcrpc__pb_unpack_request(const ProtobufCServiceDescriptor *d,
					   unsigned mi, const void *data,
					   size_t len, struct zcrpc__pb_alloc *pa,
					   zcrpc_status *st, char *why,
					   size_t why_len);

#endif /* ZCRPC_PB_DISPATCH_H */
