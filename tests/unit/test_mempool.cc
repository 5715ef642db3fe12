// Registered memory pools, with a fake registrar (no device needed).
#include <cerrno>
#include <cstring>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "transport/mempool.h"

namespace {

// Registers on the devices of the mask it is given (lkey 0 elsewhere).
struct FakeReg {
	int regs = 0, deregs = 0, fail_next = 0, adds = 0, drops = 0, fail_add = 0;
	uint32_t last_mask = 0;
	size_t bytes = 0;
	static uint32_t Key(int reg, int dev)
	{
		return 0x1000u * static_cast<uint32_t>(reg) + static_cast<uint32_t>(dev);
	}
	static int Reg(void *ctx, void *addr, size_t len, uint32_t mask, void **handle,
		       uint32_t *lkeys)
	{
		auto *f = static_cast<FakeReg *>(ctx);
		if (f->fail_next) {
			f->fail_next = 0;
			return ENOMEM;
		}
		f->regs++;
		f->bytes += len;
		f->last_mask = mask;
		*handle = addr;
		for (int i = 0; i < ZCRPC_MAX_DEVICES; i++)
			lkeys[i] = (mask >> i) & 1 ? Key(f->regs, i) : 0;
		return 0;
	}
	static void Dereg(void *ctx, void *) { static_cast<FakeReg *>(ctx)->deregs++; }
	static void Drop(void *ctx, void *, int) { static_cast<FakeReg *>(ctx)->drops++; }
	static int Add(void *ctx, void *, void *, size_t, int dev, uint32_t *lkey)
	{
		auto *f = static_cast<FakeReg *>(ctx);
		if (f->fail_add) {
			f->fail_add--;
			return ENOMEM;
		}
		f->adds++;
		*lkey = 0x900000u + static_cast<uint32_t>(dev);
		return 0;
	}
	zcrpc__registrar R() { return {Reg, Dereg, this, Drop, Add}; }
};

zcrpc__pool_cfg TwoClasses(uint32_t max_small = 8, uint32_t max_big = 4)
{
	zcrpc__pool_cfg c{};
	c.nclasses = 2;
	c.cls[0] = {256, 4, max_small};
	c.cls[1] = {4160, 2, max_big};
	return c;
}

} // namespace

TEST(MemPool, RejectsBadConfigurations)
{
	FakeReg f;
	auto r = f.R();
	zcrpc__pool *p = nullptr;
	zcrpc__pool_cfg c = TwoClasses();
	c.cls[1].slot_size = 128; // not ascending
	EXPECT_EQ(zcrpc__pool_create(&c, &r, &p), ZCRPC_INVALID_ARGUMENT);
	c = TwoClasses();
	c.cls[0].slot_size = 100; // not a multiple of 64
	EXPECT_EQ(zcrpc__pool_create(&c, &r, &p), ZCRPC_INVALID_ARGUMENT);
	c = TwoClasses();
	c.nclasses = 0;
	EXPECT_EQ(zcrpc__pool_create(&c, &r, &p), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(p, nullptr);
}

TEST(MemPool, GrowsLazilyAndPicksTheSmallestFittingClass)
{
	FakeReg f;
	auto r = f.R();
	zcrpc__pool *p = nullptr;
	auto c = TwoClasses();
	ASSERT_EQ(zcrpc__pool_create(&c, &r, &p), ZCRPC_OK);
	EXPECT_EQ(f.regs, 0) << "nothing registered before first use";
	zcrpc__slot s{};
	ASSERT_EQ(zcrpc__pool_get(p, 100, &s), ZCRPC_OK);
	EXPECT_EQ(s.size, 256u);
	EXPECT_EQ(s.cls, 0u);
	EXPECT_EQ(f.regs, 1);
	ASSERT_EQ(zcrpc__pool_get(p, 257, &s), ZCRPC_OK);
	EXPECT_EQ(s.size, 4160u);
	EXPECT_EQ(f.regs, 2);
	EXPECT_EQ(zcrpc__pool_get(p, 5000, &s), ZCRPC_INVALID_ARGUMENT);
	zcrpc__pool_destroy(p);
	EXPECT_EQ(f.deregs, 2);
}

TEST(MemPool, ExhaustionIsAStatusAndRecoversWhenSlotsReturn)
{
	FakeReg f;
	auto r = f.R();
	zcrpc__pool *p = nullptr;
	auto c = TwoClasses(8, 2);
	ASSERT_EQ(zcrpc__pool_create(&c, &r, &p), ZCRPC_OK);
	std::vector<zcrpc__slot> big(2);
	for (auto &s : big)
		ASSERT_EQ(zcrpc__pool_get(p, 4000, &s), ZCRPC_OK);
	zcrpc__slot s{};
	EXPECT_EQ(zcrpc__pool_get(p, 4000, &s), ZCRPC_RESOURCE_EXHAUSTED);
	// Small requests still work, and may overflow into... nothing bigger.
	std::vector<zcrpc__slot> small(8);
	for (auto &x : small)
		ASSERT_EQ(zcrpc__pool_get(p, 1, &x), ZCRPC_OK);
	EXPECT_EQ(zcrpc__pool_get(p, 1, &s), ZCRPC_RESOURCE_EXHAUSTED);
	zcrpc__pool_stats st;
	zcrpc__pool_get_stats(p, &st);
	EXPECT_EQ(st.cls[0].in_use, 8u);
	EXPECT_EQ(st.cls[1].in_use, 2u);
	EXPECT_GE(st.cls[1].exhausted, 1u);
	ASSERT_EQ(zcrpc__pool_put(p, big[0].id), ZCRPC_OK);
	ASSERT_EQ(zcrpc__pool_get(p, 4000, &s), ZCRPC_OK);
	EXPECT_EQ(s.ptr, big[0].ptr) << "the returned slot is reused";
	EXPECT_NE(s.id, big[0].id) << "with a new generation";
	zcrpc__pool_destroy(p);
}

TEST(MemPool, SmallRequestsOverflowIntoALargerClass)
{
	FakeReg f;
	auto r = f.R();
	zcrpc__pool *p = nullptr;
	auto c = TwoClasses(4, 4);
	ASSERT_EQ(zcrpc__pool_create(&c, &r, &p), ZCRPC_OK);
	zcrpc__slot s{};
	for (int i = 0; i < 4; i++)
		ASSERT_EQ(zcrpc__pool_get(p, 10, &s), ZCRPC_OK);
	ASSERT_EQ(zcrpc__pool_get(p, 10, &s), ZCRPC_OK);
	EXPECT_EQ(s.cls, 1u);
	zcrpc__pool_destroy(p);
}

TEST(MemPool, DoubleAndStalePutsAreDetected)
{
	FakeReg f;
	auto r = f.R();
	zcrpc__pool *p = nullptr;
	auto c = TwoClasses();
	ASSERT_EQ(zcrpc__pool_create(&c, &r, &p), ZCRPC_OK);
	zcrpc__slot a{}, b{};
	ASSERT_EQ(zcrpc__pool_get(p, 10, &a), ZCRPC_OK);
	ASSERT_EQ(zcrpc__pool_put(p, a.id), ZCRPC_OK);
	EXPECT_EQ(zcrpc__pool_put(p, a.id), ZCRPC_FAILED_PRECONDITION) << "double put";
	ASSERT_EQ(zcrpc__pool_get(p, 10, &b), ZCRPC_OK);
	ASSERT_EQ(b.ptr, a.ptr);
	EXPECT_EQ(zcrpc__pool_put(p, a.id), ZCRPC_FAILED_PRECONDITION) << "stale generation";
	zcrpc__slot look{};
	EXPECT_EQ(zcrpc__pool_lookup(p, a.id, &look), ZCRPC_FAILED_PRECONDITION);
	ASSERT_EQ(zcrpc__pool_lookup(p, b.id, &look), ZCRPC_OK);
	EXPECT_EQ(look.ptr, b.ptr);
	EXPECT_EQ(zcrpc__pool_put(p, 0), ZCRPC_FAILED_PRECONDITION) << "a zeroed id names no slot";
	EXPECT_EQ(zcrpc__pool_put(p, ZCRPC_SLOT_ID(999, 0, 0)), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc__pool_put(p, ZCRPC_SLOT_ID(0, 9999, 0)), ZCRPC_INVALID_ARGUMENT);
	zcrpc__pool_stats st;
	zcrpc__pool_get_stats(p, &st);
	EXPECT_EQ(st.bad_puts, 5u);
	EXPECT_EQ(st.cls[0].in_use, 1u) << "refused puts changed nothing";
	ASSERT_EQ(zcrpc__pool_put(p, b.id), ZCRPC_OK);
	EXPECT_EQ(zcrpc__pool_in_use(p), 0u);
	zcrpc__pool_destroy(p);
}

TEST(MemPool, SlotsAreDistinctAlignedAndCarryTheirRegionsKeys)
{
	FakeReg f;
	auto r = f.R();
	zcrpc__pool *p = nullptr;
	auto c = TwoClasses(64, 4);
	ASSERT_EQ(zcrpc__pool_create(&c, &r, &p), ZCRPC_OK);
	ASSERT_EQ(zcrpc__pool_use_device(p, 1), 0);
	std::set<uint8_t *> ptrs;
	std::set<uint64_t> ids;
	for (int i = 0; i < 64; i++) {
		zcrpc__slot s{};
		ASSERT_EQ(zcrpc__pool_get(p, 256, &s), ZCRPC_OK);
		EXPECT_EQ(reinterpret_cast<uintptr_t>(s.ptr) % 64, 0u);
		EXPECT_TRUE(ptrs.insert(s.ptr).second);
		EXPECT_TRUE(ids.insert(s.id).second);
		ASSERT_NE(s.lkeys, nullptr);
		EXPECT_EQ(s.lkeys[1] & 0xfffu, 1u);
		EXPECT_EQ(s.lkeys[0], 0u) << "not registered on a device it does not use";
		std::memset(s.ptr, 0xab, s.size); // the whole slot is usable (ASan checks)
	}
	EXPECT_EQ(f.regs, 16) << "64 slots in regions of 4";
	zcrpc__pool_destroy(p);
	EXPECT_EQ(f.deregs, 16);
}

// Issue 14 item 5: a pool registers on the devices its worker uses, and
// on another one from the moment it comes into use.
TEST(MemPool, RegionsGoOnADeviceWhenTheWorkerStartsUsingIt)
{
	FakeReg f;
	auto r = f.R();
	zcrpc__pool *p = nullptr;
	auto c = TwoClasses(8, 4);
	ASSERT_EQ(zcrpc__pool_create(&c, &r, &p), ZCRPC_OK);
	std::vector<zcrpc__slot> held(6);
	for (auto &s : held)
		ASSERT_EQ(zcrpc__pool_get(p, 256, &s), ZCRPC_OK);
	EXPECT_EQ(f.regs, 2) << "6 slots in regions of 4";
	EXPECT_EQ(f.last_mask, 0u) << "no device in use yet";
	EXPECT_EQ(held[0].lkeys[2], 0u);

	ASSERT_EQ(zcrpc__pool_use_device(p, 2), 0);
	EXPECT_EQ(f.adds, 2) << "both live regions registered on device 2";
	for (auto &s : held)
		EXPECT_EQ(s.lkeys[2], 0x900002u);
	ASSERT_EQ(zcrpc__pool_use_device(p, 2), 0);
	EXPECT_EQ(f.adds, 2) << "once per device";

	zcrpc__slot more[3];
	for (auto &s : more)
		ASSERT_EQ(zcrpc__pool_get(p, 256, &s), ZCRPC_OK);
	EXPECT_EQ(f.last_mask, 1u << 2) << "a new region goes on the devices in use";
	EXPECT_EQ(more[2].lkeys[2], FakeReg::Key(f.regs, 2));

	// A refusal is reported with the device and the hint; trying again
	// registers only what is missing.
	f.fail_add = 1;
	EXPECT_EQ(zcrpc__pool_use_device(p, 5), ENOMEM);
	EXPECT_NE(std::strstr(zcrpc__pool_error(p), "device 5"), nullptr) << zcrpc__pool_error(p);
	EXPECT_NE(std::strstr(zcrpc__pool_error(p), "ulimit -l"), nullptr) << zcrpc__pool_error(p);
	ASSERT_EQ(zcrpc__pool_use_device(p, 5), 0);
	EXPECT_EQ(f.adds, 2 + 3) << "three regions on device 5, none twice";

	// A device removed and back: registered again.
	zcrpc__pool_drop_device(p, 2);
	EXPECT_EQ(f.drops, 3);
	EXPECT_EQ(held[0].lkeys[2], 0u);
	ASSERT_EQ(zcrpc__pool_use_device(p, 2), 0);
	EXPECT_EQ(f.adds, 5 + 3);
	EXPECT_EQ(zcrpc__pool_use_device(p, ZCRPC_MAX_DEVICES), EINVAL);
	for (auto &s : held)
		ASSERT_EQ(zcrpc__pool_put(p, s.id), ZCRPC_OK);
	for (auto &s : more)
		ASSERT_EQ(zcrpc__pool_put(p, s.id), ZCRPC_OK);
	zcrpc__pool_destroy(p);
}

TEST(MemPool, RegistrationFailureIsExhaustionWithAMessage)
{
	FakeReg f;
	auto r = f.R();
	zcrpc__pool *p = nullptr;
	auto c = TwoClasses();
	c.nclasses = 1;
	ASSERT_EQ(zcrpc__pool_create(&c, &r, &p), ZCRPC_OK);
	f.fail_next = 1;
	zcrpc__slot s{};
	EXPECT_EQ(zcrpc__pool_get(p, 10, &s), ZCRPC_RESOURCE_EXHAUSTED);
	EXPECT_NE(std::strstr(zcrpc__pool_error(p), "ulimit -l"), nullptr) << zcrpc__pool_error(p);
	EXPECT_EQ(zcrpc__pool_get(p, 10, &s), ZCRPC_OK) << "recovers once registration works";
	zcrpc__pool_destroy(p);
}

TEST(MemPool, RegionsIdleForTheIdleTimeAreGivenBackAndTheirIdsStayRefused)
{
	FakeReg f;
	auto r = f.R();
	zcrpc__pool *p = nullptr;
	auto c = TwoClasses(16, 4); // small class: 4 regions of 4 slots
	ASSERT_EQ(zcrpc__pool_create(&c, &r, &p), ZCRPC_OK);
	std::vector<zcrpc__slot> s(16);
	for (auto &x : s)
		ASSERT_EQ(zcrpc__pool_get(p, 10, &x), ZCRPC_OK);
	EXPECT_EQ(zcrpc__pool_pinned(p), 16u * 256);
	for (auto &x : s)
		ASSERT_EQ(zcrpc__pool_put(p, x.id), ZCRPC_OK);
	// The peak is over. Nothing goes before the idle time has passed...
	EXPECT_EQ(zcrpc__pool_trim(p, 1000, 100), 0u);
	EXPECT_EQ(zcrpc__pool_trim(p, 1050, 100), 0u);
	// ... and a region used meanwhile starts over.
	zcrpc__slot u{};
	ASSERT_EQ(zcrpc__pool_get(p, 10, &u), ZCRPC_OK);
	ASSERT_EQ(zcrpc__pool_put(p, u.id), ZCRPC_OK);
	EXPECT_EQ(zcrpc__pool_trim(p, 1100, 100), 8u) << "3 idle regions, one kept as slack";
	zcrpc__pool_stats st;
	zcrpc__pool_get_stats(p, &st);
	EXPECT_EQ(st.cls[0].capacity, 8u);
	EXPECT_EQ(st.cls[0].regions, 2u);
	EXPECT_EQ(st.cls[0].released, 2u);
	EXPECT_EQ(f.deregs, 2);
	EXPECT_EQ(zcrpc__pool_pinned(p), 8u * 256);
	// The used region goes one idle time later; the slack region stays.
	EXPECT_EQ(zcrpc__pool_trim(p, 1300, 100), 4u);
	EXPECT_EQ(zcrpc__pool_trim(p, 9999, 100), 0u) << "a class keeps its slack region";
	EXPECT_EQ(zcrpc__pool_pinned(p), 4u * 256);
	// Ids of the given-back slots are refused, not honoured.
	size_t refused = 0;
	for (auto &x : s) {
		zcrpc__slot look{};
		refused += zcrpc__pool_lookup(p, x.id, &look) != ZCRPC_OK;
	}
	EXPECT_EQ(refused, 16u);
	EXPECT_EQ(zcrpc__pool_put(p, s[0].id), ZCRPC_FAILED_PRECONDITION);
	// Growing again brings the regions back (registered anew); every
	// slot is distinct and the old ids still name nothing.
	std::set<void *> ptrs;
	for (auto &x : s) {
		ASSERT_EQ(zcrpc__pool_get(p, 10, &x), ZCRPC_OK);
		ptrs.insert(x.ptr);
	}
	EXPECT_EQ(ptrs.size(), 16u);
	zcrpc__pool_get_stats(p, &st);
	EXPECT_EQ(st.cls[0].capacity, 16u);
	EXPECT_EQ(st.cls[0].regions, 4u);
	for (auto &x : s)
		ASSERT_EQ(zcrpc__pool_put(p, x.id), ZCRPC_OK);
	EXPECT_EQ(zcrpc__pool_in_use(p), 0u);
	zcrpc__pool_destroy(p);
	EXPECT_EQ(f.regs - f.deregs, 0) << "every registration released";
}
