/* zcrpc — metadata copies: a list of zcrpc_md pairs and their bytes in one
 * allocation. Used by zcrpc_call()'s results, replies made from other
 * threads, and the protobuf-c glue (compiled into libzcrpc_pb as well). */
#ifndef ZCRPC_CORE_MD_H
#define ZCRPC_CORE_MD_H

#include <stddef.h>

#include "zcrpc/rpc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One allocation holding the @n pairs of @md and their bytes (free() it),
 * or NULL: when @n is 0, and when memory runs out (tell them apart by
 * @n). */
zcrpc_md *zcrpc__md_dup(const zcrpc_md *md, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* ZCRPC_CORE_MD_H */
