/* zcrpc — the call table, one kind for the client's calls (channels) and
 * the server's: a fixed array of calls named on the wire by a reference,
 * index (20 bits) | generation (12 bits). A reference to a call that ended
 * no longer matches (its slot's generation moved on), so a late frame for
 * it is recognised and dropped in O(1). Generations start at 1: 0 never
 * names a call. Used from the owner's worker thread only. */
#ifndef ZCRPC_RPC_CALL_TABLE_H
#define ZCRPC_RPC_CALL_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "zcrpc/status.h"

#define ZCRPC_REF(idx, gen)  (((uint32_t)(gen) << 20) | (uint32_t)(idx))
#define ZCRPC_REF_IDX(r)     ((r)&0xfffffU)
#define ZCRPC_REF_GEN(r)     ((r) >> 20)
#define ZCRPC_MAX_CALL_TABLE (1U << 20)

struct zcrpc__call_table {
	char *items;	    /* n calls of size bytes, zeroed at init */
	size_t size;	    /* bytes of one call */
	uint32_t n;	    /* calls */
	uint32_t *slot;	    /* per call: generation (12 bits) | TAKEN */
	uint32_t *free_idx; /* free calls, a stack: the last freed goes first */
	uint32_t nfree;
};

/* @n calls (1 .. ZCRPC_MAX_CALL_TABLE - 1) of @size bytes each, all free.
 * RESOURCE_EXHAUSTED without memory. */
zcrpc_status zcrpc__call_table_init(struct zcrpc__call_table *t, uint32_t n,
				    size_t size);
void zcrpc__call_table_fini(struct zcrpc__call_table *t);

/* The call at index @idx (< n), free or not. */
static inline void *zcrpc__call_table_at(const struct zcrpc__call_table *t,
					 uint32_t idx)
{
	return t->items + (size_t)idx * t->size;
}

/* The call the next take returns, or NULL when none is free; it stays free
 * (its reference is already the one it will have). */
void *zcrpc__call_table_peek(const struct zcrpc__call_table *t);
/* Takes a free call (the one peek shows), or NULL when none is free. */
void *zcrpc__call_table_take(struct zcrpc__call_table *t);
/* Gives @call back: its generation moves on, so its references stop
 * matching. */
void zcrpc__call_table_release(struct zcrpc__call_table *t, void *call);

/* The reference naming @call now. */
uint32_t zcrpc__call_table_ref(const struct zcrpc__call_table *t,
			       const void *call);
/* The taken call @ref names, or NULL (out of range, free, or a past
 * generation). */
void *zcrpc__call_table_lookup(const struct zcrpc__call_table *t, uint32_t ref);

static inline uint32_t zcrpc__call_table_used(const struct zcrpc__call_table *t)
{
	return t->n - t->nfree;
}

#endif /* ZCRPC_RPC_CALL_TABLE_H */
