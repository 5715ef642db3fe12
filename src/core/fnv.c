/* zcrpc — 32-bit FNV-1a, the method-id hash (fnv.h). Compiled into
 * libzcrpc, libzcrpc_pb and zcrpc-gen: one definition of a hash that is
 * part of the wire format. */
#include "fnv.h"

/* FNV-1a's 32-bit prime, 2^24 + 2^8 + 0x93. */
#define FNV1A_PRIME 16777619u

uint32_t zcrpc__fnv1a_more(uint32_t h, const char *s)
{
	while (*s) {
		h ^= (uint8_t)*s++;
		h *= FNV1A_PRIME;
	}
	return h;
}

uint32_t zcrpc__fnv1a(const char *s)
{
	return zcrpc__fnv1a_more(ZCRPC__FNV1A_BASIS, s);
}
