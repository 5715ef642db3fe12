/* zcrpc — metadata copies (md.h). */
#include <stdlib.h>
#include <string.h>

#include "md.h"

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
