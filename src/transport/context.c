/* zcrpc — the device context: every RDMA device librdmacm knows, each with
 * one protection domain, shared by the workers that use the context; and
 * user memory registered once on all of them. Grants are in mw.c. */
#include "internal.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/abi.h"
#include "../core/log.h"

/* Queries @verbs, probes its profile and gives it a PD in @d. 0, or -1
 * (the device is not used). */
static int dev_open(struct zcrpc__ctx_dev *d, struct ibv_context *verbs)
{
	struct ibv_port_attr pa;

	memset(d, 0, sizeof(*d));
	d->verbs = verbs;
	if (ibv_query_device(verbs, &d->attr))
		return -1;
	d->max_msg_sz = 1U << 30;
	if (ibv_query_port(verbs, 1, &pa) == 0) {
		if (pa.max_msg_sz)
			d->max_msg_sz = pa.max_msg_sz;
		zcrpc__profile_probe(&d->prof, verbs, &d->attr, &pa);
	} else {
		zcrpc__profile_probe(&d->prof, verbs, &d->attr, NULL);
	}
	atomic_init(&d->inline_ask, d->prof.inline_cap);
	atomic_init(&d->used, 0);
	atomic_init(&d->reg_bytes, 0);
	atomic_init(&d->ports_down, 0);
	d->pd = ibv_alloc_pd(verbs);
	return d->pd ? 0 : -1;
}

int zcrpc__context_adopt(zcrpc_context *ctx, struct ibv_context *verbs)
{
	const char *name = ibv_get_device_name(verbs->device);
	struct ibv_context **list;
	struct zcrpc__list *it;
	int idx = -1, i, n = 0;

	pthread_mutex_lock(&ctx->lock);
	if ((i = zcrpc__context_dev_index(ctx, verbs)) >= 0) {
		idx = i; /* another worker adopted it meanwhile */
		goto out;
	}
	/* Its old slot (same name, fully released), else a free one. */
	for (i = 0; i < ctx->ndev && idx < 0; i++)
		if (ctx->dev[i].removed && !ctx->dev[i].verbs &&
		    !ctx->dev[i].sweeps_left && !strcmp(ctx->dev[i].prof.name, name))
			idx = i;
	if (idx < 0 && ctx->ndev < ZCRPC_MAX_DEVICES)
		idx = ctx->ndev;
	if (idx < 0)
		goto out;
	/* A fresh list holds the device open; the old one goes after it, so
	 * no device's count drops to zero meanwhile. */
	list = rdma_get_devices(&n);
	if (!list || dev_open(&ctx->dev[idx], verbs)) {
		if (ctx->dev[idx].pd)
			ibv_dealloc_pd(ctx->dev[idx].pd);
		memset(&ctx->dev[idx], 0, sizeof(ctx->dev[idx]));
		if (idx < ctx->ndev) { /* keep the slot as a removed one */
			ctx->dev[idx].removed = 1;
			snprintf(ctx->dev[idx].prof.name,
				 sizeof(ctx->dev[idx].prof.name), "%s", name);
		}
		if (list)
			rdma_free_devices(list);
		idx = -1;
		goto out;
	}
	if (ctx->list)
		rdma_free_devices(ctx->list);
	ctx->list = list;
	if (idx == ctx->ndev)
		ctx->ndev++;
	zcrpc__context_async_init_dev(ctx, idx);
	zcrpc__context_watch_dev(ctx, idx);
	zcrpc__list_foreach(it, &ctx->workers) {
		zcrpc_worker *o = zcrpc__container_of(it, zcrpc_worker, ctx_link);

		o->removed_seen &= ~(1u << idx);
		zcrpc__worker_async_watch_dev(o, idx);
	}
	zcrpc__log(ZCRPC_LOG_INFO, "RDMA device %s is used again (index %d)",
		   name, idx);
out:
	pthread_mutex_unlock(&ctx->lock);
	return idx;
}

/* Soft-iWARP runs TCP in the kernel and sends from the thread that posts:
 * when the peer reset the connection, that send raises SIGPIPE in the
 * application (tcp_sendmsg without MSG_NOSIGNAL), which would kill it. A
 * context with a siw device therefore ignores SIGPIPE, as gRPC does,
 * unless the application chose a disposition itself (docs/devices.md). */
static void siw_sigpipe(const zcrpc_context *ctx)
{
	struct sigaction sa;
	int i;

	for (i = 0; i < ctx->ndev; i++)
		if (ctx->dev[i].prof.provider == ZCRPC_PROV_SIW)
			break;
	if (i == ctx->ndev || sigaction(SIGPIPE, NULL, &sa) ||
	    (sa.sa_flags & SA_SIGINFO) || sa.sa_handler != SIG_DFL)
		return;
	sa.sa_handler = SIG_IGN;
	if (sigaction(SIGPIPE, &sa, NULL) == 0)
		zcrpc__log(ZCRPC_LOG_INFO, "SIGPIPE ignored: %s is Soft-iWARP "
			   "(its kernel TCP raises it on a reset connection)",
			   ctx->dev[i].prof.name);
}

zcrpc_status zcrpc_context_create(zcrpc_context **out)
{
	zcrpc_context *ctx;
	int n = 0, i;

	zcrpc__set_last_error("%s", "");
	if (!out)
		return ZCRPC_INVALID_ARGUMENT;
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return ZCRPC_RESOURCE_EXHAUSTED;
	atomic_init(&ctx->refs, 1);
	zcrpc__list_init(&ctx->mrs);
	zcrpc__list_init(&ctx->workers);
	atomic_init(&ctx->removed_gen, 0);
	if (pthread_mutex_init(&ctx->lock, NULL)) {
		free(ctx);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	ctx->list = rdma_get_devices(&n);
	if (!ctx->list || n <= 0) {
		if (ctx->list)
			rdma_free_devices(ctx->list);
		pthread_mutex_destroy(&ctx->lock);
		free(ctx);
		zcrpc__set_last_error("no RDMA device found (librdmacm lists "
				      "none); " ZCRPC_NO_DEVICE_HINT);
		return ZCRPC_UNAVAILABLE; /* no RDMA device, or rdma_ucm missing */
	}
	for (i = 0; i < n; i++) {
		struct zcrpc__ctx_dev *d = &ctx->dev[ctx->ndev];

		if (ctx->ndev == ZCRPC_MAX_DEVICES) {
			/* Said, never silent: zcrpc_context_skipped_devices. */
			ctx->nskipped++;
			zcrpc__log(ZCRPC_LOG_WARN,
				   "RDMA device %s not used: a context uses at "
				   "most %d devices",
				   ibv_get_device_name(ctx->list[i]->device),
				   ZCRPC_MAX_DEVICES);
			continue;
		}
		if (dev_open(d, ctx->list[i])) {
			if (d->pd)
				ibv_dealloc_pd(d->pd);
			memset(d, 0, sizeof(*d));
			continue;
		}
		ctx->ndev++;
	}
	if (!ctx->ndev) {
		rdma_free_devices(ctx->list);
		pthread_mutex_destroy(&ctx->lock);
		free(ctx);
		zcrpc__set_last_error(
			"no usable RDMA device: %d found, none could be "
			"queried or given a protection domain (ulimit -l?)",
			n);
		return ZCRPC_UNAVAILABLE;
	}
	zcrpc__context_watch_devices(ctx);
	zcrpc__context_async_init(ctx);
	siw_sigpipe(ctx);
	*out = ctx;
	return ZCRPC_OK;
}

void zcrpc__context_ref(zcrpc_context *ctx)
{
	atomic_fetch_add(&ctx->refs, 1);
}

void zcrpc__context_unref(zcrpc_context *ctx)
{
	int i;

	if (!ctx || atomic_fetch_sub(&ctx->refs, 1) != 1)
		return;
	zcrpc__context_unwatch(ctx);
	zcrpc__spare_stop(ctx);
	for (i = 0; i < ctx->ndev; i++)
		if (ctx->dev[i].pd)
			ibv_dealloc_pd(ctx->dev[i].pd);
	if (ctx->list)
		rdma_free_devices(ctx->list);
	pthread_mutex_destroy(&ctx->lock);
	free(ctx);
}

void zcrpc_context_destroy(zcrpc_context *ctx)
{
	zcrpc__context_unref(ctx);
}

int zcrpc__context_dev_index(const zcrpc_context *ctx,
			     const struct ibv_context *verbs)
{
	int i;

	for (i = 0; i < ctx->ndev; i++)
		if (ctx->dev[i].verbs && ctx->dev[i].verbs == verbs)
			return i;
	return -1;
}

struct ibv_mr *zcrpc__dev_reg(zcrpc_context *ctx, int idx, void *addr,
			      size_t len, int access)
{
	struct ibv_mr *r;

	errno = ENODEV;
	if (!ctx->dev[idx].pd)
		return NULL;
	r = ibv_reg_mr(ctx->dev[idx].pd, addr, len, access);
	if (r)
		atomic_fetch_add(&ctx->dev[idx].reg_bytes, r->length);
	return r;
}

void zcrpc__dev_dereg(zcrpc_context *ctx, struct ibv_mr *r)
{
	int i;

	for (i = 0; i < ctx->ndev; i++)
		if (ctx->dev[i].pd && ctx->dev[i].pd == r->pd) {
			atomic_fetch_sub(&ctx->dev[i].reg_bytes, r->length);
			break;
		}
	ibv_dereg_mr(r);
}

/* Whether the application's memory goes on device @i now: the devices a
 * worker of the context uses, or every device while none is used yet (so
 * that a bad range or the locked-memory limit is still reported by the
 * call that registers). Under ctx->lock. */
static int reg_on(const zcrpc_context *ctx, int i)
{
	return ctx->dev[i].pd && (!ctx->nused || ctx->dev[i].used);
}

/* The access of @mr's registration on device @idx: a write target asks
 * for window binding only where type-2 windows exist. */
static int mr_access(const zcrpc_context *ctx, int idx, unsigned flags)
{
	int a = IBV_ACCESS_LOCAL_WRITE;

	if ((flags & ZCRPC_MR_REMOTE_WRITE) &&
	    !zcrpc__spare_wanted(ctx, idx, flags))
		a |= IBV_ACCESS_MW_BIND;
	return a;
}

/* Registers [addr, addr+len) for a registration with @flags on the
 * devices of @mask that are there (a removed device's entry stays NULL);
 * all or none. 0 or an errno value. Under ctx->lock. */
static int reg_set(zcrpc_context *ctx, void *addr, size_t len, uint32_t mask,
		   unsigned flags, struct ibv_mr **mrs)
{
	int i;

	for (i = 0; i < ctx->ndev; i++) {
		mrs[i] = NULL;
		if (!(mask & (1u << i)) || !ctx->dev[i].pd)
			continue;
		mrs[i] = zcrpc__dev_reg(ctx, i, addr, len,
					mr_access(ctx, i, flags));
		if (!mrs[i]) {
			int err = errno ? errno : ENOMEM;

			while (i-- > 0)
				if (mrs[i])
					zcrpc__dev_dereg(ctx, mrs[i]);
			return err;
		}
	}
	return 0;
}

/* The devices reg_on() names now. Under ctx->lock. */
static uint32_t reg_mask_locked(const zcrpc_context *ctx)
{
	uint32_t mask = 0;
	int i;

	for (i = 0; i < ctx->ndev; i++)
		if (reg_on(ctx, i))
			mask |= 1u << i;
	return mask;
}

int zcrpc__context_use_device(zcrpc_context *ctx, int idx, char *why,
			      size_t why_len)
{
	struct zcrpc__ctx_dev *d = &ctx->dev[idx];
	struct zcrpc__list *it;
	int err = 0;

	if (atomic_load(&d->used))
		return 0;
	pthread_mutex_lock(&ctx->lock);
	/* Memory registered while no device was used is on every device. */
	zcrpc__list_foreach(it, &ctx->mrs) {
		zcrpc_mr *mr = zcrpc__container_of(it, zcrpc_mr, link);

		if (mr->mrs[idx] || !d->pd)
			continue;
		mr->mrs[idx] = zcrpc__dev_reg(ctx, idx, mr->addr, mr->len,
					      mr_access(ctx, idx, mr->flags));
		if (!mr->mrs[idx]) {
			err = errno ? errno : ENOMEM;
			snprintf(why, why_len,
				 "registering the application's %zu bytes on %s: "
				 "%s%s",
				 mr->len, d->prof.name, strerror(err),
				 err == ENOMEM || err == EPERM
					 ? " (raise the locked-memory limit: "
					   "ulimit -l)"
					 : "");
			break;
		}
		if (zcrpc__spare_wanted(ctx, idx, mr->flags) &&
		    (err = zcrpc__spare_make_locked(mr, idx)) != 0) {
			snprintf(why, why_len,
				 "registering a grant's spare of %zu bytes on %s: %s",
				 mr->len, d->prof.name, strerror(err));
			break;
		}
	}
	if (!err && !atomic_load(&d->used)) {
		atomic_store(&d->used, 1);
		ctx->nused++;
	}
	pthread_mutex_unlock(&ctx->lock);
	return err;
}

/* The pool's registrar: local access on the devices of @mask. */
static int pool_reg(void *c, void *addr, size_t len, uint32_t mask,
		    void **handle, uint32_t lkeys[ZCRPC_MAX_DEVICES])
{
	zcrpc_context *ctx = c;
	struct ibv_mr **mrs = calloc(ZCRPC_MAX_DEVICES, sizeof(*mrs));
	int i, err;

	if (!mrs)
		return ENOMEM;
	pthread_mutex_lock(&ctx->lock);
	err = reg_set(ctx, addr, len, mask, 0, mrs);
	pthread_mutex_unlock(&ctx->lock);
	if (err) {
		free(mrs);
		return err;
	}
	for (i = 0; i < ZCRPC_MAX_DEVICES; i++)
		lkeys[i] = mrs[i] ? mrs[i]->lkey : 0;
	*handle = mrs;
	return 0;
}

static int pool_add(void *c, void *handle, void *addr, size_t len, int idx,
		    uint32_t *lkey)
{
	zcrpc_context *ctx = c;
	struct ibv_mr **mrs = handle;
	int err = 0;

	pthread_mutex_lock(&ctx->lock);
	if (!mrs[idx]) {
		mrs[idx] = zcrpc__dev_reg(ctx, idx, addr, len,
					  IBV_ACCESS_LOCAL_WRITE);
		if (!mrs[idx])
			err = errno ? errno : ENOMEM;
	}
	if (mrs[idx])
		*lkey = mrs[idx]->lkey;
	pthread_mutex_unlock(&ctx->lock);
	return err;
}

static void pool_dereg(void *c, void *handle)
{
	zcrpc_context *ctx = c;
	struct ibv_mr **mrs = handle;
	int i;

	for (i = 0; i < ctx->ndev; i++)
		if (mrs[i])
			zcrpc__dev_dereg(ctx, mrs[i]);
	free(mrs);
}

static void pool_drop(void *c, void *handle, int dev_idx)
{
	struct ibv_mr **mrs = handle;

	if (mrs[dev_idx]) {
		zcrpc__dev_dereg(c, mrs[dev_idx]);
		mrs[dev_idx] = NULL;
	}
}

struct zcrpc__registrar zcrpc__context_registrar(zcrpc_context *ctx)
{
	struct zcrpc__registrar r = {pool_reg, pool_dereg, ctx, pool_drop,
				     pool_add};

	return r;
}

zcrpc_status zcrpc_mr_register(zcrpc_context *ctx, void *addr, size_t len,
			       unsigned flags, zcrpc_mr **out)
{
	zcrpc_mr *mr;
	int err, i;

	if (!ctx || !addr || !len || !out || (flags & ~ZCRPC_MR_REMOTE_WRITE))
		return ZCRPC_INVALID_ARGUMENT;
	/* A write target is bound to memory windows (mw.c); the MR itself
	 * carries no remote access, so its own rkey opens nothing. Devices
	 * without windows get a spare registration for grants instead
	 * (mr_spare.c). */
	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return ZCRPC_RESOURCE_EXHAUSTED;
	mr->ctx = ctx;
	mr->addr = addr;
	mr->len = len;
	mr->flags = flags;
	for (i = 0; i < ZCRPC_MAX_DEVICES; i++) {
		atomic_init(&mr->spare[i], NULL);
		atomic_init(&mr->refill_asked[i], 0);
		atomic_init(&mr->refill_err[i], 0);
	}
	/* Registered and listed in one hold of the lock, so a device that
	 * comes into use (zcrpc__context_use_device) either finds the new
	 * registration listed or is already used when its devices are
	 * chosen. */
	pthread_mutex_lock(&ctx->lock);
	err = reg_set(ctx, addr, len, reg_mask_locked(ctx), flags, mr->mrs);
	for (i = 0; !err && i < ctx->ndev; i++)
		if (mr->mrs[i] && zcrpc__spare_wanted(ctx, i, flags))
			err = zcrpc__spare_make_locked(mr, i);
	if (err) {
		for (i = 0; i < ZCRPC_MAX_DEVICES; i++) {
			struct ibv_mr *r = atomic_exchange(&mr->spare[i], NULL);

			if (r)
				zcrpc__dev_dereg(ctx, r);
			if (mr->mrs[i])
				zcrpc__dev_dereg(ctx, mr->mrs[i]);
		}
		pthread_mutex_unlock(&ctx->lock);
		free(mr);
		return err == EINVAL || err == EFAULT ? ZCRPC_INVALID_ARGUMENT
						      : ZCRPC_RESOURCE_EXHAUSTED;
	}
	zcrpc__list_push_front(&ctx->mrs, &mr->link);
	pthread_mutex_unlock(&ctx->lock);
	zcrpc__context_ref(ctx);
	*out = mr;
	return ZCRPC_OK;
}

void zcrpc_mr_deregister(zcrpc_mr *mr)
{
	int i;

	if (!mr)
		return;
	zcrpc__spare_forget(mr);
	pthread_mutex_lock(&mr->ctx->lock);
	zcrpc__list_remove(&mr->link);
	for (i = 0; i < mr->ctx->ndev; i++)
		if (mr->mrs[i])
			zcrpc__dev_dereg(mr->ctx, mr->mrs[i]);
	pthread_mutex_unlock(&mr->ctx->lock);
	zcrpc__context_unref(mr->ctx);
	free(mr);
}

const struct zcrpc__dev_profile *
zcrpc__context_profile(const zcrpc_context *ctx, int idx)
{
	return ctx && idx >= 0 && idx < ctx->ndev ? &ctx->dev[idx].prof : NULL;
}

int zcrpc_context_device_count(const zcrpc_context *ctx)
{
	return ctx ? ctx->ndev : 0;
}

int zcrpc_context_skipped_devices(const zcrpc_context *ctx)
{
	return ctx ? ctx->nskipped : 0;
}

zcrpc_status zcrpc_context_get_device_info(zcrpc_context *ctx, int idx,
					   zcrpc_device_info *out,
					   size_t out_size)
{
	const struct zcrpc__ctx_dev *d;
	const struct zcrpc__dev_profile *p;
	struct ibv_port_attr pa;
	zcrpc_device_info i;

	if (!ctx || !out || idx < 0 || idx >= ctx->ndev)
		return ZCRPC_INVALID_ARGUMENT;
	d = &ctx->dev[idx];
	p = &d->prof;
	memset(&i, 0, sizeof(i));
	snprintf(i.name, sizeof(i.name), "%s", p->name);
	snprintf(i.provider, sizeof(i.provider), "%s",
		 zcrpc__provider_name(p->provider));
	zcrpc__profile_describe(p, i.summary, sizeof(i.summary));
	i.transport = p->transport == IBV_TRANSPORT_IWARP ? ZCRPC_TRANSPORT_IWARP
		      : p->link_layer == IBV_LINK_LAYER_ETHERNET
			      ? ZCRPC_TRANSPORT_ROCE
			      : ZCRPC_TRANSPORT_IB;
	pthread_mutex_lock(&ctx->lock);
	i.removed = d->removed || !d->verbs;
	if (!i.removed && ibv_query_port(d->verbs, 1, &pa) == 0) {
		i.port_state = pa.state;
		i.active_mtu = pa.active_mtu >= IBV_MTU_256 &&
					       pa.active_mtu <= IBV_MTU_4096
				       ? 128u << pa.active_mtu
				       : 0;
	}
	pthread_mutex_unlock(&ctx->lock);
	i.grant_path = p->mw_type2 ? ZCRPC_GRANT_WINDOW : ZCRPC_GRANT_REGISTRATION;
	i.write_end = p->write_imm ? ZCRPC_WRITE_END_IMM : ZCRPC_WRITE_END_MSG;
	i.active_first = p->active_first;
	i.inline_ask = atomic_load(&d->inline_ask);
	i.max_qp_wr = p->max_qp_wr;
	i.max_sge = p->max_sge;
	i.max_srq_wr = p->max_srq_wr;
	i.max_cqe = p->max_cqe;
	i.max_mw = p->max_mw;
	i.max_msg_sz = d->max_msg_sz;
	i.in_use = (uint32_t)atomic_load(&d->used);
	i.registered_bytes = atomic_load(&d->reg_bytes);
	ZCRPC__ABI_OUT(out, out_size, &i);
	return ZCRPC_OK;
}
