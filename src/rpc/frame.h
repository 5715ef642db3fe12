/* zcrpc — RPC frames. Every RPC message is one transport DATA message whose
 * payload starts with this 64-byte header (all fields little-endian);
 * metadata and the inline payload follow it. docs/protocol.md §7 is the
 * normative description.
 *
 *   0               1               2               3
 *   0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
 *  +-------------------------------+---------------+---------------+
 *  |        magic "zr" (7a 72)     |    version    |     type      |  0
 *  +-------------------------------+---------------+---------------+
 *  |             flags             |      metadata length          |  4
 *  +-------------------------------+-------------------------------+
 *  |                          call id                              |  8
 *  +---------------------------------------------------------------+
 *  |  count: WINDOW's messages, a REPLY's initial md pairs; else 0 | 12
 *  +---------------------------------------------------------------+
 *  |                         method id                             | 16
 *  +---------------------------------------------------------------+
 *  |                  status (REPLY, else 0)                       | 20
 *  +---------------------------------------------------------------+
 *  |                    inline payload length                      | 24
 *  +---------------------------------------------------------------+
 *  |        remaining deadline, microseconds (REQUEST; 0 = none)   | 28
 *  +---------------------------------------------------------------+
 *  |                     bulk address (64 bits)                    | 32
 *  |                                                               | 36
 *  +---------------------------------------------------------------+
 *  |                     bulk length (64 bits)                     | 40
 *  |                                                               | 44
 *  +---------------------------------------------------------------+
 *  |                     bulk rkey                                 | 48
 *  +---------------------------------------------------------------+
 *  |                     bulk token                                | 52
 *  +---------------------------------------------------------------+
 *  |                     reserved (0, 64 bits)                     | 56
 *  |                                                               | 60
 *  +---------------------------------------------------------------+
 *  |  metadata (metadata length bytes) | inline payload ...        | 64
 */
#ifndef ZCRPC_RPC_FRAME_H
#define ZCRPC_RPC_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "zcrpc/status.h"

#include "../core/fnv.h" /* the method id of a REQUEST: zcrpc__fnv1a() */

#ifdef __cplusplus
extern "C" {
#endif

#define ZCRPC_FRAME_MAGIC 0x727aU /* bytes 'z' 'r' */
#define ZCRPC_FRAME_VERSION 1
#define ZCRPC_FRAME_HDR_LEN 64
#define ZCRPC_MD_MAX_PAIRS 16
#define ZCRPC_MD_MAX_LEN 2048
#define ZCRPC_BULK_MAX (1ULL << 32) /* 4 GiB per call */

enum zcrpc_frame_type {
	ZCRPC_FRAME_REQUEST = 1,    /* client -> server: a call */
	ZCRPC_FRAME_REPLY = 2,	    /* server -> client: its result */
	ZCRPC_FRAME_CANCEL = 3,	    /* client -> server: forget call id */
	ZCRPC_FRAME_GOAWAY = 4,	    /* server -> client: no new calls here */
	ZCRPC_FRAME_BULK_GRANT = 5, /* either way: write the bulk part here */
	/* Streams (docs/protocol.md §8; only on a connection whose hellos
	 * both carry ZCRPC_FEAT_STREAMS). */
	ZCRPC_FRAME_MESSAGE = 6,    /* either way: one message of a stream */
	ZCRPC_FRAME_WINDOW = 7,	    /* either way: send @window more messages */
	ZCRPC_FRAME_HEADERS = 8,    /* server -> client: initial metadata */
	ZCRPC_FRAME_HALF_CLOSE = 9, /* client -> server: no more messages */
};
#define ZCRPC_FRAME_TYPE_MAX ZCRPC_FRAME_HALF_CLOSE

/* Flags. */
#define ZCRPC_FRAME_F_BULK 0x1U /* a bulk part of bulk_len bytes follows by RDMA WRITE */
#define ZCRPC_FRAME_F_PAYLOAD_IN_BULK 0x2U /* the bulk part is the payload itself (too big to inline) */
#define ZCRPC_FRAME_F_STREAM 0x4U /* REQUEST: opens a stream; REPLY: its final status; CANCEL: of a stream; BULK_GRANT: for a stream's message */
#define ZCRPC_FRAME_F_MORE 0x8U	  /* MESSAGE: a piece; the message goes on in the next MESSAGE */
#define ZCRPC_FRAME_F_REFUSED 0x10U /* REPLY (DRAIN peers): the call never reached a handler */
#define ZCRPC_FRAME_F_ALL                                                      \
	(ZCRPC_FRAME_F_BULK | ZCRPC_FRAME_F_PAYLOAD_IN_BULK |                  \
	 ZCRPC_FRAME_F_STREAM | ZCRPC_FRAME_F_MORE | ZCRPC_FRAME_F_REFUSED)

/* The largest stream message a reader takes (in pieces) by default. */
#define ZCRPC_STREAM_MAX_MESSAGE ((size_t)4 << 20)

/* Messages a stream's reader lets its writer send before the first
 * WINDOW, in each direction (docs/protocol.md §8). */
#define ZCRPC_STREAM_WINDOW 16U

struct zcrpc_frame {
	uint8_t type;
	uint16_t flags;
	uint16_t md_len;
	uint32_t call_id;
	uint32_t count; /* WINDOW: messages added (>= 1); a unary REPLY: how
			 * many of its metadata pairs, first, are the server's
			 * initial metadata (the rest trailing); else 0 */
	uint32_t method_id;
	uint32_t status;
	uint32_t payload_len;
	uint32_t deadline_us;
	uint64_t bulk_addr, bulk_len;
	uint32_t bulk_rkey, bulk_token;
	/* Set by decode: where metadata and payload start in the buffer. */
	const uint8_t *md;
	const uint8_t *payload;
};

/* Writes the header of @f into @buf (ZCRPC_FRAME_HDR_LEN bytes). */
void zcrpc__frame_encode(const struct zcrpc_frame *f, uint8_t *buf);

/* Checks and parses a frame of exactly @len bytes: magic, version, known
 * type and flags, zero reserved fields, metadata + payload lengths equal to
 * what follows the header, metadata well formed, a bulk part only where
 * the type allows it and within ZCRPC_BULK_MAX, a grant with a non-empty,
 * non-wrapping region, a status within the enum. Never reads past @len.
 * Returns OK, or INVALID_ARGUMENT with a reason in @why. */
zcrpc_status zcrpc__frame_decode(const void *buf, size_t len,
				 struct zcrpc_frame *out, char *why,
				 size_t why_len);

/* On a connection whose hellos both carry BATCH (docs/protocol.md §8,
 * Batches): decodes the frame at the start of @len bytes holding one or
 * more frames back to back, its length the header's (header + metadata +
 * payload), into @out, and sets @used to that length. Checks as
 * zcrpc__frame_decode, and that a frame with more after it may be batched
 * (zcrpc__frame_batchable). Returns OK, or INVALID_ARGUMENT with @why. */
zcrpc_status zcrpc__frame_decode_next(const void *buf, size_t len,
				      struct zcrpc_frame *out, size_t *used,
				      char *why, size_t why_len);

/* A frame that may go in a batch before another: a MESSAGE with inline
 * payload (no bulk part) or a WINDOW. None keeps its receive slot. */
static inline int zcrpc__frame_batchable(uint8_t type, uint16_t flags)
{
	return (type == ZCRPC_FRAME_MESSAGE && !(flags & ZCRPC_FRAME_F_BULK)) ||
	       type == ZCRPC_FRAME_WINDOW;
}

/* Metadata: a sequence of pairs, each key length (u8, >= 1), value
 * length (u16 LE), key bytes, value bytes. */
struct zcrpc_md_view {
	const uint8_t *key;
	size_t key_len;
	const uint8_t *value;
	size_t value_len;
};

/* Parses @len bytes into at most ZCRPC_MD_MAX_PAIRS pairs. Returns the
 * number of pairs, or -1 when malformed. */
int zcrpc__md_decode(const uint8_t *buf, size_t len,
		     struct zcrpc_md_view *pairs);

/* Bytes needed to encode the pairs, or 0 if they break the limits
 * (ZCRPC_MD_MAX_PAIRS pairs, keys 1..255 bytes, values < 64 KiB,
 * ZCRPC_MD_MAX_LEN in all). @n == 0 gives 0 too (no metadata). */
size_t zcrpc__md_size(const struct zcrpc_md_view *pairs, size_t n);

/* Encodes; @buf has zcrpc__md_size() bytes. */
void zcrpc__md_encode(const struct zcrpc_md_view *pairs, size_t n,
		      uint8_t *buf);

/* Largest status message an error REPLY carries (docs/protocol.md §7). */
#define ZCRPC_STATUS_MSG_MAX 512

/* Bytes of @msg (NUL-terminated, may be NULL) an error REPLY carries: all
 * of it up to ZCRPC_STATUS_MSG_MAX, else cut there, moved back to the
 * start of the UTF-8 character the limit falls in (at most 3 bytes back;
 * invalid UTF-8 is cut at the limit). */
size_t zcrpc__status_msg_len(const char *msg);

#ifdef __cplusplus
}
#endif

#endif /* ZCRPC_RPC_FRAME_H */
