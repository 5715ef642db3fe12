/* zcrpc RPC echo server: the smallest useful RPC service, on the
 * library's runtime (zcrpc_server_serve): the server makes THREADS workers,
 * one thread each, spreads the connections over them, and serves until
 * SIGINT or SIGTERM, then drains within 1 s.
 *
 *   zcrpc_rpc_echo_server [-a ADDR] [-p PORT] [-t THREADS]  (default 2)
 *
 * Methods:
 *   /zcrpc.example.Echo/Echo  replies with the request (payload and
 *                             attachment, in place)
 *   /zcrpc.example.Echo/Hold  replies with the request after the number of
 *                             milliseconds in its first 4 bytes (little
 *                             endian), from another thread
 * Prints "listening on ADDR:PORT" once ready; SIGTERM shuts down
 * gracefully (1 s grace).
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <zcrpc/zcrpc.h>

static void echo(zcrpc_server_call *call, const zcrpc_request *req, void *arg)
{
	zcrpc_reply_opts o;

	(void)arg;
	memset(&o, 0, sizeof(o));
	o.size = sizeof(o);
	if (req->attachment_len)
		o.attachment = &req->attachment_mr;
	zcrpc_server_call_reply(call, ZCRPC_OK, NULL, req->data, req->len, &o);
}

struct held {
	zcrpc_server_call *call;
	uint32_t ms;
	size_t len;
	unsigned char data[];
};

static void *hold_thread(void *arg)
{
	struct held *h = arg;
	struct timespec ts = {h->ms / 1000, (long)(h->ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
	zcrpc_server_call_reply_any_thread(h->call, ZCRPC_OK, NULL, h->data, h->len);
	free(h);
	return NULL;
}

static void hold(zcrpc_server_call *call, const zcrpc_request *req, void *arg)
{
	struct held *h;
	pthread_t t;

	(void)arg;
	if (req->len < 4) {
		zcrpc_server_call_reply(call, ZCRPC_INVALID_ARGUMENT, "need 4 bytes of milliseconds",
				 NULL, 0, NULL);
		return;
	}
	h = malloc(sizeof(*h) + req->len);
	if (!h) {
		zcrpc_server_call_reply(call, ZCRPC_RESOURCE_EXHAUSTED, "out of memory", NULL, 0, NULL);
		return;
	}
	h->call = call;
	memcpy(&h->ms, req->data, 4);
	h->len = req->len;
	memcpy(h->data, req->data, req->len);
	if (pthread_create(&t, NULL, hold_thread, h)) {
		free(h);
		zcrpc_server_call_reply(call, ZCRPC_RESOURCE_EXHAUSTED, "no thread", NULL, 0, NULL);
		return;
	}
	pthread_detach(t);
}

int main(int argc, char **argv)
{
	const char *addr = NULL, *port = "7472";
	static const int sigs[] = {SIGINT, SIGTERM};
	zcrpc_server_opts so;
	zcrpc_serve_opts ro;
	zcrpc_server *s = NULL;
	zcrpc_status st;
	int opt, rc = 1;

	zcrpc_server_opts_init(&so);
	so.threads = 2;
	while ((opt = getopt(argc, argv, "a:p:t:h")) != -1) {
		switch (opt) {
		case 'a': addr = optarg; break;
		case 'p': port = optarg; break;
		case 't': so.threads = (size_t)atoi(optarg); break;
		default:
			fprintf(stderr, "usage: %s [-a ADDR] [-p PORT] [-t THREADS]\n", argv[0]);
			return opt == 'h' ? 0 : 2;
		}
	}
	/* No worker given: the server makes so.threads of them and owns them. */
	if ((st = zcrpc_server_create(NULL, &so, &s)) != ZCRPC_OK ||
	    (st = zcrpc_server_register(s, "/zcrpc.example.Echo/Echo", echo, NULL)) != ZCRPC_OK ||
	    (st = zcrpc_server_register(s, "/zcrpc.example.Echo/Hold", hold, NULL)) != ZCRPC_OK ||
	    (st = zcrpc_server_listen(s, addr, port)) != ZCRPC_OK) {
		fprintf(stderr, "rpc echo server: %s%s%s\n", zcrpc_status_str(st),
			s ? "" : ": ", s ? "" : zcrpc_last_error());
		goto out;
	}
	printf("serving on %zu workers\n", zcrpc_server_get_nworkers(s));
	printf("listening on %s:%u\n", addr ? addr : "*", zcrpc_server_get_port(s));
	fflush(stdout);
	/* Runs every worker (this thread the first) until SIGINT or SIGTERM,
	 * then drains the calls in flight on all of them (1 s grace). */
	zcrpc_serve_opts_init(&ro);
	ro.signals = sigs;
	ro.nsignals = 2;
	ro.grace_ms = 1000;
	st = zcrpc_server_serve(s, &ro);
	printf("rpc echo server: shut down (%s)\n", zcrpc_status_str(st));
	rc = 0;
out:
	zcrpc_server_destroy(s); /* and the workers it made */
	return rc;
}
