/* zcrpc_test_victim ADDR PORT - the peer of rdma.Keepalive tests: a host that
 * dies without a word.
 *
 * Connects to ADDR:PORT (retry_count 3, so the server's passive QP retries
 * 3 times too; keepalive off), sends one message and waits for its echo,
 * then moves its QP to the error state with zcrpc__conn_test_break_qp()
 * (no rdma_disconnect, no DREQ), prints "broken" and sleeps until killed.
 * rxe drops whatever reaches a QP in error, so the server's next
 * transmission goes unanswered until its retries run out. The kernel sends
 * a DREQ when this process dies: the test kills it only after its checks.
 * Exit status 1 (with a message on stderr) when any step fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transport/internal.h"

struct victim {
	int established, closed, echoed;
};

static void on_state(zcrpc_conn *c, zcrpc_conn_state st, zcrpc_status s,
		     void *arg)
{
	struct victim *v = arg;

	(void)c;
	(void)s;
	if (st == ZCRPC_CONN_ESTABLISHED)
		v->established = 1;
	else if (st == ZCRPC_CONN_CLOSED)
		v->closed = 1;
}

static void on_recv(zcrpc_conn *c, const void *data, size_t len, void *arg)
{
	struct victim *v = arg;

	(void)c;
	if (len == 5 && memcmp(data, "hello", 5) == 0)
		v->echoed = 1;
}

/* Progresses @w until *@flag, the connection closed, or 20 s passed. */
static int wait_for(zcrpc_worker *w, const int *flag, const struct victim *v)
{
	int64_t end = zcrpc__now_ns() + 20000LL * 1000000LL;

	while (!*flag && !v->closed && zcrpc__now_ns() < end)
		zcrpc_worker_progress(w, 10);
	return *flag;
}

int main(int argc, char **argv)
{
	struct victim v = {0, 0, 0};
	zcrpc_conn_handlers h = {
		.size = sizeof(h), .on_state = on_state, .on_recv = on_recv,
		.arg = &v};
	zcrpc_worker_opts o;
	zcrpc_worker *w;
	zcrpc_conn *c;
	zcrpc_status st;

	if (argc != 3) {
		fprintf(stderr, "usage: %s ADDR PORT\n", argv[0]);
		return 2;
	}
	zcrpc_worker_opts_init(&o);
	o.retry_count = 3;
	o.ack_timeout_exp = 14;
	o.keepalive_ms = 0;
	st = zcrpc_worker_create(&o, &w);
	if (st != ZCRPC_OK) {
		fprintf(stderr, "victim: worker: %s\n", zcrpc_status_str(st));
		return 1;
	}
	st = zcrpc_connect(w, argv[1], argv[2], NULL, &h, &c);
	if (st != ZCRPC_OK || !wait_for(w, &v.established, &v)) {
		fprintf(stderr, "victim: connect: %s %s\n", zcrpc_status_str(st),
			zcrpc_conn_get_error(c));
		return 1;
	}
	st = zcrpc_conn_send(c, "hello", 5);
	if (st != ZCRPC_OK || !wait_for(w, &v.echoed, &v)) {
		fprintf(stderr, "victim: no echo: %s %s\n", zcrpc_status_str(st),
			zcrpc_conn_get_error(c));
		return 1;
	}
	st = zcrpc__conn_test_break_qp(c);
	if (st != ZCRPC_OK) {
		fprintf(stderr, "victim: break: %s\n", zcrpc_status_str(st));
		return 1;
	}
	printf("broken\n");
	fflush(stdout);
	for (;;) /* no progress, no destroy: the QP stays silent */
		pause();
}
