/* zcrpc — what the stream files share (stream.c: what both sides do;
 * stream_client.c: a channel's streams; stream_server.c: a server's). A
 * stream is named on the wire by the client's reference (a slot of the
 * channel's stream table: index | generation, so a frame for a stream that
 * ended is recognised and dropped); the server finds its stream by that
 * reference among its connection's streams. docs/protocol.md §8 is the
 * protocol, docs/design.md (Streams) the design. */
#ifndef ZCRPC_RPC_STREAM_INTERNAL_H
#define ZCRPC_RPC_STREAM_INTERNAL_H

#include "../core/list.h"
#include "rpc_internal.h"
#include "batch.h"
#include "intercept.h"
#include "zcrpc/stream.h"

struct sconn;

/* A message (or a piece of one, @more) that arrived while its stream was
 * paused. */
struct smsg {
	struct smsg *next;
	size_t len;
	int more;
	uint64_t bulk_len; /* a message announced by RDMA WRITE (its grant
			    * waits), no data */
	uint32_t bulk_token; /* ... the server's reference for it (client) */
	unsigned char data[];
};

struct zcrpc_stream {
	unsigned client : 1;	  /* the channel's side */
	unsigned sent_open : 1;	  /* client: its REQUEST went to the transport */
	unsigned half_local : 1;  /* client: it half-closed */
	unsigned half_peer : 1;	  /* server: the client half-closed */
	unsigned ended : 1;	  /* finished, cancelled or failed: on_finish due */
	unsigned finish_run : 1;  /* on_finish ran (it is being freed) */
	unsigned paused : 1;
	unsigned wanted_write : 1; /* a write was refused for the window */
	unsigned sent_any : 1;	  /* server: headers or a message went */
	unsigned got_headers : 1; /* client: HEADERS arrived */
	unsigned got_message : 1; /* client: a MESSAGE arrived */
	unsigned half_pending : 1; /* server: the client's half-close waits behind paused messages */
	unsigned graceful : 1;	   /* client: the server's final status ended it */
	unsigned forced : 1;	   /* its on_finish runs now (a destroy), whatever
				    * the device may still read */
	zcrpc_worker *w;
	zcrpc_stream_handlers h;
	void *user;
	uint32_t ref; /* the client's reference: the wire's call id */
	struct zcrpc__icall ic; /* its side's interceptors: */
	const struct zcrpc__cchain *cics; /* the channel's (client) */
	/* client: the target channel that started it on this subchannel
	 * (lb_channel.c), or NULL */
	zcrpc_channel *owner;
	const struct zcrpc__schain *sics; /* the server's */
	struct zcrpc__timer timer; /* deadline, deferred work */
	int64_t deadline_ns;	   /* 0 = none */
	/* flow control (docs/protocol.md §8) */
	uint32_t send_window; /* messages we may still send */
	uint32_t recv_left;   /* messages the peer may still send us */
	uint32_t consumed;    /* consumed since our last WINDOW */
	struct smsg *held_head, *held_tail; /* arrived while paused */
	uint32_t nheld;
	/* A message larger than a frame goes in pieces (MESSAGE with MORE). */
	unsigned char *in_big;	 /* reader: the pieces so far */
	size_t in_len, in_cap;
	size_t max_message;	 /* reader: the largest it takes */
	unsigned char *out_big;	 /* writer: the message being sent */
	size_t out_off, out_len;
	struct zcrpc__out end_out; /* server: its final status, built, sent
				    * after the pieces (has_end_out) */
	unsigned has_end_out : 1;
	unsigned half_after_big : 1; /* client: half-close after the pieces */
	/* A client's large message by RDMA WRITE (stream_bulk.c). */
	struct zcrpc__bulkbuf *att_out; /* writer (client): its registered copy */
	size_t att_len;
	unsigned att_writing : 1;	/* its WRITE is posted */
	unsigned att_user : 1; /* writer (client): the message is the
				* application's own memory (att_mr, att_off;
				* zcrpc_stream_write_bulk), no copy */
	unsigned att_out_user : 1; /* writer (server): likewise, for the
				    * record att_out_ref */
	const zcrpc_mr *att_mr;
	size_t att_off;
	unsigned cancel_after_write : 1; /* the CANCEL goes once it completed */
	uint32_t att_ref; /* reader: the call record holding the message's
			   * grant (the server's or, for the server's
			   * messages, the channel's); 0 = none */
	uint32_t att_out_ref; /* writer (server): the call record sending a
			       * message by RDMA WRITE; 0 = none */
	zcrpc_status end_after_big;
	char *end_msg_after_big;
	/* how it ended */
	zcrpc_status end_status;
	char end_msg[ZCRPC_STATUS_MSG_MAX + 1];
	zcrpc_md end_md[ZCRPC_MD_MAX_PAIRS];
	size_t n_end_md;
	zcrpc_msg end_frame; /* client: the kept REPLY the metadata points into */
	int has_end_frame;
	/* client */
	zcrpc_channel *ch;
	zcrpc_conn *conn;		       /* bound at start */
	struct zcrpc__list link;	       /* ch->live_streams / sc->streams */
	struct zcrpc__list slink;	       /* server: its shard's streams */
	struct zcrpc__qframe *q_head, *q_tail; /* client: frames not sent yet */
	struct zcrpc__batch batch; /* client: small frames of this turn */
	/* server */
	zcrpc_server *s;
	struct sconn *sc; /* NULL once its connection is gone */
	uint32_t method_id;
};

#define zcrpc__stream_of(node) zcrpc__container_of(node, struct zcrpc_stream, link)

/* ---- stream.c: both sides ---- */
/* Fields every new stream starts with (windows, timer), on worker @w. */
void zcrpc__stream_init(zcrpc_stream *s, zcrpc_worker *w,
			const zcrpc_stream_handlers *h);
/* Ends @s (once): @st and @msg (copied; may be NULL) for its on_finish,
 * which runs from the next progress. */
void zcrpc__stream_end(zcrpc_stream *s, zcrpc_status st, const char *msg);
/* A MESSAGE frame for @s arrived: checked against the window, delivered
 * or held while paused. Nonzero when the peer wrote past the window (the
 * caller ends the stream). */
int zcrpc__stream_on_message(zcrpc_stream *s, const struct zcrpc_frame *f);
/* A WINDOW frame for @s arrived. */
void zcrpc__stream_on_window(zcrpc_stream *s, const struct zcrpc_frame *f);
/* Sends a frame of @s: the side's own way (channel queue, server
 * connection). The slot is the callee's either way. */
void zcrpc__stream_send(zcrpc_stream *s, struct zcrpc__out *out);
/* Builds a frame of @type for @s without body. RESOURCE_EXHAUSTED
 * without a pool slot. */
zcrpc_status zcrpc__stream_build(zcrpc_stream *s, uint8_t type, uint16_t flags,
				 struct zcrpc__out *out);
/* Runs on_finish of ended @s now, then frees it (unless it waits to
 * hand over held messages of an orderly end: a paused reader). */
void zcrpc__stream_run_finish(zcrpc_stream *s);
/* Its side's interceptors: a message went out (1) or came (0); the end. */
void zcrpc__stream_ic_message(zcrpc_stream *s, int outgoing, size_t len);
void zcrpc__stream_ic_end(zcrpc_stream *s);
/* Frees the messages held for a paused reader, and the pieces of a large
 * message being read or written. */
void zcrpc__stream_free_held(zcrpc_stream *s);
/* Sends pieces of the large message being written while the window lets
 * it; when the last went, what waited for it (the half-close, the final
 * status). */
void zcrpc__stream_pump(zcrpc_stream *s);
/* Server: its final status @out (built) goes once the pieces went; the
 * stream then ends with @st and @msg. */
void zcrpc__stream_end_after_pieces(zcrpc_stream *s, struct zcrpc__out *out,
				    zcrpc_status st, const char *msg);
/* The time left of @s's deadline for a frame (us, capped), 0 = none. */
uint32_t zcrpc__stream_deadline_us(const zcrpc_stream *s, int64_t now);

/* A message the reader took from its own memory (a landed attachment):
 * delivered now unless paused (then held, first), then what waited
 * behind it. */
void zcrpc__stream_take_landed(zcrpc_stream *s, const void *data, size_t len);
/* The write window may be open again: on_writable if a write wanted it. */
void zcrpc__stream_writable_again(zcrpc_stream *s);
/* Nonzero while a message of @s is still going out (pieces, or an
 * attachment waiting for its grant or its write). */
static inline int zcrpc__stream_busy(const zcrpc_stream *s)
{
	return s->out_big != NULL || s->att_out != NULL || s->att_user ||
	       s->att_out_ref;
}
/* Nonzero while the device may still read application memory a message
 * of @s was written from in place (its on_finish waits for that). */
static inline int zcrpc__stream_reads_user(const zcrpc_stream *s)
{
	return (s->att_user && s->att_writing) ||
	       (s->att_out_ref && s->att_out_user);
}

/* ---- stream_bulk.c: a client's large messages by RDMA WRITE ---- */
/* Nonzero when @s (a client's) sends a @len-byte message as an
 * attachment: its connection is up and takes them, and @len is above the
 * channel's bulk threshold. */
int zcrpc__cstream_attaches(const zcrpc_stream *s, size_t len);
/* Announces the message (copied into a registered buffer, or, @src, in
 * the application's memory) with MESSAGE [BULK]; it is written once the
 * server's grant arrives. */
zcrpc_status zcrpc__cstream_write_attached(zcrpc_stream *s, size_t len,
					   zcrpc_fill_fn fill, void *ctx,
					   const void *data,
					   const zcrpc_bulk *src);
/* A BULK_GRANT with STREAM for @s from @conn. */
void zcrpc__cstream_on_grant(zcrpc_stream *s, zcrpc_conn *conn,
			     const struct zcrpc_frame *f);
/* The WRITE of stream @ref's attachment completed with @st on @conn. */
void zcrpc__cstream_on_write_done(zcrpc_channel *ch, zcrpc_conn *conn,
				  uint32_t ref, zcrpc_status st);
/* The write completions of stream attachments carry this tag above the
 * stream's reference (a call's carry the call's reference alone). */
#define ZCRPC__STREAM_WRITE_TAG ((uintptr_t)1 << 32)
/* @s is being freed: its attachment's buffer goes back, or, while its
 * WRITE is posted, waits for the completion. */
void zcrpc__cstream_drop_attachment(zcrpc_stream *s);
/* The channel is being destroyed: the buffers of writes still posted go
 * back (its connections go next). */
void zcrpc__cstreams_free_orphans(zcrpc_channel *ch);
/* Server: a MESSAGE [BULK] of @len bytes is @s's next message: take
 * memory and grant it (the call record machinery of request parts). */
void zcrpc__sstream_start_part(zcrpc_stream *s, uint64_t len);
/* Client: the same for the server's MESSAGE [BULK] of @len bytes, whose
 * writer is the server's record @token (the grant machinery of reply
 * parts, client_bulk.c). */
void zcrpc__cstream_start_part(zcrpc_stream *s, uint64_t len, uint32_t token);
/* Client: @s is being freed: its part's record forgets it, and ends (its
 * grant, if out, waits for the write as a finished call's would). */
void zcrpc__cstream_part_release(zcrpc_stream *s);
struct ccall;
/* Client: the record @c of a stream message landed (@data, @len), or
 * ended with @st (the message never handed over). */
void zcrpc__cstream_part_landed(zcrpc_channel *ch, struct ccall *c,
				const void *data, size_t len);
void zcrpc__cstream_part_failed(zcrpc_channel *ch, struct ccall *c,
				zcrpc_status st, const char *msg);
/* Server: nonzero when @s sends a @len-byte message by RDMA WRITE into
 * memory the client grants: its connection takes them and @len is above
 * the server's bulk threshold. */
int zcrpc__sstream_attaches(const zcrpc_stream *s, size_t len);
/* Server: copies the message into a registered buffer (the reply-part
 * machinery: a call record, the buffer maybe registered off-thread) and
 * announces it with MESSAGE [BULK] naming the record; written once the
 * client's grant arrives. */
zcrpc_status zcrpc__sstream_write_attached(zcrpc_stream *s, size_t len,
					   zcrpc_fill_fn fill, void *ctx,
					   const void *data,
					   const zcrpc_bulk *src);
struct zcrpc_server_call;
/* Server: the writer record @c's WRITE completed with @st, or @c goes
 * without one (@st not OK: no grant in time, the connection gone). */
void zcrpc__sstream_part_written(zcrpc_server *s, struct zcrpc_server_call *c,
				 zcrpc_status st);
/* Server: @s is being freed or cancelled: its part's record forgets it
 * (@cancel: the client said it will not write, so revoke now). */
void zcrpc__sstream_part_release(zcrpc_stream *s, int cancel);

/* ---- stream_client.c ---- */
void zcrpc__cstreams_on_frame(zcrpc_channel *ch, zcrpc_conn *conn,
			      const struct zcrpc_frame *f);
/* Sends the queued frames of the streams on @conn; nonzero when some wait. */
int zcrpc__cstreams_flush(zcrpc_channel *ch, zcrpc_conn *conn);
/* @conn went away: its streams end with @st, @why. */
void zcrpc__cstreams_conn_gone(zcrpc_channel *ch, zcrpc_conn *conn,
			       zcrpc_status st, const char *why);
/* The channel is being destroyed: every stream ends CANCELLED, its
 * on_finish run now, and is freed. */
void zcrpc__cstreams_destroy(zcrpc_channel *ch);
/* zcrpc_stream_start() on a channel to one server, the stream running
 * @ics and belonging to @owner (a target channel, or NULL). */
zcrpc_status zcrpc__stream_start_ics(zcrpc_channel *ch, uint32_t method,
				     const zcrpc_stream_opts *o,
				     const zcrpc_stream_handlers *h,
				     const struct zcrpc__cchain *ics,
				     zcrpc_channel *owner, zcrpc_stream **out);
/* The number of @owner's streams on @ch; the connections on which the
 * device may still read one's memory in place go to @risk[0..2). */
size_t zcrpc__cstreams_of_owner(zcrpc_channel *ch, const zcrpc_channel *owner,
				zcrpc_conn **risk, size_t *n_risk);
/* @owner goes: its streams on @ch end CANCELLED @why now (a CANCEL to
 * the server for each; their on_finish runs inside this call). */
void zcrpc__cstreams_end_owner(zcrpc_channel *ch, const zcrpc_channel *owner,
			       const char *why);
void zcrpc__cstream_send(zcrpc_stream *s, struct zcrpc__out *out);
void zcrpc__cstream_free(zcrpc_stream *s);
/* The channel's counters: a message of @s written (@outgoing) or
 * delivered; @s finished (its on_finish runs). */
void zcrpc__cstream_count_message(zcrpc_stream *s, int outgoing, size_t len);
void zcrpc__cstream_count_end(zcrpc_stream *s);
/* Its deadline passed: ended DEADLINE_EXCEEDED, the server told. */
void zcrpc__cstream_deadline(zcrpc_stream *s);
/* The client refuses what the server sent: ended @st, the server told. */
void zcrpc__cstream_refuse(zcrpc_stream *s, zcrpc_status st, const char *msg);

/* ---- stream_server.c ---- */
/* A REQUEST with the stream flag, or a frame of a stream, from @sc. */
void zcrpc__sstreams_on_frame(struct sconn *sc, const struct zcrpc_frame *f);
/* @sc closed: its streams end UNAVAILABLE. */
void zcrpc__sstreams_conn_gone(struct sconn *sc);
/* The server is being destroyed: its streams end, on_finish run now. */
void zcrpc__sstreams_destroy(zcrpc_server *s);
void zcrpc__sstream_send(zcrpc_stream *s, struct zcrpc__out *out);
void zcrpc__sstream_free(zcrpc_stream *s);
/* The server's counters, as zcrpc__cstream_count_*. */
void zcrpc__sstream_count_message(zcrpc_stream *s, int outgoing, size_t len);
void zcrpc__sstream_count_end(zcrpc_stream *s);
/* Its deadline passed: ended DEADLINE_EXCEEDED, the client told. */
void zcrpc__sstream_deadline(zcrpc_stream *s);
/* The server refuses what the client sent: ended @st, the client told. */
void zcrpc__sstream_refuse(zcrpc_stream *s, zcrpc_status st, const char *msg);
/* zcrpc_stream_cancel() of a server's stream. */
void zcrpc__sstream_cancel(zcrpc_stream *s);

#endif /* ZCRPC_RPC_STREAM_INTERNAL_H */
