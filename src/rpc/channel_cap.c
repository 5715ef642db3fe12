/* zcrpc — a channel's side of the process's connection cap (conn_cap.h):
 * a unit taken for each connection it makes and put back when the
 * connection leaves it, its connection marked idle when nothing is on it
 * (so that a connection made elsewhere at the cap may evict it, or the
 * idle timeout close it), the mark taken back when work comes, and the
 * close itself: in order, the channel IDLE (not backing off), connecting
 * again at its next call. */
#include "client_internal.h"
#include "lb_internal.h"

#include <stdio.h>
#include <string.h>

static void evict_posted(zcrpc_worker *w, void *arg)
{
	struct zcrpc__capholder *h = zcrpc__cap_find((uint64_t)(uintptr_t)arg);
	zcrpc_channel *ch;

	(void)w;
	if (!h) /* its channel went meanwhile */
		return;
	ch = zcrpc__container_of(h, zcrpc_channel, cap);
	if (zcrpc__cap_evicted(h))
		zcrpc__channel_close_idle(ch);
}

/* Under the cap's mutex, from any thread: only a post. One that cannot be
 * queued leaves the mark for the channel's next call or timer. */
static void on_evict(struct zcrpc__capholder *h)
{
	zcrpc_channel *ch = zcrpc__container_of(h, zcrpc_channel, cap);

	(void)zcrpc_worker_post(ch->w, evict_posted, (void *)(uintptr_t)h->id);
}

void zcrpc__channel_cap_init(zcrpc_channel *ch)
{
	zcrpc__list_init(&ch->cap.link);
	ch->cap.evict = on_evict;
}

zcrpc_status zcrpc__channel_take_unit(zcrpc_channel *ch)
{
	zcrpc_status st =
		zcrpc__cap_take(&ch->cap, ch->down_why, sizeof(ch->down_why));

	if (st != ZCRPC_OK) {
		/* Refused at the cap: IDLE, not backing off (the server did
		 * nothing wrong), and for a target channel's backend not
		 * connected again until that channel makes another call. */
		ch->idle_closed = 1;
		ch->idle_closed_ns = zcrpc__now_ns();
	}
	return st;
}

void zcrpc__channel_close_idle(zcrpc_channel *ch)
{
	zcrpc_conn *conn = ch->conn;

	ch->cap_idle = 0;
	if (!conn)
		return;
	/* Its unit is gone already (taken over, or put back by the timeout).
	 * Nothing is on it, so it goes now, as a destroyed channel's does:
	 * its CLOSE sent (the server sees an orderly close), no callback. */
	ch->conn = NULL;
	ch->conn_up = 0;
	ch->next_attempt_ns = 0;
	ch->idle_closed = 1;
	ch->idle_closed_ns = zcrpc__now_ns();
	zcrpc_conn_destroy(conn);
	zcrpc__channel_users_changed(ch, 0);
}

/* Nothing on the channel but its one established connection. */
static int idle_now(const zcrpc_channel *ch)
{
	return ch->conn && ch->conn_up && !ch->draining && !ch->st.in_flight &&
	       zcrpc__list_empty(&ch->active) &&
	       zcrpc__list_empty(&ch->done) &&
	       zcrpc__list_empty(&ch->zombies) &&
	       zcrpc__list_empty(&ch->grants) && !ch->cancels &&
	       !ch->orphans &&
	       (!ch->has_streams || zcrpc__list_empty(&ch->live_streams));
}

void zcrpc__channel_idle_check(zcrpc_channel *ch)
{
	int64_t now, limit;

	if (ch->cap_idle || ch->destroying || !idle_now(ch))
		return;
	now = zcrpc__now_ns();
	zcrpc__cap_idle(&ch->cap, now);
	ch->cap_idle = 1;
	limit = zcrpc__cap_idle_ns();
	if (limit)
		zcrpc__timer_start(ch->w, &ch->timer, now + limit);
}

int zcrpc__channel_wake_slow(zcrpc_channel *ch)
{
	ch->cap_idle = 0;
	if (!zcrpc__cap_busy(&ch->cap))
		return 0;
	/* evicted before its post came: that connection is not ours to use */
	zcrpc__channel_close_idle(ch);
	return 1;
}

void zcrpc__channel_cap_timer(zcrpc_channel *ch, int64_t now,
			      int64_t *next_due)
{
	int64_t limit, since;

	if (!ch->cap_idle)
		return;
	if (zcrpc__cap_evicted(&ch->cap) ||
	    zcrpc__cap_idle_expired(&ch->cap, now)) {
		zcrpc__channel_close_idle(ch);
		return;
	}
	limit = zcrpc__cap_idle_ns();
	since = atomic_load(&ch->cap.idle);
	if (limit && since > 0 && (!*next_due || since + limit < *next_due))
		*next_due = since + limit;
}
