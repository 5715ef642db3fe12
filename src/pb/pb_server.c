/* protobuf-c glue, server side: serves any ProtobufCService (for instance
 * one built with protoc-c's FOO__INIT(prefix_)) on a zcrpc server. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zcrpc/pb.h"

#include "pb_dispatch.h"
#include "../core/abi.h"
#include "../core/md.h"

/* How protobuf-c's own invoke sees the handler slots after the base. */
typedef void (*pb_handler)(void *service, const ProtobufCMessage *input,
			   ProtobufCClosure closure, void *closure_data);

/* One call in a handler's hands; its closure_data is a handle to it. */
struct pb_scall {
	zcrpc_server_call *call;
	const zcrpc_request *req; /* the server's view: valid until the reply */
	const ProtobufCServiceDescriptor *d;
	unsigned mi;
	ProtobufCMessage *in;
	struct zcrpc__pb_alloc pa;
	pthread_t thread; /* the worker's */
	zcrpc_status st;  /* for closure(NULL) */
	char *msg;
	int has_att;	  /* zcrpc_pb_set_reply_attachment() */
	zcrpc_bulk att;
	void (*att_done)(void *ctx, zcrpc_status st);
	void *att_ctx;
	void *ctx;	  /* zcrpc_pb_server_opts.ctx */
	zcrpc_md *initial, *trailing; /* zcrpc_pb_set_reply_md()'s copies */
	size_t n_initial, n_trailing;
};

/* The reply options of @sc: its metadata, and its attachment on OK. */
static void sc_reply_opts(const struct pb_scall *sc, zcrpc_status st,
			  zcrpc_reply_opts *o)
{
	zcrpc_reply_opts_init(o);
	o->initial_md = sc->initial;
	o->n_initial_md = sc->n_initial;
	o->md = sc->trailing;
	o->n_md = sc->n_trailing;
	if (sc->has_att && st == ZCRPC_OK) {
		o->attachment = &sc->att;
		o->on_done = sc->att_done;
		o->ctx = sc->att_ctx;
	}
}

static void reply_now(struct pb_scall *sc, zcrpc_status st, const char *msg,
		      const void *data, size_t len)
{
	zcrpc_reply_opts o;

	sc_reply_opts(sc, st, &o);
	if (pthread_equal(pthread_self(), sc->thread)) {
		zcrpc_server_call_reply(sc->call, st, msg, data, len, &o);
	} else if (o.attachment) {
		/* Attachments are sent from the worker's thread only. */
		zcrpc_server_call_reply_any_thread(sc->call, ZCRPC_INTERNAL,
					    "reply attachment from another thread", NULL, 0);
		if (sc->att_done)
			sc->att_done(sc->att_ctx, ZCRPC_INTERNAL);
	} else {
		/* The metadata is copied: it goes with the reply. */
		o.attachment = NULL;
		o.on_done = NULL;
		if (zcrpc_server_call_reply_any_thread_opts(sc->call, st, msg, data,
							    len, &o) != ZCRPC_OK)
			zcrpc_server_call_reply_any_thread(
				sc->call, ZCRPC_INTERNAL,
				"the reply's metadata could not be queued", NULL, 0);
	}
}

static void scall_free(struct pb_scall *sc)
{
	if (sc->in)
		protobuf_c_message_free_unpacked(sc->in, &sc->pa.a);
	free(sc->msg);
	free(sc->initial);
	free(sc->trailing);
	free(sc);
}

/* ---- closure_data handles ---------------------------------------------------
 * closure_data is not a pointer but (generation << 32 | index) into one
 * process-wide table, so a closure called a second time (or with any
 * closure_data the glue never handed out) is looked up, found to name no
 * call, ignored and counted: nothing is read from a freed pb_scall, and a
 * stale handle never reaches the call that reuses its slot. Any thread. */

_Static_assert(sizeof(uintptr_t) >= sizeof(uint64_t),
	       "closure_data handles need 64-bit pointers");

struct pb_slot {
	uint32_t gen; /* of the handle now (or last) handed out */
	uint32_t next_free;
	struct pb_scall *sc; /* NULL while free */
};

static pthread_mutex_t tab_mu = PTHREAD_MUTEX_INITIALIZER;
static struct pb_slot *tab;
static uint32_t tab_len, tab_cap, tab_free = UINT32_MAX;
static atomic_ullong closures_ignored;

/* A handle naming @sc, or NULL when the table cannot grow. */
static void *handle_new(struct pb_scall *sc)
{
	void *h = NULL;
	uint32_t i;

	pthread_mutex_lock(&tab_mu);
	if (tab_free != UINT32_MAX) {
		i = tab_free;
		tab_free = tab[i].next_free;
	} else {
		if (tab_len == tab_cap) {
			uint32_t cap = tab_cap ? tab_cap * 2 : 256;
			struct pb_slot *t = NULL;

			if (tab_cap < (1U << 30))
				t = realloc(tab, cap * sizeof(*t));
			if (!t)
				goto out_unlock;
			tab = t;
			tab_cap = cap;
		}
		i = tab_len++;
		tab[i].gen = 0;
	}
	if (!++tab[i].gen)
		tab[i].gen = 1; /* never 0, so no handle is NULL */
	tab[i].sc = sc;
	h = (void *)(uintptr_t)(((uint64_t)tab[i].gen << 32) | i);
out_unlock:
	pthread_mutex_unlock(&tab_mu);
	return h;
}

/* The call @h names, or NULL. @take: the closure is running; the handle
 * stops naming anything from now on. */
static struct pb_scall *handle_get(const void *h, int take)
{
	uint64_t v = (uint64_t)(uintptr_t)h;
	uint32_t i = (uint32_t)v, gen = (uint32_t)(v >> 32);
	struct pb_scall *sc = NULL;

	pthread_mutex_lock(&tab_mu);
	if (gen && i < tab_len && tab[i].gen == gen && tab[i].sc) {
		sc = tab[i].sc;
		if (take) {
			tab[i].sc = NULL;
			tab[i].next_free = tab_free;
			tab_free = i;
		}
	}
	pthread_mutex_unlock(&tab_mu);
	return sc;
}

static void pack_fill(void *dst, size_t len, void *ctx)
{
	(void)len;
	protobuf_c_message_pack(ctx, dst);
}

static void pb_closure(const ProtobufCMessage *out, void *closure_data)
{
	struct pb_scall *sc = handle_get(closure_data, 1);
	uint8_t small[4096];
	uint8_t *buf = small;
	size_t len;

	if (!sc) { /* called before, or not ours: ignored (pb.h) */
		atomic_fetch_add(&closures_ignored, 1);
		return;
	}
	if (!out) {
		reply_now(sc, sc->st != ZCRPC_OK ? sc->st : ZCRPC_INTERNAL,
			  sc->msg ? sc->msg : "handler failed", NULL, 0);
	} else if (out->descriptor != sc->d->methods[sc->mi].output) {
		reply_now(sc, ZCRPC_INTERNAL, "handler replied with the wrong message type",
			  NULL, 0);
	} else if (pthread_equal(pthread_self(), sc->thread)) {
		/* On the worker: pack straight into the reply's registered
		 * memory, no intermediate buffer. */
		zcrpc_reply_opts o;

		sc_reply_opts(sc, ZCRPC_OK, &o);
		zcrpc_server_call_reply_fill(sc->call, protobuf_c_message_get_packed_size(out),
				      pack_fill, (void *)out, &o);
	} else {
		len = protobuf_c_message_get_packed_size(out);
		if (len > sizeof(small) && !(buf = malloc(len))) {
			reply_now(sc, ZCRPC_RESOURCE_EXHAUSTED,
				  "no memory to pack the reply", NULL, 0);
		} else {
			protobuf_c_message_pack(out, buf);
			reply_now(sc, ZCRPC_OK, NULL, buf, len);
			if (buf != small)
				free(buf);
		}
	}
	scall_free(sc);
}

static void pb_serve(zcrpc_server_call *call, const zcrpc_request *r,
		     ProtobufCService *svc, void *ctx)
{
	const ProtobufCServiceDescriptor *d = svc->descriptor;
	struct pb_scall *sc;
	zcrpc_status st;
	unsigned mi;
	int found;
	char m[160];
	void *h;

	if ((found = zcrpc__pb_find_method(d, r->method_id)) < 0) {
		/* the bounds check before invoke */
		zcrpc_server_call_reply(call, ZCRPC_UNIMPLEMENTED, "no such method",
				 NULL, 0, NULL);
		return;
	}
	mi = (unsigned)found;
	if (svc->invoke == protobuf_c_service_invoke_internal &&
	    !((const pb_handler *)(svc + 1))[mi]) {
		snprintf(m, sizeof(m), "%s.%s is not implemented", d->name,
			 d->methods[mi].name);
		zcrpc_server_call_reply(call, ZCRPC_UNIMPLEMENTED, m, NULL, 0, NULL);
		return;
	}
	sc = calloc(1, sizeof(*sc));
	if (!sc) {
		zcrpc_server_call_reply(call, ZCRPC_RESOURCE_EXHAUSTED, "out of memory",
				 NULL, 0, NULL);
		return;
	}
	sc->call = call;
	sc->req = r;
	sc->d = d;
	sc->mi = mi;
	sc->thread = pthread_self();
	sc->st = ZCRPC_OK;
	sc->ctx = ctx;
	sc->in = zcrpc__pb_unpack_request(d, mi, r->data, r->len, &sc->pa, &st,
					  m, sizeof(m));
	if (!sc->in) {
		zcrpc_server_call_reply(call, st, m, NULL, 0, NULL);
		scall_free(sc);
		return;
	}
	if (!(h = handle_new(sc))) {
		zcrpc_server_call_reply(call, ZCRPC_RESOURCE_EXHAUSTED,
				 "out of memory", NULL, 0, NULL);
		scall_free(sc);
		return;
	}
	svc->invoke(svc, mi, sc->in, pb_closure, h);
}

/* A service registered by zcrpc_pb_server_register(): @arg is the service. */
static void pb_handle(zcrpc_server_call *call, const zcrpc_request *r,
		      void *arg)
{
	pb_serve(call, r, arg, NULL);
}

/* One registered with zcrpc_pb_server_register_opts(): @arg is the
 * caller's zcrpc_pb_server_opts. */
static void pb_handle_opts(zcrpc_server_call *call, const zcrpc_request *r,
			   void *arg)
{
	const zcrpc_pb_server_opts *o = arg;

	pb_serve(call, r, o->service, o->ctx);
}

static int svc_ok(const ProtobufCService *svc)
{
	const ProtobufCServiceDescriptor *d;

	return svc && svc->invoke && (d = svc->descriptor) &&
	       d->magic == PROTOBUF_C__SERVICE_DESCRIPTOR_MAGIC && d->name &&
	       (!d->n_methods || d->methods);
}

/* Serves method @i of @svc as "/pkg.Service/Method". */
static zcrpc_status register_one(zcrpc_server *s, ProtobufCService *svc,
				 unsigned i, zcrpc_handler fn, void *arg)
{
	const ProtobufCServiceDescriptor *d = svc->descriptor;
	zcrpc_status st;
	char *name;
	size_t n;

	n = strlen(d->name) + strlen(d->methods[i].name) + 3;
	if (!(name = malloc(n)))
		return ZCRPC_RESOURCE_EXHAUSTED;
	snprintf(name, n, "/%s/%s", d->name, d->methods[i].name);
	st = zcrpc_server_register(s, name, fn, arg);
	free(name);
	return st;
}

/* Serves the @n methods of @svc in @methods (NULL: all of them) with
 * @fn(@arg). */
static zcrpc_status register_some(zcrpc_server *s, ProtobufCService *svc,
				  const unsigned *methods, size_t n,
				  zcrpc_handler fn, void *arg)
{
	zcrpc_status st;
	size_t i;

	if (!s || !svc_ok(svc) || (n && !methods))
		return ZCRPC_INVALID_ARGUMENT;
	for (i = 0; i < n; i++)
		if (methods[i] >= svc->descriptor->n_methods)
			return ZCRPC_INVALID_ARGUMENT;
	for (i = 0; i < n; i++)
		if ((st = register_one(s, svc, methods[i], fn, arg)) != ZCRPC_OK)
			return st;
	return ZCRPC_OK;
}

/* Every method of @svc with @fn(@arg). */
static zcrpc_status register_all(zcrpc_server *s, ProtobufCService *svc,
				 zcrpc_handler fn, void *arg)
{
	zcrpc_status st;
	unsigned i;

	if (!s || !svc_ok(svc))
		return ZCRPC_INVALID_ARGUMENT;
	for (i = 0; i < svc->descriptor->n_methods; i++)
		if ((st = register_one(s, svc, i, fn, arg)) != ZCRPC_OK)
			return st;
	return ZCRPC_OK;
}

zcrpc_status zcrpc_pb_server_register(zcrpc_server *s, ProtobufCService *svc)
{
	return register_all(s, svc, pb_handle, svc);
}

zcrpc_status zcrpc_pb_server_register_methods(zcrpc_server *s,
					      ProtobufCService *svc,
					      const unsigned *methods, size_t n)
{
	return register_some(s, svc, methods, n, pb_handle, svc);
}

/* The oldest zcrpc_pb_server_opts accepted (docs/abi.md's rule). */
#define MIN_PB_SERVER_OPTS ZCRPC__LAYOUT_END(zcrpc_pb_server_opts, n_methods)

zcrpc_status zcrpc_pb_server_register_opts(zcrpc_server *s,
					   const zcrpc_pb_server_opts *o)
{
	void *arg = (void *)o; /* read by pb_handle_opts, never written */
	zcrpc_pb_server_opts oc;

	/* Checked as a copy; the calls read @o itself, within the minimum. */
	memset(&oc, 0, sizeof(oc));
	if (!o || ZCRPC__ABI_IN(&oc, o, MIN_PB_SERVER_OPTS) != ZCRPC_OK)
		return ZCRPC_INVALID_ARGUMENT;
	if (!oc.methods)
		return register_all(s, oc.service, pb_handle_opts, arg);
	return register_some(s, oc.service, oc.methods, oc.n_methods,
			     pb_handle_opts, arg);
}

static struct pb_scall *as_scall(const void *closure_data)
{
	return handle_get(closure_data, 0);
}

uint64_t zcrpc_pb_server_get_closures_ignored(void)
{
	return atomic_load(&closures_ignored);
}

void zcrpc_pb_set_status(void *closure_data, zcrpc_status status,
			 const char *message)
{
	struct pb_scall *sc = as_scall(closure_data);

	if (!sc || status == ZCRPC_OK)
		return;
	sc->st = status;
	free(sc->msg);
	sc->msg = message ? strdup(message) : NULL;
}

zcrpc_status zcrpc_pb_set_reply_attachment(void *closure_data,
					   const zcrpc_bulk *attachment,
					   void (*on_done)(void *ctx, zcrpc_status st),
					   void *ctx)
{
	struct pb_scall *sc = as_scall(closure_data);

	if (!sc || !attachment || !attachment->mr || !attachment->len)
		return ZCRPC_INVALID_ARGUMENT;
	sc->has_att = 1;
	sc->att = *attachment;
	sc->att_done = on_done;
	sc->att_ctx = ctx;
	return ZCRPC_OK;
}

void zcrpc_pb_reply_error(void *closure_data, zcrpc_status status,
			  const char *message)
{
	zcrpc_pb_set_status(closure_data, status, message);
	pb_closure(NULL, closure_data);
}

zcrpc_status zcrpc_pb_set_reply_md(void *closure_data, const zcrpc_md *initial,
				   size_t n_initial, const zcrpc_md *trailing,
				   size_t n_trailing)
{
	struct pb_scall *sc = as_scall(closure_data);
	zcrpc_md *i = NULL, *t = NULL;

	if (!sc || !zcrpc__md_fits(initial, n_initial, trailing, n_trailing))
		return ZCRPC_INVALID_ARGUMENT;
	if ((n_initial && !(i = zcrpc__md_dup(initial, n_initial))) ||
	    (n_trailing && !(t = zcrpc__md_dup(trailing, n_trailing)))) {
		free(i);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	free(sc->initial);
	free(sc->trailing);
	sc->initial = i;
	sc->n_initial = n_initial;
	sc->trailing = t;
	sc->n_trailing = n_trailing;
	return ZCRPC_OK;
}

void *zcrpc_pb_server_get_ctx(const void *closure_data)
{
	struct pb_scall *sc = as_scall(closure_data);

	return sc ? sc->ctx : NULL;
}

const zcrpc_request *zcrpc_pb_server_get_request(const void *closure_data)
{
	struct pb_scall *sc = as_scall(closure_data);

	return sc ? sc->req : NULL;
}

zcrpc_server_call *zcrpc_pb_server_get_call(const void *closure_data)
{
	struct pb_scall *sc = as_scall(closure_data);

	return sc ? sc->call : NULL;
}
