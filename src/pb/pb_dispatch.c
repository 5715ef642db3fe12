/* protobuf-c glue, the part both sides share that needs no connection: the
 * budgeted unpack allocator, method ids, and the server's dispatch (method
 * lookup and budgeted unpack of a request; see pb_dispatch.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "zcrpc/pb.h"

#include "../core/fnv.h"
#include "pb_dispatch.h"

/* ---- the budgeted allocator ---------------------------------------------- */

/* Blocks come straight from malloc (so a message unpacked with it can be
 * freed with the default allocator, NULL); the budget counts every byte
 * handed out during the unpack, scratch space included, and never gives
 * any back: a conservative bound. */
static void *pb_alloc(void *data, size_t size)
{
	struct zcrpc__pb_alloc *pa = data;
	void *p;

	if (size > pa->budget - pa->used) {
		pa->refused = 1;
		return NULL;
	}
	if (!(p = malloc(size ? size : 1)))
		return NULL;
	pa->used += size;
	return p;
}

static void pb_free(void *data, void *p)
{
	(void)data;
	free(p);
}

void zcrpc__pb_alloc_init(struct zcrpc__pb_alloc *pa, size_t wire_len)
{
	pa->a.alloc = pb_alloc;
	pa->a.free = pb_free;
	pa->a.allocator_data = pa;
	pa->used = 0;
	pa->refused = 0;
	pa->budget = ZCRPC_PB_UNPACK_BUDGET;
	if (wire_len <= (SIZE_MAX - pa->budget) / 2)
		pa->budget += 2 * wire_len;
	else
		pa->budget = SIZE_MAX;
}

uint32_t zcrpc__pb_method_id(const ProtobufCServiceDescriptor *d, unsigned i)
{
	uint32_t h = ZCRPC__FNV1A_BASIS;

	h = zcrpc__fnv1a_more(h, "/");
	h = zcrpc__fnv1a_more(h, d->name);
	h = zcrpc__fnv1a_more(h, "/");
	return zcrpc__fnv1a_more(h, d->methods[i].name);
}

/* ---- the server's dispatch ------------------------------------------------ */

int zcrpc__pb_find_method(const ProtobufCServiceDescriptor *d,
			  uint32_t method_id)
{
	unsigned mi;

	for (mi = 0; mi < d->n_methods; mi++)
		if (zcrpc__pb_method_id(d, mi) == method_id)
			return (int)mi;
	return -1;
}

ProtobufCMessage *zcrpc__pb_unpack_request(const ProtobufCServiceDescriptor *d,
					   unsigned mi, const void *data,
					   size_t len, struct zcrpc__pb_alloc *pa,
					   zcrpc_status *st, char *why,
					   size_t why_len)
{
	ProtobufCMessage *in;

	zcrpc__pb_alloc_init(pa, len);
	in = protobuf_c_message_unpack(d->methods[mi].input, &pa->a, len, data);
	if (in)
		return in;
	*st = pa->refused ? ZCRPC_RESOURCE_EXHAUSTED : ZCRPC_INTERNAL;
	if (why && why_len) {
		if (pa->refused)
			snprintf(why, why_len,
				 "request exceeds the unpack budget of %zu bytes",
				 pa->budget);
		else
			snprintf(why, why_len, "request does not unpack as %s",
				 d->methods[mi].input->name);
	}
	return NULL;
}
