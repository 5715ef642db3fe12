/* zcrpc — libFuzzer target for the connection handshake decoder
 * (src/transport/hello.c): the private data a peer puts into its RDMA CM
 * connect request, accept or reject, i.e. the first bytes a hostile peer
 * controls.
 *
 * Feeds arbitrary bytes to zcrpc__hello_decode (libFuzzer hands over a heap
 * buffer of exactly @size bytes, so ASan sees any read past the end) and
 * checks:
 *   - the verdict is OK, INVALID_ARGUMENT or FAILED_PRECONDITION (wrong
 *     version only), the same with or without a reason buffer; a rejection
 *     comes with a terminated reason that never overruns a short buffer;
 *   - an accepted hello obeys hello.h: version, known kind, a length field
 *     within the CM limit and covered by the input, non-zero credits and
 *     message size outside REJECT;
 *   - re-encoding the decoded fields gives the input's 32 bytes except the
 *     reserved words (offset 24 is max_write with the PIECE feature) and the
 *     length field (and, for an ACCEPT with the AUTH
 *     feature, the 32-byte nonce that follows), and decoding that encoding
 *     gives the same fields (a peer speaking a longer hello of this version
 *     is understood as its first 32 or 64 bytes).
 * Any violation is __builtin_trap(), which libFuzzer reports as a crash.
 *
 * Built with clang -fsanitize=fuzzer,address,undefined by
 * tests/fuzz/CMakeLists.txt (ZCRPC_BUILD_FUZZ=ON). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/le.h"
#include "transport/hello.h"

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond))                                                   \
			__builtin_trap();                                      \
	} while (0)

static void check_same(const struct zcrpc_hello *a, const struct zcrpc_hello *b)
{
	CHECK(a->version == b->version);
	CHECK(a->kind == b->kind);
	CHECK(a->features == b->features);
	CHECK(a->recv_depth == b->recv_depth);
	CHECK(a->max_msg == b->max_msg);
	CHECK(a->status == b->status);
	CHECK(a->max_write == b->max_write);
	CHECK(memcmp(a->nonce, b->nonce, sizeof(a->nonce)) == 0);
	CHECK(strcmp(a->reason, b->reason) == 0);
}

static void check_accepted(const uint8_t *data, size_t size,
			   const struct zcrpc_hello *h)
{
	uint8_t enc[ZCRPC_HELLO_LEN + ZCRPC_HELLO_REASON_MAX + 1],
		tiny[ZCRPC_HELLO_LEN - 1];
	struct zcrpc_hello g;
	size_t hlen, want, rlen, i;
	int nonce;

	CHECK(size >= ZCRPC_HELLO_LEN);
	hlen = zcrpc__get_le16(data + 6);
	CHECK(hlen >= ZCRPC_HELLO_LEN && hlen <= ZCRPC_HELLO_MAX && hlen <= size);
	CHECK(zcrpc__get_le32(data) == ZCRPC_HELLO_MAGIC);
	CHECK(h->version == ZCRPC_PROTO_VERSION && h->version == data[4]);
	CHECK(h->kind >= ZCRPC_HELLO_CONNECT && h->kind <= ZCRPC_HELLO_REJECT);
	CHECK(h->kind == data[5]);
	if (h->kind != ZCRPC_HELLO_REJECT)
		CHECK(h->recv_depth > 0 && h->max_msg > 0);
	/* max_write: announced (and at least the minimum) exactly when the
	 * PIECE feature is set outside REJECT. */
	if (h->kind != ZCRPC_HELLO_REJECT && (h->features & ZCRPC_FEAT_PIECE))
		CHECK(h->max_write >= ZCRPC_HELLO_MIN_WRITE &&
		      h->max_write == zcrpc__get_le32(data + 24));
	else
		CHECK(h->max_write == 0);
	nonce = h->kind == ZCRPC_HELLO_ACCEPT && (h->features & ZCRPC_FEAT_AUTH);
	/* A REJECT's reason (decoded: cut at its NUL or the maximum, control
	 * characters made '?') comes after the 32 bytes; nothing else has one. */
	rlen = strlen(h->reason);
	CHECK(rlen <= ZCRPC_HELLO_REASON_MAX);
	if (h->kind != ZCRPC_HELLO_REJECT)
		CHECK(rlen == 0);
	for (i = 0; i < rlen; i++)
		CHECK((uint8_t)h->reason[i] >= 0x20 && h->reason[i] != 0x7f);
	want = nonce ? ZCRPC_HELLO_AUTH_LEN : ZCRPC_HELLO_LEN + rlen;
	CHECK(hlen >= want);

	/* Encode: the fields come back byte for byte; length and reserved
	 * words are this build's. */
	CHECK(zcrpc__hello_encode(h, tiny, sizeof(tiny)) == 0);
	CHECK(zcrpc__hello_encode(h, enc, sizeof(enc)) == want);
	CHECK(memcmp(enc, data, 6) == 0);
	CHECK(zcrpc__get_le16(enc + 6) == want);
	CHECK(memcmp(enc + 8, data + 8, 16) == 0);
	CHECK(zcrpc__get_le32(enc + 24) == h->max_write &&
	      zcrpc__get_le32(enc + 28) == 0);
	if (nonce)
		CHECK(memcmp(enc + ZCRPC_HELLO_LEN, data + ZCRPC_HELLO_LEN,
			     ZCRPC_HELLO_NONCE_LEN) == 0);
	if (rlen)
		CHECK(memcmp(enc + ZCRPC_HELLO_LEN, h->reason, rlen) == 0);
	memset(&g, 0xa5, sizeof(g));
	CHECK(zcrpc__hello_decode(enc, want, &g, NULL, 0) == ZCRPC_OK);
	check_same(h, &g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct zcrpc_hello h, h2;
	char why[160], tiny[5];
	zcrpc_status st, st2;
	size_t wl;

	memset(why, 0, sizeof(why));
	memset(&h, 0, sizeof(h));
	st = zcrpc__hello_decode(data, size, &h, why, sizeof(why));
	CHECK(st == ZCRPC_OK || st == ZCRPC_INVALID_ARGUMENT ||
	      st == ZCRPC_FAILED_PRECONDITION);
	if (st == ZCRPC_FAILED_PRECONDITION) /* only for a foreign version */
		CHECK(size >= 8 && data[4] != ZCRPC_PROTO_VERSION &&
		      zcrpc__get_le32(data) == ZCRPC_HELLO_MAGIC);
	if (st == ZCRPC_OK) {
		check_accepted(data, size, &h);
	} else {
		wl = strnlen(why, sizeof(why));
		CHECK(wl > 0 && wl < sizeof(why));
	}

	/* The verdict does not depend on the reason buffer; a short one is
	 * truncated, not overrun. */
	memset(&h2, 0, sizeof(h2));
	st2 = zcrpc__hello_decode(data, size, &h2, NULL, 0);
	CHECK(st2 == st);
	if (st == ZCRPC_OK)
		check_same(&h, &h2);
	memset(tiny, 0x7f, sizeof(tiny));
	st2 = zcrpc__hello_decode(data, size, &h2, tiny, sizeof(tiny) - 1);
	CHECK(st2 == st);
	CHECK(tiny[sizeof(tiny) - 1] == 0x7f);
	if (st != ZCRPC_OK)
		CHECK(tiny[sizeof(tiny) - 2] == 0);

	/* What the CM delivers on connect: at most 56 bytes, zero-padded. The
	 * verdict on a padded copy of a short accepted input is the same. */
	if (st == ZCRPC_OK && size < ZCRPC_HELLO_MAX_CONNECT) {
		uint8_t pad[ZCRPC_HELLO_MAX_CONNECT];

		memset(pad, 0, sizeof(pad));
		memcpy(pad, data, size);
		CHECK(zcrpc__hello_decode(pad, sizeof(pad), &h2, NULL, 0) ==
		      ZCRPC_OK);
		check_same(&h, &h2);
	}
	return 0;
}
