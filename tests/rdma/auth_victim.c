/* zcrpc_test_auth_victim ADDR PORT KEYHEX - the peer of
 * rdma.Admission.ClientKilledBeforeItsProofIsFreedWithinTheDeadline: a
 * client that dies between ESTABLISHED and its key proof.
 *
 * Connects to ADDR:PORT with the pre-shared key KEYHEX (hex) but never sends
 * AUTH (zcrpc__conn_test_auth SILENT); once the server's ACCEPT arrived (the
 * connection is waiting for its verdict) it prints "authenticating" and
 * keeps the worker running until it is killed. Exit status 1 (with a
 * message on stderr) when any step fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transport/internal.h"

static int closed;

static void on_state(zcrpc_conn *c, zcrpc_conn_state st, zcrpc_status s,
		     void *arg)
{
	(void)arg;
	if (st == ZCRPC_CONN_CLOSED) {
		fprintf(stderr, "auth_victim: closed: %s: %s\n", zcrpc_status_str(s),
			zcrpc_conn_get_error(c));
		closed = 1;
	}
}

static int unhex(const char *s, uint8_t *out, size_t cap)
{
	size_t n = strlen(s) / 2, i;

	if (strlen(s) % 2 || n > cap)
		return -1;
	for (i = 0; i < n; i++) {
		unsigned v;

		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			return -1;
		out[i] = (uint8_t)v;
	}
	return (int)n;
}

int main(int argc, char **argv)
{
	zcrpc_conn_handlers h = {.size = sizeof(h), .on_state = on_state};
	zcrpc_connect_opts o;
	uint8_t key[ZCRPC_PSK_MAX];
	zcrpc_worker *w;
	zcrpc_conn *c;
	int n, printed = 0;

	if (argc != 4 || (n = unhex(argv[3], key, sizeof(key))) <= 0) {
		fprintf(stderr, "usage: %s ADDR PORT KEYHEX\n", argv[0]);
		return 1;
	}
	if (zcrpc_worker_create(NULL, &w) != ZCRPC_OK) {
		fprintf(stderr, "auth_victim: no worker\n");
		return 1;
	}
	zcrpc_connect_opts_init(&o);
	o.timeout_ms = 600000;
	o.psk = key;
	o.psk_len = (size_t)n;
	o.identity = "victim";
	if (zcrpc_connect(w, argv[1], argv[2], &o, &h, &c) != ZCRPC_OK ||
	    zcrpc__conn_test_auth(c, ZCRPC_AUTH_TEST_SILENT, NULL) != ZCRPC_OK) {
		fprintf(stderr, "auth_victim: cannot connect\n");
		return 1;
	}
	for (;;) {
		zcrpc_worker_progress(w, 10);
		if (closed)
			return 1;
		if (!printed && c->auth_phase == ZCRPC_AUTH_CLIENT_WAIT) {
			printf("authenticating\n");
			fflush(stdout);
			printed = 1;
		}
	}
}
