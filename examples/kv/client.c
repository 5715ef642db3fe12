/* zcrpc key-value client: the Kv service of idl/kv.proto through the
 * typed stubs zcrpc-gen writes (examples/kv/server.c is the server).
 *
 *   zcrpc_kv_client (-a ADDR [-p PORT] | -T TARGET) [-t TIMEOUT_MS] COMMAND
 *     put KEY VALUE              store VALUE (a string)
 *     put-file KEY FILE          store FILE's bytes
 *     get KEY                    write the value to stdout (exit 1: no such key)
 *     delete KEY                 (exit 1: no such key)
 *     scan START END [LIMIT]     keys START <= k < END in order (END "" = no
 *                                bound): "KEY LEN [VALUE]" per line, the value
 *                                when it is small and printable
 *     load [-n CALLS] [-c CONCURRENCY] [-s VALUE_SIZE] [-k]
 *                                CONCURRENCY slots, each alternating Put and
 *                                Get of its own key with typed async calls,
 *                                every Get checked; prints calls/s, MiB/s of
 *                                values and latency percentiles; -k keeps
 *                                going when calls fail (a shard killed) and
 *                                counts what failed and what was lost
 *
 * A sharded service: -T TARGET (zcrpc/balance.h: "ipv4:A:P,A:P,...",
 * "file:PATH", "dns:...", "etcd:...") makes a channel over all the shards
 * with consistent hashing (ring_hash) on the key: each key lives on one
 * shard, and a shard's leaving moves only its keys. Put, Get and Delete
 * go to the key's shard; Scan goes to every shard and merges their
 * answers in key order. The example keeps one copy of each key: the keys
 * of a shard that dies are gone with it (their Gets find nothing on the
 * shard that takes them over), which `load -k` counts as lost.
 *
 * Values above KV_INLINE_MAX bytes go as the call's attachment, straight
 * from registered memory; Get's large values come back as the reply
 * attachment: into the caller's registered memory (reply_into) in `load`,
 * into the library's registered memory in `get`, read where they landed.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <zcrpc/zcrpc.h>

#include "kv.zcrpc.h"

#define KV_INLINE_MAX 2048

static zcrpc_worker *w;
static zcrpc_channel *ch;

/* The call's key for the channel's hash (a sharded target). */
static void key_opts(zcrpc_call_opts *o, const char *key)
{
	o->hash_key = key;
	o->hash_key_len = strlen(key);
}
static int64_t timeout_us = 30 * 1000000LL;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static ProtobufCBinaryData bin(const char *s)
{
	ProtobufCBinaryData b = {strlen(s), (uint8_t *)s};

	return b;
}

static int report(const char *what, zcrpc_status st, char *msg)
{
	fprintf(stderr, "kv: %s: %s%s%s\n", what, zcrpc_status_str(st),
		msg && *msg ? ": " : "", msg ? msg : "");
	free(msg);
	return 2;
}

/* Memory registered with the worker's context. */
struct regbuf {
	uint8_t *p;
	size_t len;
	zcrpc_mr *mr;
};

static zcrpc_status regbuf_alloc(struct regbuf *b, size_t len, unsigned flags)
{
	zcrpc_status st;

	b->len = len;
	b->mr = NULL;
	b->p = malloc(len ? len : 1);
	if (!b->p)
		return ZCRPC_RESOURCE_EXHAUSTED;
	st = zcrpc_mr_register(zcrpc_worker_get_context(w), b->p, len ? len : 1, flags, &b->mr);
	if (st != ZCRPC_OK) {
		free(b->p);
		b->p = NULL;
	}
	return st;
}

static void regbuf_free(struct regbuf *b)
{
	zcrpc_mr_deregister(b->mr);
	free(b->p);
	b->p = NULL;
	b->mr = NULL;
}

/* ---- put ------------------------------------------------------------------ */

/* Put @len bytes at @val; @rb is @val's registration when it is large. */
static int do_put(const char *key, const uint8_t *val, size_t len,
		  const struct regbuf *rb)
{
	Zcrpc__Kv__PutRequest req = ZCRPC__KV__PUT_REQUEST__INIT;
	Zcrpc__Kv__PutReply *rep = NULL;
	zcrpc_call_opts o;
	zcrpc_bulk att;
	char *msg = NULL;
	zcrpc_status st;

	zcrpc_call_opts_init(&o);
	o.timeout_us = timeout_us;
	key_opts(&o, key);
	req.key = bin(key);
	req.value_len = len;
	if (len > KV_INLINE_MAX) {
		att.mr = rb->mr;
		att.offset = (size_t)(val - rb->p);
		att.len = len;
		o.attachment = &att; /* sent in place by RDMA WRITE */
		req.value_in_attachment = 1;
	} else {
		req.value.data = (uint8_t *)val;
		req.value.len = len;
	}
	st = zcrpc__kv__kv__put__call(ch, &req, &o, &rep, &msg);
	if (st != ZCRPC_OK)
		return report("put", st, msg);
	printf("put %s: %zu bytes%s%s\n", key, len,
	       len > KV_INLINE_MAX ? " (attachment)" : " (inline)",
	       rep->replaced ? ", replaced" : "");
	zcrpc__kv__put_reply__free_unpacked(rep, NULL);
	return 0;
}

static int cmd_put(const char *key, const char *value)
{
	struct regbuf rb = {0};
	size_t len = strlen(value);
	zcrpc_status st;
	int rc;

	if (len <= KV_INLINE_MAX)
		return do_put(key, (const uint8_t *)value, len, NULL);
	if ((st = regbuf_alloc(&rb, len, 0)) != ZCRPC_OK)
		return report("registering the value", st, NULL);
	memcpy(rb.p, value, len);
	rc = do_put(key, rb.p, len, &rb);
	regbuf_free(&rb);
	return rc;
}

static int cmd_put_file(const char *key, const char *path)
{
	struct regbuf rb = {0};
	struct stat sb;
	size_t off = 0;
	ssize_t r;
	zcrpc_status st;
	int fd, rc;

	if ((fd = open(path, O_RDONLY)) < 0 || fstat(fd, &sb) < 0) {
		fprintf(stderr, "kv: %s: %s\n", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return 2;
	}
	if ((st = regbuf_alloc(&rb, (size_t)sb.st_size, 0)) != ZCRPC_OK) {
		close(fd);
		return report("registering the value", st, NULL);
	}
	while (off < rb.len && (r = read(fd, rb.p + off, rb.len - off)) > 0)
		off += (size_t)r;
	close(fd);
	if (off != rb.len) {
		fprintf(stderr, "kv: %s: short read\n", path);
		regbuf_free(&rb);
		return 2;
	}
	rc = do_put(key, rb.p, rb.len, &rb);
	regbuf_free(&rb);
	return rc;
}

/* ---- get: the reply attachment read where the library received it -------- */

struct get_ctx {
	int done, rc;
	const Zcrpc__Kv__GetRequest *req;
};

static void pack_get(void *dst, size_t len, void *arg)
{
	const struct get_ctx *g = arg;

	(void)len;
	zcrpc__kv__get_request__pack(g->req, dst); /* straight into registered memory */
}

static int write_all(const void *p, size_t len)
{
	const uint8_t *b = p;
	ssize_t r;

	while (len) {
		if ((r = write(STDOUT_FILENO, b, len)) <= 0) {
			if (r < 0 && errno == EINTR)
				continue;
			return -1;
		}
		b += r;
		len -= (size_t)r;
	}
	return 0;
}

static void got(zcrpc_channel *c, const zcrpc_reply *r, void *arg)
{
	struct get_ctx *g = arg;
	Zcrpc__Kv__GetReply *rep;

	(void)c;
	g->done = 1;
	if (r->status != ZCRPC_OK) {
		g->rc = report("get", r->status, strdup(r->message));
		return;
	}
	rep = zcrpc__kv__get_reply__unpack(NULL, r->len, r->data);
	if (!rep) {
		g->rc = report("get", ZCRPC_INTERNAL, strdup("reply does not unpack"));
		return;
	}
	if (!rep->found) {
		fprintf(stderr, "kv: get %s: no such key\n", (const char *)g->req->key.data);
		g->rc = 1;
	} else if (rep->value_in_attachment ? r->attachment_len != rep->value_len
					    : rep->value.len != rep->value_len) {
		g->rc = report("get", ZCRPC_INTERNAL, strdup("value length mismatch"));
	} else {
		/* a large value is read in the library's registered memory */
		g->rc = write_all(rep->value_in_attachment ? r->attachment : rep->value.data,
				  rep->value_len) ? 2 : 0;
	}
	zcrpc__kv__get_reply__free_unpacked(rep, NULL);
}

static int cmd_get(const char *key)
{
	Zcrpc__Kv__GetRequest req = ZCRPC__KV__GET_REQUEST__INIT;
	struct get_ctx g = {0, 0, &req};
	zcrpc_call_opts o;
	zcrpc_status st;

	req.key = bin(key);
	zcrpc_call_opts_init(&o);
	o.timeout_us = timeout_us;
	key_opts(&o, key);
	/* The typed stubs hand a reply attachment over only in reply_into
	 * memory, whose size must be known beforehand; a value of unknown
	 * size is read in the library's memory through the plain call API. */
	st = zcrpc_call_start(ch, ZCRPC__KV__KV__GET__ZCRPC_ID,
			      zcrpc__kv__get_request__get_packed_size(&req), pack_get, &g,
			      &o, got, &g, NULL);
	if (st != ZCRPC_OK)
		return report("get", st, NULL);
	while (!g.done)
		zcrpc_worker_progress(w, -1);
	return g.rc;
}

/* ---- delete, scan --------------------------------------------------------- */

static int cmd_delete(const char *key)
{
	Zcrpc__Kv__DeleteRequest req = ZCRPC__KV__DELETE_REQUEST__INIT;
	Zcrpc__Kv__DeleteReply *rep = NULL;
	zcrpc_call_opts o;
	char *msg = NULL;
	zcrpc_status st;
	int rc;

	zcrpc_call_opts_init(&o);
	o.timeout_us = timeout_us;
	key_opts(&o, key);
	req.key = bin(key);
	st = zcrpc__kv__kv__delete__call(ch, &req, &o, &rep, &msg);
	if (st != ZCRPC_OK)
		return report("delete", st, msg);
	printf("delete %s: %s\n", key, rep->found ? "deleted" : "no such key");
	rc = rep->found ? 0 : 1;
	zcrpc__kv__delete_reply__free_unpacked(rep, NULL);
	return rc;
}

static int printable(const ProtobufCBinaryData *b)
{
	size_t i;

	for (i = 0; i < b->len; i++)
		if (b->data[i] < 0x21 || b->data[i] > 0x7e)
			return 0;
	return 1;
}

static int entry_cmp(const void *a, const void *b)
{
	const Zcrpc__Kv__ScanEntry *x = *(Zcrpc__Kv__ScanEntry *const *)a;
	const Zcrpc__Kv__ScanEntry *y = *(Zcrpc__Kv__ScanEntry *const *)b;
	size_t n = x->key.len < y->key.len ? x->key.len : y->key.len;
	int c = memcmp(x->key.data, y->key.data, n);

	return c ? c : (x->key.len > y->key.len) - (x->key.len < y->key.len);
}

/* Scan: every shard (each backend of the channel, through a channel of
 * its own) answers for its keys; the answers are merged in key order and
 * cut at @limit. */
static int cmd_scan(const char *start, const char *end, unsigned limit)
{
	Zcrpc__Kv__ScanRequest req = ZCRPC__KV__SCAN_REQUEST__INIT;
	Zcrpc__Kv__ScanReply **reps = NULL;
	Zcrpc__Kv__ScanEntry **all = NULL;
	zcrpc_backend_info *b = NULL;
	size_t nb, i, j, n = 0, cap;
	zcrpc_call_opts o;
	int more = 0, rc = 2;

	nb = zcrpc_channel_get_backends(ch, NULL, 0, 0);
	b = calloc(nb ? nb : 1, sizeof(*b));
	reps = calloc(nb ? nb : 1, sizeof(*reps));
	if (!b || !reps) {
		fprintf(stderr, "kv: scan: out of memory\n");
		goto out;
	}
	nb = zcrpc_channel_get_backends(ch, b, nb, sizeof(*b));
	zcrpc_call_opts_init(&o);
	o.timeout_us = timeout_us;
	req.start_key = bin(start);
	req.end_key = bin(end);
	req.limit = limit;
	for (i = 0; i < nb; i++) { /* the shards one by one (a demo) */
		zcrpc_channel *shard = NULL;
		char *msg = NULL;
		zcrpc_status st;

		st = zcrpc_channel_create(w, b[i].host, b[i].port, NULL, &shard);
		if (st == ZCRPC_OK)
			st = zcrpc__kv__kv__scan__call(shard, &req, &o, &reps[i], &msg);
		zcrpc_channel_destroy(shard);
		if (st != ZCRPC_OK) {
			char what[300];

			snprintf(what, sizeof(what), "scan of shard %s:%s", b[i].host,
				 b[i].port);
			report(what, st, msg);
			goto out;
		}
		n += reps[i]->n_entries;
		more |= reps[i]->more;
	}
	cap = n;
	all = calloc(cap ? cap : 1, sizeof(*all));
	if (!all)
		goto out;
	for (i = 0, n = 0; i < nb; i++)
		for (j = 0; j < reps[i]->n_entries; j++)
			all[n++] = reps[i]->entries[j];
	qsort(all, n, sizeof(*all), entry_cmp);
	if (limit && n > limit) {
		n = limit;
		more = 1;
	}
	for (i = 0; i < n; i++) {
		const Zcrpc__Kv__ScanEntry *e = all[i];

		fwrite(e->key.data, 1, e->key.len, stdout);
		printf(" %llu", (unsigned long long)e->value_len);
		if (e->value_included && e->value.len && printable(&e->value)) {
			putchar(' ');
			fwrite(e->value.data, 1, e->value.len, stdout);
		}
		putchar('\n');
	}
	if (more)
		printf("(more)\n");
	if (nb > 1)
		printf("(merged from %zu shards)\n", nb);
	rc = 0;
out:
	for (i = 0; reps && i < nb; i++)
		if (reps[i])
			zcrpc__kv__scan_reply__free_unpacked(reps[i], NULL);
	free(all);
	free(reps);
	free(b);
	return rc;
}

/* ---- load ----------------------------------------------------------------- */

struct load;

struct slot {
	struct load *l;
	unsigned idx;
	char key[32];
	uint64_t version;
	int is_get;
	uint64_t t0;
	struct regbuf val;  /* what the last Put sent */
	struct regbuf into; /* where Get's reply attachment lands */
	zcrpc_bulk att, into_bulk;
};

struct load {
	size_t calls, size;
	size_t started, completed, failed, mismatched, puts, gets, lost;
	int keep_going; /* -k: count failures and go on */
	uint64_t *lat_ns;
	int stop;
	zcrpc_status first_err;
	char first_msg[128];
};

static void start_next(struct slot *s);

static void load_fail(struct load *l, zcrpc_status st, const char *msg)
{
	if (!l->failed++) {
		l->first_err = st;
		snprintf(l->first_msg, sizeof(l->first_msg), "%s", msg ? msg : "");
	}
	if (!l->keep_going)
		l->stop = 1;
}

static void finish(struct slot *s)
{
	struct load *l = s->l;

	l->lat_ns[l->completed++] = now_ns() - s->t0;
	if (!l->stop)
		start_next(s);
}

static void put_done(zcrpc_status st, const char *msg,
		     const Zcrpc__Kv__PutReply *rep, void *arg)
{
	struct slot *s = arg;

	(void)rep;
	s->l->puts++;
	if (st != ZCRPC_OK) {
		load_fail(s->l, st, msg);
		s->is_get = 0; /* put it again */
	}
	finish(s);
}

static void get_done(zcrpc_status st, const char *msg,
		     const Zcrpc__Kv__GetReply *rep, void *arg)
{
	struct slot *s = arg;
	const void *v;

	s->l->gets++;
	if (st != ZCRPC_OK) {
		load_fail(s->l, st, msg);
	} else if (!rep->found && s->l->keep_going) {
		/* its shard went (one copy of each key): put it again */
		s->l->lost++;
		s->is_get = 0;
	} else {
		/* the value is the one this slot put last */
		v = rep->value_in_attachment ? (const void *)s->into.p : rep->value.data;
		if (!rep->found || rep->value_len != s->l->size ||
		    (!rep->value_in_attachment && rep->value.len != s->l->size) ||
		    (s->l->size && memcmp(v, s->val.p, s->l->size))) {
			s->l->mismatched++;
			load_fail(s->l, ZCRPC_DATA_LOSS, "a Get returned another value than the Put");
		}
	}
	finish(s);
}

static void start_next(struct slot *s)
{
	struct load *l = s->l;
	zcrpc_call_opts o;
	zcrpc_status st;

	if (l->started >= l->calls)
		return;
	l->started++;
	zcrpc_call_opts_init(&o);
	o.timeout_us = timeout_us;
	s->t0 = now_ns();
	if (!s->is_get || !s->version) { /* a Put first */
		Zcrpc__Kv__PutRequest req = ZCRPC__KV__PUT_REQUEST__INIT;

		s->version++;
		if (l->size >= 8)
			memcpy(s->val.p, &s->version, 8); /* each Put sends a new value */
		else if (l->size)
			s->val.p[0] = (uint8_t)s->version;
		key_opts(&o, s->key);
		req.key = bin(s->key);
		req.value_len = l->size;
		if (l->size > KV_INLINE_MAX) {
			o.attachment = &s->att;
			req.value_in_attachment = 1;
		} else {
			req.value.data = s->val.p;
			req.value.len = l->size;
		}
		s->is_get = 1;
		st = zcrpc__kv__kv__put__async(ch, &req, &o, put_done, s, NULL);
	} else {
		Zcrpc__Kv__GetRequest req = ZCRPC__KV__GET_REQUEST__INIT;

		key_opts(&o, s->key);
		req.key = bin(s->key);
		o.reply_into = &s->into_bulk; /* the value lands in our memory */
		s->is_get = 0;
		st = zcrpc__kv__kv__get__async(ch, &req, &o, get_done, s, NULL);
	}
	if (st != ZCRPC_OK) {
		l->started--;
		load_fail(l, st, "the call did not start");
	}
}

/* How the calls spread over the shards (the channel's backends). */
static void print_shards(void)
{
	zcrpc_backend_info b[64];
	zcrpc_channel_stats st;
	size_t n, i;

	n = zcrpc_channel_get_backends(ch, b, 64, sizeof(b[0]));
	if (n < 2)
		return;
	for (i = 0; i < n && i < 64; i++)
		printf("load: shard %s:%s: %llu calls (%llu ok, %llu failed), %s\n",
		       b[i].host, b[i].port, (unsigned long long)b[i].picks,
		       (unsigned long long)b[i].calls_ok,
		       (unsigned long long)b[i].calls_failed,
		       b[i].state == ZCRPC_BACKEND_READY  ? "ready"
		       : b[i].state == ZCRPC_BACKEND_DOWN ? "down"
							  : "not connected");
	zcrpc_channel_get_stats(ch, &st, sizeof(st));
	printf("load: %llu calls attempted again on another shard (never reached "
	       "their own)\n", (unsigned long long)st.retries_transparent);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double pct_us(const struct load *l, double p)
{
	size_t i;

	if (!l->completed)
		return 0;
	i = (size_t)(p / 100.0 * (double)(l->completed - 1) + 0.5);
	return (double)l->lat_ns[i] / 1000.0;
}

static int cmd_load(size_t calls, unsigned conc, size_t size, int keep_going)
{
	struct load l;
	struct slot *slots;
	zcrpc_status st;
	uint64_t t0, t1;
	double secs;
	unsigned i;
	int rc = 0;

	memset(&l, 0, sizeof(l));
	l.calls = calls;
	l.size = size;
	l.keep_going = keep_going;
	if (!conc || conc > 1024 || !calls) {
		fprintf(stderr, "kv: load: need 1..1024 slots and some calls\n");
		return 2;
	}
	slots = calloc(conc, sizeof(*slots));
	l.lat_ns = calloc(calls, sizeof(*l.lat_ns));
	if (!slots || !l.lat_ns) {
		fprintf(stderr, "kv: load: out of memory\n");
		return 2;
	}
	for (i = 0; i < conc; i++) {
		struct slot *s = &slots[i];

		s->l = &l;
		s->idx = i;
		snprintf(s->key, sizeof(s->key), "load-%04u", i);
		if ((st = regbuf_alloc(&s->val, size, 0)) != ZCRPC_OK ||
		    (st = regbuf_alloc(&s->into, size, ZCRPC_MR_REMOTE_WRITE)) != ZCRPC_OK) {
			report("load: registering buffers", st, NULL);
			return 2;
		}
		memset(s->val.p, 'a' + (int)(i % 26), size);
		s->att = (zcrpc_bulk){s->val.mr, 0, size};
		s->into_bulk = (zcrpc_bulk){s->into.mr, 0, size ? size : 1};
	}
	printf("load: %zu calls (Put and Get alternating per key), %u in flight, "
	       "%zu-byte values (%s)\n", calls, conc, size,
	       size > KV_INLINE_MAX ? "attachments, zero-copy" : "inline");
	fflush(stdout);
	t0 = now_ns();
	for (i = 0; i < conc && !l.stop; i++)
		start_next(&slots[i]);
	while (l.completed < l.started)
		zcrpc_worker_progress(w, 100);
	t1 = now_ns();
	secs = (double)(t1 - t0) / 1e9;
	qsort(l.lat_ns, l.completed, sizeof(*l.lat_ns), cmp_u64);
	printf("load: %zu calls (%zu puts, %zu gets verified) in %.3f s: %.0f calls/s, "
	       "%.1f MiB/s of values\n",
	       l.completed, l.puts, l.gets - l.mismatched, secs, (double)l.completed / secs,
	       (double)l.completed * (double)size / secs / (1024.0 * 1024.0));
	printf("load: latency p50 %.1f us, p99 %.1f us, p99.9 %.1f us, max %.1f us\n",
	       pct_us(&l, 50), pct_us(&l, 99), pct_us(&l, 99.9),
	       l.completed ? (double)l.lat_ns[l.completed - 1] / 1000.0 : 0.0);
	print_shards();
	if (l.failed && keep_going) {
		printf("load: %zu calls failed (the first %s: %s), %zu Gets found their "
		       "key gone with its shard\n", l.failed, zcrpc_status_str(l.first_err),
		       l.first_msg, l.lost);
	} else if (l.failed) {
		fprintf(stderr, "kv: load: %zu calls failed, the first %s: %s\n", l.failed,
			zcrpc_status_str(l.first_err), l.first_msg);
		rc = 2;
	}
	for (i = 0; i < conc; i++) {
		regbuf_free(&slots[i].val);
		regbuf_free(&slots[i].into);
	}
	free(slots);
	free(l.lat_ns);
	return rc;
}

/* ---- main ----------------------------------------------------------------- */

static void usage(const char *argv0)
{
	fprintf(stderr,
		"usage: %s (-a ADDR [-p PORT] | -T TARGET) [-t TIMEOUT_MS] COMMAND\n"
		"  put KEY VALUE | put-file KEY FILE | get KEY | delete KEY |\n"
		"  scan START END [LIMIT] |\n"
		"  load [-n CALLS] [-c CONCURRENCY] [-s VALUE_SIZE] [-k]\n"
		"TARGET: the shards, e.g. ipv4:10.0.0.1:7473,10.0.0.2:7473 or file:PATH\n",
		argv0);
}

int main(int argc, char **argv)
{
	const char *addr = NULL, *port = "7473", *target = NULL, *cmd;
	zcrpc_channel_opts co;
	zcrpc_status st;
	int opt, rc = 2;

	while ((opt = getopt(argc, argv, "+a:p:T:t:h")) != -1) {
		switch (opt) {
		case 'a': addr = optarg; break;
		case 'T': target = optarg; break;
		case 'p': port = optarg; break;
		case 't': timeout_us = strtoll(optarg, NULL, 10) * 1000; break;
		default:
			usage(argv[0]);
			return opt == 'h' ? 0 : 2;
		}
	}
	if (!addr == !target || optind >= argc) {
		usage(argv[0]);
		return 2;
	}
	cmd = argv[optind];
	argc -= optind;
	argv += optind;
	zcrpc_channel_opts_init(&co);
	co.lb_policy = "ring_hash"; /* a key's calls go to its shard */
	co.backoff_max_ms = 1000;
	if ((st = zcrpc_worker_create(NULL, &w)) != ZCRPC_OK ||
	    (st = target ? zcrpc_channel_create_target(w, target, &co, &ch)
			 : zcrpc_channel_create(w, addr, port, NULL, &ch)) != ZCRPC_OK) {
		fprintf(stderr, "kv: %s%s%s\n", zcrpc_status_str(st),
			w ? "" : ": ", w ? "" : zcrpc_last_error());
		goto out;
	}
	if (!strcmp(cmd, "put") && argc == 3) {
		rc = cmd_put(argv[1], argv[2]);
	} else if (!strcmp(cmd, "put-file") && argc == 3) {
		rc = cmd_put_file(argv[1], argv[2]);
	} else if (!strcmp(cmd, "get") && argc == 2) {
		rc = cmd_get(argv[1]);
	} else if (!strcmp(cmd, "delete") && argc == 2) {
		rc = cmd_delete(argv[1]);
	} else if (!strcmp(cmd, "scan") && (argc == 3 || argc == 4)) {
		rc = cmd_scan(argv[1], argv[2], argc == 4 ? (unsigned)strtoul(argv[3], NULL, 10) : 0);
	} else if (!strcmp(cmd, "load")) {
		size_t n = 10000, size = 4096;
		unsigned c = 16;
		int k = 0;

		optind = 1;
		while ((opt = getopt(argc, argv, "n:c:s:k")) != -1) {
			switch (opt) {
			case 'k': k = 1; break;
			case 'n': n = strtoull(optarg, NULL, 10); break;
			case 'c': c = (unsigned)strtoul(optarg, NULL, 10); break;
			case 's': size = strtoull(optarg, NULL, 10); break;
			default: usage("zcrpc_kv_client"); goto out;
			}
		}
		rc = cmd_load(n, c, size, k);
	} else {
		usage("zcrpc_kv_client");
	}
out:
	zcrpc_channel_destroy(ch);
	zcrpc_worker_destroy(w);
	return rc;
}
