/* CHECK() for the programs of tests/proto/gen (no RDMA device needed). */
#ifndef ZCRPC_GEN_CASES_CHECK_H
#define ZCRPC_GEN_CASES_CHECK_H
#include <stdio.h>

static int failures;

#define CHECK(cond)                                                          \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, \
				__LINE__, #cond);                            \
			failures++;                                          \
		}                                                            \
	} while (0)

/* Handlers for protoc-c's X__INIT(prefix): never called here. */
#define HANDLER(name, Svc, In, Closure)                                      \
	static void name(Svc *s, const In *in, Closure c, void *cd)          \
	{                                                                    \
		(void)s;                                                     \
		(void)in;                                                    \
		(void)c;                                                     \
		(void)cd;                                                    \
	}

#endif
