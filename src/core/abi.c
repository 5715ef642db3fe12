/* zcrpc — the one ABI rule's copies in and out (see abi.h, docs/abi.md). */
#include "abi.h"

#include <string.h>

/* No struct of the API comes near this; a larger size is garbage (an
 * uninitialised struct), refused before the scan below reads past it. */
#define ZCRPC__ABI_SIZE_MAX 4096

zcrpc_status zcrpc__abi_in(void *dst, size_t dst_size, const void *src,
			   size_t min_size)
{
	const unsigned char *s = src;
	size_t size, i;

	if (min_size < sizeof(size_t))
		min_size = sizeof(size_t);
	memcpy(&size, src, sizeof(size));
	if (size < min_size || size > ZCRPC__ABI_SIZE_MAX)
		return ZCRPC_INVALID_ARGUMENT;
	/* A newer caller: what lies past our layout must be its defaults
	 * (zero), or it asked for something this library cannot do. */
	for (i = dst_size; i < size; i++)
		if (s[i])
			return ZCRPC_INVALID_ARGUMENT;
	memcpy(dst, src, size < dst_size ? size : dst_size);
	memcpy(dst, &dst_size, sizeof(dst_size));
	return ZCRPC_OK;
}

size_t zcrpc__abi_out(void *dst, size_t dst_size, const void *src,
		      size_t src_size)
{
	size_t n = dst_size < src_size ? dst_size : src_size;

	if (dst && n)
		memcpy(dst, src, n);
	return dst ? n : 0;
}

size_t zcrpc__abi_sized_init(void *dst, size_t dst_size, size_t lib_size)
{
	size_t n = dst_size < lib_size ? dst_size : lib_size;

	memset(dst, 0, n);
	if (n >= sizeof(n))
		memcpy(dst, &n, sizeof(n));
	return n;
}

void zcrpc__abi_init(void *dst, size_t dst_size, const void *defaults,
		     size_t lib_size)
{
	if (!dst || dst_size < sizeof(size_t) || dst_size > ZCRPC__ABI_SIZE_MAX)
		return;
	memset(dst, 0, dst_size);
	memcpy(dst, defaults, dst_size < lib_size ? dst_size : lib_size);
	memcpy(dst, &dst_size, sizeof(dst_size));
}
