/* zcrpc's server of gRPC's interop service grpc.testing.TestService
 * (tests/interop/proto/grpc/testing/test.proto), as gRPC's
 * doc/interop-test-descriptions.md describes the server:
 *
 * - EmptyCall answers Empty; UnaryCall answers response_size zero bytes
 *   in payload.body, or the status in response_status when its code is
 *   not 0 (code and message), INVALID_ARGUMENT for a response_type other
 *   than COMPRESSABLE; CacheableUnaryCall the same with the time in ns
 *   (ASCII) as the body (there is no caching proxy here).
 * - StreamingOutputCall and FullDuplexCall answer one message per
 *   ResponseParameters (size zero bytes, after interval_us), FullDuplexCall
 *   per request as it arrives, HalfDuplexCall once the client half-closed;
 *   then response_status if a request set one (later messages are
 *   ignored), else OK.
 * - StreamingInputCall answers the sum of the payload sizes it read.
 * - The request metadata "x-grpc-test-echo-initial" comes back as initial
 *   metadata and "x-grpc-test-echo-trailing-bin" as trailing metadata
 *   (unary calls and every stream).
 * - The unary methods are protoc-c's handlers served by the pb glue
 *   (metadata through zcrpc_pb_set_reply_md(), errors through
 *   zcrpc_pb_reply_error()); UnimplementedCall's handler slot is NULL, so
 *   the glue answers UNIMPLEMENTED; UnimplementedService is not served: the
 *   library answers UNIMPLEMENTED.
 *
 * interval_us is slept on the worker's thread (nanosleep), which stops the
 * server's other calls meanwhile: this server serves one interop client.
 *
 * Usage: interop_server --host H --port P (P 0: any); prints
 * "listening on H:PORT", serves until SIGTERM or SIGINT, then drains and
 * prints "interop server: shut down (STATUS)".
 */
#define _POSIX_C_SOURCE 200809L /* strdup, nanosleep */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grpc/testing/test.zcrpc.h"
#include "zcrpc/pb.h"
#include "zcrpc/rpc.h"
#include "zcrpc/stream.h"

#define ECHO_INITIAL "x-grpc-test-echo-initial"
#define ECHO_TRAILING "x-grpc-test-echo-trailing-bin"
#define MAX_BODY (4u << 20) /* the largest stream message */

typedef Grpc__Testing__StreamingOutputCallRequest OutReq;
typedef Grpc__Testing__StreamingOutputCallResponse OutRep;

/* Response bodies are zeros: one shared buffer of the largest size. */
static uint8_t g_zeros[MAX_BODY];

/* The entry of @key in @md, or NULL. */
static const zcrpc_md *find_md(const zcrpc_md *md, size_t n, const char *key)
{
	size_t klen = strlen(key);

	for (size_t i = 0; i < n; i++)
		if (md[i].key_len == klen && memcmp(md[i].key, key, klen) == 0)
			return &md[i];
	return NULL;
}

/* ---- unary: protoc-c's handlers, served by the pb glue ------------------ */

/* The echoed metadata of the request behind @cd set as its reply's (copied
 * by the glue). Non-zero when the call was answered already (no memory). */
static int echo_md(void *cd)
{
	const zcrpc_request *r = zcrpc_pb_server_get_request(cd);
	const zcrpc_md *init = find_md(r->md, r->n_md, ECHO_INITIAL);
	const zcrpc_md *trail = find_md(r->md, r->n_md, ECHO_TRAILING);
	zcrpc_status st;

	st = zcrpc_pb_set_reply_md(cd, init, init ? 1 : 0, trail, trail ? 1 : 0);
	if (st == ZCRPC_OK)
		return 0;
	zcrpc_pb_reply_error(cd, st, "cannot keep the reply metadata");
	return -1;
}

static void t_empty_call(Grpc__Testing__TestService_Service *svc,
			 const Grpc__Testing__Empty *in,
			 Grpc__Testing__Empty_Closure closure, void *cd)
{
	Grpc__Testing__Empty out = GRPC__TESTING__EMPTY__INIT;

	(void)svc;
	(void)in;
	if (echo_md(cd) == 0)
		closure(&out, cd);
}

/* UnaryCall, and CacheableUnaryCall (@cacheable). */
static void simple_call(const Grpc__Testing__SimpleRequest *in,
			Grpc__Testing__SimpleResponse_Closure closure, void *cd,
			int cacheable)
{
	Grpc__Testing__SimpleResponse out = GRPC__TESTING__SIMPLE_RESPONSE__INIT;
	Grpc__Testing__Payload pl = GRPC__TESTING__PAYLOAD__INIT;
	char stamp[32];

	if (echo_md(cd) != 0)
		return;
	if (in->response_status && in->response_status->code != 0) {
		zcrpc_pb_reply_error(cd, (zcrpc_status)in->response_status->code,
				     in->response_status->message);
		return;
	}
	if (in->response_type != GRPC__TESTING__PAYLOAD_TYPE__COMPRESSABLE) {
		zcrpc_pb_reply_error(cd, ZCRPC_INVALID_ARGUMENT,
				     "response_type not supported");
		return;
	}
	if (in->response_size < 0 || (uint32_t)in->response_size > MAX_BODY) {
		zcrpc_pb_reply_error(cd, ZCRPC_INVALID_ARGUMENT,
				     "response_size out of range");
		return;
	}
	pl.type = in->response_type;
	pl.body.len = (size_t)in->response_size;
	pl.body.data = g_zeros;
	if (cacheable) {
		/* gRPC's CacheableUnaryCall: the time in ns, in ASCII. */
		struct timespec t;

		clock_gettime(CLOCK_REALTIME, &t);
		pl.body.len = (size_t)snprintf(stamp, sizeof(stamp), "%lld",
					       (long long)t.tv_sec * 1000000000LL + t.tv_nsec);
		pl.body.data = (uint8_t *)stamp;
	}
	out.payload = &pl;
	closure(&out, cd); /* packed straight into the reply's memory */
}

static void t_unary_call(Grpc__Testing__TestService_Service *svc,
			 const Grpc__Testing__SimpleRequest *in,
			 Grpc__Testing__SimpleResponse_Closure closure, void *cd)
{
	(void)svc;
	simple_call(in, closure, cd, 0);
}

static void t_cacheable_unary_call(Grpc__Testing__TestService_Service *svc,
				   const Grpc__Testing__SimpleRequest *in,
				   Grpc__Testing__SimpleResponse_Closure closure,
				   void *cd)
{
	(void)svc;
	simple_call(in, closure, cd, 1);
}

/* The unary methods; UnimplementedCall's slot stays NULL (UNIMPLEMENTED),
 * and the streaming methods' slots are never called (their own
 * registrations serve them). */
static Grpc__Testing__TestService_Service g_unary = {
	.base = GRPC__TESTING__TEST_SERVICE__BASE_INIT,
	.empty_call = t_empty_call,
	.unary_call = t_unary_call,
	.cacheable_unary_call = t_cacheable_unary_call};

/* ---- streams ------------------------------------------------------------ */

enum kind { K_OUTPUT, K_INPUT, K_FULL, K_HALF };

struct resp {
	int32_t size, interval_us;
};

/* One stream's state (its zcrpc_stream user pointer), freed in on_finish. */
struct sstream {
	enum kind kind;
	struct resp *q; /* responses to write, in order */
	size_t n, cap, next;
	int half_closed, end_asked, finished;
	zcrpc_status status; /* what it ends with */
	char *message;
	char *trail_key; /* the echoed trailing metadata, or NULL */
	void *trail_val;
	size_t trail_len;
	int64_t aggregated; /* StreamingInputCall */
};

static int queue_params(struct sstream *x, const OutReq *r)
{
	for (size_t i = 0; i < r->n_response_parameters; i++) {
		if (x->n == x->cap) {
			size_t cap = x->cap ? 2 * x->cap : 8;
			struct resp *q = realloc(x->q, cap * sizeof(*q));

			if (!q)
				return -1;
			x->q = q;
			x->cap = cap;
		}
		x->q[x->n].size = r->response_parameters[i]->size;
		x->q[x->n].interval_us = r->response_parameters[i]->interval_us;
		x->n++;
	}
	return 0;
}

static void finish(zcrpc_stream *s, struct sstream *x, zcrpc_status st,
		   const char *msg)
{
	zcrpc_md t = {x->trail_key, x->trail_key ? strlen(x->trail_key) : 0,
		      x->trail_val, x->trail_len};

	if (x->finished)
		return;
	x->finished = 1;
	zcrpc_stream_finish(s, st, msg, x->trail_key ? &t : NULL,
			    x->trail_key ? 1 : 0);
}

/* Writes what is queued as the window lets it; ends the stream once all
 * went and the client half-closed (or a request asked for a status). */
static void pump(zcrpc_stream *s, struct sstream *x)
{
	while (!x->finished && x->next < x->n &&
	       (x->kind != K_HALF || x->half_closed)) {
		struct resp *r = &x->q[x->next];
		OutRep rep = GRPC__TESTING__STREAMING_OUTPUT_CALL_RESPONSE__INIT;
		Grpc__Testing__Payload pl = GRPC__TESTING__PAYLOAD__INIT;
		zcrpc_status st;

		if (r->size < 0 || (uint32_t)r->size > MAX_BODY - 16) {
			finish(s, x, ZCRPC_INVALID_ARGUMENT, "size out of range");
			return;
		}
		if (r->interval_us > 0) {
			struct timespec ts = {r->interval_us / 1000000,
					      (long)(r->interval_us % 1000000) * 1000};

			nanosleep(&ts, NULL);
			r->interval_us = 0; /* slept: not again after a refusal */
		}
		pl.body.len = (size_t)r->size;
		pl.body.data = g_zeros;
		rep.payload = &pl;
		st = zcrpc_pb_stream_write(s, &rep.base);
		if (st == ZCRPC_RESOURCE_EXHAUSTED)
			return; /* on_writable brings us back */
		if (st != ZCRPC_OK) {
			finish(s, x, ZCRPC_INTERNAL, "write failed");
			return;
		}
		x->next++;
	}
	if (x->next == x->n && (x->half_closed || x->end_asked))
		finish(s, x, x->status, x->message);
}

static void s_open(zcrpc_stream *s, const zcrpc_stream_open *open, void *arg)
{
	struct sstream *x = calloc(1, sizeof(*x));
	const zcrpc_md *init, *trail;

	zcrpc_stream_set_user(s, x);
	if (!x) {
		zcrpc_stream_finish(s, ZCRPC_RESOURCE_EXHAUSTED, "no memory", NULL, 0);
		return;
	}
	x->kind = *(const enum kind *)arg;
	x->status = ZCRPC_OK;
	trail = find_md(open->md, open->n_md, ECHO_TRAILING);
	if (trail) {
		x->trail_key = strdup(ECHO_TRAILING);
		x->trail_val = malloc(trail->value_len ? trail->value_len : 1);
		if (!x->trail_key || !x->trail_val) {
			finish(s, x, ZCRPC_RESOURCE_EXHAUSTED, "no memory");
			return;
		}
		memcpy(x->trail_val, trail->value, trail->value_len);
		x->trail_len = trail->value_len;
	}
	init = find_md(open->md, open->n_md, ECHO_INITIAL);
	if (init && zcrpc_stream_send_headers(s, init, 1) != ZCRPC_OK)
		finish(s, x, ZCRPC_INTERNAL, "could not send headers");
}

static void s_out_msg(zcrpc_stream *s, const OutReq *r, void *arg)
{
	struct sstream *x = zcrpc_stream_get_user(s);

	(void)arg;
	if (!x || x->finished || x->end_asked)
		return; /* after a response_status: processes no more messages */
	if (x->kind == K_OUTPUT && x->n) {
		finish(s, x, ZCRPC_INVALID_ARGUMENT,
		       "StreamingOutputCall takes one request");
		return;
	}
	if (queue_params(x, r) != 0) {
		finish(s, x, ZCRPC_RESOURCE_EXHAUSTED, "no memory");
		return;
	}
	if (r->response_status && r->response_status->code != 0 && !x->end_asked) {
		x->end_asked = 1;
		x->status = (zcrpc_status)r->response_status->code;
		x->message = strdup(r->response_status->message ? r->response_status->message : "");
	}
	pump(s, x);
}

static void s_in_msg(zcrpc_stream *s, const Grpc__Testing__StreamingInputCallRequest *r,
		     void *arg)
{
	struct sstream *x = zcrpc_stream_get_user(s);

	(void)arg;
	if (x && r->payload)
		x->aggregated += (int64_t)r->payload->body.len;
}

static void s_half(zcrpc_stream *s, void *arg)
{
	struct sstream *x = zcrpc_stream_get_user(s);

	(void)arg;
	if (!x || x->finished)
		return;
	x->half_closed = 1;
	if (x->kind == K_INPUT) {
		Grpc__Testing__StreamingInputCallResponse rep =
			GRPC__TESTING__STREAMING_INPUT_CALL_RESPONSE__INIT;

		rep.aggregated_payload_size = (int32_t)x->aggregated;
		if (grpc__testing__test_service__streaming_input_call__reply(s, &rep) !=
		    ZCRPC_OK) {
			finish(s, x, ZCRPC_INTERNAL, "write failed");
			return;
		}
		finish(s, x, ZCRPC_OK, NULL);
		return;
	}
	pump(s, x);
}

static void s_writable(zcrpc_stream *s, void *arg)
{
	struct sstream *x = zcrpc_stream_get_user(s);

	(void)arg;
	if (x)
		pump(s, x);
}

static void s_finish(zcrpc_stream *s, const zcrpc_stream_end *end, void *arg)
{
	struct sstream *x = zcrpc_stream_get_user(s);

	(void)end;
	(void)arg;
	if (!x)
		return;
	free(x->q);
	free(x->message);
	free(x->trail_key);
	free(x->trail_val);
	free(x);
}

static const enum kind k_output = K_OUTPUT, k_input = K_INPUT, k_full = K_FULL,
		       k_half = K_HALF;

static Grpc__Testing__TestService__StreamingOutputCall_ZcrpcServer g_output = {
	.on_open = s_open, .on_message = s_out_msg, .on_half_close = s_half,
	.on_writable = s_writable, .on_finish = s_finish, .arg = (void *)&k_output};
static Grpc__Testing__TestService__StreamingInputCall_ZcrpcServer g_input = {
	.on_open = s_open, .on_message = s_in_msg, .on_half_close = s_half,
	.on_writable = s_writable, .on_finish = s_finish, .arg = (void *)&k_input};
static Grpc__Testing__TestService__FullDuplexCall_ZcrpcServer g_full = {
	.on_open = s_open, .on_message = s_out_msg, .on_half_close = s_half,
	.on_writable = s_writable, .on_finish = s_finish, .arg = (void *)&k_full};
static Grpc__Testing__TestService__HalfDuplexCall_ZcrpcServer g_half = {
	.on_open = s_open, .on_message = s_out_msg, .on_half_close = s_half,
	.on_writable = s_writable, .on_finish = s_finish, .arg = (void *)&k_half};

static zcrpc_status register_all(zcrpc_server *s)
{
	zcrpc_status st;

	if ((st = grpc__testing__test_service__zcrpc_register(s, &g_unary)) != ZCRPC_OK ||
	    (st = grpc__testing__test_service__streaming_output_call__zcrpc_register(
		     s, &g_output)) != ZCRPC_OK ||
	    (st = grpc__testing__test_service__streaming_input_call__zcrpc_register(
		     s, &g_input)) != ZCRPC_OK ||
	    (st = grpc__testing__test_service__full_duplex_call__zcrpc_register(
		     s, &g_full)) != ZCRPC_OK ||
	    (st = grpc__testing__test_service__half_duplex_call__zcrpc_register(
		     s, &g_half)) != ZCRPC_OK)
		return st;
	return ZCRPC_OK;
}

int main(int argc, char **argv)
{
	static const int sigs[] = {SIGINT, SIGTERM};
	const char *host = NULL, *port = "0";
	zcrpc_server_opts so;
	zcrpc_serve_opts ro;
	zcrpc_server *s = NULL;
	zcrpc_status st;
	int rc = 1;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--host") == 0 && i + 1 < argc) {
			host = argv[++i];
		} else if (strcmp(argv[i], "--port") == 0 && i + 1 < argc) {
			port = argv[++i];
		} else {
			fprintf(stderr, "usage: %s [--host H] [--port P]\n", argv[0]);
			return 2;
		}
	}
	zcrpc_server_opts_init(&so);
	so.threads = 1;
	if ((st = zcrpc_server_create(NULL, &so, &s)) != ZCRPC_OK) {
		fprintf(stderr, "interop server: %s: %s\n", zcrpc_status_str(st),
			zcrpc_last_error());
		goto out;
	}
	if ((st = register_all(s)) != ZCRPC_OK ||
	    (st = zcrpc_server_listen(s, host, port)) != ZCRPC_OK) {
		fprintf(stderr, "interop server: %s: %s\n", zcrpc_status_str(st),
			zcrpc_last_error());
		goto out;
	}
	printf("listening on %s:%u\n", host ? host : "*", zcrpc_server_get_port(s));
	fflush(stdout);
	zcrpc_serve_opts_init(&ro);
	ro.signals = sigs;
	ro.nsignals = 2;
	ro.grace_ms = 1000;
	st = zcrpc_server_serve(s, &ro);
	printf("interop server: shut down (%s)\n", zcrpc_status_str(st));
	rc = 0;
out:
	zcrpc_server_destroy(s);
	return rc;
}
