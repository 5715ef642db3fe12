/* zcrpc RPC benchmark: call latency, calls/s with many in flight, and
 * bandwidth of attachments, one JSON object per result line on stdout.
 *
 *   zcrpc_bench_rpc [-r both|server|client] [-a ADDR] [-p PORT]
 *                   [-m lat|tput|bw|cpu|idle] [-s SIZES] [-n ITERS] [-w WARMUP]
 *                   [-c CONNS] [-d DEPTH] [-T SECONDS] [-B BYTES] [-t TARGET]
 *
 * -r both (default) runs the server (one worker, busy-polling) on a thread
 *    of this process; "server" serves until SIGTERM/SIGINT.
 * -m lat: per size (default 16,256,4K), -n calls one at a time through
 *    zcrpc_call_start (the fill callback writes an 8-byte sequence number)
 *    against an echo handler (zcrpc_server_call_reply with the request payload);
 *    busy-poll; round-trip percentiles.
 * -m tput: -c channels (= connections, default 1) on one client worker,
 *    each keeping -d calls in flight (default 64) of -s bytes (default 16)
 *    for -T seconds (default 5) after 0.5 s of warm-up; calls/s. With -t
 *    TARGET (zcrpc/balance.h, e.g. "ipv4:A:P1,A:P2"; -r client only) the
 *    channels are target channels over the servers it names, round_robin:
 *    one client's aggregate calls/s over several server processes
 *    ("servers" in the result line).
 * -m bw: per size (default 4K..64M) calls with an attachment of that size
 *    from user-registered memory (zcrpc_mr_register), an 8-byte request
 *    and an 8-byte reply, -d in flight (default: fewer for big sizes),
 *    about -B bytes per size (default 256M); MiB/s of attachment bytes.
 * -m cpu: -n calls of -s bytes (first size) one at a time, each waiting in
 *    zcrpc_worker_progress(w, -1) (sleeping, so an idle poll loop is not
 *    counted); the loop is the function bench_measured_calls, for
 *    valgrind --tool=callgrind --toggle-collect=bench_measured_calls.
 *    With -r server, the server sleeps in zcrpc_worker_progress(w, -1) as
 *    well, in the function bench_server_loop (scripts/callgrind-calls
 *    subtracts two runs to get the server's cost per call).
 * -m idle: after -w calls, -n busy passes zcrpc_worker_progress(w, 0)
 *    with nothing in flight, in the function bench_idle_passes (the cost
 *    of an idle busy-poll pass).
 * Both sides use max_msg 8192 so a 4 KiB payload plus its frame header
 * travels in one message (the default 4096 would send it by rendezvous).
 */
#include "bench_common.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <zcrpc/zcrpc.h>

#define MAX_MSG 8192
#define ECHO "/zcrpc.bench.Bench/Echo"
#define SINK "/zcrpc.bench.Bench/Sink"

static volatile sig_atomic_t g_stop;
static int g_server_timeout; /* -r server -m cpu: -1 (sleep) */
static const char *g_addr = "192.0.2.1", *g_port = "18700";
/* -t: the target, and the servers it names (1 without one). */
static const char *g_target;
static int g_servers = 1;

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

/* ---- server ------------------------------------------------------------- */

struct server {
	int ready, failed;
};

static void h_echo(zcrpc_server_call *call, const zcrpc_request *req, void *arg)
{
	(void)arg;
	zcrpc_server_call_reply(call, ZCRPC_OK, NULL, req->data, req->len, NULL);
}

/* Bulk sink: the attachment has landed; reply with 8 bytes. */
static void h_sink(zcrpc_server_call *call, const zcrpc_request *req, void *arg)
{
	uint64_t n = req->attachment_len;

	(void)arg;
	zcrpc_server_call_reply(call, ZCRPC_OK, NULL, &n, sizeof(n), NULL);
}

/* The server's loop (callgrind's --toggle-collect=bench_server_loop). */
__attribute__((noinline)) void bench_server_loop(zcrpc_worker *w);
__attribute__((noinline)) void bench_server_loop(zcrpc_worker *w)
{
	while (!g_stop)
		zcrpc_worker_progress(w, g_server_timeout);
}

static void *server_main(void *arg)
{
	struct server *s = arg;
	zcrpc_worker_opts wo;
	zcrpc_worker *w = NULL;
	zcrpc_server *srv = NULL;
	zcrpc_status st;

	bench_pin(1);
	worker_opts(&wo);
	if ((st = zcrpc_worker_create(&wo, &w)) != ZCRPC_OK ||
	    (st = zcrpc_server_create(w, NULL, &srv)) != ZCRPC_OK ||
	    (st = zcrpc_server_register(srv, ECHO, h_echo, NULL)) != ZCRPC_OK ||
	    (st = zcrpc_server_register(srv, SINK, h_sink, NULL)) != ZCRPC_OK ||
	    (st = zcrpc_server_listen(srv, g_addr, g_port)) != ZCRPC_OK) {
		fprintf(stderr, "server: %s\n", zcrpc_status_str(st));
		__atomic_store_n(&s->failed, 1, __ATOMIC_RELEASE);
		goto out;
	}
	fprintf(stderr, "server: listening on %s:%s\n", g_addr, g_port);
	__atomic_store_n(&s->ready, 1, __ATOMIC_RELEASE);
	bench_server_loop(w);
out:
	zcrpc_server_destroy(srv);
	zcrpc_worker_destroy(w);
	return NULL;
}

/* ---- client ------------------------------------------------------------- */

struct client;

struct chan {
	struct client *cl;
	zcrpc_channel *ch;
	long done, failed, started;
};

struct client {
	zcrpc_worker *w;
	uint32_t echo_id, sink_id;
	size_t size;
	uint64_t seq;
	int got;
	uint64_t got_seq;
	zcrpc_status last;
	/* tput / bw */
	int keep_going;
	long target; /* bw: calls to start in all */
	long started_all;
	const zcrpc_call_opts *copts;
};

static void fill_seq(void *dst, size_t len, void *ctx)
{
	struct client *cl = ctx;

	if (len >= 8)
		memcpy(dst, &cl->seq, 8);
}

static void lat_done(zcrpc_channel *ch, const zcrpc_reply *r, void *arg)
{
	struct client *cl = arg;

	(void)ch;
	cl->last = r->status;
	if (r->status != ZCRPC_OK)
		fprintf(stderr, "client: call: %s: %s\n", zcrpc_status_str(r->status),
			r->message ? r->message : "");
	if (r->status == ZCRPC_OK && r->len >= 8)
		memcpy(&cl->got_seq, r->data, 8);
	cl->got = 1;
}

/* One call, waited for with busy polling (timeout 0) or sleeping (-1). */
static int one_call(struct client *cl, zcrpc_channel *ch, int timeout)
{
	zcrpc_status st;

	cl->seq++;
	cl->got = 0;
	st = zcrpc_call_start(ch, cl->echo_id, cl->size, fill_seq, cl, NULL, lat_done, cl,
			      NULL);
	if (st != ZCRPC_OK) {
		fprintf(stderr, "client: call_start: %s\n", zcrpc_status_str(st));
		return 1;
	}
	while (!cl->got)
		zcrpc_worker_progress(cl->w, timeout);
	if (cl->last != ZCRPC_OK || (cl->size >= 8 && cl->got_seq != cl->seq)) {
		fprintf(stderr, "client: call failed: %s\n", zcrpc_status_str(cl->last));
		return 1;
	}
	return 0;
}

static int run_lat(struct client *cl, zcrpc_channel *ch, const size_t *sizes, int nsizes,
		   long iters, long warmup)
{
	double *lat = malloc(sizeof(double) * (size_t)iters);
	int k;

	if (!lat)
		return 1;
	for (k = 0; k < nsizes; k++) {
		long i;

		cl->size = sizes[k];
		bench_progress("  rpc lat %zu B: %ld calls\n", cl->size, iters);
		for (i = -warmup; i < iters; i++) {
			double t0 = bench_now_us();

			if (one_call(cl, ch, 0)) {
				free(lat);
				return 1;
			}
			if (i >= 0)
				lat[i] = bench_now_us() - t0;
		}
		bench_print_lat("zcrpc_rpc_lat", cl->size, lat, (size_t)iters,
				"\"api\":\"zcrpc_call_start(fill)\",\"poll\":\"busy\"");
	}
	free(lat);
	return 0;
}

/* The loop callgrind measures (see -m cpu). */
__attribute__((noinline)) int bench_measured_calls(struct client *cl, zcrpc_channel *ch,
						   long n);
__attribute__((noinline)) int bench_measured_calls(struct client *cl, zcrpc_channel *ch,
						   long n)
{
	long i;

	for (i = 0; i < n; i++)
		if (one_call(cl, ch, -1))
			return 1;
	return 0;
}

/* Idle busy-poll passes (see -m idle). */
__attribute__((noinline)) void bench_idle_passes(zcrpc_worker *w, long n);
__attribute__((noinline)) void bench_idle_passes(zcrpc_worker *w, long n)
{
	long i;

	for (i = 0; i < n; i++)
		zcrpc_worker_progress(w, 0);
}

static void chan_done(zcrpc_channel *ch, const zcrpc_reply *r, void *arg);

static int chan_start(struct chan *c)
{
	struct client *cl = c->cl;
	zcrpc_status st;

	cl->seq++;
	st = zcrpc_call_start(c->ch, cl->copts ? cl->sink_id : cl->echo_id, cl->size, fill_seq,
			      cl, cl->copts, chan_done, c, NULL);
	if (st != ZCRPC_OK) {
		fprintf(stderr, "client: call_start: %s\n", zcrpc_status_str(st));
		c->failed++;
		return 1;
	}
	c->started++;
	cl->started_all++;
	return 0;
}

static void chan_done(zcrpc_channel *ch, const zcrpc_reply *r, void *arg)
{
	struct chan *c = arg;

	(void)ch;
	if (r->status != ZCRPC_OK) {
		c->failed++;
		if (c->failed < 5)
			fprintf(stderr, "client: call: %s %s\n", zcrpc_status_str(r->status),
				r->message);
		return;
	}
	c->done++;
	if (c->cl->keep_going && (c->cl->target <= 0 || c->cl->started_all < c->cl->target))
		chan_start(c);
}

static long sum_done(struct chan *cs, int n, long *failed)
{
	long d = 0;
	int i;

	*failed = 0;
	for (i = 0; i < n; i++) {
		d += cs[i].done;
		*failed += cs[i].failed;
	}
	return d;
}

static long sum_started(struct chan *cs, int n)
{
	long d = 0;
	int i;

	for (i = 0; i < n; i++)
		d += cs[i].started;
	return d;
}

static int run_tput(struct client *cl, struct chan *cs, int nch, long depth, double secs)
{
	long d0, d1, failed;
	double t0, t1, end;
	int i, k;

	bench_progress("  rpc tput %zu B: %d conn x %ld in flight, %.1f s\n", cl->size, nch,
		       depth, secs);
	cl->keep_going = 1;
	cl->target = 0;
	for (i = 0; i < nch; i++)
		for (k = 0; k < depth; k++)
			if (chan_start(&cs[i]))
				return 1;
	t0 = bench_now_us();
	while (bench_now_us() - t0 < 5e5)
		zcrpc_worker_progress(cl->w, 0);
	d0 = sum_done(cs, nch, &failed);
	t0 = bench_now_us();
	end = t0 + secs * 1e6;
	while ((t1 = bench_now_us()) < end)
		zcrpc_worker_progress(cl->w, 0);
	d1 = sum_done(cs, nch, &failed);
	cl->keep_going = 0;
	while (sum_done(cs, nch, &failed) + failed < sum_started(cs, nch))
		zcrpc_worker_progress(cl->w, 0);
	if (failed) {
		fprintf(stderr, "client: %ld calls failed\n", failed);
		return 1;
	}
	printf("{\"bench\":\"%s\",\"size\":%zu,\"conns\":%d,\"depth\":%ld,"
	       "\"servers\":%d,\"secs\":%.3f,\"calls\":%ld,\"calls_per_s\":%.1f}\n",
	       g_target ? "zcrpc_balance_tput" : "zcrpc_rpc_tput", cl->size, nch,
	       depth, g_servers, (t1 - t0) / 1e6, d1 - d0,
	       (double)(d1 - d0) / ((t1 - t0) / 1e6));
	fflush(stdout);
	return 0;
}

static int run_bw(struct client *cl, struct chan *c, const size_t *sizes, int nsizes,
		  double total, long depth_opt)
{
	zcrpc_mr *mr = NULL;
	void *src;
	size_t max = 0;
	int k, rc = 1;

	for (k = 0; k < nsizes; k++)
		max = sizes[k] > max ? sizes[k] : max;
	src = malloc(max);
	if (!src)
		return 1;
	memset(src, 0xa5, max);
	if (zcrpc_mr_register(zcrpc_worker_get_context(cl->w), src, max, 0, &mr) != ZCRPC_OK)
		goto out;
	for (k = 0; k < nsizes; k++) {
		size_t size = sizes[k];
		long n = bench_bulk_iters(size, total, 2, 100000);
		long depth = depth_opt > 0 ? depth_opt : bench_bulk_iters(size, 128.0 * 1048576, 2, 64);
		zcrpc_bulk att = {mr, 0, size};
		zcrpc_call_opts o;
		long failed, i;
		double t0, dt;

		if (depth > n)
			depth = n;
		zcrpc_call_opts_init(&o);
		o.attachment = &att;
		cl->copts = &o;
		cl->size = 8;
		cl->keep_going = 1;
		cl->target = n;
		cl->started_all = 0;
		c->done = c->failed = c->started = 0;
		bench_progress("  rpc attachment bw %zu B: %ld calls, %ld in flight\n", size, n,
			       depth);
		t0 = bench_now_us();
		for (i = 0; i < depth; i++)
			if (chan_start(c))
				goto out;
		while (c->done + c->failed < n)
			zcrpc_worker_progress(cl->w, 0);
		dt = (bench_now_us() - t0) / 1e6;
		cl->copts = NULL;
		if (sum_done(c, 1, &failed) != n || failed) {
			fprintf(stderr, "client: %ld calls failed\n", failed);
			goto out;
		}
		printf("{\"bench\":\"zcrpc_rpc_attach_bw\",\"size\":%zu,\"iters\":%ld,"
		       "\"depth\":%ld,\"secs\":%.4f,\"mib_s\":%.3f,\"calls_per_s\":%.1f}\n",
		       size, n, depth, dt, (double)size * (double)n / 1048576.0 / dt,
		       (double)n / dt);
		fflush(stdout);
	}
	rc = 0;
out:
	cl->copts = NULL;
	zcrpc_mr_deregister(mr);
	free(src);
	return rc;
}

int main(int argc, char **argv)
{
	const char *role = "both", *mode = "lat", *sizes_arg = NULL;
	size_t sizes[BENCH_MAX_SIZES];
	long iters = 10000, warmup = 1000, depth = 0;
	double secs = 5, total = 256.0 * 1048576;
	int nsizes, opt, rc = 1, nch = 1, i;
	struct server srv = {0};
	pthread_t th;
	int have_thread = 0;
	struct client cl = {0};
	struct chan cs[64];
	zcrpc_worker_opts wo;
	zcrpc_channel_opts chopts;

	memset(cs, 0, sizeof(cs));
	while ((opt = getopt(argc, argv, "r:a:p:m:s:n:w:c:d:T:B:t:h")) != -1) {
		switch (opt) {
		case 'r': role = optarg; break;
		case 'a': g_addr = optarg; break;
		case 'p': g_port = optarg; break;
		case 'm': mode = optarg; break;
		case 's': sizes_arg = optarg; break;
		case 'n': iters = atol(optarg); break;
		case 'w': warmup = atol(optarg); break;
		case 'c': nch = atoi(optarg); break;
		case 'd': depth = atol(optarg); break;
		case 'T': secs = atof(optarg); break;
		case 'B': total = atof(optarg); break;
		case 't': g_target = optarg; break;
		default:
			fprintf(stderr, "usage: %s [-r both|server|client] [-a ADDR] [-p PORT] "
				"[-m lat|tput|bw|cpu|idle] [-s SIZES] [-n ITERS] [-w WARMUP] [-c CONNS] "
				"[-d DEPTH] [-T SECONDS] [-B BYTES] [-t TARGET]\n", argv[0]);
			return opt == 'h' ? 0 : 2;
		}
	}
	if (!sizes_arg)
		sizes_arg = !strcmp(mode, "bw") ? "4K,64K,256K,1M,4M,8M,16M,64M"
			  : !strcmp(mode, "lat") ? "16,256,4K" : "16";
	nsizes = bench_parse_sizes(sizes_arg, sizes, BENCH_MAX_SIZES);
	if (nsizes < 1 || iters < 1 || warmup < 0 || nch < 1 || nch > 64 || secs <= 0 ||
	    (strcmp(mode, "lat") && strcmp(mode, "tput") && strcmp(mode, "bw") &&
	     strcmp(mode, "cpu") && strcmp(mode, "idle")) ||
	    (g_target && (strcmp(role, "client") || strcmp(mode, "tput")))) {
		fprintf(stderr, "bad arguments\n");
		return 2;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);

	if (!strcmp(role, "server")) {
		if (!strcmp(mode, "cpu"))
			g_server_timeout = -1;
		server_main(&srv);
		return srv.failed;
	}
	if (!strcmp(role, "both")) {
		if (pthread_create(&th, NULL, server_main, &srv))
			return 1;
		have_thread = 1;
		while (!__atomic_load_n(&srv.ready, __ATOMIC_ACQUIRE) &&
		       !__atomic_load_n(&srv.failed, __ATOMIC_ACQUIRE))
			bench_sleep_us(1000);
		if (srv.failed)
			goto out;
	}

	bench_pin(0);
	worker_opts(&wo);
	if (zcrpc_worker_create(&wo, &cl.w) != ZCRPC_OK)
		goto out;
	cl.echo_id = zcrpc_method_id(ECHO);
	cl.sink_id = zcrpc_method_id(SINK);
	zcrpc_channel_opts_init(&chopts);
	if (!strcmp(mode, "cpu") || !strcmp(mode, "idle"))
		chopts.connect_timeout_ms = 300000; /* valgrind is slow to connect */
	if (!strcmp(mode, "tput") || !strcmp(mode, "bw")) {
		if (!strcmp(mode, "bw"))
			nch = 1;
	} else {
		nch = 1;
	}
	for (i = 0; i < nch; i++) {
		cs[i].cl = &cl;
		if (g_target) {
			chopts.lb_policy = "round_robin";
			if (zcrpc_channel_create_target(cl.w, g_target, &chopts,
							&cs[i].ch) != ZCRPC_OK)
				goto out;
			g_servers = (int)zcrpc_channel_get_backends(cs[i].ch, NULL, 0, 0);
		} else if (zcrpc_channel_create(cl.w, g_addr, g_port, &chopts,
						&cs[i].ch) != ZCRPC_OK) {
			goto out;
		}
		/* Connect (lazily) with one call each. */
		cl.size = 8;
		if (one_call(&cl, cs[i].ch, 1))
			goto out;
	}
	bench_progress("client: %d channel(s) connected\n", nch);

	if (!strcmp(mode, "lat")) {
		rc = run_lat(&cl, cs[0].ch, sizes, nsizes, iters, warmup);
	} else if (!strcmp(mode, "tput")) {
		cl.size = sizes[0];
		rc = run_tput(&cl, cs, nch, depth > 0 ? depth : 64, secs);
	} else if (!strcmp(mode, "bw")) {
		rc = run_bw(&cl, &cs[0], sizes, nsizes, total, depth);
	} else if (!strcmp(mode, "idle")) {
		cl.size = sizes[0];
		for (i = 0; i < warmup; i++)
			if (one_call(&cl, cs[0].ch, -1))
				goto out;
		bench_idle_passes(cl.w, iters);
		rc = 0;
		printf("{\"bench\":\"zcrpc_rpc_idle\",\"passes\":%ld}\n", iters);
	} else {
		cl.size = sizes[0];
		for (i = 0; i < warmup; i++)
			if (one_call(&cl, cs[0].ch, -1))
				goto out;
		rc = bench_measured_calls(&cl, cs[0].ch, iters);
		if (rc == 0)
			printf("{\"bench\":\"zcrpc_rpc_cpu\",\"size\":%zu,\"calls\":%ld,"
			       "\"poll\":\"sleep\"}\n", cl.size, iters);
	}
	if (rc == 0) {
		zcrpc_channel_stats s;

		zcrpc_channel_get_stats(cs[0].ch, &s, sizeof(s));
		printf("{\"bench\":\"zcrpc_rpc_stats\",\"mode\":\"%s\",\"calls_ok\":%llu,"
		       "\"calls_failed\":%llu,\"copied_bytes\":%llu}\n", mode,
		       (unsigned long long)s.calls_ok, (unsigned long long)s.calls_failed,
		       (unsigned long long)s.copied_bytes);
		fflush(stdout);
	}
out:
	for (i = 0; i < nch; i++)
		zcrpc_channel_destroy(cs[i].ch);
	zcrpc_worker_destroy(cl.w);
	if (have_thread) {
		g_stop = 1;
		pthread_join(th, NULL);
	}
	return rc;
}
