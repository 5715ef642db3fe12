/* greeter - zcrpc's typed stubs from a user's own project: a server on
 * its own thread and worker, a client in the main thread, typed calls
 * (greeter.zcrpc.h, made by zcrpc_add_proto()) over RDMA. Exits 0 when
 * every call returned what it should.
 *
 * Usage: greeter [ADDRESS]   (default: $ZCRPC_RXE_ADDR0, else 192.0.2.1)
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zcrpc/zcrpc.h>

#include "greeter.zcrpc.h"

/* ---- server ------------------------------------------------------------- */

static void srv_greet(Ext__Greeter__Greeter_Service *svc,
		      const Ext__Greeter__GreetRequest *in,
		      Ext__Greeter__GreetReply_Closure closure, void *cd)
{
	Ext__Greeter__GreetReply r = EXT__GREETER__GREET_REPLY__INIT;
	size_t one = strlen(in->name) + 9, n = in->times ? in->times : 1;
	char *text;

	(void)svc;
	if (in->times > 1000 || !(text = malloc(one * n + 1))) {
		zcrpc_pb_reply_error(cd, ZCRPC_INVALID_ARGUMENT, "too many times");
		return;
	}
	text[0] = '\0';
	for (size_t i = 0; i < n; i++)
		snprintf(text + i * (one - 1), one, "Hello, %s!", in->name);
	r.text = text;
	closure(&r, cd); /* the reply is packed and copied here */
	free(text);
}

static void srv_sum(Ext__Greeter__Greeter_Service *svc, const Ext__Greeter__Blob *in,
		    Ext__Greeter__Digest_Closure closure, void *cd)
{
	Ext__Greeter__Digest r = EXT__GREETER__DIGEST__INIT;

	(void)svc;
	for (size_t i = 0; i < in->data.len; i++)
		r.sum += in->data.data[i];
	r.len = in->data.len;
	r.seq = in->seq;
	closure(&r, cd);
}

struct server {
	zcrpc_worker *w;
	zcrpc_server *s;
	atomic_bool stop;
};

/* The server's worker belongs to this thread once it runs. */
static void *server_main(void *arg)
{
	struct server *sv = arg;

	while (!atomic_load(&sv->stop))
		zcrpc_worker_progress(sv->w, 10);
	return NULL;
}

/* ---- client ------------------------------------------------------------- */

struct async_result {
	int calls;
	zcrpc_status st;
	uint64_t sum, len, seq;
};

static void sum_done(zcrpc_status st, const char *message,
		     const Ext__Greeter__Digest *reply, void *arg)
{
	struct async_result *r = arg;

	(void)message;
	r->calls++;
	r->st = st;
	if (reply) {
		r->sum = reply->sum;
		r->len = reply->len;
		r->seq = reply->seq;
	}
}

#define FAIL(...)                                        \
	do {                                             \
		fprintf(stderr, "greeter: " __VA_ARGS__); \
		fputc('\n', stderr);                     \
		ok = 0;                                  \
		goto out;                                \
	} while (0)

int main(int argc, char **argv)
{
	static Ext__Greeter__Greeter_Service impl = EXT__GREETER__GREETER__INIT(srv_);
	const char *addr = argc > 1 ? argv[1] : getenv("ZCRPC_RXE_ADDR0");
	struct server sv = {0};
	pthread_t t;
	int started = 0, ok = 1;
	zcrpc_worker *w = NULL;
	zcrpc_channel *ch = NULL;
	zcrpc_status st;
	char port[16], *msg = NULL;
	uint8_t *big = NULL;

	if (!addr || !*addr)
		addr = "192.0.2.1";
	atomic_init(&sv.stop, 0);
	if ((st = zcrpc_worker_create(NULL, &sv.w)) != ZCRPC_OK ||
	    (st = zcrpc_server_create(sv.w, NULL, &sv.s)) != ZCRPC_OK ||
	    (st = ext__greeter__greeter__zcrpc_register(sv.s, &impl)) != ZCRPC_OK ||
	    (st = zcrpc_server_listen(sv.s, addr, "0")) != ZCRPC_OK)
		FAIL("server on %s: %s", addr, zcrpc_status_str(st));
	if (pthread_create(&t, NULL, server_main, &sv) != 0)
		FAIL("pthread_create failed");
	started = 1;
	snprintf(port, sizeof(port), "%u", (unsigned)zcrpc_server_get_port(sv.s));

	if ((st = zcrpc_worker_create(NULL, &w)) != ZCRPC_OK ||
	    (st = zcrpc_channel_create(w, addr, port, NULL, &ch)) != ZCRPC_OK)
		FAIL("client: %s", zcrpc_status_str(st));

	/* Synchronous calls, each reply checked. */
	const char *names[] = {"RDMA", "zcrpc", "external project"};
	for (unsigned i = 0; i < 3; i++) {
		Ext__Greeter__GreetRequest req = EXT__GREETER__GREET_REQUEST__INIT;
		Ext__Greeter__GreetReply *rep = NULL;
		char want[256] = "";

		req.name = (char *)names[i];
		req.times = i + 1;
		for (unsigned k = 0; k <= i; k++)
			snprintf(want + strlen(want), sizeof(want) - strlen(want),
				 "Hello, %s!", names[i]);
		st = ext__greeter__greeter__greet__call(ch, &req, NULL, &rep, &msg);
		if (st != ZCRPC_OK)
			FAIL("Greet: %s %s", zcrpc_status_str(st), msg ? msg : "");
		if (strcmp(rep->text, want) != 0) {
			fprintf(stderr, "greeter: Greet: got \"%s\", want \"%s\"\n",
				rep->text, want);
			ext__greeter__greet_reply__free_unpacked(rep, NULL);
			FAIL("Greet: wrong text");
		}
		printf("Greet -> %s\n", rep->text);
		ext__greeter__greet_reply__free_unpacked(rep, NULL);
	}

	/* A server error arrives as a status and a message. */
	{
		Ext__Greeter__GreetRequest req = EXT__GREETER__GREET_REQUEST__INIT;
		Ext__Greeter__GreetReply *rep = NULL;

		req.name = "x";
		req.times = 5000;
		st = ext__greeter__greeter__greet__call(ch, &req, NULL, &rep, &msg);
		if (st != ZCRPC_INVALID_ARGUMENT || rep || !msg ||
		    strcmp(msg, "too many times") != 0)
			FAIL("Greet x5000: %s, \"%s\"", zcrpc_status_str(st), msg ? msg : "");
		printf("Greet x5000 -> %s: %s\n", zcrpc_status_str(st), msg);
		free(msg);
		msg = NULL;
	}

	/* 256 KiB, above the bulk threshold, synchronously. */
	{
		const size_t n = 256 * 1024;
		Ext__Greeter__Blob req = EXT__GREETER__BLOB__INIT;
		Ext__Greeter__Digest *rep = NULL;
		uint64_t sum = 0;

		if (!(big = malloc(n)))
			FAIL("out of memory");
		for (size_t i = 0; i < n; i++)
			sum += big[i] = (uint8_t)(i * 7 + 3);
		req.data.data = big;
		req.data.len = n;
		req.seq = 1;
		st = ext__greeter__greeter__sum__call(ch, &req, NULL, &rep, &msg);
		if (st != ZCRPC_OK)
			FAIL("Sum: %s %s", zcrpc_status_str(st), msg ? msg : "");
		if (rep->sum != sum || rep->len != n || rep->seq != 1) {
			ext__greeter__digest__free_unpacked(rep, NULL);
			FAIL("Sum: wrong digest");
		}
		printf("Sum(%zu bytes) -> %llu\n", n, (unsigned long long)sum);
		ext__greeter__digest__free_unpacked(rep, NULL);
	}

	/* Asynchronous: the callback runs from this worker's progress. */
	{
		Ext__Greeter__Blob req = EXT__GREETER__BLOB__INIT;
		struct async_result r = {0, ZCRPC_UNKNOWN, 0, 0, 0};
		uint8_t small[3] = {1, 2, 250};

		req.data.data = small;
		req.data.len = sizeof(small);
		req.seq = 2;
		st = ext__greeter__greeter__sum__async(ch, &req, NULL, sum_done, &r, NULL);
		if (st != ZCRPC_OK)
			FAIL("Sum async: %s", zcrpc_status_str(st));
		for (int i = 0; i < 3000 && !r.calls; i++)
			zcrpc_worker_progress(w, 10);
		if (r.calls != 1 || r.st != ZCRPC_OK || r.sum != 253 || r.len != 3 ||
		    r.seq != 2)
			FAIL("Sum async: calls %d, %s, sum %llu", r.calls,
			     zcrpc_status_str(r.st), (unsigned long long)r.sum);
		printf("Sum async -> %llu\n", (unsigned long long)r.sum);
	}

out:
	free(big);
	zcrpc_channel_destroy(ch);
	zcrpc_worker_destroy(w);
	if (started) {
		atomic_store(&sv.stop, 1);
		pthread_join(t, NULL);
	}
	zcrpc_server_destroy(sv.s);
	zcrpc_worker_destroy(sv.w);
	if (ok)
		printf("external example OK\n");
	return ok ? 0 : 1;
}
