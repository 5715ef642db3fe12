/* zcrpc — libFuzzer target for the RPC frame parser (src/rpc/frame.c).
 *
 * Feeds arbitrary bytes to zcrpc__frame_decode and, as a batch of frames,
 * to zcrpc__frame_decode_next (libFuzzer hands over a heap
 * buffer of exactly @size bytes, so ASan sees any read past the end) and
 * checks what a total parser must guarantee:
 *   - every input yields OK or INVALID_ARGUMENT with a reason, the same with
 *     or without a reason buffer, and the reason never overflows it;
 *   - an accepted frame obeys every rule frame.h states (lengths add up to
 *     the input, pointers inside it, type/flags/status/bulk/grant limits);
 *   - its metadata decodes, the pairs tile it exactly and re-encode to the
 *     same bytes;
 *   - re-encoding the header gives the input's header bytes, and decoding
 *     that again gives the same fields;
 *   - zcrpc__md_decode on the raw input is total and, when it accepts,
 *     stays inside the input and re-encodes to it.
 * Any violation is __builtin_trap(), which libFuzzer reports as a crash.
 *
 * Built with clang -fsanitize=fuzzer,address,undefined by
 * tests/fuzz/CMakeLists.txt (ZCRPC_BUILD_FUZZ=ON). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/frame.h"

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond))                                                   \
			__builtin_trap();                                      \
	} while (0)

static int within(const uint8_t *p, size_t n, const uint8_t *lo, size_t len)
{
	return p >= lo && n <= len && (size_t)(p - lo) <= len - n;
}

/* Checks @n pairs decoded from @buf/@len: inside it, tiling it exactly, and
 * re-encoding to the same bytes. */
static void check_pairs(const uint8_t *buf, size_t len,
			const struct zcrpc_md_view *pairs, int n)
{
	const uint8_t *at = buf;
	size_t need;
	int i;

	CHECK(n >= 0 && n <= ZCRPC_MD_MAX_PAIRS);
	CHECK(n > 0 || len == 0);
	for (i = 0; i < n; i++) {
		const struct zcrpc_md_view *p = &pairs[i];

		CHECK(p->key_len >= 1 && p->key_len <= 255);
		CHECK(p->value_len <= 0xffff);
		CHECK(p->key == at + 3);
		CHECK(p->value == p->key + p->key_len);
		CHECK(within(p->key, p->key_len, buf, len));
		CHECK(within(p->value, p->value_len, buf, len));
		at = p->value + p->value_len;
	}
	CHECK(at == buf + len);

	/* md_size refuses only what breaks the limits; within them it is the
	 * exact size and md_encode rebuilds the input. */
	need = zcrpc__md_size(pairs, (size_t)n);
	if (n == 0 || len > ZCRPC_MD_MAX_LEN) {
		CHECK(need == 0);
		return;
	}
	CHECK(need == len);
	{
		uint8_t *copy = malloc(need);

		CHECK(copy != NULL);
		zcrpc__md_encode(pairs, (size_t)n, copy);
		CHECK(memcmp(copy, buf, need) == 0);
		free(copy);
	}
}

static void check_same(const struct zcrpc_frame *a, const struct zcrpc_frame *b)
{
	CHECK(a->type == b->type);
	CHECK(a->flags == b->flags);
	CHECK(a->md_len == b->md_len);
	CHECK(a->call_id == b->call_id);
	CHECK(a->count == b->count);
	CHECK(a->method_id == b->method_id);
	CHECK(a->status == b->status);
	CHECK(a->payload_len == b->payload_len);
	CHECK(a->deadline_us == b->deadline_us);
	CHECK(a->bulk_addr == b->bulk_addr);
	CHECK(a->bulk_len == b->bulk_len);
	CHECK(a->bulk_rkey == b->bulk_rkey);
	CHECK(a->bulk_token == b->bulk_token);
}

static void check_accepted(const uint8_t *data, size_t size,
			   const struct zcrpc_frame *f)
{
	struct zcrpc_md_view pairs[ZCRPC_MD_MAX_PAIRS];
	struct zcrpc_frame g;
	uint8_t *again;
	int n;

	/* What frame.h promises about an accepted frame. */
	CHECK(size >= ZCRPC_FRAME_HDR_LEN);
	CHECK(f->type >= ZCRPC_FRAME_REQUEST && f->type <= ZCRPC_FRAME_TYPE_MAX);
	CHECK((f->flags & ~ZCRPC_FRAME_F_ALL) == 0);
	CHECK(f->md_len <= ZCRPC_MD_MAX_LEN);
	CHECK((uint64_t)f->md_len + f->payload_len == size - ZCRPC_FRAME_HDR_LEN);
	CHECK(f->md == data + ZCRPC_FRAME_HDR_LEN);
	CHECK(f->payload == f->md + f->md_len);
	CHECK(within(f->md, f->md_len, data, size));
	CHECK(within(f->payload, f->payload_len, data, size));
	if (f->type == ZCRPC_FRAME_REPLY)
		CHECK(f->status < ZCRPC_STATUS_COUNT);
	if (f->flags & ZCRPC_FRAME_F_PAYLOAD_IN_BULK)
		CHECK((f->flags & ZCRPC_FRAME_F_BULK) && f->payload_len == 0);
	if (f->flags & ZCRPC_FRAME_F_BULK) {
		CHECK(f->type == ZCRPC_FRAME_REQUEST || f->type == ZCRPC_FRAME_REPLY ||
		      f->type == ZCRPC_FRAME_MESSAGE);
		CHECK(f->bulk_len >= 1 && f->bulk_len <= ZCRPC_BULK_MAX);
	}
	/* Streams (docs/protocol.md §8) and the count field. */
	if (f->flags & ZCRPC_FRAME_F_STREAM) {
		CHECK(f->type == ZCRPC_FRAME_REQUEST || f->type == ZCRPC_FRAME_REPLY ||
		      f->type == ZCRPC_FRAME_CANCEL ||
		      f->type == ZCRPC_FRAME_BULK_GRANT);
		CHECK(!(f->flags & ZCRPC_FRAME_F_BULK));
	}
	if (f->flags & ZCRPC_FRAME_F_MORE)
		CHECK(f->type == ZCRPC_FRAME_MESSAGE && f->payload_len > 0);
	if (f->type == ZCRPC_FRAME_REQUEST && (f->flags & ZCRPC_FRAME_F_STREAM))
		CHECK(f->payload_len == 0);
	if (f->type == ZCRPC_FRAME_MESSAGE)
		CHECK(f->md_len == 0);
	if (f->type == ZCRPC_FRAME_MESSAGE && (f->flags & ZCRPC_FRAME_F_BULK))
		/* a client's large message by RDMA WRITE: nothing inline */
		CHECK(f->payload_len == 0 && !(f->flags & ZCRPC_FRAME_F_MORE));
	if (f->type == ZCRPC_FRAME_HEADERS)
		CHECK(f->payload_len == 0);
	if (f->type == ZCRPC_FRAME_WINDOW || f->type == ZCRPC_FRAME_HALF_CLOSE)
		CHECK(f->md_len == 0 && f->payload_len == 0);
	if (f->type == ZCRPC_FRAME_WINDOW)
		CHECK(f->count >= 1);
	else if (f->type == ZCRPC_FRAME_REPLY && !(f->flags & ZCRPC_FRAME_F_STREAM))
		CHECK(f->count <= (uint32_t)zcrpc__md_decode(f->md, f->md_len, pairs));
	else
		CHECK(f->count == 0);
	if (f->type == ZCRPC_FRAME_BULK_GRANT) {
		CHECK((f->flags & ~ZCRPC_FRAME_F_STREAM) == 0);
		CHECK(f->bulk_len >= 1 && f->bulk_len <= ZCRPC_BULK_MAX);
		CHECK(f->bulk_addr <= UINT64_MAX - f->bulk_len);
		CHECK(f->md_len == 0 && f->payload_len == 0);
	}

	/* Its metadata is well formed. */
	n = zcrpc__md_decode(f->md, f->md_len, pairs);
	check_pairs(f->md, f->md_len, pairs, n);

	/* Encoding the decoded header gives the same bytes (every field is
	 * decoded, reserved ones are zero), and decoding those again the same
	 * frame. */
	again = malloc(size);
	CHECK(again != NULL);
	zcrpc__frame_encode(f, again);
	CHECK(memcmp(again, data, ZCRPC_FRAME_HDR_LEN) == 0);
	memcpy(again + ZCRPC_FRAME_HDR_LEN, data + ZCRPC_FRAME_HDR_LEN,
	       size - ZCRPC_FRAME_HDR_LEN);
	CHECK(zcrpc__frame_decode(again, size, &g, NULL, 0) == ZCRPC_OK);
	check_same(f, &g);
	CHECK(g.md == again + ZCRPC_FRAME_HDR_LEN);
	CHECK(g.payload == g.md + g.md_len);
	free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct zcrpc_md_view pairs[ZCRPC_MD_MAX_PAIRS];
	struct zcrpc_frame f, f2;
	char why[160], tiny[5];
	zcrpc_status st, st2;
	size_t wl;
	int n;

	/* The frame parser. */
	memset(why, 0, sizeof(why));
	st = zcrpc__frame_decode(data, size, &f, why, sizeof(why));
	CHECK(st == ZCRPC_OK || st == ZCRPC_INVALID_ARGUMENT);
	if (st == ZCRPC_OK) {
		check_accepted(data, size, &f);
	} else {
		wl = strnlen(why, sizeof(why));
		CHECK(wl > 0 && wl < sizeof(why)); /* a reason, terminated */
	}
	/* The verdict does not depend on the reason buffer, and a short one
	 * is truncated, not overrun (ASan checks the bound). */
	st2 = zcrpc__frame_decode(data, size, &f2, NULL, 0);
	CHECK(st2 == st);
	if (st == ZCRPC_OK)
		check_same(&f, &f2);
	memset(tiny, 0x7f, sizeof(tiny));
	st2 = zcrpc__frame_decode(data, size, &f2, tiny, sizeof(tiny) - 1);
	CHECK(st2 == st);
	CHECK(tiny[sizeof(tiny) - 1] == 0x7f);
	if (st != ZCRPC_OK)
		CHECK(tiny[sizeof(tiny) - 2] == 0); /* every reason is longer */

	/* The input as a batch (docs/protocol.md §8, Batches): walked frame
	 * by frame, each accepted one exactly its own bytes and obeying the
	 * same rules, every one but the last batchable; a single frame is a
	 * batch of one with the exact decoder's verdict. */
	{
		size_t off = 0, used = 0;
		int frames = 0;

		do {
			st2 = zcrpc__frame_decode_next(data + off, size - off, &f2,
						       &used, why, sizeof(why));
			CHECK(st2 == ZCRPC_OK || st2 == ZCRPC_INVALID_ARGUMENT);
			if (st2 != ZCRPC_OK)
				break;
			CHECK(used >= ZCRPC_FRAME_HDR_LEN && used <= size - off);
			check_accepted(data + off, used, &f2);
			CHECK(off + used == size ||
			      zcrpc__frame_batchable(f2.type, f2.flags));
			off += used;
			frames++;
		} while (off < size);
		if (frames == 1 && off == size)
			CHECK(st == ZCRPC_OK);
		if (st == ZCRPC_OK)
			CHECK(frames == 1 && off == size);
	}

	/* The metadata parser on its own, over the whole input. */
	n = zcrpc__md_decode(data, size, pairs);
	if (n >= 0)
		check_pairs(data, size, pairs, n);
	else
		CHECK(n == -1);
	return 0;
}
