/* zcrpc — the call table shared by channels and servers (call_table.h):
 * its chunks, their growth, and the free list through the calls' headers. */
#include "call_table.h"

#include <stdlib.h>

_Static_assert(ZCRPC__CALL_HDR >= sizeof(struct zcrpc__call_hdr) &&
		       ZCRPC__CALL_HDR % _Alignof(max_align_t) == 0,
	       "a call's header keeps the call aligned");

#define SLOT_GEN   0xfffU
#define SLOT_TAKEN 0x80000000U

#ifdef ZCRPC_TESTING
#include <stdatomic.h>

static atomic_int test_nomem;

void zcrpc__test_call_table_nomem(int on)
{
	atomic_store(&test_nomem, on);
}
#endif

static uint32_t chunks_for(uint32_t n)
{
	return (n + ZCRPC_CALL_CHUNK - 1) >> ZCRPC_CALL_CHUNK_SHIFT;
}

/* Allocates chunk @ci (its calls zeroed, then given init_call), its calls
 * free but not yet on the free list. -1 without memory. */
static int add_chunk(struct zcrpc__call_table *t, uint32_t ci)
{
	uint32_t base = ci << ZCRPC_CALL_CHUNK_SHIFT;
	uint32_t k, count = t->max - base < ZCRPC_CALL_CHUNK ? t->max - base
							     : ZCRPC_CALL_CHUNK;
	char *c = calloc(count, t->stride);

	if (!c)
		return -1;
	t->chunk[ci] = c;
	for (k = 0; k < count; k++) {
		struct zcrpc__call_hdr *h = zcrpc__call_table_hdr(t, base + k);

		h->idx = base + k;
		h->slot = 1; /* generation 1, free */
		if (t->init_call)
			t->init_call((char *)h + ZCRPC__CALL_HDR, t->init_arg);
	}
	return 0;
}

/* Doubles the table (up to max), or adds as many chunks as memory allows;
 * the new calls go on the free list, the lowest index first. -1 when not
 * one call could be added (the maximum reached, or no memory). */
static int grow(struct zcrpc__call_table *t)
{
	uint32_t want = t->n > t->max - t->n ? t->max : 2 * t->n;
	uint32_t ci, idx, old = t->n, have = chunks_for(t->n);
	char **dir;

	if (t->n >= t->max)
		return -1;
	if (!t->n)
		want = t->max < ZCRPC_CALL_CHUNK ? t->max : ZCRPC_CALL_CHUNK;
#ifdef ZCRPC_TESTING
	else if (atomic_load(&test_nomem))
		return -1;
#endif
	/* The directory holds pointers only: moving it moves no call. */
	dir = realloc(t->chunk, sizeof(*dir) * chunks_for(want));
	if (!dir)
		return -1;
	t->chunk = dir;
	for (ci = have; ci < chunks_for(want); ci++) {
		if (add_chunk(t, ci) != 0)
			break;
		t->n = (ci + 1) << ZCRPC_CALL_CHUNK_SHIFT;
		if (t->n > t->max)
			t->n = t->max;
	}
	for (idx = t->n; idx-- > old;) {
		zcrpc__call_table_hdr(t, idx)->next = t->first;
		t->first = idx;
		t->nfree++;
	}
	return t->n > old ? 0 : -1;
}

zcrpc_status zcrpc__call_table_init(struct zcrpc__call_table *t, uint32_t max,
				    size_t size,
				    void (*init_call)(void *call, void *arg),
				    void *init_arg)
{
	const size_t a = _Alignof(max_align_t);

	t->chunk = NULL;
	t->n = t->nfree = t->first = 0;
	t->max = max;
	t->stride = ZCRPC__CALL_HDR + (size + a - 1) / a * a;
	t->init_call = init_call;
	t->init_arg = init_arg;
	if (!max || max >= ZCRPC_MAX_CALL_TABLE || !size)
		return ZCRPC_INVALID_ARGUMENT;
	if (grow(t) != 0) {
		zcrpc__call_table_fini(t);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	return ZCRPC_OK;
}

void zcrpc__call_table_fini(struct zcrpc__call_table *t)
{
	uint32_t ci;

	for (ci = 0; ci < chunks_for(t->n); ci++)
		free(t->chunk[ci]);
	free(t->chunk);
	t->chunk = NULL;
	t->n = t->nfree = t->first = 0;
}

void *zcrpc__call_table_peek(struct zcrpc__call_table *t)
{
	if (!t->nfree && grow(t) != 0)
		return NULL;
	return zcrpc__call_table_at(t, t->first);
}

void *zcrpc__call_table_take(struct zcrpc__call_table *t)
{
	struct zcrpc__call_hdr *h;

	if (!t->nfree && grow(t) != 0)
		return NULL;
	h = zcrpc__call_table_hdr(t, t->first);
	t->first = h->next;
	t->nfree--;
	h->slot |= SLOT_TAKEN;
	return (char *)h + ZCRPC__CALL_HDR;
}

void zcrpc__call_table_release(struct zcrpc__call_table *t, void *call)
{
	struct zcrpc__call_hdr *h = zcrpc__call_hdr_of(call);
	uint32_t gen = ((h->slot & SLOT_GEN) + 1) & SLOT_GEN;

	h->slot = gen ? gen : 1; /* free, never generation 0 */
	h->next = t->first;
	t->first = h->idx;
	t->nfree++;
}
