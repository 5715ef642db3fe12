/* zcrpc — synchronous calls (zcrpc_call): an async call whose callback
 * copies the reply out, run to completion on the caller's thread. */
#include "client_internal.h"
#include "../core/md.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sync_ctx {
	int done;
	zcrpc_result *out;
};

static void *dup_bytes(const void *p, size_t n)
{
	void *d = malloc(n ? n : 1);

	if (d && n)
		memcpy(d, p, n);
	return d;
}

static void sync_cb(zcrpc_channel *ch, const zcrpc_reply *r, void *arg)
{
	struct sync_ctx *s = arg;
	zcrpc_result *out = s->out;

	s->out->status = r->status;
	s->out->message = strdup(r->message ? r->message : "");
	s->out->data = dup_bytes(r->data, r->len);
	s->out->len = r->len;
	if (r->attachment_len) {
		s->out->attachment = dup_bytes(r->attachment, r->attachment_len);
		s->out->attachment_len = r->attachment_len;
		ch->st.copied_bytes += r->attachment_len;
	}
	ch->st.copied_bytes += r->len;
	if (ZCRPC_VIEW_HAS(out, zcrpc_result, n_initial_md)) {
		out->md = zcrpc__md_dup(r->md, r->n_md);
		out->n_md = out->md ? r->n_md : 0;
		out->initial_md = zcrpc__md_dup(r->initial_md, r->n_initial_md);
		out->n_initial_md = out->initial_md ? r->n_initial_md : 0;
	}
	s->done = 1;
}

zcrpc_status zcrpc_call(zcrpc_channel *ch, uint32_t method, const void *req,
			size_t len, const zcrpc_call_opts *o, zcrpc_result *out,
			size_t out_size)
{
	struct sync_ctx s = {0, out};
	zcrpc_status st;

	/* Every field written below is within ZCRPC__MIN_RESULT. */
	if (!ch || !out || out_size < ZCRPC__MIN_RESULT)
		return ZCRPC_INVALID_ARGUMENT;
	zcrpc__abi_sized_init(out, out_size, sizeof(*out));
	if (zcrpc__worker_in_progress(ch->w)) {
		out->status = ZCRPC_FAILED_PRECONDITION;
		out->message = strdup("synchronous call from inside a callback of the same worker");
		return ZCRPC_FAILED_PRECONDITION;
	}
	ch->start_why = NULL;
	st = zcrpc_call_async(ch, method, req, len, o, sync_cb, &s, NULL);
	if (st != ZCRPC_OK) {
		char m[160];

		snprintf(m, sizeof(m), "the call could not be started%s%s",
			 ch->start_why ? ": " : "",
			 ch->start_why ? ch->start_why : "");
		out->status = st;
		out->message = strdup(m);
		return st;
	}
	while (!s.done)
		zcrpc_worker_progress(ch->w, 100);
	return out->status;
}

void zcrpc_result_free(zcrpc_result *r)
{
	if (!r)
		return;
	free(r->message);
	free(r->data);
	free(r->attachment);
	if (ZCRPC_VIEW_HAS(r, zcrpc_result, n_initial_md)) {
		free(r->md);
		free(r->initial_md);
	}
	zcrpc__abi_sized_init(r, r->size, sizeof(*r)); /* the fields it has */
}
