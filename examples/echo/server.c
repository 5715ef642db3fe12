/* zcrpc echo server, built from idl/echo.proto with the generated stubs.
 *
 *   zcrpc_echo_server [-a ADDR] [-p PORT]
 *
 * Ping returns the request unchanged, Reverse returns the payload reversed.
 * The handlers keep no state, so the server runs on two workers of its own
 * (zcrpc_server_opts.threads, served by zcrpc_server_serve). Prints
 * "listening on ADDR:PORT" once ready; SIGINT or SIGTERM shuts it down
 * (1 s grace).
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "echo.zcrpc.h"

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
		zcrpc_pb_reply_error(cd, ZCRPC_RESOURCE_EXHAUSTED, "out of memory");
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
	static const int sigs[] = {SIGINT, SIGTERM};
	const char *addr = NULL, *port = "7473";
	zcrpc_server_opts so;
	zcrpc_serve_opts ro;
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
	zcrpc_server_opts_init(&so);
	so.threads = 2; /* workers the server makes and owns */
	if ((st = zcrpc_server_create(NULL, &so, &s)) != ZCRPC_OK ||
	    (st = zcrpc__echo__echo__zcrpc_register(s, &impl)) != ZCRPC_OK ||
	    (st = zcrpc_server_listen(s, addr, port)) != ZCRPC_OK) {
		fprintf(stderr, "echo server: %s%s%s\n", zcrpc_status_str(st),
			s ? "" : ": ", s ? "" : zcrpc_last_error());
		goto out;
	}
	printf("listening on %s:%u\n", addr ? addr : "*", zcrpc_server_get_port(s));
	fflush(stdout);
	zcrpc_serve_opts_init(&ro);
	ro.signals = sigs;
	ro.nsignals = 2;
	ro.grace_ms = 1000;
	zcrpc_server_serve(s, &ro); /* until SIGINT or SIGTERM, drained */
	rc = 0;
out:
	zcrpc_server_destroy(s);
	return rc;
}
