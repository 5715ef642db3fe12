/* zcrpc — the "etcd:http://HOST:PORT/PREFIX" resolver: the backends are
 * the values ("HOST:PORT", "[V6]:PORT") of the keys PREFIX/... in etcd,
 * read through etcd's v3 HTTP/JSON gateway with libcurl, and watched for
 * changes (zcrpc_server_announce() puts servers there, announce.c). Its
 * first part is the gateway's client that announce.c shares
 * (etcd_http.h).
 *
 * One thread per resolver, never the worker's: it reads the keys (a
 * range), reports them, and watches the prefix from the revision after
 * the range's; each watch message with events reads the keys again (the
 * range is the truth; the events only say when), refresh() too (a
 * backend failed, and every 30 s). A range
 * that fails is reported (the channel keeps its set and says why when no
 * backend is left) and retried with a backoff of 100 ms doubling to 2 s;
 * a watch that ends or breaks is restarted the same way (a range first,
 * so nothing that changed meanwhile is missed). Both transfers run on one
 * curl multi handle, which stop() wakes (curl_multi_wakeup) so that the
 * thread leaves at once, whatever it waits for.
 *
 * What this relies on of etcd's gateway (checked against etcd 3.4.23, the
 * gateway grpc-gateway makes of the gRPC API, rpc.proto):
 * - every call is a POST of one JSON object to /v3/<service>/<method>,
 *   answered "200 OK" with one JSON object; bytes fields (key, value,
 *   range_end) are base64 (RFC 4648, padded), int64 fields (revision, ID,
 *   TTL, lease, start_revision) JSON strings ("42"), both ways; fields
 *   with their zero value are left out of answers;
 * - a refusal is an HTTP error status (404 for "etcdserver: requested
 *   lease not found", gRPC NotFound) with {"error": "...", "message":
 *   "...", "code": N};
 * - /v3/kv/range {"key", "range_end"}: {"header": {"revision"}, "kvs":
 *   [{"key", "value", "lease", ...}], "count"}; keys in order; "kvs" left
 *   out when none; range_end = the prefix with its last byte plus one
 *   selects every key that starts with the prefix;
 * - /v3/kv/put {"key", "value", "lease"};
 * - /v3/lease/grant {"TTL"}: {"ID", "TTL"};
 * - /v3/lease/keepalive {"ID"} (a streaming RPC: one request in the body,
 *   one answer, then the transfer ends): {"result": {"ID", "TTL"}}, "TTL"
 *   left out (0) when the lease is unknown or expired;
 * - /v3/lease/revoke {"ID"} (3.4 also answers /v3/kv/lease/revoke, the
 *   older path): {}, or 404 when the lease is already gone;
 * - /v3/watch {"create_request": {"key", "range_end", "start_revision"}}:
 *   a chunked answer that stays open, one JSON message a line, each
 *   {"result": {"header", "created", "events": [{"type", "kv"}],
 *   "canceled", "compact_revision", "cancel_reason"}} or {"error": ...};
 *   the first says "created": true; a start revision that was compacted
 *   gets "canceled" with "compact_revision";
 * - GET /health answers {"health": "true"} (the tests wait for it). */
#include "etcd_http.h"
#include "lb_internal.h"
#include "../core/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the gateway's client (etcd_http.h) ------------------------------ */

#define CONNECT_TIMEOUT_MS 1000L
#define JSON_MAX_DEPTH 64

zcrpc_status zcrpc__etcd_parse_target(const char *s,
				      struct zcrpc__etcd_target *t)
{
	const char *hp, *slash, *pre;
	char host[ZCRPC_HOST_MAX + 1], port[ZCRPC_PORT_MAX + 1];
	size_t hl, pl, i;

	if (!s || strncmp(s, "http://", 7))
		return ZCRPC_INVALID_ARGUMENT; /* https: not yet */
	hp = s + 7;
	slash = strchr(hp, '/');
	if (!slash)
		return ZCRPC_INVALID_ARGUMENT;
	hl = (size_t)(slash - hp);
	if (zcrpc__target_parse_hostport(hp, hl, -1, host, port))
		return ZCRPC_INVALID_ARGUMENT;
	pre = slash + 1;
	pl = strlen(pre);
	while (pl && pre[pl - 1] == '/')
		pl--;
	if (!pl || pl > ZCRPC__ETCD_PREFIX_MAX)
		return ZCRPC_INVALID_ARGUMENT;
	for (i = 0; i < pl; i++)
		if ((unsigned char)pre[i] <= ' ' || (unsigned char)pre[i] > '~')
			return ZCRPC_INVALID_ARGUMENT;
	snprintf(t->base, sizeof(t->base), "http://%.*s", (int)hl, hp);
	memcpy(t->prefix, pre, pl);
	t->prefix[pl] = 0;
	return ZCRPC_OK;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static int curl_failed;

static void curl_init_once(void)
{
	/* Not thread-safe in libcurl before 7.84: hence once, and before any
	 * handle of ours. Never cleaned up (other users may share it). */
	curl_failed = curl_global_init(CURL_GLOBAL_ALL) != CURLE_OK;
}

int zcrpc__etcd_curl_init(void)
{
	pthread_once(&curl_once, curl_init_once);
	return curl_failed;
}

/* Appends @n bytes to q->resp (NUL-terminated); -1 past q->max. */
static int resp_add(struct zcrpc__etcd_req *q, const char *d, size_t n)
{
	if (q->len + n > q->max) {
		q->too_big = 1;
		return -1;
	}
	if (q->len + n + 1 > q->cap) {
		size_t cap = q->cap ? q->cap : 1024;
		char *p;

		while (cap < q->len + n + 1)
			cap *= 2;
		p = realloc(q->resp, cap);
		if (!p)
			return -1;
		q->resp = p;
		q->cap = cap;
	}
	memcpy(q->resp + q->len, d, n);
	q->len += n;
	q->resp[q->len] = 0;
	return 0;
}

static size_t on_data(char *d, size_t size, size_t nmemb, void *arg)
{
	struct zcrpc__etcd_req *q = arg;
	size_t n = size * nmemb, used = 0;
	long code = 0;

	curl_easy_getinfo(q->h, CURLINFO_RESPONSE_CODE, &code);
	if (!q->on_line || code != 200) /* kept whole (an error's JSON) */
		return resp_add(q, d, n) ? 0 : n;
	while (used < n) {
		const char *nl = memchr(d + used, '\n', n - used);
		size_t take = nl ? (size_t)(nl - (d + used)) : n - used;

		if (resp_add(q, d + used, take))
			return 0;
		used += take;
		if (!nl)
			break;
		used++; /* the newline */
		q->on_line(q, q->resp, q->len, q->arg);
		q->len = 0;
		if (q->too_big) /* the handler wants it to end */
			return 0;
	}
	return n;
}

zcrpc_status zcrpc__etcd_req_init(struct zcrpc__etcd_req *q, const char *base,
				  const char *path, const char *body,
				  long timeout_ms, zcrpc__etcd_line_fn on_line,
				  void *arg)
{
	char url[ZCRPC__ETCD_BASE_MAX + 64];
	CURL *h;
	int bad = 0;

	memset(q, 0, sizeof(*q));
	if (zcrpc__etcd_curl_init())
		return ZCRPC_RESOURCE_EXHAUSTED;
	if ((size_t)snprintf(url, sizeof(url), "%s%s", base, path) >=
	    sizeof(url))
		return ZCRPC_INVALID_ARGUMENT;
	q->h = h = curl_easy_init();
	q->hdrs = curl_slist_append(NULL, "Content-Type: application/json");
	q->body = strdup(body);
	if (!h || !q->hdrs || !q->body) {
		zcrpc__etcd_req_fini(q);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	q->on_line = on_line;
	q->arg = arg;
	/* A range of 1024 servers is some 200 KiB; a watch line less. */
	q->max = 8u << 20;
	bad |= curl_easy_setopt(h, CURLOPT_URL, url) != CURLE_OK;
	bad |= curl_easy_setopt(h, CURLOPT_PRIVATE, q) != CURLE_OK;
	bad |= curl_easy_setopt(h, CURLOPT_POSTFIELDS, q->body) != CURLE_OK;
	bad |= curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE,
				(long)strlen(q->body)) != CURLE_OK;
	bad |= curl_easy_setopt(h, CURLOPT_HTTPHEADER, q->hdrs) != CURLE_OK;
	bad |= curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data) != CURLE_OK;
	bad |= curl_easy_setopt(h, CURLOPT_WRITEDATA, q) != CURLE_OK;
	bad |= curl_easy_setopt(h, CURLOPT_ERRORBUFFER, q->err) != CURLE_OK;
	/* threads of their own: no SIGALRM for timeouts */
	bad |= curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L) != CURLE_OK;
	bad |= curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
				CONNECT_TIMEOUT_MS) != CURLE_OK;
	bad |= curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms) != CURLE_OK;
	/* the registry is reached directly, whatever http_proxy says */
	bad |= curl_easy_setopt(h, CURLOPT_PROXY, "") != CURLE_OK;
#if LIBCURL_VERSION_NUM >= 0x075500 /* 7.85 */
	bad |= curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http") != CURLE_OK;
#else
	bad |= curl_easy_setopt(h, CURLOPT_PROTOCOLS, (long)CURLPROTO_HTTP) !=
	       CURLE_OK;
#endif
	bad |= curl_easy_setopt(h, CURLOPT_HTTP_VERSION,
				(long)CURL_HTTP_VERSION_1_1) != CURLE_OK;
	/* a watch is idle for long: a peer host gone is found by TCP */
	bad |= curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L) != CURLE_OK;
	bad |= curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 10L) != CURLE_OK;
	bad |= curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 5L) != CURLE_OK;
	if (bad) {
		zcrpc__etcd_req_fini(q);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	return ZCRPC_OK;
}

void zcrpc__etcd_req_fini(struct zcrpc__etcd_req *q)
{
	if (q->h)
		curl_easy_cleanup(q->h);
	curl_slist_free_all(q->hdrs);
	free(q->body);
	free(q->resp);
	memset(q, 0, sizeof(*q));
}

int zcrpc__etcd_req_result(struct zcrpc__etcd_req *q, CURLcode rc,
			   struct zcrpc__json *doc, char *why, size_t cap)
{
	struct zcrpc__json v, m;
	char msg[160];
	long code = 0;

	if (q->too_big && rc != CURLE_OK) {
		snprintf(why, cap, "the answer passed %zu bytes", q->max);
		return -1;
	}
	if (rc == CURLE_ABORTED_BY_CALLBACK) {
		snprintf(why, cap, "stopped");
		return -1;
	}
	if (rc != CURLE_OK) {
		snprintf(why, cap, "%s",
			 q->err[0] ? q->err : curl_easy_strerror(rc));
		return -1;
	}
	curl_easy_getinfo(q->h, CURLINFO_RESPONSE_CODE, &code);
	if (code != 200) {
		/* etcd's refusal says why in "message" (or "error") */
		if (q->resp && !zcrpc__json_parse(q->resp, q->len, &v) &&
		    (!zcrpc__json_get(&v, "message", &m) ||
		     !zcrpc__json_get(&v, "error", &m)) &&
		    !zcrpc__json_str(&m, msg, sizeof(msg), NULL))
			snprintf(why, cap, "HTTP %ld: %s", code, msg);
		else
			snprintf(why, cap, "HTTP %ld", code);
		return -1;
	}
	if (q->on_line)
		return 0;
	if (!q->resp || zcrpc__json_parse(q->resp, q->len, doc) ||
	    zcrpc__json_type(doc) != '{') {
		snprintf(why, cap, "the answer is not a JSON object");
		return -1;
	}
	return 0;
}

int zcrpc__etcd_client_init(struct zcrpc__etcd_client *c)
{
	atomic_init(&c->stop, 0);
	if (zcrpc__etcd_curl_init())
		return -1;
	c->m = curl_multi_init();
	return c->m ? 0 : -1;
}

void zcrpc__etcd_client_fini(struct zcrpc__etcd_client *c)
{
	if (c->m)
		curl_multi_cleanup(c->m);
	c->m = NULL;
}

void zcrpc__etcd_client_stop(struct zcrpc__etcd_client *c)
{
	atomic_store(&c->stop, 1);
	curl_multi_wakeup(c->m); /* any thread, even before its poll */
}

int zcrpc__etcd_call(struct zcrpc__etcd_client *c, struct zcrpc__etcd_req *q,
		     const char *base, const char *path, const char *body,
		     long timeout_ms, struct zcrpc__json *doc, char *why,
		     size_t cap)
{
	CURLcode rc = CURLE_OK;
	CURLMsg *msg;
	int running, left, done = 0;

	if (zcrpc__etcd_req_init(q, base, path, body, timeout_ms, NULL,
				 NULL) != ZCRPC_OK) {
		snprintf(why, cap, "out of memory");
		return -1;
	}
	if (curl_multi_add_handle(c->m, q->h) != CURLM_OK) {
		snprintf(why, cap, "curl_multi_add_handle failed");
		return -1;
	}
	while (!done) {
		if (atomic_load(&c->stop)) {
			rc = CURLE_ABORTED_BY_CALLBACK;
			break;
		}
		if (curl_multi_perform(c->m, &running) != CURLM_OK) {
			rc = CURLE_OUT_OF_MEMORY;
			break;
		}
		while ((msg = curl_multi_info_read(c->m, &left)))
			if (msg->msg == CURLMSG_DONE &&
			    msg->easy_handle == q->h) {
				rc = msg->data.result;
				done = 1;
			}
		if (!done)
			curl_multi_poll(c->m, NULL, 0, 1000, NULL);
	}
	curl_multi_remove_handle(c->m, q->h);
	return zcrpc__etcd_req_result(q, rc, doc, why, cap);
}

/* ---- JSON ---- */

static const char *json_ws(const char *p, const char *e)
{
	while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
	return p;
}

static int is_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
	       (c >= 'A' && c <= 'F');
}

static int is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* The end of the string at @p (its '"'), or NULL. */
static const char *json_skip_str(const char *p, const char *e)
{
	int i;

	for (p++; p < e; p++) {
		unsigned char c = (unsigned char)*p;

		if (c == '"')
			return p + 1;
		if (c < 0x20)
			return NULL;
		if (c != '\\')
			continue;
		if (++p == e)
			return NULL;
		if (*p == 'u') {
			for (i = 0; i < 4; i++)
				if (++p == e || !is_hex(*p))
					return NULL;
		} else if (!*p || !strchr("\"\\/bfnrt", *p)) {
			return NULL;
		}
	}
	return NULL;
}

static const char *json_skip_num(const char *p, const char *e)
{
	if (p < e && *p == '-')
		p++;
	if (p < e && *p == '0') {
		p++;
	} else {
		if (p == e || !is_digit(*p))
			return NULL;
		while (p < e && is_digit(*p))
			p++;
	}
	if (p < e && *p == '.') {
		if (++p == e || !is_digit(*p))
			return NULL;
		while (p < e && is_digit(*p))
			p++;
	}
	if (p < e && (*p == 'e' || *p == 'E')) {
		p++;
		if (p < e && (*p == '+' || *p == '-'))
			p++;
		if (p == e || !is_digit(*p))
			return NULL;
		while (p < e && is_digit(*p))
			p++;
	}
	return p;
}

/* The end of the value at @p (no white space before it), or NULL. */
static const char *json_skip(const char *p, const char *e, int depth)
{
	char close;

	if (p >= e || depth > JSON_MAX_DEPTH)
		return NULL;
	switch (*p) {
	case '"':
		return json_skip_str(p, e);
	case 't':
		return e - p >= 4 && !memcmp(p, "true", 4) ? p + 4 : NULL;
	case 'f':
		return e - p >= 5 && !memcmp(p, "false", 5) ? p + 5 : NULL;
	case 'n':
		return e - p >= 4 && !memcmp(p, "null", 4) ? p + 4 : NULL;
	case '{':
	case '[':
		break;
	default:
		return json_skip_num(p, e);
	}
	close = *p == '{' ? '}' : ']';
	p = json_ws(p + 1, e);
	if (p < e && *p == close)
		return p + 1;
	for (;;) {
		if (close == '}') { /* "name": */
			if (p >= e || *p != '"' || !(p = json_skip_str(p, e)))
				return NULL;
			p = json_ws(p, e);
			if (p >= e || *p != ':')
				return NULL;
			p = json_ws(p + 1, e);
		}
		if (!(p = json_skip(p, e, depth + 1)))
			return NULL;
		p = json_ws(p, e);
		if (p < e && *p == close)
			return p + 1;
		if (p >= e || *p != ',')
			return NULL;
		p = json_ws(p + 1, e);
	}
}

int zcrpc__json_parse(const char *s, size_t n, struct zcrpc__json *v)
{
	const char *e = s + n, *p = json_ws(s, e), *end;

	end = json_skip(p, e, 0);
	if (!end || json_ws(end, e) != e)
		return -1;
	v->p = p;
	v->n = (size_t)(end - p);
	return 0;
}

char zcrpc__json_type(const struct zcrpc__json *v)
{
	if (!v->n)
		return 0;
	switch (v->p[0]) {
	case '{':
	case '[':
	case '"':
	case 't':
	case 'f':
		return v->p[0];
	case 'n':
		return 'z';
	default:
		return 'n';
	}
}

/* The values given were validated by zcrpc__json_parse: the walks below
 * only look for their way. */
int zcrpc__json_get(const struct zcrpc__json *obj, const char *name,
		    struct zcrpc__json *out)
{
	const char *e = obj->p + obj->n, *p, *k, *ke, *v;
	size_t len = strlen(name);

	if (zcrpc__json_type(obj) != '{')
		return -1;
	p = json_ws(obj->p + 1, e);
	while (p < e && *p == '"') {
		k = p + 1;
		if (!(ke = json_skip_str(p, e)))
			return -1;
		p = json_ws(json_ws(ke, e) + 1, e); /* past ':' */
		v = p;
		if (!(p = json_skip(p, e, 0)))
			return -1;
		if ((size_t)(ke - 1 - k) == len && !memcmp(k, name, len)) {
			out->p = v;
			out->n = (size_t)(p - v);
			return 0;
		}
		p = json_ws(p, e);
		if (p < e && *p == ',')
			p = json_ws(p + 1, e);
	}
	return -1;
}

int zcrpc__json_next(const struct zcrpc__json *arr, size_t *pos,
		     struct zcrpc__json *out)
{
	const char *e = arr->p + arr->n, *p, *v;

	if (zcrpc__json_type(arr) != '[')
		return -1;
	p = json_ws(arr->p + (*pos ? *pos : 1), e);
	if (p < e && *p == ',')
		p = json_ws(p + 1, e);
	if (p >= e || *p == ']')
		return -1;
	v = p;
	if (!(p = json_skip(p, e, 0)))
		return -1;
	out->p = v;
	out->n = (size_t)(p - v);
	*pos = (size_t)(p - arr->p);
	return 0;
}

int zcrpc__json_str(const struct zcrpc__json *v, char *buf, size_t cap,
		    size_t *len)
{
	const char *p, *e;
	size_t n = 0;

	if (zcrpc__json_type(v) != '"' || !cap)
		return -1;
	p = v->p + 1;
	e = v->p + v->n - 1; /* the closing quote */
	while (p < e) {
		char c = *p++;

		if (c == '\\') {
			c = *p++;
			switch (c) {
			case 'b':
				c = '\b';
				break;
			case 'f':
				c = '\f';
				break;
			case 'n':
				c = '\n';
				break;
			case 'r':
				c = '\r';
				break;
			case 't':
				c = '\t';
				break;
			case 'u': {
				char hex[5] = {p[0], p[1], p[2], p[3], 0};
				long u = strtol(hex, NULL, 16);

				p += 4;
				c = u < 0x80 ? (char)u : '?';
				break;
			}
			default: /* '"', '\\', '/' */
				break;
			}
		}
		if (n + 1 >= cap)
			return -1;
		buf[n++] = c;
	}
	buf[n] = 0;
	if (len)
		*len = n;
	return 0;
}

int zcrpc__json_int(const struct zcrpc__json *v, int64_t *out)
{
	char buf[32], *end;
	long long x;

	if (zcrpc__json_type(v) == '"') {
		if (zcrpc__json_str(v, buf, sizeof(buf), NULL))
			return -1;
	} else if (zcrpc__json_type(v) == 'n' && v->n < sizeof(buf)) {
		memcpy(buf, v->p, v->n);
		buf[v->n] = 0;
	} else {
		return -1;
	}
	if (!buf[0] || !(is_digit(buf[0]) || buf[0] == '-'))
		return -1;
	errno = 0;
	x = strtoll(buf, &end, 10);
	if (errno || *end)
		return -1;
	*out = x;
	return 0;
}

int zcrpc__json_true(const struct zcrpc__json *obj, const char *name)
{
	struct zcrpc__json v;

	return !zcrpc__json_get(obj, name, &v) && zcrpc__json_type(&v) == 't';
}

/* ---- base64 ---- */

static const char b64[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t zcrpc__b64_encode(const void *in, size_t n, char *out)
{
	const unsigned char *s = in;
	size_t i, o = 0;

	for (i = 0; i + 2 < n; i += 3) {
		uint32_t x = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 |
			     s[i + 2];

		out[o++] = b64[x >> 18];
		out[o++] = b64[(x >> 12) & 63];
		out[o++] = b64[(x >> 6) & 63];
		out[o++] = b64[x & 63];
	}
	if (i < n) {
		uint32_t x = (uint32_t)s[i] << 16 |
			     (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0);

		out[o++] = b64[x >> 18];
		out[o++] = b64[(x >> 12) & 63];
		out[o++] = i + 1 < n ? b64[(x >> 6) & 63] : '=';
		out[o++] = '=';
	}
	out[o] = 0;
	return o;
}

static int b64_val(char c)
{
	const char *p = c ? strchr(b64, c) : NULL;

	return p ? (int)(p - b64) : -1;
}

int zcrpc__b64_decode(const char *in, size_t n, void *out, size_t cap,
		      size_t *len)
{
	unsigned char *d = out;
	size_t i, o = 0;

	if (n % 4)
		return -1;
	for (i = 0; i < n; i += 4) {
		int v[4], k, pad = 0;
		uint32_t x = 0;

		for (k = 0; k < 4; k++) {
			if (in[i + k] == '=' && i + 4 == n && k >= 2) {
				v[k] = 0;
				pad++;
				continue;
			}
			if (pad || (v[k] = b64_val(in[i + k])) < 0)
				return -1;
		}
		for (k = 0; k < 4; k++)
			x = x << 6 | (uint32_t)v[k];
		if (o + 3 - (size_t)pad > cap)
			return -1;
		d[o++] = (unsigned char)(x >> 16);
		if (pad < 2)
			d[o++] = (unsigned char)(x >> 8);
		if (pad < 1)
			d[o++] = (unsigned char)x;
	}
	*len = o;
	return 0;
}

/* ---- the resolver ----------------------------------------------------- */

#define RANGE_TIMEOUT_MS 3000L
#define BACKOFF_FIRST_MS 100
#define BACKOFF_MAX_MS 2000
/* a watch that lived this long broke for a new reason: backoff anew */
#define WATCH_SETTLED_MS 2000
/* the longest key named in a message, and a value that can be HOST:PORT */
#define KEY_SHOWN 64
#define VALUE_MAX (ZCRPC_HOST_MAX + 3 + ZCRPC_PORT_MAX)
#define B64_LEN(n) (((n) + 2) / 3 * 4 + 1)

struct etcd_res {
	zcrpc_resolver *r;
	struct zcrpc__etcd_target t;
	char key[B64_LEN(ZCRPC__ETCD_PREFIX_MAX + 1)];	     /* PREFIX/ */
	char range_end[B64_LEN(ZCRPC__ETCD_PREFIX_MAX + 1)]; /* PREFIX0 */
	CURLM *m;
	pthread_t thread;
	atomic_int stop, refresh;
	/* the thread's own */
	struct zcrpc__etcd_req range, watch;
	int range_on, watch_on, need_range;
	int64_t rev;		 /* of the last range, 0 before one */
	int64_t retry_at_ms;	 /* no range before (a backoff) */
	int backoff_ms;		 /* the next one */
	int64_t watch_since_ms;	 /* when it started */
	int events;		 /* the watch saw changes: range again */
	char watch_why[160];	 /* why the watch was ended by us */
};

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void res_fail(struct etcd_res *e, const char *what)
{
	char why[200];

	snprintf(why, sizeof(why), "etcd: %.60s: %.130s", e->t.base, what);
	zcrpc_resolver_set(e->r, NULL, 0, ZCRPC_UNAVAILABLE, why);
}

static void backoff(struct etcd_res *e)
{
	e->retry_at_ms = now_ms() + e->backoff_ms;
	e->backoff_ms = e->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS
							   : e->backoff_ms * 2;
}

/* Decodes the base64 string @v into @buf (NUL-terminated). */
static int b64_field(const struct zcrpc__json *v, char *buf, size_t cap,
		     size_t *len)
{
	char enc[B64_LEN(ZCRPC__ETCD_PREFIX_MAX + VALUE_MAX + 2)];
	size_t n;

	if (zcrpc__json_str(v, enc, sizeof(enc), &n) ||
	    zcrpc__b64_decode(enc, n, buf, cap - 1, len))
		return -1;
	buf[*len] = 0;
	return 0;
}

/* The set in a range's answer @doc, reported; -1 when @doc is not one. */
static int report_range(struct etcd_res *e, const struct zcrpc__json *doc)
{
	struct zcrpc__json hdr, v, kvs, kv, f;
	struct slot {
		char host[ZCRPC_HOST_MAX + 1], port[ZCRPC_PORT_MAX + 1];
	} *slots = NULL;
	zcrpc_address *a = NULL;
	char val[VALUE_MAX + 1], bad_key[KEY_SHOWN + 1] = "", what[160];
	size_t pos = 0, n = 0, cnt = 0, len;
	int64_t rev;
	int has_kvs;

	if (zcrpc__json_get(doc, "header", &hdr) ||
	    zcrpc__json_get(&hdr, "revision", &v) || zcrpc__json_int(&v, &rev))
		return -1;
	has_kvs = !zcrpc__json_get(doc, "kvs", &kvs);
	if (has_kvs && zcrpc__json_type(&kvs) != '[')
		return -1;
	while (has_kvs && !zcrpc__json_next(&kvs, &pos, &kv))
		cnt++;
	if (cnt > ZCRPC_MAX_BACKENDS) {
		snprintf(what, sizeof(what), "more than %d keys under %.60s/",
			 ZCRPC_MAX_BACKENDS, e->t.prefix);
		res_fail(e, what);
		e->rev = rev;
		return 0;
	}
	if (cnt && (!(slots = calloc(cnt, sizeof(*slots))) ||
		    !(a = calloc(cnt, sizeof(*a))))) {
		free(slots);
		res_fail(e, "out of memory");
		return 0;
	}
	for (pos = 0; has_kvs && !zcrpc__json_next(&kvs, &pos, &kv);) {
		if (zcrpc__json_get(&kv, "value", &f) ||
		    b64_field(&f, val, sizeof(val), &len) ||
		    zcrpc__target_parse_hostport(val, len, -1, slots[n].host,
						 slots[n].port)) {
			/* skipped; named if none is good */
			char key[ZCRPC__ETCD_PREFIX_MAX + VALUE_MAX + 2];

			if (!bad_key[0] && !zcrpc__json_get(&kv, "key", &f) &&
			    !b64_field(&f, key, sizeof(key), &len))
				snprintf(bad_key, sizeof(bad_key), "%.*s",
					 KEY_SHOWN, key);
			continue;
		}
		a[n].host = slots[n].host;
		a[n].port = slots[n].port;
		n++;
	}
	e->rev = rev;
	if (!n && cnt) {
		snprintf(what, sizeof(what),
			 "no value under %.40s/ is HOST:PORT (key %s)",
			 e->t.prefix, bad_key[0] ? bad_key : "?");
		res_fail(e, what);
	} else if (zcrpc_resolver_set(e->r, a, n, ZCRPC_OK, NULL) !=
		   ZCRPC_OK) {
		res_fail(e, "out of memory");
	}
	free(a);
	free(slots);
	return 0;
}

static void on_watch_line(struct zcrpc__etcd_req *q, const char *line,
			  size_t len, void *arg)
{
	struct etcd_res *e = arg;
	struct zcrpc__json doc, res, ev, x;
	char msg[120];
	size_t pos = 0;
	int64_t compact = 0;

	if (!len)
		return;
	if (zcrpc__json_parse(line, len, &doc) ||
	    zcrpc__json_type(&doc) != '{') {
		snprintf(e->watch_why, sizeof(e->watch_why),
			 "the watch sent a line that is not JSON");
		q->too_big = 1; /* ends the transfer */
		return;
	}
	if (zcrpc__json_get(&doc, "result", &res)) {
		/* {"error": {"message": ...}} (or a string) */
		if (zcrpc__json_get(&doc, "error", &x) ||
		    (zcrpc__json_type(&x) == '{' &&
		     zcrpc__json_get(&x, "message", &x)) ||
		    zcrpc__json_str(&x, msg, sizeof(msg), NULL))
			snprintf(msg, sizeof(msg), "no result");
		snprintf(e->watch_why, sizeof(e->watch_why),
			 "the watch failed: %s", msg);
		q->too_big = 1;
		return;
	}
	if (!zcrpc__json_get(&res, "compact_revision", &x))
		zcrpc__json_int(&x, &compact);
	if (zcrpc__json_true(&res, "canceled") || compact) {
		if (zcrpc__json_get(&res, "cancel_reason", &x) ||
		    zcrpc__json_str(&x, msg, sizeof(msg), NULL))
			snprintf(msg, sizeof(msg), "compacted at %lld",
				 (long long)compact);
		snprintf(e->watch_why, sizeof(e->watch_why),
			 "the watch was cancelled: %s", msg);
		q->too_big = 1;
		return;
	}
	if (!zcrpc__json_get(&res, "events", &x) &&
	    !zcrpc__json_next(&x, &pos, &ev))
		e->events = 1;
}

static void start_range(struct etcd_res *e)
{
	char body[2 * sizeof(e->key) + 64];

	snprintf(body, sizeof(body), "{\"key\":\"%s\",\"range_end\":\"%s\"}",
		 e->key, e->range_end);
	e->need_range = 0;
	if (zcrpc__etcd_req_init(&e->range, e->t.base, "/v3/kv/range", body,
				 RANGE_TIMEOUT_MS, NULL, NULL) != ZCRPC_OK ||
	    curl_multi_add_handle(e->m, e->range.h) != CURLM_OK) {
		zcrpc__etcd_req_fini(&e->range);
		res_fail(e, "out of memory");
		e->need_range = 1;
		backoff(e);
		return;
	}
	e->range_on = 1;
}

static void start_watch(struct etcd_res *e)
{
	char body[2 * sizeof(e->key) + 128];

	snprintf(body, sizeof(body),
		 "{\"create_request\":{\"key\":\"%s\",\"range_end\":\"%s\","
		 "\"start_revision\":\"%lld\"}}",
		 e->key, e->range_end, (long long)e->rev + 1);
	e->watch_why[0] = 0;
	if (zcrpc__etcd_req_init(&e->watch, e->t.base, "/v3/watch", body, 0,
				 on_watch_line, e) != ZCRPC_OK ||
	    curl_multi_add_handle(e->m, e->watch.h) != CURLM_OK) {
		zcrpc__etcd_req_fini(&e->watch);
		e->need_range = 1; /* and the watch after it */
		backoff(e);
		return;
	}
	e->watch_on = 1;
	e->watch_since_ms = now_ms();
}

static void range_done(struct etcd_res *e, CURLcode rc)
{
	struct zcrpc__json doc;
	char why[160];

	curl_multi_remove_handle(e->m, e->range.h);
	e->range_on = 0;
	if (zcrpc__etcd_req_result(&e->range, rc, &doc, why, sizeof(why)))
		;
	else if (report_range(e, &doc))
		snprintf(why, sizeof(why), "the range's answer is not etcd's");
	else
		why[0] = 0;
	zcrpc__etcd_req_fini(&e->range);
	if (why[0]) {
		res_fail(e, why);
		e->need_range = 1;
		backoff(e);
	} else if (!e->watch_on) {
		start_watch(e);
	}
}

static void watch_done(struct etcd_res *e, CURLcode rc)
{
	char why[160];

	curl_multi_remove_handle(e->m, e->watch.h);
	e->watch_on = 0;
	if (now_ms() - e->watch_since_ms >= WATCH_SETTLED_MS)
		e->backoff_ms = BACKOFF_FIRST_MS;
	if (e->watch_why[0])
		snprintf(why, sizeof(why), "%s", e->watch_why);
	else if (zcrpc__etcd_req_result(&e->watch, rc, NULL, why, sizeof(why)))
		; /* curl's or etcd's reason */
	else
		snprintf(why, sizeof(why), "the watch ended");
	zcrpc__log(ZCRPC_LOG_DEBUG, "etcd: %s: %s; reading %s/ again",
		   e->t.base, why, e->t.prefix);
	/* The range that follows tells whether etcd is there (and reports
	 * its failure if not): a failure reported now could replace a set
	 * reported a moment ago and not yet applied. */
	zcrpc__etcd_req_fini(&e->watch);
	e->need_range = 1;
	backoff(e);
}

static void *res_main(void *arg)
{
	struct etcd_res *e = arg;
	CURLMsg *msg;
	int running, left;

	while (!atomic_load(&e->stop)) {
		int64_t now = now_ms(), wait = 1000;

		if (atomic_exchange(&e->refresh, 0) || e->events)
			e->need_range = 1;
		e->events = 0;
		if (e->need_range && !e->range_on && now >= e->retry_at_ms)
			start_range(e);
		curl_multi_perform(e->m, &running);
		while ((msg = curl_multi_info_read(e->m, &left))) {
			if (msg->msg != CURLMSG_DONE)
				continue;
			if (e->range_on && msg->easy_handle == e->range.h)
				range_done(e, msg->data.result);
			else if (e->watch_on && msg->easy_handle == e->watch.h)
				watch_done(e, msg->data.result);
		}
		if (e->events || atomic_load(&e->refresh))
			wait = 0;
		else if (e->need_range && !e->range_on)
			wait = e->retry_at_ms - now_ms();
		if (wait > 1000)
			wait = 1000;
		if (wait > 0)
			curl_multi_poll(e->m, NULL, 0, (int)wait, NULL);
	}
	if (e->range_on)
		curl_multi_remove_handle(e->m, e->range.h);
	if (e->watch_on)
		curl_multi_remove_handle(e->m, e->watch.h);
	zcrpc__etcd_req_fini(&e->range);
	zcrpc__etcd_req_fini(&e->watch);
	return NULL;
}

static void res_free(struct etcd_res *e)
{
	if (e->m)
		curl_multi_cleanup(e->m);
	free(e);
}

static zcrpc_status etcd_start(zcrpc_resolver *r, const char *name,
			       void **state, void *arg)
{
	struct etcd_res *e;
	char k[ZCRPC__ETCD_PREFIX_MAX + 2];
	size_t n;

	(void)arg;
	e = calloc(1, sizeof(*e));
	if (!e)
		return ZCRPC_RESOURCE_EXHAUSTED;
	if (zcrpc__etcd_parse_target(name, &e->t) != ZCRPC_OK) {
		free(e);
		return ZCRPC_INVALID_ARGUMENT;
	}
	n = strlen(e->t.prefix);
	memcpy(k, e->t.prefix, n);
	k[n] = '/';
	zcrpc__b64_encode(k, n + 1, e->key);
	k[n] = '/' + 1; /* every key that starts with PREFIX/ */
	zcrpc__b64_encode(k, n + 1, e->range_end);
	e->r = r;
	e->need_range = 1;
	e->backoff_ms = BACKOFF_FIRST_MS;
	atomic_init(&e->stop, 0);
	atomic_init(&e->refresh, 0);
	if (zcrpc__etcd_curl_init() || !(e->m = curl_multi_init())) {
		res_free(e);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	if (pthread_create(&e->thread, NULL, res_main, e)) {
		res_free(e);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	*state = e;
	return ZCRPC_OK;
}

static void etcd_refresh(void *state, void *arg)
{
	struct etcd_res *e = state;

	(void)arg;
	atomic_store(&e->refresh, 1);
	curl_multi_wakeup(e->m);
}

static void etcd_stop(void *state, void *arg)
{
	struct etcd_res *e = state;

	(void)arg;
	atomic_store(&e->stop, 1);
	curl_multi_wakeup(e->m);
	pthread_join(e->thread, NULL);
	res_free(e);
}

/* The watch says every change; the range every 30 s besides is for a
 * watch whose connection died without a word (TCP keepalive finds it
 * later). */
const zcrpc_resolver_ops zcrpc__resolve_etcd = {
	sizeof(zcrpc_resolver_ops), "etcd", etcd_start, etcd_refresh,
	etcd_stop, NULL, 30000};
