/* zcrpc — the call table shared by channels and servers (call_table.h). */
#include "call_table.h"

#include <stdlib.h>

#define SLOT_GEN   0xfffU
#define SLOT_TAKEN 0x80000000U

zcrpc_status zcrpc__call_table_init(struct zcrpc__call_table *t, uint32_t n,
				    size_t size)
{
	uint32_t i;

	t->items = NULL;
	t->slot = t->free_idx = NULL;
	t->n = t->nfree = 0;
	t->size = size;
	if (!n || n >= ZCRPC_MAX_CALL_TABLE || !size)
		return ZCRPC_INVALID_ARGUMENT;
	t->items = calloc(n, size);
	t->slot = malloc(sizeof(*t->slot) * n);
	t->free_idx = malloc(sizeof(*t->free_idx) * n);
	if (!t->items || !t->slot || !t->free_idx) {
		zcrpc__call_table_fini(t);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	for (i = 0; i < n; i++) {
		t->slot[i] = 1;		    /* generation 1, free */
		t->free_idx[n - 1 - i] = i; /* index 0 goes first */
	}
	t->n = t->nfree = n;
	return ZCRPC_OK;
}

void zcrpc__call_table_fini(struct zcrpc__call_table *t)
{
	free(t->items);
	free(t->slot);
	free(t->free_idx);
	t->items = NULL;
	t->slot = t->free_idx = NULL;
	t->n = t->nfree = 0;
}

void *zcrpc__call_table_peek(const struct zcrpc__call_table *t)
{
	return t->nfree ? zcrpc__call_table_at(t, t->free_idx[t->nfree - 1])
			: NULL;
}

void *zcrpc__call_table_take(struct zcrpc__call_table *t)
{
	uint32_t idx;

	if (!t->nfree)
		return NULL;
	idx = t->free_idx[--t->nfree];
	t->slot[idx] |= SLOT_TAKEN;
	return zcrpc__call_table_at(t, idx);
}

static uint32_t index_of(const struct zcrpc__call_table *t, const void *call)
{
	return (uint32_t)(((const char *)call - t->items) / t->size);
}

void zcrpc__call_table_release(struct zcrpc__call_table *t, void *call)
{
	uint32_t idx = index_of(t, call);
	uint32_t gen = ((t->slot[idx] & SLOT_GEN) + 1) & SLOT_GEN;

	t->slot[idx] = gen ? gen : 1; /* free, never generation 0 */
	t->free_idx[t->nfree++] = idx;
}

uint32_t zcrpc__call_table_ref(const struct zcrpc__call_table *t,
			       const void *call)
{
	uint32_t idx = index_of(t, call);

	return ZCRPC_REF(idx, t->slot[idx] & SLOT_GEN);
}

void *zcrpc__call_table_lookup(const struct zcrpc__call_table *t, uint32_t ref)
{
	uint32_t idx = ZCRPC_REF_IDX(ref);

	if (idx >= t->n || t->slot[idx] != (SLOT_TAKEN | ZCRPC_REF_GEN(ref)))
		return NULL;
	return zcrpc__call_table_at(t, idx);
}
