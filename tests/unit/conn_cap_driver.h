/* C side of unit/test_conn_cap.cc: the connection cap's holders
 * (src/rpc/conn_cap.h, whose atomics C++17 cannot include) as fakes that
 * count the evictions they are told of, and the sharing key of
 * subchannels (src/rpc/subchannel.c) over two loaded option sets. */
#ifndef ZCRPC_TEST_CONN_CAP_DRIVER_H
#define ZCRPC_TEST_CONN_CAP_DRIVER_H

#include <stddef.h>
#include <stdint.h>

#include "zcrpc/rpc.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cap_fake;

struct cap_fake *cap_fake_new(void);
void cap_fake_leave(struct cap_fake *f); /* and free */
zcrpc_status cap_fake_take(struct cap_fake *f, char *why, size_t len);
void cap_fake_put(struct cap_fake *f);
void cap_fake_idle(struct cap_fake *f, int64_t now_ns);
int cap_fake_busy(struct cap_fake *f);
int cap_fake_evicted(struct cap_fake *f);
int cap_fake_expired(struct cap_fake *f, int64_t now_ns);
int cap_fake_told(const struct cap_fake *f); /* evictions it was told of */
uint32_t cap_fake_held(const struct cap_fake *f);
/* The holder that zcrpc__cap_find names by @f's id is @f. */
int cap_fake_findable(struct cap_fake *f);

/* zcrpc__conn_opts_same over channels loaded with @a and @b: 1, 0, or -1
 * when one does not load. */
int conn_opts_same(const zcrpc_channel_opts *a, const zcrpc_channel_opts *b);

#ifdef __cplusplus
}
#endif

#endif
