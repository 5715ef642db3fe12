/* zcrpc — an intrusive doubly-linked list (circular, with a head node), the
 * one used by every list of the library. An element embeds a struct
 * zcrpc__list and is found from it with zcrpc__container_of(). Insert and
 * remove are O(1); removing an element that is not on a list is allowed
 * (it is a no-op) once zcrpc__list_init() ran on it. Not thread-safe: the
 * owner's lock or thread guards each list. */
#ifndef ZCRPC_CORE_LIST_H
#define ZCRPC_CORE_LIST_H

#include <stddef.h>

struct zcrpc__list {
	struct zcrpc__list *next, *prev;
};

#define zcrpc__container_of(ptr, type, member)                                 \
	((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* An empty list head, or an element that is on no list. */
static inline void zcrpc__list_init(struct zcrpc__list *l)
{
	l->next = l->prev = l;
}

static inline int zcrpc__list_empty(const struct zcrpc__list *l)
{
	return l->next == l;
}

/* @e is on a list (or is a non-empty head). */
static inline int zcrpc__list_linked(const struct zcrpc__list *e)
{
	return e->next != e;
}

/* Inserts @e right after @at (at the front when @at is the head). */
static inline void zcrpc__list_insert_after(struct zcrpc__list *at,
					    struct zcrpc__list *e)
{
	e->prev = at;
	e->next = at->next;
	at->next->prev = e;
	at->next = e;
}

static inline void zcrpc__list_push_front(struct zcrpc__list *head,
					  struct zcrpc__list *e)
{
	zcrpc__list_insert_after(head, e);
}

static inline void zcrpc__list_push_back(struct zcrpc__list *head,
					 struct zcrpc__list *e)
{
	zcrpc__list_insert_after(head->prev, e);
}

/* Unlinks @e and leaves it on no list (zcrpc__list_linked() is 0). */
static inline void zcrpc__list_remove(struct zcrpc__list *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
	e->next = e->prev = e;
}

/* The first element's node, or NULL when empty. */
static inline struct zcrpc__list *zcrpc__list_first(struct zcrpc__list *head)
{
	return head->next == head ? NULL : head->next;
}

/* Walks @head; @it is a struct zcrpc__list *. The _safe form allows
 * removing @it inside the loop (@tmp holds the next node). */
#define zcrpc__list_foreach(it, head)                                          \
	for ((it) = (head)->next; (it) != (head); (it) = (it)->next)
#define zcrpc__list_foreach_safe(it, tmp, head)                                \
	for ((it) = (head)->next, (tmp) = (it)->next; (it) != (head);          \
	     (it) = (tmp), (tmp) = (it)->next)

#endif /* ZCRPC_CORE_LIST_H */
