/* The server side of the rdma2 tests: runs in guest B (started by the
 * tests through `rxe-vm-ctl peer-run --bg`).
 *
 *   zcrpc_rdma2_peer_server -a ADDR -p PORT [-t ACK_TIMEOUT] [-r RETRIES]
 *                           [-k KEEPALIVE_MS]
 *
 * Methods:
 *   /zcrpc.test.Peer/Echo  replies with the request payload, and the
 *                          request's attachment in place
 *   /zcrpc.test.Peer/Hold  replies with the request after the number of
 *                          milliseconds in its first 4 bytes (little
 *                          endian), from another thread
 * Prints "listening on ADDR:PORT" once ready, and on SIGTERM a last line
 * "calls N replies N connections N" from its server counters, then exits.
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

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

/* Says why a client's connection went away (on stderr, which peer-wait
 * returns to the test). */
static void on_disconnect(zcrpc_server *s, zcrpc_conn *conn, zcrpc_status why, void *arg)
{
	(void)s;
	(void)arg;
	fprintf(stderr, "peer server: connection closed: %s (%s)\n", zcrpc_status_str(why),
		zcrpc_conn_get_error(conn));
}

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
	const char *addr = NULL, *port = NULL;
	zcrpc_worker_opts wo;
	zcrpc_worker *w = NULL;
	zcrpc_server *s = NULL;
	zcrpc_server_opts so;
	zcrpc_server_stats ss;
	zcrpc_status st = ZCRPC_INVALID_ARGUMENT;
	int opt, rc = 1;

	zcrpc_worker_opts_init(&wo);
	zcrpc_server_opts_init(&so);
	so.on_disconnect = on_disconnect;
	while ((opt = getopt(argc, argv, "a:p:t:r:k:")) != -1) {
		switch (opt) {
		case 'a': addr = optarg; break;
		case 'p': port = optarg; break;
		case 't': wo.ack_timeout_exp = (uint8_t)atoi(optarg); break;
		case 'r': wo.retry_count = (uint8_t)atoi(optarg); break;
		case 'k': wo.keepalive_ms = (uint32_t)atoi(optarg); break;
		default:
			fprintf(stderr, "usage: %s -a ADDR -p PORT [-t ACK_TIMEOUT] [-r RETRIES] "
				"[-k KEEPALIVE_MS]\n", argv[0]);
			return 2;
		}
	}
	if (!addr || !port) {
		fprintf(stderr, "%s: -a ADDR and -p PORT are required\n", argv[0]);
		return 2;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	if ((st = zcrpc_worker_create(&wo, &w)) != ZCRPC_OK ||
	    (st = zcrpc_server_create(w, &so, &s)) != ZCRPC_OK ||
	    (st = zcrpc_server_register(s, "/zcrpc.test.Peer/Echo", echo, NULL)) != ZCRPC_OK ||
	    (st = zcrpc_server_register(s, "/zcrpc.test.Peer/Hold", hold, NULL)) != ZCRPC_OK ||
	    (st = zcrpc_server_listen(s, addr, port)) != ZCRPC_OK) {
		fprintf(stderr, "peer server: %s\n", zcrpc_status_str(st));
		goto out;
	}
	printf("listening on %s:%u\n", addr, zcrpc_server_get_port(s));
	fflush(stdout);
	while (!stop)
		zcrpc_worker_progress(w, 100);
	zcrpc_server_get_stats(s, &ss, sizeof(ss));
	printf("calls %llu replies %llu connections %u\n", (unsigned long long)ss.calls,
	       (unsigned long long)ss.replies, ss.connections);
	fflush(stdout);
	rc = 0;
out:
	zcrpc_server_destroy(s);
	zcrpc_worker_destroy(w);
	return rc;
}
