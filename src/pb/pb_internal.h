/* protobuf-c glue internals: the budgeted unpack allocator. */
#ifndef ZCRPC_PB_INTERNAL_H
#define ZCRPC_PB_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

/* A malloc-backed ProtobufCAllocator that hands out at most @budget bytes
 * in all. Messages unpacked with it may be freed with NULL (malloc/free). */
struct zcrpc__pb_alloc {
	ProtobufCAllocator a;
	size_t budget, used;
	int refused; /* an allocation was refused for the budget */
};

/* Sets @pa up for a message of @wire_len bytes on the wire. */
void zcrpc__pb_alloc_init(struct zcrpc__pb_alloc *pa, size_t wire_len);

/* The zcrpc method name "/pkg.Service/Method" hashed like
 * zcrpc_method_id() without building the string. */
uint32_t zcrpc__pb_method_id(const ProtobufCServiceDescriptor *d, unsigned i);

#endif /* ZCRPC_PB_INTERNAL_H */
