/* zcrpc — registered memory pools.
 *
 * A pool has a few size classes. Each class grows in regions (one
 * allocation, registered once on every device through a registrar) up to a
 * slot limit; slots come and go through a per-class free stack in O(1).
 * A slot is named by (region, index, generation), packed in a 64-bit id, so
 * a stale or forged id is recognised: nothing on the wire is ever a raw
 * pointer. The pool is owned by one worker and is not thread-safe.
 */
#ifndef ZCRPC_MEMPOOL_H
#define ZCRPC_MEMPOOL_H

#include <stddef.h>
#include <stdint.h>

#include "zcrpc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZCRPC_MAX_DEVICES 8
#define ZCRPC_POOL_MAX_CLASSES 4

/* How a pool registers its regions: on the devices of @dev_mask (bit i:
 * device index i; the devices its worker uses so far), giving one lkey
 * per device index (0 elsewhere). A fake registrar lets host tests run
 * without a device. reg and add return 0 or an errno value. */
struct zcrpc__registrar {
	int (*reg)(void *ctx, void *addr, size_t len, uint32_t dev_mask,
		   void **handle, uint32_t lkeys[ZCRPC_MAX_DEVICES]);
	void (*dereg)(void *ctx, void *handle);
	void *ctx;
	/* Optional: release what handle holds on device @dev_idx only (the
	 * device was removed); dereg later skips it. */
	void (*drop)(void *ctx, void *handle, int dev_idx);
	/* Optional: register what handle covers on device @dev_idx too (its
	 * worker started using that device). */
	int (*add)(void *ctx, void *handle, void *addr, size_t len,
		   int dev_idx, uint32_t *lkey);
};

struct zcrpc__pool_class_cfg {
	uint32_t slot_size;	   /* bytes, multiple of 64 */
	uint32_t slots_per_region; /* growth step */
	uint32_t max_slots;	   /* limit for this class */
};

struct zcrpc__pool_cfg {
	unsigned nclasses; /* 1..ZCRPC_POOL_MAX_CLASSES, ascending slot sizes */
	struct zcrpc__pool_class_cfg cls[ZCRPC_POOL_MAX_CLASSES];
};

/* Slot id: region (16 bits) | index (24 bits) | generation (24 bits).
 * Generations start at 1 and skip 0, so an all-zero id never names a slot. */
typedef uint64_t zcrpc__slot_id;
#define ZCRPC_SLOT_ID(region, index, gen)                                   \
	(((uint64_t)(region) << 48) | ((uint64_t)((index)&0xffffffU) << 24) | \
	 ((uint64_t)(gen)&0xffffffU))
#define ZCRPC_SLOT_REGION(id) ((uint32_t)((id) >> 48))
#define ZCRPC_SLOT_INDEX(id) ((uint32_t)(((id) >> 24) & 0xffffffU))
#define ZCRPC_SLOT_GEN(id) ((uint32_t)((id)&0xffffffU))

struct zcrpc__slot {
	zcrpc__slot_id id;
	uint8_t *ptr;
	uint32_t size;	       /* the class's slot size */
	unsigned cls;	       /* class index */
	const uint32_t *lkeys; /* per device index */
};

struct zcrpc__pool_class_stats {
	uint32_t slot_size, max_slots;
	uint32_t capacity; /* slots allocated and registered so far */
	uint32_t in_use;
	uint32_t regions;
	uint64_t gets, puts, exhausted;
	uint64_t released; /* regions given back by zcrpc__pool_trim */
};

struct zcrpc__pool_stats {
	unsigned nclasses;
	struct zcrpc__pool_class_stats cls[ZCRPC_POOL_MAX_CLASSES];
	uint64_t bad_puts; /* double or stale puts refused */
};

struct zcrpc__pool;

/* Errors: INVALID_ARGUMENT (bad configuration), RESOURCE_EXHAUSTED. */
zcrpc_status zcrpc__pool_create(const struct zcrpc__pool_cfg *cfg,
				const struct zcrpc__registrar *reg,
				struct zcrpc__pool **out);

/* Deregisters and frees every region, whether or not slots are in use. */
void zcrpc__pool_destroy(struct zcrpc__pool *p);

/* A slot of at least @need bytes from the smallest class that has one (a
 * larger class is used when the right one hit its limit). Grows a class by
 * one region when its free stack is empty and the limit allows.
 * Errors: INVALID_ARGUMENT (@need above the largest class),
 * RESOURCE_EXHAUSTED (every fitting class at its limit, or registration
 * failed; see zcrpc__pool_error()). */
zcrpc_status zcrpc__pool_get(struct zcrpc__pool *p, size_t need,
			     struct zcrpc__slot *out);

/* Returns a slot. Errors: INVALID_ARGUMENT (no such region or index),
 * FAILED_PRECONDITION (stale generation or not in use: a double put).
 * A refused put changes nothing and is counted in bad_puts. */
zcrpc_status zcrpc__pool_put(struct zcrpc__pool *p, zcrpc__slot_id id);

/* Resolves an id of a slot in use. Same errors as put. */
zcrpc_status zcrpc__pool_lookup(const struct zcrpc__pool *p, zcrpc__slot_id id,
				struct zcrpc__slot *out);

void zcrpc__pool_get_stats(const struct zcrpc__pool *p,
			   struct zcrpc__pool_stats *out);

/* Releases every region's registration on device @dev_idx (removed);
 * its lkeys become 0. Slots stay usable on the other devices. */
void zcrpc__pool_drop_device(struct zcrpc__pool *p, int dev_idx);

/* Registers every region on device @dev_idx too, and the regions made
 * from now on: the pool's worker uses that device. Idempotent. 0, or an
 * errno value (zcrpc__pool_error says what failed; the regions done so
 * far stay registered there). */
int zcrpc__pool_use_device(struct zcrpc__pool *p, int dev_idx);

/* Gives back regions none of whose slots was taken for @idle_ns or longer
 * (timed by the passes' @now), keeping the oldest such region of each
 * class as slack: the memory follows the working size, with hysteresis.
 * Call it periodically; returns the slots given back. Their ids stay
 * refused; a region given back is reused first when the class grows. */
uint32_t zcrpc__pool_trim(struct zcrpc__pool *p, int64_t now, int64_t idle_ns);

/* Bytes of slots registered now. */
size_t zcrpc__pool_pinned(const struct zcrpc__pool *p);

/* Total slots in use over all classes. */
uint32_t zcrpc__pool_in_use(const struct zcrpc__pool *p);

/* The last registration failure, "" if none. */
const char *zcrpc__pool_error(const struct zcrpc__pool *p);

#ifdef __cplusplus
}
#endif

#endif /* ZCRPC_MEMPOOL_H */
