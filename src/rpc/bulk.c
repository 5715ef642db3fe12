/* zcrpc — a cache of registered buffers for bulk payloads: power-of-two
 * classes from 64 KiB, registered once (on every device of the context,
 * writable by peers) when first needed and reused, up to a byte limit.
 * Nothing is registered again once the cache holds what the load needs. */
#include "rpc_internal.h"

#include <stdlib.h>
#include <string.h>

size_t zcrpc__bulk_last_piece(size_t len, size_t piece)
{
	if (!len || !piece || len <= piece)
		return len;
	return len - ((len - 1) / piece) * piece;
}

void zcrpc__bulk_scrub(void *p, size_t len, size_t piece)
{
	if (p && piece && len > piece)
		memset(p, 0, len);
}

void zcrpc__bulk_init(struct zcrpc__bulk_cache *c, zcrpc_context *ctx,
		      size_t limit)
{
	unsigned i;

	c->ctx = ctx;
	c->total = 0;
	c->limit = limit;
	for (i = 0; i < ZCRPC_BULK_CLASSES; i++)
		c->free[i] = NULL;
}

static unsigned cls_of(size_t len)
{
	unsigned k = ZCRPC_BULK_MIN_SHIFT;

	while (((size_t)1 << k) < len)
		k++;
	return k - ZCRPC_BULK_MIN_SHIFT;
}

zcrpc_status zcrpc__bulk_get(struct zcrpc__bulk_cache *c, size_t len,
			     struct zcrpc__bulkbuf **out)
{
	struct zcrpc__bulkbuf *b;
	unsigned k;
	size_t cap;
	zcrpc_status st;

	if (!len || len > ZCRPC_BULK_MAX)
		return ZCRPC_INVALID_ARGUMENT;
	k = cls_of(len);
	if (k >= ZCRPC_BULK_CLASSES)
		return ZCRPC_INVALID_ARGUMENT;
	if ((b = c->free[k])) {
		c->free[k] = b->next;
		b->next = NULL;
		*out = b;
		return ZCRPC_OK;
	}
	cap = (size_t)1 << (k + ZCRPC_BULK_MIN_SHIFT);
	if (cap > c->limit - c->total || c->total > c->limit)
		return ZCRPC_RESOURCE_EXHAUSTED;
	b = calloc(1, sizeof(*b));
	if (!b)
		return ZCRPC_RESOURCE_EXHAUSTED;
	if (posix_memalign(&b->ptr, 4096, cap)) {
		free(b);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	st = zcrpc_mr_register(c->ctx, b->ptr, cap, ZCRPC_MR_REMOTE_WRITE,
			       &b->mr);
	if (st != ZCRPC_OK) {
		free(b->ptr);
		free(b);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	b->cap = cap;
	b->cls = k;
	c->total += cap;
	*out = b;
	return ZCRPC_OK;
}

void zcrpc__bulk_put(struct zcrpc__bulk_cache *c, struct zcrpc__bulkbuf *b)
{
	if (!b)
		return;
	b->next = c->free[b->cls];
	c->free[b->cls] = b;
}

void zcrpc__bulk_fini(struct zcrpc__bulk_cache *c)
{
	unsigned i;

	for (i = 0; i < ZCRPC_BULK_CLASSES; i++) {
		struct zcrpc__bulkbuf *b;

		while ((b = c->free[i])) {
			c->free[i] = b->next;
			zcrpc_mr_deregister(b->mr);
			free(b->ptr);
			free(b);
		}
	}
	c->total = 0;
}
