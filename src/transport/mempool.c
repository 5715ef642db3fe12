/* zcrpc — registered memory pools (see mempool.h). */
#include "mempool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ZCRPC_POOL_MAX_REGIONS 0xffffU

/* A region given back (zcrpc__pool_trim) stays as a dormant entry: no
 * memory, no registration, its generations kept (and advanced), so ids
 * that named its slots stay refused; grow() brings it back first. */
struct region {
	unsigned cls;
	uint32_t slot_size; /* its class's, kept here for fill() */
	uint8_t *base;	   /* NULL: dormant */
	uint32_t nslots;
	void *handle;
	uint32_t lkeys[ZCRPC_MAX_DEVICES];
	uint32_t dev_mask; /* the devices it is registered on */
	uint32_t *gen;	   /* per slot, 24 bits used */
	uint8_t *in_use;   /* per slot */
	uint32_t nuse;	   /* slots in use */
	uint64_t gets;	   /* slots taken from it, ever */
	uint64_t gets_seen; /* gets at the last trim pass */
	int64_t idle_since; /* nothing taken since (trim passes' clock) */
};

struct pool_class {
	struct zcrpc__pool_class_cfg cfg;
	uint64_t *free;	   /* stack of (region << 24 | index) */
	uint32_t nfree;
	struct zcrpc__pool_class_stats st;
};

struct zcrpc__pool {
	struct zcrpc__registrar reg;
	unsigned nclasses;
	struct pool_class cls[ZCRPC_POOL_MAX_CLASSES];
	struct region **regions;
	uint32_t nregions, cap_regions;
	uint64_t bad_puts;
	uint32_t dev_mask; /* devices the regions are registered on */
	char err[160];
};

zcrpc_status zcrpc__pool_create(const struct zcrpc__pool_cfg *cfg,
				const struct zcrpc__registrar *reg,
				struct zcrpc__pool **out)
{
	struct zcrpc__pool *p;
	unsigned i;

	if (!cfg || !reg || !reg->reg || !reg->dereg || !out ||
	    cfg->nclasses < 1 || cfg->nclasses > ZCRPC_POOL_MAX_CLASSES)
		return ZCRPC_INVALID_ARGUMENT;
	for (i = 0; i < cfg->nclasses; i++) {
		const struct zcrpc__pool_class_cfg *c = &cfg->cls[i];

		if (c->slot_size < 64 || c->slot_size % 64 ||
		    c->slots_per_region < 1 || c->max_slots < 1 ||
		    c->max_slots > 0xffffffU ||
		    (i && c->slot_size <= cfg->cls[i - 1].slot_size))
			return ZCRPC_INVALID_ARGUMENT;
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return ZCRPC_RESOURCE_EXHAUSTED;
	p->reg = *reg;
	p->nclasses = cfg->nclasses;
	for (i = 0; i < cfg->nclasses; i++) {
		struct pool_class *c = &p->cls[i];

		c->cfg = cfg->cls[i];
		c->st.slot_size = c->cfg.slot_size;
		c->st.max_slots = c->cfg.max_slots;
		c->free = malloc(sizeof(uint64_t) * c->cfg.max_slots);
		if (!c->free) {
			zcrpc__pool_destroy(p);
			return ZCRPC_RESOURCE_EXHAUSTED;
		}
	}
	*out = p;
	return ZCRPC_OK;
}

static void region_free(struct zcrpc__pool *p, struct region *r)
{
	if (r->handle)
		p->reg.dereg(p->reg.ctx, r->handle);
	free(r->base);
	free(r->gen);
	free(r->in_use);
	free(r);
}

void zcrpc__pool_drop_device(struct zcrpc__pool *p, int dev_idx)
{
	uint32_t i;

	if (!p || !p->reg.drop || dev_idx < 0 || dev_idx >= ZCRPC_MAX_DEVICES)
		return;
	for (i = 0; i < p->nregions; i++) {
		struct region *r = p->regions[i];

		if (r->handle)
			p->reg.drop(p->reg.ctx, r->handle, dev_idx);
		r->lkeys[dev_idx] = 0;
		r->dev_mask &= ~(1u << dev_idx);
	}
	p->dev_mask &= ~(1u << dev_idx);
}

static const char *reg_hint(int err)
{
	return err == ENOMEM || err == EPERM
		       ? " (raise the locked-memory limit: ulimit -l)"
		       : "";
}

int zcrpc__pool_use_device(struct zcrpc__pool *p, int dev_idx)
{
	uint32_t i;

	if (!p || dev_idx < 0 || dev_idx >= ZCRPC_MAX_DEVICES || !p->reg.add)
		return EINVAL;
	if (p->dev_mask & (1u << dev_idx))
		return 0;
	for (i = 0; i < p->nregions; i++) {
		struct region *r = p->regions[i];
		size_t bytes = (size_t)r->nslots * r->slot_size;
		int err;

		if (!r->base || !r->handle || (r->dev_mask & (1u << dev_idx)))
			continue; /* dormant: registered when it comes back */
		err = p->reg.add(p->reg.ctx, r->handle, r->base, bytes, dev_idx,
				 &r->lkeys[dev_idx]);
		if (!err)
			r->dev_mask |= 1u << dev_idx;
		if (err) {
			snprintf(p->err, sizeof(p->err),
				 "registering %zu bytes on device %d: %s%s",
				 bytes, dev_idx, strerror(err), reg_hint(err));
			return err;
		}
	}
	p->dev_mask |= 1u << dev_idx;
	return 0;
}

void zcrpc__pool_destroy(struct zcrpc__pool *p)
{
	uint32_t i;

	if (!p)
		return;
	for (i = 0; i < p->nregions; i++)
		region_free(p, p->regions[i]);
	free(p->regions);
	for (i = 0; i < p->nclasses; i++)
		free(p->cls[i].free);
	free(p);
}

static int reg_region(struct zcrpc__pool *p, struct region *r, size_t bytes)
{
	int err = p->reg.reg(p->reg.ctx, r->base, bytes, p->dev_mask,
			     &r->handle, r->lkeys);

	r->dev_mask = err ? 0 : p->dev_mask;
	if (err) {
		snprintf(p->err, sizeof(p->err), "registering %zu bytes: %s%s",
			 bytes, strerror(err), reg_hint(err));
		r->handle = NULL;
	}
	return err;
}

static void push_free(struct zcrpc__pool *p, uint32_t ri)
{
	struct region *r = p->regions[ri];
	struct pool_class *c = &p->cls[r->cls];
	uint32_t i;

	for (i = r->nslots; i-- > 0;)
		c->free[c->nfree++] = ((uint64_t)ri << 24) | i;
	c->st.capacity += r->nslots;
	c->st.regions++;
	r->gets_seen = r->gets;
	r->idle_since = 0;
}

/* Brings dormant region @ri back: fresh memory, registered again. */
static zcrpc_status revive(struct zcrpc__pool *p, uint32_t ri)
{
	struct region *r = p->regions[ri];
	size_t bytes = (size_t)r->nslots * p->cls[r->cls].cfg.slot_size;

	if (posix_memalign((void **)&r->base, 4096, bytes)) {
		r->base = NULL;
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	memset(r->base, 0, bytes);
	if (reg_region(p, r, bytes)) {
		free(r->base);
		r->base = NULL;
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	push_free(p, ri);
	return ZCRPC_OK;
}

/* Adds one region to class @ci. Returns OK or RESOURCE_EXHAUSTED. Never
 * inlined: zcrpc__pool_get's hot path then needs no stack frame. */
__attribute__((noinline)) static zcrpc_status grow(struct zcrpc__pool *p,
						   unsigned ci)
{
	struct pool_class *c = &p->cls[ci];
	uint32_t n = c->cfg.slots_per_region, i;
	struct region *r;
	size_t bytes;

	p->err[0] = 0; /* the message describes the latest failure only */
	if (c->st.capacity >= c->cfg.max_slots)
		return ZCRPC_RESOURCE_EXHAUSTED;
	if (n > c->cfg.max_slots - c->st.capacity)
		n = c->cfg.max_slots - c->st.capacity;
	for (i = 0; i < p->nregions; i++) {
		r = p->regions[i];
		if (!r->base && r->cls == ci && r->nslots <= n)
			return revive(p, i);
	}
	if (p->nregions >= ZCRPC_POOL_MAX_REGIONS)
		return ZCRPC_RESOURCE_EXHAUSTED;
	if (p->nregions == p->cap_regions) {
		uint32_t cap = p->cap_regions ? p->cap_regions * 2 : 8;
		struct region **nr = realloc(p->regions, sizeof(*nr) * cap);

		if (!nr)
			return ZCRPC_RESOURCE_EXHAUSTED;
		p->regions = nr;
		p->cap_regions = cap;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return ZCRPC_RESOURCE_EXHAUSTED;
	r->cls = ci;
	r->slot_size = c->cfg.slot_size;
	r->nslots = n;
	bytes = (size_t)n * c->cfg.slot_size;
	r->gen = calloc(n, sizeof(*r->gen));
	r->in_use = calloc(n, 1);
	if (!r->gen || !r->in_use || posix_memalign((void **)&r->base, 4096, bytes))
		goto err_region;
	memset(r->base, 0, bytes); /* no stale bytes ever reach the wire */
	for (i = 0; i < n; i++)
		r->gen[i] = 1; /* generation 0 never names a slot: a zeroed id is invalid */
	if (reg_region(p, r, bytes))
		goto err_region;
	p->regions[p->nregions] = r;
	push_free(p, p->nregions++);
	return ZCRPC_OK;

err_region:
	region_free(p, r);
	return ZCRPC_RESOURCE_EXHAUSTED;
}

static void fill(const struct zcrpc__pool *p, uint32_t ri, uint32_t idx,
		 struct zcrpc__slot *out)
{
	const struct region *r = p->regions[ri];
	uint32_t size = r->slot_size;

	out->id = ZCRPC_SLOT_ID(ri, idx, r->gen[idx]);
	out->ptr = r->base + (size_t)idx * size;
	out->size = size;
	out->cls = r->cls;
	out->lkeys = r->lkeys;
}

zcrpc_status zcrpc__pool_get(struct zcrpc__pool *p, size_t need,
			     struct zcrpc__slot *out)
{
	unsigned ci;
	int fits = 0;

	for (ci = 0; ci < p->nclasses; ci++) {
		struct pool_class *c = &p->cls[ci];
		struct region *r;
		uint64_t e;
		uint32_t ri, idx;

		if (c->cfg.slot_size < need)
			continue;
		fits = 1;
		if (!c->nfree && grow(p, ci) != ZCRPC_OK) {
			c->st.exhausted++;
			continue;
		}
		e = c->free[--c->nfree];
		ri = (uint32_t)(e >> 24);
		idx = (uint32_t)(e & 0xffffffU);
		r = p->regions[ri];
		r->in_use[idx] = 1;
		r->nuse++;
		r->gets++;
		c->st.in_use++;
		c->st.gets++;
		out->id = ZCRPC_SLOT_ID(ri, idx, r->gen[idx]);
		out->ptr = r->base + (size_t)idx * r->slot_size;
		out->size = r->slot_size;
		out->cls = ci;
		out->lkeys = r->lkeys;
		return ZCRPC_OK;
	}
	return fits ? ZCRPC_RESOURCE_EXHAUSTED : ZCRPC_INVALID_ARGUMENT;
}

static zcrpc_status check(const struct zcrpc__pool *p, zcrpc__slot_id id)
{
	uint32_t ri = ZCRPC_SLOT_REGION(id), idx = ZCRPC_SLOT_INDEX(id);
	const struct region *r;

	if (ri >= p->nregions)
		return ZCRPC_INVALID_ARGUMENT;
	r = p->regions[ri];
	if (idx >= r->nslots)
		return ZCRPC_INVALID_ARGUMENT;
	if (!r->base || !r->in_use[idx] || r->gen[idx] != ZCRPC_SLOT_GEN(id))
		return ZCRPC_FAILED_PRECONDITION;
	return ZCRPC_OK;
}

zcrpc_status zcrpc__pool_put(struct zcrpc__pool *p, zcrpc__slot_id id)
{
	uint32_t ri = ZCRPC_SLOT_REGION(id), idx = ZCRPC_SLOT_INDEX(id);
	zcrpc_status st = check(p, id);
	struct region *r;
	struct pool_class *c;

	if (st != ZCRPC_OK) {
		p->bad_puts++;
		return st;
	}
	r = p->regions[ri];
	c = &p->cls[r->cls];
	r->in_use[idx] = 0;
	r->nuse--;
	r->gen[idx] = (r->gen[idx] + 1) & 0xffffffU;
	if (!r->gen[idx])
		r->gen[idx] = 1;
	c->free[c->nfree++] = ((uint64_t)ri << 24) | idx;
	c->st.in_use--;
	c->st.puts++;
	return ZCRPC_OK;
}

zcrpc_status zcrpc__pool_lookup(const struct zcrpc__pool *p, zcrpc__slot_id id,
				struct zcrpc__slot *out)
{
	zcrpc_status st = check(p, id);

	if (st == ZCRPC_OK)
		fill(p, ZCRPC_SLOT_REGION(id), ZCRPC_SLOT_INDEX(id), out);
	return st;
}

void zcrpc__pool_get_stats(const struct zcrpc__pool *p,
			   struct zcrpc__pool_stats *out)
{
	unsigned i;

	memset(out, 0, sizeof(*out));
	out->nclasses = p->nclasses;
	for (i = 0; i < p->nclasses; i++)
		out->cls[i] = p->cls[i].st;
	out->bad_puts = p->bad_puts;
}

/* Gives region @ri back: its free-stack entries go, its memory and
 * registration are released, every generation advances. */
static void retire(struct zcrpc__pool *p, uint32_t ri)
{
	struct region *r = p->regions[ri];
	struct pool_class *c = &p->cls[r->cls];
	uint32_t i, j = 0;

	for (i = 0; i < c->nfree; i++)
		if ((uint32_t)(c->free[i] >> 24) != ri)
			c->free[j++] = c->free[i];
	c->nfree = j;
	for (i = 0; i < r->nslots; i++) {
		r->gen[i] = (r->gen[i] + 1) & 0xffffffU;
		if (!r->gen[i])
			r->gen[i] = 1;
	}
	if (r->handle)
		p->reg.dereg(p->reg.ctx, r->handle);
	r->handle = NULL;
	memset(r->lkeys, 0, sizeof(r->lkeys));
	free(r->base);
	r->base = NULL;
	c->st.capacity -= r->nslots;
	c->st.regions--;
	c->st.released++;
}

uint32_t zcrpc__pool_trim(struct zcrpc__pool *p, int64_t now, int64_t idle_ns)
{
	uint32_t ri, given = 0;
	unsigned spare[ZCRPC_POOL_MAX_CLASSES] = {0};

	for (ri = 0; ri < p->nregions; ri++) {
		struct region *r = p->regions[ri];

		if (!r->base)
			continue;
		if (r->nuse || r->gets != r->gets_seen || !r->idle_since) {
			/* used since the last pass: its idle time starts over */
			r->gets_seen = r->gets;
			r->idle_since = r->nuse ? 0 : now;
			continue;
		}
		if (now - r->idle_since < idle_ns)
			continue;
		/* The oldest idle region of each class stays as slack, so a
		 * load just above the working size does not make the class
		 * grow and shrink in turn. */
		if (!spare[r->cls]++)
			continue;
		retire(p, ri);
		given += r->nslots;
	}
	return given;
}

size_t zcrpc__pool_pinned(const struct zcrpc__pool *p)
{
	size_t n = 0;
	unsigned i;

	for (i = 0; i < p->nclasses; i++)
		n += (size_t)p->cls[i].st.capacity * p->cls[i].cfg.slot_size;
	return n;
}

uint32_t zcrpc__pool_in_use(const struct zcrpc__pool *p)
{
	uint32_t n = 0;
	unsigned i;

	for (i = 0; i < p->nclasses; i++)
		n += p->cls[i].st.in_use;
	return n;
}

const char *zcrpc__pool_error(const struct zcrpc__pool *p)
{
	return p->err;
}
