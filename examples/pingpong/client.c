/* zcrpc ping-pong client: sends N messages one at a time, checks that each
 * comes back byte for byte, and prints round-trip latency.
 *
 *   zcrpc_pingpong_client -a ADDR [-p PORT] [-n ITERS] [-s SIZE] [-t TIMEOUT_MS]
 *
 * Exits 0 when every reply matched, 1 otherwise.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <zcrpc/zcrpc.h>

struct client {
	int established, closed, got_reply, mismatches;
	zcrpc_status close_status;
	unsigned char *expect;
	size_t expect_len;
};

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void on_state(zcrpc_conn *conn, zcrpc_conn_state state,
		     zcrpc_status status, void *arg)
{
	struct client *cl = arg;

	if (state == ZCRPC_CONN_ESTABLISHED) {
		cl->established = 1;
	} else if (state == ZCRPC_CONN_CLOSED) {
		cl->closed = 1;
		cl->close_status = status;
		if (status != ZCRPC_OK)
			fprintf(stderr, "client: connection closed: %s: %s\n",
				zcrpc_status_str(status), zcrpc_conn_get_error(conn));
	}
}

static void on_recv(zcrpc_conn *conn, const void *data, size_t len, void *arg)
{
	struct client *cl = arg;

	(void)conn;
	if (len != cl->expect_len || memcmp(data, cl->expect, len) != 0)
		cl->mismatches++;
	cl->got_reply = 1;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	const char *addr = NULL, *port = "7471";
	long iters = 1000, size = 64, timeout_ms = 10000;
	struct client cl = {0};
	zcrpc_conn_handlers h = {
		.size = sizeof(h), .on_state = on_state, .on_recv = on_recv, .arg = &cl};
	zcrpc_connect_opts co;
	zcrpc_worker *w = NULL;
	zcrpc_conn *c = NULL;
	double *lat = NULL, t0;
	int opt, rc = 1;
	long i;
	zcrpc_status st;

	while ((opt = getopt(argc, argv, "a:p:n:s:t:h")) != -1) {
		switch (opt) {
		case 'a': addr = optarg; break;
		case 'p': port = optarg; break;
		case 'n': iters = atol(optarg); break;
		case 's': size = atol(optarg); break;
		case 't': timeout_ms = atol(optarg); break;
		default:
			fprintf(stderr, "usage: %s -a ADDR [-p PORT] [-n ITERS] [-s SIZE] [-t TIMEOUT_MS]\n", argv[0]);
			return opt == 'h' ? 0 : 2;
		}
	}
	if (!addr || iters < 1 || size < 0 || size > 4096 || timeout_ms < 1) {
		fprintf(stderr, "client: need -a ADDR, ITERS >= 1, 0 <= SIZE <= 4096\n");
		return 2;
	}
	cl.expect = malloc((size_t)size + 1);
	lat = malloc(sizeof(double) * (size_t)iters);
	if (!cl.expect || !lat)
		goto out;
	cl.expect_len = (size_t)size;

	st = zcrpc_worker_create(NULL, &w);
	if (st != ZCRPC_OK) {
		fprintf(stderr, "client: worker: %s: %s\n",
			zcrpc_status_str(st), zcrpc_last_error());
		goto out;
	}
	zcrpc_connect_opts_init(&co);
	co.timeout_ms = (int)timeout_ms;
	t0 = now_us();
	st = zcrpc_connect(w, addr, port, &co, &h, &c);
	if (st != ZCRPC_OK) {
		fprintf(stderr, "client: connect: %s\n", zcrpc_status_str(st));
		goto out;
	}
	while (!cl.established && !cl.closed)
		zcrpc_worker_progress(w, 10);
	if (!cl.established)
		goto out;
	printf("client: connected to %s:%s in %.1f ms\n", addr, port,
	       (now_us() - t0) / 1e3);

	for (i = 0; i < iters && !cl.closed; i++) {
		size_t k;

		for (k = 0; k < (size_t)size; k++)
			cl.expect[k] = (unsigned char)(i * 31 + k * 7);
		cl.got_reply = 0;
		t0 = now_us();
		st = zcrpc_conn_send(c, cl.expect, (size_t)size);
		while (st == ZCRPC_RESOURCE_EXHAUSTED && !cl.closed) {
			zcrpc_worker_progress(w, 0);
			st = zcrpc_conn_send(c, cl.expect, (size_t)size);
		}
		if (st != ZCRPC_OK) {
			fprintf(stderr, "client: send: %s\n", zcrpc_status_str(st));
			goto out;
		}
		while (!cl.got_reply && !cl.closed)
			zcrpc_worker_progress(w, 0);
		lat[i] = now_us() - t0;
	}
	if (cl.closed || cl.mismatches) {
		fprintf(stderr, "client: %ld of %ld round trips done, %d mismatched\n",
			i, iters, cl.mismatches);
		goto out;
	}
	qsort(lat, (size_t)iters, sizeof(double), cmp_double);
	printf("client: %ld round trips of %ld bytes, all verified; RTT p50 %.1f us, p99 %.1f us, max %.1f us\n",
	       iters, size, lat[iters / 2], lat[(iters * 99) / 100], lat[iters - 1]);
	zcrpc_conn_close(c);
	while (!cl.closed)
		zcrpc_worker_progress(w, 10);
	rc = cl.close_status == ZCRPC_OK ? 0 : 1;
out:
	zcrpc_conn_destroy(c);
	zcrpc_worker_destroy(w);
	free(lat);
	free(cl.expect);
	return rc;
}
