/* zcrpc — connection handshake encode/decode (see hello.h, docs/protocol.md). */
#include "hello.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../core/le.h"
#include "../core/reason.h"

/* The reason a REJECT carries: its bytes after the 32 (docs/protocol.md §1). */
static size_t reason_len(const struct zcrpc_hello *h)
{
	if (h->kind != ZCRPC_HELLO_REJECT)
		return 0;
	return strnlen(h->reason, ZCRPC_HELLO_REASON_MAX);
}

size_t zcrpc__hello_encode(const struct zcrpc_hello *h, uint8_t *buf,
			   size_t cap)
{
	int nonce = h->kind == ZCRPC_HELLO_ACCEPT && (h->features & ZCRPC_FEAT_AUTH);
	size_t rlen = reason_len(h);
	size_t len = nonce ? ZCRPC_HELLO_AUTH_LEN : ZCRPC_HELLO_LEN + rlen;

	if (cap < len)
		return 0;
	memset(buf, 0, len);
	zcrpc__put_le32(buf + 0, ZCRPC_HELLO_MAGIC);
	buf[4] = h->version;
	buf[5] = h->kind;
	zcrpc__put_le16(buf + 6, (uint16_t)len);
	zcrpc__put_le32(buf + 8, h->features);
	zcrpc__put_le32(buf + 12, h->recv_depth);
	zcrpc__put_le32(buf + 16, h->max_msg);
	zcrpc__put_le32(buf + 20, h->status);
	if (h->features & ZCRPC_FEAT_PIECE)
		zcrpc__put_le32(buf + 24, h->max_write);
	if (nonce)
		memcpy(buf + ZCRPC_HELLO_LEN, h->nonce, ZCRPC_HELLO_NONCE_LEN);
	if (rlen)
		memcpy(buf + ZCRPC_HELLO_LEN, h->reason, rlen);
	return len;
}

/* A REJECT's reason: the bytes after the 32, up to its length field, the
 * first NUL or ZCRPC_HELLO_REASON_MAX; text from the peer, so control
 * characters (a terminal's escapes, line breaks in a log) become '?'. */
static void decode_reason(const uint8_t *buf, size_t hlen,
			  struct zcrpc_hello *h)
{
	size_t n = hlen - ZCRPC_HELLO_LEN, i;

	if (n > ZCRPC_HELLO_REASON_MAX)
		n = ZCRPC_HELLO_REASON_MAX;
	for (i = 0; i < n && buf[ZCRPC_HELLO_LEN + i]; i++) {
		uint8_t ch = buf[ZCRPC_HELLO_LEN + i];

		h->reason[i] = (char)(ch < 0x20 || ch == 0x7f ? '?' : ch);
	}
	h->reason[i] = '\0';
}

zcrpc_status zcrpc__hello_decode(const void *data, size_t len,
				 struct zcrpc_hello *out, char *why,
				 size_t why_len)
{
	const uint8_t *buf = data;
	struct zcrpc_hello h;
	size_t hlen;

	if (!buf || len < 8)
		return zcrpc__reason(ZCRPC_INVALID_ARGUMENT, why, why_len,
				     "handshake truncated: %zu bytes, need %d",
				     len, 8);
	if (zcrpc__get_le32(buf) != ZCRPC_HELLO_MAGIC)
		return zcrpc__reason(ZCRPC_INVALID_ARGUMENT, why, why_len,
				     "handshake has bad magic 0x%08x",
				     (unsigned)zcrpc__get_le32(buf));
	h.version = buf[4];
	h.kind = buf[5];
	hlen = zcrpc__get_le16(buf + 6);
	if (h.version != ZCRPC_PROTO_VERSION)
		return zcrpc__reason(
			ZCRPC_FAILED_PRECONDITION, why, why_len,
			"unsupported protocol version %u (this side speaks %d)",
			(unsigned)h.version, ZCRPC_PROTO_VERSION);
	if (hlen > ZCRPC_HELLO_MAX)
		return zcrpc__reason(
			ZCRPC_INVALID_ARGUMENT, why, why_len,
			"handshake oversized: length field %zu > limit %d",
			hlen, ZCRPC_HELLO_MAX);
	if (hlen < ZCRPC_HELLO_LEN || len < hlen || len < ZCRPC_HELLO_LEN)
		return zcrpc__reason(ZCRPC_INVALID_ARGUMENT, why, why_len,
				     "handshake truncated: length field %zu, "
				     "%zu bytes received",
				     hlen, len);
	if (h.kind < ZCRPC_HELLO_CONNECT || h.kind > ZCRPC_HELLO_REJECT)
		return zcrpc__reason(ZCRPC_INVALID_ARGUMENT, why, why_len,
				     "handshake has unknown kind %u",
				     (unsigned)h.kind);
	h.features = zcrpc__get_le32(buf + 8);
	h.recv_depth = zcrpc__get_le32(buf + 12);
	h.max_msg = zcrpc__get_le32(buf + 16);
	h.status = zcrpc__get_le32(buf + 20);
	if (h.kind != ZCRPC_HELLO_REJECT &&
	    (h.recv_depth == 0 || h.max_msg == 0))
		return zcrpc__reason(ZCRPC_INVALID_ARGUMENT, why, why_len,
				     "handshake has recv_depth %u, max_msg %u "
				     "(both must be > 0)",
				     (unsigned)h.recv_depth,
				     (unsigned)h.max_msg);
	h.max_write = 0;
	if (h.kind != ZCRPC_HELLO_REJECT && (h.features & ZCRPC_FEAT_PIECE)) {
		h.max_write = zcrpc__get_le32(buf + 24);
		if (h.max_write < ZCRPC_HELLO_MIN_WRITE)
			return zcrpc__reason(
				ZCRPC_INVALID_ARGUMENT, why, why_len,
				"handshake announces RDMA WRITE pieces of %u "
				"bytes (at least %u)",
				(unsigned)h.max_write, ZCRPC_HELLO_MIN_WRITE);
	}
	memset(h.nonce, 0, sizeof(h.nonce));
	if (h.kind == ZCRPC_HELLO_ACCEPT && (h.features & ZCRPC_FEAT_AUTH)) {
		if (hlen < ZCRPC_HELLO_AUTH_LEN)
			return zcrpc__reason(ZCRPC_INVALID_ARGUMENT, why,
					     why_len,
					     "handshake truncated: an ACCEPT "
					     "requiring authentication has "
					     "length %zu, the nonce needs %d",
					     hlen, ZCRPC_HELLO_AUTH_LEN);
		memcpy(h.nonce, buf + ZCRPC_HELLO_LEN, ZCRPC_HELLO_NONCE_LEN);
	}
	h.reason[0] = '\0';
	if (h.kind == ZCRPC_HELLO_REJECT)
		decode_reason(buf, hlen, &h);
	*out = h;
	return ZCRPC_OK;
}
