/* zcrpc — subchannels: the connection behind a target channel's backend
 * is an ordinary channel to HOST:PORT, shared by the target channels of
 * one worker whose connection options all match (the sharing key is the
 * address and every option a connection or its calls use: window, send
 * depth, key and identity, traffic class, device, source address,
 * timeouts, limits, bulk threshold). The pool is a list per process
 * under a mutex (backends are made on their workers' threads, and rarely);
 * a subchannel counts its users and goes with the last. docs/balancing.md,
 * "Shared connections". */
#include "lb_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static struct zcrpc__list pool = {&pool, &pool};

static int same_str(const char *a, const char *b)
{
	return (!a && !b) || (a && b && !strcmp(a, b));
}

/* Every field of zcrpc_channel_opts is named here: a field added to the
 * struct must be added to the key (or to the balancing ones ignored), and
 * this assertion says so when the size changes. */
#if defined(__x86_64__)
_Static_assert(sizeof(zcrpc_channel_opts) == 168,
	       "a field was added to zcrpc_channel_opts: is it in the "
	       "sharing key (zcrpc__conn_opts_same)?");
#endif

int zcrpc__conn_opts_same(const zcrpc_channel *a, const zcrpc_channel *b)
{
	const zcrpc_channel_opts *x = &a->o, *y = &b->o;

	/* ignored, the target channel's own: default_timeout_us (its calls
	 * carry their deadlines), lb_policy, picker, retry_buffer,
	 * health_check_ms, health_service, no_sharing */
	return x->connect_timeout_ms == y->connect_timeout_ms &&
	       x->window == y->window && x->max_pending == y->max_pending &&
	       x->max_calls == y->max_calls &&
	       x->backoff_initial_ms == y->backoff_initial_ms &&
	       x->backoff_max_ms == y->backoff_max_ms &&
	       x->bulk_threshold == y->bulk_threshold &&
	       same_str(a->src_addr, b->src_addr) &&
	       x->psk_len == y->psk_len &&
	       (!x->psk) == (!y->psk) &&
	       (!x->psk || !memcmp(a->psk, b->psk, x->psk_len)) &&
	       !strcmp(a->identity, b->identity) &&
	       x->send_depth == y->send_depth && x->tos == y->tos &&
	       (!x->device) == (!y->device) &&
	       (!x->device || !strcmp(a->device, b->device)) &&
	       x->port == y->port && x->gid_index == y->gid_index;
}

/* The subchannels' options: the target channel's, its copies named. */
static void sub_opts(const zcrpc_channel *ch, zcrpc_channel_opts *so)
{
	*so = ch->o;
	so->identity = ch->o.psk && ch->identity[0] ? ch->identity : NULL;
	so->device = ch->o.device ? ch->device : NULL;
	so->src_addr = ch->src_addr;
	so->default_timeout_us = 0; /* the target channel's calls say */
	so->lb_policy = NULL;
	so->picker = NULL;
	so->retry_buffer = 0;
	so->health_check_ms = 0;
	so->health_service = NULL;
	so->no_sharing = 0;
}

zcrpc_status zcrpc__subchannel_get(zcrpc_channel *lbch, const char *host,
				   const char *port, zcrpc_channel **out)
{
	zcrpc_channel_opts so;
	zcrpc_channel *sub;
	struct zcrpc__list *n;

	if (!lbch->o.no_sharing) {
		pthread_mutex_lock(&pool_mu);
		zcrpc__list_foreach(n, &pool) {
			sub = zcrpc__container_of(n, zcrpc_channel, share_link);
			if (sub->w == lbch->w && !strcmp(sub->host, host) &&
			    !strcmp(sub->port, port) &&
			    zcrpc__conn_opts_same(sub, lbch)) {
				sub->share_refs++;
				pthread_mutex_unlock(&pool_mu);
				zcrpc__cap_count_sub(0, 1);
				*out = sub;
				return ZCRPC_OK;
			}
		}
		pthread_mutex_unlock(&pool_mu);
	}
	sub_opts(lbch, &so);
	if (zcrpc_channel_create(lbch->w, host, port, &so, &sub) != ZCRPC_OK)
		return ZCRPC_RESOURCE_EXHAUSTED;
	sub->is_sub = 1;
	sub->share_refs = 1;
	if (!lbch->o.no_sharing) {
		sub->pooled = 1;
		pthread_mutex_lock(&pool_mu);
		zcrpc__list_push_back(&pool, &sub->share_link);
		pthread_mutex_unlock(&pool_mu);
	}
	zcrpc__cap_count_sub(1, 0);
	*out = sub;
	return ZCRPC_OK;
}

void zcrpc__subchannel_put(zcrpc_channel *sub)
{
	int last;

	pthread_mutex_lock(&pool_mu);
	last = !--sub->share_refs;
	if (last && sub->pooled)
		zcrpc__list_remove(&sub->share_link);
	pthread_mutex_unlock(&pool_mu);
	if (!last) {
		zcrpc__cap_count_sub(0, -1);
		return;
	}
	zcrpc__cap_count_sub(-1, 0);
	zcrpc_channel_destroy(sub);
}

void zcrpc__channel_users_changed(zcrpc_channel *sub, int failed)
{
	struct zcrpc__list *n;
	int64_t now = zcrpc__now_ns();

	zcrpc__list_foreach(n, &sub->users) {
		struct zcrpc__backend *be =
			zcrpc__container_of(n, struct zcrpc__backend, ulink);

		if (failed)
			zcrpc__lb_refresh_soon(be->lb);
		zcrpc__lb_arm(be->lb, now);
	}
}
