// Channels over many servers (issue 16; docs/balancing.md), over rxe with
// server processes of zcrpc_test_lb_peer in the guest: round_robin spreads
// calls evenly; a killed server's calls fail once (or are retried when the
// method is idempotent) and the rest go to the others, none completing or
// running twice, and the server restarted is picked again;
// least_outstanding starves a stopped server; ring_hash keeps each key on
// its server and moves only a removed server's keys; the file: resolver
// adds and removes servers; bad targets, empty resolutions and servers of
// another protocol fail clearly.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "fault_util.h"
#include "lb_util.h"
#include "stranger.h"
#include "rdma_env.h"
#include "zcrpc/balance.h"
#include "zcrpc/rpc.h"
#include "zcrpc/stream.h"

using namespace std::chrono;
using namespace std::chrono_literals;

namespace
{

class Balance : public RdmaTest
{
      protected:
	std::vector<LbPeer> peers_;

	void StartPeers(int n)
	{
		ASSERT_TRUE(StartLbPeers(peers_, n, env_.addr0));
	}
};

} // namespace

TEST_F(Balance, RoundRobinSpreadsCallsWithinTenPercentOfEvenOverFourServerProcesses)
{
	StartPeers(4);
	LbClient cl;
	ASSERT_EQ(cl.Open(Ipv4Target(env_.addr0, peers_), "round_robin"), ZCRPC_OK);
	const int n = 4000;
	ASSERT_TRUE(cl.Load(n, 64, Scaled(60000)));
	auto per = cl.PerServer();
	int ok = 0;
	for (auto &kv : per) {
		std::printf("%s: %d calls\n", kv.first.c_str(), kv.second);
		ok += kv.second;
	}
	EXPECT_EQ(ok, n);
	ASSERT_EQ(per.size(), 4u);
	for (auto &kv : per) {
		EXPECT_GE(kv.second, n / 4 * 9 / 10) << kv.first;
		EXPECT_LE(kv.second, n / 4 * 11 / 10) << kv.first;
	}
	EXPECT_EQ(cl.Twice(), 0);
	// Counted at the servers: each ran exactly what it answered, once.
	for (auto &p : peers_) {
		ServerCounts c = AskCounts(env_.addr0, p.port);
		ASSERT_TRUE(c.ok) << p.name;
		EXPECT_EQ(c.calls, static_cast<uint64_t>(per[p.name])) << p.name;
		EXPECT_EQ(c.duplicates, 0u) << p.name;
	}
	zcrpc_backend_info b[8];
	ASSERT_EQ(zcrpc_channel_get_backends(cl.ch, b, 8, sizeof(b[0])), 4u);
	for (int i = 0; i < 4; i++)
		EXPECT_EQ(b[i].state, ZCRPC_BACKEND_READY) << i;
}

// The kill, then the restart. @idempotent marks Who with a retry policy.
static void KillUnderLoad(Balance *t, const std::string &addr, std::vector<LbPeer> &peers,
			  bool idempotent)
{
	LbClient cl;
	ASSERT_EQ(cl.Open(Ipv4Target(addr, peers), "round_robin"), ZCRPC_OK);
	if (idempotent) {
		zcrpc_retry_policy p;
		zcrpc_retry_policy_init(&p);
		p.max_attempts = 4;
		ASSERT_EQ(zcrpc_channel_set_retry(cl.ch, zcrpc_method_id(kLbWho), &p), ZCRPC_OK);
	}
	ASSERT_TRUE(cl.Load(800, 32, Scaled(30000)));
	ASSERT_EQ(cl.PerServer().size(), 4u);

	// Kill s2 with calls in flight: stopped first, so that the calls it
	// is given stay there (they never run), then killed.
	kill(peers[2].child->pid, SIGSTOP);
	for (int i = 0; i < 32; i++)
		ASSERT_EQ(cl.Start(kLbWho), ZCRPC_OK);
	ProgressUntil(cl.w, [&] { return cl.live <= 8; }, Scaled(2000));
	ProgressUntil(cl.w, [] { return false; }, 20ms);
	int stuck = cl.live;
	EXPECT_EQ(stuck, 8) << "round_robin gave s2 a quarter of 32";
	uint64_t at_kill = cl.next_id;
	peers[2].child->Kill();
	ASSERT_TRUE(cl.Drain(Scaled(20000)));
	// Within the keepalive bound the channel knows; calls after that go
	// to the three others only.
	ProgressUntil(cl.w, [] { return false; }, Scaled(1500));
	uint64_t after = cl.next_id;
	ASSERT_TRUE(cl.Load(900, 32, Scaled(30000)));
	auto per = cl.PerServer(after);
	EXPECT_EQ(per.count("s2"), 0u);
	int ok = 0;
	for (auto &kv : per)
		ok += kv.second;
	EXPECT_EQ(ok, 900) << "every call after the kill succeeded elsewhere";
	int failed = 0;
	for (auto &kv : cl.out)
		if (kv.first >= at_kill - 32 && kv.second.status != ZCRPC_OK) {
			failed++;
			EXPECT_EQ(kv.second.status, ZCRPC_UNAVAILABLE) << kv.second.message;
		}
	std::printf("failed around the kill: %d (idempotent %d)\n", failed, idempotent);
	if (idempotent)
		EXPECT_EQ(failed, 0) << "idempotent calls are retried elsewhere";
	else
		EXPECT_EQ(failed, stuck) << "the calls in flight at the kill fail, once";
	zcrpc_channel_stats st;
	zcrpc_channel_get_stats(cl.ch, &st, sizeof(st));
	EXPECT_EQ(st.retries_policy, idempotent ? static_cast<uint64_t>(stuck) : 0u);
	EXPECT_EQ(cl.Twice(), 0) << "no call completes twice";
	for (size_t i = 0; i < peers.size(); i++) {
		if (i == 2)
			continue;
		ServerCounts c = AskCounts(addr, peers[i].port);
		ASSERT_TRUE(c.ok);
		EXPECT_EQ(c.duplicates, 0u) << peers[i].name << ": a call ran twice";
	}

	// Restarted on its port, it is picked again.
	ASSERT_TRUE(peers[2].Start(addr, "s2", peers[2].port));
	bool back = false;
	auto until = steady_clock::now() + Scaled(20000);
	while (!back && steady_clock::now() < until) {
		uint64_t from = cl.next_id;
		ASSERT_TRUE(cl.Load(100, 16, Scaled(10000)));
		back = cl.PerServer(from).count("s2") > 0;
	}
	std::string states;
	zcrpc_backend_info bi[4];
	size_t nb = zcrpc_channel_get_backends(cl.ch, bi, 4, sizeof(bi[0]));
	for (size_t i = 0; i < nb && i < 4; i++)
		states += std::string(bi[i].port) + "=" + std::to_string(bi[i].state) + " ";
	EXPECT_TRUE(back) << "the restarted server was never picked; states " << states;
	EXPECT_EQ(cl.Twice(), 0);
	(void)t;
}

TEST_F(Balance, AKilledServersCallsFailOnceTheRestGoToTheOthersAndItComesBackWhenRestarted)
{
	StartPeers(4);
	KillUnderLoad(this, env_.addr0, peers_, false);
}

TEST_F(Balance, AnIdempotentMethodsCallsCutByAKillAreRetriedElsewhere)
{
	StartPeers(4);
	KillUnderLoad(this, env_.addr0, peers_, true);
}

TEST_F(Balance, LeastOutstandingGivesAStoppedServerUnderFivePercentOfNewCalls)
{
	StartPeers(3);
	LbClient cl;
	ASSERT_EQ(cl.Open(Ipv4Target(env_.addr0, peers_), "least_outstanding", 0),
		  ZCRPC_OK);
	ASSERT_TRUE(cl.Load(600, 24, Scaled(30000)));
	ASSERT_EQ(cl.PerServer().size(), 3u);
	zcrpc_backend_info before[3], now[3];
	ASSERT_EQ(zcrpc_channel_get_backends(cl.ch, before, 3, sizeof(before[0])), 3u);
	kill(peers_[1].child->pid, SIGSTOP);
	// New calls with a deadline: those given to the stopped one expire.
	const int n = 3000;
	int started = 0;
	auto until = steady_clock::now() + Scaled(60000);
	while (started < n && steady_clock::now() < until) {
		while (cl.live < 24 && started < n) {
			ASSERT_EQ(cl.Start(kLbWho, nullptr, 3000000), ZCRPC_OK);
			started++;
		}
		zcrpc_worker_progress(cl.w, 1);
	}
	ASSERT_EQ(zcrpc_channel_get_backends(cl.ch, now, 3, sizeof(now[0])), 3u);
	uint64_t picks = 0;
	for (int i = 0; i < 3; i++)
		picks += now[i].picks - before[i].picks;
	uint64_t stopped = now[1].picks - before[1].picks;
	std::printf("stopped server got %llu of %llu new calls\n",
		    static_cast<unsigned long long>(stopped),
		    static_cast<unsigned long long>(picks));
	EXPECT_LT(stopped * 100, picks * 5);
	kill(peers_[1].child->pid, SIGCONT);
	EXPECT_TRUE(cl.Drain(Scaled(20000)));
	EXPECT_EQ(cl.Twice(), 0);
}

// A file: target the test rewrites.
struct ListFile {
	std::string path;
	explicit ListFile(const std::string &p) : path(p) {}
	void Write(const std::string &addr, const std::vector<LbPeer> &peers,
		   const std::set<size_t> &skip = {})
	{
		std::string tmp = path + ".tmp";
		std::ofstream f(tmp);
		f << "# servers of the test\n";
		for (size_t i = 0; i < peers.size(); i++)
			if (!skip.count(i))
				f << addr << ":" << peers[i].port << "   # " << peers[i].name << "\n";
		f.close();
		std::rename(tmp.c_str(), path.c_str()); // a new inode: seen as changed
	}
	~ListFile()
	{
		std::remove(path.c_str());
	}
};

// Each key's server, one call per key.
static std::map<std::string, std::string> KeyOwners(LbClient &cl, int keys)
{
	std::map<uint64_t, std::string> ids;
	for (int k = 0; k < keys; k++) {
		std::string key = "key-" + std::to_string(k);
		ids[cl.next_id] = key;
		EXPECT_EQ(cl.Start(kLbWho, &key), ZCRPC_OK);
		if (cl.live >= 32)
			ProgressUntil(cl.w, [&] { return cl.live < 16; }, Scaled(10000));
	}
	EXPECT_TRUE(cl.Drain(Scaled(20000)));
	std::map<std::string, std::string> owner;
	for (auto &kv : ids) {
		const LbOutcome &o = cl.out[kv.first];
		EXPECT_EQ(o.status, ZCRPC_OK) << o.message;
		owner[kv.second] = o.server;
	}
	return owner;
}

TEST_F(Balance, RingHashKeepsEachKeyOnItsServerAndRemovingOneMovesOnlyItsKeys)
{
	StartPeers(4);
	ListFile lf("/tmp/zcrpc-balance-ring.list");
	lf.Write(env_.addr0, peers_);
	LbClient cl;
	ASSERT_EQ(cl.Open("file:" + lf.path, "ring_hash"), ZCRPC_OK);
	const int keys = 2000;
	auto first = KeyOwners(cl, keys);
	auto second = KeyOwners(cl, keys);
	ASSERT_EQ(first.size(), static_cast<size_t>(keys));
	EXPECT_EQ(first, second) << "a key moved while the set was stable";
	std::map<std::string, int> share;
	for (auto &kv : first)
		share[kv.second]++;
	for (auto &kv : share)
		std::printf("%s owns %d keys\n", kv.first.c_str(), kv.second);
	EXPECT_EQ(share.size(), 4u);

	// s3 leaves the file: within one re-read (1 s) the set has 3.
	lf.Write(env_.addr0, peers_, {3});
	ASSERT_TRUE(ProgressUntil(
		cl.w, [&] { return zcrpc_channel_get_backends(cl.ch, nullptr, 0, 0) == 3; },
		Scaled(5000)));
	auto third = KeyOwners(cl, keys);
	int moved = 0, moved_between_survivors = 0;
	for (auto &kv : first) {
		if (third[kv.first] == kv.second)
			continue;
		moved++;
		if (kv.second != "s3")
			moved_between_survivors++;
	}
	double frac = 100.0 * moved / keys;
	std::printf("moved %d of %d keys (%.1f %%)\n", moved, keys, frac);
	EXPECT_EQ(moved_between_survivors, 0);
	EXPECT_NEAR(frac, 25.0, 5.0);
	for (auto &kv : third)
		EXPECT_NE(kv.second, "s3");

	// Back in the file: its keys come back to it.
	lf.Write(env_.addr0, peers_);
	ASSERT_TRUE(ProgressUntil(
		cl.w, [&] { return zcrpc_channel_get_backends(cl.ch, nullptr, 0, 0) == 4; },
		Scaled(5000)));
	EXPECT_EQ(KeyOwners(cl, keys), first);
	EXPECT_EQ(cl.Twice(), 0);
}

TEST_F(Balance, AServerAddedToTheFileGetsCallsWithinOneReRead)
{
	StartPeers(3);
	ListFile lf("/tmp/zcrpc-balance-add.list");
	lf.Write(env_.addr0, peers_, {2});
	LbClient cl;
	ASSERT_EQ(cl.Open("file:" + lf.path, "round_robin"), ZCRPC_OK);
	ASSERT_TRUE(cl.Load(200, 8, Scaled(20000)));
	EXPECT_EQ(cl.PerServer().count("s2"), 0u);
	lf.Write(env_.addr0, peers_);
	ProgressUntil(cl.w, [] { return false; }, Scaled(1500));
	uint64_t from = cl.next_id;
	ASSERT_TRUE(cl.Load(300, 8, Scaled(20000)));
	auto per = cl.PerServer(from);
	EXPECT_EQ(per.size(), 3u);
	EXPECT_GT(per["s2"], 50);
}

TEST_F(Balance, AGracefullyStoppingServerLeavesThePickSetAndNoCallFails)
{
	StartPeers(3);
	LbClient cl;
	ASSERT_EQ(cl.Open(Ipv4Target(env_.addr0, peers_), "round_robin"), ZCRPC_OK);
	ASSERT_TRUE(cl.Load(300, 16, Scaled(20000)));
	uint64_t from = cl.next_id;
	kill(peers_[0].child->pid, SIGTERM); // GOAWAY, drains, exits
	ASSERT_TRUE(cl.Load(1500, 16, Scaled(30000)));
	int failed = 0;
	for (auto &kv : cl.out)
		if (kv.first >= from && kv.second.status != ZCRPC_OK) {
			failed++;
			ADD_FAILURE() << kv.second.message;
			if (failed > 3)
				break;
		}
	EXPECT_EQ(failed, 0);
	EXPECT_EQ(peers_[0].child->Wait(Scaled(10000)), 0);
	zcrpc_channel_stats st;
	zcrpc_channel_get_stats(cl.ch, &st, sizeof(st));
	std::printf("transparent retries %llu\n",
		    static_cast<unsigned long long>(st.retries_transparent));
	EXPECT_EQ(cl.Twice(), 0);
}

TEST_F(Balance, BadTargetsAndEmptyResolutionsFailWithClearStatuses)
{
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	zcrpc_channel *ch = nullptr;
	for (const char *t :
	     {"", "ipv4:", "ipv4:10.0.0.1", "ipv4:10.0.0.1:0", "ipv4:10.0.0.1:70000",
	      "ipv4:10.0.0.1:80,", "ipv4:[::1]:80", "ipv4:host:80", "ipv6:10.0.0.1:80",
	      "ipv6:[::1]", "ipv6:[zz::1]:80", "nosuchscheme:thing", "file:",
	      "host:80,other:81", "a:b:c"}) {
		EXPECT_EQ(zcrpc_channel_create_target(w, t, nullptr, &ch),
			  ZCRPC_INVALID_ARGUMENT)
			<< t;
		EXPECT_EQ(ch, nullptr);
	}
	zcrpc_channel_opts o;
	zcrpc_channel_opts_init(&o);
	o.lb_policy = "fastest";
	EXPECT_EQ(zcrpc_channel_create_target(w, "ipv4:10.0.0.1:80", &o, &ch),
		  ZCRPC_INVALID_ARGUMENT);

	// A file that is not there, then garbage, then empty: calls fail
	// UNAVAILABLE saying why, and wait_for_ready calls wait.
	std::string path = "/tmp/zcrpc-balance-bad.list";
	std::remove(path.c_str());
	ASSERT_EQ(zcrpc_channel_create_target(w, ("file:" + path).c_str(), nullptr, &ch),
		  ZCRPC_OK);
	zcrpc_result r;
	EXPECT_EQ(zcrpc_call(ch, zcrpc_method_id(kLbWho), "12345678", 8, nullptr, &r,
			     sizeof(r)),
		  ZCRPC_UNAVAILABLE);
	EXPECT_NE(std::string(r.message).find("cannot read " + path), std::string::npos)
		<< r.message;
	zcrpc_result_free(&r);
	{
		std::ofstream f(path);
		f << "10.0.0.1:80\nthis is not an address\n";
	}
	ASSERT_TRUE(ProgressUntil(w, [&] {
		zcrpc_result rr;
		zcrpc_call(ch, zcrpc_method_id(kLbWho), "12345678", 8, nullptr, &rr, sizeof(rr));
		bool seen = std::string(rr.message).find("line 2") != std::string::npos;
		zcrpc_result_free(&rr);
		return seen;
	}, Scaled(5000)));
	EXPECT_EQ(zcrpc_channel_get_backends(ch, nullptr, 0, 0), 0u);
	{
		std::ofstream f(path + ".tmp");
		f << "# nothing\n";
	}
	std::rename((path + ".tmp").c_str(), path.c_str());
	ASSERT_TRUE(ProgressUntil(w, [&] {
		zcrpc_result rr;
		zcrpc_call(ch, zcrpc_method_id(kLbWho), "12345678", 8, nullptr, &rr, sizeof(rr));
		bool seen = std::string(rr.message).find("no addresses") != std::string::npos;
		EXPECT_EQ(rr.status, ZCRPC_UNAVAILABLE);
		zcrpc_result_free(&rr);
		return seen;
	}, Scaled(5000)));
	zcrpc_call_opts co;
	zcrpc_call_opts_init(&co);
	co.flags = ZCRPC_CALL_WAIT_FOR_READY;
	co.timeout_us = 300000;
	auto t0 = steady_clock::now();
	EXPECT_EQ(zcrpc_call(ch, zcrpc_method_id(kLbWho), "12345678", 8, &co, &r, sizeof(r)),
		  ZCRPC_DEADLINE_EXCEEDED)
		<< r.message;
	EXPECT_GE(steady_clock::now() - t0, 250ms);
	zcrpc_result_free(&r);
	co.hash_key = nullptr;
	co.hash_key_len = 3;
	EXPECT_EQ(zcrpc_call(ch, zcrpc_method_id(kLbWho), "12345678", 8, &co, &r, sizeof(r)),
		  ZCRPC_INVALID_ARGUMENT);
	zcrpc_result_free(&r);
	zcrpc_channel_stats st;
	zcrpc_channel_get_stats(ch, &st, sizeof(st));
	EXPECT_GT(st.no_backend, 0u);
	zcrpc_channel_destroy(ch);
	std::remove(path.c_str());

	// A server found later: a wait_for_ready call started before it is
	// in the file completes on it.
	LbPeer p;
	ASSERT_TRUE(p.Start(env_.addr0, "late"));
	ASSERT_EQ(zcrpc_channel_create_target(w, ("file:" + path).c_str(), nullptr, &ch),
		  ZCRPC_OK);
	struct R {
		int n = 0;
		zcrpc_status st = ZCRPC_UNKNOWN;
		std::string data;
	} res;
	co.hash_key_len = 0;
	co.timeout_us = 10000000;
	ASSERT_EQ(zcrpc_call_async(
			  ch, zcrpc_method_id(kLbWho), "12345678", 8, &co,
			  [](zcrpc_channel *, const zcrpc_reply *rp, void *a) {
				  auto *x = static_cast<R *>(a);
				  x->n++;
				  x->st = rp->status;
				  x->data.assign(static_cast<const char *>(rp->data), rp->len);
			  },
			  &res, nullptr),
		  ZCRPC_OK);
	ProgressUntil(w, [] { return false; }, 300ms);
	EXPECT_EQ(res.n, 0);
	{
		std::ofstream f(path);
		f << env_.addr0 << ":" << p.port << "\n";
	}
	ASSERT_TRUE(ProgressUntil(w, [&] { return res.n > 0; }, Scaled(8000)));
	EXPECT_EQ(res.st, ZCRPC_OK);
	EXPECT_EQ(res.data, "late");
	zcrpc_channel_destroy(ch);
	std::remove(path.c_str());
	zcrpc_worker_destroy(w);
}

// Backends that answer with the wrong protocol: raw rdma_cm servers that
// accept with an HTTP reply or with nothing, or reject with one. Each fails
// its calls UNAVAILABLE saying what it answered and leaves the pick set; a
// channel over them and one zcrpc server sends every call there; the
// strangers' connections are taken down by the client (none left open).
TEST_F(Balance, BackendsThatAnswerWithAnotherProtocolFailClearlyAndLeaveThePickSet)
{
	StartPeers(1);
	Stranger acc, none, rej;
	ASSERT_TRUE(acc.Start(env_.addr0, Stranger::kAcceptWithGarbage));
	ASSERT_TRUE(none.Start(env_.addr0, Stranger::kAcceptWithNothing));
	ASSERT_TRUE(rej.Start(env_.addr0, Stranger::kRejectWithGarbage));
	auto at = [&](uint16_t port) {
		return env_.addr0 + ":" + std::to_string(port);
	};

	// Alone: what each answered, in the calls' status.
	struct Case {
		Stranger *s;
		const char *says;
	} cases[] = {{&acc, "bad magic 0x50545448"},
		     {&none, "handshake"},
		     {&rej, "rejected by the peer"}};
	for (const Case &c : cases) {
		LbClient cl;
		ASSERT_EQ(cl.Open("ipv4:" + at(c.s->port()), "pick_first"), ZCRPC_OK);
		zcrpc_status st = ZCRPC_OK;
		std::string msg = cl.FailureMessage(Scaled(5000), &st);
		EXPECT_EQ(st, ZCRPC_UNAVAILABLE) << msg;
		EXPECT_NE(msg.find(c.says), std::string::npos) << msg;
		EXPECT_EQ(cl.Ready(), 0u);
		EXPECT_GT(c.s->answered(), 0);
	}

	// Among them one zcrpc server: with either picker every call reaches
	// it, none fails, none completes twice.
	std::string target = "ipv4:" + at(acc.port()) + "," + at(none.port()) + "," +
			     at(rej.port()) + "," + at(peers_[0].port);
	for (const char *policy : {"pick_first", "round_robin"}) {
		LbClient cl;
		ASSERT_EQ(cl.Open(target, policy), ZCRPC_OK);
		ASSERT_TRUE(cl.Load(300, 8, Scaled(20000))) << policy;
		ASSERT_TRUE(cl.Drain(Scaled(5000)));
		EXPECT_EQ(cl.Failed(), 0) << policy << ": " << cl.FirstFailure();
		EXPECT_EQ(cl.PerServer()["s0"], cl.completed) << policy;
		EXPECT_EQ(cl.Twice(), 0);
		EXPECT_EQ(cl.BackendCount(), 4u);
		EXPECT_EQ(cl.Ready(), 1u) << policy;
	}

	// The client took down every connection a stranger accepted.
	auto until = steady_clock::now() + Scaled(5000);
	while ((acc.ended() < acc.answered() || none.ended() < none.answered()) &&
	       steady_clock::now() < until)
		std::this_thread::sleep_for(10ms);
	EXPECT_EQ(acc.ended(), acc.answered());
	EXPECT_EQ(none.ended(), none.answered())
		<< acc.ended() << "/" << acc.answered() << " " << none.ended() << "/"
		<< none.answered();
}

TEST_F(Balance, ARetryPolicyRetriesOnlyItsStatusesUpToItsAttempts)
{
	StartPeers(2);
	LbClient cl;
	ASSERT_EQ(cl.Open(Ipv4Target(env_.addr0, peers_), "round_robin"), ZCRPC_OK);
	zcrpc_retry_policy p;
	zcrpc_retry_policy_init(&p);
	p.max_attempts = 3;
	p.initial_backoff_ms = 5;
	EXPECT_EQ(zcrpc_channel_set_retry(cl.ch, zcrpc_method_id(kLbFail), &p), ZCRPC_OK);
	p.max_attempts = 1;
	EXPECT_EQ(zcrpc_channel_set_retry(cl.ch, zcrpc_method_id(kLbWho), &p),
		  ZCRPC_INVALID_ARGUMENT);
	ASSERT_EQ(cl.Start(kLbFail), ZCRPC_OK);
	ASSERT_TRUE(cl.Drain(Scaled(10000)));
	EXPECT_EQ(cl.out.begin()->second.status, ZCRPC_UNAVAILABLE);
	EXPECT_EQ(cl.out.begin()->second.completions, 1);
	zcrpc_channel_stats st;
	zcrpc_channel_get_stats(cl.ch, &st, sizeof(st));
	EXPECT_EQ(st.retries_policy, 2u);
	EXPECT_EQ(st.calls_started, 1u);
	EXPECT_EQ(st.calls_failed, 1u);
	uint64_t ran = 0;
	for (auto &pe : peers_) {
		ServerCounts c = AskCounts(env_.addr0, pe.port);
		ran += c.calls;
	}
	EXPECT_EQ(ran, 3u) << "three attempts, each ran once";
	// After calls were made the policy is fixed.
	EXPECT_EQ(zcrpc_channel_set_retry(cl.ch, zcrpc_method_id(kLbWho), nullptr),
		  ZCRPC_FAILED_PRECONDITION);
}

// ---- hedging ---------------------------------------------------------------

namespace
{

zcrpc_channel_stats ChannelStats(zcrpc_channel *ch)
{
	zcrpc_channel_stats st;
	zcrpc_channel_get_stats(ch, &st, sizeof(st));
	return st;
}

// Marks @method of @ch hedged: @max attempts, one more every @delay.
void Hedge(zcrpc_channel *ch, const char *method, uint32_t max,
	   std::chrono::milliseconds delay)
{
	zcrpc_retry_policy p;
	zcrpc_retry_policy_init(&p);
	p.max_attempts = max;
	p.hedge_delay_ms = static_cast<int>(delay.count());
	ASSERT_EQ(zcrpc_channel_set_retry(ch, zcrpc_method_id(method), &p), ZCRPC_OK);
}

} // namespace

// A hedged method's calls go around a stopped server: those first sent
// to it are sent to the other after the hedge delay and answered there,
// the stopped one's attempts cancelled; every call completes once, OK,
// and no request runs twice at one server (after SIGCONT the stopped one
// runs only what was not cancelled in time, each once).
TEST_F(Balance, AHedgedMethodsCallsGoAroundAStoppedServerEachCompletingOnce)
{
	StartPeers(2);
	LbClient cl;
	ASSERT_EQ(cl.Open(Ipv4Target(env_.addr0, peers_), "round_robin", 0), ZCRPC_OK);
	Hedge(cl.ch, kLbWho, 2, Scaled(100));
	ASSERT_TRUE(cl.Load(2, 1, Scaled(20000)));
	ASSERT_TRUE(ProgressUntil(cl.w, [&] { return cl.Ready() == 2; }, Scaled(10000)));
	ASSERT_TRUE(cl.Load(20, 4, Scaled(20000)));
	ASSERT_EQ(cl.PerServer().size(), 2u);
	zcrpc_channel_stats before = ChannelStats(cl.ch);
	kill(peers_[0].child->pid, SIGSTOP);
	uint64_t first = cl.next_id;
	bool loaded = cl.Load(100, 8, Scaled(60000));
	kill(peers_[0].child->pid, SIGCONT);
	ASSERT_TRUE(loaded);
	zcrpc_channel_stats after = ChannelStats(cl.ch);
	uint64_t hedges = after.hedges - before.hedges;
	uint64_t cancelled = after.hedges_cancelled - before.hedges_cancelled;
	std::printf("100 calls with s0 stopped: %llu hedges, %llu attempts cancelled\n",
		    static_cast<unsigned long long>(hedges),
		    static_cast<unsigned long long>(cancelled));
	EXPECT_EQ(cl.PerServer(first)["s1"], 100) << cl.FirstFailure(first);
	EXPECT_EQ(cl.Failed(first), 0);
	EXPECT_EQ(cl.Twice(), 0);
	EXPECT_GE(hedges, 1u) << "round_robin sent some first to the stopped one";
	EXPECT_EQ(cancelled, hedges) << "each call's losing attempt taken back";
	EXPECT_EQ(after.retries_policy, before.retries_policy);
	ASSERT_TRUE(cl.Drain(Scaled(10000)));
	for (auto &pe : peers_) {
		ServerCounts c = AskCounts(env_.addr0, pe.port);
		ASSERT_TRUE(c.ok) << pe.name;
		EXPECT_EQ(c.duplicates, 0u) << pe.name;
	}
}

// A hedged call whose attempt fails with a status of its set sends the
// next at once (not after the delay) and, none left, ends with that
// status; one cancelled with attempts at two stopped servers ends
// CANCELLED once.
TEST_F(Balance, AHedgedCallGoesOnAtOnceAfterARetryableFailureAndCancelEndsItOnce)
{
	StartPeers(2);
	LbClient cl;
	ASSERT_EQ(cl.Open(Ipv4Target(env_.addr0, peers_), "round_robin", 0), ZCRPC_OK);
	Hedge(cl.ch, kLbFail, 2, Scaled(60000)); // the delay never comes
	Hedge(cl.ch, kLbWho, 2, Scaled(50));
	ASSERT_TRUE(cl.Load(2, 1, Scaled(20000)));
	ASSERT_TRUE(ProgressUntil(cl.w, [&] { return cl.Ready() == 2; }, Scaled(10000)));
	uint64_t ran = 0;
	for (auto &pe : peers_)
		ran += AskCounts(env_.addr0, pe.port).calls;

	zcrpc_channel_stats before = ChannelStats(cl.ch);
	uint64_t id = cl.next_id;
	ASSERT_EQ(cl.Start(kLbFail, nullptr, Scaled(30000).count() * 1000), ZCRPC_OK);
	ASSERT_TRUE(cl.Drain(Scaled(20000))) << "the second attempt waited for the delay";
	EXPECT_EQ(cl.out[id].status, ZCRPC_UNAVAILABLE) << cl.out[id].message;
	EXPECT_EQ(cl.out[id].completions, 1);
	zcrpc_channel_stats after = ChannelStats(cl.ch);
	EXPECT_EQ(after.hedges - before.hedges, 1u);
	EXPECT_EQ(after.hedges_cancelled, before.hedges_cancelled);
	uint64_t ran2 = 0;
	for (auto &pe : peers_)
		ran2 += AskCounts(env_.addr0, pe.port).calls;
	EXPECT_EQ(ran2 - ran, 2u) << "one attempt at each server";

	// Both stopped: the call and its hedge wait at both; a cancel ends
	// it CANCELLED, once, and their late answers are dropped.
	for (auto &pe : peers_)
		kill(pe.child->pid, SIGSTOP);
	before = ChannelStats(cl.ch);
	zcrpc_call_id cid = 0;
	id = cl.next_id;
	{
		uint64_t rid = cl.next_id++;
		std::string req(reinterpret_cast<const char *>(&rid), 8);
		auto *ctx = new std::pair<LbClient *, uint64_t>(&cl, rid);
		zcrpc_call_opts co;
		zcrpc_call_opts_init(&co);
		co.timeout_us = Scaled(30000).count() * 1000;
		ASSERT_EQ(zcrpc_call_async(cl.ch, zcrpc_method_id(kLbWho), req.data(), req.size(),
					   &co,
					   [](zcrpc_channel *, const zcrpc_reply *r, void *a) {
						   auto *x = static_cast<std::pair<LbClient *, uint64_t> *>(a);
						   LbOutcome &o = x->first->out[x->second];
						   o.completions++;
						   o.status = r->status;
						   x->first->live--;
						   delete x;
					   },
					   ctx, &cid),
			  ZCRPC_OK);
		cl.live++;
	}
	EXPECT_TRUE(ProgressUntil(
		cl.w, [&] { return ChannelStats(cl.ch).hedges - before.hedges == 1; },
		Scaled(5000)));
	EXPECT_EQ(zcrpc_call_cancel(cl.ch, cid), ZCRPC_OK);
	EXPECT_TRUE(cl.Drain(Scaled(10000)));
	for (auto &pe : peers_)
		kill(pe.child->pid, SIGCONT);
	auto until = steady_clock::now() + Scaled(500);
	while (steady_clock::now() < until)
		zcrpc_worker_progress(cl.w, 1);
	EXPECT_EQ(cl.out[id].status, ZCRPC_CANCELLED);
	EXPECT_EQ(cl.out[id].completions, 1);
	EXPECT_EQ(zcrpc_call_cancel(cl.ch, cid), ZCRPC_NOT_FOUND);
	// and the channel goes on
	ASSERT_TRUE(cl.Load(10, 2, Scaled(20000)));
	EXPECT_EQ(cl.Twice(), 0);
}

// ---- health (grpc.health.v1) ---------------------------------------------

#include "server_thread.h"

namespace
{

// HealthCheckRequest{service}: field 1, length-delimited.
std::string CheckRequest(const std::string &service)
{
	std::string r;
	if (!service.empty()) {
		r += '\x0a';
		r += static_cast<char>(service.size());
		r += service;
	}
	return r;
}

// Check(@service) through a plain channel: the status, and the
// ServingStatus the reply carried (-1 when none could be read).
std::pair<zcrpc_status, int> Check(zcrpc_channel *ch, const std::string &service)
{
	std::string req = CheckRequest(service);
	zcrpc_result r;
	zcrpc_status st = zcrpc_call(ch, zcrpc_method_id(ZCRPC_HEALTH_CHECK), req.data(),
				     req.size(), nullptr, &r, sizeof(r));
	int serving = -1;
	const uint8_t *p = static_cast<const uint8_t *>(r.data);
	if (st == ZCRPC_OK)
		serving = r.len == 0 ? 0 : (r.len == 2 && p[0] == 0x08) ? p[1] : -1;
	zcrpc_result_free(&r);
	return {st, serving};
}

} // namespace

TEST_F(Balance, EveryServerAnswersHealthCheckForItselfAndTheServicesItSets)
{
	zcrpc_server_opts so;
	zcrpc_server_opts_init(&so);
	ServerThread srv;
	ASSERT_TRUE(srv.Start(env_.addr0, so));
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	zcrpc_channel *ch = nullptr;
	ASSERT_EQ(zcrpc_channel_create(w, env_.addr0.c_str(), srv.port_str().c_str(), nullptr, &ch),
		  ZCRPC_OK);
	EXPECT_EQ(Check(ch, ""), std::make_pair(ZCRPC_OK, 1)) << "SERVING from the start";
	EXPECT_EQ(Check(ch, "kv.Kv").first, ZCRPC_NOT_FOUND) << "a service never set";
	srv.OnWorker([&] {
		EXPECT_EQ(zcrpc_server_set_serving(srv.s, "kv.Kv", ZCRPC_SERVING_NOT_SERVING),
			  ZCRPC_OK);
		EXPECT_EQ(zcrpc_server_set_serving(srv.s, "", static_cast<zcrpc_serving_status>(7)),
			  ZCRPC_INVALID_ARGUMENT);
		EXPECT_EQ(zcrpc_server_register(srv.s, ZCRPC_HEALTH_CHECK,
						[](zcrpc_server_call *, const zcrpc_request *, void *) {},
						nullptr),
			  ZCRPC_ALREADY_EXISTS);
	});
	EXPECT_EQ(Check(ch, "kv.Kv"), std::make_pair(ZCRPC_OK, 2));
	srv.OnWorker([&] { zcrpc_server_set_serving(srv.s, "kv.Kv", ZCRPC_SERVING_SERVING); });
	EXPECT_EQ(Check(ch, "kv.Kv"), std::make_pair(ZCRPC_OK, 1));
	// A request that is not a HealthCheckRequest.
	zcrpc_result r;
	EXPECT_EQ(zcrpc_call(ch, zcrpc_method_id(ZCRPC_HEALTH_CHECK), "\x0a\x09x", 3, nullptr, &r,
			     sizeof(r)),
		  ZCRPC_INVALID_ARGUMENT);
	zcrpc_result_free(&r);
	zcrpc_channel_destroy(ch);
	zcrpc_worker_destroy(w);
}

TEST_F(Balance, ABackendWhoseHealthCheckSaysNotServingLeavesThePickSetAndComesBack)
{
	zcrpc_server_opts so;
	zcrpc_server_opts_init(&so);
	ServerThread a, b;
	ASSERT_TRUE(a.Start(env_.addr0, so));
	ASSERT_TRUE(b.Start(env_.addr0, so));
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	zcrpc_channel_opts o;
	zcrpc_channel_opts_init(&o);
	o.lb_policy = "round_robin";
	o.health_check_ms = 50;
	std::string t = "ipv4:" + env_.addr0 + ":" + a.port_str() + "," + env_.addr0 + ":" +
			b.port_str();
	zcrpc_channel *ch = nullptr;
	ASSERT_EQ(zcrpc_channel_create_target(w, t.c_str(), &o, &ch), ZCRPC_OK);
	uint32_t echo = zcrpc_method_id(kServerThreadEcho);
	auto calls = [&](int n) {
		for (int i = 0; i < n; i++) {
			zcrpc_result r;
			EXPECT_EQ(zcrpc_call(ch, echo, "x", 1, nullptr, &r, sizeof(r)), ZCRPC_OK)
				<< (r.message ? r.message : "");
			zcrpc_result_free(&r);
		}
	};
	// The calls each backend was given (health checks are not picks).
	auto picks = [&](int i) {
		zcrpc_backend_info bi[2];
		zcrpc_channel_get_backends(ch, bi, 2, sizeof(bi[0]));
		return bi[i].picks;
	};
	auto state = [&](int i) {
		zcrpc_backend_info bi[2];
		zcrpc_channel_get_backends(ch, bi, 2, sizeof(bi[0]));
		return bi[i].state;
	};
	// round_robin gives calls to READY backends while any is: both first.
	ASSERT_TRUE(ProgressUntil(
		w, [&] { return state(0) == ZCRPC_BACKEND_READY && state(1) == ZCRPC_BACKEND_READY; },
		Scaled(5000)));
	calls(40);
	EXPECT_GT(picks(0), 10u);
	EXPECT_GT(picks(1), 10u);
	EXPECT_GT(a.ServerStats().calls, picks(0)) << "health checks reached it too";

	a.OnWorker([&] { zcrpc_server_set_serving(a.s, "", ZCRPC_SERVING_NOT_SERVING); });
	ASSERT_TRUE(ProgressUntil(w, [&] { return state(0) == ZCRPC_BACKEND_DOWN; },
				  Scaled(3000)))
		<< "the NOT_SERVING backend is still in the pick set";
	uint64_t a0 = picks(0), b0 = picks(1);
	calls(40);
	EXPECT_EQ(picks(1) - b0, 40u) << "every call went to the serving backend";
	EXPECT_EQ(picks(0), a0);

	a.OnWorker([&] { zcrpc_server_set_serving(a.s, "", ZCRPC_SERVING_SERVING); });
	ASSERT_TRUE(ProgressUntil(w, [&] { return state(0) == ZCRPC_BACKEND_READY; },
				  Scaled(3000)));
	a0 = picks(0);
	calls(40);
	EXPECT_GE(picks(0) - a0, 15u) << "back in the pick set";
	zcrpc_channel_destroy(ch);
	zcrpc_worker_destroy(w);
}

namespace
{

// A Watch stream's messages (the ServingStatus of each) and its end.
struct Watcher {
	std::vector<int> statuses;
	bool finished = false;
	zcrpc_status end = ZCRPC_UNKNOWN;
	zcrpc_stream *s = nullptr;

	zcrpc_status Start(zcrpc_channel *ch, const std::string &service)
	{
		zcrpc_stream_handlers h{};
		h.size = sizeof(h);
		h.on_message = [](zcrpc_stream *, const void *d, size_t n, void *a) {
			const uint8_t *p = static_cast<const uint8_t *>(d);
			static_cast<Watcher *>(a)->statuses.push_back(
				n == 0 ? 0 : (n == 2 && p[0] == 0x08) ? p[1] : -1);
		};
		h.on_finish = [](zcrpc_stream *, const zcrpc_stream_end *e, void *a) {
			auto *w = static_cast<Watcher *>(a);
			w->finished = true;
			w->end = e->status;
		};
		h.arg = this;
		zcrpc_status st = zcrpc_stream_start(ch, zcrpc_method_id(ZCRPC_HEALTH_WATCH),
						     nullptr, &h, &s);
		if (st != ZCRPC_OK)
			return st;
		std::string req = CheckRequest(service);
		st = zcrpc_stream_write(s, req.data(), req.size());
		if (st == ZCRPC_OK)
			st = zcrpc_stream_close_send(s);
		return st;
	}
};

} // namespace

TEST_F(Balance, HealthWatchSendsTheStatusAndEachChangeAndEndsNotServingWhenTheServerDrains)
{
	zcrpc_server_opts so;
	zcrpc_server_opts_init(&so);
	ServerThread srv;
	ASSERT_TRUE(srv.Start(env_.addr0, so));
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	zcrpc_channel *ch = nullptr;
	ASSERT_EQ(zcrpc_channel_create(w, env_.addr0.c_str(), srv.port_str().c_str(), nullptr, &ch),
		  ZCRPC_OK);
	Watcher all, kv, unknown;
	ASSERT_EQ(all.Start(ch, ""), ZCRPC_OK);
	srv.OnWorker([&] { zcrpc_server_set_serving(srv.s, "kv.Kv", ZCRPC_SERVING_SERVING); });
	ASSERT_EQ(kv.Start(ch, "kv.Kv"), ZCRPC_OK);
	ASSERT_EQ(unknown.Start(ch, "no.Such"), ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(w, [&] {
		return !all.statuses.empty() && !kv.statuses.empty() && !unknown.statuses.empty();
	}, Scaled(5000)));
	EXPECT_EQ(all.statuses, std::vector<int>{1});
	EXPECT_EQ(kv.statuses, std::vector<int>{1});
	EXPECT_EQ(unknown.statuses, std::vector<int>{3}) << "SERVICE_UNKNOWN";
	// A change made on another thread reaches the watchers of that service.
	srv.OnWorker([&] { zcrpc_server_set_serving(srv.s, "kv.Kv", ZCRPC_SERVING_NOT_SERVING); });
	ASSERT_TRUE(ProgressUntil(w, [&] { return kv.statuses.size() == 2; }, Scaled(5000)));
	EXPECT_EQ(kv.statuses.back(), 2);
	srv.OnWorker([&] { zcrpc_server_set_serving(srv.s, "kv.Kv", ZCRPC_SERVING_SERVING); });
	ASSERT_TRUE(ProgressUntil(w, [&] { return kv.statuses.size() == 3; }, Scaled(5000)));
	EXPECT_EQ(kv.statuses.back(), 1);
	ProgressUntil(w, [] { return false; }, 200ms);
	EXPECT_EQ(all.statuses.size(), 1u) << "another service's change is not sent";
	EXPECT_FALSE(all.finished);
	zcrpc_stream_cancel(all.s);
	zcrpc_stream_cancel(kv.s);
	zcrpc_stream_cancel(unknown.s);
	ASSERT_TRUE(ProgressUntil(w, [&] { return all.finished && kv.finished && unknown.finished; },
				  Scaled(5000)));
	zcrpc_channel_destroy(ch);

	// A server that drains (SIGTERM: zcrpc_server_shutdown) tells its
	// watchers NOT_SERVING and ends their streams; the drain does not
	// wait for them.
	LbPeer p;
	ASSERT_TRUE(p.Start(env_.addr0, "draining"));
	ASSERT_EQ(zcrpc_channel_create(w, env_.addr0.c_str(), std::to_string(p.port).c_str(),
				       nullptr, &ch),
		  ZCRPC_OK);
	Watcher d;
	ASSERT_EQ(d.Start(ch, ""), ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(w, [&] { return !d.statuses.empty(); }, Scaled(5000)));
	auto t0 = steady_clock::now();
	kill(p.child->pid, SIGTERM);
	ASSERT_TRUE(ProgressUntil(w, [&] { return d.finished; }, Scaled(5000)));
	EXPECT_EQ(d.statuses, (std::vector<int>{1, 2}));
	EXPECT_EQ(d.end, ZCRPC_OK);
	EXPECT_EQ(p.child->Wait(Scaled(10000)), 0);
	std::printf("watch ended %lld ms after SIGTERM; the peer exited after\n",
		    static_cast<long long>(duration_cast<milliseconds>(steady_clock::now() - t0).count()));
	zcrpc_channel_destroy(ch);
	zcrpc_worker_destroy(w);
}
