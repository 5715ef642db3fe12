/* zcrpc — a server's graceful shutdown: the listener closed, GOAWAY to
 * every client, calls in flight (replies from other threads included)
 * drained within the grace period, then the connections closed in order.
 * On one worker the calling thread drives it alone; on several, each
 * shard is asked through zcrpc_worker_post on its own worker (whose
 * thread keeps progressing it) and answers through atomics, while the
 * caller progresses the home worker (docs/design.md, Servers on many
 * workers). */
#include "server_internal.h"

#include <sched.h>

/* How long connections get to close in order after the drain. */
#define ZCRPC_CLOSE_WAIT_NS (3000LL * 1000000LL)
/* How long, at most, the close waits for the clients' answers to GOAWAY
 * (DRAIN: what they sent before the answer has arrived once it is in). */
#define ZCRPC_GOAWAY_ACK_WAIT_NS (500LL * 1000000LL)

int zcrpc__server_busy(const zcrpc_server *s)
{
	const struct zcrpc__list *n;

	if (zcrpc__call_table_used(&s->calls) || !zcrpc__list_empty(&s->streams))
		return 1; /* calls, or streams not finished (and freed) yet */
	/* Replies (or other frames) still queued behind credits or pool
	 * slots: a call that was answered is not done until its reply
	 * left. */
	zcrpc__list_foreach(n, &s->conns) {
		const struct sconn *sc = zcrpc__sconn_of(n);

		if (!sc->closed && (sc->q_head || sc->p_head))
			return 1;
	}
	return 0;
}

/* Connections of @s whose client drains in order (DRAIN) and has not yet
 * answered its GOAWAY: requests it sent before the answer may still come. */
static int unacked(const zcrpc_server *s)
{
	const struct zcrpc__list *n;

	zcrpc__list_foreach(n, &s->conns) {
		const struct sconn *sc = zcrpc__sconn_of(n);

		if (!sc->closed && !sc->goaway_acked &&
		    zcrpc_conn_get_state(sc->conn) == ZCRPC_CONN_ESTABLISHED &&
		    zcrpc__conn_has_drain(sc->conn))
			return 1;
	}
	return 0;
}

void zcrpc__server_goaway_all(zcrpc_server *s)
{
	struct zcrpc__list *n;

	s->shutting_down = 1;
	zcrpc__health_goaway(s); /* Watch streams end NOT_SERVING first */
	zcrpc__list_foreach(n, &s->conns)
		zcrpc__sconn_send_simple(zcrpc__sconn_of(n), ZCRPC_FRAME_GOAWAY,
					 0, ZCRPC_OK, NULL);
}

static void close_all(zcrpc_server *s)
{
	struct zcrpc__list *n;

	zcrpc__list_foreach(n, &s->conns)
		zcrpc_conn_close(zcrpc__sconn_of(n)->conn);
}

/* One worker: the calling thread progresses it (the behaviour since the
 * first release). */
static zcrpc_status shutdown_one(zcrpc_server *s, int64_t end,
				 int64_t ack_end)
{
	zcrpc_status st = ZCRPC_OK;

	while (zcrpc__server_busy(s) && zcrpc__now_ns() < end)
		zcrpc_worker_progress(s->w, 10);
	if (zcrpc__server_busy(s))
		st = ZCRPC_DEADLINE_EXCEEDED;
	/* The clients' answers to GOAWAY: what they sent before it has come
	 * (and was refused, marked REFUSED) once it is here. */
	while (unacked(s) && zcrpc__now_ns() < ack_end)
		zcrpc_worker_progress(s->w, 1);
	close_all(s);
	end = zcrpc__now_ns() + ZCRPC_CLOSE_WAIT_NS;
	while (!zcrpc__list_empty(&s->conns) && zcrpc__now_ns() < end)
		zcrpc_worker_progress(s->w, 10);
	return st;
}

/* ---- several workers: posted to each shard's worker ---------------------- */

static void post_goaway(zcrpc_worker *w, void *arg)
{
	(void)w;
	zcrpc__server_goaway_all(arg);
}

static void post_close(zcrpc_worker *w, void *arg)
{
	(void)w;
	close_all(arg);
}

static void post_check(zcrpc_worker *w, void *arg)
{
	zcrpc_server *s = arg;

	(void)w;
	zcrpc__server_publish(s);
	atomic_store(&s->chk_busy, zcrpc__server_busy(s));
	atomic_store(&s->chk_unacked, unacked(s));
	atomic_store(&s->chk_conns, !zcrpc__list_empty(&s->conns));
	atomic_fetch_add(&s->chk_seq, 1);
	atomic_store(&s->chk_pending, 0); /* last: the results are in */
}

/* Asks shard @sh (another worker) what it holds; returns 1 when the
 * answer to a check posted after @since is in (@busy, @conns set). */
static int ask(zcrpc_server *sh, unsigned since, int *busy, int *conns,
	       int *acks)
{
	if (atomic_load(&sh->chk_pending))
		return 0;
	if (atomic_load(&sh->chk_seq) > since) {
		*busy = atomic_load(&sh->chk_busy);
		*acks = atomic_load(&sh->chk_unacked);
		*conns = atomic_load(&sh->chk_conns);
		return 1;
	}
	atomic_store(&sh->chk_pending, 1);
	if (zcrpc_worker_post(sh->w, post_check, sh) != ZCRPC_OK)
		atomic_store(&sh->chk_pending, 0); /* asked again next pass */
	return 0;
}

/* Progresses the home worker until no shard is busy (@want 0), none has
 * a connection left (@want 1) or none waits for a client's answer to
 * GOAWAY (@want 2), or @end. Returns 1 when that was reached. */
static int wait_shards(zcrpc_server *s, int want, int64_t end)
{
	unsigned since[ZCRPC_MAX_WORKERS];
	size_t i;

	for (i = 1; i < s->nshards; i++)
		since[i] = atomic_load(&s->shards[i]->chk_seq);
	for (;;) {
		int done = want == 1   ? zcrpc__list_empty(&s->conns)
			   : want == 2 ? !unacked(s)
				       : !zcrpc__server_busy(s);

		for (i = 1; i < s->nshards; i++) {
			int busy = 1, conns = 1, acks = 1;

			if (!ask(s->shards[i], since[i], &busy, &conns, &acks)) {
				done = 0;
				continue;
			}
			if (want == 1 ? conns : want == 2 ? acks : busy) {
				done = 0;
				since[i] = atomic_load(&s->shards[i]->chk_seq);
			}
		}
		if (done)
			return 1;
		if (zcrpc__now_ns() >= end)
			return 0;
		zcrpc_worker_progress(s->w, 1);
	}
}

static zcrpc_status shutdown_many(zcrpc_server *s, int64_t end,
				  int64_t ack_end)
{
	zcrpc_status st = ZCRPC_OK;
	size_t i;

	for (i = 1; i < s->nshards; i++)
		if (zcrpc_worker_post(s->shards[i]->w, post_goaway,
				      s->shards[i]) != ZCRPC_OK)
			st = ZCRPC_RESOURCE_EXHAUSTED;
	if (!wait_shards(s, 0, end))
		st = ZCRPC_DEADLINE_EXCEEDED;
	wait_shards(s, 2, ack_end);
	close_all(s);
	for (i = 1; i < s->nshards; i++)
		zcrpc_worker_post(s->shards[i]->w, post_close, s->shards[i]);
	wait_shards(s, 1, zcrpc__now_ns() + ZCRPC_CLOSE_WAIT_NS);
	zcrpc__server_publish(s);
	return st;
}

zcrpc_status zcrpc__server_drain(zcrpc_server *s, int grace_ms)
{
	int64_t end, ack_end;

	s->shutting_down = 1;
	zcrpc_listener_destroy(s->l);
	s->l = NULL;
	/* out of the registry first: clients watching it stop picking us
	 * while the GOAWAY drains the others */
	zcrpc__server_withdraw_all(s);
	zcrpc__health_drain(s); /* health checkers stop picking us too */
	zcrpc__server_goaway_all(s);
	end = zcrpc__now_ns() +
	      (int64_t)(grace_ms > 0 ? grace_ms : 0) * 1000000LL;
	/* a client that does not answer GOAWAY holds the close this long at
	 * most (within the grace) */
	ack_end = zcrpc__now_ns() + ZCRPC_GOAWAY_ACK_WAIT_NS;
	if (ack_end > end)
		ack_end = end;
	return s->nshards > 1 ? shutdown_many(s, end, ack_end)
			      : shutdown_one(s, end, ack_end);
}

zcrpc_status zcrpc_server_shutdown(zcrpc_server *s, int grace_ms)
{
	if (!s)
		return ZCRPC_INVALID_ARGUMENT;
	if (atomic_load(&s->serve))
		return zcrpc__serve_stop(s, grace_ms);
	if (zcrpc__worker_in_progress(s->w))
		return ZCRPC_FAILED_PRECONDITION;
	return zcrpc__server_drain(s, grace_ms);
}
