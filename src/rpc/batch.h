/* zcrpc — gathering small stream frames into one message (docs/protocol.md
 * §8, Batches). A writer that sends many small stream messages in one
 * progress turn (a handler answering a window, say) would pay one SEND, one
 * receive and one completion each; on a connection whose hellos both carry
 * BATCH, its MESSAGE and WINDOW frames are appended to one message instead,
 * which goes when a frame of another kind follows, when it is full, or at
 * the end of the worker's turn (zcrpc__turn_hook), before it may sleep.
 * Used per connection by the server (server_send.c) and per stream by the
 * channel (stream_client.c). */
#ifndef ZCRPC_RPC_BATCH_H
#define ZCRPC_RPC_BATCH_H

#include "rpc_internal.h"

struct zcrpc__batch {
	struct zcrpc__out open; /* the frames so far; msg.data NULL: none */
	uint32_t frames;	/* in @open */
	uint32_t limit;		/* bytes @open may reach (the peer's max_msg) */
	struct zcrpc__turn_hook hook;
	zcrpc_worker *w;
	/* The owner's way to send a message (it takes the slot); called
	 * with the batch when it goes. */
	void (*send)(struct zcrpc__batch *b, struct zcrpc__out *out);
	/* The owner's counters (never NULL): messages that carried 2 frames
	 * or more, and their frames. */
	uint64_t *batches, *batched_frames;
};

void zcrpc__batch_init(struct zcrpc__batch *b, zcrpc_worker *w,
		       void (*send)(struct zcrpc__batch *, struct zcrpc__out *),
		       uint64_t *batches, uint64_t *batched_frames);
/* @out (a built frame, its slot the callee's either way) joins the open
 * batch, or opens one, when @conn takes batches and the frame may be
 * batched: returns 1. Else returns 0 and leaves @out to the caller, after
 * sending what was open (so the order holds): the caller sends @out. */
int zcrpc__batch_add(struct zcrpc__batch *b, zcrpc_conn *conn,
		     struct zcrpc__out *out);
/* Sends the open batch now (a no-op when none). */
void zcrpc__batch_flush(struct zcrpc__batch *b);
/* Frees the open batch unsent (its owner or connection goes). */
void zcrpc__batch_drop(struct zcrpc__batch *b);

#endif /* ZCRPC_RPC_BATCH_H */
