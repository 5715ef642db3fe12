/* zcrpc echo server, built from idl/echo.proto with the generated stubs.
 *
 *   zcrpc_echo_server [-a ADDR] [-p PORT]
 *
 * Ping returns the request unchanged, Reverse returns the payload reversed.
 * Prints "listening on ADDR:PORT" once ready; SIGTERM stops it.
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "echo.zcrpc.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

/* Handlers named for ZCRPC__ECHO__ECHO__INIT(echo_). */
static void echo_ping(Zcrpc__Echo__Echo_Service *svc,
		      const Zcrpc__Echo__EchoRequest *in,
		      Zcrpc__Echo__EchoReply_Closure closure, void *cd)
{
	Zcrpc__Echo__EchoReply r = ZCRPC__ECHO__ECHO_REPLY__INIT;

	(void)svc;
	r.payload = in->payload; /* packed (copied) by the closure */
	r.seq = in->seq;
	closure(&r, cd);
}

static void echo_reverse(Zcrpc__Echo__Echo_Service *svc,
			 const Zcrpc__Echo__EchoRequest *in,
			 Zcrpc__Echo__EchoReply_Closure closure, void *cd)
{
	Zcrpc__Echo__EchoReply r = ZCRPC__ECHO__ECHO_REPLY__INIT;
	uint8_t *rev = malloc(in->payload.len ? in->payload.len : 1);
	size_t i;

	(void)svc;
	if (!rev) {
		zcrpc_pb_set_status(cd, ZCRPC_RESOURCE_EXHAUSTED, "out of memory");
		closure(NULL, cd);
		return;
	}
	for (i = 0; i < in->payload.len; i++)
		rev[i] = in->payload.data[in->payload.len - 1 - i];
	r.payload.data = rev;
	r.payload.len = in->payload.len;
	r.seq = in->seq;
	closure(&r, cd);
	free(rev);
}

int main(int argc, char **argv)
{
	static Zcrpc__Echo__Echo_Service impl = ZCRPC__ECHO__ECHO__INIT(echo_);
	const char *addr = NULL, *port = "7473";
	zcrpc_worker *w = NULL;
	zcrpc_server *s = NULL;
	zcrpc_status st;
	int opt, rc = 1;

	while ((opt = getopt(argc, argv, "a:p:h")) != -1) {
		switch (opt) {
		case 'a': addr = optarg; break;
		case 'p': port = optarg; break;
		default:
			fprintf(stderr, "usage: %s [-a ADDR] [-p PORT]\n", argv[0]);
			return opt == 'h' ? 0 : 2;
		}
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	if ((st = zcrpc_worker_create(NULL, &w)) != ZCRPC_OK ||
	    (st = zcrpc_server_create(w, NULL, &s)) != ZCRPC_OK ||
	    (st = zcrpc__echo__echo__zcrpc_register(s, &impl)) != ZCRPC_OK ||
	    (st = zcrpc_server_listen(s, addr, port)) != ZCRPC_OK) {
		fprintf(stderr, "echo server: %s%s%s\n", zcrpc_status_str(st),
			w ? "" : ": ", w ? "" : zcrpc_last_error());
		goto out;
	}
	printf("listening on %s:%u\n", addr ? addr : "*", zcrpc_server_get_port(s));
	fflush(stdout);
	while (!stop)
		zcrpc_worker_progress(w, 100);
	zcrpc_server_shutdown(s, 1000);
	rc = 0;
out:
	zcrpc_server_destroy(s);
	zcrpc_worker_destroy(w);
	return rc;
}
