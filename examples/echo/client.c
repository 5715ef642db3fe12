/* zcrpc echo client, built from idl/echo.proto with the generated stubs.
 *
 *   zcrpc_echo_client -a ADDR [-p PORT] [TEXT]
 *
 * Calls Ping (sync) and Reverse (async) with TEXT and checks both replies.
 * Exits 0 when they are right.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "echo.zcrpc.h"

struct pending {
	int done;
	int ok;
	const char *want;
};

static void on_reverse(zcrpc_status status, const char *message,
		       const Zcrpc__Echo__EchoReply *reply, void *arg)
{
	struct pending *p = arg;
	size_t n = strlen(p->want), i;

	p->done = 1;
	if (status != ZCRPC_OK) {
		fprintf(stderr, "Reverse: %s: %s\n", zcrpc_status_str(status), message);
		return;
	}
	p->ok = reply->payload.len == n;
	for (i = 0; p->ok && i < n; i++)
		p->ok = reply->payload.data[i] == (uint8_t)p->want[n - 1 - i];
	printf("Reverse -> \"%.*s\"\n", (int)reply->payload.len, (const char *)reply->payload.data);
}

int main(int argc, char **argv)
{
	const char *addr = NULL, *port = "7473", *text;
	Zcrpc__Echo__EchoRequest req = ZCRPC__ECHO__ECHO_REQUEST__INIT;
	Zcrpc__Echo__EchoReply *reply = NULL;
	struct pending p = {0, 0, NULL};
	zcrpc_worker *w = NULL;
	zcrpc_channel *ch = NULL;
	char *message = NULL;
	zcrpc_status st;
	int opt, rc = 1;

	while ((opt = getopt(argc, argv, "a:p:h")) != -1) {
		switch (opt) {
		case 'a': addr = optarg; break;
		case 'p': port = optarg; break;
		default:
			fprintf(stderr, "usage: %s -a ADDR [-p PORT] [TEXT]\n", argv[0]);
			return opt == 'h' ? 0 : 2;
		}
	}
	if (!addr) {
		fprintf(stderr, "usage: %s -a ADDR [-p PORT] [TEXT]\n", argv[0]);
		return 2;
	}
	text = optind < argc ? argv[optind] : "hello over RDMA";
	req.payload.data = (uint8_t *)text;
	req.payload.len = strlen(text);
	req.seq = 42;
	if ((st = zcrpc_worker_create(NULL, &w)) != ZCRPC_OK ||
	    (st = zcrpc_channel_create(w, addr, port, NULL, &ch)) != ZCRPC_OK) {
		fprintf(stderr, "echo client: %s%s%s\n", zcrpc_status_str(st),
			w ? "" : ": ", w ? "" : zcrpc_last_error());
		goto out;
	}
	st = zcrpc__echo__echo__ping__call(ch, &req, NULL, &reply, &message);
	if (st != ZCRPC_OK) {
		fprintf(stderr, "Ping: %s: %s\n", zcrpc_status_str(st), message);
		goto out;
	}
	printf("Ping -> \"%.*s\" seq %llu\n", (int)reply->payload.len,
	       (const char *)reply->payload.data, (unsigned long long)reply->seq);
	if (reply->seq != 42 || reply->payload.len != req.payload.len ||
	    memcmp(reply->payload.data, text, req.payload.len))
		goto out;
	p.want = text;
	st = zcrpc__echo__echo__reverse__async(ch, &req, NULL, on_reverse, &p, NULL);
	if (st != ZCRPC_OK)
		goto out;
	while (!p.done)
		zcrpc_worker_progress(w, 100);
	rc = p.ok ? 0 : 1;
out:
	if (reply)
		zcrpc__echo__echo_reply__free_unpacked(reply, NULL);
	free(message);
	zcrpc_channel_destroy(ch);
	zcrpc_worker_destroy(w);
	return rc;
}
