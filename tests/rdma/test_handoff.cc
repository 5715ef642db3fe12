// zcrpc_worker_post(): functions handed to a worker from other threads run
// on the worker's thread, once each, in order, never inside the post, and a
// post wakes a worker asleep on its fd. (A worker needs a device, hence the
// rdma label.)
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include <poll.h>

#include "rdma_env.h"

using namespace std::chrono;
using namespace std::chrono_literals;

namespace {

class Handoff : public RdmaTest {};

struct Worker {
	zcrpc_worker *w = nullptr;
	Worker() { EXPECT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK); }
	~Worker() { zcrpc_worker_destroy(w); }
};

void Bump(zcrpc_worker *, void *arg)
{
	++*static_cast<int *>(arg);
}

} // namespace

TEST_F(Handoff, FourThreadsFourThousandPostsRunOnceInOrderOnTheWorkerThread)
{
	const int nthreads = 4, per = 1000;
	struct State;
	struct Item {
		State *s;
		int thread, seq, runs;
	};
	struct State {
		int counter = 0; // only touched on the worker thread
		int last[4] = {-1, -1, -1, -1};
		int out_of_order = 0, wrong_thread = 0;
		std::thread::id worker;
	} st;
	st.worker = std::this_thread::get_id();
	std::vector<std::unique_ptr<Item[]>> items;
	for (int t = 0; t < nthreads; t++) {
		items.emplace_back(new Item[per]);
		for (int i = 0; i < per; i++)
			items.back()[i] = Item{&st, t, i, 0};
	}
	auto run = [](zcrpc_worker *, void *a) {
		auto *it = static_cast<Item *>(a);
		State *s = it->s;
		s->counter++;
		it->runs++;
		if (it->seq != s->last[it->thread] + 1)
			s->out_of_order++;
		s->last[it->thread] = it->seq;
		if (std::this_thread::get_id() != s->worker)
			s->wrong_thread++;
	};
	Worker wk;
	ASSERT_NE(wk.w, nullptr);
	EXPECT_EQ(zcrpc_worker_post(nullptr, run, nullptr), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_worker_post(wk.w, nullptr, nullptr), ZCRPC_INVALID_ARGUMENT);

	std::atomic<bool> go{false};
	std::atomic<int> post_errors{0};
	std::vector<std::thread> threads;
	for (int t = 0; t < nthreads; t++)
		threads.emplace_back([&, t] {
			while (!go.load())
				std::this_thread::yield();
			for (int i = 0; i < per; i++)
				if (zcrpc_worker_post(wk.w, run, &items[static_cast<size_t>(t)][i]) !=
				    ZCRPC_OK)
					post_errors++;
		});
	go = true;
	// The worker sleeps on its fd between batches.
	auto until = steady_clock::now() + 60s * TimeScale();
	int calls = 0;
	while (st.counter < nthreads * per && steady_clock::now() < until) {
		ASSERT_EQ(zcrpc_worker_progress(wk.w, 100), ZCRPC_OK);
		calls++;
	}
	for (auto &th : threads)
		th.join();
	zcrpc_worker_progress(wk.w, 0); // nothing more may run
	EXPECT_EQ(post_errors.load(), 0);
	EXPECT_EQ(st.counter, nthreads * per);
	EXPECT_EQ(st.out_of_order, 0);
	EXPECT_EQ(st.wrong_thread, 0);
	int not_once = 0;
	for (auto &arr : items)
		for (int i = 0; i < per; i++)
			not_once += arr[i].runs != 1;
	EXPECT_EQ(not_once, 0) << "posted functions that did not run exactly once";
	for (int t = 0; t < nthreads; t++)
		EXPECT_EQ(st.last[t], per - 1);
	std::printf("4000 posts ran in %d progress calls\n", calls);
}

TEST_F(Handoff, NeverRunsInsideThePostAndARepostWaitsForTheNextProgress)
{
	Worker wk;
	ASSERT_NE(wk.w, nullptr);
	struct Ctx {
		int first = 0, second = 0;
	} ctx;
	auto first = [](zcrpc_worker *w, void *a) {
		auto *c = static_cast<Ctx *>(a);
		c->first++;
		auto again = [](zcrpc_worker *, void *b) { static_cast<Ctx *>(b)->second++; };
		EXPECT_EQ(zcrpc_worker_post(w, again, a), ZCRPC_OK);
		EXPECT_EQ(c->second, 0) << "ran inside the post";
		// Progress from inside a callback is refused, as for any other.
		EXPECT_EQ(zcrpc_worker_progress(w, 0), ZCRPC_FAILED_PRECONDITION);
	};
	ASSERT_EQ(zcrpc_worker_post(wk.w, first, &ctx), ZCRPC_OK);
	EXPECT_EQ(ctx.first, 0) << "ran inside the post";
	EXPECT_EQ(zcrpc_worker_arm(wk.w), ZCRPC_RESOURCE_EXHAUSTED) << "a post is pending";
	ASSERT_EQ(zcrpc_worker_progress(wk.w, 0), ZCRPC_OK);
	EXPECT_EQ(ctx.first, 1);
	EXPECT_EQ(ctx.second, 0) << "a function posted by a posted function ran at once";
	ASSERT_EQ(zcrpc_worker_progress(wk.w, 0), ZCRPC_OK);
	EXPECT_EQ(ctx.second, 1);
	ASSERT_EQ(zcrpc_worker_progress(wk.w, 0), ZCRPC_OK);
	EXPECT_EQ(ctx.first, 1);
	EXPECT_EQ(ctx.second, 1);
}

TEST_F(Handoff, APostWakesAWorkerAsleepOnItsFd)
{
	Worker wk;
	ASSERT_NE(wk.w, nullptr);
	int ran = 0;

	// Asleep inside progress(w, 5000).
	std::thread poster([&] {
		std::this_thread::sleep_for(200ms);
		EXPECT_EQ(zcrpc_worker_post(wk.w, Bump, &ran), ZCRPC_OK);
	});
	auto t0 = steady_clock::now();
	ASSERT_EQ(zcrpc_worker_progress(wk.w, 5000), ZCRPC_OK);
	auto slept = duration_cast<milliseconds>(steady_clock::now() - t0).count();
	poster.join();
	EXPECT_EQ(ran, 1) << "the post did not run in the progress call it woke";
	EXPECT_GE(slept, 150) << "progress returned before the post";
	EXPECT_LT(slept, 2500) << "the post did not wake the sleeping worker";

	// Asleep in the application's own poll on zcrpc_worker_get_fd().
	ASSERT_EQ(zcrpc_worker_arm(wk.w), ZCRPC_OK);
	std::thread poster2([&] {
		std::this_thread::sleep_for(200ms);
		EXPECT_EQ(zcrpc_worker_post(wk.w, Bump, &ran), ZCRPC_OK);
	});
	pollfd p{zcrpc_worker_get_fd(wk.w), POLLIN, 0};
	t0 = steady_clock::now();
	int r = poll(&p, 1, 5000);
	slept = duration_cast<milliseconds>(steady_clock::now() - t0).count();
	poster2.join();
	EXPECT_EQ(r, 1);
	EXPECT_LT(slept, 2500);
	EXPECT_EQ(ran, 1) << "ran outside progress";
	ASSERT_EQ(zcrpc_worker_progress(wk.w, 0), ZCRPC_OK);
	EXPECT_EQ(ran, 2);
}

TEST_F(Handoff, QueuedFunctionsAreDroppedAtDestroy)
{
	int ran = 0;
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	for (int i = 0; i < 3; i++)
		ASSERT_EQ(zcrpc_worker_post(w, Bump, &ran), ZCRPC_OK);
	zcrpc_worker_destroy(w); // frees them (LSan would tell) without running
	EXPECT_EQ(ran, 0);
}
