/* zcrpc scale benchmark: N channels (connections) into one server process,
 * one call in flight on each, every reply verified; one JSON object per N
 * on stdout. Public API only (include/zcrpc/).
 *
 *   zcrpc_bench_scale [-a ADDR] [-p PORT] [-N 1,64,256,1024] [-W WINDOW]
 *                     [-C MAX_CALLS] [-S POOL_SLOTS] [-M PER_SOURCE]
 *                     [-P PROCS] [-u USEC] [-w WORKERS]
 *                     [-s SIZE] [-T SECONDS] [-b BATCH] [-t TIMEOUT]
 *                     [-c CONNECT_MS] [-i] [-D DEVICE] [-L LABEL] [-k]
 *
 * For each N (-N, a comma list) the coordinator (this process, which never
 * touches RDMA itself) forks a fresh server process (one worker, busy
 * polling, an echo method; -u makes the handler spin USEC µs of CPU on
 * clock_gettime before it replies, the shape of a real service; -w puts
 * the server on WORKERS workers sharing one context, one thread each, the
 * connections spread over them by the library: issue 13's 1-versus-2
 * workers measurement) on port PORT + index of N, then -P client processes (default 1) that share the
 * N channels. Each client opens its channels in batches of -b (default
 * 16): zcrpc_channel_create plus one verified call each (the channel
 * connects on its first call), so a batch's connects run concurrently.
 * The first channel that fails ends the client's connect phase: its index
 * and the error text are reported, the connected ones still run. Then,
 * for -T seconds (default 5) after 0.5 s of warm-up, every connected
 * channel keeps one call of -s bytes (default 16) in flight; each reply's
 * payload must equal the request's (a pattern of channel index and call
 * sequence number), or it is counted in "bad".
 *
 * Reported per N: setup wall time (the slowest client's connect phase) and
 * that divided by the channels connected; the server's worker and server
 * counters (pool slots, pool bytes registered, pool_exhausted, ...) and
 * its VmRSS / VmHWM / VmPin / VmLck (/proc/PID/status) before the clients,
 * once connected and after the run; the clients' VmRSS; calls/s of all
 * channels; rxe's RNR counters (DEVICE, default $ZCRPC_RXE_DEV0 or rxe0:
 * /sys/class/infiniband/DEV/ports/1/hw_counters/{rcvd,send}_rnr_err)
 * before and after. Printed, never asserted.
 *
 * Server and clients busy-poll (zcrpc_worker_progress(w, 0)); with -i they
 * wait in zcrpc_worker_progress(w, 1) instead (sleeping until an event or
 * 1 ms), which leaves the vCPUs to rxe's kernel work.
 * -c sets the channels' connect_timeout_ms (default the library's 10 s).
 * -W sets zcrpc_server_opts.window and zcrpc_channel_opts.window, -C the
 * channels' max_calls, -S the workers' pool_max_slots (0 = the library's
 * defaults, the point of the "defaults" rows), -M the server's
 * max_conns_per_source (0 = unlimited; default the library's, 64: every
 * client of this benchmark connects from the same address, so runs
 * beyond 64 channels need -M 0). Once an N failed, the
 * larger N of the list are skipped (reported as skipped) unless -k.
 * -t bounds each phase of an N (default 900 s): then every process is
 * killed and the N reported as failed. Exit status 0 unless a process
 * died of a signal (failures to connect are results, not errors; each
 * process's exit is in "exits"), 2 on bad arguments.
 */
#include "bench_common.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <sys/wait.h>

#include <zcrpc/zcrpc.h>

#define ECHO	  "/zcrpc.bench.Scale/Echo"
#define MAX_N	  32
#define MAX_PROCS 16
#define MAX_WORKERS 8
#define LINE	  2048

struct cfg {
	const char *addr, *dev, *label;
	int port, procs, batch, keep_going, timeout_s, connect_ms, poll_ms;
	uint32_t window, max_calls, pool_slots;
	long per_source; /* -M: max_conns_per_source, -1 = the library's */
	long handler_us;
	int workers; /* -w: the server's workers (threads), default 1 */
	size_t size;
	double secs;
};

/* ---- small helpers ------------------------------------------------------ */

/* Writes @s whole; the pipes are private, a short write only on EINTR. */
static void put(int fd, const char *s)
{
	size_t n = strlen(s);

	while (n) {
		ssize_t k = write(fd, s, n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return;
		s += k;
		n -= (size_t)k;
	}
}

/* Reads one line (without its '\n') within @timeout_ms (-1: forever).
 * Returns its length, -1 on EOF, error or timeout. Reads byte by byte:
 * a handful of short lines per run. */
static int get_line(int fd, char *buf, size_t cap, int timeout_ms)
{
	size_t n = 0;
	double end = bench_now_us() + timeout_ms * 1e3;

	while (n + 1 < cap) {
		struct pollfd p = {fd, POLLIN, 0};
		int left = timeout_ms < 0 ? -1
					  : (int)((end - bench_now_us()) / 1e3);
		char c;
		ssize_t k;

		if (timeout_ms >= 0 && left <= 0)
			return -1;
		if (poll(&p, 1, left) <= 0)
			continue;
		k = read(fd, &c, 1);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		if (c == '\n')
			break;
		buf[n++] = c;
	}
	buf[n] = '\0';
	return (int)n;
}

/* Non-zero when a byte is waiting on @fd (no wait); it is read into *@c. */
static int poll_byte(int fd, char *c)
{
	struct pollfd p = {fd, POLLIN, 0};

	if (poll(&p, 1, 0) <= 0)
		return 0;
	if (read(fd, c, 1) != 1)
		*c = 'q'; /* EOF: the coordinator is gone */
	return 1;
}

/* @s as a JSON string body (quotes and control characters escaped). */
static void json_escape(char *dst, size_t cap, const char *s)
{
	size_t n = 0;

	for (; *s && n + 7 < cap; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			n += (size_t)snprintf(dst + n, cap - n, "\\%c", c);
		else if (c < 0x20)
			n += (size_t)snprintf(dst + n, cap - n, "\\u%04x", c);
		else
			dst[n++] = (char)c;
	}
	dst[n] = '\0';
}

/* VmRSS, VmHWM, VmPin, VmLck of @pid in KiB as a JSON object. */
static void proc_mem(pid_t pid, char *out, size_t cap)
{
	static const char *keys[] = {"VmRSS", "VmHWM", "VmPin", "VmLck"};
	long v[4] = {-1, -1, -1, -1};
	char path[64], line[256];
	FILE *f;
	int i;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f))
		for (i = 0; i < 4; i++)
			if (!strncmp(line, keys[i], 5) && line[5] == ':')
				v[i] = atol(line + 6);
	if (f)
		fclose(f);
	snprintf(out, cap,
		 "{\"rss_kib\":%ld,\"hwm_kib\":%ld,\"pin_kib\":%ld,\"lck_kib\":"
		 "%ld}",
		 v[0], v[1], v[2], v[3]);
}

static long read_counter(const char *dev, const char *name)
{
	char path[256];
	long v = -1;
	FILE *f;

	snprintf(path, sizeof(path),
		 "/sys/class/infiniband/%s/ports/1/hw_counters/%s", dev, name);
	f = fopen(path, "r");
	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

static void rnr(const char *dev, char *out, size_t cap)
{
	snprintf(out, cap, "{\"rcvd_rnr_err\":%ld,\"send_rnr_err\":%ld}",
		 read_counter(dev, "rcvd_rnr_err"),
		 read_counter(dev, "send_rnr_err"));
}

/* The request (and so the reply) payload of call @seq on channel @id. */
static void pattern(uint8_t *dst, size_t len, uint32_t id, uint64_t seq)
{
	uint64_t x = ((uint64_t)id << 40) ^ seq ^ 0x5ca1ab1e00000000ull;
	size_t i;

	for (i = 0; i < len; i += 8) {
		uint64_t v = x + (i / 8) * 0x9e3779b97f4a7c15ull;

		memcpy(dst + i, &v, len - i < 8 ? len - i : 8);
	}
}

/* ---- server process ----------------------------------------------------- */

static void h_echo(zcrpc_server_call *call, const zcrpc_request *req, void *arg)
{
	const struct cfg *c = arg;

	if (c->handler_us > 0) {
		double t0 = bench_now_us();

		while (bench_now_us() - t0 < (double)c->handler_us)
			;
	}
	zcrpc_server_call_reply(call, ZCRPC_OK, NULL, req->data, req->len,
				NULL);
}

static unsigned long g_passes; /* the server's progress passes */

/* Starts a stats line in @line with the connections of each worker. */
static const char *line_prefix(char *line, size_t len, const char *per)
{
	snprintf(line, len, "{\"server_conns_per_worker\":[%s],", per);
	return line;
}

static void server_stats(zcrpc_worker *w, zcrpc_server *srv, int fd)
{
	zcrpc_worker_stats ws;
	zcrpc_server_stats ss;
	char line[LINE];

	char per[256] = "";
	size_t i, k = 0;

	/* The transport's counters are the first worker's; the server's
	 * are the sum of its workers (and each one's connections). */
	zcrpc_worker_get_stats(w, &ws, sizeof(ws));
	zcrpc_server_get_stats(srv, &ss, sizeof(ss));
	for (i = 0; i < zcrpc_server_get_nworkers(srv) && k < sizeof(per) - 16;
	     i++) {
		zcrpc_server_stats one;

		zcrpc_server_get_worker_stats(srv, i, &one, sizeof(one));
		k += (size_t)snprintf(per + k, sizeof(per) - k, "%s%u",
				      i ? "," : "", one.connections);
	}
	k = strlen(line_prefix(line, sizeof(line), per));
	snprintf(line + k, sizeof(line) - k,
		 "\"conns\":%u,\"pool_in_use\":%u,\"pool_capacity\":%u,\"pool_"
		 "exhausted\":%llu,"
		 "\"pool_pinned\":%llu,\"rnr_events\":%llu,\"credit_stalls\":%"
		 "llu,"
		 "\"calls\":%llu,\"replies\":%llu,\"rejected_busy\":%llu,"
		 "\"handshake_timeouts\":%llu,\"recv_budget\":%u,"
		 "\"recv_posted\":%u,\"recv_promised\":%u,"
		 "\"rejected_budget\":%llu,\"rejected_source_limit\":%llu,"
		 "\"rejected_conn_limit\":%llu,\"passes\":%lu,\"t_us\":%.0f}\n",
		 ws.conns, ws.pool_in_use, ws.pool_capacity,
		 (unsigned long long)ws.pool_exhausted,
		 (unsigned long long)ss.pool_pinned,
		 (unsigned long long)ws.rnr_events,
		 (unsigned long long)ws.credit_stalls,
		 (unsigned long long)ss.calls, (unsigned long long)ss.replies,
		 (unsigned long long)ws.rejected_busy,
		 (unsigned long long)ws.handshake_timeouts, ws.recv_budget,
		 ws.recv_posted, ws.recv_promised,
		 (unsigned long long)ws.rejected_budget,
		 (unsigned long long)ws.rejected_source_limit,
		 (unsigned long long)ws.rejected_conn_limit, g_passes,
		 bench_now_us());
	put(fd, line);
}

/* A server worker other than the first: progressed by its own thread. */
struct srv_thread {
	zcrpc_worker *w;
	const struct cfg *c;
	atomic_int *stop;
	pthread_t t;
};

static void *srv_thread_main(void *arg)
{
	struct srv_thread *t = arg;

	while (!atomic_load_explicit(t->stop, memory_order_relaxed))
		zcrpc_worker_progress(t->w, t->c->poll_ms);
	return NULL;
}

/* Serves until 'q' (or EOF) on @req; 's' answers one stats line on @resp.
 * With -w, the first worker is progressed here and each other by a thread
 * of its own. Long for its set-up and teardown in order. */
static int server_proc(struct cfg *c, int port, int req, int resp)
{
	zcrpc_worker_opts wo;
	zcrpc_server_opts so;
	zcrpc_context *ctx = NULL;
	zcrpc_worker *ws[MAX_WORKERS] = {0};
	struct srv_thread th[MAX_WORKERS];
	atomic_int stop = 0;
	zcrpc_server *srv = NULL;
	zcrpc_status st;
	char line[LINE], portstr[16], cmd;
	int i, nw = c->workers, nt = 0;

	zcrpc_worker_opts_init(&wo);
	if (c->pool_slots)
		wo.pool_max_slots = c->pool_slots;
	zcrpc_server_opts_init(&so);
	if (c->window)
		so.window = c->window;
	if (c->per_source >= 0)
		so.max_conns_per_source = (uint32_t)c->per_source;
	snprintf(portstr, sizeof(portstr), "%d", port);
	st = zcrpc_context_create(&ctx);
	wo.context = ctx;
	for (i = 0; st == ZCRPC_OK && i < nw; i++)
		st = zcrpc_worker_create(&wo, &ws[i]);
	so.workers = ws;
	so.nworkers = (size_t)nw;
	if (st != ZCRPC_OK ||
	    (st = zcrpc_server_create(ws[0], &so, &srv)) != ZCRPC_OK ||
	    (st = zcrpc_server_register(srv, ECHO, h_echo, c)) != ZCRPC_OK ||
	    (st = zcrpc_server_listen(srv, c->addr, portstr)) != ZCRPC_OK) {
		snprintf(line, sizeof(line), "error server: %s %s\n",
			 zcrpc_status_str(st), zcrpc_last_error());
		put(resp, line);
		goto out;
	}
	for (i = 1; i < nw; i++) {
		th[nt] = (struct srv_thread){ws[i], c, &stop, 0};
		if (pthread_create(&th[nt].t, NULL, srv_thread_main, &th[nt]))
			break;
		nt++;
	}
	put(resp, "ready\n");
	for (;;) {
		zcrpc_worker_progress(ws[0], c->poll_ms);
		if (((++g_passes & 127) && !c->poll_ms) ||
		    !poll_byte(req, &cmd))
			continue;
		if (cmd == 's')
			server_stats(ws[0], srv, resp);
		else if (cmd == 'q')
			break;
	}
	atomic_store(&stop, 1);
	for (i = 0; i < nt; i++)
		pthread_join(th[i].t, NULL);
out:
	zcrpc_server_destroy(srv);
	for (i = 0; i < nw; i++)
		zcrpc_worker_destroy(ws[i]);
	zcrpc_context_destroy(ctx);
	return st == ZCRPC_OK ? 0 : 1;
}

/* ---- client process ----------------------------------------------------- */

struct client;

struct sch {
	struct client *cl;
	zcrpc_channel *ch;
	uint32_t id;
	uint64_t seq;
	int busy, ok;
	char *err; /* why its first failed call failed (strdup), or NULL */
};

struct client {
	const struct cfg *c;
	zcrpc_worker *w;
	struct sch *chs;
	int n, running, pending;
	uint32_t method;
	uint8_t *expect;
	long done, failed, bad;
	char err[512];
};

static void fill(void *dst, size_t len, void *ctx)
{
	struct sch *s = ctx;

	pattern(dst, len, s->id, s->seq);
}

static int start(struct sch *s);

static void on_done(zcrpc_channel *ch, const zcrpc_reply *r, void *arg)
{
	struct sch *s = arg;
	struct client *cl = s->cl;

	(void)ch;
	s->busy = 0;
	cl->pending--;
	if (r->status != ZCRPC_OK) {
		char msg[sizeof(cl->err)];

		cl->failed++;
		snprintf(msg, sizeof(msg), "channel %u: %s: %s", s->id + 1,
			 zcrpc_status_str(r->status),
			 r->message ? r->message : "");
		if (!cl->err[0])
			snprintf(cl->err, sizeof(cl->err), "%s", msg);
		if (!s->err && !cl->running) /* the connect phase keeps it */
			s->err = strdup(msg);
		return;
	}
	pattern(cl->expect, cl->c->size, s->id, s->seq);
	if (r->len != cl->c->size || memcmp(r->data, cl->expect, r->len)) {
		cl->bad++;
		return;
	}
	cl->done++;
	s->ok = 1;
	if (cl->running)
		start(s);
}

static int start(struct sch *s)
{
	struct client *cl = s->cl;
	zcrpc_status st;

	s->seq++;
	st = zcrpc_call_start(s->ch, cl->method, cl->c->size, fill, s, NULL,
			      on_done, s, NULL);
	if (st != ZCRPC_OK) {
		char msg[128];

		cl->failed++;
		snprintf(msg, sizeof(msg), "channel %u: call_start: %s",
			 s->id + 1, zcrpc_status_str(st));
		if (!cl->err[0])
			snprintf(cl->err, sizeof(cl->err), "%s", msg);
		if (!s->err && !cl->running)
			s->err = strdup(msg);
		return 1;
	}
	s->busy = 1;
	cl->pending++;
	return 0;
}

static void drain(struct client *cl, double max_us)
{
	double t0 = bench_now_us();

	while (cl->pending > 0 && bench_now_us() - t0 < max_us)
		zcrpc_worker_progress(cl->w, cl->c->poll_ms);
}

/* Opens the channels in batches; stops after the first batch with a
 * failure (its failed channels are destroyed, so they do not retry).
 * Returns the index + 1 of the first channel (in index order) that failed,
 * 0 when all connected; cl->err then says why that channel failed. */
static int connect_all(struct client *cl, const zcrpc_channel_opts *co)
{
	int i, j, end, failed_at = 0;
	char port[16];

	snprintf(port, sizeof(port), "%d", cl->c->port);
	for (i = 0; i < cl->n && !failed_at; i = end) {
		end = i + cl->c->batch < cl->n ? i + cl->c->batch : cl->n;
		for (j = i; j < end; j++) {
			struct sch *s = &cl->chs[j];

			if (zcrpc_channel_create(cl->w, cl->c->addr, port, co,
						 &s->ch) != ZCRPC_OK) {
				s->err = strdup("channel_create failed");
				end = j + 1;
				break;
			}
			start(s);
		}
		drain(cl, 120e6);
		for (j = i; j < end && !failed_at; j++)
			if (!cl->chs[j].ok)
				failed_at = (int)cl->chs[j].id + 1;
	}
	if (failed_at) {
		const char *e = cl->chs[failed_at - 1 - cl->chs[0].id].err;

		snprintf(cl->err, sizeof(cl->err), "%s",
			 e ? e : "its call did not complete");
	}
	for (j = 0; j < cl->n; j++) {
		if (cl->chs[j].ch && !cl->chs[j].ok) {
			zcrpc_channel_destroy(cl->chs[j].ch);
			cl->chs[j].ch = NULL;
		}
		free(cl->chs[j].err);
		cl->chs[j].err = NULL;
	}
	return failed_at;
}

/* Every connected channel keeps one call in flight for c->secs. */
static void run_calls(struct client *cl, int resp)
{
	double t0, t1, end;
	long d0, d1;
	unsigned pass = 0;
	char line[LINE];
	int j;

	cl->running = 1;
	for (j = 0; j < cl->n; j++)
		if (cl->chs[j].ok && !cl->chs[j].busy)
			start(&cl->chs[j]);
	t0 = bench_now_us();
	while (bench_now_us() - t0 < 5e5)
		zcrpc_worker_progress(cl->w, cl->c->poll_ms);
	d0 = cl->done;
	t0 = t1 = bench_now_us();
	end = t0 + cl->c->secs * 1e6;
	while (t1 < end) {
		zcrpc_worker_progress(cl->w, cl->c->poll_ms);
		if (!(++pass & 15) || cl->c->poll_ms)
			t1 = bench_now_us();
	}
	t1 = bench_now_us();
	d1 = cl->done;
	cl->running = 0;
	drain(cl, 30e6);
	snprintf(line, sizeof(line), "ran %ld %.6f %ld %ld %d %u\n", d1 - d0,
		 (t1 - t0) / 1e6, cl->failed, cl->bad, cl->pending, pass);
	put(resp, line);
}

/* Channels [first, first + n): connect, report, run on 'g', close on 'q'. */
static int client_proc(struct cfg *c, int first, int n, int req, int resp)
{
	struct client cl = {0};
	zcrpc_worker_opts wo;
	zcrpc_channel_opts co;
	char line[LINE], cmd = 0;
	double t0;
	int j, failed_at, rc = 1;

	cl.c = c;
	cl.n = n;
	cl.method = zcrpc_method_id(ECHO);
	cl.chs = calloc((size_t)n, sizeof(*cl.chs));
	cl.expect = malloc(c->size + 8);
	zcrpc_worker_opts_init(&wo);
	if (c->pool_slots)
		wo.pool_max_slots = c->pool_slots;
	if (!cl.chs || !cl.expect ||
	    zcrpc_worker_create(&wo, &cl.w) != ZCRPC_OK) {
		snprintf(line, sizeof(line), "error client: setup: %s\n",
			 zcrpc_last_error());
		put(resp, line);
		goto out;
	}
	for (j = 0; j < n; j++) {
		cl.chs[j].cl = &cl;
		cl.chs[j].id = (uint32_t)(first + j);
	}
	zcrpc_channel_opts_init(&co);
	if (c->window)
		co.window = c->window;
	if (c->max_calls)
		co.max_calls = c->max_calls;
	if (c->connect_ms)
		co.connect_timeout_ms = c->connect_ms;
	t0 = bench_now_us();
	failed_at = connect_all(&cl, &co);
	for (j = 0; cl.err[j]; j++) /* one line on the pipe */
		if (cl.err[j] == '\n')
			cl.err[j] = ' ';
	snprintf(line, sizeof(line), "connected %ld %.6f %d %s\n", cl.done,
		 (bench_now_us() - t0) / 1e6, failed_at, cl.err);
	put(resp, line);
	/* Keep the connections served while the other clients connect. */
	while (!poll_byte(req, &cmd))
		zcrpc_worker_progress(cl.w, 1);
	if (cmd == 'g') {
		cl.done = cl.failed = cl.bad = 0;
		cl.err[0] = '\0';
		run_calls(&cl, resp);
		while (!poll_byte(req, &cmd))
			zcrpc_worker_progress(cl.w, 1);
	}
	rc = 0;
out:
	for (j = 0; cl.chs && j < n; j++)
		zcrpc_channel_destroy(cl.chs[j].ch);
	zcrpc_worker_destroy(cl.w);
	free(cl.chs);
	free(cl.expect);
	return rc;
}

/* ---- coordinator -------------------------------------------------------- */

struct proc {
	pid_t pid;
	int req, resp; /* our ends: write commands, read lines */
};

/* Forks a child running server_proc (@first < 0) or client_proc. */
static int spawn(struct proc *p, struct cfg *c, int port, int first, int n)
{
	int a[2], b[2];

	if (pipe(a) || pipe(b))
		return -1;
	fflush(stdout);
	fflush(stderr);
	p->pid = fork();
	if (p->pid < 0)
		return -1;
	if (p->pid == 0) {
		close(a[1]);
		close(b[0]);
		c->port = port;
		_exit(first < 0 ? server_proc(c, port, a[0], b[1])
				: client_proc(c, first, n, a[0], b[1]));
	}
	close(a[0]);
	close(b[1]);
	p->req = a[1];
	p->resp = b[0];
	return 0;
}

/* Ends @p: 'q', then SIGKILL if it has not exited within @grace_ms. Its
 * exit as text ("0", "exit 3", "signal 9") in @why. */
static void reap(struct proc *p, int grace_ms, char *why, size_t cap)
{
	int status = 0, i;
	pid_t r = 0;

	if (p->pid <= 0)
		return;
	put(p->req, "q");
	for (i = 0;
	     i < grace_ms / 10 && (r = waitpid(p->pid, &status, WNOHANG)) == 0;
	     i++)
		bench_sleep_us(10000);
	if (r == 0) {
		kill(p->pid, SIGKILL);
		waitpid(p->pid, &status, 0);
	}
	if (WIFEXITED(status))
		snprintf(why, cap, WEXITSTATUS(status) ? "exit %d" : "0",
			 WEXITSTATUS(status));
	else
		snprintf(why, cap, "signal %d", WTERMSIG(status));
	close(p->req);
	close(p->resp);
	p->pid = 0;
}

static void srv_snapshot(struct proc *s, char *out, size_t cap)
{
	char st[LINE], mem[256];

	put(s->req, "s");
	if (get_line(s->resp, st, sizeof(st), 30000) <= 0)
		snprintf(st, sizeof(st), "null");
	proc_mem(s->pid, mem, sizeof(mem));
	snprintf(out, cap, "{\"stats\":%.1700s,\"mem\":%.250s}", st, mem);
}

struct row {
	int n, connected, failed_at, ok;
	double setup_s, run_s,
		passes_per_s; /* passes: each client's, averaged */
	long calls, failed, bad, client_rss_kib;
	char err[LINE], srv0[LINE], srv1[LINE], srv2[LINE], rnr0[128],
		rnr1[128];
	char exits[256];
};

/* The connect phase of every client: sums their lines into @r. */
static int collect_connected(struct proc *cl, int np, struct row *r,
			     int timeout_ms)
{
	char line[LINE], *p;
	int i;

	for (i = 0; i < np; i++) {
		long k;
		double secs;
		int fa, f;

		if (get_line(cl[i].resp, line, sizeof(line), timeout_ms) < 0) {
			snprintf(r->err, sizeof(r->err),
				 "client %d: no answer (timeout or crash)", i);
			return -1;
		}
		if (sscanf(line, "connected %ld %lf %d", &k, &secs, &fa) != 3) {
			snprintf(r->err, sizeof(r->err), "client %d: %.1900s",
				 i, line);
			return -1;
		}
		r->connected += (int)k;
		r->setup_s = secs > r->setup_s ? secs : r->setup_s;
		if (fa && (!r->failed_at || fa < r->failed_at)) {
			r->failed_at = fa;
			p = strchr(line,
				   ' '); /* "connected K SECS FA ERROR..." */
			for (f = 0; p && f < 3; f++)
				p = strchr(p + 1, ' ');
			snprintf(r->err, sizeof(r->err), "%s", p ? p + 1 : "");
		}
	}
	return 0;
}

static int collect_ran(struct proc *cl, int np, struct row *r, int timeout_ms)
{
	char line[LINE];
	int i;

	for (i = 0; i < np; i++) {
		long calls, failed, bad;
		double secs;
		int pending;
		unsigned passes;

		if (get_line(cl[i].resp, line, sizeof(line), timeout_ms) < 0 ||
		    sscanf(line, "ran %ld %lf %ld %ld %d %u", &calls, &secs,
			   &failed, &bad, &pending, &passes) != 6) {
			snprintf(r->err, sizeof(r->err),
				 "client %d: no result of the run", i);
			return -1;
		}
		r->calls += calls;
		r->failed += failed;
		r->bad += bad + pending;
		r->run_s = secs > r->run_s ? secs : r->run_s;
		if (secs > 0)
			r->passes_per_s += passes / secs / np;
	}
	return 0;
}

static void print_row(const struct cfg *c, const struct row *r)
{
	char err[LINE];

	json_escape(err, sizeof(err), r->err);
	printf("{\"bench\":\"zcrpc_scale\",\"label\":\"%s\",\"n\":%d,\"procs\":"
	       "%d,\"server_workers\":%d,"
	       "\"window\":%u,\"max_calls\":%u,\"pool_max_slots\":%u,\"handler_"
	       "us\":%ld,"
	       "\"size\":%zu,\"ok\":%s,\"connected\":%d,\"failed_at\":%d,"
	       "\"error\":\"%s\","
	       "\"setup_s\":%.3f,\"connect_ms_per_conn\":%.2f,\"secs\":%.3f,"
	       "\"client_passes_per_s\":%.1f,\"calls\":%ld,"
	       "\"calls_per_s\":%.1f,\"failed_calls\":%ld,\"bad_replies\":%ld,"
	       "\"client_rss_kib\":%ld,\"server_before\":%s,\"server_"
	       "connected\":%s,"
	       "\"server_after\":%s,\"rnr_before\":%s,\"rnr_after\":%s,"
	       "\"exits\":\"%s\"}\n",
	       c->label, r->n, c->procs, c->workers, c->window, c->max_calls, c->pool_slots,
	       c->handler_us, c->size, r->ok ? "true" : "false", r->connected,
	       r->failed_at, err, r->setup_s,
	       r->connected ? r->setup_s * 1e3 / r->connected : 0.0, r->run_s,
	       r->passes_per_s, r->calls,
	       r->run_s > 0 ? (double)r->calls / r->run_s : 0.0, r->failed,
	       r->bad, r->client_rss_kib, r->srv0[0] ? r->srv0 : "null",
	       r->srv1[0] ? r->srv1 : "null", r->srv2[0] ? r->srv2 : "null",
	       r->rnr0, r->rnr1, r->exits);
	fflush(stdout);
}

/* One N: a fresh server and c->procs clients. Returns 0 when all N
 * connected and ran, 1 otherwise (the row says why), 2 when a process
 * died of a signal. */
static int run_n(struct cfg *c, int n, int port)
{
	struct proc srv = {0}, cl[MAX_PROCS];
	struct row *r = calloc(1, sizeof(*r));
	char line[LINE] = "", mem[256], why[32] = "";
	int i, np = c->procs < n ? c->procs : n, to = c->timeout_s * 1000,
	       rc = 1;
	size_t k = 0;

	if (!r)
		return 1;
	memset(cl, 0, sizeof(cl));
	r->n = n;
	bench_progress("  scale %s: N = %d (%d client process(es))\n", c->label,
		       n, np);
	rnr(c->dev, r->rnr0, sizeof(r->rnr0));
	if (spawn(&srv, c, port, -1, 0) ||
	    get_line(srv.resp, line, sizeof(line), 60000) < 0 ||
	    strcmp(line, "ready")) {
		snprintf(r->err, sizeof(r->err), "%s",
			 line[0] ? line : "server did not start");
		goto out;
	}
	srv_snapshot(&srv, r->srv0, sizeof(r->srv0));
	for (i = 0; i < np; i++) {
		int first = n * i / np, last = n * (i + 1) / np;

		if (spawn(&cl[i], c, port, first, last - first)) {
			snprintf(r->err, sizeof(r->err), "fork: %s",
				 strerror(errno));
			goto out;
		}
	}
	if (collect_connected(cl, np, r, to))
		goto out;
	srv_snapshot(&srv, r->srv1, sizeof(r->srv1));
	for (i = 0; i < np; i++)
		put(cl[i].req, "g");
	if (collect_ran(cl, np, r, (int)(c->secs * 1000) + 60000))
		goto out;
	srv_snapshot(&srv, r->srv2, sizeof(r->srv2));
	for (i = 0; i < np; i++) {
		long rss;

		proc_mem(cl[i].pid, mem, sizeof(mem));
		if (sscanf(mem, "{\"rss_kib\":%ld", &rss) == 1)
			r->client_rss_kib += rss;
	}
	r->ok = !r->failed_at && r->connected == n && !r->failed && !r->bad;
	rc = !r->ok;
out:
	for (i = 0; i < np; i++) {
		if (cl[i].pid <= 0) /* never started */
			continue;
		reap(&cl[i], 60000, why, sizeof(why));
		k += (size_t)snprintf(r->exits + k, sizeof(r->exits) - k,
				      "client%d %s, ", i, why);
	}
	reap(&srv, 30000, why, sizeof(why));
	snprintf(r->exits + k, sizeof(r->exits) - k, "server %s", why);
	rnr(c->dev, r->rnr1, sizeof(r->rnr1));
	print_row(c, r);
	if (strstr(r->exits, "signal"))
		rc = 2;
	free(r);
	return rc;
}

static int parse_list(const char *s, int *out, int max)
{
	int n = 0;

	while (*s && n < max) {
		char *end;
		long v = strtol(s, &end, 10);

		if (end == s || v < 1)
			return -1;
		out[n++] = (int)v;
		s = *end == ',' ? end + 1 : end;
		if (*end && *end != ',')
			return -1;
	}
	return n;
}

int main(int argc, char **argv)
{
	struct cfg c = {.addr = "192.0.2.1",
			.dev = getenv("ZCRPC_RXE_DEV0"),
			.label = "scale",
			.port = 18800,
			.procs = 1,
			.batch = 16,
			.timeout_s = 900,
			.size = 16,
			.secs = 5,
			.per_source = -1,
			.workers = 1};
	int ns[MAX_N], nn = 0, i, opt, skip = 0, rc = 0, r;
	const char *list = "1,64,256,1024";

	while ((opt = getopt(argc, argv,
			     "a:p:N:W:C:S:M:P:u:w:s:T:b:t:c:iD:L:kh")) != -1) {
		switch (opt) {
		case 'a':
			c.addr = optarg;
			break;
		case 'p':
			c.port = atoi(optarg);
			break;
		case 'N':
			list = optarg;
			break;
		case 'W':
			c.window = (uint32_t)atol(optarg);
			break;
		case 'C':
			c.max_calls = (uint32_t)atol(optarg);
			break;
		case 'M':
			c.per_source = atol(optarg);
			break;
		case 'S':
			c.pool_slots = (uint32_t)atol(optarg);
			break;
		case 'P':
			c.procs = atoi(optarg);
			break;
		case 'u':
			c.handler_us = atol(optarg);
			break;
		case 'w':
			c.workers = atoi(optarg);
			break;
		case 's':
			c.size = (size_t)atol(optarg);
			break;
		case 'T':
			c.secs = atof(optarg);
			break;
		case 'b':
			c.batch = atoi(optarg);
			break;
		case 't':
			c.timeout_s = atoi(optarg);
			break;
		case 'c':
			c.connect_ms = atoi(optarg);
			break;
		case 'i':
			c.poll_ms = 1;
			break;
		case 'D':
			c.dev = optarg;
			break;
		case 'L':
			c.label = optarg;
			break;
		case 'k':
			c.keep_going = 1;
			break;
		default:
			fprintf(stderr,
				"usage: %s [-a ADDR] [-p PORT] [-N LIST] [-W "
				"WINDOW] "
				"[-C MAX_CALLS] [-S POOL_SLOTS] [-M "
				"PER_SOURCE] [-P PROCS] [-u "
				"USEC] [-w WORKERS] [-s SIZE] "
				"[-T SECONDS] [-b BATCH] [-t TIMEOUT] [-c "
				"CONNECT_MS] [-i] [-D DEVICE] "
				"[-L LABEL] [-k]\n",
				argv[0]);
			return opt == 'h' ? 0 : 2;
		}
	}
	nn = parse_list(list, ns, MAX_N);
	if (nn < 1 || c.procs < 1 || c.procs > MAX_PROCS || c.batch < 1 ||
	    c.workers < 1 || c.workers > MAX_WORKERS ||
	    c.secs <= 0 || c.size < 1 || c.size > 4000 || c.timeout_s < 1 ||
	    strchr(c.label, '"')) {
		fprintf(stderr, "bad arguments\n");
		return 2;
	}
	if (!c.dev)
		c.dev = "rxe0";
	signal(SIGPIPE, SIG_IGN);
	for (i = 0; i < nn; i++) {
		if (skip) {
			printf("{\"bench\":\"zcrpc_scale\",\"label\":\"%s\","
			       "\"n\":%d,\"skipped\":"
			       "\"a smaller N failed\"}\n",
			       c.label, ns[i]);
			continue;
		}
		r = run_n(&c, ns[i], c.port + i);
		if (r == 2)
			rc = 1;
		if (r && !c.keep_going)
			skip = 1;
	}
	fflush(stdout);
	return rc;
}
