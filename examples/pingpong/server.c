/* zcrpc ping-pong server: echoes every message back on the connection it
 * came from.
 *
 *   zcrpc_pingpong_server [-a ADDR] [-p PORT] [-c CONNS] [-b]
 *
 * -c: exit after CONNS connections have come and gone (default: run
 * forever). -b: busy-poll instead of sleeping on the worker's fd.
 * Prints "listening on ADDR:PORT" once ready.
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zcrpc/zcrpc.h>

static volatile sig_atomic_t stop;
static int closed_conns;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static void on_recv(zcrpc_conn *conn, const void *data, size_t len, void *arg)
{
	zcrpc_worker *w = arg;
	zcrpc_status st;

	/* The client waits for each reply, so a credit is always there; if
	 * not, progress until one comes back rather than drop the echo. */
	while ((st = zcrpc_conn_send(conn, data, len)) == ZCRPC_RESOURCE_EXHAUSTED)
		(void)w;
	if (st != ZCRPC_OK)
		fprintf(stderr, "server: echo failed: %s\n", zcrpc_status_str(st));
}

static void on_state(zcrpc_conn *conn, zcrpc_conn_state state,
		     zcrpc_status status, void *arg)
{
	zcrpc_conn_stats s;

	(void)arg;
	if (state != ZCRPC_CONN_CLOSED)
		return;
	zcrpc_conn_get_stats(conn, &s, sizeof(s));
	printf("server: connection closed (%s%s%s), echoed %llu messages, %llu bytes\n",
	       zcrpc_status_str(status), *zcrpc_conn_get_error(conn) ? ": " : "",
	       zcrpc_conn_get_error(conn), (unsigned long long)s.msgs_sent,
	       (unsigned long long)s.bytes_sent);
	fflush(stdout);
	closed_conns++;
	zcrpc_conn_destroy(conn);
}

static void on_accept(zcrpc_listener *l, zcrpc_conn *conn, void *arg)
{
	(void)l;
	(void)conn;
	(void)arg;
	printf("server: accepted a connection\n");
	fflush(stdout);
}

int main(int argc, char **argv)
{
	const char *addr = NULL, *port = "7471";
	int max_conns = -1, opt, rc = 1, busy = 0;
	zcrpc_worker *w = NULL;
	zcrpc_listener *l = NULL;
	zcrpc_listen_opts lo;
	zcrpc_conn_handlers lh;
	zcrpc_status st;

	while ((opt = getopt(argc, argv, "a:p:c:bh")) != -1) {
		switch (opt) {
		case 'a': addr = optarg; break;
		case 'p': port = optarg; break;
		case 'c': max_conns = atoi(optarg); break;
		case 'b': busy = 1; break;
		default:
			fprintf(stderr, "usage: %s [-a ADDR] [-p PORT] [-c CONNS] [-b]\n", argv[0]);
			return opt == 'h' ? 0 : 2;
		}
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);

	st = zcrpc_worker_create(NULL, &w);
	if (st != ZCRPC_OK) {
		fprintf(stderr, "server: worker: %s: %s\n",
			zcrpc_status_str(st), zcrpc_last_error());
		return 1;
	}
	zcrpc_listen_opts_init(&lo);
	zcrpc_conn_handlers_init(&lh);
	lo.on_accept = on_accept;
	lh.on_recv = on_recv;
	lh.on_state = on_state;
	lo.conn_handlers = &lh;
	st = zcrpc_listen(w, addr, port, &lo, &l);
	if (st != ZCRPC_OK) {
		fprintf(stderr, "server: listen on %s:%s: %s\n", addr ? addr : "*",
			port, zcrpc_status_str(st));
		goto out;
	}
	printf("listening on %s:%u\n", addr ? addr : "*", zcrpc_listener_get_port(l));
	fflush(stdout);

	while (!stop && (max_conns < 0 || closed_conns < max_conns)) {
		st = zcrpc_worker_progress(w, busy ? 0 : 100);
		if (st != ZCRPC_OK) {
			fprintf(stderr, "server: progress: %s\n", zcrpc_status_str(st));
			goto out;
		}
	}
	rc = 0;
out:
	zcrpc_listener_destroy(l);
	zcrpc_worker_destroy(w);
	return rc;
}
