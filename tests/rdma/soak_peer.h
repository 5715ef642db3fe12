/* The two ends of the soak and fault tests (rdma.Soak.*, rdma.Faults.*),
 * in C so the same code runs inside the test process and in the child
 * processes (zcrpc_test_fault_peer) the tests kill, stop and restart.
 *
 * The server answers three methods: Echo (payload and attachment back, in
 * place), Slow (the same after (len % 8) ms, so deadlines and cancels land
 * at the server too) and Hold (kept until soak_server_release() or until
 * its client is gone). The client makes random calls and counts, itself,
 * what happened to every one of them. */
#ifndef ZCRPC_TEST_SOAK_PEER_H
#define ZCRPC_TEST_SOAK_PEER_H

#include <stddef.h>
#include <stdint.h>

#include "zcrpc/rpc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SOAK_ECHO "/zcrpc.test.Soak/Echo"
#define SOAK_SLOW "/zcrpc.test.Soak/Slow"
#define SOAK_HOLD "/zcrpc.test.Soak/Hold"

/* Byte @k of the payload of a call with seed @seed. */
uint8_t soak_pat(uint64_t seed, uint64_t k);

/* Fills @dst (@len bytes) with soak_pat(*(uint64_t *)ctx, k). */
void soak_fill(void *dst, size_t len, void *ctx);

struct soak_server;

/* Registers the three methods on @s (created by the caller on its worker).
 * Returns NULL on failure. */
struct soak_server *soak_server_new(zcrpc_server *s);
/* Replies to Slow calls whose time came. Call from the worker's thread
 * after each progress call. */
void soak_server_tick(struct soak_server *ss);
/* Replies OK (echo) to every held call; returns how many replies were
 * accepted (zcrpc_server_call_reply() == OK). */
size_t soak_server_release(struct soak_server *ss);
size_t soak_server_held(const struct soak_server *ss);
/* Calls the server saw, per method. */
uint64_t soak_server_calls(const struct soak_server *ss);
/* Replies every Slow/Hold call still held (they report UNAVAILABLE or
 * CANCELLED when the client is gone) and frees @ss. */
void soak_server_free(struct soak_server *ss);

struct soak_cfg {
	const char *addr, *port;
	const char *src_addr;  /* local address to bind, or NULL */
	uint64_t seed;
	uint64_t calls;	       /* calls to make */
	unsigned in_flight;    /* at most this many at once */
	unsigned bulk_pct;     /* % of calls with a payload above the bulk threshold */
	size_t max_bulk;       /* largest such payload */
	unsigned slow_pct;     /* % of calls to the Slow method */
	unsigned deadline_pct; /* % of calls with a 0.5..20 ms deadline */
	unsigned cancel_pct;   /* % of calls cancelled at a random moment */
	int unavailable_ok;    /* UNAVAILABLE is an expected status */
	int report_every_s;    /* print progress to stderr; 0 = never */
};

struct soak_counts {
	uint64_t issued;     /* zcrpc_call_start() == OK */
	uint64_t completed;  /* callbacks */
	uint64_t duplicates; /* callbacks for a call that had completed */
	uint64_t ok, cancelled, deadline, unavailable, unexpected;
	uint64_t bad_data;   /* OK replies whose bytes differ */
	uint64_t bulk_ok;    /* OK calls with a bulk payload */
	uint64_t refused;    /* zcrpc_call_start() != OK (retried) */
	uint64_t cancel_ok, cancel_not_found;
	uint64_t pool_in_use; /* client pool after the channel was destroyed */
	uint64_t pool_bad_frees;
	uint64_t late_replies, reconnects;
	double seconds;
	char first_error[200];
	char first_unavailable[200]; /* its message: why the connection went */
};

/* Makes cfg->calls calls on a new worker and channel, waits for all of
 * them, destroys both. Returns 0 when every count balances and every
 * status was expected, 1 otherwise (details in @out->first_error). */
int soak_client_run(const struct soak_cfg *cfg, struct soak_counts *out);

/* One line: "issued N completed N ok N ..." */
void soak_counts_print(const struct soak_counts *c, const char *who);

#ifdef __cplusplus
}
#endif

#endif
