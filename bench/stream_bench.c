/* zcrpc streaming benchmark: server-streaming message rate on one and on
 * many streams of one connection (also beside a stream its reader keeps
 * paused), and client-streaming bandwidth of the largest message a stream
 * takes; one JSON object per result line on stdout, as rpc_bench.c.
 *
 *   zcrpc_bench_stream [-r both|server|client] [-a ADDR] [-p PORT]
 *                      [-m all|sstream|cstream|STEPS] [-S STREAMS] [-P PAUSED]
 *                      [-s SIZE] [-T SECONDS]
 *
 * -r both (default) runs the server (one worker, busy-polling) on a thread
 *    of this process, as zcrpc_bench_rpc does; "server" serves until
 *    SIGTERM/SIGINT; "client" needs -a/-p of a running server.
 * -m sstream: server-streaming. The client opens -S streams (default 1)
 *    on one channel (= one connection), each with one request message
 *    (the message size, -s, default 16) and a half-close; the server
 *    writes messages of that size (an 8-byte sequence number first) on
 *    every stream as fast as its window allows (zcrpc_stream_write until
 *    RESOURCE_EXHAUSTED, again from on_writable). The first -P streams
 *    (default 0) are paused by the client (zcrpc_stream_pause) as soon as
 *    they start and stay paused: their writers get one window through and
 *    no more. The client counts the messages of the unpaused streams for
 *    -T seconds (default 5) after 0.5 s of warm-up and checks each
 *    stream's sequence; then it cancels every stream. msgs/s, with the
 *    fewest and most messages one unpaused stream got in the interval,
 *    the longest gap between two messages of a stream, and the client
 *    worker's messages sent (WINDOW frames) and received.
 * -m cstream: client-streaming. One stream; the client writes messages of
 *    zcrpc_stream_max_message() bytes, at most what one frame carries
 *    (8,128 B at max_msg 8192; a pattern), as its window allows,
 *    for 0.5 s of warm-up on a first stream, then for -T seconds on a
 *    second one, half-closes, and the server answers with the count and
 *    bytes it consumed (checked against what was written) and finishes
 *    OK. The clock runs from the first write to that answer. MiB/s.
 * -m all (default): sstream with 1 stream, with 16, with 16 of which 1 is
 *    paused, then cstream, then cstream of 1 MiB messages (by RDMA WRITE
 *    into memory the server grants, written in place from the client's
 *    registered buffer with zcrpc_stream_write_bulk: no copy; messages
 *    above 16 KiB always go so), in that order on one channel
 *    (= -m s1,s16,s16p1,c,c1m). -m takes such a comma list: sN = N
 *    streams, sNpK = N of which K are paused, c = cstream, cN / cNk / cNm
 *    = cstream of N (KiB, MiB) byte messages (at most 4 MiB); the steps
 *    run in order on one channel.
 * Both sides use max_msg 8192, as zcrpc_bench_rpc, so the figures compare
 * with its call rate; the largest one-frame stream message is then 8192
 * minus the frame header.
 */
#include "bench_common.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <zcrpc/stream.h>
#include <zcrpc/zcrpc.h>

#define MAX_MSG 8192
#define MAX_STREAMS 64
/* What one frame of max_msg carries: the RPC frame header is 64 bytes
 * (docs/protocol.md §7). */
#define ONE_FRAME (MAX_MSG - 64)
#define SSTREAM "/zcrpc.bench.Bench/ServerStream"
#define CSTREAM "/zcrpc.bench.Bench/ClientStream"
#define ECHO "/zcrpc.bench.Bench/Echo"

static volatile sig_atomic_t g_stop;
static const char *g_addr = "192.0.2.1", *g_port = "18710";

static void on_signal(int sig)
{
	(void)sig;
	g_stop = 1;
}

static void worker_opts(zcrpc_worker_opts *o)
{
	zcrpc_worker_opts_init(o);
	o->max_msg = MAX_MSG;
}

/* A write the pool refused (no slot; the window was open): the writer
 * tries again from its loop, since no on_writable follows. */
static int pool_refused(zcrpc_stream *s, zcrpc_status st)
{
	return st == ZCRPC_RESOURCE_EXHAUSTED && zcrpc_stream_can_write(s);
}

/* ---- server ------------------------------------------------------------- */

struct sstream {
	zcrpc_stream *s;
	int cstream;	 /* a client-streaming stream: it counts, never pumps */
	size_t size;	 /* server-streaming: the message size asked for */
	int pumping;	 /* the request came */
	int retry;	 /* a write found no pool slot */
	uint64_t seq;	 /* next sequence number */
	uint64_t n_in;	 /* client-streaming: messages and bytes consumed */
	uint64_t bytes_in;
	struct sstream *next_retry;
	struct sstream **prev_retry;
};

struct server {
	int ready, failed;
	struct sstream *retry; /* streams that wait for a pool slot */
	unsigned char buf[MAX_MSG];
};

static void retry_add(struct server *sv, struct sstream *x)
{
	if (x->retry)
		return;
	x->retry = 1;
	x->next_retry = sv->retry;
	x->prev_retry = &sv->retry;
	if (sv->retry)
		sv->retry->prev_retry = &x->next_retry;
	sv->retry = x;
}

static void retry_remove(struct sstream *x)
{
	if (!x->retry)
		return;
	x->retry = 0;
	*x->prev_retry = x->next_retry;
	if (x->next_retry)
		x->next_retry->prev_retry = x->prev_retry;
}

/* Writes on @x until its window closes (on_writable brings it back) or
 * the pool is out of slots (the server loop retries). */
static void s_pump(struct server *sv, struct sstream *x)
{
	zcrpc_status st;

	if (!x->pumping)
		return;
	for (;;) {
		memcpy(sv->buf, &x->seq, x->size < 8 ? x->size : 8);
		st = zcrpc_stream_write(x->s, sv->buf, x->size);
		if (st != ZCRPC_OK)
			break;
		x->seq++;
	}
	if (pool_refused(x->s, st))
		retry_add(sv, x);
	else if (st != ZCRPC_RESOURCE_EXHAUSTED && st != ZCRPC_FAILED_PRECONDITION)
		fprintf(stderr, "server: stream_write: %s\n", zcrpc_status_str(st));
}

static void s_open(zcrpc_stream *s, const zcrpc_stream_open *o, void *arg)
{
	struct sstream *x = calloc(1, sizeof(*x));

	(void)arg;
	if (!x) {
		zcrpc_stream_finish(s, ZCRPC_RESOURCE_EXHAUSTED, "no memory", NULL, 0);
		return;
	}
	x->s = s;
	x->cstream = o->method_id == zcrpc_method_id(CSTREAM);
	zcrpc_stream_set_user(s, x);
}

static void s_message(zcrpc_stream *s, const void *data, size_t len, void *arg)
{
	struct sstream *x = zcrpc_stream_get_user(s);
	uint64_t size = 0;

	if (!x)
		return;
	if (x->cstream) {
		x->n_in++;
		x->bytes_in += len;
		return;
	}
	if (x->pumping)
		return;
	if (len >= 8)
		memcpy(&size, data, 8);
	if (size > zcrpc_stream_max_message(s)) {
		zcrpc_stream_finish(s, ZCRPC_INVALID_ARGUMENT, "message size too large", NULL, 0);
		return;
	}
	x->size = (size_t)size;
	x->pumping = 1;
	s_pump(arg, x);
}

static void s_half_close(zcrpc_stream *s, void *arg)
{
	struct sstream *x = zcrpc_stream_get_user(s);
	uint64_t r[2];
	zcrpc_status st;

	(void)arg;
	if (!x || !x->cstream)
		return; /* server-streaming: the client half-closes after its request */
	r[0] = x->n_in;
	r[1] = x->bytes_in;
	if ((st = zcrpc_stream_write(s, r, sizeof(r))) != ZCRPC_OK ||
	    (st = zcrpc_stream_finish(s, ZCRPC_OK, NULL, NULL, 0)) != ZCRPC_OK) {
		fprintf(stderr, "server: client-streaming answer: %s\n", zcrpc_status_str(st));
		zcrpc_stream_finish(s, st, "the answer could not be written", NULL, 0);
	}
}

static void s_writable(zcrpc_stream *s, void *arg)
{
	struct sstream *x = zcrpc_stream_get_user(s);

	if (x)
		s_pump(arg, x);
}

static void s_finish(zcrpc_stream *s, const zcrpc_stream_end *e, void *arg)
{
	struct sstream *x = zcrpc_stream_get_user(s);

	(void)e;
	(void)arg;
	if (!x)
		return;
	retry_remove(x);
	free(x);
}

static void h_echo(zcrpc_server_call *call, const zcrpc_request *req, void *arg)
{
	(void)arg;
	zcrpc_server_call_reply(call, ZCRPC_OK, NULL, req->data, req->len, NULL);
}

static void *server_main(void *arg)
{
	struct server *sv = arg;
	zcrpc_worker_opts wo;
	zcrpc_worker *w = NULL;
	zcrpc_server *srv = NULL;
	zcrpc_stream_handlers h;
	zcrpc_status st;

	bench_pin(1);
	memset(&h, 0, sizeof(h));
	h.size = sizeof(h);
	h.on_open = s_open;
	h.on_message = s_message;
	h.on_half_close = s_half_close;
	h.on_writable = s_writable;
	h.on_finish = s_finish;
	h.arg = sv;
	worker_opts(&wo);
	if ((st = zcrpc_worker_create(&wo, &w)) != ZCRPC_OK ||
	    (st = zcrpc_server_create(w, NULL, &srv)) != ZCRPC_OK ||
	    (st = zcrpc_server_register_stream(srv, SSTREAM, &h)) != ZCRPC_OK ||
	    (st = zcrpc_server_register_stream(srv, CSTREAM, &h)) != ZCRPC_OK ||
	    (st = zcrpc_server_register(srv, ECHO, h_echo, NULL)) != ZCRPC_OK ||
	    (st = zcrpc_server_listen(srv, g_addr, g_port)) != ZCRPC_OK) {
		fprintf(stderr, "server: %s\n", zcrpc_status_str(st));
		__atomic_store_n(&sv->failed, 1, __ATOMIC_RELEASE);
		goto out;
	}
	fprintf(stderr, "server: listening on %s:%s\n", g_addr, g_port);
	__atomic_store_n(&sv->ready, 1, __ATOMIC_RELEASE);
	while (!g_stop) {
		struct sstream *x, *next;

		zcrpc_worker_progress(w, 0);
		for (x = sv->retry; x; x = next) {
			next = x->next_retry;
			retry_remove(x);
			s_pump(sv, x);
		}
	}
	{
		zcrpc_worker_stats ws;

		zcrpc_worker_get_stats(w, &ws, sizeof(ws));
		fprintf(stderr, "server: worker sent %llu msgs, received %llu, credit stalls %llu, "
			"pool exhausted %llu\n", (unsigned long long)ws.msgs_sent,
			(unsigned long long)ws.msgs_recv, (unsigned long long)ws.credit_stalls,
			(unsigned long long)ws.pool_exhausted);
	}
out:
	zcrpc_server_destroy(srv);
	zcrpc_worker_destroy(w);
	return NULL;
}

/* ---- client ------------------------------------------------------------- */

struct cstream {
	zcrpc_stream *s;
	int paused, finished, retry;
	zcrpc_status status;
	uint64_t n;	   /* messages received (server-streaming) */
	uint64_t n0;	   /* n when the measured interval began */
	uint64_t bad;	   /* messages out of sequence or of the wrong size */
	size_t size;
	double last_us;	   /* arrival of the last message, and the longest gap */
	double max_gap_us;
	/* client-streaming */
	uint64_t n_out, bytes_out;
	uint64_t answer[2];
	int answered;
	int writing;	   /* keep writing until the client stops it */
	const int *measuring; /* server-streaming: gaps are timed while set */
	unsigned char *buf;
	size_t max;
	const zcrpc_mr *mr; /* buf's registration: written in place */
};

static void c_message(zcrpc_stream *s, const void *data, size_t len, void *arg)
{
	struct cstream *c = arg;
	uint64_t seq = 0;

	(void)s;
	if (c->buf) { /* client-streaming: the server's answer */
		if (len == sizeof(c->answer)) {
			memcpy(c->answer, data, sizeof(c->answer));
			c->answered = 1;
		} else {
			c->bad++;
		}
		return;
	}
	if (c->measuring && *c->measuring) {
		double now = bench_now_us();

		if (c->last_us > 0 && now - c->last_us > c->max_gap_us)
			c->max_gap_us = now - c->last_us;
		c->last_us = now;
	}
	if (len != c->size)
		c->bad++;
	else if (len >= 8) {
		memcpy(&seq, data, 8);
		if (seq != c->n)
			c->bad++;
	}
	c->n++;
}

static void c_pump(struct cstream *c);

static void c_writable(zcrpc_stream *s, void *arg)
{
	(void)s;
	c_pump(arg);
}

static void c_finish(zcrpc_stream *s, const zcrpc_stream_end *e, void *arg)
{
	struct cstream *c = arg;

	(void)s;
	c->finished = 1;
	c->status = e->status;
	c->s = NULL;
	if (e->status != ZCRPC_OK && e->status != ZCRPC_CANCELLED)
		fprintf(stderr, "client: stream ended %s: %s\n", zcrpc_status_str(e->status),
			e->message);
}

static zcrpc_status c_start(zcrpc_channel *ch, const char *method, struct cstream *c)
{
	zcrpc_stream_handlers h;
	zcrpc_stream_opts o;

	memset(&h, 0, sizeof(h));
	h.size = sizeof(h);
	h.on_message = c_message;
	h.on_writable = c_writable;
	h.on_finish = c_finish;
	h.arg = c;
	zcrpc_stream_opts_init(&o);
	o.timeout_us = 600LL * 1000 * 1000; /* a bound, far beyond any run */
	return zcrpc_stream_start(ch, zcrpc_method_id(method), &o, &h, &c->s);
}

static void progress_for(zcrpc_worker *w, double us)
{
	double end = bench_now_us() + us;

	while (bench_now_us() < end)
		zcrpc_worker_progress(w, 0);
}

static uint64_t sum_n(struct cstream *cs, int n, int from)
{
	uint64_t t = 0;
	int i;

	for (i = from; i < n; i++)
		t += cs[i].n;
	return t;
}

/* Cancels every stream still open and waits for their on_finish. */
static int end_all(zcrpc_worker *w, struct cstream *cs, int n)
{
	double limit = bench_now_us() + 30e6;
	int i, open;

	for (i = 0; i < n; i++)
		if (!cs[i].finished)
			zcrpc_stream_cancel(cs[i].s);
	do {
		zcrpc_worker_progress(w, 0);
		for (open = 0, i = 0; i < n; i++)
			open += !cs[i].finished;
	} while (open && bench_now_us() < limit);
	if (open)
		fprintf(stderr, "client: %d stream(s) did not finish\n", open);
	return open ? 1 : 0;
}

static int run_sstream(zcrpc_worker *w, zcrpc_channel *ch, int nstreams, int npaused,
		       size_t size, double secs)
{
	struct cstream cs[MAX_STREAMS];
	uint64_t req = size, d0, d1, bad = 0, held = 0;
	zcrpc_worker_stats w0, w1;
	uint64_t min_k = UINT64_MAX, max_k = 0;
	double t0, t1, max_gap = 0;
	int i, rc = 1, measuring = 0;

	memset(cs, 0, sizeof(cs));
	for (i = 0; i < nstreams; i++)
		cs[i].finished = 1; /* until started: end_all waits for none */
	bench_progress("  server-streaming %zu B: %d stream(s), %d paused, %.1f s\n", size,
		       nstreams, npaused, secs);
	for (i = 0; i < nstreams; i++) {
		zcrpc_status st;

		cs[i].size = size;
		cs[i].measuring = &measuring;
		cs[i].finished = 0;
		if ((st = c_start(ch, SSTREAM, &cs[i])) != ZCRPC_OK) {
			fprintf(stderr, "client: stream_start: %s\n", zcrpc_status_str(st));
			cs[i].finished = 1;
			goto out;
		}
		if (i < npaused) {
			zcrpc_stream_pause(cs[i].s);
			cs[i].paused = 1;
		}
		if ((st = zcrpc_stream_write(cs[i].s, &req, sizeof(req))) != ZCRPC_OK ||
		    (st = zcrpc_stream_close_send(cs[i].s)) != ZCRPC_OK) {
			fprintf(stderr, "client: request: %s\n", zcrpc_status_str(st));
			goto out;
		}
	}
	progress_for(w, 5e5);
	d0 = sum_n(cs, nstreams, npaused);
	for (i = 0; i < nstreams; i++)
		cs[i].n0 = cs[i].n;
	zcrpc_worker_get_stats(w, &w0, sizeof(w0));
	measuring = 1;
	t0 = bench_now_us();
	progress_for(w, secs * 1e6);
	t1 = bench_now_us();
	measuring = 0;
	d1 = sum_n(cs, nstreams, npaused);
	zcrpc_worker_get_stats(w, &w1, sizeof(w1));
	for (i = 0; i < nstreams; i++) {
		bad += cs[i].bad;
		if (cs[i].finished) {
			fprintf(stderr, "client: stream %d ended early: %s\n", i,
				zcrpc_status_str(cs[i].status));
			goto out;
		}
		if (cs[i].paused)
			held += cs[i].n; /* 0: a paused reader is handed nothing */
		else {
			uint64_t k = cs[i].n - cs[i].n0;

			if (cs[i].max_gap_us > max_gap)
				max_gap = cs[i].max_gap_us;
			if (k < min_k)
				min_k = k;
			if (k > max_k)
				max_k = k;
		}
	}
	if (bad || held) {
		fprintf(stderr, "client: %llu bad message(s), %llu handed to a paused reader\n",
			(unsigned long long)bad, (unsigned long long)held);
		goto out;
	}
	printf("{\"bench\":\"zcrpc_stream_server_rate\",\"size\":%zu,\"streams\":%d,"
	       "\"paused\":%d,\"secs\":%.3f,\"msgs\":%llu,\"msgs_per_s\":%.1f,"
	       "\"window\":16,\"stream_msgs_min\":%llu,\"stream_msgs_max\":%llu,"
	       "\"max_gap_us\":%.1f,\"client_msgs_sent\":%llu,"
	       "\"client_msgs_recv\":%llu,\"client_credit_stalls\":%llu}\n",
	       size, nstreams, npaused, (t1 - t0) / 1e6, (unsigned long long)(d1 - d0),
	       (double)(d1 - d0) / ((t1 - t0) / 1e6), (unsigned long long)min_k,
	       (unsigned long long)max_k, max_gap,
	       (unsigned long long)(w1.msgs_sent - w0.msgs_sent),
	       (unsigned long long)(w1.msgs_recv - w0.msgs_recv),
	       (unsigned long long)(w1.credit_stalls - w0.credit_stalls));
	fflush(stdout);
	rc = 0;
out:
	if (end_all(w, cs, nstreams))
		rc = 1;
	return rc;
}

/* Writes on the client-streaming stream while writing is on and the
 * window lets it; a refused pool slot is retried from the client's loop. */
static void c_pump(struct cstream *c)
{
	zcrpc_status st = ZCRPC_OK;

	if (!c->buf || !c->writing || c->finished)
		return;
	while (c->writing) {
		zcrpc_bulk b = {c->mr, 0, c->max};

		/* (buf never changes, so it may be rewritten while the last
		 * message's write reads it) */
		st = c->mr ? zcrpc_stream_write_bulk(c->s, &b)
			   : zcrpc_stream_write(c->s, c->buf, c->max);
		if (st != ZCRPC_OK)
			break;
		c->n_out++;
		c->bytes_out += c->max;
	}
	c->retry = pool_refused(c->s, st);
	if (st != ZCRPC_OK && st != ZCRPC_RESOURCE_EXHAUSTED)
		fprintf(stderr, "client: stream_write: %s\n", zcrpc_status_str(st));
}

/* One client-streaming stream for @secs: returns 0 and the rate, checked
 * against the server's count. */
static int one_cstream(zcrpc_worker *w, zcrpc_channel *ch, unsigned char *buf,
		       const zcrpc_mr *mr, size_t msg, double secs, struct cstream *c,
		       double *dt)
{
	double t0, end, limit;
	zcrpc_status st;

	memset(c, 0, sizeof(*c));
	c->buf = buf;
	c->mr = mr;
	if ((st = c_start(ch, CSTREAM, c)) != ZCRPC_OK) {
		fprintf(stderr, "client: stream_start: %s\n", zcrpc_status_str(st));
		return 1;
	}
	/* The largest message one frame carries (a library that sends larger
	 * ones in pieces reports more in zcrpc_stream_max_message()). */
	c->max = zcrpc_stream_max_message(c->s);
	if (c->max > ONE_FRAME)
		c->max = ONE_FRAME;
	if (msg) /* (cN: messages of N bytes, by RDMA WRITE above 16 KiB) */
		c->max = msg;
	c->writing = 1;
	t0 = bench_now_us();
	end = t0 + secs * 1e6;
	c_pump(c);
	while (bench_now_us() < end && !c->finished) {
		zcrpc_worker_progress(w, 0);
		if (c->retry)
			c_pump(c);
	}
	c->writing = 0;
	if (!c->finished && (st = zcrpc_stream_close_send(c->s)) != ZCRPC_OK) {
		fprintf(stderr, "client: close_send: %s\n", zcrpc_status_str(st));
		end_all(w, c, 1);
		return 1;
	}
	limit = bench_now_us() + 30e6;
	while (!c->finished && bench_now_us() < limit)
		zcrpc_worker_progress(w, 0);
	*dt = (bench_now_us() - t0) / 1e6;
	if (!c->finished) {
		fprintf(stderr, "client: the client-streaming answer did not come\n");
		end_all(w, c, 1);
		return 1;
	}
	if (c->status != ZCRPC_OK || !c->answered || c->bad || c->answer[0] != c->n_out ||
	    c->answer[1] != c->bytes_out) {
		fprintf(stderr, "client: client-streaming: status %s, server counted %llu msgs / "
			"%llu B, client wrote %llu / %llu\n", zcrpc_status_str(c->status),
			(unsigned long long)c->answer[0], (unsigned long long)c->answer[1],
			(unsigned long long)c->n_out, (unsigned long long)c->bytes_out);
		return 1;
	}
	return 0;
}

static int run_cstream(zcrpc_worker *w, zcrpc_channel *ch, size_t msg, double secs)
{
	size_t n = msg > MAX_MSG ? msg : MAX_MSG;
	unsigned char *buf = malloc(n);
	zcrpc_mr *mr = NULL;
	struct cstream c;
	double dt;
	size_t i;
	int rc = 1;

	if (!buf)
		return 1;
	for (i = 0; i < n; i++)
		buf[i] = (unsigned char)(i * 7 + 1);
	/* Messages that go by RDMA WRITE are written in place from this
	 * registration (zcrpc_stream_write_bulk: no copy). */
	if (msg > 16384 &&
	    zcrpc_mr_register(zcrpc_worker_get_context(w), buf, n, 0, &mr) != ZCRPC_OK) {
		fprintf(stderr, "client: cannot register the message buffer\n");
		free(buf);
		return 1;
	}
	if (msg)
		bench_progress("  client-streaming, %zu B messages: 0.5 s warm-up, %.1f s\n", msg,
			       secs);
	else
		bench_progress("  client-streaming, largest one-frame message: 0.5 s warm-up, "
			       "%.1f s\n", secs);
	if (one_cstream(w, ch, buf, mr, msg, 0.5, &c, &dt) ||
	    one_cstream(w, ch, buf, mr, msg, secs, &c, &dt))
		goto out;
	printf("{\"bench\":\"zcrpc_stream_client_bw\",\"size\":%zu,\"msgs\":%llu,"
	       "\"secs\":%.4f,\"mib_s\":%.3f,\"msgs_per_s\":%.1f,\"window\":16,"
	       "\"in_place\":%d}\n",
	       c.max, (unsigned long long)c.n_out, dt,
	       (double)c.bytes_out / 1048576.0 / dt, (double)c.n_out / dt, mr != NULL);
	fflush(stdout);
	rc = 0;
out:
	zcrpc_mr_deregister(mr);
	free(buf);
	return rc;
}

/* Runs the steps of @mode in order (see -m); with @w NULL only checks
 * them. Non-zero on a bad step or a failed run. */
static int run_steps(zcrpc_worker *w, zcrpc_channel *ch, const char *mode, int nstreams,
		     int npaused, size_t size, double secs)
{
	const char *p = !strcmp(mode, "all") ? "s1,s16,s16p1,c,c1m" : mode;

	while (*p) {
		size_t n = strcspn(p, ",");
		int ns = nstreams, np = npaused, used = 0, rc;
		char tok[32];

		if (n == 0 || n >= sizeof(tok))
			return 1;
		memcpy(tok, p, n);
		tok[n] = 0;
		p += n + (p[n] == ',');
		if (!strcmp(tok, "cstream") || !strcmp(tok, "c")) {
			rc = w ? run_cstream(w, ch, 0, secs) : 0;
		} else if (tok[0] == 'c') {
			/* cN, cNk, cNm: client-streaming of N (KiB, MiB) bytes */
			char unit = 0;
			unsigned long v = 0;

			if (sscanf(tok, "c%lu%c%n", &v, &unit, &used) == 2 && !tok[used] &&
			    (unit == 'k' || unit == 'm'))
				v <<= unit == 'k' ? 10 : 20;
			else if (sscanf(tok, "c%lu%n", &v, &used) != 1 || tok[used])
				return 1;
			if (v < 1 || v > ((size_t)4 << 20))
				return 1;
			rc = w ? run_cstream(w, ch, (size_t)v, secs) : 0;
		} else {
			if (strcmp(tok, "sstream")) {
				np = 0;
				if ((sscanf(tok, "s%dp%d%n", &ns, &np, &used) != 2 &&
				     sscanf(tok, "s%d%n", &ns, &used) != 1) ||
				    tok[used] || ns < 1 || ns > MAX_STREAMS || np < 0 || np >= ns)
					return 1;
			}
			rc = w ? run_sstream(w, ch, ns, np, size, secs) : 0;
		}
		if (rc)
			return rc;
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *role = "both", *mode = "all";
	int nstreams = 1, npaused = 0, opt, rc = 1;
	size_t size = 16;
	double secs = 5;
	struct server *sv = NULL;
	pthread_t th;
	int have_thread = 0;
	zcrpc_worker_opts wo;
	zcrpc_worker *w = NULL;
	zcrpc_channel *ch = NULL;
	zcrpc_result r;
	zcrpc_status st;

	while ((opt = getopt(argc, argv, "r:a:p:m:S:P:s:T:h")) != -1) {
		switch (opt) {
		case 'r': role = optarg; break;
		case 'a': g_addr = optarg; break;
		case 'p': g_port = optarg; break;
		case 'm': mode = optarg; break;
		case 'S': nstreams = atoi(optarg); break;
		case 'P': npaused = atoi(optarg); break;
		case 's': size = (size_t)atol(optarg); break;
		case 'T': secs = atof(optarg); break;
		default:
			fprintf(stderr, "usage: %s [-r both|server|client] [-a ADDR] [-p PORT] "
				"[-m all|sstream|cstream|s1,s16p1,c...] [-S STREAMS] [-P PAUSED] [-s SIZE] "
				"[-T SECONDS]\n", argv[0]);
			return opt == 'h' ? 0 : 2;
		}
	}
	if (nstreams < 1 || nstreams > MAX_STREAMS || npaused < 0 || npaused >= nstreams ||
	    secs <= 0 || size > MAX_MSG || run_steps(NULL, NULL, mode, nstreams, npaused, size, secs)) {
		fprintf(stderr, "bad arguments\n");
		return 2;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	if (strcmp(role, "client")) {
		sv = calloc(1, sizeof(*sv));
		if (!sv)
			return 1;
	}
	if (!strcmp(role, "server")) {
		server_main(sv);
		rc = sv->failed;
		free(sv);
		return rc;
	}
	if (!strcmp(role, "both")) {
		if (pthread_create(&th, NULL, server_main, sv))
			goto out;
		have_thread = 1;
		while (!__atomic_load_n(&sv->ready, __ATOMIC_ACQUIRE) &&
		       !__atomic_load_n(&sv->failed, __ATOMIC_ACQUIRE))
			bench_sleep_us(1000);
		if (sv->failed)
			goto out;
	}

	bench_pin(0);
	worker_opts(&wo);
	if (zcrpc_worker_create(&wo, &w) != ZCRPC_OK ||
	    zcrpc_channel_create(w, g_addr, g_port, NULL, &ch) != ZCRPC_OK)
		goto out;
	/* Connect (lazily) with one unary echo call. */
	memset(&r, 0, sizeof(r));
	st = zcrpc_call(ch, zcrpc_method_id(ECHO), "x", 1, NULL, &r, sizeof(r));
	zcrpc_result_free(&r);
	if (st != ZCRPC_OK) {
		fprintf(stderr, "client: connect: %s\n", zcrpc_status_str(st));
		goto out;
	}
	bench_progress("client: connected\n");

	rc = run_steps(w, ch, mode, nstreams, npaused, size, secs);
	if (rc == 0) {
		zcrpc_channel_stats s;

		zcrpc_channel_get_stats(ch, &s, sizeof(s));
		printf("{\"bench\":\"zcrpc_stream_stats\",\"mode\":\"%s\",\"calls_ok\":%llu,"
		       "\"calls_failed\":%llu,\"copied_bytes\":%llu}\n", mode,
		       (unsigned long long)s.calls_ok, (unsigned long long)s.calls_failed,
		       (unsigned long long)s.copied_bytes);
		fflush(stdout);
	}
out:
	zcrpc_channel_destroy(ch);
	zcrpc_worker_destroy(w);
	if (have_thread) {
		g_stop = 1;
		pthread_join(th, NULL);
	}
	free(sv);
	return rc;
}
