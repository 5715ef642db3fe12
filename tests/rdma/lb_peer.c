/* zcrpc_test_lb_peer - a server process of rdma.Balance.*,
 * rdma.ResolveDns.* and rdma.ResolveEtcd.* (started by tests/rdma/lb_util):
 * the tests start several, kill (SIGKILL), stop (SIGSTOP) or shut them
 * down (SIGTERM: graceful, GOAWAY) and count at each what reached it.
 *
 *   server ADDR PORT NAME [REGISTRY [TTL]]
 *                           serves on ADDR:PORT ("0" = ephemeral); with
 *                           REGISTRY ("etcd:http://HOST:PORT/PREFIX")
 *                           announces itself there as ADDR:PORT, under a
 *                           lease of TTL seconds (default 2), which the
 *                           graceful shutdown (SIGTERM) withdraws; prints
 *                           "listening PORT" once ready (and announced)
 *
 * Methods:
 *   /lb.Test/Who    request: an 8-byte request id, then anything; reply:
 *                   NAME. Counts calls and, per request id, how many times
 *                   it ran (a second run is a duplicate)
 *   /lb.Test/Stats  reply: "calls C distinct D duplicates U" of Who
 *   /lb.Test/Fail   replies UNAVAILABLE (a retry policy's test), counted
 *                   with the Who calls
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zcrpc/balance.h"
#include "zcrpc/rpc.h"

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

/* request ids seen: an open-addressing set */
#define SET_BITS 20
static uint64_t *ids;
static uint64_t calls, distinct, dups;
static const char *name;

static void count(const zcrpc_request *r)
{
	uint64_t id, h;
	size_t i;

	calls++;
	if (r->len < 8)
		return;
	memcpy(&id, r->data, 8);
	if (!id) /* 0 marks an empty slot; the tests' ids start at 1 */
		return;
	h = id * 0x9e3779b97f4a7c15ULL;
	for (i = (size_t)(h >> (64 - SET_BITS));; i = (i + 1) & ((1u << SET_BITS) - 1)) {
		if (ids[i] == id) {
			dups++;
			return;
		}
		if (!ids[i]) {
			ids[i] = id;
			distinct++;
			return;
		}
	}
}

static void who(zcrpc_server_call *c, const zcrpc_request *r, void *arg)
{
	(void)arg;
	count(r);
	zcrpc_server_call_reply(c, ZCRPC_OK, NULL, name, strlen(name), NULL);
}

static void fail(zcrpc_server_call *c, const zcrpc_request *r, void *arg)
{
	(void)arg;
	count(r);
	zcrpc_server_call_reply(c, ZCRPC_UNAVAILABLE, "this server fails it",
				NULL, 0, NULL);
}

static void stats(zcrpc_server_call *c, const zcrpc_request *r, void *arg)
{
	char buf[128];
	int n;

	(void)r, (void)arg;
	n = snprintf(buf, sizeof(buf), "calls %llu distinct %llu duplicates %llu",
		     (unsigned long long)calls, (unsigned long long)distinct,
		     (unsigned long long)dups);
	zcrpc_server_call_reply(c, ZCRPC_OK, NULL, buf, (size_t)n, NULL);
}

int main(int argc, char **argv)
{
	zcrpc_worker *w = NULL;
	zcrpc_server *s = NULL;
	zcrpc_status st;
	int rc = 1;

	if (argc < 5 || argc > 7 || strcmp(argv[1], "server")) {
		fprintf(stderr, "usage: %s server ADDR PORT NAME [REGISTRY [TTL]]\n",
			argv[0]);
		return 2;
	}
	name = argv[4];
	ids = calloc((size_t)1 << SET_BITS, sizeof(*ids));
	signal(SIGTERM, on_term);
	if (!ids || (st = zcrpc_worker_create(NULL, &w)) != ZCRPC_OK ||
	    (st = zcrpc_server_create(w, NULL, &s)) != ZCRPC_OK ||
	    (st = zcrpc_server_register(s, "/lb.Test/Who", who, NULL)) != ZCRPC_OK ||
	    (st = zcrpc_server_register(s, "/lb.Test/Fail", fail, NULL)) != ZCRPC_OK ||
	    (st = zcrpc_server_register(s, "/lb.Test/Stats", stats, NULL)) != ZCRPC_OK ||
	    (st = zcrpc_server_listen(s, argv[2], argv[3])) != ZCRPC_OK) {
		fprintf(stderr, "lb peer: %s\n", zcrpc_last_error());
		goto out;
	}
	if (argc >= 6) { /* announced as the address the clients use */
		zcrpc_announce_opts ao;
		char addr[300];

		zcrpc_announce_opts_init(&ao);
		ao.ttl_s = argc == 7 ? atoi(argv[6]) : 2;
		snprintf(addr, sizeof(addr),
			 strchr(argv[2], ':') ? "[%s]:%u" : "%s:%u", argv[2],
			 zcrpc_server_get_port(s));
		if ((st = zcrpc_server_announce(s, argv[5], addr, &ao, NULL)) !=
		    ZCRPC_OK) {
			fprintf(stderr, "lb peer: announce: %s: %s\n",
				zcrpc_status_str(st), zcrpc_last_error());
			goto out;
		}
	}
	printf("listening %u\n", zcrpc_server_get_port(s));
	fflush(stdout);
	while (!stop)
		zcrpc_worker_progress(w, 10);
	zcrpc_server_shutdown(s, 2000); /* GOAWAY, then drain */
	rc = 0;
out:
	zcrpc_server_destroy(s);
	zcrpc_worker_destroy(w);
	free(ids);
	return rc;
}
