/* tests/unit/timer_heap.c, called from C++. */
#ifndef ZCRPC_TEST_TIMER_HEAP_H
#define ZCRPC_TEST_TIMER_HEAP_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif
/* 0 when the heap behaves; otherwise -1 and why in @err. */
int zcrpc_test_timer_heap(char *err, size_t errlen);
/* 0 when callbacks that stop, re-arm or free batch-mates behave. */
int zcrpc_test_timer_batch(char *err, size_t errlen);
#ifdef __cplusplus
}
#endif
#endif
