/* protobuf-c glue, client side: a ProtobufCService whose invoke() makes a
 * zcrpc call, packing the request straight into registered memory. Also
 * the budgeted unpack allocator both sides use. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "zcrpc/pb.h"

#include "pb_internal.h"

/* ---- the budgeted allocator ---------------------------------------------- */

/* Each block carries its size in front so free() can give the budget back. */
typedef union pb_hdr {
	size_t n;
	max_align_t align;
} pb_hdr;

static void *pb_alloc(void *data, size_t size)
{
	struct zcrpc__pb_alloc *pa = data;
	pb_hdr *h;

	if (size > pa->budget - pa->used ||
	    sizeof(*h) > pa->budget - pa->used - size) {
		pa->refused = 1;
		return NULL;
	}
	h = malloc(sizeof(*h) + size);
	if (!h)
		return NULL;
	h->n = size;
	pa->used += sizeof(*h) + size;
	return h + 1;
}

static void pb_free(void *data, void *p)
{
	struct zcrpc__pb_alloc *pa = data;
	pb_hdr *h;

	if (!p)
		return;
	h = (pb_hdr *)p - 1;
	pa->used -= sizeof(*h) + h->n;
	free(h);
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

static uint32_t fnv(uint32_t h, const char *s)
{
	while (*s) {
		h ^= (uint8_t)*s++;
		h *= 16777619u;
	}
	return h;
}

uint32_t zcrpc__pb_method_id(const ProtobufCServiceDescriptor *d, unsigned i)
{
	uint32_t h = 2166136261u;

	h = fnv(h, "/");
	h = fnv(h, d->name);
	h = fnv(h, "/");
	return fnv(h, d->methods[i].name);
}

/* ---- the client ----------------------------------------------------------- */

#define PB_CLIENT_MAGIC 0x7a637062u /* "zcpb" */

struct pb_client {
	ProtobufCService base; /* first: the generated stubs cast to it */
	uint32_t magic;
	zcrpc_channel *ch;
	zcrpc_call_opts opts;
	int has_opts;
	unsigned refs;	       /* 1 for the user until destroy, 1 per call */
	zcrpc_status last;
	char *last_msg;	       /* NULL = "" */
	uint32_t ids[];	       /* per method */
};

struct pb_ccall {
	struct pb_client *c;
	unsigned mi;
	ProtobufCClosure closure;
	void *closure_data;
};

static void client_unref(struct pb_client *c)
{
	if (--c->refs)
		return;
	c->magic = 0;
	free(c->last_msg);
	free(c);
}

static void set_last(struct pb_client *c, zcrpc_status st, const char *msg)
{
	free(c->last_msg);
	c->last_msg = msg && *msg ? strdup(msg) : NULL;
	c->last = st;
}

static void fill_pack(void *dst, size_t len, void *ctx)
{
	size_t n = protobuf_c_message_pack(ctx, dst);

	(void)n;
	(void)len; /* n == len: get_packed_size() measured it */
}

static void on_reply(zcrpc_channel *ch, const zcrpc_reply *r, void *arg)
{
	struct pb_ccall *pc = arg;
	struct pb_client *c = pc->c;
	ProtobufCMessage *out = NULL;
	struct zcrpc__pb_alloc pa;

	(void)ch;
	if (r->status == ZCRPC_OK) {
		zcrpc__pb_alloc_init(&pa, r->len);
		out = protobuf_c_message_unpack(
			c->base.descriptor->methods[pc->mi].output, &pa.a,
			r->len, r->data);
		if (!out)
			set_last(c, pa.refused ? ZCRPC_RESOURCE_EXHAUSTED : ZCRPC_INTERNAL,
				 pa.refused ? "reply exceeds the unpack budget"
					    : "reply does not unpack");
		else
			set_last(c, ZCRPC_OK, NULL);
	} else {
		set_last(c, r->status, r->message);
	}
	pc->closure(out, pc->closure_data);
	if (out)
		protobuf_c_message_free_unpacked(out, &pa.a);
	free(pc);
	client_unref(c);
}

static void client_invoke(ProtobufCService *svc, unsigned mi,
			  const ProtobufCMessage *in, ProtobufCClosure closure,
			  void *closure_data)
{
	struct pb_client *c = (struct pb_client *)svc;
	const ProtobufCServiceDescriptor *d = svc->descriptor;
	struct pb_ccall *pc;
	zcrpc_status st;
	size_t len;

	if (!closure)
		return; /* nowhere to report anything: do nothing */
	if (mi >= d->n_methods || !in ||
	    in->descriptor != d->methods[mi].input) {
		set_last(c, ZCRPC_INVALID_ARGUMENT,
			 "method index or input message type does not match the service");
		closure(NULL, closure_data);
		return;
	}
	pc = malloc(sizeof(*pc));
	if (!pc) {
		set_last(c, ZCRPC_RESOURCE_EXHAUSTED, "out of memory");
		closure(NULL, closure_data);
		return;
	}
	pc->c = c;
	pc->mi = mi;
	pc->closure = closure;
	pc->closure_data = closure_data;
	len = protobuf_c_message_get_packed_size(in);
	st = zcrpc_call_start(c->ch, c->ids[mi], len, fill_pack, (void *)in,
			      c->has_opts ? &c->opts : NULL, on_reply, pc, NULL);
	if (st != ZCRPC_OK) {
		free(pc);
		set_last(c, st, "the call could not start");
		closure(NULL, closure_data);
		return;
	}
	c->refs++;
}

static void client_destroy(ProtobufCService *svc)
{
	if (svc)
		client_unref((struct pb_client *)svc);
}

static struct pb_client *as_client(const ProtobufCService *svc)
{
	const struct pb_client *c = (const struct pb_client *)svc;

	if (!svc || svc->invoke != client_invoke || c->magic != PB_CLIENT_MAGIC)
		return NULL;
	return (struct pb_client *)c;
}

zcrpc_status zcrpc_pb_client_create(zcrpc_channel *ch,
				    const ProtobufCServiceDescriptor *d,
				    ProtobufCService **out)
{
	struct pb_client *c;
	unsigned i;

	if (!ch || !d || !out || d->magic != PROTOBUF_C__SERVICE_DESCRIPTOR_MAGIC ||
	    !d->name || (d->n_methods && !d->methods))
		return ZCRPC_INVALID_ARGUMENT;
	c = calloc(1, sizeof(*c) + d->n_methods * sizeof(c->ids[0]));
	if (!c)
		return ZCRPC_RESOURCE_EXHAUSTED;
	c->base.descriptor = d;
	c->base.invoke = client_invoke;
	c->base.destroy = client_destroy;
	c->magic = PB_CLIENT_MAGIC;
	c->ch = ch;
	c->refs = 1;
	c->last = ZCRPC_OK;
	for (i = 0; i < d->n_methods; i++)
		c->ids[i] = zcrpc__pb_method_id(d, i);
	*out = &c->base;
	return ZCRPC_OK;
}

zcrpc_status zcrpc_pb_client_set_opts(ProtobufCService *svc,
				      const zcrpc_call_opts *o)
{
	struct pb_client *c = as_client(svc);

	if (!c || (o && o->size < sizeof(*o)))
		return ZCRPC_INVALID_ARGUMENT;
	if (o) {
		c->opts = *o;
		c->opts.size = sizeof(c->opts);
	}
	c->has_opts = o != NULL;
	return ZCRPC_OK;
}

zcrpc_status zcrpc_pb_last_status(const ProtobufCService *svc,
				  const char **message)
{
	const struct pb_client *c = as_client(svc);

	if (!c) {
		if (message)
			*message = "not a zcrpc protobuf-c client";
		return ZCRPC_UNKNOWN;
	}
	if (message)
		*message = c->last_msg ? c->last_msg : "";
	return c->last;
}
