/* See conn_cap_driver.h. */
#include "conn_cap_driver.h"

#include <stdlib.h>

#include "rpc/conn_cap.h"
#include "rpc/lb_internal.h"

struct cap_fake {
	struct zcrpc__capholder h;
	int told;
};

static void on_evict(struct zcrpc__capholder *h)
{
	((struct cap_fake *)h)->told++;
}

struct cap_fake *cap_fake_new(void)
{
	struct cap_fake *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	zcrpc__list_init(&f->h.link);
	f->h.evict = on_evict;
	return f;
}

void cap_fake_leave(struct cap_fake *f)
{
	zcrpc__cap_leave(&f->h);
	free(f);
}

zcrpc_status cap_fake_take(struct cap_fake *f, char *why, size_t len)
{
	return zcrpc__cap_take(&f->h, why, len);
}

void cap_fake_put(struct cap_fake *f)
{
	zcrpc__cap_put(&f->h);
}

void cap_fake_idle(struct cap_fake *f, int64_t now_ns)
{
	zcrpc__cap_idle(&f->h, now_ns);
}

int cap_fake_busy(struct cap_fake *f)
{
	return zcrpc__cap_busy(&f->h);
}

int cap_fake_evicted(struct cap_fake *f)
{
	return zcrpc__cap_evicted(&f->h);
}

int cap_fake_expired(struct cap_fake *f, int64_t now_ns)
{
	return zcrpc__cap_idle_expired(&f->h, now_ns);
}

int cap_fake_told(const struct cap_fake *f)
{
	return f->told;
}

uint32_t cap_fake_held(const struct cap_fake *f)
{
	return f->h.held;
}

int cap_fake_findable(struct cap_fake *f)
{
	return zcrpc__cap_find(f->h.id) == &f->h;
}

int conn_opts_same(const zcrpc_channel_opts *a, const zcrpc_channel_opts *b)
{
	zcrpc_channel *x = calloc(1, sizeof(*x)), *y = calloc(1, sizeof(*y));
	int r = -1;

	if (x && y && zcrpc__channel_load_opts(x, a) == ZCRPC_OK) {
		if (zcrpc__channel_load_opts(y, b) == ZCRPC_OK) {
			r = zcrpc__conn_opts_same(x, y);
			free(y->src_addr);
		}
		free(x->src_addr);
	}
	free(x);
	free(y);
	return r;
}
