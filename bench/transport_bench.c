/* zcrpc transport benchmark: message ping-pong latency and RDMA-write
 * bandwidth over zcrpc_conn_*, one JSON object per result line on stdout.
 *
 *   zcrpc_bench_transport [-r both|server|client] [-a ADDR] [-p PORT]
 *                         [-m lat|bw|rate] [-s SIZES] [-n ITERS] [-w WARMUP]
 *                         [-B BYTES] [-d DEPTH] [-e]
 *
 * -r both (default) runs the server on a thread of this process; "server"
 *    serves until SIGTERM/SIGINT; "client" needs a server at ADDR:PORT.
 * -m lat: for each size (default 16,256,4K), -n round trips (default 10000)
 *    after -w warm-up ones, one in flight, both sides busy-polling. Client:
 *    zcrpc_msg_alloc + 8-byte sequence number + zcrpc_conn_send_msg, then
 *    progress(0) until the echo arrives; the server echoes the received
 *    slot itself (zcrpc_conn_recv_keep + zcrpc_conn_send_msg, no copy),
 *    or with -e copies it back (zcrpc_conn_send).
 * -m bw: for each size (default 4K..64M) RDMA WRITEs (zcrpc_conn_write, no
 *    immediate) of that size into a region the server granted, -d in flight
 *    (default: 128, fewer for big sizes), about -B bytes (default 256M)
 *    per size. MiB/s = bytes / time from the first post to the last
 *    completion.
 * -m rate: one-way message rate, like ib_send_bw: -n messages (default
 *    10000, after -w warm-up ones) of the first size (default 16) sent as
 *    fast as credits allow (zcrpc_msg_alloc + zcrpc_conn_send_msg), both
 *    workers' recv_depth -d (default 64: perftest's tx depth), so -d
 *    messages are in flight; the server drops them (they carry a sink
 *    mark). The clock stops when the echo of one last ordinary message
 *    arrives (RC delivers in order: every message before it was
 *    received). msgs/s = messages / time.
 * Sizes: comma list, K/M suffixes. Exit 0 when every run completed.
 */
#include "bench_common.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <zcrpc/zcrpc.h>

#define MAX_MSG 8192
#define BW_REGION_DEFAULT (64u << 20)
#define SINK_MARK	  0xfeedfacecafef00dull /* -m rate: the server drops these */

static volatile sig_atomic_t g_stop;
static const char *g_addr = "192.0.2.1", *g_port = "18600";
static size_t g_region = BW_REGION_DEFAULT;
static int g_echo_copy;
static uint32_t g_rate_depth; /* -m rate: both workers' recv_depth */

static void on_signal(int sig)
{
	(void)sig;
	g_stop = 1;
}

static void worker_opts(zcrpc_worker_opts *o)
{
	zcrpc_worker_opts_init(o);
	o->max_msg = MAX_MSG;
	o->recv_depth = g_rate_depth ? g_rate_depth : 128;
	o->send_depth = g_rate_depth ? g_rate_depth : 128;
}

/* ---- server ------------------------------------------------------------- */

struct server {
	zcrpc_worker *w;
	zcrpc_mr *mr;
	void *region;
	int ready, failed;
};

static void srv_recv(zcrpc_conn *conn, const void *data, size_t len, void *arg)
{
	zcrpc_msg m;
	zcrpc_status st;

	(void)arg;
	if (len >= 8 && !memcmp(data, &(uint64_t){SINK_MARK}, 8))
		return; /* -m rate: counted by the client, dropped here */
	if (g_echo_copy) {
		st = zcrpc_conn_send(conn, data, len);
		goto done;
	}
	st = zcrpc_conn_recv_keep(conn, &m);
	if (st == ZCRPC_OK) {
		st = zcrpc_conn_send_msg(conn, &m, len);
		if (st != ZCRPC_OK) {
			zcrpc_msg_free(((struct server *)arg)->w, &m);
			st = zcrpc_conn_send(conn, data, len);
		}
	} else {
		st = zcrpc_conn_send(conn, data, len);
	}
done:
	if (st != ZCRPC_OK)
		fprintf(stderr, "server: echo failed: %s\n", zcrpc_status_str(st));
}

static void srv_state(zcrpc_conn *conn, zcrpc_conn_state state,
		      zcrpc_status status, void *arg)
{
	(void)arg;
	(void)status;
	if (state == ZCRPC_CONN_CLOSED)
		zcrpc_conn_destroy(conn);
}

static void srv_accept(zcrpc_listener *l, zcrpc_conn *conn, void *arg)
{
	struct server *s = arg;
	zcrpc_remote_region r;
	uint8_t buf[ZCRPC_REMOTE_REGION_LEN];
	zcrpc_status st;

	(void)l;
	/* Every connection learns where it may write (the bw mode uses it). */
	st = zcrpc_mr_grant(s->mr, conn, 0, g_region, &r, NULL); /* lasts as long as the connection */
	if (st == ZCRPC_OK) {
		zcrpc_remote_region_encode(&r, buf);
		st = zcrpc_conn_send(conn, buf, sizeof(buf));
	}
	if (st != ZCRPC_OK)
		fprintf(stderr, "server: grant: %s\n", zcrpc_status_str(st));
}

static void *server_main(void *arg)
{
	struct server *s = arg;
	zcrpc_worker_opts wo;
	zcrpc_listen_opts lo;
	zcrpc_conn_handlers lh;
	zcrpc_listener *l = NULL;
	zcrpc_status st;

	bench_pin(1);
	worker_opts(&wo);
	st = zcrpc_worker_create(&wo, &s->w);
	if (st == ZCRPC_OK) {
		s->region = calloc(1, g_region);
		st = s->region ? zcrpc_mr_register(zcrpc_worker_get_context(s->w), s->region,
						   g_region, ZCRPC_MR_REMOTE_WRITE, &s->mr)
			       : ZCRPC_RESOURCE_EXHAUSTED;
	}
	if (st == ZCRPC_OK) {
		zcrpc_listen_opts_init(&lo);
		zcrpc_conn_handlers_init(&lh);
		lo.on_accept = srv_accept;
		lo.arg = s;
		lh.on_recv = srv_recv;
		lh.on_state = srv_state;
		lh.arg = s;
		lo.conn_handlers = &lh;
		st = zcrpc_listen(s->w, g_addr, g_port, &lo, &l);
	}
	if (st != ZCRPC_OK) {
		fprintf(stderr, "server: %s\n", zcrpc_status_str(st));
		__atomic_store_n(&s->failed, 1, __ATOMIC_RELEASE);
		goto out;
	}
	fprintf(stderr, "server: listening on %s:%s\n", g_addr, g_port);
	__atomic_store_n(&s->ready, 1, __ATOMIC_RELEASE);
	while (!g_stop)
		zcrpc_worker_progress(s->w, 0);
out:
	zcrpc_listener_destroy(l);
	zcrpc_worker_destroy(s->w);
	zcrpc_mr_deregister(s->mr);
	free(s->region);
	return NULL;
}

/* ---- client ------------------------------------------------------------- */

struct client {
	zcrpc_worker *w;
	zcrpc_conn *c;
	int established, closed;
	uint64_t got_seq;
	int got;
	zcrpc_remote_region region;
	int have_region;
	long writes_done, write_errors;
};

static void cl_state(zcrpc_conn *conn, zcrpc_conn_state state,
		     zcrpc_status status, void *arg)
{
	struct client *cl = arg;

	if (state == ZCRPC_CONN_ESTABLISHED) {
		cl->established = 1;
	} else if (state == ZCRPC_CONN_CLOSED) {
		cl->closed = 1;
		if (status != ZCRPC_OK)
			fprintf(stderr, "client: closed: %s: %s\n", zcrpc_status_str(status),
				zcrpc_conn_get_error(conn));
	}
}

static void cl_recv(zcrpc_conn *conn, const void *data, size_t len, void *arg)
{
	struct client *cl = arg;

	(void)conn;
	if (!cl->have_region) {
		if (zcrpc_remote_region_decode(data, len, &cl->region) == ZCRPC_OK)
			cl->have_region = 1;
		return;
	}
	if (len >= 8)
		memcpy(&cl->got_seq, data, 8);
	cl->got = 1;
}

static void cl_write_done(zcrpc_conn *conn, void *ctx, zcrpc_status st, void *arg)
{
	struct client *cl = arg;

	(void)conn;
	(void)ctx;
	if (st != ZCRPC_OK)
		cl->write_errors++;
	cl->writes_done++;
}

static int run_lat(struct client *cl, const size_t *sizes, int nsizes, long iters,
		   long warmup)
{
	double *lat = malloc(sizeof(double) * (size_t)iters);
	int k;

	if (!lat)
		return 1;
	for (k = 0; k < nsizes; k++) {
		size_t size = sizes[k] < 8 ? 8 : sizes[k];
		long i;

		bench_progress("  transport lat %zu B: %ld round trips\n", size, iters);
		for (i = -warmup; i < iters && !cl->closed; i++) {
			uint64_t seq = (uint64_t)(i + warmup + 1);
			zcrpc_msg m;
			zcrpc_status st;
			double t0 = bench_now_us();

			while ((st = zcrpc_msg_alloc(cl->w, size, &m)) == ZCRPC_RESOURCE_EXHAUSTED)
				zcrpc_worker_progress(cl->w, 0);
			if (st != ZCRPC_OK)
				goto fail;
			memcpy(m.data, &seq, 8);
			cl->got = 0;
			while ((st = zcrpc_conn_send_msg(cl->c, &m, size)) == ZCRPC_RESOURCE_EXHAUSTED &&
			       !cl->closed)
				zcrpc_worker_progress(cl->w, 0);
			if (st != ZCRPC_OK) {
				zcrpc_msg_free(cl->w, &m);
				goto fail;
			}
			while (!cl->got && !cl->closed)
				zcrpc_worker_progress(cl->w, 0);
			if (cl->got_seq != seq) {
				fprintf(stderr, "client: echo mismatch\n");
				goto fail;
			}
			if (i >= 0)
				lat[i] = bench_now_us() - t0;
		}
		if (cl->closed)
			goto fail;
		bench_print_lat("zcrpc_transport_lat", size, lat, (size_t)iters,
				"\"api\":\"zcrpc_msg_alloc+zcrpc_conn_send_msg\",\"poll\":\"busy\"");
	}
	free(lat);
	return 0;
fail:
	free(lat);
	return 1;
}

/* Sends one message of @size starting with @seq, waiting for credit. */
static int send_one(struct client *cl, size_t size, uint64_t seq)
{
	zcrpc_msg m;
	zcrpc_status st;

	while ((st = zcrpc_msg_alloc(cl->w, size, &m)) ==
	       ZCRPC_RESOURCE_EXHAUSTED)
		zcrpc_worker_progress(cl->w, 0);
	if (st != ZCRPC_OK)
		return 1;
	memset(m.data, 0, size);
	memcpy(m.data, &seq, 8);
	while ((st = zcrpc_conn_send_msg(cl->c, &m, size)) ==
		       ZCRPC_RESOURCE_EXHAUSTED &&
	       !cl->closed)
		zcrpc_worker_progress(cl->w, 0);
	if (st != ZCRPC_OK) {
		zcrpc_msg_free(cl->w, &m);
		return 1;
	}
	return 0;
}

/* -m rate (see the top of the file). */
static int run_rate(struct client *cl, size_t size, long iters, long warmup)
{
	long phase, i, n;
	double t0 = 0, dt;

	if (size < 8)
		size = 8;
	bench_progress("  transport rate %zu B: %ld messages, %u in flight\n",
		       size, iters, g_rate_depth);
	for (phase = 0; phase < 2; phase++) {
		n = phase ? iters : warmup;
		t0 = bench_now_us();
		for (i = 0; i < n; i++)
			if (send_one(cl, size, SINK_MARK))
				goto fail;
		cl->got = 0;
		if (send_one(cl, size, (uint64_t)phase + 1))
			goto fail;
		while (!cl->got && !cl->closed)
			zcrpc_worker_progress(cl->w, 0);
		if (cl->closed || cl->got_seq != (uint64_t)phase + 1)
			goto fail;
	}
	dt = (bench_now_us() - t0) / 1e6;
	printf("{\"bench\":\"zcrpc_transport_rate\",\"size\":%zu,\"iters\":%ld,"
	       "\"depth\":%u,"
	       "\"secs\":%.4f,\"msgs_per_s\":%.1f}\n",
	       size, iters, g_rate_depth, dt, (double)iters / dt);
	fflush(stdout);
	return 0;
fail:
	fprintf(stderr, "client: rate: send failed or the connection closed\n");
	return 1;
}

static int run_bw(struct client *cl, const size_t *sizes, int nsizes, double total,
		  long depth_opt)
{
	zcrpc_mr *mr = NULL;
	void *src = NULL;
	size_t max = 0;
	int k, rc = 1;

	for (k = 0; k < nsizes; k++)
		max = sizes[k] > max ? sizes[k] : max;
	if (max > cl->region.len) {
		fprintf(stderr, "client: size %zu above the granted region %llu\n", max,
			(unsigned long long)cl->region.len);
		return 1;
	}
	src = malloc(max);
	if (!src)
		return 1;
	memset(src, 0x5a, max);
	if (zcrpc_mr_register(zcrpc_worker_get_context(cl->w), src, max, 0, &mr) != ZCRPC_OK)
		goto out;
	for (k = 0; k < nsizes; k++) {
		size_t size = sizes[k];
		long n = bench_bulk_iters(size, total, 2, 100000), posted = 0;
		long depth = depth_opt > 0 ? depth_opt : bench_bulk_iters(size, 128.0 * 1048576, 2, 128);
		double t0, dt;

		bench_progress("  transport write bw %zu B: %ld writes, %ld in flight\n", size, n, depth);
		cl->writes_done = cl->write_errors = 0;
		t0 = bench_now_us();
		while (cl->writes_done < n && !cl->closed) {
			while (posted < n && posted - cl->writes_done < depth) {
				zcrpc_status st = zcrpc_conn_write(cl->c, mr, 0, size, &cl->region, 0,
								   NULL, NULL);
				if (st != ZCRPC_OK) {
					fprintf(stderr, "client: write: %s\n", zcrpc_status_str(st));
					goto out;
				}
				posted++;
			}
			zcrpc_worker_progress(cl->w, 0);
		}
		dt = (bench_now_us() - t0) / 1e6;
		if (cl->closed || cl->write_errors) {
			fprintf(stderr, "client: %ld write errors\n", cl->write_errors);
			goto out;
		}
		printf("{\"bench\":\"zcrpc_transport_write_bw\",\"size\":%zu,\"iters\":%ld,"
		       "\"depth\":%ld,\"secs\":%.4f,\"mib_s\":%.3f,\"msg_rate\":%.1f}\n",
		       size, n, depth, dt, (double)size * (double)n / 1048576.0 / dt,
		       (double)n / dt);
		fflush(stdout);
	}
	rc = 0;
out:
	zcrpc_mr_deregister(mr);
	free(src);
	return rc;
}

int main(int argc, char **argv)
{
	const char *role = "both", *mode = "lat", *sizes_arg = NULL;
	size_t sizes[BENCH_MAX_SIZES];
	long iters = 10000, warmup = 1000, depth = 0;
	double total = 256.0 * 1048576;
	int nsizes, opt, rc = 1;
	struct server srv = {0};
	pthread_t th;
	int have_thread = 0;
	struct client cl = {0};
	zcrpc_conn_handlers h = {.size = sizeof(h), .on_state = cl_state, .on_recv = cl_recv,
				 .on_write_done = cl_write_done, .arg = &cl};
	zcrpc_worker_opts wo;
	zcrpc_connect_opts co;
	double t0;

	while ((opt = getopt(argc, argv, "r:a:p:m:s:n:w:B:d:eh")) != -1) {
		switch (opt) {
		case 'r': role = optarg; break;
		case 'a': g_addr = optarg; break;
		case 'p': g_port = optarg; break;
		case 'm': mode = optarg; break;
		case 's': sizes_arg = optarg; break;
		case 'n': iters = atol(optarg); break;
		case 'w': warmup = atol(optarg); break;
		case 'B': total = atof(optarg); break;
		case 'd': depth = atol(optarg); break;
		case 'e': g_echo_copy = 1; break;
		default:
			fprintf(stderr,
				"usage: %s [-r both|server|client] [-a ADDR] "
				"[-p PORT] "
				"[-m lat|bw|rate] [-s SIZES] [-n ITERS] [-w "
				"WARMUP] [-B BYTES] [-d DEPTH] [-e]\n",
				argv[0]);
			return opt == 'h' ? 0 : 2;
		}
	}
	if (!sizes_arg)
		sizes_arg = strcmp(mode, "bw") ? "16,256,4K" : "4K,64K,256K,1M,4M,8M,16M,64M";
	nsizes = bench_parse_sizes(sizes_arg, sizes, BENCH_MAX_SIZES);
	if (nsizes < 1 || iters < 1 || warmup < 0 ||
	    (strcmp(mode, "lat") && strcmp(mode, "bw") &&
	     strcmp(mode, "rate"))) {
		fprintf(stderr, "bad arguments\n");
		return 2;
	}
	if (!strcmp(mode, "rate")) {
		g_rate_depth = depth > 0 ? (uint32_t)depth : 64;
	}
	if (!strcmp(mode, "lat") || !strcmp(mode, "rate")) {
		for (opt = 0; opt < nsizes; opt++)
			if (sizes[opt] > MAX_MSG) {
				fprintf(stderr, "lat sizes are at most %d\n", MAX_MSG);
				return 2;
			}
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);

	if (!strcmp(role, "server")) {
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
	zcrpc_connect_opts_init(&co);
	t0 = bench_now_us();
	if (zcrpc_connect(cl.w, g_addr, g_port, &co, &h, &cl.c) != ZCRPC_OK)
		goto out;
	while ((!cl.established || !cl.have_region) && !cl.closed)
		zcrpc_worker_progress(cl.w, 1);
	if (cl.closed)
		goto out;
	bench_progress("client: connected in %.1f ms\n", (bench_now_us() - t0) / 1e3);

	if (!strcmp(mode, "lat"))
		rc = run_lat(&cl, sizes, nsizes, iters, warmup);
	else if (!strcmp(mode, "rate"))
		rc = run_rate(&cl, sizes[0], iters, warmup);
	else
		rc = run_bw(&cl, sizes, nsizes, total, depth);
	if (rc == 0) {
		zcrpc_conn_stats s;

		zcrpc_conn_get_stats(cl.c, &s, sizeof(s));
		printf("{\"bench\":\"zcrpc_transport_stats\",\"mode\":\"%s\",\"max_inline\":%u,"
		       "\"copied_bytes\":%llu,\"credit_stalls\":%llu,\"rnr_events\":%llu}\n",
		       mode, s.max_inline, (unsigned long long)s.copied_bytes,
		       (unsigned long long)s.credit_stalls, (unsigned long long)s.rnr_events);
	}
	zcrpc_conn_close(cl.c);
	t0 = bench_now_us();
	while (!cl.closed && bench_now_us() - t0 < 2e6)
		zcrpc_worker_progress(cl.w, 1);
out:
	zcrpc_conn_destroy(cl.c);
	zcrpc_worker_destroy(cl.w);
	if (have_thread) {
		g_stop = 1;
		pthread_join(th, NULL);
	}
	return rc;
}
