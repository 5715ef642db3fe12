/* zcrpc's client of gRPC's interop cases (doc/interop-test-descriptions.md
 * in gRPC), against interop_server or any server of
 * grpc.testing.TestService over zcrpc.
 *
 * Usage: interop_client --host H --port P --test_case NAME|all
 * Each case prints "PASS name" or "FAIL name: reason"; the exit status is
 * 1 when any failed, 2 for bad arguments. All cases share one channel, as
 * gRPC's client does. Unary calls go through zcrpc_call() (its result
 * carries both metadata lists); streams through the typed stubs zcrpc-gen
 * wrote for test.proto.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdarg.h>
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
#define INITIAL_VALUE "test_initial_metadata_value"
static const unsigned char kTrailingValue[3] = {0xab, 0xab, 0xab};
#define WAIT_MS 20000 /* how long a case waits for any one event */

typedef Grpc__Testing__StreamingOutputCallRequest OutReq;
typedef Grpc__Testing__StreamingOutputCallResponse OutRep;
typedef Grpc__Testing__StreamingInputCallRequest InReq;
typedef Grpc__Testing__StreamingInputCallResponse InRep;

static zcrpc_worker *g_w;
static zcrpc_channel *g_ch;
static uint8_t *g_zeros; /* request bodies: zeros */
static char g_reason[1024];

static int failf(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(g_reason, sizeof(g_reason), fmt, ap);
	va_end(ap);
	return -1;
}

static int64_t now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Drives the worker until @done(@arg) or @ms passed; non-zero if done. */
static int progress_until(int (*done)(void *), void *arg, int ms)
{
	int64_t end = now_ms() + ms;

	while (!done(arg)) {
		if (now_ms() > end)
			return 0;
		if (zcrpc_worker_progress(g_w, 1) != ZCRPC_OK)
			return 0;
	}
	return 1;
}

static int all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

/* Non-zero when @md holds @key with exactly @val. */
static int has_md(const zcrpc_md *md, size_t n, const char *key, const void *val,
		  size_t vlen)
{
	for (size_t i = 0; i < n; i++)
		if (md[i].key_len == strlen(key) && memcmp(md[i].key, key, md[i].key_len) == 0 &&
		    md[i].value_len == vlen && memcmp(md[i].value, val, vlen) == 0)
			return 1;
	return 0;
}

static const zcrpc_md kEchoMd[2] = {
	{ECHO_INITIAL, sizeof(ECHO_INITIAL) - 1, INITIAL_VALUE, sizeof(INITIAL_VALUE) - 1},
	{ECHO_TRAILING, sizeof(ECHO_TRAILING) - 1, kTrailingValue, sizeof(kTrailingValue)},
};

/* ---- unary -------------------------------------------------------------- */

/* Calls @method with @req packed, metadata @md and timeout @timeout_us
 * (0: none); *@res is the caller's (zcrpc_result_free). */
static zcrpc_status unary(const char *method, const ProtobufCMessage *req,
			  const zcrpc_md *md, size_t n_md, zcrpc_result *res)
{
	size_t len = protobuf_c_message_get_packed_size(req);
	uint8_t *buf = malloc(len ? len : 1);
	zcrpc_call_opts o;
	zcrpc_status st;

	memset(res, 0, sizeof(*res));
	if (!buf) {
		res->status = ZCRPC_RESOURCE_EXHAUSTED;
		return res->status;
	}
	protobuf_c_message_pack(req, buf);
	zcrpc_call_opts_init(&o);
	o.md = md;
	o.n_md = n_md;
	st = zcrpc_call(g_ch, zcrpc_method_id(method), buf, len, &o, res, sizeof(*res));
	free(buf);
	return st;
}

/* A SimpleRequest of @resp_size zeros back for @req_size zeros. */
static Grpc__Testing__SimpleRequest simple_req(Grpc__Testing__Payload *pl, int32_t resp_size,
					      size_t req_size)
{
	Grpc__Testing__SimpleRequest r = GRPC__TESTING__SIMPLE_REQUEST__INIT;

	*pl = (Grpc__Testing__Payload)GRPC__TESTING__PAYLOAD__INIT;
	pl->body.len = req_size;
	pl->body.data = g_zeros;
	r.response_type = GRPC__TESTING__PAYLOAD_TYPE__COMPRESSABLE;
	r.response_size = resp_size;
	r.payload = pl;
	return r;
}

/* Checks an OK SimpleResponse of @want zeros in @res. */
static int check_simple(const zcrpc_result *res, size_t want)
{
	Grpc__Testing__SimpleResponse *rep;
	int rc = 0;

	if (res->status != ZCRPC_OK)
		return failf("status %s: %s", zcrpc_status_str(res->status), res->message ? res->message : "");
	rep = grpc__testing__simple_response__unpack(NULL, res->len, res->data);
	if (!rep)
		return failf("reply does not unpack as SimpleResponse");
	if (!rep->payload)
		rc = failf("reply without payload");
	else if (rep->payload->type != GRPC__TESTING__PAYLOAD_TYPE__COMPRESSABLE)
		rc = failf("payload type %d", (int)rep->payload->type);
	else if (rep->payload->body.len != want)
		rc = failf("payload of %zu bytes, want %zu", rep->payload->body.len, want);
	else if (!all_zero(rep->payload->body.data, want))
		rc = failf("payload is not all zeros");
	grpc__testing__simple_response__free_unpacked(rep, NULL);
	return rc;
}

static int empty_unary(void)
{
	Grpc__Testing__Empty e = GRPC__TESTING__EMPTY__INIT;
	Grpc__Testing__Empty *rep;
	zcrpc_result res;
	int rc = 0;

	unary(GRPC__TESTING__TEST_SERVICE__EMPTY_CALL__ZCRPC_NAME, &e.base, NULL, 0, &res);
	if (res.status != ZCRPC_OK) {
		rc = failf("status %s: %s", zcrpc_status_str(res.status),
			   res.message ? res.message : "");
	} else if (res.len != 0) {
		rc = failf("reply of %zu bytes, want 0", res.len);
	} else if (!(rep = grpc__testing__empty__unpack(NULL, res.len, res.data))) {
		rc = failf("reply does not unpack as Empty");
	} else {
		grpc__testing__empty__free_unpacked(rep, NULL);
	}
	zcrpc_result_free(&res);
	return rc;
}

static int large_unary(void)
{
	Grpc__Testing__Payload pl;
	Grpc__Testing__SimpleRequest r = simple_req(&pl, 314159, 271828);
	zcrpc_result res;
	int rc;

	unary(GRPC__TESTING__TEST_SERVICE__UNARY_CALL__ZCRPC_NAME, &r.base, NULL, 0, &res);
	rc = check_simple(&res, 314159);
	zcrpc_result_free(&res);
	return rc;
}

/* ---- streams: one client stream's record -------------------------------- */

#define MAX_MSGS 16

struct cs {
	zcrpc_stream *s;
	int finished, writable, got_headers, got_agg, bad;
	zcrpc_status status;
	char message[1024];
	int headers_ok, trailers_ok; /* the echoed metadata arrived */
	size_t sizes[MAX_MSGS], n;   /* response body sizes, in order */
	int32_t aggregated;
};

static void c_headers(zcrpc_stream *s, const zcrpc_md *md, size_t n, void *arg)
{
	struct cs *c = arg;

	(void)s;
	c->got_headers = 1;
	c->headers_ok = has_md(md, n, ECHO_INITIAL, INITIAL_VALUE, strlen(INITIAL_VALUE));
}

static void c_out_msg(zcrpc_stream *s, const OutRep *r, void *arg)
{
	struct cs *c = arg;
	size_t len = r->payload ? r->payload->body.len : 0;

	(void)s;
	if (r->payload && !all_zero(r->payload->body.data, len))
		c->bad = 1;
	if (c->n < MAX_MSGS)
		c->sizes[c->n] = len;
	c->n++;
}

static void c_in_msg(zcrpc_stream *s, const InRep *r, void *arg)
{
	struct cs *c = arg;

	(void)s;
	c->got_agg++;
	c->aggregated = r->aggregated_payload_size;
}

static void c_writable(zcrpc_stream *s, void *arg)
{
	struct cs *c = arg;

	(void)s;
	c->writable++;
}

static void c_finish(zcrpc_stream *s, const zcrpc_stream_end *e, void *arg)
{
	struct cs *c = arg;

	(void)s;
	c->finished = 1;
	c->s = NULL;
	c->status = e->status;
	snprintf(c->message, sizeof(c->message), "%s", e->message ? e->message : "");
	c->trailers_ok = has_md(e->md, e->n_md, ECHO_TRAILING, kTrailingValue,
				sizeof(kTrailingValue));
}

static int is_finished(void *arg)
{
	return ((struct cs *)arg)->finished;
}

struct want_n {
	struct cs *c;
	size_t n;
};

static int has_n(void *arg)
{
	struct want_n *w = arg;

	return w->c->finished || w->c->n >= w->n;
}

struct want_writable {
	struct cs *c;
	int seen;
};

static int got_writable(void *arg)
{
	struct want_writable *w = arg;

	return w->c->finished || w->c->writable > w->seen;
}

/* Writes through @write, waiting out a closed window. */
static int write_wait(struct cs *c, zcrpc_status (*write)(zcrpc_stream *, const void *),
		      const void *msg)
{
	for (;;) {
		struct want_writable ww = {c, c->writable};
		zcrpc_status st;

		if (c->finished)
			return failf("stream ended before a write: %s: %s",
				     zcrpc_status_str(c->status), c->message);
		st = write(c->s, msg);
		if (st == ZCRPC_OK)
			return 0;
		if (st != ZCRPC_RESOURCE_EXHAUSTED)
			return failf("write: %s", zcrpc_status_str(st));
		if (!progress_until(got_writable, &ww, WAIT_MS))
			return failf("window never opened");
	}
}

static zcrpc_status w_full(zcrpc_stream *s, const void *m)
{
	return grpc__testing__test_service__full_duplex_call__write(s, m);
}
static zcrpc_status w_output(zcrpc_stream *s, const void *m)
{
	return grpc__testing__test_service__streaming_output_call__write(s, m);
}
static zcrpc_status w_input(zcrpc_stream *s, const void *m)
{
	return grpc__testing__test_service__streaming_input_call__write(s, m);
}

static zcrpc_status start_full(struct cs *c, const zcrpc_md *md, size_t n_md,
			       int64_t timeout_us)
{
	Grpc__Testing__TestService__FullDuplexCall_ZcrpcClient h = {
		.on_headers = c_headers, .on_message = c_out_msg,
		.on_writable = c_writable, .on_finish = c_finish, .arg = c};
	zcrpc_stream_opts o;

	zcrpc_stream_opts_init(&o);
	o.md = md;
	o.n_md = n_md;
	o.timeout_us = timeout_us;
	return grpc__testing__test_service__full_duplex_call__start(g_ch, &o, &h, &c->s);
}

/* Ends the case's stream: cancels it if still open, waits for on_finish
 * (the record must outlive it). */
static void drop(struct cs *c)
{
	if (!c->finished && c->s)
		zcrpc_stream_cancel(c->s);
	progress_until(is_finished, c, WAIT_MS);
}

/* Waits for on_finish, then wants OK. */
static int want_ok_end(struct cs *c)
{
	if (!progress_until(is_finished, c, WAIT_MS))
		return failf("stream did not end");
	if (c->status != ZCRPC_OK)
		return failf("ended %s: %s", zcrpc_status_str(c->status), c->message);
	return 0;
}

static int check_sizes(const struct cs *c, const int32_t *want, size_t n)
{
	if (c->n != n)
		return failf("%zu responses, want %zu", c->n, n);
	for (size_t i = 0; i < n; i++)
		if (c->sizes[i] != (size_t)want[i])
			return failf("response %zu of %zu bytes, want %d", i, c->sizes[i],
				     (int)want[i]);
	if (c->bad)
		return failf("a response body is not all zeros");
	return 0;
}

static int client_streaming(void)
{
	static const size_t sizes[] = {27182, 8, 1828, 45904};
	Grpc__Testing__TestService__StreamingInputCall_ZcrpcClient h = {
		.on_message = c_in_msg, .on_writable = c_writable, .on_finish = c_finish};
	struct cs c = {0};
	int rc = 0;

	h.arg = &c;
	if (grpc__testing__test_service__streaming_input_call__start(g_ch, NULL, &h, &c.s) !=
	    ZCRPC_OK)
		return failf("start failed");
	for (size_t i = 0; i < 4 && rc == 0; i++) {
		InReq r = GRPC__TESTING__STREAMING_INPUT_CALL_REQUEST__INIT;
		Grpc__Testing__Payload pl = GRPC__TESTING__PAYLOAD__INIT;

		pl.body.len = sizes[i];
		pl.body.data = g_zeros;
		r.payload = &pl;
		rc = write_wait(&c, w_input, &r);
	}
	if (rc == 0 && grpc__testing__test_service__streaming_input_call__close_send(c.s) != ZCRPC_OK)
		rc = failf("close_send failed");
	if (rc == 0 && (rc = want_ok_end(&c)) == 0) {
		if (c.got_agg != 1)
			rc = failf("%d responses, want 1", c.got_agg);
		else if (c.aggregated != 74922)
			rc = failf("aggregated_payload_size %d, want 74922", (int)c.aggregated);
	}
	drop(&c);
	return rc;
}

/* A StreamingOutputCallRequest asking for @n responses of @sizes, with
 * @req_size zeros of payload (0: none). */
struct out_req {
	OutReq r;
	Grpc__Testing__ResponseParameters p[8], *pp[8];
	Grpc__Testing__Payload pl;
	Grpc__Testing__EchoStatus es;
};

static void out_req(struct out_req *o, const int32_t *sizes, size_t n, size_t req_size)
{
	o->r = (OutReq)GRPC__TESTING__STREAMING_OUTPUT_CALL_REQUEST__INIT;
	for (size_t i = 0; i < n; i++) {
		o->p[i] = (Grpc__Testing__ResponseParameters)GRPC__TESTING__RESPONSE_PARAMETERS__INIT;
		o->p[i].size = sizes[i];
		o->pp[i] = &o->p[i];
	}
	o->r.n_response_parameters = n;
	o->r.response_parameters = o->pp;
	if (req_size) {
		o->pl = (Grpc__Testing__Payload)GRPC__TESTING__PAYLOAD__INIT;
		o->pl.body.len = req_size;
		o->pl.body.data = g_zeros;
		o->r.payload = &o->pl;
	}
}

static int server_streaming(void)
{
	static const int32_t sizes[] = {31415, 9, 2653, 58979};
	Grpc__Testing__TestService__StreamingOutputCall_ZcrpcClient h = {
		.on_message = c_out_msg, .on_writable = c_writable, .on_finish = c_finish};
	struct out_req o;
	struct cs c = {0};
	int rc;

	h.arg = &c;
	out_req(&o, sizes, 4, 0);
	if (grpc__testing__test_service__streaming_output_call__start(g_ch, NULL, &h, &c.s) !=
	    ZCRPC_OK)
		return failf("start failed");
	rc = write_wait(&c, w_output, &o.r);
	if (rc == 0 &&
	    grpc__testing__test_service__streaming_output_call__close_send(c.s) != ZCRPC_OK)
		rc = failf("close_send failed");
	if (rc == 0 && (rc = want_ok_end(&c)) == 0)
		rc = check_sizes(&c, sizes, 4);
	drop(&c);
	return rc;
}

static int ping_pong(void)
{
	static const int32_t resp[] = {31415, 9, 2653, 58979};
	static const size_t req[] = {27182, 8, 1828, 45904};
	struct cs c = {0};
	int rc = 0;

	if (start_full(&c, NULL, 0, 0) != ZCRPC_OK)
		return failf("start failed");
	for (size_t i = 0; i < 4 && rc == 0; i++) {
		struct out_req o;
		struct want_n wn = {&c, i + 1};

		out_req(&o, &resp[i], 1, req[i]);
		if ((rc = write_wait(&c, w_full, &o.r)) != 0)
			break;
		if (!progress_until(has_n, &wn, WAIT_MS) || c.n < i + 1)
			rc = failf("no response %zu (%s: %s)", i,
				   c.finished ? zcrpc_status_str(c.status) : "open", c.message);
		else if (c.sizes[i] != (size_t)resp[i])
			rc = failf("response %zu of %zu bytes, want %d", i, c.sizes[i],
				   (int)resp[i]);
	}
	if (rc == 0 && grpc__testing__test_service__full_duplex_call__close_send(c.s) != ZCRPC_OK)
		rc = failf("close_send failed");
	if (rc == 0 && (rc = want_ok_end(&c)) == 0)
		rc = check_sizes(&c, resp, 4);
	drop(&c);
	return rc;
}

static int empty_stream(void)
{
	struct cs c = {0};
	int rc = 0;

	if (start_full(&c, NULL, 0, 0) != ZCRPC_OK)
		return failf("start failed");
	if (grpc__testing__test_service__full_duplex_call__close_send(c.s) != ZCRPC_OK)
		rc = failf("close_send failed");
	if (rc == 0 && (rc = want_ok_end(&c)) == 0 && c.n != 0)
		rc = failf("%zu responses, want 0", c.n);
	drop(&c);
	return rc;
}

static int custom_metadata(void)
{
	static const int32_t size = 314159;
	Grpc__Testing__Payload pl;
	Grpc__Testing__SimpleRequest r = simple_req(&pl, size, 271828);
	struct out_req o;
	struct cs c = {0};
	zcrpc_result res;
	int rc;

	/* unary */
	unary(GRPC__TESTING__TEST_SERVICE__UNARY_CALL__ZCRPC_NAME, &r.base, kEchoMd, 2, &res);
	rc = check_simple(&res, (size_t)size);
	if (rc == 0 && !has_md(res.initial_md, res.n_initial_md, ECHO_INITIAL, INITIAL_VALUE,
			       strlen(INITIAL_VALUE)))
		rc = failf("unary: initial metadata not echoed (%zu entries)", res.n_initial_md);
	if (rc == 0 && !has_md(res.md, res.n_md, ECHO_TRAILING, kTrailingValue,
			       sizeof(kTrailingValue)))
		rc = failf("unary: trailing metadata not echoed (%zu entries)", res.n_md);
	zcrpc_result_free(&res);
	if (rc)
		return rc;
	/* full duplex */
	if (start_full(&c, kEchoMd, 2, 0) != ZCRPC_OK)
		return failf("start failed");
	out_req(&o, &size, 1, 271828);
	rc = write_wait(&c, w_full, &o.r);
	if (rc == 0 && grpc__testing__test_service__full_duplex_call__close_send(c.s) != ZCRPC_OK)
		rc = failf("close_send failed");
	if (rc == 0 && (rc = want_ok_end(&c)) == 0 && (rc = check_sizes(&c, &size, 1)) == 0) {
		if (!c.got_headers || !c.headers_ok)
			rc = failf("full duplex: initial metadata not echoed");
		else if (!c.trailers_ok)
			rc = failf("full duplex: trailing metadata not echoed");
	}
	drop(&c);
	return rc;
}

/* The unary and (when @duplex) the full-duplex call answered with @code
 * and @msg exactly. */
static int echo_status(int32_t code, const char *msg, int duplex)
{
	Grpc__Testing__SimpleRequest r = GRPC__TESTING__SIMPLE_REQUEST__INIT;
	Grpc__Testing__EchoStatus es = GRPC__TESTING__ECHO_STATUS__INIT;
	struct out_req o;
	struct cs c = {0};
	zcrpc_result res;
	int rc = 0;

	es.code = code;
	es.message = (char *)msg;
	r.response_status = &es;
	unary(GRPC__TESTING__TEST_SERVICE__UNARY_CALL__ZCRPC_NAME, &r.base, NULL, 0, &res);
	if ((int32_t)res.status != code)
		rc = failf("unary: status %s, want %d", zcrpc_status_str(res.status), (int)code);
	else if (strcmp(res.message ? res.message : "", msg) != 0)
		rc = failf("unary: message \"%s\", want \"%s\"",
			   res.message ? res.message : "", msg);
	zcrpc_result_free(&res);
	if (rc || !duplex)
		return rc;
	if (start_full(&c, NULL, 0, 0) != ZCRPC_OK)
		return failf("start failed");
	out_req(&o, NULL, 0, 0);
	o.r.response_status = &es;
	rc = write_wait(&c, w_full, &o.r);
	if (rc == 0 && grpc__testing__test_service__full_duplex_call__close_send(c.s) != ZCRPC_OK)
		rc = failf("close_send failed");
	if (rc == 0) {
		if (!progress_until(is_finished, &c, WAIT_MS))
			rc = failf("full duplex: stream did not end");
		else if ((int32_t)c.status != code)
			rc = failf("full duplex: status %s, want %d", zcrpc_status_str(c.status),
				   (int)code);
		else if (strcmp(c.message, msg) != 0)
			rc = failf("full duplex: message \"%s\", want \"%s\"", c.message, msg);
	}
	drop(&c);
	return rc;
}

static int status_code_and_message(void)
{
	return echo_status(2, "test status message", 1);
}

static int special_status_message(void)
{
	return echo_status(2,
			   "\t\ntest with whitespace\r\nand Unicode BMP \xe2\x98\xba and non-BMP "
			   "\xf0\x9f\x98\x88\t\n",
			   0);
}

static int want_unimplemented(const char *method)
{
	Grpc__Testing__Empty e = GRPC__TESTING__EMPTY__INIT;
	zcrpc_result res;
	int rc = 0;

	unary(method, &e.base, NULL, 0, &res);
	if (res.status != ZCRPC_UNIMPLEMENTED)
		rc = failf("status %s, want UNIMPLEMENTED", zcrpc_status_str(res.status));
	zcrpc_result_free(&res);
	return rc;
}

static int unimplemented_method(void)
{
	return want_unimplemented(GRPC__TESTING__TEST_SERVICE__UNIMPLEMENTED_CALL__ZCRPC_NAME);
}

static int unimplemented_service(void)
{
	return want_unimplemented(
		GRPC__TESTING__UNIMPLEMENTED_SERVICE__UNIMPLEMENTED_CALL__ZCRPC_NAME);
}

static int cancel_after_begin(void)
{
	Grpc__Testing__TestService__StreamingInputCall_ZcrpcClient h = {
		.on_message = c_in_msg, .on_writable = c_writable, .on_finish = c_finish};
	struct cs c = {0};
	int rc = 0;

	h.arg = &c;
	if (grpc__testing__test_service__streaming_input_call__start(g_ch, NULL, &h, &c.s) !=
	    ZCRPC_OK)
		return failf("start failed");
	if (grpc__testing__test_service__streaming_input_call__cancel(c.s) != ZCRPC_OK)
		rc = failf("cancel failed");
	else if (!progress_until(is_finished, &c, WAIT_MS))
		rc = failf("stream did not end");
	else if (c.status != ZCRPC_CANCELLED)
		rc = failf("ended %s, want CANCELLED", zcrpc_status_str(c.status));
	drop(&c);
	return rc;
}

static int cancel_after_first_response(void)
{
	static const int32_t size = 31415;
	struct out_req o;
	struct cs c = {0};
	struct want_n wn = {&c, 1};
	int rc;

	if (start_full(&c, NULL, 0, 0) != ZCRPC_OK)
		return failf("start failed");
	out_req(&o, &size, 1, 27182);
	rc = write_wait(&c, w_full, &o.r);
	if (rc == 0 && (!progress_until(has_n, &wn, WAIT_MS) || c.n != 1))
		rc = failf("no first response");
	if (rc == 0 && grpc__testing__test_service__full_duplex_call__cancel(c.s) != ZCRPC_OK)
		rc = failf("cancel failed");
	if (rc == 0) {
		if (!progress_until(is_finished, &c, WAIT_MS))
			rc = failf("stream did not end");
		else if (c.status != ZCRPC_CANCELLED)
			rc = failf("ended %s, want CANCELLED", zcrpc_status_str(c.status));
	}
	drop(&c);
	return rc;
}

static int timeout_on_sleeping_server(void)
{
	struct out_req o;
	struct cs c = {0};
	zcrpc_status st;
	int rc = 0;

	if (start_full(&c, NULL, 0, 1000) != ZCRPC_OK)
		return failf("start failed");
	out_req(&o, NULL, 0, 27182);
	/* The deadline may pass before the write: then the stream ended. */
	st = w_full(c.s, &o.r);
	if (st != ZCRPC_OK && st != ZCRPC_FAILED_PRECONDITION && st != ZCRPC_RESOURCE_EXHAUSTED)
		rc = failf("write: %s", zcrpc_status_str(st));
	else if (!progress_until(is_finished, &c, WAIT_MS))
		rc = failf("stream did not end");
	else if (c.status != ZCRPC_DEADLINE_EXCEEDED)
		rc = failf("ended %s: %s, want DEADLINE_EXCEEDED", zcrpc_status_str(c.status),
			   c.message);
	drop(&c);
	return rc;
}

static const struct {
	const char *name;
	int (*fn)(void);
} kCases[] = {
	{"empty_unary", empty_unary},
	{"large_unary", large_unary},
	{"client_streaming", client_streaming},
	{"server_streaming", server_streaming},
	{"ping_pong", ping_pong},
	{"empty_stream", empty_stream},
	{"custom_metadata", custom_metadata},
	{"status_code_and_message", status_code_and_message},
	{"special_status_message", special_status_message},
	{"unimplemented_method", unimplemented_method},
	{"unimplemented_service", unimplemented_service},
	{"cancel_after_begin", cancel_after_begin},
	{"cancel_after_first_response", cancel_after_first_response},
	{"timeout_on_sleeping_server", timeout_on_sleeping_server},
};
#define N_CASES (sizeof(kCases) / sizeof(kCases[0]))

int main(int argc, char **argv)
{
	const char *host = NULL, *port = NULL, *which = NULL;
	int failed = 0, ran = 0, rc = 2;
	zcrpc_status st;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--host") == 0)
			host = argv[i + 1];
		else if (strcmp(argv[i], "--port") == 0)
			port = argv[i + 1];
		else if (strcmp(argv[i], "--test_case") == 0)
			which = argv[i + 1];
	}
	if (!host || !port || !which || argc % 2 == 0) {
		fprintf(stderr, "usage: %s --host H --port P --test_case NAME|all\n", argv[0]);
		return 2;
	}
	g_zeros = calloc(1, 1u << 20);
	if (!g_zeros)
		return 1;
	if ((st = zcrpc_worker_create(NULL, &g_w)) != ZCRPC_OK ||
	    (st = zcrpc_channel_create(g_w, host, port, NULL, &g_ch)) != ZCRPC_OK) {
		fprintf(stderr, "interop client: %s: %s\n", zcrpc_status_str(st),
			zcrpc_last_error());
		rc = 1;
		goto out;
	}
	for (size_t i = 0; i < N_CASES; i++) {
		if (strcmp(which, "all") != 0 && strcmp(which, kCases[i].name) != 0)
			continue;
		ran++;
		g_reason[0] = '\0';
		if (kCases[i].fn() == 0) {
			printf("PASS %s\n", kCases[i].name);
		} else {
			printf("FAIL %s: %s\n", kCases[i].name, g_reason);
			failed++;
		}
		fflush(stdout);
	}
	if (!ran) {
		fprintf(stderr, "interop client: no test case \"%s\"\n", which);
		rc = 2;
		goto out;
	}
	rc = failed ? 1 : 0;
out:
	zcrpc_channel_destroy(g_ch);
	zcrpc_worker_destroy(g_w);
	free(g_zeros);
	return rc;
}
