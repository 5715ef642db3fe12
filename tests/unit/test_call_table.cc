// The call table of channels and servers (src/rpc/call_table.c), on the
// host: it starts with one chunk and grows as it fills, calls never move,
// references stay valid across growth and stale ones stay refused, the
// maximum and a failed growth both refuse a take (told apart), and freed
// calls are reused last-freed-first.
#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "rpc/call_table.h"

namespace
{

struct Call {
	uint32_t marker; // written by the test, must survive growth
	int inited;	 // set by init_call, once
	char pad[200];
};

void InitCall(void *call, void *arg)
{
	static_cast<Call *>(call)->inited++;
	(*static_cast<int *>(arg))++;
}

struct Table {
	zcrpc__call_table t;
	int inits = 0;
	explicit Table(uint32_t max)
	{
		EXPECT_EQ(zcrpc__call_table_init(&t, max, sizeof(Call),
						 InitCall, &inits),
			  ZCRPC_OK);
	}
	~Table()
	{
		zcrpc__call_table_fini(&t);
	}
	Call *Take()
	{
		return static_cast<Call *>(zcrpc__call_table_take(&t));
	}
	uint32_t Ref(const Call *c)
	{
		return zcrpc__call_table_ref(&t, c);
	}
	Call *Lookup(uint32_t r)
	{
		return static_cast<Call *>(zcrpc__call_table_lookup(&t, r));
	}
};

} // namespace

TEST(CallTable, StartsWithOneChunkOrTheMaximumWhenSmaller)
{
	Table a(65536);
	EXPECT_EQ(a.t.n, ZCRPC_CALL_CHUNK);
	EXPECT_EQ(a.t.nfree, ZCRPC_CALL_CHUNK);
	EXPECT_EQ(a.inits, static_cast<int>(ZCRPC_CALL_CHUNK));
	Table b(10);
	EXPECT_EQ(b.t.n, 10u);
	EXPECT_EQ(b.inits, 10);
	zcrpc__call_table t;
	EXPECT_EQ(zcrpc__call_table_init(&t, 0, 8, nullptr, nullptr),
		  ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc__call_table_init(&t, ZCRPC_MAX_CALL_TABLE, 8, nullptr,
					 nullptr),
		  ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc__call_table_init(&t, 4, 0, nullptr, nullptr),
		  ZCRPC_INVALID_ARGUMENT);
}

// Filling a table of 1000 grows it 64 -> 128 -> 256 -> 512 -> 1000 (the last
// chunk partial); every call taken before stays where it was, keeps its
// bytes and its reference, and is aligned for any type.
TEST(CallTable, GrowsByDoublingAcrossChunksAndNoCallMoves)
{
	const uint32_t max = 1000;
	Table tb(max);
	std::vector<Call *> calls;
	std::vector<uint32_t> refs;
	std::vector<uint32_t> sizes;
	std::set<Call *> distinct;

	for (uint32_t i = 0; i < max; i++) {
		Call *c = tb.Take();
		ASSERT_NE(c, nullptr) << i;
		EXPECT_EQ(reinterpret_cast<uintptr_t>(c) %
				  alignof(std::max_align_t),
			  0u);
		EXPECT_EQ(c->inited, 1) << i;  // once, when its chunk came
		EXPECT_EQ(c->marker, 0u) << i; // zeroed
		c->marker = 0xc0de0000u + i;
		calls.push_back(c);
		refs.push_back(tb.Ref(c));
		distinct.insert(c);
		EXPECT_EQ(ZCRPC_REF_IDX(refs.back()),
			  i); // the lowest index first
		EXPECT_EQ(ZCRPC_REF_GEN(refs.back()), 1u);
		if (sizes.empty() || sizes.back() != tb.t.n)
			sizes.push_back(tb.t.n);
	}
	EXPECT_EQ(sizes, (std::vector<uint32_t>{64, 128, 256, 512, 1000}));
	EXPECT_EQ(distinct.size(), max);
	EXPECT_EQ(tb.inits, static_cast<int>(max));
	EXPECT_EQ(zcrpc__call_table_used(&tb.t), max);
	for (uint32_t i = 0; i < max; i++) {
		EXPECT_EQ(tb.Lookup(refs[i]), calls[i]) << i;
		EXPECT_EQ(calls[i]->marker, 0xc0de0000u + i) << i;
		EXPECT_EQ(zcrpc__call_table_at(&tb.t, i), calls[i]) << i;
	}
}

// A reference to a call freed before the table grew still names nothing
// after it grew, and its slot's next reference is another; a reference to a
// call never allocated is refused, and so is a free call's.
TEST(CallTable, StaleReferencesStayRefusedAfterGrowth)
{
	Table tb(4096);
	std::vector<Call *> held;
	for (int i = 0; i < 64; i++)
		held.push_back(tb.Take());
	uint32_t stale = tb.Ref(held[5]);
	zcrpc__call_table_release(&tb.t, held[5]);
	EXPECT_EQ(tb.Lookup(stale), nullptr);
	// Out of range before growth; free after it.
	uint32_t beyond = ZCRPC_REF(100, 1);
	EXPECT_EQ(tb.Lookup(beyond), nullptr);
	Call *again = tb.Take(); // the one just freed (last freed first)
	ASSERT_EQ(again, held[5]);
	uint32_t fresh = tb.Ref(again);
	EXPECT_NE(fresh, stale);
	EXPECT_EQ(ZCRPC_REF_IDX(fresh), 5u);
	EXPECT_EQ(ZCRPC_REF_GEN(fresh), 2u);
	for (int i = 0; i < 500; i++) // grows to 1024
		held.push_back(tb.Take());
	EXPECT_EQ(tb.t.n, 1024u);
	EXPECT_EQ(tb.Lookup(stale), nullptr);
	EXPECT_EQ(tb.Lookup(fresh), again);
	EXPECT_NE(tb.Lookup(beyond),
		  nullptr); // index 100 is taken now, generation 1
	EXPECT_EQ(tb.Lookup(ZCRPC_REF(100, 2)), nullptr);
	EXPECT_EQ(tb.Lookup(ZCRPC_REF(1000, 1)), nullptr); // allocated, free
	EXPECT_EQ(tb.Lookup(ZCRPC_REF(1023, 0)), nullptr); // generation 0 never
	EXPECT_EQ(tb.Lookup(ZCRPC_REF(5000, 1)), nullptr); // past n
	// Generations wrap past 4095 to 1, never 0.
	Call *c = held[0];
	for (int i = 0; i < 4100; i++) {
		zcrpc__call_table_release(&tb.t, c);
		c = tb.Take();
		ASSERT_EQ(c, held[0]);
		ASSERT_NE(ZCRPC_REF_GEN(tb.Ref(c)), 0u);
	}
}

// At the maximum a take (and a peek) is refused and the table says it is
// full; a call freed then is the next one taken.
TEST(CallTable, TheMaximumRefusesATakeAndSaysFull)
{
	Table tb(200);
	std::vector<Call *> held;
	for (int i = 0; i < 200; i++)
		held.push_back(tb.Take());
	EXPECT_EQ(tb.t.n, 200u);
	EXPECT_EQ(tb.Take(), nullptr);
	EXPECT_EQ(zcrpc__call_table_peek(&tb.t), nullptr);
	EXPECT_TRUE(zcrpc__call_table_full(&tb.t));
	zcrpc__call_table_release(&tb.t, held[150]);
	EXPECT_EQ(zcrpc__call_table_peek(&tb.t), held[150]);
	EXPECT_EQ(tb.Take(), held[150]);
	EXPECT_EQ(tb.Take(), nullptr);
}

// A growth that fails (no memory) refuses the take while the table is not
// full: the caller can tell it from the maximum. The table works on once
// memory returns, its calls untouched.
TEST(CallTable, AFailedGrowthRefusesTheTakeButIsNotFull)
{
	Table tb(65536);
	std::vector<Call *> held;
	for (int i = 0; i < 64; i++)
		held.push_back(tb.Take());
	zcrpc__test_call_table_nomem(1);
	EXPECT_EQ(tb.Take(), nullptr);
	EXPECT_EQ(zcrpc__call_table_peek(&tb.t), nullptr);
	EXPECT_FALSE(zcrpc__call_table_full(&tb.t));
	EXPECT_EQ(tb.t.n, 64u);
	zcrpc__test_call_table_nomem(0);
	Call *c = tb.Take();
	ASSERT_NE(c, nullptr);
	EXPECT_EQ(ZCRPC_REF_IDX(tb.Ref(c)), 64u);
	EXPECT_EQ(tb.t.n, 128u);
	for (int i = 0; i < 64; i++)
		EXPECT_EQ(tb.Lookup(tb.Ref(held[i])), held[i]);
}

// Freed calls come back last-freed-first; peek shows the call take returns
// without taking it, and its reference is already the one it will have.
TEST(CallTable, FreedCallsAreReusedLastFreedFirst)
{
	Table tb(65536);
	std::vector<Call *> held;
	for (int i = 0; i < 100; i++)
		held.push_back(tb.Take());
	zcrpc__call_table_release(&tb.t, held[3]);
	zcrpc__call_table_release(&tb.t, held[70]);
	zcrpc__call_table_release(&tb.t, held[10]);
	EXPECT_EQ(zcrpc__call_table_used(&tb.t), 97u);
	Call *p = static_cast<Call *>(zcrpc__call_table_peek(&tb.t));
	ASSERT_EQ(p, held[10]);
	uint32_t r = tb.Ref(p);
	EXPECT_EQ(tb.Lookup(r), nullptr); // still free
	EXPECT_EQ(tb.Take(), held[10]);
	EXPECT_EQ(tb.Lookup(r), held[10]);
	EXPECT_EQ(tb.Take(), held[70]);
	EXPECT_EQ(tb.Take(), held[3]);
	// Then the unused rest of the current chunks, lowest index first.
	Call *next = tb.Take();
	EXPECT_EQ(ZCRPC_REF_IDX(tb.Ref(next)), 100u);
}
