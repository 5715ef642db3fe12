/* protobuf-c glue, client side: a ProtobufCService whose invoke() makes a
 * zcrpc call, packing the request straight into registered memory. The
 * budgeted unpack allocator both sides use is in pb_dispatch.c. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "zcrpc/pb.h"

#include "pb_internal.h"
#include "../core/abi.h"
#include "../core/md.h"

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
	zcrpc_md *last_initial, *last_trailing; /* copies; NULL when none */
	size_t n_last_initial, n_last_trailing;
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
	free(c->last_initial);
	free(c->last_trailing);
	free(c);
}

static void set_last(struct pb_client *c, zcrpc_status st, const char *msg)
{
	free(c->last_initial);
	free(c->last_trailing);
	c->last_initial = c->last_trailing = NULL;
	c->n_last_initial = c->n_last_trailing = 0;
	free(c->last_msg);
	c->last_msg = msg && *msg ? strdup(msg) : NULL;
	c->last = st;
}

/* The reply a completion callback runs for on this thread
 * (zcrpc_pb_get_reply_md()), or NULL. */
static _Thread_local const zcrpc_reply *tl_reply;

/* Keeps copies of @r's metadata as @c's last (none without memory). */
static void set_last_md(struct pb_client *c, const zcrpc_reply *r)
{
	int has_initial = ZCRPC_VIEW_HAS(r, zcrpc_reply, n_initial_md);

	free(c->last_initial);
	free(c->last_trailing);
	c->last_trailing = zcrpc__md_dup(r->md, r->n_md);
	c->n_last_trailing = c->last_trailing ? r->n_md : 0;
	c->last_initial = has_initial ? zcrpc__md_dup(r->initial_md, r->n_initial_md)
				      : NULL;
	c->n_last_initial = c->last_initial ? r->n_initial_md : 0;
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
	const zcrpc_reply *saved;
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
	set_last_md(c, r);
	saved = tl_reply; /* @r's metadata readable during the closure */
	tl_reply = r;
	pc->closure(out, pc->closure_data);
	tl_reply = saved;
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
	zcrpc_call_opts co;

	zcrpc_call_opts_init(&co);
	if (!c ||
	    (o && ZCRPC__ABI_IN(&co, o, ZCRPC__MIN_CALL_OPTS) != ZCRPC_OK))
		return ZCRPC_INVALID_ARGUMENT;
	if (o)
		c->opts = co;
	c->has_opts = o != NULL;
	return ZCRPC_OK;
}

zcrpc_status zcrpc_pb_get_last_status(const ProtobufCService *svc,
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

/* @md/@n as out-parameters (each may be NULL). */
static void md_out(const zcrpc_md *md, size_t n, const zcrpc_md **out_md,
		   size_t *out_n)
{
	if (out_md)
		*out_md = n ? md : NULL;
	if (out_n)
		*out_n = n;
}

zcrpc_status zcrpc_pb_get_last_md(const ProtobufCService *svc,
				  const zcrpc_md **initial, size_t *n_initial,
				  const zcrpc_md **trailing, size_t *n_trailing)
{
	const struct pb_client *c = as_client(svc);

	md_out(c ? c->last_initial : NULL, c ? c->n_last_initial : 0, initial,
	       n_initial);
	md_out(c ? c->last_trailing : NULL, c ? c->n_last_trailing : 0, trailing,
	       n_trailing);
	return c ? ZCRPC_OK : ZCRPC_INVALID_ARGUMENT;
}

zcrpc_status zcrpc_pb_get_reply_md(const zcrpc_md **initial, size_t *n_initial,
				   const zcrpc_md **trailing, size_t *n_trailing)
{
	const zcrpc_reply *r = tl_reply;
	int has_initial = r && ZCRPC_VIEW_HAS(r, zcrpc_reply, n_initial_md);

	md_out(has_initial ? r->initial_md : NULL, has_initial ? r->n_initial_md : 0,
	       initial, n_initial);
	md_out(r ? r->md : NULL, r ? r->n_md : 0, trailing, n_trailing);
	return r ? ZCRPC_OK : ZCRPC_FAILED_PRECONDITION;
}

/* ---- calls by message, for typed stubs ---------------------------------- */

struct pb_acall {
	const ProtobufCMessageDescriptor *reply_desc;
	zcrpc_pb_done_fn done;
	zcrpc_pb_fn fn;
	void *arg;
};

static void on_typed_reply(zcrpc_channel *ch, const zcrpc_reply *r, void *arg)
{
	struct pb_acall *ac = arg;
	const zcrpc_reply *saved;
	ProtobufCMessage *out = NULL;
	struct zcrpc__pb_alloc pa;
	zcrpc_status st = r->status;
	const char *msg = r->message ? r->message : "";

	(void)ch;
	if (st == ZCRPC_OK) {
		zcrpc__pb_alloc_init(&pa, r->len);
		out = protobuf_c_message_unpack(ac->reply_desc, &pa.a, r->len, r->data);
		if (!out) {
			st = pa.refused ? ZCRPC_RESOURCE_EXHAUSTED : ZCRPC_INTERNAL;
			msg = pa.refused ? "reply exceeds the unpack budget"
					 : "reply does not unpack";
		}
	}
	saved = tl_reply; /* @r's metadata readable during done */
	tl_reply = r;
	ac->done(st, msg, out, ac->fn, ac->arg);
	tl_reply = saved;
	if (out)
		protobuf_c_message_free_unpacked(out, NULL);
	free(ac);
}

zcrpc_status zcrpc_pb_call_async(zcrpc_channel *ch, uint32_t method,
				 const ProtobufCMessage *req,
				 const ProtobufCMessageDescriptor *reply_desc,
				 const zcrpc_call_opts *o, zcrpc_pb_done_fn done,
				 zcrpc_pb_fn fn, void *arg, zcrpc_call_id *id)
{
	struct pb_acall *ac;
	zcrpc_status st;

	if (!ch || !req || !reply_desc || !done ||
	    reply_desc->magic != PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC)
		return ZCRPC_INVALID_ARGUMENT;
	if (!(ac = malloc(sizeof(*ac))))
		return ZCRPC_RESOURCE_EXHAUSTED;
	ac->reply_desc = reply_desc;
	ac->done = done;
	ac->fn = fn;
	ac->arg = arg;
	st = zcrpc_call_start(ch, method, protobuf_c_message_get_packed_size(req),
			      fill_pack, (void *)req, o, on_typed_reply, ac, id);
	if (st != ZCRPC_OK)
		free(ac);
	return st;
}

zcrpc_status zcrpc_pb_call(zcrpc_channel *ch, uint32_t method,
			   const ProtobufCMessage *req,
			   const ProtobufCMessageDescriptor *reply_desc,
			   const zcrpc_call_opts *o, ProtobufCMessage **reply,
			   char **message)
{
	uint8_t small[4096];
	uint8_t *buf = small;
	struct zcrpc__pb_alloc pa;
	zcrpc_result res;
	const char *why = NULL;
	zcrpc_status st;
	size_t len;

	if (reply)
		*reply = NULL;
	if (message)
		*message = NULL;
	if (!ch || !req || !reply_desc || !reply ||
	    reply_desc->magic != PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC)
		return ZCRPC_INVALID_ARGUMENT;
	len = protobuf_c_message_get_packed_size(req);
	if (len > sizeof(small) && !(buf = malloc(len)))
		return ZCRPC_RESOURCE_EXHAUSTED;
	protobuf_c_message_pack(req, buf);
	st = zcrpc_call(ch, method, buf, len, o, &res, sizeof(res));
	if (buf != small)
		free(buf);
	if (st == ZCRPC_OK) {
		zcrpc__pb_alloc_init(&pa, res.len);
		*reply = protobuf_c_message_unpack(reply_desc, &pa.a, res.len, res.data);
		if (!*reply) {
			st = pa.refused ? ZCRPC_RESOURCE_EXHAUSTED : ZCRPC_INTERNAL;
			why = pa.refused ? "reply exceeds the unpack budget"
					 : "reply does not unpack";
		}
	} else {
		why = res.message ? res.message : "";
	}
	if (message && why)
		*message = strdup(why);
	zcrpc_result_free(&res);
	return st;
}
