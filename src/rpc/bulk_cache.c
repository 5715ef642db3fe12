/* zcrpc — a cache of registered buffers for bulk payloads: power-of-two
 * classes from 64 KiB, registered (on every device of the context,
 * writable by peers) when first needed and reused, up to a byte limit.
 *
 * Registering pins and maps the memory and takes time in proportion to its
 * size (1 GiB took 17 s on rxe), so a worker on its request path never
 * registers: zcrpc__bulk_get_async() hands the work to the cache's own
 * thread, which registers (and deregisters what the cache gives back), and
 * zcrpc__bulk_collect() delivers the result on the worker's thread later.
 * When the limit is reached, free buffers of other classes are given back
 * to make room, so memory a peak left in one class serves other sizes
 * again. Buffers free for longer than an idle time are given back too
 * (zcrpc__bulk_trim). */
#include "bulk_cache.h"
#include "frame.h" /* ZCRPC_BULK_MAX */
#include "../transport/seam.h"

#include <stdlib.h>
#include <string.h>

size_t zcrpc__bulk_last_piece(size_t len, size_t piece)
{
	if (!len || !piece || len <= piece)
		return len;
	return len - ((len - 1) / piece) * piece;
}

void zcrpc__bulk_scrub(void *p, size_t len, size_t piece)
{
	if (p && piece && len > piece)
		memset(p, 0, len);
}

void zcrpc__bulk_scrub_for(const zcrpc_conn *conn, void *p, size_t len)
{
	zcrpc_conn_info info;

	zcrpc_conn_get_info(conn, &info, sizeof(info));
	if (info.write_end == ZCRPC_WRITE_END_MSG) {
		/* The length comes from the peer's WRITTEN, not the device:
		 * nothing it skipped may show what the memory held. */
		if (p && len)
			memset(p, 0, len);
		return;
	}
	zcrpc__bulk_scrub(p, len, zcrpc_conn_write_piece(conn));
}

/* Work for the cache's thread: register a buffer for @ref, or deregister
 * @buf (release). */
struct zcrpc__bulk_job {
	struct zcrpc__bulk_job *next;
	int release;
	unsigned cls;
	uint32_t ref;
	struct zcrpc__bulkbuf *buf; /* release: the buffer; grow: the result */
};

void zcrpc__bulk_init(struct zcrpc__bulk_cache *c, zcrpc_context *ctx,
		      size_t limit)
{
	memset(c, 0, sizeof(*c));
	c->ctx = ctx;
	c->limit = limit;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cond, NULL);
}

size_t zcrpc__bulk_cap_of(size_t len)
{
	unsigned k = ZCRPC_BULK_MIN_SHIFT;

	while (((size_t)1 << k) < len)
		k++;
	return (size_t)1 << k;
}

static unsigned cls_of(size_t len)
{
	unsigned k = ZCRPC_BULK_MIN_SHIFT;

	while (((size_t)1 << k) < len)
		k++;
	return k - ZCRPC_BULK_MIN_SHIFT;
}

/* Allocates and registers a buffer of class @k (any thread). */
static struct zcrpc__bulkbuf *buf_make(struct zcrpc__bulk_cache *c, unsigned k)
{
	size_t cap = (size_t)1 << (k + ZCRPC_BULK_MIN_SHIFT);
	struct zcrpc__bulkbuf *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	if (posix_memalign(&b->ptr, 4096, cap))
		goto err_buf;
	if (zcrpc_mr_register(c->ctx, b->ptr, cap, ZCRPC_MR_REMOTE_WRITE,
			      &b->mr) != ZCRPC_OK)
		goto err_ptr;
	b->cap = cap;
	b->cls = k;
	atomic_fetch_add(&c->pinned, cap);
	return b;

err_ptr:
	free(b->ptr);
err_buf:
	free(b);
	return NULL;
}

static void buf_destroy(struct zcrpc__bulk_cache *c, struct zcrpc__bulkbuf *b)
{
	zcrpc_mr_deregister(b->mr);
	atomic_fetch_sub(&c->pinned, b->cap);
	free(b->ptr);
	free(b);
}

static void *thread_main(void *arg)
{
	struct zcrpc__bulk_cache *c = arg;
	struct zcrpc__bulk_job *j;

	pthread_mutex_lock(&c->lock);
	for (;;) {
		while (!c->jobs && !c->stop)
			pthread_cond_wait(&c->cond, &c->lock);
		if (!(j = c->jobs))
			break; /* stopping, nothing left */
		int stop = c->stop;

		c->jobs = j->next;
		if (!c->jobs)
			c->jobs_tail = NULL;
		pthread_mutex_unlock(&c->lock);
		if (j->release) {
			buf_destroy(c, j->buf);
			free(j);
			j = NULL;
		} else if (!stop) {
			j->buf = buf_make(c, j->cls);
		}
		pthread_mutex_lock(&c->lock);
		if (j) { /* a growth, done (or skipped): to the worker */
			j->next = c->done;
			c->done = j;
		}
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* Queues @j for the thread, starting it the first time. */
static int enqueue(struct zcrpc__bulk_cache *c, struct zcrpc__bulk_job *j)
{
	pthread_mutex_lock(&c->lock);
	if (!c->thread_up) {
		if (pthread_create(&c->thread, NULL, thread_main, c)) {
			pthread_mutex_unlock(&c->lock);
			return -1;
		}
		c->thread_up = 1;
	}
	j->next = NULL;
	if (c->jobs_tail)
		c->jobs_tail->next = j;
	else
		c->jobs = j;
	c->jobs_tail = j;
	pthread_cond_signal(&c->cond);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

/* Gives @b back: on the thread when it runs (deregistering takes time
 * too), here otherwise. The bytes leave c->total now. */
static void release(struct zcrpc__bulk_cache *c, struct zcrpc__bulkbuf *b)
{
	struct zcrpc__bulk_job *j;

	c->total -= b->cap;
	c->released += b->cap;
	if (c->thread_up && (j = calloc(1, sizeof(*j)))) {
		j->release = 1;
		j->buf = b;
		if (!enqueue(c, j))
			return;
		free(j);
	}
	buf_destroy(c, b);
}

static void unlink_free(struct zcrpc__bulk_cache *c, struct zcrpc__bulkbuf **pp)
{
	struct zcrpc__bulkbuf *b = *pp;

	*pp = b->next;
	b->next = NULL;
	c->free_bytes -= b->cap;
}

/* A buffer that may still carry a memory window (its connection closed
 * before the grant was revoked; the window goes at the teardown) is not
 * deregistered yet: a registration with a bound window cannot be. */
static int releasable(const struct zcrpc__bulkbuf *b, int64_t now)
{
	return !b->keep_until_ns || now >= b->keep_until_ns;
}

/* Makes room for @cap more bytes under the limit by giving back free
 * buffers of other classes, largest first. 0 when it fits. */
static int make_room(struct zcrpc__bulk_cache *c, size_t cap)
{
	unsigned k = ZCRPC_BULK_CLASSES;
	int64_t now = 0;

	if (cap > c->limit)
		return -1;
	while (c->total + cap > c->limit && k > 0) {
		struct zcrpc__bulkbuf **pp = &c->free[k - 1], *b;

		if (!now)
			now = zcrpc__now_ns();
		while (*pp && !releasable(*pp, now))
			pp = &(*pp)->next;
		if (!(b = *pp)) {
			k--;
			continue;
		}
		unlink_free(c, pp);
		c->evicted++;
		release(c, b);
	}
	return c->total + cap > c->limit ? -1 : 0;
}

/* A free buffer of class @k, or NULL. */
static struct zcrpc__bulkbuf *take_free(struct zcrpc__bulk_cache *c, unsigned k)
{
	struct zcrpc__bulkbuf *b = c->free[k];

	if (!b)
		return NULL;
	unlink_free(c, &c->free[k]);
	c->in_use += b->cap;
	return b;
}

static zcrpc_status check_len(size_t len, unsigned *k)
{
	if (!len || len > ZCRPC_BULK_MAX)
		return ZCRPC_INVALID_ARGUMENT;
	*k = cls_of(len);
	if (*k >= ZCRPC_BULK_CLASSES)
		return ZCRPC_INVALID_ARGUMENT;
	return ZCRPC_OK;
}

zcrpc_status zcrpc__bulk_get(struct zcrpc__bulk_cache *c, size_t len,
			     struct zcrpc__bulkbuf **out)
{
	struct zcrpc__bulkbuf *b;
	unsigned k;
	zcrpc_status st = check_len(len, &k);

	if (st != ZCRPC_OK)
		return st;
	if ((b = take_free(c, k))) {
		*out = b;
		return ZCRPC_OK;
	}
	if (make_room(c, (size_t)1 << (k + ZCRPC_BULK_MIN_SHIFT)))
		return ZCRPC_RESOURCE_EXHAUSTED;
	b = buf_make(c, k);
	if (!b)
		return ZCRPC_RESOURCE_EXHAUSTED;
	c->total += b->cap;
	c->in_use += b->cap;
	*out = b;
	return ZCRPC_OK;
}

zcrpc_status zcrpc__bulk_get_async(struct zcrpc__bulk_cache *c, size_t len,
				   uint32_t ref, struct zcrpc__bulkbuf **out)
{
	struct zcrpc__bulk_job *j;
	unsigned k;
	size_t cap;
	zcrpc_status st = check_len(len, &k);

	if (st != ZCRPC_OK)
		return st;
	if ((*out = take_free(c, k)))
		return ZCRPC_OK;
	cap = (size_t)1 << (k + ZCRPC_BULK_MIN_SHIFT);
	if (make_room(c, cap))
		return ZCRPC_RESOURCE_EXHAUSTED;
	j = calloc(1, sizeof(*j));
	if (!j)
		return ZCRPC_RESOURCE_EXHAUSTED;
	j->cls = k;
	j->ref = ref;
	if (enqueue(c, j)) {
		free(j);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	c->total += cap; /* promised: counted against the limit now */
	c->growing++;
	return ZCRPC_UNAVAILABLE;
}

unsigned zcrpc__bulk_collect(struct zcrpc__bulk_cache *c,
			     void (*fn)(void *arg, uint32_t ref,
					struct zcrpc__bulkbuf *b),
			     void *arg)
{
	struct zcrpc__bulk_job *j, *next, *rev = NULL;
	unsigned n = 0;

	if (!c->growing)
		return 0;
	pthread_mutex_lock(&c->lock);
	j = c->done;
	c->done = NULL;
	pthread_mutex_unlock(&c->lock);
	for (; j; j = next) { /* the list is newest first: oldest first now */
		next = j->next;
		j->next = rev;
		rev = j;
	}
	for (j = rev; j; j = next) {
		size_t cap = (size_t)1 << (j->cls + ZCRPC_BULK_MIN_SHIFT);

		next = j->next;
		c->growing--;
		n++;
		if (j->buf)
			c->in_use += cap;
		else
			c->total -= cap; /* the promise failed */
		fn(arg, j->ref, j->buf);
		free(j);
	}
	return n;
}

void zcrpc__bulk_put(struct zcrpc__bulk_cache *c, struct zcrpc__bulkbuf *b)
{
	if (!b)
		return;
	c->in_use -= b->cap;
	b->freed_ns = zcrpc__now_ns();
	b->next = c->free[b->cls];
	c->free[b->cls] = b;
	c->free_bytes += b->cap;
}

size_t zcrpc__bulk_trim(struct zcrpc__bulk_cache *c, int64_t now,
			int64_t idle_ns)
{
	size_t given = 0;
	unsigned k;

	for (k = 0; k < ZCRPC_BULK_CLASSES; k++) {
		struct zcrpc__bulkbuf **pp = &c->free[k];

		/* Newest first: the buffers behind the first idle one were
		 * freed earlier still. */
		while (*pp && now - (*pp)->freed_ns < idle_ns)
			pp = &(*pp)->next;
		while (*pp) {
			struct zcrpc__bulkbuf *b = *pp;

			if (!releasable(b, now)) {
				pp = &b->next;
				continue;
			}
			unlink_free(c, pp);
			given += b->cap;
			release(c, b);
		}
	}
	return given;
}

void zcrpc__bulk_get_stats(const struct zcrpc__bulk_cache *c,
			   struct zcrpc__bulk_stats *out)
{
	out->pinned = atomic_load(&((struct zcrpc__bulk_cache *)c)->pinned);
	out->total = c->total;
	out->in_use = c->in_use;
	out->free_bytes = c->free_bytes;
	out->released = c->released;
	out->evicted = c->evicted;
	out->growing = c->growing;
}

void zcrpc__bulk_fini(struct zcrpc__bulk_cache *c)
{
	struct zcrpc__bulk_job *j;
	unsigned i;

	if (c->thread_up) {
		pthread_mutex_lock(&c->lock);
		c->stop = 1; /* queued releases still run; growths are skipped */
		pthread_cond_signal(&c->cond);
		pthread_mutex_unlock(&c->lock);
		pthread_join(c->thread, NULL);
		c->thread_up = 0;
	}
	while ((j = c->done)) {
		c->done = j->next;
		if (j->buf)
			buf_destroy(c, j->buf);
		free(j);
	}
	for (i = 0; i < ZCRPC_BULK_CLASSES; i++) {
		struct zcrpc__bulkbuf *b;

		while ((b = c->free[i])) {
			c->free[i] = b->next;
			buf_destroy(c, b);
		}
	}
	c->total = c->in_use = c->free_bytes = 0;
	c->growing = 0;
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->lock);
}
