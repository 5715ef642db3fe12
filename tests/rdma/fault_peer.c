/* zcrpc_test_fault_peer - the other process of rdma.Faults.* and rdma.Soak.*:
 * the tests kill it (SIGKILL), stop it (SIGSTOP) or run it under a
 * locked-memory limit.
 *
 *   server ADDR PORT [WINDOW]
 *                           the soak server (soak_peer.h) on ADDR:PORT
 *                           ("0" = ephemeral; WINDOW = its receive window);
 *                           prints "listening PORT" once ready; serves
 *                           until SIGTERM
 *   client ADDR PORT SEED N N random calls (soak_client_run); prints the
 *                           counts; exit 0 when they balance
 *   idle ADDR PORT          one Echo call to the soak server at ADDR:PORT,
 *                           then prints "ready" and keeps the connection
 *                           up, idle (nothing in flight), until killed
 *   memlock ADDR PORT       under a locked-memory limit of at most
 *                           64 KiB: registration and the pool fail
 *                           RESOURCE_EXHAUSTED naming `ulimit -l` and
 *                           leave nothing behind; after raising the
 *                           limit (setrlimit) both work (a call to
 *                           the soak server at ADDR:PORT). One line per
 *                           step on stdout; exit 0 when all held.
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "soak_peer.h"

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static int run_server(const char *addr, const char *port, const char *window)
{
	zcrpc_worker *w = NULL;
	zcrpc_server *s = NULL;
	zcrpc_server_opts so;
	struct soak_server *ss = NULL;
	zcrpc_status st;
	int rc = 1;

	signal(SIGTERM, on_term);
	zcrpc_server_opts_init(&so);
	if (window)
		so.window = (uint32_t)strtoul(window, NULL, 10);
	if ((st = zcrpc_worker_create(NULL, &w)) != ZCRPC_OK ||
	    (st = zcrpc_server_create(w, &so, &s)) != ZCRPC_OK) {
		fprintf(stderr, "fault peer: %s\n", zcrpc_status_str(st));
		goto out;
	}
	ss = soak_server_new(s);
	if (!ss || (st = zcrpc_server_listen(s, addr, port)) != ZCRPC_OK) {
		fprintf(stderr, "fault peer: listen: %s\n", zcrpc_status_str(st));
		goto out;
	}
	printf("listening %u\n", zcrpc_server_get_port(s));
	fflush(stdout);
	while (!stop) {
		zcrpc_worker_progress(w, 10);
		soak_server_tick(ss);
	}
	rc = 0;
out:
	soak_server_free(ss);
	zcrpc_server_destroy(s);
	zcrpc_worker_destroy(w);
	return rc;
}

static int run_client(const char *addr, const char *port, const char *seed,
		      const char *n)
{
	struct soak_cfg cfg;
	struct soak_counts c;
	int rc;

	memset(&cfg, 0, sizeof(cfg));
	cfg.addr = addr;
	cfg.port = port;
	cfg.seed = strtoull(seed, NULL, 10);
	cfg.calls = strtoull(n, NULL, 10);
	cfg.in_flight = 32;
	cfg.bulk_pct = 3;
	cfg.max_bulk = 128 << 10;
	cfg.slow_pct = 10;
	cfg.deadline_pct = 10;
	cfg.cancel_pct = 5;
	/* By hand: ZCRPC_SOAK_MIX="bulk slow deadline cancel in_flight" (%). */
	if (getenv("ZCRPC_SOAK_MIX"))
		sscanf(getenv("ZCRPC_SOAK_MIX"), "%u %u %u %u %u", &cfg.bulk_pct,
		       &cfg.slow_pct, &cfg.deadline_pct, &cfg.cancel_pct,
		       &cfg.in_flight);
	rc = soak_client_run(&cfg, &c);
	soak_counts_print(&c, "child client");
	return rc;
}

static int run_idle(const char *addr, const char *port)
{
	zcrpc_worker *w = NULL;
	zcrpc_channel *ch = NULL;
	zcrpc_result res;
	zcrpc_status st;

	if ((st = zcrpc_worker_create(NULL, &w)) != ZCRPC_OK ||
	    (st = zcrpc_channel_create(w, addr, port, NULL, &ch)) != ZCRPC_OK ||
	    (st = zcrpc_call(ch, zcrpc_method_id(SOAK_ECHO), "idle", 4, NULL,
			     &res, sizeof(res))) != ZCRPC_OK) {
		fprintf(stderr, "fault peer: idle: %s\n", zcrpc_status_str(st));
		return 1;
	}
	zcrpc_result_free(&res);
	printf("ready\n");
	fflush(stdout);
	for (;;)
		zcrpc_worker_progress(w, 100);
}

/* ---- memlock ------------------------------------------------------------ */

struct conn_state {
	int established, closed;
	zcrpc_status why;
};

static void on_state(zcrpc_conn *c, zcrpc_conn_state s, zcrpc_status why,
		     void *arg)
{
	struct conn_state *cs = arg;

	(void)c;
	if (s == ZCRPC_CONN_ESTABLISHED)
		cs->established = 1;
	if (s == ZCRPC_CONN_CLOSED) {
		cs->closed = 1;
		cs->why = why;
	}
}

static int64_t ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int check(int cond, const char *what)
{
	printf("%s %s\n", cond ? "held:" : "FAILED:", what);
	return cond ? 0 : 1;
}

static int run_memlock(const char *addr, const char *port)
{
	static char buf[1 << 20];
	struct conn_state cs = {0, 0, ZCRPC_OK};
	zcrpc_conn_handlers h;
	struct rlimit rl;
	zcrpc_worker *w = NULL;
	zcrpc_worker_stats ws;
	zcrpc_channel *ch = NULL;
	zcrpc_conn *c = NULL;
	zcrpc_mr *mr = NULL;
	zcrpc_result res;
	zcrpc_status st;
	int64_t end;
	int bad = 0;

	if (getrlimit(RLIMIT_MEMLOCK, &rl) || rl.rlim_cur > 64 * 1024) {
		printf("FAILED: RLIMIT_MEMLOCK soft limit is not <= 64 KiB\n");
		return 1;
	}
	printf("limit: soft %llu hard %llu\n", (unsigned long long)rl.rlim_cur,
	       (unsigned long long)rl.rlim_max);
	st = zcrpc_worker_create(NULL, &w);
	bad |= check(st == ZCRPC_OK, "limited: worker created (its pool grows on first use)");
	if (st != ZCRPC_OK)
		return 1;
	st = zcrpc_mr_register(zcrpc_worker_get_context(w), buf, sizeof(buf), 0, &mr);
	printf("limited: mr_register %s\n", zcrpc_status_str(st));
	bad |= check(st == ZCRPC_RESOURCE_EXHAUSTED && !mr,
		     "limited: registering 1 MiB is RESOURCE_EXHAUSTED");
	memset(&h, 0, sizeof(h));
	h.size = sizeof(h);
	h.on_state = on_state;
	h.arg = &cs;
	st = zcrpc_connect(w, addr, port, NULL, &h, &c);
	end = ms_now() + 20000;
	while (st == ZCRPC_OK && !cs.closed && !cs.established && ms_now() < end)
		zcrpc_worker_progress(w, 10);
	printf("limited: connection %s: %s\n", zcrpc_status_str(cs.why),
	       c ? zcrpc_conn_get_error(c) : "");
	bad |= check(cs.closed && cs.why == ZCRPC_RESOURCE_EXHAUSTED,
		     "limited: the connection fails RESOURCE_EXHAUSTED");
	bad |= check(c && strstr(zcrpc_conn_get_error(c), "ulimit -l") != NULL,
		     "limited: its message names ulimit -l");
	zcrpc_conn_destroy(c);
	end = ms_now() + 5000;
	do {
		zcrpc_worker_progress(w, 10);
		zcrpc_worker_get_stats(w, &ws, sizeof(ws));
	} while (ws.conns && ms_now() < end);
	printf("limited: conns %u pool_capacity %u pool_in_use %u\n", ws.conns,
	       ws.pool_capacity, ws.pool_in_use);
	bad |= check(ws.conns == 0 && ws.pool_capacity == 0 && ws.pool_in_use == 0,
		     "limited: no partial state (no connection, no pool slot)");

	/* Raise the limit (root keeps CAP_SYS_RESOURCE): everything works. */
	rl.rlim_cur = rl.rlim_max = RLIM_INFINITY;
	if (setrlimit(RLIMIT_MEMLOCK, &rl)) {
		printf("FAILED: cannot raise the limit\n");
		zcrpc_worker_destroy(w);
		return 1;
	}
	st = zcrpc_mr_register(zcrpc_worker_get_context(w), buf, sizeof(buf), 0, &mr);
	bad |= check(st == ZCRPC_OK, "raised: registering 1 MiB works");
	zcrpc_mr_deregister(mr);
	st = zcrpc_channel_create(w, addr, port, NULL, &ch);
	if (st == ZCRPC_OK) {
		st = zcrpc_call(ch, zcrpc_method_id(SOAK_ECHO), "after", 5,
				NULL, &res, sizeof(res));
		bad |= check(st == ZCRPC_OK && res.len == 5 &&
				     memcmp(res.data, "after", 5) == 0,
			     "raised: a call through the same worker works");
		zcrpc_result_free(&res);
	} else {
		bad |= check(0, "raised: channel created");
	}
	zcrpc_channel_destroy(ch);
	zcrpc_worker_get_stats(w, &ws, sizeof(ws));
	bad |= check(ws.pool_capacity > 0, "raised: the pool grew");
	zcrpc_worker_destroy(w);
	return bad;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if ((argc == 4 || argc == 5) && !strcmp(argv[1], "server"))
		return run_server(argv[2], argv[3], argc == 5 ? argv[4] : NULL);
	if (argc == 6 && !strcmp(argv[1], "client"))
		return run_client(argv[2], argv[3], argv[4], argv[5]);
	if (argc == 4 && !strcmp(argv[1], "idle"))
		return run_idle(argv[2], argv[3]);
	if (argc == 4 && !strcmp(argv[1], "memlock"))
		return run_memlock(argv[2], argv[3]);
	fprintf(stderr,
		"usage: %s server ADDR PORT [WINDOW] | client ADDR PORT SEED N "
		"| idle ADDR PORT | memlock ADDR PORT\n",
		argv[0]);
	return 2;
}
