/* zcrpc — interceptor chains: adding them, and running each hook of a
 * chain for one call (intercept.h). */
#include "client_internal.h"
#include "lb_internal.h"
#include "server_internal.h"
#include "intercept.h"

#include <string.h>

#define MIN_CLIENT_IC ZCRPC__LAYOUT_END(zcrpc_client_interceptor, arg)
#define MIN_SERVER_IC ZCRPC__LAYOUT_END(zcrpc_server_interceptor, arg)

zcrpc_status zcrpc_channel_add_interceptor(zcrpc_channel *ch,
					   const zcrpc_client_interceptor *ic)
{
	zcrpc_client_interceptor c;

	if (!ch || !ic)
		return ZCRPC_INVALID_ARGUMENT;
	memset(&c, 0, sizeof(c));
	if (ZCRPC__ABI_IN(&c, ic, MIN_CLIENT_IC) != ZCRPC_OK)
		return ZCRPC_INVALID_ARGUMENT;
	if (ch->st.calls_started || ch->has_streams || ch->made_streams)
		return ZCRPC_FAILED_PRECONDITION;
	if (ch->ics.n == ZCRPC_MAX_INTERCEPTORS)
		return ZCRPC_RESOURCE_EXHAUSTED;
	/* (a target channel's attempts and streams run it: lb_call.c) */
	ch->ics.ic[ch->ics.n++] = c;
	return ZCRPC_OK;
}

zcrpc_status zcrpc_server_add_interceptor(zcrpc_server *s,
					  const zcrpc_server_interceptor *ic)
{
	zcrpc_server_interceptor c;

	if (!s || !ic)
		return ZCRPC_INVALID_ARGUMENT;
	memset(&c, 0, sizeof(c));
	if (ZCRPC__ABI_IN(&c, ic, MIN_SERVER_IC) != ZCRPC_OK)
		return ZCRPC_INVALID_ARGUMENT;
	s = s->root;
	if (s->listening)
		return ZCRPC_FAILED_PRECONDITION; /* other threads read it */
	if (s->ics.n == ZCRPC_MAX_INTERCEPTORS)
		return ZCRPC_RESOURCE_EXHAUSTED;
	s->ics.ic[s->ics.n++] = c;
	return ZCRPC_OK;
}

zcrpc_status zcrpc__cchain_start(const struct zcrpc__cchain *ch,
				 const zcrpc_call_info *info, zcrpc_md *add,
				 size_t *n_add, struct zcrpc__icall *ic)
{
	size_t i;

	*n_add = 0;
	ic->started = 0;
	ic->ended = 0;
	for (i = 0; i < ch->n; i++) {
		const zcrpc_client_interceptor *x = &ch->ic[i];
		size_t n = 0, room = ZCRPC_INTERCEPT_MD_ROOM - *n_add;
		zcrpc_status st;

		ic->state[i] = NULL;
		if (!x->on_start) {
			ic->started++;
			continue;
		}
		st = x->on_start(info, add + *n_add, room, &n, &ic->state[i],
				 x->arg);
		if (st != ZCRPC_OK) {
			zcrpc__cchain_end(ch, ic, st, "refused by an interceptor",
					  NULL, 0);
			return st;
		}
		ic->started++;
		*n_add += n > room ? room : n;
	}
	return ZCRPC_OK;
}

zcrpc_status zcrpc__cchain_start_md(const struct zcrpc__cchain *ch,
				    uint32_t method, int streaming,
				    int64_t timeout_us, const zcrpc_md **md,
				    size_t *n_md, zcrpc_md *all,
				    struct zcrpc__icall *ic)
{
	zcrpc_md add[ZCRPC_INTERCEPT_MD_ROOM];
	zcrpc_call_info info;
	size_t n_add;
	zcrpc_status st;

	memset(&info, 0, sizeof(info));
	info.size = sizeof(info);
	info.method_id = method;
	info.streaming = streaming;
	info.md = *md;
	info.n_md = *n_md;
	info.timeout_us = timeout_us ? timeout_us : -1;
	st = zcrpc__cchain_start(ch, &info, add, &n_add, ic);
	if (st != ZCRPC_OK || !n_add)
		return st;
	if (*n_md + n_add > ZCRPC_MD_MAX_PAIRS) {
		zcrpc__cchain_end(ch, ic, ZCRPC_INVALID_ARGUMENT,
				  "too much metadata with the interceptors'",
				  NULL, 0);
		return ZCRPC_INVALID_ARGUMENT;
	}
	if (*n_md)
		memcpy(all, *md, *n_md * sizeof(*all));
	memcpy(all + *n_md, add, n_add * sizeof(*all));
	*md = all;
	*n_md += n_add;
	return ZCRPC_OK;
}

void zcrpc__cchain_message(const struct zcrpc__cchain *ch,
			   struct zcrpc__icall *ic, int outgoing, size_t len)
{
	size_t i;

	for (i = 0; i < ic->started && !ic->ended; i++)
		if (ch->ic[i].on_message)
			ch->ic[i].on_message(ic->state[i], outgoing, len,
					     ch->ic[i].arg);
}

void zcrpc__cchain_end(const struct zcrpc__cchain *ch, struct zcrpc__icall *ic,
		       zcrpc_status st, const char *msg, const zcrpc_md *md,
		       size_t n_md)
{
	size_t i;

	if (ic->ended)
		return;
	ic->ended = 1;
	for (i = ic->started; i-- > 0;)
		if (ch->ic[i].on_end)
			ch->ic[i].on_end(ic->state[i], st, msg ? msg : "", md,
					 n_md, ch->ic[i].arg);
}

zcrpc_status zcrpc__schain_call(const struct zcrpc__schain *ch,
				const zcrpc_call_info *info, const char **msg,
				struct zcrpc__icall *ic)
{
	size_t i;

	ic->started = 0;
	ic->ended = 0;
	*msg = NULL;
	for (i = 0; i < ch->n; i++) {
		const zcrpc_server_interceptor *x = &ch->ic[i];
		zcrpc_status st;

		ic->state[i] = NULL;
		if (!x->on_call) {
			ic->started++;
			continue;
		}
		st = x->on_call(info, msg, &ic->state[i], x->arg);
		if (st != ZCRPC_OK) {
			if ((unsigned)st >= ZCRPC_STATUS_COUNT)
				st = ZCRPC_UNKNOWN;
			zcrpc__schain_end(ch, ic, st);
			if (!*msg)
				*msg = "refused by an interceptor";
			return st;
		}
		ic->started++;
	}
	return ZCRPC_OK;
}

void zcrpc__schain_message(const struct zcrpc__schain *ch,
			   struct zcrpc__icall *ic, int outgoing, size_t len)
{
	size_t i;

	for (i = 0; i < ic->started && !ic->ended; i++)
		if (ch->ic[i].on_message)
			ch->ic[i].on_message(ic->state[i], outgoing, len,
					     ch->ic[i].arg);
}

void zcrpc__schain_end(const struct zcrpc__schain *ch, struct zcrpc__icall *ic,
		       zcrpc_status st)
{
	size_t i;

	if (ic->ended)
		return;
	ic->ended = 1;
	for (i = ic->started; i-- > 0;)
		if (ch->ic[i].on_end)
			ch->ic[i].on_end(ic->state[i], st, ch->ic[i].arg);
}
