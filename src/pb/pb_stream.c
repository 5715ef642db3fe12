/* protobuf-c glue, streams: protobuf-c messages on zcrpc streams
 * (zcrpc/stream.h). Writes pack straight into the frame's registered
 * memory; received messages are unpacked with the budgeted allocator
 * (pb_dispatch.c) and handed to a typed on_message. A message that does
 * not unpack ends its stream (pb.h says how, per side). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zcrpc/pb.h"

#include "../core/abi.h"
#include "pb_internal.h"

#define MIN_PB_STREAM_HANDLERS ZCRPC__LAYOUT_END(zcrpc_pb_stream_handlers, arg)

static void fill_pack(void *dst, size_t len, void *ctx)
{
	(void)len; /* get_packed_size() measured it */
	protobuf_c_message_pack(ctx, dst);
}

zcrpc_status zcrpc_pb_stream_write(zcrpc_stream *s, const ProtobufCMessage *msg)
{
	if (!s || !msg || !msg->descriptor ||
	    msg->descriptor->magic != PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC)
		return ZCRPC_INVALID_ARGUMENT;
	return zcrpc_stream_write_fill(s, protobuf_c_message_get_packed_size(msg),
				       fill_pack, (void *)msg);
}

/* The unpack, with the reason of a failure in @why. */
static zcrpc_status unpack(const ProtobufCMessageDescriptor *desc,
			   const void *data, size_t len, ProtobufCMessage **out,
			   char *why, size_t why_len)
{
	struct zcrpc__pb_alloc pa;

	zcrpc__pb_alloc_init(&pa, len);
	*out = protobuf_c_message_unpack(desc, &pa.a, len, data);
	if (*out)
		return ZCRPC_OK;
	if (why && pa.refused)
		snprintf(why, why_len, "message exceeds the unpack budget of %zu bytes",
			 pa.budget);
	else if (why)
		snprintf(why, why_len, "message does not unpack as %s", desc->name);
	return pa.refused ? ZCRPC_RESOURCE_EXHAUSTED : ZCRPC_INTERNAL;
}

zcrpc_status zcrpc_pb_stream_unpack(const ProtobufCMessageDescriptor *desc,
				    const void *data, size_t len,
				    ProtobufCMessage **out)
{
	if (out)
		*out = NULL;
	if (!desc || !out || (len && !data) ||
	    desc->magic != PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC)
		return ZCRPC_INVALID_ARGUMENT;
	return unpack(desc, data, len, out, NULL, 0);
}

/* ---- client: a box per stream ---------------------------------------------- */

struct pb_cstream {
	zcrpc_pb_stream_handlers h;
	zcrpc_status failed; /* OK, or why the typed layer cancelled it */
	char why[160];
};

static void c_headers(zcrpc_stream *s, const zcrpc_md *md, size_t n_md, void *arg)
{
	struct pb_cstream *b = arg;

	if (b->h.on_headers)
		b->h.on_headers(s, md, n_md, b->h.arg);
}

static void c_message(zcrpc_stream *s, const void *data, size_t len, void *arg)
{
	struct pb_cstream *b = arg;
	ProtobufCMessage *m;
	zcrpc_status st;

	if (b->failed != ZCRPC_OK)
		return; /* cancelled already: nothing more is delivered */
	st = unpack(b->h.in, data, len, &m, b->why, sizeof(b->why));
	if (st != ZCRPC_OK) {
		b->failed = st;
		zcrpc_stream_cancel(s);
		return;
	}
	if (b->h.on_message)
		b->h.on_message(s, m, b->h.on_message_fn, b->h.arg);
	protobuf_c_message_free_unpacked(m, NULL);
}

static void c_writable(zcrpc_stream *s, void *arg)
{
	struct pb_cstream *b = arg;

	if (b->h.on_writable)
		b->h.on_writable(s, b->h.arg);
}

static void c_finish(zcrpc_stream *s, const zcrpc_stream_end *end, void *arg)
{
	struct pb_cstream *b = arg;
	zcrpc_stream_end e = *end;

	if (b->failed != ZCRPC_OK) {
		/* Our cancel ended it: say why, not CANCELLED. */
		e.status = b->failed;
		e.message = b->why;
		e.md = NULL;
		e.n_md = 0;
	}
	b->h.on_finish(s, &e, b->h.arg);
	free(b);
}

zcrpc_status zcrpc_pb_stream_start(zcrpc_channel *ch, uint32_t method,
				   const zcrpc_stream_opts *o,
				   const zcrpc_pb_stream_handlers *h,
				   zcrpc_stream **out)
{
	zcrpc_pb_stream_handlers hc;
	zcrpc_stream_handlers rh;
	struct pb_cstream *b;
	zcrpc_status st;

	memset(&hc, 0, sizeof(hc));
	if (!ch || !h || !out ||
	    ZCRPC__ABI_IN(&hc, h, MIN_PB_STREAM_HANDLERS) != ZCRPC_OK || !hc.in ||
	    hc.in->magic != PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC || !hc.on_finish)
		return ZCRPC_INVALID_ARGUMENT;
	if (!(b = calloc(1, sizeof(*b))))
		return ZCRPC_RESOURCE_EXHAUSTED;
	b->h = hc;
	b->failed = ZCRPC_OK;
	memset(&rh, 0, sizeof(rh));
	rh.size = sizeof(rh);
	rh.on_headers = c_headers;
	rh.on_message = c_message;
	rh.on_writable = c_writable;
	rh.on_finish = c_finish;
	rh.arg = b;
	st = zcrpc_stream_start(ch, method, o, &rh, out);
	if (st != ZCRPC_OK)
		free(b); /* nothing started: no on_finish will free it */
	return st;
}

/* ---- server: the caller's handlers, kept for the server's life ------------
 * The raw registration copies its handlers but has no hook to free what
 * their arg points to, so the caller's struct itself is the arg. A field
 * added to zcrpc_pb_stream_handlers later must be read only when the
 * caller's h->size covers it (an older caller's struct is shorter). */

static void s_open(zcrpc_stream *s, const zcrpc_stream_open *open, void *arg)
{
	const zcrpc_pb_stream_handlers *h = arg;

	if (h->on_open)
		h->on_open(s, open, h->arg);
}

static void s_message(zcrpc_stream *s, const void *data, size_t len, void *arg)
{
	const zcrpc_pb_stream_handlers *h = arg;
	ProtobufCMessage *m;
	zcrpc_status st;
	char why[160];

	st = unpack(h->in, data, len, &m, why, sizeof(why));
	if (st != ZCRPC_OK) {
		/* Ends it: no message reaches on_message after this one. */
		zcrpc_stream_finish(s, st, why, NULL, 0);
		return;
	}
	if (h->on_message)
		h->on_message(s, m, h->on_message_fn, h->arg);
	protobuf_c_message_free_unpacked(m, NULL);
}

static void s_half_close(zcrpc_stream *s, void *arg)
{
	const zcrpc_pb_stream_handlers *h = arg;

	if (h->on_half_close)
		h->on_half_close(s, h->arg);
}

static void s_writable(zcrpc_stream *s, void *arg)
{
	const zcrpc_pb_stream_handlers *h = arg;

	if (h->on_writable)
		h->on_writable(s, h->arg);
}

static void s_finish(zcrpc_stream *s, const zcrpc_stream_end *end, void *arg)
{
	const zcrpc_pb_stream_handlers *h = arg;

	if (h->on_finish)
		h->on_finish(s, end, h->arg);
}

zcrpc_status zcrpc_pb_server_register_stream(zcrpc_server *s,
					     const char *full_name,
					     const zcrpc_pb_stream_handlers *h)
{
	zcrpc_pb_stream_handlers hc;
	zcrpc_stream_handlers rh;

	memset(&hc, 0, sizeof(hc));
	/* Checked like a copy, but @h itself is what the streams use. */
	if (!s || !full_name || !h ||
	    ZCRPC__ABI_IN(&hc, h, MIN_PB_STREAM_HANDLERS) != ZCRPC_OK || !hc.in ||
	    hc.in->magic != PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC)
		return ZCRPC_INVALID_ARGUMENT;
	memset(&rh, 0, sizeof(rh));
	rh.size = sizeof(rh);
	rh.on_open = s_open;
	rh.on_message = s_message;
	rh.on_half_close = s_half_close;
	rh.on_writable = s_writable;
	rh.on_finish = s_finish;
	rh.arg = (void *)h;
	return zcrpc_server_register_stream(s, full_name, &rh);
}
