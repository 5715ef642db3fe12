/* zcrpc key-value server: an in-memory store behind the Kv service of
 * idl/kv.proto, served with the typed stubs zcrpc-gen writes.
 *
 *   zcrpc_kv_server [-a ADDR] [-p PORT]
 *
 * The store is a sorted array of keys (binary search), touched only by the
 * worker's thread: every handler runs and replies there. A value above
 * KV_INLINE_MAX bytes is kept in memory registered with the worker's
 * context, so Get sends it in place as the reply attachment (no copy); a
 * value being sent stays alive (reference count) until the reply left,
 * even if a Put or Delete replaced it meanwhile.
 *
 * The store is not locked, so the server runs on one worker
 * (zcrpc_server_opts.threads = 1, the default) that it makes and owns;
 * zcrpc_server_serve() runs it on the main thread. Prints "listening on
 * ADDR:PORT" once ready; SIGTERM or SIGINT shuts down gracefully (1 s grace)
 * and prints the server's counters.
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zcrpc/zcrpc.h>

#include "kv.zcrpc.h"

#define KV_INLINE_MAX 2048	  /* values up to this travel in the message */
#define KV_KEY_MAX 1024
#define KV_SCAN_CAP 1000	  /* entries per Scan reply */
#define KV_SCAN_BYTES (1u << 20) /* payload bytes per Scan reply */

struct value {
	unsigned refs; /* the store's + replies in flight */
	size_t len;
	zcrpc_mr *mr;  /* large values only */
	uint8_t data[];
};

struct entry {
	uint8_t *key;
	size_t key_len;
	struct value *v;
};

struct store {
	zcrpc_context *ctx;
	struct entry *e;
	size_t n, cap;
	uint64_t puts, gets, deletes, scans;
	uint64_t bytes_in, bytes_out;
};

static void value_unref(struct value *v)
{
	if (v && --v->refs == 0) {
		zcrpc_mr_deregister(v->mr);
		free(v);
	}
}

static int key_cmp(const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
	int c = memcmp(a, b, al < bl ? al : bl);

	if (c)
		return c;
	return al < bl ? -1 : al > bl;
}

/* The first index whose key is >= @key. */
static size_t lower_bound(const struct store *s, const uint8_t *key, size_t len)
{
	size_t lo = 0, hi = s->n, mid;

	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (key_cmp(s->e[mid].key, s->e[mid].key_len, key, len) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int found_at(const struct store *s, size_t i, const uint8_t *key,
		    size_t len)
{
	return i < s->n && !key_cmp(s->e[i].key, s->e[i].key_len, key, len);
}

static const char *check_key(const ProtobufCBinaryData *k)
{
	if (k->len == 0)
		return "empty key";
	if (k->len > KV_KEY_MAX)
		return "key longer than 1024 bytes";
	return NULL;
}

/* ---- Put ------------------------------------------------------------------ */

static void kv_put(Zcrpc__Kv__Kv_Service *svc, const Zcrpc__Kv__PutRequest *in,
		   Zcrpc__Kv__PutReply_Closure closure, void *closure_data)
{
	struct store *s = zcrpc_pb_server_get_ctx(closure_data);
	const zcrpc_request *r = zcrpc_pb_server_get_request(closure_data);
	Zcrpc__Kv__PutReply out = ZCRPC__KV__PUT_REPLY__INIT;
	const void *src;
	struct value *v;
	const char *err;
	size_t i;
	zcrpc_status st;

	(void)svc;
	if ((err = check_key(&in->key))) {
		zcrpc_pb_reply_error(closure_data, ZCRPC_INVALID_ARGUMENT, err);
		return;
	}
	if (in->value_in_attachment) {
		if (!r || r->attachment_len != in->value_len) {
			zcrpc_pb_reply_error(closure_data, ZCRPC_INVALID_ARGUMENT,
					     "value_len differs from the attachment's length");
			return;
		}
		src = r->attachment;
	} else {
		if (in->value.len != in->value_len) {
			zcrpc_pb_reply_error(closure_data, ZCRPC_INVALID_ARGUMENT,
					     "value_len differs from the inline value's length");
			return;
		}
		src = in->value.data;
	}
	v = malloc(sizeof(*v) + in->value_len);
	if (!v) {
		zcrpc_pb_reply_error(closure_data, ZCRPC_RESOURCE_EXHAUSTED,
				     "out of memory");
		return;
	}
	v->refs = 1;
	v->len = in->value_len;
	v->mr = NULL;
	if (v->len)
		memcpy(v->data, src, v->len); /* the request's memory is the library's */
	if (v->len > KV_INLINE_MAX &&
	    (st = zcrpc_mr_register(s->ctx, v->data, v->len, 0, &v->mr)) != ZCRPC_OK) {
		free(v);
		zcrpc_pb_reply_error(closure_data, st,
				     "cannot register the value's memory (ulimit -l?)");
		return;
	}
	i = lower_bound(s, in->key.data, in->key.len);
	if (found_at(s, i, in->key.data, in->key.len)) {
		value_unref(s->e[i].v);
		s->e[i].v = v;
		out.replaced = 1;
	} else {
		if (s->n == s->cap) {
			size_t cap = s->cap ? 2 * s->cap : 64;
			struct entry *e = realloc(s->e, cap * sizeof(*e));

			if (!e)
				goto oom;
			s->e = e;
			s->cap = cap;
		}
		uint8_t *key = malloc(in->key.len);

		if (!key)
			goto oom;
		memcpy(key, in->key.data, in->key.len);
		memmove(&s->e[i + 1], &s->e[i], (s->n - i) * sizeof(*s->e));
		s->e[i].key = key;
		s->e[i].key_len = in->key.len;
		s->e[i].v = v;
		s->n++;
	}
	s->puts++;
	s->bytes_in += v->len;
	closure(&out, closure_data);
	return;
oom:
	value_unref(v);
	zcrpc_pb_reply_error(closure_data, ZCRPC_RESOURCE_EXHAUSTED, "out of memory");
}

/* ---- Delete --------------------------------------------------------------- */

static void kv_delete(Zcrpc__Kv__Kv_Service *svc,
		      const Zcrpc__Kv__DeleteRequest *in,
		      Zcrpc__Kv__DeleteReply_Closure closure, void *closure_data)
{
	struct store *s = zcrpc_pb_server_get_ctx(closure_data);
	Zcrpc__Kv__DeleteReply out = ZCRPC__KV__DELETE_REPLY__INIT;
	const char *err;
	size_t i;

	(void)svc;
	if ((err = check_key(&in->key))) {
		zcrpc_pb_reply_error(closure_data, ZCRPC_INVALID_ARGUMENT, err);
		return;
	}
	i = lower_bound(s, in->key.data, in->key.len);
	if (found_at(s, i, in->key.data, in->key.len)) {
		free(s->e[i].key);
		value_unref(s->e[i].v);
		memmove(&s->e[i], &s->e[i + 1], (s->n - i - 1) * sizeof(*s->e));
		s->n--;
		out.found = 1;
	}
	s->deletes++;
	closure(&out, closure_data);
}

/* ---- Scan ----------------------------------------------------------------- */

static void kv_scan(Zcrpc__Kv__Kv_Service *svc, const Zcrpc__Kv__ScanRequest *in,
		    Zcrpc__Kv__ScanReply_Closure closure, void *closure_data)
{
	struct store *s = zcrpc_pb_server_get_ctx(closure_data);
	Zcrpc__Kv__ScanReply out = ZCRPC__KV__SCAN_REPLY__INIT;
	Zcrpc__Kv__ScanEntry *ents, **ptrs;
	size_t i, n = 0, limit, bytes = 0;

	(void)svc;
	limit = in->limit && in->limit < KV_SCAN_CAP ? in->limit : KV_SCAN_CAP;
	ents = calloc(limit, sizeof(*ents));
	ptrs = calloc(limit, sizeof(*ptrs));
	if (!ents || !ptrs) {
		free(ents);
		free(ptrs);
		zcrpc_pb_reply_error(closure_data, ZCRPC_RESOURCE_EXHAUSTED,
				     "out of memory");
		return;
	}
	for (i = lower_bound(s, in->start_key.data, in->start_key.len); i < s->n; i++) {
		const struct entry *e = &s->e[i];
		size_t add;

		if (in->end_key.len &&
		    key_cmp(e->key, e->key_len, in->end_key.data, in->end_key.len) >= 0)
			break;
		add = e->key_len + 32 + (e->v->len <= KV_INLINE_MAX ? e->v->len : 0);
		if (n == limit || (n && bytes + add > KV_SCAN_BYTES)) {
			out.more = 1;
			break;
		}
		bytes += add;
		zcrpc__kv__scan_entry__init(&ents[n]);
		ents[n].key.data = e->key;
		ents[n].key.len = e->key_len;
		ents[n].value_len = e->v->len;
		if (e->v->len <= KV_INLINE_MAX) {
			ents[n].value.data = e->v->data;
			ents[n].value.len = e->v->len;
			ents[n].value_included = 1;
		}
		ptrs[n] = &ents[n];
		n++;
	}
	out.n_entries = n;
	out.entries = ptrs;
	s->scans++;
	closure(&out, closure_data); /* packed and copied: ours to free now */
	free(ents);
	free(ptrs);
}

/* ---- Get ---------------------------------------------------------------- */

static void get_sent(void *ctx, zcrpc_status st)
{
	(void)st;
	value_unref(ctx);
}

/* A large value goes back in place, as the reply's attachment: the value
 * stays referenced until get_sent says the attachment left. */
static void kv_get(Zcrpc__Kv__Kv_Service *svc, const Zcrpc__Kv__GetRequest *in,
		   Zcrpc__Kv__GetReply_Closure closure, void *closure_data)
{
	struct store *s = zcrpc_pb_server_get_ctx(closure_data);
	Zcrpc__Kv__GetReply out = ZCRPC__KV__GET_REPLY__INIT;
	struct value *v = NULL;
	const char *err;
	size_t i;

	(void)svc;
	if ((err = check_key(&in->key))) {
		zcrpc_pb_reply_error(closure_data, ZCRPC_INVALID_ARGUMENT, err);
		return;
	}
	i = lower_bound(s, in->key.data, in->key.len);
	if (found_at(s, i, in->key.data, in->key.len))
		v = s->e[i].v;
	s->gets++;
	if (v) {
		out.found = 1;
		out.value_len = v->len;
		s->bytes_out += v->len;
		if (v->mr) {
			zcrpc_bulk att = {v->mr, 0, v->len};

			out.value_in_attachment = 1;
			v->refs++;
			if (zcrpc_pb_set_reply_attachment(closure_data, &att, get_sent, v) !=
			    ZCRPC_OK) {
				v->refs--;
				zcrpc_pb_reply_error(closure_data, ZCRPC_INTERNAL,
						     "cannot attach the value");
				return;
			}
		} else {
			out.value.data = v->data;
			out.value.len = v->len;
		}
	}
	closure(&out, closure_data);
}

static Zcrpc__Kv__Kv_Service kv_impl = ZCRPC__KV__KV__INIT(kv_);

int main(int argc, char **argv)
{
	static const int sigs[] = {SIGINT, SIGTERM};
	const char *addr = NULL, *port = "7473";
	zcrpc_server_opts so;
	zcrpc_serve_opts ro;
	zcrpc_server *s = NULL;
	zcrpc_server_stats ss;
	/* The handlers' state, reached through zcrpc_pb_server_get_ctx(); it
	 * and the registration outlive the server. */
	struct store store = {0};
	zcrpc_pb_server_opts po = {.size = sizeof(po), .ctx = &store};
	zcrpc_status st;
	size_t i;
	int opt, rc = 1;

	while ((opt = getopt(argc, argv, "a:p:h")) != -1) {
		switch (opt) {
		case 'a': addr = optarg; break;
		case 'p': port = optarg; break;
		default:
			fprintf(stderr, "usage: %s [-a ADDR] [-p PORT]\n", argv[0]);
			return opt == 'h' ? 0 : 2;
		}
	}
	zcrpc_server_opts_init(&so);
	so.threads = 1; /* one worker, made and owned by the server */
	if ((st = zcrpc_server_create(NULL, &so, &s)) != ZCRPC_OK) {
		fprintf(stderr, "kv server: %s: %s\n", zcrpc_status_str(st),
			zcrpc_last_error());
		goto out;
	}
	store.ctx = zcrpc_worker_get_context(zcrpc_server_get_worker(s, 0));
	st = zcrpc__kv__kv__zcrpc_register_opts(s, &kv_impl, &po);
	if (st != ZCRPC_OK || (st = zcrpc_server_listen(s, addr, port)) != ZCRPC_OK) {
		fprintf(stderr, "kv server: %s\n", zcrpc_status_str(st));
		goto out;
	}
	printf("listening on %s:%u\n", addr ? addr : "*", zcrpc_server_get_port(s));
	fflush(stdout);
	zcrpc_serve_opts_init(&ro);
	ro.signals = sigs;
	ro.nsignals = 2;
	ro.grace_ms = 1000;
	st = zcrpc_server_serve(s, &ro); /* until SIGINT or SIGTERM, drained */
	zcrpc_server_get_stats(s, &ss, sizeof(ss));
	printf("kv server: shut down (%s); %zu keys; %llu puts, %llu gets, %llu deletes, "
	       "%llu scans; %llu value bytes in, %llu out; %llu bytes copied by the library\n",
	       zcrpc_status_str(st), store.n, (unsigned long long)store.puts,
	       (unsigned long long)store.gets, (unsigned long long)store.deletes,
	       (unsigned long long)store.scans, (unsigned long long)store.bytes_in,
	       (unsigned long long)store.bytes_out, (unsigned long long)ss.copied_bytes);
	rc = 0;
out:
	/* The store's values are registered with the worker's context: they
	 * go before the server (and the worker it owns). */
	for (i = 0; i < store.n; i++) {
		free(store.e[i].key);
		value_unref(store.e[i].v);
	}
	free(store.e);
	zcrpc_server_destroy(s);
	return rc;
}
