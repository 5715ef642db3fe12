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

/* 1 when the @na pairs of @a and the @nb of @b fit in one frame together
 * (docs/protocol.md §7: at most 16 pairs and 2 KiB encoded, keys of 1 to
 * 255 bytes, values up to 64 KiB - 1, no NULL with a length), else 0. */
int zcrpc__md_fits(const zcrpc_md *a, size_t na, const zcrpc_md *b,
		   size_t nb);

#ifdef __cplusplus
}
#endif

#endif /* ZCRPC_CORE_MD_H */
