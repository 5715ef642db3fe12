/* zcrpc — helpers shared by channels and servers: building frames in pool
 * slots, metadata, method ids. */
#include "rpc_internal.h"

#include "../core/fnv.h"

#include <string.h>

uint32_t zcrpc_method_id(const char *full_name)
{
	return full_name ? zcrpc__fnv1a(full_name) : 0;
}

size_t zcrpc__md_bytes(const zcrpc_md *md, size_t n)
{
	struct zcrpc_md_view v[ZCRPC_MD_MAX_PAIRS];
	size_t i, sz;

	if (!n)
		return 0;
	if (!md || n > ZCRPC_MD_MAX_PAIRS)
		return (size_t)-1;
	for (i = 0; i < n; i++) {
		if (!md[i].key || (!md[i].value && md[i].value_len))
			return (size_t)-1;
		v[i].key = (const uint8_t *)md[i].key;
		v[i].key_len = md[i].key_len;
		v[i].value = md[i].value;
		v[i].value_len = md[i].value_len;
	}
	sz = zcrpc__md_size(v, n);
	return sz ? sz : (size_t)-1;
}

size_t zcrpc__md_view(const struct zcrpc_frame *f, zcrpc_md *out)
{
	struct zcrpc_md_view v[ZCRPC_MD_MAX_PAIRS];
	int n, i;

	if (!f->md_len)
		return 0;
	n = zcrpc__md_decode(f->md, f->md_len, v);
	for (i = 0; i < n; i++) {
		out[i].key = (const char *)v[i].key;
		out[i].key_len = v[i].key_len;
		out[i].value = v[i].value;
		out[i].value_len = v[i].value_len;
	}
	return n > 0 ? (size_t)n : 0;
}

zcrpc_status zcrpc__out_build(zcrpc_worker *w, struct zcrpc_frame *f,
			      const zcrpc_md *md, size_t n_md, size_t plen,
			      zcrpc_fill_fn fill, void *fill_ctx,
			      const void *payload, struct zcrpc__out *out)
{
	struct zcrpc_md_view v[ZCRPC_MD_MAX_PAIRS];
	size_t mdl = zcrpc__md_bytes(md, n_md), total, i;
	uint8_t *p;
	zcrpc_status st;

	if (mdl == (size_t)-1)
		return ZCRPC_INVALID_ARGUMENT;
	total = ZCRPC_FRAME_HDR_LEN + mdl + plen;
	if (total > zcrpc__worker_max_msg(w))
		return ZCRPC_INVALID_ARGUMENT;
	st = zcrpc_msg_alloc(w, total, &out->msg);
	if (st != ZCRPC_OK)
		return st;
	f->md_len = (uint16_t)mdl;
	f->payload_len = (uint32_t)plen;
	p = out->msg.data;
	zcrpc__frame_encode(f, p);
	for (i = 0; i < n_md; i++) {
		v[i].key = (const uint8_t *)md[i].key;
		v[i].key_len = md[i].key_len;
		v[i].value = md[i].value;
		v[i].value_len = md[i].value_len;
	}
	if (mdl)
		zcrpc__md_encode(v, n_md, p + ZCRPC_FRAME_HDR_LEN);
	if (plen) {
		if (fill)
			fill(p + ZCRPC_FRAME_HDR_LEN + mdl, plen, fill_ctx);
		else
			memcpy(p + ZCRPC_FRAME_HDR_LEN + mdl, payload, plen);
	}
	out->len = total;
	return ZCRPC_OK;
}

zcrpc_status zcrpc__frames_each(zcrpc_conn *conn, const void *data, size_t len,
				void (*fn)(void *arg, const struct zcrpc_frame *f),
				void *arg, char *why, size_t why_len)
{
	const uint8_t *b = data;
	struct zcrpc_frame f;
	zcrpc_status st;
	size_t used;

	if (!zcrpc__conn_has_batch(conn)) {
		st = zcrpc__frame_decode(data, len, &f, why, why_len);
		if (st == ZCRPC_OK)
			fn(arg, &f);
		return st;
	}
	do {
		st = zcrpc__frame_decode_next(b, len, &f, &used, why, why_len);
		if (st != ZCRPC_OK)
			return st;
		fn(arg, &f);
		b += used;
		len -= used;
	} while (len && !zcrpc__conn_closing(conn));
	return ZCRPC_OK;
}
