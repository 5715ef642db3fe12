/* zcrpc — the client of etcd's v3 HTTP/JSON gateway that the "etcd:"
 * resolver (resolve_etcd.c) and servers announcing themselves
 * (announce.c) share: the registry string "etcd:http://HOST:PORT/PREFIX"
 * parsed, requests over libcurl (one transfer per request; several may
 * run on one multi handle), a JSON scanner for the few fields read, and
 * base64 for keys and values. Defined in resolve_etcd.c (its first part),
 * so that no other source file is needed. The protocol facts relied on
 * are at the top of resolve_etcd.c. */
#ifndef ZCRPC_RPC_ETCD_HTTP_H
#define ZCRPC_RPC_ETCD_HTTP_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "zcrpc/balance.h"

/* "http://" + "[" HOST "]:" PORT */
#define ZCRPC__ETCD_BASE_MAX (7 + ZCRPC_HOST_MAX + 3 + ZCRPC_PORT_MAX + 1)
/* Longest PREFIX (the keys' common start). */
#define ZCRPC__ETCD_PREFIX_MAX 512

/* "http://HOST:PORT/PREFIX", parsed. */
struct zcrpc__etcd_target {
	char base[ZCRPC__ETCD_BASE_MAX]; /* "http://HOST:PORT" */
	char prefix[ZCRPC__ETCD_PREFIX_MAX + 1]; /* without the slashes
						   * around it */
};

/* Parses @s (after "etcd:"); INVALID_ARGUMENT when it is not
 * "http://HOST:PORT/PREFIX" with a port 1..65535 and a PREFIX of
 * printable characters (its trailing '/' dropped) that is not empty. */
zcrpc_status zcrpc__etcd_parse_target(const char *s,
				      struct zcrpc__etcd_target *t);

/* Once per process (pthread_once): curl_global_init(CURL_GLOBAL_ALL).
 * Nonzero when it failed. */
int zcrpc__etcd_curl_init(void);

/* ---- one request ---- */

/* A line of a streaming answer (a watch: one JSON message a line). */
struct zcrpc__etcd_req;
typedef void (*zcrpc__etcd_line_fn)(struct zcrpc__etcd_req *q,
				    const char *line, size_t len, void *arg);

struct zcrpc__etcd_req {
	CURL *h;
	struct curl_slist *hdrs;
	char *body; /* the request's JSON (curl does not copy it) */
	char *resp; /* the answer (streaming: the line not yet complete) */
	size_t len, cap, max;
	zcrpc__etcd_line_fn on_line; /* NULL: the whole answer kept */
	void *arg;
	int too_big; /* the answer (or a line) passed @max: aborted */
	char err[CURL_ERROR_SIZE];
};

/* A POST of @body (copied) to @base @path ("/v3/kv/range"): connects
 * within 1 s, ends after @timeout_ms (0: never, a watch). Ready for
 * curl_multi_add_handle(q->h). INVALID_ARGUMENT, RESOURCE_EXHAUSTED. */
zcrpc_status zcrpc__etcd_req_init(struct zcrpc__etcd_req *q, const char *base,
				  const char *path, const char *body,
				  long timeout_ms, zcrpc__etcd_line_fn on_line,
				  void *arg);
void zcrpc__etcd_req_fini(struct zcrpc__etcd_req *q);

/* What the transfer that ended with @rc gave: 0 when etcd answered 200
 * (and, without on_line, q->resp is JSON: parsed into *@doc); otherwise
 * -1 and what went wrong in @why ("HTTP 404: etcdserver: requested lease
 * not found", "the answer is not JSON", curl's error). */
struct zcrpc__json;
int zcrpc__etcd_req_result(struct zcrpc__etcd_req *q, CURLcode rc,
			   struct zcrpc__json *doc, char *why, size_t cap);

/* ---- a thread's blocking requests, interruptible ---- */

struct zcrpc__etcd_client {
	CURLM *m;
	atomic_int stop; /* set by zcrpc__etcd_client_stop() */
};

int zcrpc__etcd_client_init(struct zcrpc__etcd_client *c);
void zcrpc__etcd_client_fini(struct zcrpc__etcd_client *c);
/* Any thread: the request running (and those after) end at once with
 * CURLE_ABORTED_BY_CALLBACK, until stop is cleared. */
void zcrpc__etcd_client_stop(struct zcrpc__etcd_client *c);

/* POSTs @body to @path and waits for etcd's answer (at most @timeout_ms):
 * 0 with *@doc the parsed JSON, whose text is q->resp (the caller
 * zcrpc__etcd_req_fini()s @q after reading it), or -1 with @why. */
int zcrpc__etcd_call(struct zcrpc__etcd_client *c, struct zcrpc__etcd_req *q,
		     const char *base, const char *path, const char *body,
		     long timeout_ms, struct zcrpc__json *doc, char *why,
		     size_t cap);

/* ---- JSON: a validating scanner over the text, no tree ---- */

/* One value: its text (a string with its quotes). */
struct zcrpc__json {
	const char *p;
	size_t n;
};

/* Checks that @s[0..@n) is one JSON value (nested at most 64 deep) with
 * only white space around it; 0 and *@v it, or -1. */
int zcrpc__json_parse(const char *s, size_t n, struct zcrpc__json *v);
/* '{', '[', '"', 'n' (a number), 't', 'f' or 'z' (null). */
char zcrpc__json_type(const struct zcrpc__json *v);
/* Member @name of object @obj: 0 and *@out, or -1 (absent, not an
 * object). */
int zcrpc__json_get(const struct zcrpc__json *obj, const char *name,
		    struct zcrpc__json *out);
/* The element after *@pos (0 at first) of array @arr: 0 and *@out, or -1
 * at its end. */
int zcrpc__json_next(const struct zcrpc__json *arr, size_t *pos,
		     struct zcrpc__json *out);
/* String @v decoded into @buf (NUL-terminated; non-ASCII \u escapes
 * become '?'): 0, or -1 when not a string or longer than @cap - 1. */
int zcrpc__json_str(const struct zcrpc__json *v, char *buf, size_t cap,
		    size_t *len);
/* An int64 as etcd writes them ("123", a JSON string) or a number: 0 and
 * *@out, or -1. */
int zcrpc__json_int(const struct zcrpc__json *v, int64_t *out);
/* 1 for true, 0 for false or absent. */
int zcrpc__json_true(const struct zcrpc__json *obj, const char *name);

/* ---- base64 (RFC 4648, with padding) ---- */

/* Writes @n bytes of @in as base64 into @out (4 * ((n + 2) / 3) + 1
 * bytes, NUL-terminated); returns its length. */
size_t zcrpc__b64_encode(const void *in, size_t n, char *out);
/* Decodes @n characters of @in into @out (at most @cap bytes): 0 and
 * *@len, or -1 (not base64, too long). */
int zcrpc__b64_decode(const char *in, size_t n, void *out, size_t cap,
		      size_t *len);

#endif /* ZCRPC_RPC_ETCD_HTTP_H */
