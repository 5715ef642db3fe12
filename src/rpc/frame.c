/* zcrpc — RPC frame encode/decode and metadata (see frame.h). */
#include "frame.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../core/le.h"
#include "../core/reason.h"

static void put64(uint8_t *p, uint64_t v)
{
	zcrpc__put_le32(p, (uint32_t)v);
	zcrpc__put_le32(p + 4, (uint32_t)(v >> 32));
}

static uint64_t get64(const uint8_t *p)
{
	return zcrpc__get_le32(p) | (uint64_t)zcrpc__get_le32(p + 4) << 32;
}

void zcrpc__frame_encode(const struct zcrpc_frame *f, uint8_t *b)
{
	memset(b, 0, ZCRPC_FRAME_HDR_LEN);
	zcrpc__put_le16(b + 0, ZCRPC_FRAME_MAGIC);
	b[2] = ZCRPC_FRAME_VERSION;
	b[3] = f->type;
	zcrpc__put_le16(b + 4, f->flags);
	zcrpc__put_le16(b + 6, f->md_len);
	zcrpc__put_le32(b + 8, f->call_id);
	zcrpc__put_le32(b + 12, f->count);
	zcrpc__put_le32(b + 16, f->method_id);
	zcrpc__put_le32(b + 20, f->status);
	zcrpc__put_le32(b + 24, f->payload_len);
	zcrpc__put_le32(b + 28, f->deadline_us);
	put64(b + 32, f->bulk_addr);
	put64(b + 40, f->bulk_len);
	zcrpc__put_le32(b + 48, f->bulk_rkey);
	zcrpc__put_le32(b + 52, f->bulk_token);
}

/* A refusal: the reason (as zcrpc__reason) and INVALID_ARGUMENT. */
#define bad(why, why_len, ...)                                                 \
	zcrpc__reason(ZCRPC_INVALID_ARGUMENT, why, why_len, __VA_ARGS__)

zcrpc_status zcrpc__frame_decode_next(const void *data, size_t len,
				      struct zcrpc_frame *f, size_t *used,
				      char *why, size_t why_len)
{
	const uint8_t *b = data;
	uint64_t flen;
	zcrpc_status st;

	if (!b || len < ZCRPC_FRAME_HDR_LEN)
		return zcrpc__frame_decode(data, len, f, why, why_len);
	flen = (uint64_t)ZCRPC_FRAME_HDR_LEN + zcrpc__get_le16(b + 6) +
	       zcrpc__get_le32(b + 24);
	if (flen > len)
		return bad(why, why_len,
			   "frame of %llu bytes (by its lengths) runs past the %zu bytes left in its message",
			   (unsigned long long)flen, len);
	st = zcrpc__frame_decode(data, (size_t)flen, f, why, why_len);
	if (st != ZCRPC_OK)
		return st;
	if (flen < len && !zcrpc__frame_batchable(f->type, f->flags))
		return bad(why, why_len,
			   "a frame of type %u with another after it in one message",
			   f->type);
	*used = (size_t)flen;
	return ZCRPC_OK;
}

/* Longer than ~80 lines on purpose: it is the receiver's list of checks in
 * the order of the header's fields (docs/protocol.md §7), one line each
 * with the reason it names; split up, the list could not be read (and
 * audited) top to bottom. */
zcrpc_status zcrpc__frame_decode(const void *data, size_t len,
				 struct zcrpc_frame *f, char *why,
				 size_t why_len)
{
	const uint8_t *b = data;
	struct zcrpc_md_view md[ZCRPC_MD_MAX_PAIRS];
	size_t body;
	int pairs;

	if (!b && len)
		return bad(why, why_len, "no frame");
	if (!b || len < ZCRPC_FRAME_HDR_LEN)
		return bad(why, why_len, "frame of %zu bytes is shorter than its header", len);
	if (zcrpc__get_le16(b) != ZCRPC_FRAME_MAGIC)
		return bad(why, why_len, "bad frame magic 0x%04x", zcrpc__get_le16(b));
	if (b[2] != ZCRPC_FRAME_VERSION)
		return bad(why, why_len, "unsupported frame version %u", b[2]);
	/* Every field written once (no memset before). */
	f->type = b[3];
	f->flags = zcrpc__get_le16(b + 4);
	f->md_len = zcrpc__get_le16(b + 6);
	f->call_id = zcrpc__get_le32(b + 8);
	f->count = zcrpc__get_le32(b + 12);
	f->method_id = zcrpc__get_le32(b + 16);
	f->status = zcrpc__get_le32(b + 20);
	f->payload_len = zcrpc__get_le32(b + 24);
	f->deadline_us = zcrpc__get_le32(b + 28);
	f->bulk_addr = get64(b + 32);
	f->bulk_len = get64(b + 40);
	f->bulk_rkey = zcrpc__get_le32(b + 48);
	f->bulk_token = zcrpc__get_le32(b + 52);
	f->md = f->payload = NULL;
	if (f->type < ZCRPC_FRAME_REQUEST || f->type > ZCRPC_FRAME_TYPE_MAX)
		return bad(why, why_len, "unknown frame type %u", f->type);
	if (f->flags & ~ZCRPC_FRAME_F_ALL)
		return bad(why, why_len, "unknown frame flags 0x%x", f->flags);
	if (get64(b + 56))
		return bad(why, why_len, "reserved frame fields are not zero");
	if (f->type == ZCRPC_FRAME_WINDOW && !f->count)
		return bad(why, why_len, "window frame adding no messages");
	if (f->count && f->type != ZCRPC_FRAME_WINDOW &&
	    (f->type != ZCRPC_FRAME_REPLY || (f->flags & ZCRPC_FRAME_F_STREAM)))
		return bad(why, why_len, "count field on a frame of type %u", f->type);
	body = len - ZCRPC_FRAME_HDR_LEN;
	if ((uint64_t)f->md_len + f->payload_len != (uint64_t)body)
		return bad(why, why_len,
			   "frame lengths (metadata %u + payload %u) disagree with the %zu bytes after the header",
			   f->md_len, (unsigned)f->payload_len, body);
	if (f->md_len > ZCRPC_MD_MAX_LEN)
		return bad(why, why_len, "metadata of %u bytes exceeds %d", f->md_len,
			   ZCRPC_MD_MAX_LEN);
	f->md = b + ZCRPC_FRAME_HDR_LEN;
	f->payload = f->md + f->md_len;
	pairs = f->md_len ? zcrpc__md_decode(f->md, f->md_len, md) : 0;
	if (pairs < 0)
		return bad(why, why_len, "malformed metadata");
	if (f->type == ZCRPC_FRAME_REPLY && f->count > (uint32_t)pairs)
		return bad(why, why_len, "reply names %u initial metadata pairs of %d",
			   (unsigned)f->count, pairs);
	if (f->type == ZCRPC_FRAME_REPLY && f->status >= ZCRPC_STATUS_COUNT)
		return bad(why, why_len, "reply status %u is not a status code",
			   (unsigned)f->status);
	if ((f->flags & ZCRPC_FRAME_F_PAYLOAD_IN_BULK) &&
	    (!(f->flags & ZCRPC_FRAME_F_BULK) || f->payload_len))
		return bad(why, why_len, "payload-in-bulk flag without a bulk part, or with an inline payload");
	if (f->flags & ZCRPC_FRAME_F_BULK) {
		if (f->type != ZCRPC_FRAME_REQUEST && f->type != ZCRPC_FRAME_REPLY &&
		    f->type != ZCRPC_FRAME_MESSAGE)
			return bad(why, why_len, "bulk flag on frame type %u", f->type);
		if (f->type == ZCRPC_FRAME_MESSAGE &&
		    (f->payload_len || (f->flags & ZCRPC_FRAME_F_MORE) ||
		     (f->flags & ZCRPC_FRAME_F_PAYLOAD_IN_BULK)))
			return bad(why, why_len, "a stream message by RDMA WRITE with an inline payload or a piece flag");
		if (!f->bulk_len || f->bulk_len > ZCRPC_BULK_MAX)
			return bad(why, why_len, "bulk length %llu out of range",
				   (unsigned long long)f->bulk_len);
	}
	/* Fields a type does not use must be zero. */
	if (f->type != ZCRPC_FRAME_REPLY && f->status)
		return bad(why, why_len, "status on a frame of type %u", f->type);
	if (f->type != ZCRPC_FRAME_REQUEST && (f->deadline_us || f->method_id))
		return bad(why, why_len, "deadline or method on a frame of type %u", f->type);
	if (f->type != ZCRPC_FRAME_BULK_GRANT) {
		if (f->bulk_addr || f->bulk_rkey)
			return bad(why, why_len, "bulk address or key outside a grant");
		if (f->bulk_len && !(f->flags & ZCRPC_FRAME_F_BULK))
			return bad(why, why_len, "bulk length without the bulk flag");
		if (f->bulk_token && !((f->type == ZCRPC_FRAME_REPLY ||
					f->type == ZCRPC_FRAME_MESSAGE) &&
				       (f->flags & ZCRPC_FRAME_F_BULK)))
			return bad(why, why_len, "bulk token outside a grant, a bulk reply or a bulk stream message");
	}
	/* Streams (§8): the flag on its four types, bulk parts only on a
	 * MESSAGE, metadata only where a stream carries it, empty control
	 * frames. */
	if ((f->flags & ZCRPC_FRAME_F_STREAM) && f->type != ZCRPC_FRAME_REQUEST &&
	    f->type != ZCRPC_FRAME_REPLY && f->type != ZCRPC_FRAME_CANCEL &&
	    f->type != ZCRPC_FRAME_BULK_GRANT)
		return bad(why, why_len, "stream flag on frame type %u", f->type);
	if ((f->flags & ZCRPC_FRAME_F_REFUSED) &&
	    (f->type != ZCRPC_FRAME_REPLY || f->status == ZCRPC_OK ||
	     (f->flags & ~(ZCRPC_FRAME_F_REFUSED | ZCRPC_FRAME_F_STREAM))))
		return bad(why, why_len, "refused flag on a frame that is not an error reply");
	if ((f->flags & ZCRPC_FRAME_F_MORE) && f->type != ZCRPC_FRAME_MESSAGE)
		return bad(why, why_len, "more flag on frame type %u", f->type);
	if ((f->flags & ZCRPC_FRAME_F_MORE) && !f->payload_len)
		return bad(why, why_len, "an empty piece of a message");
	if ((f->flags & ZCRPC_FRAME_F_STREAM) && (f->flags & ZCRPC_FRAME_F_BULK))
		return bad(why, why_len, "bulk part on a stream's frame");
	if (f->type == ZCRPC_FRAME_REQUEST && (f->flags & ZCRPC_FRAME_F_STREAM) &&
	    f->payload_len)
		return bad(why, why_len, "a stream's opening request carries a payload");
	if (f->type == ZCRPC_FRAME_MESSAGE && f->md_len)
		return bad(why, why_len, "metadata on a stream message");
	if (f->type == ZCRPC_FRAME_HEADERS && f->payload_len)
		return bad(why, why_len, "payload on a headers frame");
	if ((f->type == ZCRPC_FRAME_WINDOW || f->type == ZCRPC_FRAME_HALF_CLOSE) &&
	    (f->md_len || f->payload_len))
		return bad(why, why_len, "body on a frame of type %u", f->type);
	if (f->type == ZCRPC_FRAME_BULK_GRANT) {
		if (!f->bulk_len || f->bulk_len > ZCRPC_BULK_MAX ||
		    f->bulk_addr + f->bulk_len < f->bulk_addr)
			return bad(why, why_len, "grant of a bad region (%llu bytes)",
				   (unsigned long long)f->bulk_len);
		if (f->md_len || f->payload_len)
			return bad(why, why_len, "grant with a body");
	}
	return ZCRPC_OK;
}

int zcrpc__md_decode(const uint8_t *b, size_t len, struct zcrpc_md_view *pairs)
{
	size_t off = 0;
	int n = 0;

	while (off < len) {
		size_t kl, vl;

		if (n == ZCRPC_MD_MAX_PAIRS || len - off < 3)
			return -1;
		kl = b[off];
		vl = zcrpc__get_le16(b + off + 1);
		off += 3;
		if (!kl || kl > len - off || vl > len - off - kl)
			return -1;
		pairs[n].key = b + off;
		pairs[n].key_len = kl;
		pairs[n].value = b + off + kl;
		pairs[n].value_len = vl;
		off += kl + vl;
		n++;
	}
	return n;
}

size_t zcrpc__md_size(const struct zcrpc_md_view *pairs, size_t n)
{
	size_t i, total = 0;

	if (n > ZCRPC_MD_MAX_PAIRS)
		return 0;
	for (i = 0; i < n; i++) {
		if (!pairs[i].key_len || pairs[i].key_len > 255 ||
		    pairs[i].value_len > 0xffff)
			return 0;
		total += 3 + pairs[i].key_len + pairs[i].value_len;
	}
	return total > ZCRPC_MD_MAX_LEN ? 0 : total;
}

void zcrpc__md_encode(const struct zcrpc_md_view *pairs, size_t n,
		      uint8_t *b)
{
	size_t i;

	for (i = 0; i < n; i++) {
		b[0] = (uint8_t)pairs[i].key_len;
		zcrpc__put_le16(b + 1, (uint16_t)pairs[i].value_len);
		memcpy(b + 3, pairs[i].key, pairs[i].key_len);
		if (pairs[i].value_len)
			memcpy(b + 3 + pairs[i].key_len, pairs[i].value,
			       pairs[i].value_len);
		b += 3 + pairs[i].key_len + pairs[i].value_len;
	}
}

size_t zcrpc__status_msg_len(const char *msg)
{
	size_t n, k;

	if (!msg)
		return 0;
	for (n = 0; n <= ZCRPC_STATUS_MSG_MAX && msg[n]; n++)
		;
	if (n <= ZCRPC_STATUS_MSG_MAX)
		return n;
	/* msg[MAX] is the first byte left out: a continuation byte there
	 * means the character it belongs to started before the limit. */
	n = ZCRPC_STATUS_MSG_MAX;
	for (k = 0; k < 3 && ((uint8_t)msg[n - k] & 0xc0) == 0x80; k++)
		;
	if (((uint8_t)msg[n - k] & 0xc0) == 0x80)
		return n; /* not UTF-8: no character start within reach */
	return n - k;
}
