/* zcrpc — the call table, one kind for the client's calls (channels) and
 * the server's: calls named on the wire by a reference, index (20 bits) |
 * generation (12 bits). A reference to a call that ended no longer matches
 * (its slot's generation moved on), so a late frame for it is recognised
 * and dropped in O(1). Generations start at 1: 0 never names a call.
 *
 * The table grows as it fills: it starts with one chunk (64 calls, or the
 * maximum when smaller) and, when a take finds no free call, doubles (up
 * to its maximum) by adding chunks. Calls never move: chunk i holds calls
 * i * 64 .. i * 64 + 63, each behind a small header (its index and slot),
 * so a pointer to a call stays valid for the table's life and a reference
 * stays valid across growth; lookups are two array reads. A call's
 * reference is read from its own header only, so the thread a handler
 * runs on may read it (zcrpc_server_call_reply_any_thread) while the
 * owner's thread grows the table. Everything else: the owner's worker
 * thread only. */
#ifndef ZCRPC_RPC_CALL_TABLE_H
#define ZCRPC_RPC_CALL_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "zcrpc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZCRPC_REF(idx, gen)  (((uint32_t)(gen) << 20) | (uint32_t)(idx))
#define ZCRPC_REF_IDX(r)     ((r)&0xfffffU)
#define ZCRPC_REF_GEN(r)     ((r) >> 20)
#define ZCRPC_MAX_CALL_TABLE (1U << 20)

/* Calls per chunk (a power of two): the first allocation, and the unit
 * the table grows by. */
#define ZCRPC_CALL_CHUNK_SHIFT 6
#define ZCRPC_CALL_CHUNK       (1U << ZCRPC_CALL_CHUNK_SHIFT)

/* What precedes each call in its chunk. */
struct zcrpc__call_hdr {
	uint32_t idx;  /* the call's index */
	uint32_t slot; /* generation (12 bits) | taken */
	uint32_t next; /* free: the next free call's index */
};

/* The header's bytes: the call after it is aligned as malloc aligns
 * (checked in call_table.c). */
#define ZCRPC__CALL_HDR 16U

struct zcrpc__call_table {
	char **chunk;	/* chunk i: calls i * ZCRPC_CALL_CHUNK ... */
	size_t stride;	/* bytes of one header and call */
	uint32_t n;	/* calls allocated (all chunks) */
	uint32_t max;	/* it never grows past this many */
	uint32_t first; /* the free call the next take returns (if nfree) */
	uint32_t nfree;
	/* Run once on each call when its chunk is added (the call is zeroed
	 * before), or NULL. */
	void (*init_call)(void *call, void *arg);
	void *init_arg;
};

/* A table for up to @max calls (1 .. ZCRPC_MAX_CALL_TABLE - 1) of @size
 * bytes each, all free; the first chunk is allocated now, @init_call (may
 * be NULL) run on each of its calls. INVALID_ARGUMENT for a bad @max or
 * @size, RESOURCE_EXHAUSTED without memory. */
zcrpc_status zcrpc__call_table_init(struct zcrpc__call_table *t, uint32_t max,
				    size_t size,
				    void (*init_call)(void *call, void *arg),
				    void *init_arg);
/* Frees every chunk (the calls must be done with). */
void zcrpc__call_table_fini(struct zcrpc__call_table *t);

static inline struct zcrpc__call_hdr *
zcrpc__call_table_hdr(const struct zcrpc__call_table *t, uint32_t idx)
{
	return (struct zcrpc__call_hdr
			*)(void *)(t->chunk[idx >> ZCRPC_CALL_CHUNK_SHIFT] +
				   (size_t)(idx & (ZCRPC_CALL_CHUNK - 1)) *
					   t->stride);
}

static inline struct zcrpc__call_hdr *zcrpc__call_hdr_of(const void *call)
{
	return (struct zcrpc__call_hdr *)(void *)((char *)(uintptr_t)call -
						  ZCRPC__CALL_HDR);
}

/* The call at index @idx (< n), free or not. */
static inline void *zcrpc__call_table_at(const struct zcrpc__call_table *t,
					 uint32_t idx)
{
	return (char *)zcrpc__call_table_hdr(t, idx) + ZCRPC__CALL_HDR;
}

/* The call the next take returns, or NULL when none is free and the table
 * cannot grow: zcrpc__call_table_full() tells the maximum reached from a
 * failed allocation. It stays free (its reference is already the one it
 * will have). May grow the table (the calls already in it stay where they
 * are). */
void *zcrpc__call_table_peek(struct zcrpc__call_table *t);
/* Takes a free call (the one peek shows), growing the table when none is
 * free, or NULL as peek. */
void *zcrpc__call_table_take(struct zcrpc__call_table *t);
/* Gives @call back: its generation moves on, so its references stop
 * matching; it is the next one taken (the last freed goes first). */
void zcrpc__call_table_release(struct zcrpc__call_table *t, void *call);

/* The reference naming @call now. Reads @call's header only. */
static inline uint32_t zcrpc__call_table_ref(const struct zcrpc__call_table *t,
					     const void *call)
{
	const struct zcrpc__call_hdr *h = zcrpc__call_hdr_of(call);

	(void)t;
	return ZCRPC_REF(h->idx, h->slot & 0xfffU);
}

/* The taken call @ref names, or NULL (out of range, free, or a past
 * generation). O(1). */
static inline void *zcrpc__call_table_lookup(const struct zcrpc__call_table *t,
					     uint32_t ref)
{
	uint32_t idx = ZCRPC_REF_IDX(ref);
	struct zcrpc__call_hdr *h;

	if (idx >= t->n)
		return NULL;
	h = zcrpc__call_table_hdr(t, idx);
	if (h->slot != (0x80000000U | ZCRPC_REF_GEN(ref)))
		return NULL;
	return (char *)h + ZCRPC__CALL_HDR;
}

static inline uint32_t zcrpc__call_table_used(const struct zcrpc__call_table *t)
{
	return t->n - t->nfree;
}

/* Nonzero when every call the table may have is allocated (and so a NULL
 * from take means the maximum, not a failed allocation). */
static inline int zcrpc__call_table_full(const struct zcrpc__call_table *t)
{
	return t->n >= t->max;
}

#ifdef ZCRPC_TESTING
/* Test builds only: while @on, every growth of every call table fails as
 * if out of memory (the first chunk, at init, is not affected). */
void zcrpc__test_call_table_nomem(int on);
#endif

#ifdef __cplusplus
}
#endif

#endif /* ZCRPC_RPC_CALL_TABLE_H */
