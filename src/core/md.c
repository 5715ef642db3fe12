/* zcrpc — metadata copies (md.h). */
#include <stdlib.h>
#include <string.h>

#include "md.h"
#include "../rpc/frame.h" /* the wire's metadata limits */

zcrpc_md *zcrpc__md_dup(const zcrpc_md *md, size_t n)
{
	size_t bytes = n * sizeof(zcrpc_md), i;
	zcrpc_md *out;
	char *p;

	if (!n)
		return NULL;
	for (i = 0; i < n; i++)
		bytes += md[i].key_len + md[i].value_len;
	out = malloc(bytes);
	if (!out)
		return NULL;
	p = (char *)(out + n);
	for (i = 0; i < n; i++) {
		if (md[i].key_len)
			memcpy(p, md[i].key, md[i].key_len);
		out[i].key = p;
		out[i].key_len = md[i].key_len;
		p += md[i].key_len;
		if (md[i].value_len)
			memcpy(p, md[i].value, md[i].value_len);
		out[i].value = p;
		out[i].value_len = md[i].value_len;
		p += md[i].value_len;
	}
	return out;
}

/* Adds the encoded size of @n pairs to *@total; 0 when one is malformed. */
static int md_add(const zcrpc_md *md, size_t n, size_t *total)
{
	size_t i;

	if (n && !md)
		return 0;
	for (i = 0; i < n; i++) {
		if (!md[i].key || !md[i].key_len || md[i].key_len > 255 ||
		    md[i].value_len > 0xffff || (!md[i].value && md[i].value_len))
			return 0;
		*total += 3 + md[i].key_len + md[i].value_len;
	}
	return 1;
}

int zcrpc__md_fits(const zcrpc_md *a, size_t na, const zcrpc_md *b,
		   size_t nb)
{
	size_t total = 0;

	if (na > ZCRPC_MD_MAX_PAIRS || nb > ZCRPC_MD_MAX_PAIRS - na)
		return 0;
	return md_add(a, na, &total) && md_add(b, nb, &total) &&
	       total <= ZCRPC_MD_MAX_LEN;
}
