/* zcrpc — what the client's files share (channel.c, client_call.c,
 * client_bulk.c, client_sync.c, channel_test_hooks.c): the call and channel
 * structures, the call table's lookups, and the functions one file calls
 * in another. A channel owns one current connection, maybe one draining
 * one (after a GOAWAY), a table of calls (call_table.h: a late reply to a
 * finished call is recognised and dropped), a bounded queue of calls
 * waiting for a connection or credits, and a bulk-buffer cache. */
#ifndef ZCRPC_RPC_CLIENT_INTERNAL_H
#define ZCRPC_RPC_CLIENT_INTERNAL_H

#include "../core/list.h"
#include "conn_cap.h"
#include "rpc_internal.h"
#include "intercept.h"

enum cstate {
	CS_FREE = 0,
	CS_QUEUED,	 /* built, waiting to be sent */
	CS_SENT,	 /* request sent, waiting for the reply (or a grant) */
	CS_WRITING,	 /* our bulk part is being written */
	CS_REPLY_BULK,	 /* reply announced a bulk part; we granted, waiting */
	CS_REPLY_REVOKING, /* its bulk part landed; revoking before the callback */
	CS_DONE,	 /* completed; waiting for its callback (done list) */
	CS_ZOMBIE,	 /* completed, but the server may still write into our grant */
};

/* A completed call whose reply target is granted waits this long for the
 * server's write (which an honest server always posts once it has the
 * grant) before the connection is torn down to end the grant. */
#define ZCRPC_GRANT_GRACE_NS (10000LL * 1000000LL)

/* A reply's grant that found no window-bind slot on its connection is
 * tried again this soon (from the channel's timer). */
#define ZCRPC_GRANT_RETRY_NS (1000LL * 1000LL)

struct ccall {
	uint8_t state;
	uint8_t sync;
	struct zcrpc__list link;  /* ch->active, ch->done or ch->zombies */
	struct zcrpc__list qlink; /* ch->queue while QUEUED, ch->grants
				   * while its grant is parked */
	zcrpc_channel *ch;
	zcrpc_conn *conn; /* connection it went out on */
	zcrpc_call_cb cb;
	void *arg;
	int64_t deadline_ns;
	struct zcrpc__out out; /* the request frame until sent */
	/* request bulk part */
	const zcrpc_mr *src_mr;
	size_t src_off, bulk_len;
	struct zcrpc__bulkbuf *src_buf;
	unsigned payload_in_bulk : 1;
	unsigned write_pending_status : 1;
	unsigned granted : 1; /* we granted the server a reply target */
	unsigned bulk_bad : 1; /* the reply part's write had the wrong count */
	unsigned revoking : 1; /* ZOMBIE: its window is being revoked */
	unsigned cancel_after_write : 1; /* send CANCEL once our write is done */
	unsigned deliver_late : 1; /* ZOMBIE over the caller's reply_into:
				    * its callback runs when the grant ends */
	unsigned grant_parked : 1; /* SENT: its BULK_GRANT, built in out,
				    * waits for room (on ch->grants) */
	unsigned unsent : 1; /* completed before its request went out */
	unsigned stream_part : 1; /* the record of a server's stream message
				   * by RDMA WRITE (stream_bulk.c): no caller,
				   * not counted as a call; c->reply is the
				   * MESSAGE [BULK] */
	struct zcrpc_stream *stream; /* stream_part: NULL once it went */
	zcrpc_grant *reply_grant; /* the window over the reply target */
	int64_t zombie_deadline_ns;
	zcrpc_status pending_status; /* completion waiting for a write */
	char pending_msg[96];
	/* reply bulk target */
	zcrpc_bulk reply_into;
	int has_reply_into;
	struct zcrpc__bulkbuf *dst_buf;
	size_t max_reply;
	/* reply kept while its bulk part arrives */
	zcrpc_msg reply_msg;
	int has_reply_msg;
	struct zcrpc_frame reply;
	/* the interceptors this call runs (the channel's, or for an attempt
	 * of a target channel's call that channel's; NULL: none) and their
	 * states */
	const struct zcrpc__cchain *ics;
	struct zcrpc__icall ic;
	/* result, for the done list */
	zcrpc_status status;
	char message[256]; /* a limit's reason after "could not connect to
			      HOST:PORT: " */
};

struct zcrpc_channel {
	zcrpc_worker *w;
	char *host, *port, *src_addr;
	zcrpc_channel_opts o;
	zcrpc_conn *conn;     /* current */
	int conn_up;	      /* current is ESTABLISHED */
	zcrpc_conn *draining; /* after GOAWAY */
	int64_t next_attempt_ns;
	int backoff_ms, attempts;
	struct zcrpc__call_table calls; /* of struct ccall */
	struct zcrpc__list active; /* sent or queued, not done (newest first) */
	struct zcrpc__list done;   /* waiting for their callback, in order */
	struct zcrpc__list queue;  /* pending, in order */
	struct zcrpc__list zombies; /* completed, grant outstanding */
	struct zcrpc__list grants;  /* calls whose BULK_GRANT waits for room */
	struct pcancel *cancels;    /* CANCELs waiting for room, in order */
	uint32_t q_len;
	struct zcrpc__bulk_cache bulk;
	struct zcrpc__timer timer;
	int destroying;
	uint64_t rng;
	zcrpc_channel_stats st;
	/* admission: the key (o.psk points here) and the last refusal */
	uint8_t psk[ZCRPC_PSK_MAX];
	char identity[ZCRPC_IDENTITY_MAX + 1];
	char device[64]; /* the pinned device's name, o.device set */
	zcrpc_status down_status; /* why the last connection failed */
	char down_why[256];
	struct zcrpc__cchain ics; /* interceptors (intercept.c) */
	/* streams (stream_client.c): their table, made at the first one,
	 * and the live ones */
	struct zcrpc__call_table streams;
	int has_streams;
	struct zcrpc__list live_streams;
	/* stream attachments whose stream went while their WRITE was
	 * posted (stream_bulk.c): their buffers wait for the completion */
	struct zcrpc__stream_orphan *orphans;
	/* Why zcrpc_call_start refused a call for want of room (for
	 * zcrpc_call's message), or NULL: a static string. */
	const char *start_why;
	/* A target channel (zcrpc/balance.h, lb_internal.h): its backends,
	 * picker and calls; NULL for a channel to one server. */
	struct zcrpc__lb *lb;
	/* A subchannel: the connection of target channels' backends
	 * (subchannel.c), shared by those on its worker whose options match
	 * (pooled) unless one asked for its own. @users are their backends
	 * (struct zcrpc__backend.ulink), told when it comes up, fails or is
	 * told to go away; it backs off after GOAWAY. */
	unsigned is_sub : 1;
	unsigned pooled : 1;
	uint32_t share_refs;
	struct zcrpc__list share_link; /* the pool's list while pooled */
	struct zcrpc__list users;
	/* While a call's callback runs: it completed before its request
	 * went out (a target channel may send it elsewhere). */
	unsigned cb_unsent : 1;
	/* A target channel started a stream (on a subchannel): its chain
	 * of interceptors is fixed from then on. */
	unsigned made_streams : 1;
	/* the process's connection cap (channel_cap.c): the channel's
	 * units; cap_idle: its connection is marked idle; idle_closed: the
	 * channel is IDLE since idle_closed_ns until a call connects it again
	 * (its connection was closed idle, evicted or timed out, or a new one
	 * was refused at the cap) */
	struct zcrpc__capholder cap;
	unsigned cap_idle : 1;
	unsigned idle_closed : 1;
	int64_t idle_closed_ns;
};

static inline uint32_t zcrpc__ccall_ref(const zcrpc_channel *ch,
					const struct ccall *c)
{
	return zcrpc__call_table_ref(&ch->calls, c);
}

static inline struct ccall *zcrpc__ccall_lookup(zcrpc_channel *ch, uint32_t ref)
{
	return zcrpc__call_table_lookup(&ch->calls, ref);
}

#define zcrpc__ccall_of(node, member)                                          \
	zcrpc__container_of(node, struct ccall, member)

/* The first call pending on @ch, or NULL. */
static inline struct ccall *zcrpc__channel_queue_first(zcrpc_channel *ch)
{
	struct zcrpc__list *n = zcrpc__list_first(&ch->queue);

	return n ? zcrpc__ccall_of(n, qlink) : NULL;
}

static inline struct ccall *zcrpc__ccall_at(zcrpc_channel *ch, uint32_t idx)
{
	return zcrpc__call_table_at(&ch->calls, idx);
}

/* ---- channel.c: the connection ---- */
zcrpc_status zcrpc__channel_connect(zcrpc_channel *ch);
/* Drops @conn (the current or the draining one) at once: its calls fail
 * UNAVAILABLE with @why, it is destroyed, and the channel is IDLE (no
 * backoff). For a subchannel whose sharer goes while the device may still
 * use that sharer's memory through @conn. */
void zcrpc__channel_drop_conn(zcrpc_channel *ch, zcrpc_conn *conn,
			      const char *why);

/* ---- channel_cap.c: the process's connection cap ---- */
void zcrpc__channel_cap_init(zcrpc_channel *ch);
/* A unit for a new connection; RESOURCE_EXHAUSTED (the reason in
 * ch->down_why) at the cap with none idle. */
zcrpc_status zcrpc__channel_take_unit(zcrpc_channel *ch);
/* Marks the connection idle when nothing is on it (arms the timeout). */
void zcrpc__channel_idle_check(zcrpc_channel *ch);
/* Work comes to a channel whose connection is marked idle: 1 when it
 * had been evicted (it is closed now: connect anew). */
int zcrpc__channel_wake_slow(zcrpc_channel *ch);
static inline int zcrpc__channel_wake(zcrpc_channel *ch)
{
	return ch->cap_idle ? zcrpc__channel_wake_slow(ch) : 0;
}
/* Closes the idle connection whose unit is gone (evicted, timed out). */
void zcrpc__channel_close_idle(zcrpc_channel *ch);
/* From the channel's timer: the idle timeout, an eviction not yet seen. */
void zcrpc__channel_cap_timer(zcrpc_channel *ch, int64_t now,
			      int64_t *next_due);

/* ---- subchannel.c: target channels' backends' connections ---- */
/* Tells @sub's users its state changed (@failed: it failed or was told to
 * go away: they ask their resolvers again). */
void zcrpc__channel_users_changed(zcrpc_channel *sub, int failed);
void zcrpc__channel_protocol_error(zcrpc_channel *ch, zcrpc_conn *conn,
				   const char *why);

/* ---- client_call.c: calls, completion, deadlines ---- */
/* zcrpc_call_start() on a channel to one server, the call running @ics
 * (NULL: no interceptors): a target channel's attempts run its own. */
zcrpc_status zcrpc__call_start_ics(zcrpc_channel *ch, uint32_t method,
				   size_t len, zcrpc_fill_fn fill,
				   void *fill_ctx, const zcrpc_call_opts *o,
				   zcrpc_call_cb cb, void *arg,
				   zcrpc_call_id *id,
				   const struct zcrpc__cchain *ics);
/* Its caller goes (a target channel is destroyed): call @id is cancelled
 * as zcrpc_call_cancel() does, its interceptors end now with CANCELLED
 * @why, and no callback will run for it. Returns the connection whose
 * device may still use the caller's memory for it (its attachment being
 * written, or its reply_into granted to the server), or NULL. */
zcrpc_conn *zcrpc__ccall_detach(zcrpc_channel *ch, zcrpc_call_id id,
				const char *why);
void zcrpc__ccall_free(zcrpc_channel *ch, struct ccall *c);
void zcrpc__ccall_complete(zcrpc_channel *ch, struct ccall *c, zcrpc_status st,
			   const char *msg);
void zcrpc__ccall_complete_with_reply(zcrpc_channel *ch, struct ccall *c,
				      const struct zcrpc_frame *f,
				      const void *bulk, size_t bulk_len);
void zcrpc__channel_run_done(zcrpc_channel *ch);
void zcrpc__ccall_send_cancel(zcrpc_channel *ch, struct ccall *c);
/* Sends a CANCEL of @ref (@flags: ZCRPC_FRAME_F_STREAM for a stream) on
 * @conn with the credit kept for control frames, or parks it. */
void zcrpc__channel_cancel_ref(zcrpc_channel *ch, zcrpc_conn *conn,
			       uint32_t ref, uint16_t flags);
/* Sends an empty control frame (CANCEL, the answer to GOAWAY) on @conn
 * as a CANCEL goes: with the credit kept for control frames, behind the
 * ones waiting, or parked until room returns. */
void zcrpc__channel_send_control(zcrpc_channel *ch, zcrpc_conn *conn,
				 uint8_t type, uint32_t ref, uint16_t flags);
/* A CANCEL frame built but not sent yet: the connection had neither the
 * credit kept for control frames nor ring room. Sent from on_writable,
 * before anything else; dropped with its connection. */
struct pcancel {
	struct pcancel *next;
	zcrpc_conn *conn;
	struct zcrpc__out out;
};
/* Sends the CANCELs waiting on @conn; 0 when none is left. */
int zcrpc__channel_send_cancels(zcrpc_channel *ch, zcrpc_conn *conn);
/* Drops those waiting on @conn (NULL: all), freeing their frames. */
void zcrpc__channel_drop_cancels(zcrpc_channel *ch, zcrpc_conn *conn);
void zcrpc__channel_flush_queue(zcrpc_channel *ch);
void zcrpc__ccall_on_reply(zcrpc_channel *ch, zcrpc_conn *conn,
			   const struct zcrpc_frame *f);
void zcrpc__channel_on_timer(struct zcrpc__timer *t, int64_t now);

/* ---- client_bulk.c: bulk parts (handlers of the connection) ---- */
void zcrpc__channel_check_zombies(zcrpc_channel *ch, int64_t now,
				  int64_t *next_due);
void zcrpc__ccall_grant_reply_target(zcrpc_channel *ch, zcrpc_conn *conn,
				     struct ccall *c,
				     const struct zcrpc_frame *f);
/* Binds the window over @c's target (c->dst_buf, or the caller's
 * reply_into) for the part announced in c->reply and sends the BULK_GRANT
 * naming the writer's reference (c->reply.bulk_token), or parks @c; fails
 * @c when neither can be. */
void zcrpc__ccall_bind_and_grant(zcrpc_channel *ch, zcrpc_conn *conn,
				 struct ccall *c);
void zcrpc__ccall_on_grant(zcrpc_channel *ch, zcrpc_conn *conn,
			   const struct zcrpc_frame *f);
/* Sends the grants parked on @conn for want of room, in order, while it
 * takes them; nonzero when some still wait (then a send was refused, so
 * the transport calls on_writable once room returns). */
int zcrpc__channel_send_grants(zcrpc_channel *ch, zcrpc_conn *conn);
void zcrpc__ccall_drop_grant(zcrpc_channel *ch, struct ccall *c);
void zcrpc__ccall_on_write_done(zcrpc_conn *conn, void *uctx, zcrpc_status st,
				void *arg);
void zcrpc__ccall_on_write_imm(zcrpc_conn *conn, uint32_t imm, size_t len,
			       void *arg);
void zcrpc__ccall_on_revoked(zcrpc_conn *conn, void *uctx, zcrpc_status st,
			     void *arg);

#endif /* ZCRPC_RPC_CLIENT_INTERNAL_H */
