/* zcrpc — the worker's one timer mechanism: one-shot timers embedded in
 * their owners (a connection's connect / handshake / close deadline, the
 * worker's keepalive check, the RPC layer's call deadlines and deferred
 * work), kept in an intrusive binary min-heap ordered by due time, run from
 * the worker's progress and woken through its timerfd. Start, stop and
 * taking the earliest are O(log n) and allocate nothing; a progress turn
 * with nothing due costs two loads. The heap follows libuv's heap-inl.h
 * (src/heap-inl.h, MIT): the insertion path is read off the element count,
 * so no array is needed. */
#include "internal.h"

#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>

/* @a runs before @b: earlier due time, then the order they were started. */
static int before(const struct zcrpc__timer *a, const struct zcrpc__timer *b)
{
	if (a->due_ns != b->due_ns)
		return a->due_ns < b->due_ns;
	return a->seq < b->seq;
}

/* Swaps @parent with its child @child in the tree (their links, not their
 * contents). */
static void node_swap(struct zcrpc__timer_heap *h, struct zcrpc__timer *parent,
		      struct zcrpc__timer *child)
{
	struct zcrpc__timer *sibling, *l, *r, *p;

	l = parent->left;
	r = parent->right;
	p = parent->parent;
	parent->left = child->left;
	parent->right = child->right;
	parent->parent = child;
	child->parent = p;
	if (l == child) {
		child->left = parent;
		child->right = r;
		sibling = r;
	} else {
		child->right = parent;
		child->left = l;
		sibling = l;
	}
	if (sibling)
		sibling->parent = child;
	if (parent->left)
		parent->left->parent = parent;
	if (parent->right)
		parent->right->parent = parent;
	if (!p)
		h->min = child;
	else if (p->left == parent)
		p->left = child;
	else
		p->right = child;
}

/* The link that leads to position @n (1-based, breadth first). */
static struct zcrpc__timer **slot_at(struct zcrpc__timer_heap *h, unsigned n,
				     struct zcrpc__timer **parent)
{
	struct zcrpc__timer **at = &h->min;
	unsigned path = 0, k = 0;

	*parent = NULL;
	for (; n >= 2; k++, n /= 2)
		path = (path << 1) | (n & 1);
	while (k-- > 0) {
		*parent = *at;
		at = (path & 1) ? &(*at)->right : &(*at)->left;
		path >>= 1;
	}
	return at;
}

static void heap_insert(struct zcrpc__timer_heap *h, struct zcrpc__timer *t)
{
	struct zcrpc__timer *parent;
	struct zcrpc__timer **at = slot_at(h, h->n + 1, &parent);

	t->left = t->right = NULL;
	t->parent = parent;
	*at = t;
	h->n++;
	while (t->parent && before(t, t->parent))
		node_swap(h, t->parent, t);
}

static void heap_remove(struct zcrpc__timer_heap *h, struct zcrpc__timer *t)
{
	struct zcrpc__timer *parent, *last, *smallest;
	struct zcrpc__timer **at = slot_at(h, h->n, &parent);

	last = *at;
	*at = NULL;
	h->n--;
	if (last == t)
		return; /* the last position: nothing moves */
	/* The last element takes @t's place, then sinks or rises. */
	last->left = t->left;
	last->right = t->right;
	last->parent = t->parent;
	if (last->left)
		last->left->parent = last;
	if (last->right)
		last->right->parent = last;
	if (!t->parent)
		h->min = last;
	else if (t->parent->left == t)
		t->parent->left = last;
	else
		t->parent->right = last;
	for (;;) {
		smallest = last;
		if (last->left && before(last->left, smallest))
			smallest = last->left;
		if (last->right && before(last->right, smallest))
			smallest = last->right;
		if (smallest == last)
			break;
		node_swap(h, last, smallest);
	}
	while (last->parent && before(last, last->parent))
		node_swap(h, last->parent, last);
}

/* Sets the timerfd to the earliest due time (or disarms it), when that
 * changed. */
static void rearm(zcrpc_worker *w)
{
	int64_t t = w->timers.min ? w->timers.min->due_ns : 0;
	struct itimerspec its;

	if (t == w->timerfd_ns)
		return;
	w->timerfd_ns = t;
	memset(&its, 0, sizeof(its));
	if (t) {
		its.it_value.tv_sec = t / 1000000000LL;
		its.it_value.tv_nsec = t % 1000000000LL;
	}
	timerfd_settime(w->timerfd, TFD_TIMER_ABSTIME, &its, NULL);
}

void zcrpc__timers_init(zcrpc_worker *w)
{
	memset(&w->timers, 0, sizeof(w->timers));
	zcrpc__list_init(&w->timers.due);
}

/* Arms @t for @due_ns, or keeps it armed for its earlier due time. */
void zcrpc__timer_start(zcrpc_worker *w, struct zcrpc__timer *t,
			int64_t due_ns)
{
	if (due_ns <= 0)
		due_ns = 1; /* 0 means "not armed" */
	if (t->due_ns && t->due_ns <= due_ns)
		return; /* already due earlier */
	if (t->in_due) { /* due in the running batch: stays there */
		t->due_ns = due_ns;
		return;
	}
	if (t->in_heap)
		heap_remove(&w->timers, t);
	t->due_ns = due_ns;
	t->seq = ++w->timers.seq;
	t->in_heap = 1;
	heap_insert(&w->timers, t);
	if (w->timers.min == t && (!w->timerfd_ns || due_ns < w->timerfd_ns))
		rearm(w);
}

void zcrpc__timer_stop(zcrpc_worker *w, struct zcrpc__timer *t)
{
	if (t->in_heap)
		heap_remove(&w->timers, t);
	else if (t->in_due)
		zcrpc__list_remove(&t->due_link);
	t->in_heap = t->in_due = 0;
	t->due_ns = 0;
}

/* Runs every timer due at @now, earliest first; each is one-shot and may
 * start itself (or any timer) again from its callback, and stop or free
 * any timer. A timer started again for a time already passed runs in the
 * next call, so a callback cannot keep this loop going. */
int zcrpc__timers_run(zcrpc_worker *w, int64_t now)
{
	struct zcrpc__timer *t = w->timers.min;
	struct zcrpc__list *it;
	int ran = 0;

	if (!t || t->due_ns > now)
		return 0; /* busy-poll turns: nothing due */
	while ((t = w->timers.min) && t->due_ns <= now) {
		heap_remove(&w->timers, t);
		t->in_heap = 0;
		t->in_due = 1;
		zcrpc__list_push_back(&w->timers.due, &t->due_link);
	}
	while ((it = zcrpc__list_first(&w->timers.due))) {
		t = zcrpc__container_of(it, struct zcrpc__timer, due_link);
		zcrpc__list_remove(it);
		t->in_due = 0;
		t->due_ns = 0;
		t->fn(t, now);
		ran++;
	}
	rearm(w);
	return ran;
}

void zcrpc__timers_on_fd(zcrpc_worker *w)
{
	uint64_t u;

	while (read(w->timerfd, &u, sizeof(u)) > 0)
		;
	w->timerfd_ns = 0; /* a one-shot timerfd that went off is disarmed */
	rearm(w);
}
