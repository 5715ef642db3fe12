/* tests/unit/conn_limits_table.c, called from C++. */
#ifndef ZCRPC_TEST_CONN_LIMITS_TABLE_H
#define ZCRPC_TEST_CONN_LIMITS_TABLE_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif
/* 0 when the per-source counts match a plain model through @rounds random
 * takes and releases over @sources addresses (limit @per per source, 0 =
 * none; @max in all, 0 = none); otherwise -1 and why in @err. */
int zcrpc_test_conn_limits(unsigned sources, unsigned per, unsigned max,
			   unsigned rounds, char *err, size_t errlen);
#ifdef __cplusplus
}
#endif
#endif
