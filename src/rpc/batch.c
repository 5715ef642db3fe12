/* zcrpc — gathering small stream frames into one message (batch.h). */
#include "batch.h"

#include <string.h>

#include "../core/le.h"

static void on_turn_end(struct zcrpc__turn_hook *h)
{
	zcrpc__batch_flush(zcrpc__container_of(h, struct zcrpc__batch, hook));
}

void zcrpc__batch_init(struct zcrpc__batch *b, zcrpc_worker *w,
		       void (*send)(struct zcrpc__batch *, struct zcrpc__out *),
		       uint64_t *batches, uint64_t *batched_frames)
{
	memset(b, 0, sizeof(*b));
	b->w = w;
	b->send = send;
	b->batches = batches;
	b->batched_frames = batched_frames;
	b->hook.fn = on_turn_end;
	zcrpc__list_init(&b->hook.link);
}

static int batchable(const struct zcrpc__out *out)
{
	const uint8_t *f = out->msg.data;

	return out->len >= ZCRPC_FRAME_HDR_LEN &&
	       zcrpc__frame_batchable(f[3], zcrpc__get_le16(f + 4));
}

/* The open batch moves from its first frame's slot (a small one, for a
 * small frame) to one of @limit bytes. 0 when the pool has none. */
static int grow(struct zcrpc__batch *b)
{
	zcrpc_msg big;

	if (zcrpc_msg_alloc(b->w, b->limit, &big) != ZCRPC_OK)
		return 0;
	if (big.capacity < b->limit) {
		zcrpc_msg_free(b->w, &big);
		return 0;
	}
	memcpy(big.data, b->open.msg.data, b->open.len);
	zcrpc_msg_free(b->w, &b->open.msg);
	b->open.msg = big;
	return 1;
}

int zcrpc__batch_add(struct zcrpc__batch *b, zcrpc_conn *conn,
		     struct zcrpc__out *out)
{
	if (!batchable(out) || !zcrpc__conn_has_batch(conn)) {
		zcrpc__batch_flush(b);
		return 0;
	}
	if (b->open.msg.data && b->open.len + out->len <= b->limit &&
	    (b->open.len + out->len <= b->open.msg.capacity || grow(b))) {
		memcpy((uint8_t *)b->open.msg.data + b->open.len,
		       out->msg.data, out->len);
		b->open.len += out->len;
		b->frames++;
		zcrpc_msg_free(b->w, &out->msg);
		return 1;
	}
	zcrpc__batch_flush(b); /* full: it goes, this one opens the next */
	b->open = *out;
	b->frames = 1;
	b->limit = zcrpc__conn_ops_of(conn)->peer_max_msg(conn);
	if (b->limit > zcrpc__worker_max_msg(b->w))
		b->limit = zcrpc__worker_max_msg(b->w);
	zcrpc__worker_at_turn_end(b->w, &b->hook);
	return 1;
}

void zcrpc__batch_flush(struct zcrpc__batch *b)
{
	struct zcrpc__out out = b->open;

	if (!out.msg.data)
		return;
	if (b->frames > 1) {
		(*b->batches)++;
		*b->batched_frames += b->frames;
	}
	memset(&b->open, 0, sizeof(b->open));
	b->frames = 0;
	zcrpc__turn_hook_cancel(&b->hook);
	b->send(b, &out);
}

void zcrpc__batch_drop(struct zcrpc__batch *b)
{
	zcrpc__turn_hook_cancel(&b->hook);
	if (b->open.msg.data)
		zcrpc_msg_free(b->w, &b->open.msg);
	memset(&b->open, 0, sizeof(b->open));
	b->frames = 0;
}
