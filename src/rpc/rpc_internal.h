/* zcrpc — what every file of the RPC layer shares: the seam to the
 * transport, the call table, the bulk cache, building frames into pool
 * slots (rpc_util.c). */
#ifndef ZCRPC_RPC_INTERNAL_H
#define ZCRPC_RPC_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "../core/abi.h"
#include "../core/limits.h"
#include "../transport/seam.h"
#include "bulk_cache.h"
#include "call_table.h"
#include "frame.h"
#include "zcrpc/rpc.h"
#include "zcrpc/transport.h"

/* ---- rpc_util.c ----------------------------------------------------------- */

/* Frame + metadata + inline payload in a pool slot, ready to send. */
struct zcrpc__out {
	zcrpc_msg msg;
	size_t len;
};

/* Builds a frame in a fresh pool slot: header @f (md_len and payload_len
 * are filled in), metadata @md, then @plen payload bytes written by @fill
 * (or copied from @payload). RESOURCE_EXHAUSTED when the pool is empty,
 * INVALID_ARGUMENT when it does not fit a message or the metadata breaks
 * the limits. */
zcrpc_status zcrpc__out_build(zcrpc_worker *w, struct zcrpc_frame *f,
			      const zcrpc_md *md, size_t n_md, size_t plen,
			      zcrpc_fill_fn fill, void *fill_ctx,
			      const void *payload, struct zcrpc__out *out);

/* Bytes of metadata encoding, or (size_t)-1 when invalid. */
size_t zcrpc__md_bytes(const zcrpc_md *md, size_t n);

/* Decodes @f's metadata into @out (ZCRPC_MD_MAX_PAIRS entries). */
size_t zcrpc__md_view(const struct zcrpc_frame *f, zcrpc_md *out);

/* Hands the frames of one received message to @fn in order: the one
 * frame, or on a connection that takes batches (docs/protocol.md §8,
 * Batches) each of them; stops once @conn is closing (a frame's handling
 * broke it off). Returns OK, or INVALID_ARGUMENT with @why for a frame
 * that does not decode (the caller closes the connection; the frames
 * before it were handed over). */
zcrpc_status zcrpc__frames_each(zcrpc_conn *conn, const void *data, size_t len,
				void (*fn)(void *arg, const struct zcrpc_frame *f),
				void *arg, char *why, size_t why_len);

/* A frame in flight, queued until the connection takes it. */
struct zcrpc__qframe {
	struct zcrpc__qframe *next;
	struct zcrpc__out out;
};

#endif /* ZCRPC_RPC_INTERNAL_H */
