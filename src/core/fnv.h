/* zcrpc — the method-id hash: 32-bit FNV-1a. It is part of the wire format
 * (docs/protocol.md §7: a REQUEST names its method by the FNV-1a of
 * "/package.Service/Method"), so the library, the protobuf-c glue and
 * zcrpc-gen all hash with this one definition. */
#ifndef ZCRPC_CORE_FNV_H
#define ZCRPC_CORE_FNV_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* FNV-1a's 32-bit offset basis: the hash of "". */
#define ZCRPC__FNV1A_BASIS 2166136261u

/* @h (a hash so far, ZCRPC__FNV1A_BASIS to start) continued over the bytes
 * of the NUL-terminated @s, each taken unsigned. Hashing "ab" then "c"
 * gives the hash of "abc", so a name can be hashed in pieces without
 * building it. */
uint32_t zcrpc__fnv1a_more(uint32_t h, const char *s);

/* 32-bit FNV-1a of the NUL-terminated @s (a method's
 * "/package.Service/Method"). */
uint32_t zcrpc__fnv1a(const char *s);

#ifdef __cplusplus
}
#endif

#endif /* ZCRPC_CORE_FNV_H */
