/* zcrpc — the standard health service every server serves, written from
 * gRPC's published description of grpc.health.v1 (health-checking.md):
 *
 *   package grpc.health.v1;
 *   message HealthCheckRequest { string service = 1; }
 *   message HealthCheckResponse {
 *     enum ServingStatus { UNKNOWN = 0; SERVING = 1; NOT_SERVING = 2;
 *                          SERVICE_UNKNOWN = 3; }
 *     ServingStatus status = 1;
 *   }
 *   service Health {
 *     rpc Check(HealthCheckRequest) returns (HealthCheckResponse);
 *     rpc Watch(HealthCheckRequest) returns (stream HealthCheckResponse);
 *   }
 *
 * Check answers the status of the service named (the empty name: the
 * server as a whole) or NOT_FOUND for a service never set. Watch sends the
 * status at once (SERVICE_UNKNOWN for a service never set) and again each
 * time it changes; the stream stays open until the client ends it, and a
 * graceful shutdown sends NOT_SERVING and finishes it (so the drain does
 * not wait for it). Watchers live on their connection's worker (its
 * shard): a shard's timer looks at the table's version every
 * WATCH_POLL_MS while it has watchers, so a change made on any thread
 * reaches every shard without a cross-thread write. The messages
 * are two fields, encoded and decoded here by hand (protobuf's wire
 * format: a varint key, field 1 length-delimited in the request, a varint
 * in the response) so that libzcrpc needs no protobuf runtime. The table
 * is the root server's, under a mutex: Check runs on the worker of its
 * connection, zcrpc_server_set_serving on the application's thread. A
 * graceful shutdown sets every service NOT_SERVING before its GOAWAY. */
#include "server_internal.h"
#include "stream_internal.h"
#include "zcrpc/balance.h"
#include "zcrpc/stream.h"

#include <stdatomic.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define HEALTH_MAX_SERVICES 32
#define HEALTH_NAME_MAX 200

struct health_entry {
	char name[HEALTH_NAME_MAX + 1];
	zcrpc_serving_status status;
};

#define WATCH_POLL_MS 50

struct zcrpc__health {
	pthread_mutex_t mu;
	struct health_entry e[HEALTH_MAX_SERVICES];
	size_t n;
	atomic_uint version; /* moves with every change */
};

/* One Watch stream. */
struct watcher {
	struct watcher *next;
	zcrpc_stream *st;
	char name[HEALTH_NAME_MAX + 1];
	int named; /* its request came */
	int sent;  /* the status it was last sent, -1 none */
	int want;  /* the status it should have */
};

/* A shard's watchers (made on its worker at its first Watch). */
struct zcrpc__health_watch {
	struct watcher *head;
	struct zcrpc__timer timer;
	zcrpc_server *shard;
	unsigned seen;
};

/* Reads a varint at *@p (before @end); -1 when it does not end. */
static int varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	int shift;

	*v = 0;
	for (shift = 0; shift < 64 && *p < end; shift += 7) {
		uint8_t b = *(*p)++;

		*v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80))
			return 0;
	}
	return -1;
}

/* The service named in a HealthCheckRequest of @len bytes at @data into
 * @name; -1 when the message does not parse or the name is too long. */
static int request_service(const void *data, size_t len, char *name)
{
	const uint8_t *p = data, *end = p + len;
	uint64_t key, v;

	name[0] = 0;
	while (p < end) {
		if (varint(&p, end, &key))
			return -1;
		switch (key & 7) {
		case 0: /* varint */
			if (varint(&p, end, &v))
				return -1;
			break;
		case 1: /* 64-bit */
			if (end - p < 8)
				return -1;
			p += 8;
			break;
		case 2: /* length-delimited */
			if (varint(&p, end, &v) || v > (uint64_t)(end - p))
				return -1;
			if (key >> 3 == 1) {
				if (v > HEALTH_NAME_MAX)
					return -1;
				memcpy(name, p, (size_t)v);
				name[v] = 0;
			}
			p += v;
			break;
		case 5: /* 32-bit */
			if (end - p < 4)
				return -1;
			p += 4;
			break;
		default:
			return -1;
		}
	}
	return 0;
}

static struct health_entry *find(struct zcrpc__health *h, const char *name)
{
	size_t i;

	for (i = 0; i < h->n; i++)
		if (!strcmp(h->e[i].name, name))
			return &h->e[i];
	return NULL;
}

static void check(zcrpc_server_call *call, const zcrpc_request *req, void *arg)
{
	struct zcrpc__health *h = arg;
	char name[HEALTH_NAME_MAX + 1];
	struct health_entry *e;
	zcrpc_serving_status st = ZCRPC_SERVING_UNKNOWN;
	uint8_t out[2];
	int known;

	if (request_service(req->data, req->len, name)) {
		zcrpc_server_call_reply(call, ZCRPC_INVALID_ARGUMENT,
					"not a grpc.health.v1.HealthCheckRequest",
					NULL, 0, NULL);
		return;
	}
	pthread_mutex_lock(&h->mu);
	e = find(h, name);
	known = e != NULL;
	if (e)
		st = e->status;
	pthread_mutex_unlock(&h->mu);
	if (!known) {
		zcrpc_server_call_reply(call, ZCRPC_NOT_FOUND, "unknown service",
					NULL, 0, NULL);
		return;
	}
	/* HealthCheckResponse: field 1, varint (absent when 0, as proto3) */
	out[0] = 0x08;
	out[1] = (uint8_t)st;
	zcrpc_server_call_reply(call, ZCRPC_OK, NULL, out, st ? 2 : 0, NULL);
}

/* The status @name has for a watcher (SERVICE_UNKNOWN when never set). */
static int watch_status(struct zcrpc__health *h, const char *name)
{
	struct health_entry *e;
	int st;

	pthread_mutex_lock(&h->mu);
	e = find(h, name);
	st = e ? (int)e->status : ZCRPC_SERVING_SERVICE_UNKNOWN;
	pthread_mutex_unlock(&h->mu);
	return st;
}

/* Sends @w its status when it changed (a refused write is tried again at
 * on_writable). */
static void watch_send(struct watcher *w)
{
	uint8_t out[2] = {0x08, (uint8_t)w->want};

	if (!w->named || w->sent == w->want)
		return;
	if (zcrpc_stream_write(w->st, out, w->want ? 2 : 0) == ZCRPC_OK)
		w->sent = w->want;
}

static void watch_timer(struct zcrpc__timer *t, int64_t now)
{
	struct zcrpc__health_watch *hw =
		zcrpc__container_of(t, struct zcrpc__health_watch, timer);
	struct zcrpc__health *h = hw->shard->root->health;
	unsigned v = atomic_load(&h->version);
	struct watcher *w;

	if (v != hw->seen) {
		hw->seen = v;
		for (w = hw->head; w; w = w->next) {
			w->want = watch_status(h, w->name);
			watch_send(w);
		}
	}
	if (hw->head)
		zcrpc__timer_start(hw->shard->w, &hw->timer,
				   now + WATCH_POLL_MS * 1000000LL);
}

static void watch_open(zcrpc_stream *st, const zcrpc_stream_open *o, void *arg)
{
	struct watcher *w = calloc(1, sizeof(*w));

	(void)o, (void)arg;
	if (!w) {
		zcrpc_stream_finish(st, ZCRPC_RESOURCE_EXHAUSTED, "out of memory",
				    NULL, 0);
		return;
	}
	w->st = st;
	w->sent = -1;
	zcrpc_stream_set_user(st, w);
}

static void watch_message(zcrpc_stream *st, const void *data, size_t len,
			  void *arg)
{
	struct zcrpc__health *h = arg;
	struct watcher *w = zcrpc_stream_get_user(st);
	zcrpc_server *shard = st->s;
	struct zcrpc__health_watch *hw;

	if (!w || w->named) /* one request per stream */
		return;
	if (request_service(data, len, w->name)) {
		zcrpc_stream_finish(st, ZCRPC_INVALID_ARGUMENT,
				    "not a grpc.health.v1.HealthCheckRequest",
				    NULL, 0);
		return;
	}
	hw = shard->hwatch;
	if (!hw) {
		hw = calloc(1, sizeof(*hw));
		if (!hw) {
			zcrpc_stream_finish(st, ZCRPC_RESOURCE_EXHAUSTED,
					    "out of memory", NULL, 0);
			return;
		}
		hw->shard = shard;
		hw->timer.fn = watch_timer;
		shard->hwatch = hw;
	}
	if (!hw->head) {
		hw->seen = atomic_load(&h->version);
		zcrpc__timer_start(shard->w, &hw->timer,
				   zcrpc__now_ns() + WATCH_POLL_MS * 1000000LL);
	}
	w->named = 1;
	w->want = watch_status(h, w->name);
	w->next = hw->head;
	hw->head = w;
	if (shard->shutting_down) /* drained already: it is not serving */
		w->want = ZCRPC_SERVING_NOT_SERVING;
	watch_send(w);
	if (shard->shutting_down)
		zcrpc_stream_finish(st, ZCRPC_OK, NULL, NULL, 0);
}

static void watch_writable(zcrpc_stream *st, void *arg)
{
	struct watcher *w = zcrpc_stream_get_user(st);

	(void)arg;
	if (w)
		watch_send(w);
}

static void watch_finish(zcrpc_stream *st, const zcrpc_stream_end *e,
			 void *arg)
{
	struct watcher *w = zcrpc_stream_get_user(st), **pp;
	struct zcrpc__health_watch *hw = st->s ? st->s->hwatch : NULL;

	(void)e, (void)arg;
	if (!w)
		return;
	for (pp = hw ? &hw->head : NULL; pp && *pp; pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	free(w);
}

void zcrpc__health_goaway(zcrpc_server *shard)
{
	struct zcrpc__health_watch *hw = shard->hwatch;
	struct watcher *w, *next;

	if (!hw)
		return;
	/* every watcher hears NOT_SERVING, then its stream ends (on_finish
	 * unlinks it) */
	for (w = hw->head; w; w = next) {
		next = w->next;
		w->want = ZCRPC_SERVING_NOT_SERVING;
		watch_send(w);
		zcrpc_stream_finish(w->st, ZCRPC_OK, NULL, NULL, 0);
	}
}

void zcrpc__health_shard_fini(zcrpc_server *shard)
{
	struct zcrpc__health_watch *hw = shard->hwatch;

	if (!hw)
		return;
	zcrpc__timer_stop(shard->w, &hw->timer);
	while (hw->head) { /* streams already gone (their on_finish ran) */
		struct watcher *w = hw->head;

		hw->head = w->next;
		free(w);
	}
	free(hw);
	shard->hwatch = NULL;
}

zcrpc_status zcrpc__health_init(zcrpc_server *s)
{
	struct zcrpc__health *h = calloc(1, sizeof(*h));
	zcrpc_status st;

	if (!h)
		return ZCRPC_RESOURCE_EXHAUSTED;
	pthread_mutex_init(&h->mu, NULL);
	h->n = 1; /* "": the server, serving from the start (as gRPC's) */
	h->e[0].status = ZCRPC_SERVING_SERVING;
	st = zcrpc_server_register(s, ZCRPC_HEALTH_CHECK, check, h);
	if (st == ZCRPC_OK) {
		zcrpc_stream_handlers wh;

		memset(&wh, 0, sizeof(wh));
		wh.size = sizeof(wh);
		wh.on_open = watch_open;
		wh.on_message = watch_message;
		wh.on_writable = watch_writable;
		wh.on_finish = watch_finish;
		wh.arg = h;
		st = zcrpc_server_register_stream(s, ZCRPC_HEALTH_WATCH, &wh);
	}
	if (st != ZCRPC_OK) {
		pthread_mutex_destroy(&h->mu);
		free(h);
		return st;
	}
	s->health = h;
	return ZCRPC_OK;
}

void zcrpc__health_fini(zcrpc_server *s)
{
	if (!s->health)
		return;
	pthread_mutex_destroy(&s->health->mu);
	free(s->health);
	s->health = NULL;
}

void zcrpc__health_drain(zcrpc_server *s)
{
	struct zcrpc__health *h = s->root->health;
	size_t i;

	if (!h)
		return;
	pthread_mutex_lock(&h->mu);
	for (i = 0; i < h->n; i++)
		h->e[i].status = ZCRPC_SERVING_NOT_SERVING;
	pthread_mutex_unlock(&h->mu);
	atomic_fetch_add(&h->version, 1);
}

zcrpc_status zcrpc_server_set_serving(zcrpc_server *s, const char *service,
				      zcrpc_serving_status status)
{
	struct zcrpc__health *h;
	struct health_entry *e;
	zcrpc_status st = ZCRPC_OK;

	if (!s || !service || strlen(service) > HEALTH_NAME_MAX ||
	    status < ZCRPC_SERVING_UNKNOWN ||
	    status > ZCRPC_SERVING_SERVICE_UNKNOWN)
		return ZCRPC_INVALID_ARGUMENT;
	h = s->root->health;
	pthread_mutex_lock(&h->mu);
	e = find(h, service);
	if (!e && h->n == HEALTH_MAX_SERVICES) {
		st = ZCRPC_RESOURCE_EXHAUSTED;
	} else {
		if (!e) {
			e = &h->e[h->n++];
			strcpy(e->name, service);
		}
		e->status = status;
	}
	pthread_mutex_unlock(&h->mu);
	atomic_fetch_add(&h->version, 1);
	return st;
}
