/* zcrpc — libFuzzer target for the protobuf server's dispatch
 * (src/pb/pb_dispatch.c, what pb_server.c runs for every request before a
 * handler sees it): the method id lookup and the budgeted unpack of the
 * request payload.
 *
 * Input: a little-endian 32-bit method id (the frame's method id field)
 * followed by the request payload. The services are those of
 * tests/proto/pbtest.proto (Test, Other: every field type, maps, oneofs,
 * proto2 presence) and idl/echo.proto, idl/kv.proto. Checks:
 *   - the lookup finds a method exactly when the id is the FNV-1a of its
 *     "/package.Service/Method" name, built here as a string, and the
 *     index it gives is in range;
 *   - the unpack reads only the @len bytes (libFuzzer's buffer is exactly
 *     that long: ASan sees an overread through protobuf-c's memcpy), stays
 *     within its budget, and fails only with RESOURCE_EXHAUSTED (budget
 *     refused) or INTERNAL, with a reason;
 *   - an accepted message passes protobuf_c_message_check, packs to
 *     get_packed_size bytes, and that packing unpacks again (with a fresh
 *     budget) and packs to the same bytes;
 *   - everything is freed (LeakSanitizer).
 * Any violation is __builtin_trap(), which libFuzzer reports as a crash.
 *
 * Built with clang -fsanitize=fuzzer,address,undefined by
 * tests/fuzz/CMakeLists.txt (ZCRPC_BUILD_FUZZ=ON). protobuf-c itself is
 * the system library (not instrumented); zcrpc's code and the generated
 * descriptors are. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zcrpc/pb.h"

#include "core/le.h"
#include "rpc/frame.h"
#include "pb/pb_dispatch.h"

#include "echo.pb-c.h"
#include "kv.pb-c.h"
#include "pbtest.pb-c.h"

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond))                                                   \
			__builtin_trap();                                      \
	} while (0)

static const ProtobufCServiceDescriptor *const services[] = {
	&zcrpc__pbtest__test__descriptor,
	&zcrpc__pbtest__other__descriptor,
	&zcrpc__echo__echo__descriptor,
	&zcrpc__kv__kv__descriptor,
};
#define N_SERVICES (sizeof(services) / sizeof(services[0]))

/* The id zcrpc_method_id() gives the method's full name. */
static uint32_t id_by_name(const ProtobufCServiceDescriptor *d, unsigned mi)
{
	char name[256];
	int n;

	n = snprintf(name, sizeof(name), "/%s/%s", d->name, d->methods[mi].name);
	CHECK(n > 0 && (size_t)n < sizeof(name));
	return zcrpc__fnv1a(name);
}

/* Packs @m into a fresh buffer of exactly its packed size. */
static uint8_t *pack(const ProtobufCMessage *m, size_t *len)
{
	uint8_t *buf;

	*len = protobuf_c_message_get_packed_size(m);
	buf = malloc(*len ? *len : 1);
	CHECK(buf != NULL);
	CHECK(protobuf_c_message_pack(m, buf) == *len);
	return buf;
}

/* Whether @m or a message inside it kept an unknown field numbered 0.
 * protobuf-c 1.4.1 accepts tag 0 when it is encoded in more than one byte
 * (0x80 0x00) and keeps it as an unknown field, packs it back as the single
 * byte 0x00, and refuses that on the next unpack. A quirk of the library
 * (a peer's message zcrpc passes to a handler, never one it makes), so the
 * round trip below is only required without it. */
static int has_tag0(const ProtobufCMessage *m)
{
	const ProtobufCMessageDescriptor *md = m->descriptor;
	unsigned i;
	size_t k;

	for (i = 0; i < m->n_unknown_fields; i++)
		if (m->unknown_fields[i].tag == 0)
			return 1;
	for (i = 0; i < md->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &md->fields[i];
		const char *base = (const char *)m;

		if (f->type != PROTOBUF_C_TYPE_MESSAGE)
			continue;
		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			size_t n = *(const size_t *)(base + f->quantifier_offset);
			ProtobufCMessage *const *v =
				*(ProtobufCMessage *const *const *)(base + f->offset);

			for (k = 0; k < n; k++)
				if (v[k] && has_tag0(v[k]))
					return 1;
		} else {
			const ProtobufCMessage *sub =
				*(const ProtobufCMessage *const *)(base + f->offset);

			if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
			    *(const uint32_t *)(base + f->quantifier_offset) !=
				    f->id)
				continue;
			if (sub && has_tag0(sub))
				return 1;
		}
	}
	return 0;
}

static void check_accepted(const ProtobufCServiceDescriptor *d, unsigned mi,
			   const ProtobufCMessage *in)
{
	struct zcrpc__pb_alloc pa;
	ProtobufCMessage *again;
	uint8_t *p1, *p2;
	size_t l1, l2;
	zcrpc_status st = ZCRPC_OK;
	char why[160];

	CHECK(in->descriptor == d->methods[mi].input);
	CHECK(protobuf_c_message_check(in));
	p1 = pack(in, &l1);
	if (has_tag0(in)) {
		free(p1);
		return;
	}
	again = zcrpc__pb_unpack_request(d, mi, p1, l1, &pa, &st, why,
					 sizeof(why));
	CHECK(again != NULL && st == ZCRPC_OK);
	CHECK(pa.used <= pa.budget && !pa.refused);
	p2 = pack(again, &l2);
	CHECK(l1 == l2 && memcmp(p1, p2, l1) == 0);
	free(p2);
	protobuf_c_message_free_unpacked(again, &pa.a);
	free(p1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const ProtobufCServiceDescriptor *d = NULL;
	struct zcrpc__pb_alloc pa;
	ProtobufCMessage *in;
	zcrpc_status st = ZCRPC_OK;
	uint32_t id;
	unsigned s, i;
	char why[160];
	int mi = -1, known = 0;

	if (size < 4)
		return 0;
	id = zcrpc__get_le32(data);

	/* The lookup agrees with the names, over every service. */
	for (s = 0; s < N_SERVICES; s++) {
		int found = zcrpc__pb_find_method(services[s], id);

		for (i = 0; i < services[s]->n_methods; i++)
			if (id_by_name(services[s], i) == id &&
			    zcrpc__pb_method_id(services[s], i) == id)
				break;
		if (i < services[s]->n_methods) {
			CHECK(found == (int)i);
			known = 1;
			if (!d) {
				d = services[s];
				mi = found;
			}
		} else {
			CHECK(found == -1);
		}
	}
	if (!known)
		return 0; /* UNIMPLEMENTED: the payload is never looked at */
	CHECK(d != NULL && mi >= 0 && (unsigned)mi < d->n_methods);

	/* The budgeted unpack of exactly the payload's bytes. */
	memset(why, 0, sizeof(why));
	in = zcrpc__pb_unpack_request(d, (unsigned)mi, data + 4, size - 4, &pa,
				      &st, why, sizeof(why));
	CHECK(pa.used <= pa.budget);
	CHECK(pa.budget >= ZCRPC_PB_UNPACK_BUDGET);
	if (!in) {
		CHECK(st == (pa.refused ? ZCRPC_RESOURCE_EXHAUSTED
					: ZCRPC_INTERNAL));
		CHECK(strnlen(why, sizeof(why)) > 0 &&
		      strnlen(why, sizeof(why)) < sizeof(why));
		return 0;
	}
	check_accepted(d, (unsigned)mi, in);
	protobuf_c_message_free_unpacked(in, &pa.a);
	return 0;
}
