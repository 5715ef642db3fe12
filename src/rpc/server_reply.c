/* zcrpc — the server's replies: inline, with a bulk part (from a cached
 * buffer or in place from registered memory), from another thread; a
 * reply always ends the call. */
#include "server_internal.h"
#include "../core/md.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* zcrpc_reply_opts_init's values, copied per reply without the ABI pass. */
static const zcrpc_reply_opts reply_opts_default = {
	.size = sizeof(zcrpc_reply_opts)};

void zcrpc_reply_opts_init_sized(zcrpc_reply_opts *caller, size_t size)
{
	zcrpc_reply_opts d;

	memset(&d, 0, sizeof(d));
	d.size = sizeof(d);
	zcrpc__abi_init(caller, size, &d, sizeof(d));
}

/* The reply's bulk part, written by @fill or copied from @data: into a
 * buffer from the cache, or, while one is registered off-thread (the
 * worker never registers), onto the heap until zcrpc__server_on_buffer. */
static zcrpc_status reply_take_buffer(zcrpc_server *s, zcrpc_server_call *c,
				      const void *data, size_t len,
				      zcrpc_fill_fn fill, void *fill_ctx)
{
	zcrpc_status st = zcrpc__bulk_get_async(
		&s->bulk, len, zcrpc__scall_ref(s, c), &c->reply_buf);
	void *dst;

	if (st == ZCRPC_UNAVAILABLE) {
		c->reply_heap = malloc(len);
		if (!c->reply_heap)
			return ZCRPC_RESOURCE_EXHAUSTED; /* the buffer is cached */
		dst = c->reply_heap;
	} else if (st != ZCRPC_OK) {
		return st;
	} else {
		dst = c->reply_buf->ptr;
	}
	if (fill) {
		fill(dst, len, fill_ctx);
	} else {
		memcpy(dst, data, len);
		s->st.copied_bytes += len;
	}
	return ZCRPC_OK;
}

static zcrpc_status reply(zcrpc_server_call *c, zcrpc_status status,
			  const char *message, const void *data, size_t len,
			  zcrpc_fill_fn fill, void *fill_ctx,
			  const zcrpc_reply_opts *o);

/* A reply asked with bad arguments still ends the call (rpc.h: the handle
 * is released whatever the result): the client gets INTERNAL. */
static zcrpc_status reply_invalid(zcrpc_server_call *c)
{
	reply(c, ZCRPC_INTERNAL, "the server could not build its reply", NULL,
	      0, NULL, NULL, NULL);
	return ZCRPC_INVALID_ARGUMENT;
}

zcrpc_status zcrpc_server_call_reply(zcrpc_server_call *c, zcrpc_status status,
			      const char *message, const void *data, size_t len,
			      const zcrpc_reply_opts *o)
{
	if (len && !data)
		return reply_invalid(c);
	return reply(c, status, message, data, len, NULL, NULL, o);
}

zcrpc_status zcrpc_server_call_reply_fill(zcrpc_server_call *c, size_t len,
				   zcrpc_fill_fn fill, void *fill_ctx,
				   const zcrpc_reply_opts *o)
{
	if (len && !fill)
		return reply_invalid(c);
	return reply(c, ZCRPC_OK, NULL, NULL, len, fill, fill_ctx, o);
}

/* A reply the client no longer waits for (its connection went, it
 * cancelled, its deadline passed) is not sent: the call ends and *@st says
 * why. Returns 1 then. */
static int reply_dropped(zcrpc_server *s, zcrpc_server_call *c,
			 zcrpc_status *st)
{
	if (!c->sc)
		*st = ZCRPC_UNAVAILABLE;
	else if (c->cancelled)
		*st = ZCRPC_CANCELLED;
	else if (c->deadline_ns && zcrpc__now_ns() >= c->deadline_ns)
		*st = ZCRPC_DEADLINE_EXCEEDED;
	else
		return 0;
	zcrpc__scall_free(s, c);
	zcrpc__server_run_queue(s);
	return 1;
}

/* Where the reply's bytes go: inline, or (above the bulk threshold or what
 * fits with the metadata) into a bulk part taken here; the handler's
 * attachment is the bulk part otherwise. Sets @f's bulk fields; *@len is
 * what stays inline. */
static zcrpc_status reply_layout(zcrpc_server *s, zcrpc_server_call *c,
				 struct zcrpc_frame *f,
				 const zcrpc_reply_opts *ro, const void *data,
				 size_t *len, zcrpc_fill_fn fill,
				 void *fill_ctx)
{
	size_t mdl = zcrpc__md_bytes(ro->md, ro->n_md), inline_cap;
	zcrpc_status st;

	if (mdl == (size_t)-1)
		return ZCRPC_INVALID_ARGUMENT;
	inline_cap = zcrpc__worker_max_msg(s->w) - ZCRPC_FRAME_HDR_LEN - mdl;
	if (f->status == ZCRPC_OK &&
	    (*len > s->o.bulk_threshold || *len > inline_cap)) {
		if (ro->attachment)
			return ZCRPC_INVALID_ARGUMENT;
		st = reply_take_buffer(s, c, data, *len, fill, fill_ctx);
		if (st != ZCRPC_OK)
			return st;
		c->reply_src.len = *len;
		f->flags = ZCRPC_FRAME_F_BULK | ZCRPC_FRAME_F_PAYLOAD_IN_BULK;
		f->bulk_len = *len;
		*len = 0;
	} else if (ro->attachment) {
		if (!ro->attachment->len ||
		    !zcrpc__mr_covers(ro->attachment->mr, NULL,
				      ro->attachment->offset,
				      ro->attachment->len, 0))
			return ZCRPC_INVALID_ARGUMENT;
		c->reply_src = *ro->attachment;
		f->flags = ZCRPC_FRAME_F_BULK;
		f->bulk_len = ro->attachment->len;
	}
	return ZCRPC_OK;
}

/* The built reply @out goes out, or waits for its bulk buffer (registered
 * off-thread: on_buffer sends it). Without a bulk part the call ends here;
 * with one it waits for the client's grant. */
static void reply_send(zcrpc_server *s, zcrpc_server_call *c,
		       const struct zcrpc_frame *f, struct zcrpc__out *out)
{
	if (c->reply_heap) {
		c->reply_out = *out;
		c->state = SS_REPLY_BUF;
		s->st.bulk_waits++;
		zcrpc__timer_start(s->w, &s->timer, zcrpc__now_ns() + ZCRPC_RETRY_NS);
		return;
	}
	zcrpc__sconn_send(c->sc, out);
	if (f->flags & ZCRPC_FRAME_F_BULK) {
		/* Freed when its write completes; the request's memory stays
		 * until then, since the reply may be sent from it in place. */
		c->state = SS_REPLY_GRANT;
		c->bulk_deadline_ns = zcrpc__now_ns() + s->write_timeout_ns;
		zcrpc__server_watch_bulk_deadline(s, c->bulk_deadline_ns);
		return;
	}
	s->st.replies++;
	if (c->on_done) {
		void (*fn)(void *, zcrpc_status) = c->on_done;

		c->on_done = NULL;
		fn(c->done_ctx, ZCRPC_OK);
	}
	zcrpc__scall_free(s, c);
}

static zcrpc_status reply(zcrpc_server_call *c, zcrpc_status status,
			  const char *message, const void *data, size_t len,
			  zcrpc_fill_fn fill, void *fill_ctx,
			  const zcrpc_reply_opts *o)
{
	zcrpc_server *s;
	struct sconn *sc;
	zcrpc_reply_opts ro;
	struct zcrpc_frame f;
	struct zcrpc__out out;
	zcrpc_md all[ZCRPC_MD_MAX_PAIRS]; /* initial, then trailing */
	size_t n_initial;
	zcrpc_status st;

	if (!c || c->state != SS_RUNNING)
		return ZCRPC_INVALID_ARGUMENT;
	ro = reply_opts_default; /* what zcrpc_reply_opts_init gives */
	if (o && ZCRPC__ABI_IN(&ro, o, ZCRPC__MIN_REPLY_OPTS) != ZCRPC_OK)
		return reply_invalid(c);
	/* One metadata area: the initial pairs first, counted in the frame
	 * (docs/protocol.md §7). */
	n_initial = ro.n_initial_md;
	if (n_initial) {
		if (!ro.initial_md || n_initial + ro.n_md > ZCRPC_MD_MAX_PAIRS ||
		    (ro.n_md && !ro.md))
			return reply_invalid(c);
		memcpy(all, ro.initial_md, n_initial * sizeof(all[0]));
		if (ro.n_md)
			memcpy(all + n_initial, ro.md, ro.n_md * sizeof(all[0]));
		ro.md = all;
		ro.n_md += n_initial;
	}
	s = c->s;
	sc = c->sc;
	if ((unsigned)status >= ZCRPC_STATUS_COUNT) {
		/* Not a gRPC code: sent as UNKNOWN, as gRPC does. */
		s->st.invalid_status++;
		status = ZCRPC_UNKNOWN;
		if (!message || !*message)
			message = "invalid status code from the handler";
	}
	s->st.running--;
	c->on_done = ro.on_done;
	c->done_ctx = ro.ctx;
	if (reply_dropped(s, c, &st))
		return st;
	c->ic_status = status; /* what the interceptors see at its end */
	c->ic_replied = 1;
	if (status == ZCRPC_OK && s->root->ics.n)
		zcrpc__schain_message(&s->root->ics, &c->ic, 1,
				      len + (ro.attachment ? ro.attachment->len : 0));
	memset(&f, 0, sizeof(f));
	f.type = ZCRPC_FRAME_REPLY;
	f.call_id = c->client_ref;
	f.status = (uint32_t)status;
	f.count = (uint32_t)n_initial;
	if (status != ZCRPC_OK) {
		/* Errors carry their message as the payload. */
		data = message ? message : "";
		len = zcrpc__status_msg_len(data);
		fill = NULL;
		ro.attachment = NULL; /* metadata is still allowed */
	}
	st = reply_layout(s, c, &f, &ro, data, &len, fill, fill_ctx);
	if (st != ZCRPC_OK)
		goto err_reply;
	if (f.flags & ZCRPC_FRAME_F_BULK)
		f.bulk_token = zcrpc__scall_ref(s, c);
	st = zcrpc__out_build(s->w, &f, ro.md, ro.n_md, len, fill, fill_ctx,
			      data, &out);
	if (st != ZCRPC_OK)
		goto err_reply;
	if (status == ZCRPC_OK && !fill && len)
		s->st.copied_bytes += len;
	reply_send(s, c, &f, &out);
	zcrpc__server_run_queue(s);
	return ZCRPC_OK;

err_reply:
	/* The client still gets an answer (once a pool slot is there). */
	if (st == ZCRPC_RESOURCE_EXHAUSTED)
		zcrpc__sconn_send_simple(
			sc, ZCRPC_FRAME_REPLY, c->client_ref,
			ZCRPC_RESOURCE_EXHAUSTED,
			"no memory at the server for the reply");
	else
		zcrpc__sconn_send_simple(
			sc, ZCRPC_FRAME_REPLY, c->client_ref, ZCRPC_INTERNAL,
			"the server could not build its reply");
	zcrpc__scall_free(s, c);
	zcrpc__server_run_queue(s);
	return st;
}

struct xreply {
	zcrpc_server_call *call;
	uint32_t ref;
	zcrpc_status status;
	char *message;
	void *data;
	size_t len;
	zcrpc_reply_opts o; /* its metadata: copies in md and initial */
	zcrpc_md *md, *initial;
};

static void xreply_free(struct xreply *x)
{
	free(x->message);
	free(x->data);
	free(x->md);
	free(x->initial);
	free(x);
}

static void xreply_run(zcrpc_worker *w, void *arg)
{
	struct xreply *x = arg;
	zcrpc_server_call *c = x->call;

	(void)w;
	if (c->state == SS_RUNNING && zcrpc__scall_ref(c->s, c) == x->ref)
		zcrpc_server_call_reply(c, x->status, x->message, x->data, x->len,
					&x->o);
	xreply_free(x);
}

zcrpc_status zcrpc_server_call_reply_any_thread_opts(zcrpc_server_call *c,
						     zcrpc_status status,
						     const char *message,
						     const void *data, size_t len,
						     const zcrpc_reply_opts *o)
{
	struct xreply *x;
	zcrpc_status st;

	if (!c || (len && !data))
		return ZCRPC_INVALID_ARGUMENT;
	x = calloc(1, sizeof(*x));
	if (!x)
		return ZCRPC_RESOURCE_EXHAUSTED;
	x->o = reply_opts_default;
	if (o && (ZCRPC__ABI_IN(&x->o, o, ZCRPC__MIN_REPLY_OPTS) != ZCRPC_OK ||
		  x->o.attachment || x->o.on_done || (x->o.n_md && !x->o.md) ||
		  (x->o.n_initial_md && !x->o.initial_md) ||
		  x->o.n_md > ZCRPC_MD_MAX_PAIRS ||
		  x->o.n_initial_md > ZCRPC_MD_MAX_PAIRS)) {
		free(x);
		return ZCRPC_INVALID_ARGUMENT;
	}
	x->call = c;
	x->ref = zcrpc__scall_ref(
		c->s, c); /* read-only fields, set before the handler ran */
	x->status = status;
	x->message = message ? strdup(message) : NULL;
	x->data = len ? malloc(len) : NULL;
	x->md = zcrpc__md_dup(x->o.md, x->o.n_md);
	x->initial = zcrpc__md_dup(x->o.initial_md, x->o.n_initial_md);
	if ((message && !x->message) || (len && !x->data) ||
	    (x->o.n_md && !x->md) || (x->o.n_initial_md && !x->initial)) {
		xreply_free(x);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	x->o.md = x->md;
	x->o.initial_md = x->initial;
	if (len)
		memcpy(x->data, data, len);
	x->len = len;
	st = zcrpc_worker_post(c->s->w, xreply_run, x);
	if (st != ZCRPC_OK)
		xreply_free(x);
	return st;
}

zcrpc_status zcrpc_server_call_reply_any_thread(zcrpc_server_call *c,
					 zcrpc_status status,
					 const char *message, const void *data,
					 size_t len)
{
	return zcrpc_server_call_reply_any_thread_opts(c, status, message, data,
						       len, NULL);
}

int zcrpc_server_call_cancelled(const zcrpc_server_call *c)
{
	/* Any thread: the worker sets the flag on CANCEL and when the
	 * connection closes (where it also clears c->sc). */
	return c ? atomic_load((atomic_uchar *)&c->cancelled) : 1;
}
