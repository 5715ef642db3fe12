/* zcrpc — RPC layer internals (channel.c, server.c, bulk.c, rpc_util.c). */
#ifndef ZCRPC_RPC_INTERNAL_H
#define ZCRPC_RPC_INTERNAL_H

#include <stdint.h>

#include "../transport/internal.h"
#include "frame.h"
#include "zcrpc/rpc.h"

/* Call references on the wire: index (20 bits) | generation (12 bits),
 * generations start at 1, so 0 never names a call. */
#define ZCRPC_REF(idx, gen) (((uint32_t)(gen) << 20) | (uint32_t)(idx))
#define ZCRPC_REF_IDX(r) ((r)&0xfffffU)
#define ZCRPC_REF_GEN(r) ((r) >> 20)
#define ZCRPC_MAX_CALL_TABLE (1U << 20)

/* ---- bulk.c: registered buffers for RDMA-write payloads ----------------- */

#define ZCRPC_BULK_MIN_SHIFT 16 /* 64 KiB */
#define ZCRPC_BULK_CLASSES 17	/* up to 4 GiB */

struct zcrpc__bulkbuf {
	struct zcrpc__bulkbuf *next;
	void *ptr;
	size_t cap;
	unsigned cls;
	zcrpc_mr *mr; /* registered with ZCRPC_MR_REMOTE_WRITE */
};

struct zcrpc__bulk_cache {
	zcrpc_context *ctx;
	struct zcrpc__bulkbuf *free[ZCRPC_BULK_CLASSES];
	size_t total, limit; /* bytes registered, and the cap */
};

void zcrpc__bulk_init(struct zcrpc__bulk_cache *c, zcrpc_context *ctx,
		      size_t limit);
zcrpc_status zcrpc__bulk_get(struct zcrpc__bulk_cache *c, size_t len,
			     struct zcrpc__bulkbuf **out);
void zcrpc__bulk_put(struct zcrpc__bulk_cache *c, struct zcrpc__bulkbuf *b);
void zcrpc__bulk_fini(struct zcrpc__bulk_cache *c);

/* The byte count the WRITE WITH IMMEDIATE of a @len-byte part carries when
 * the writer splits at @piece (zcrpc_conn_write_piece): @len itself, or the
 * remainder after the full pieces. What a receiver checks (protocol §5). */
size_t zcrpc__bulk_last_piece(size_t len, size_t piece);

/* Zeroes the first @len bytes of a grant target at @p when a @len-byte part
 * would be split at @piece: only the last piece's byte count can be checked,
 * so bytes the writer skipped must not show what the memory held before. */
void zcrpc__bulk_scrub(void *p, size_t len, size_t piece);

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

/* A frame in flight, queued until the connection takes it. */
struct zcrpc__qframe {
	struct zcrpc__qframe *next;
	struct zcrpc__out out;
};

#endif /* ZCRPC_RPC_INTERNAL_H */
