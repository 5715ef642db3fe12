/* zcrpc — the connection handshake ("hello"), carried in the private data of
 * the RDMA CM connect request, accept reply and reject.
 *
 *   0               1               2               3
 *   0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
 *  +---------------------------------------------------------------+
 *  |                 magic "zcrp" (7a 63 72 70)                    |  0
 *  +---------------+---------------+-------------------------------+
 *  |   version     |     kind      |        length (bytes)         |  4
 *  +---------------+---------------+-------------------------------+
 *  |                       feature bits                            |  8
 *  +---------------------------------------------------------------+
 *  |            recv_depth (receive slots = credits)               | 12
 *  +---------------------------------------------------------------+
 *  |          max_msg (largest message accepted, bytes)            | 16
 *  +---------------------------------------------------------------+
 *  |            status (zcrpc_status; REJECT only, else 0)         | 20
 *  +---------------------------------------------------------------+
 *  |   max_write (largest RDMA WRITE piece; with FEAT_PIECE, else 0) | 24
 *  |                      reserved (0)                             | 28
 *  +---------------------------------------------------------------+
 *  |        nonce (32 bytes; only in an ACCEPT with FEAT_AUTH)     | 32
 *  +---------------------------------------------------------------+
 *  |  or, in a REJECT longer than 32 bytes: the reason, text of    | 32
 *  |  length - 32 bytes (at most 116: the CM's REJ private data)   |
 *  +---------------------------------------------------------------+
 *
 * All fields little-endian. docs/protocol.md is the normative description.
 */
#ifndef ZCRPC_HELLO_H
#define ZCRPC_HELLO_H

#include <stddef.h>
#include <stdint.h>

#include "zcrpc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZCRPC_HELLO_MAGIC 0x7072637aU /* "zcrp" as little-endian bytes */
#define ZCRPC_PROTO_VERSION 1
#define ZCRPC_HELLO_LEN 32	  /* bytes this version writes */
#define ZCRPC_HELLO_MAX_CONNECT 56 /* RDMA CM private data limit on connect */
#define ZCRPC_HELLO_MAX 196	   /* RDMA CM private data limit on accept */
#define ZCRPC_HELLO_MAX_REJECT                                                 \
	148 /* RDMA CM private data limit on reject                            \
	       (IB_CM_REJ_PRIVATE_DATA_SIZE) */
/* The reason text a REJECT may carry after its 32 bytes (docs/protocol.md
 * §1): what fits the reject's private data. */
#define ZCRPC_HELLO_REASON_MAX                                                 \
	(ZCRPC_HELLO_MAX_REJECT - ZCRPC_HELLO_LEN) /* 116 */

/* Feature bits; a connection uses the intersection of both sides' bits,
 * except AUTH, whose meaning differs by direction (docs/protocol.md §1). */
#define ZCRPC_FEAT_CREDITS 0x1U /* credit-based flow control (always set) */
#define ZCRPC_FEAT_AUTH 0x2U	/* CONNECT: the client holds a pre-shared key;
				   ACCEPT: the server requires AUTH; nonce follows */
#define ZCRPC_FEAT_PIECE 0x4U	/* max_write at offset 24 is set: the largest
				   RDMA WRITE the sender posts or accepts in
				   one work request (docs/protocol.md §4) */
#define ZCRPC_FEAT_CLOSE 0x8U	/* the sender ends an orderly close with a
				   CLOSE message (docs/protocol.md §5), so
				   the peer can tell it from a crash */
#define ZCRPC_FEAT_SHARED                                                      \
	0x10U /* the sender's receives are shared (srq.c):                     \
		 it may grant credits beyond its hello's                       \
		 recv_depth and takes back the extra ones                      \
		 an idle peer RELEASEs (docs/protocol.md §3) */
#define ZCRPC_FEAT_WRITTEN                                                     \
	0x20U /* the sender understands WRITTEN messages, which end an RDMA    \
		 WRITE where write with immediate is missing                   \
		 (docs/protocol.md §4) */
#define ZCRPC_FEAT_NO_WIMM                                                     \
	0x40U /* the sender's device has no RDMA WRITE with immediate: the     \
		 connection ends writes with WRITTEN (not an intersection      \
		 bit: either side's sets it) */
#define ZCRPC_FEAT_STREAMS                                                     \
	0x80U /* the sender's RPC layer speaks streams: the frame types and    \
		 flags of docs/protocol.md §8 */
#define ZCRPC_FEAT_STREAM_BULK                                                 \
	0x200U /* the sender's RPC layer moves a client's large stream        \
		  messages by RDMA WRITE into memory the server grants        \
		  (MESSAGE with BULK, BULK_GRANT with STREAM:                 \
		  docs/protocol.md §8) */
#define ZCRPC_FEAT_BATCH                                                       \
	0x400U /* the sender's RPC layer takes several stream frames in one   \
		  DATA message (docs/protocol.md §8, Batches) */
#define ZCRPC_FEAT_SERVER_STREAM_BULK                                          \
	0x800U /* the sender's RPC layer moves a server's large stream        \
		  messages by RDMA WRITE into memory the client grants        \
		  (MESSAGE with BULK from the server: docs/protocol.md §8) */
#define ZCRPC_FEAT_DRAIN                                                       \
	0x1000U /* the sender's RPC layer drains in order: a client answers   \
		   GOAWAY with GOAWAY (nothing follows it), a server marks   \
		   the calls it refused unrun with REFUSED and waits for     \
		   that answer before it closes (docs/protocol.md §7) */
#define ZCRPC_FEAT_MUTUAL                                                      \
	0x2000U /* the sender's admission is mutual: with AUTH, the client's   \
		   AUTH carries its nonce too and the server's AUTH_REPLY OK   \
		   proves the key back; both proofs cover both nonces and the  \
		   server's address (docs/protocol.md §1) */
#define ZCRPC_FEAT_ALL                                                         \
	(ZCRPC_FEAT_CREDITS | ZCRPC_FEAT_PIECE | ZCRPC_FEAT_CLOSE |            \
	 ZCRPC_FEAT_SHARED | ZCRPC_FEAT_WRITTEN | ZCRPC_FEAT_STREAMS |         \
	 ZCRPC_FEAT_STREAM_BULK | ZCRPC_FEAT_BATCH |                           \
	 ZCRPC_FEAT_SERVER_STREAM_BULK | ZCRPC_FEAT_DRAIN |                    \
	 ZCRPC_FEAT_MUTUAL) /* set in every hello */

/* The smallest max_write a hello may announce: a peer cannot make the other
 * side split its writes into tiny pieces. */
#define ZCRPC_HELLO_MIN_WRITE 4096U

#define ZCRPC_HELLO_NONCE_LEN 32
#define ZCRPC_HELLO_AUTH_LEN (ZCRPC_HELLO_LEN + ZCRPC_HELLO_NONCE_LEN) /* 64 */

enum zcrpc_hello_kind {
	ZCRPC_HELLO_CONNECT = 1,
	ZCRPC_HELLO_ACCEPT = 2,
	ZCRPC_HELLO_REJECT = 3,
};

struct zcrpc_hello {
	uint8_t version;
	uint8_t kind;
	uint32_t features;
	uint32_t recv_depth;
	uint32_t max_msg;
	uint32_t status;
	/* With ZCRPC_FEAT_PIECE: the sender's largest RDMA WRITE piece (its
	 * port's max_msg_sz); 0 when the peer did not announce one. */
	uint32_t max_write;
	/* ACCEPT with ZCRPC_FEAT_AUTH: the server's fresh random nonce; zero
	 * otherwise. */
	uint8_t nonce[ZCRPC_HELLO_NONCE_LEN];
	/* REJECT: why, as text for the client's error (NUL-terminated; empty
	 * for none, and from a peer that sends none). Encoded after the 32
	 * bytes, cut at ZCRPC_HELLO_REASON_MAX; decoded with control
	 * characters replaced by '?'. */
	char reason[ZCRPC_HELLO_REASON_MAX + 1];
};

/* Writes @h into @buf (@cap bytes). Returns the encoded length (32, 64
 * for an ACCEPT with ZCRPC_FEAT_AUTH, which carries the nonce, or 32 plus
 * the reason's length for a REJECT with a reason: at most
 * ZCRPC_HELLO_MAX_REJECT), or 0 when @cap is smaller than that. Reserved
 * bytes are written as zero. */
size_t zcrpc__hello_encode(const struct zcrpc_hello *h, uint8_t *buf,
			   size_t cap);

/* Parses @len bytes of private data (which the CM may have padded with
 * zeros). On success fills @out and returns ZCRPC_OK. Errors, with a
 * human-readable reason in @why (@why_len bytes, may be NULL):
 *   INVALID_ARGUMENT    truncated (< header or < its own length field),
 *                       oversized (length field beyond the CM limit),
 *                       bad magic, unknown kind, zero recv_depth/max_msg
 *                       in a CONNECT or ACCEPT, FEAT_PIECE with a
 *                       max_write below ZCRPC_HELLO_MIN_WRITE, an ACCEPT with
 *                       ZCRPC_FEAT_AUTH shorter than 64 bytes (no nonce)
 * A REJECT's bytes past 32 (up to its length field) are its reason: read up
 * to the first NUL and ZCRPC_HELLO_REASON_MAX bytes into @out->reason.
 *   FAILED_PRECONDITION protocol version this build does not speak
 */
zcrpc_status zcrpc__hello_decode(const void *buf, size_t len,
				 struct zcrpc_hello *out, char *why,
				 size_t why_len);

#ifdef __cplusplus
}
#endif

#endif /* ZCRPC_HELLO_H */
