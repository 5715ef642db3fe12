// A device that goes away under live connections (reference scenario T23):
// `rdma link delete rxe1` must return (rxe cannot take a device from a
// process: the kernel waits until every object on it is released), every
// connection on it fails UNAVAILABLE exactly once, nothing leaks, the
// context keeps working on its other device, and after `rdma link add` a
// new context uses the device again.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <sys/stat.h>
#include <sys/wait.h>

#include "../../src/transport/test_hooks.h"
#include "rdma_env.h"

using namespace std::chrono;
using namespace std::chrono_literals;

namespace {

bool DeviceExists(const std::string &dev)
{
	struct stat st;
	return stat(("/sys/class/infiniband/" + dev).c_str(), &st) == 0;
}

// True once @dev has a GID for IPv4 address @addr (::ffff:a.b.c.d).
bool HasIpv4Gid(const std::string &dev, const std::string &addr)
{
	unsigned a, b, c, d;
	if (std::sscanf(addr.c_str(), "%u.%u.%u.%u", &a, &b, &c, &d) != 4)
		return false;
	char want[64];
	std::snprintf(want, sizeof(want), "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x",
		      a, b, c, d);
	for (int i = 0; i < 16; i++) {
		std::ifstream f("/sys/class/infiniband/" + dev + "/ports/1/gids/" +
				std::to_string(i));
		std::string g;
		if (f >> g && g == want)
			return true;
	}
	return false;
}

// Puts rxe1 back (on the netdev the harness used) when the test took it
// away, whatever the test's outcome: later tests in the guest need it.
struct DeviceRestorer {
	std::string dev, netdev, addr;
	bool Restore()
	{
		if (!DeviceExists(dev)) {
			std::string cmd = "rdma link add " + dev + " type rxe netdev " + netdev;
			if (std::system(cmd.c_str()) != 0)
				return false;
		}
		auto until = steady_clock::now() + Scaled(20000);
		while (!HasIpv4Gid(dev, addr) && steady_clock::now() < until)
			std::this_thread::sleep_for(50ms);
		return HasIpv4Gid(dev, addr);
	}
	~DeviceRestorer() { Restore(); }
};

std::string ReadLine(const std::string &path)
{
	std::ifstream f(path);
	std::string l;
	std::getline(f, l);
	return l;
}

// The netdev under an rxe device, read from sysfs (e.g. "veth1").
std::string NetdevOf(const std::string &dev)
{
	std::ifstream f("/sys/class/infiniband/" + dev + "/ports/1/gid_attrs/ndevs/0");
	std::string n;
	f >> n;
	return n;
}

// A worker with connections that echo (server) or count (client).
struct Peer {
	zcrpc_worker *w = nullptr;
	zcrpc_listener *l = nullptr;
	std::vector<zcrpc_conn *> conns;
	int established = 0, closed = 0, recvd = 0, unavailable = 0, removed = 0;
	bool echo = false;

	explicit Peer(uint32_t keepalive_ms, zcrpc_context *ctx = nullptr,
		      uint32_t recv_share = 0)
	{
		zcrpc_worker_opts o;
		zcrpc_worker_opts_init(&o);
		o.context = ctx;
		o.recv_share = recv_share; // 0: the default
		o.keepalive_ms = keepalive_ms;
		o.ack_timeout_exp = 14;
		o.retry_count = 3;
		EXPECT_EQ(zcrpc_worker_create(&o, &w), ZCRPC_OK);
	}
	~Peer()
	{
		for (auto *c : conns)
			zcrpc_conn_destroy(c);
		zcrpc_listener_destroy(l);
		zcrpc_worker_destroy(w);
	}
	zcrpc_conn_handlers Handlers()
	{
		zcrpc_conn_handlers h{};
		h.size = sizeof(h);
		h.on_state = [](zcrpc_conn *c, zcrpc_conn_state st, zcrpc_status s, void *a) {
			auto *p = static_cast<Peer *>(a);
			if (st == ZCRPC_CONN_ESTABLISHED)
				p->established++;
			if (st != ZCRPC_CONN_CLOSED)
				return;
			p->closed++;
			if (s == ZCRPC_UNAVAILABLE)
				p->unavailable++;
			if (std::strstr(zcrpc_conn_get_error(c), "device removed"))
				p->removed++;
		};
		h.on_recv = [](zcrpc_conn *c, const void *d, size_t n, void *a) {
			auto *p = static_cast<Peer *>(a);
			p->recvd++;
			if (p->echo)
				zcrpc_conn_send(c, d, n);
		};
		h.arg = this;
		return h;
	}
	bool Listen(const std::string &addr)
	{
		zcrpc_listen_opts lo;
		zcrpc_listen_opts_init(&lo);
		lo.on_accept = [](zcrpc_listener *, zcrpc_conn *c, void *a) {
			static_cast<Peer *>(a)->conns.push_back(c);
		};
		lo.arg = this;
		zcrpc_conn_handlers lh = Handlers();
		lo.conn_handlers = &lh;
		echo = true;
		return zcrpc_listen(w, addr.c_str(), "0", &lo, &l) == ZCRPC_OK;
	}
	bool Connect(const std::string &addr, uint16_t port, const std::string &src)
	{
		zcrpc_connect_opts co{};
		co.size = sizeof(co);
		co.timeout_ms = static_cast<int>(Scaled(10000).count());
		co.src_addr = src.c_str();
		auto h = Handlers();
		zcrpc_conn *c = nullptr;
		if (zcrpc_connect(w, addr.c_str(), std::to_string(port).c_str(), &co, &h, &c) !=
		    ZCRPC_OK)
			return false;
		conns.push_back(c);
		return true;
	}
	uint32_t InUse() const
	{
		zcrpc_worker_stats s;
		zcrpc_worker_get_stats(w, &s, sizeof(s));
		return s.pool_in_use;
	}
	uint64_t AsyncEvents() const
	{
		zcrpc_worker_stats s;
		zcrpc_worker_get_stats(w, &s, sizeof(s));
		return s.async_events;
	}
};

bool ProgressBoth(Peer &a, Peer &b, const std::function<bool()> &done, milliseconds limit)
{
	auto until = steady_clock::now() + limit;
	while (!done() && steady_clock::now() < until) {
		zcrpc_worker_progress(a.w, 0);
		zcrpc_worker_progress(b.w, 0);
	}
	return done();
}

// Connects @n clients of @cli to @srv's listener and echoes one message on
// each; true when every echo came back intact (counted by the test).
bool ConnectAndEcho(Peer &srv, Peer &cli, const std::string &srv_addr,
		    const std::string &cli_addr, int n)
{
	uint16_t port = zcrpc_listener_get_port(srv.l);
	const int est0 = cli.established, closed0 = cli.closed;
	size_t first = cli.conns.size();
	for (int i = 0; i < n; i++)
		if (!cli.Connect(srv_addr, port, cli_addr))
			return false;
	if (!ProgressBoth(srv, cli,
			  [&] { return cli.established - est0 + cli.closed - closed0 >= n; },
			  Scaled(15000)) ||
	    cli.established - est0 != n) {
		std::printf("established %d closed %d of %d\n", cli.established, cli.closed, n);
		for (auto *c : cli.conns)
			if (zcrpc_conn_get_state(c) == ZCRPC_CONN_CLOSED)
				std::printf("connect failed: %s: %s\n",
					    zcrpc_status_str(zcrpc_conn_get_status(c)),
					    zcrpc_conn_get_error(c));
		return false;
	}
	int before = cli.recvd;
	for (size_t i = first; i < cli.conns.size(); i++)
		if (zcrpc_conn_send(cli.conns[i], "ping", 4) != ZCRPC_OK)
			return false;
	return ProgressBoth(srv, cli, [&] { return cli.recvd == before + n; }, Scaled(10000));
}

class Device : public RdmaTest {};

TEST_F(Device, LinkDeleteUnderLiveConnectionsReturnsAndTheDeviceIsUsableAfterReAdd)
{
	const std::string dev = env_.dev1, addr = env_.addr1;
	const std::string netdev = NetdevOf(dev);
	ASSERT_FALSE(netdev.empty()) << "no netdev under " << dev;
	DeviceRestorer restore{dev, netdev, addr};
	constexpr int kConns = 8;

	// Server on rxe1 (the device that goes), clients bound to rxe0's address.
	Peer srv(0), cli(200);
	ASSERT_TRUE(srv.Listen(addr));
	ASSERT_TRUE(ConnectAndEcho(srv, cli, addr, env_.addr0, kConns));
	ASSERT_EQ(static_cast<int>(srv.conns.size()), kConns);
	ASSERT_GT(srv.InUse(), 0u); // receives posted on rxe1

	// The delete runs beside the progress loop: it returns only once the
	// server released everything it had on the device.
	std::atomic<int> rc{-1};
	std::atomic<bool> done{false};
	auto t0 = steady_clock::now();
	std::thread del([&] {
		std::string cmd = "timeout 30 rdma link delete " + dev;
		int r = std::system(cmd.c_str());
		rc = WIFEXITED(r) ? WEXITSTATUS(r) : 128;
		done = true;
	});
	bool finished = ProgressBoth(srv, cli, [&] { return done.load(); }, Scaled(40000));
	del.join();
	double secs = duration<double>(steady_clock::now() - t0).count();
	ASSERT_TRUE(finished);
	EXPECT_EQ(rc.load(), 0) << "rdma link delete failed or timed out after " << secs << " s";
	EXPECT_LT(secs, 30.0); // `timeout 30` would have reported 124
	EXPECT_FALSE(DeviceExists(dev));
	std::printf("rdma link delete %s returned %d after %.2f s\n", dev.c_str(), rc.load(),
		    secs);

	// Server side: each connection failed once, naming the removal; every
	// receive slot came back. The listener is gone with its device.
	EXPECT_EQ(srv.closed, kConns);
	EXPECT_EQ(srv.unavailable, kConns);
	EXPECT_EQ(srv.removed, kConns);
	EXPECT_EQ(srv.InUse(), 0u);
	// Client side (rxe0 stays): each connection learns the peer is gone
	// (DREQ or keepalive), exactly once, UNAVAILABLE.
	EXPECT_TRUE(ProgressBoth(srv, cli, [&] { return cli.closed == kConns; }, Scaled(15000)));
	EXPECT_EQ(cli.closed, kConns);
	EXPECT_EQ(cli.unavailable, kConns);
	for (auto *c : cli.conns)
		zcrpc_conn_destroy(c);
	cli.conns.clear();
	EXPECT_EQ(cli.InUse(), 0u);

	// The context that lost rxe1 keeps working on rxe0: a new server
	// there, reached by the old client worker.
	Peer srv0(0);
	ASSERT_TRUE(srv0.Listen(env_.addr0));
	EXPECT_TRUE(ConnectAndEcho(srv0, cli, env_.addr0, env_.addr0, 2));
	Peer cli3(0);
	EXPECT_TRUE(ConnectAndEcho(srv0, cli3, env_.addr0, env_.addr0, 2));

	// The device comes back: a new context uses it, and so does the
	// context that lost it (issue 14 item 7): the old server's worker
	// listens there again and its connections echo; the context lists
	// the device as present again, in its old slot.
	ASSERT_TRUE(restore.Restore());
	Peer srv2(0), cli2(0);
	ASSERT_TRUE(srv2.Listen(addr));
	EXPECT_TRUE(ConnectAndEcho(srv2, cli2, addr, env_.addr0, 2));

	zcrpc_context *old_ctx = zcrpc_worker_get_context(srv.w);
	int slot = -1;
	for (int i = 0; i < zcrpc_context_device_count(old_ctx); i++) {
		zcrpc_device_info d;
		ASSERT_EQ(zcrpc_context_get_device_info(old_ctx, i, &d, sizeof(d)), ZCRPC_OK);
		if (dev == d.name)
			slot = i;
	}
	ASSERT_GE(slot, 0);
	zcrpc_device_info before;
	ASSERT_EQ(zcrpc_context_get_device_info(old_ctx, slot, &before, sizeof(before)), ZCRPC_OK);
	EXPECT_EQ(before.removed, 1u) << "not taken back before a connection lands on it";
	zcrpc_listener_destroy(srv.l); // the one that went with the device
	srv.l = nullptr;
	ASSERT_TRUE(srv.Listen(addr));
	EXPECT_TRUE(ConnectAndEcho(srv, cli, addr, env_.addr0, 2))
		<< "the context that lost the device does not use it again";
	zcrpc_device_info after;
	ASSERT_EQ(zcrpc_context_get_device_info(old_ctx, slot, &after, sizeof(after)), ZCRPC_OK);
	EXPECT_EQ(after.removed, 0u);
	EXPECT_EQ(after.in_use, 1u);
	EXPECT_GT(after.registered_bytes, 0u) << "its pool is registered there again";
	EXPECT_EQ(zcrpc_context_device_count(old_ctx), 2) << "the old slot, not a new one";
	std::printf("%s back in the old context (slot %d): %llu bytes registered\n", dev.c_str(),
		    slot, (unsigned long long)after.registered_bytes);
}

// Reference scenario T24: the netdev under rxe1 goes down for 3 s. The
// port events are seen and acknowledged, a connect meanwhile fails fast
// (UNAVAILABLE, far below its deadline), and traffic passes again once the
// link is back.
TEST_F(Device, PortDownFailsConnectsFastAndTrafficRecoversWhenItComesBack)
{
	const std::string netdev = NetdevOf(env_.dev1);
	ASSERT_FALSE(netdev.empty());
	// Taking a link down flushes what the harness configured on it (IPv6
	// addresses, the cross-veth routes and permanent neighbours): put it
	// all back, whatever the test's outcome, for the tests that follow.
	struct LinkUp {
		std::string n;
		const RxeEnv &env;
		~LinkUp()
		{
			std::string v0 = NetdevOf(env.dev0), v1 = n;
			std::string mac0 = ReadLine("/sys/class/net/" + v0 + "/address");
			std::string mac1 = ReadLine("/sys/class/net/" + v1 + "/address");
			const std::string cmds[] = {
				"ip link set " + v1 + " up",
				"ip link set " + v0 + " up",
				"ip -6 addr replace " + env.addr0_v6 + "/64 dev " + v0 + " nodad",
				"ip -6 addr replace " + env.addr1_v6 + "/64 dev " + v1 + " nodad",
				"ip route replace " + env.addr0 + "/32 dev " + v1 + " table 100",
				"ip route replace " + env.addr1 + "/32 dev " + v0 + " table 101",
				"ip neigh replace " + env.addr0 + " lladdr " + mac0 + " dev " + v1 +
					" nud permanent",
				"ip neigh replace " + env.addr1 + " lladdr " + mac1 + " dev " + v0 +
					" nud permanent",
			};
			for (const auto &c : cmds)
				if (std::system((c + " 2>/dev/null").c_str()) != 0)
					ADD_FAILURE() << "could not restore: " << c;
			// Wait for both devices' GIDs to come back.
			auto until = steady_clock::now() + Scaled(20000);
			while (!(HasIpv4Gid(env.dev0, env.addr0) && HasIpv4Gid(env.dev1, env.addr1)) &&
			       steady_clock::now() < until)
				std::this_thread::sleep_for(50ms);
		}
	} link_up{netdev, env_};
	zcrpc_context *ctx = nullptr;
	ASSERT_EQ(zcrpc_context_create(&ctx), ZCRPC_OK);
	{
		Peer srv(0, ctx), cli(0, ctx);
		ASSERT_TRUE(srv.Listen(env_.addr1));
		ASSERT_TRUE(ConnectAndEcho(srv, cli, env_.addr1, env_.addr0, 1));
		uint64_t ev0 = srv.AsyncEvents() + cli.AsyncEvents();

		ASSERT_EQ(std::system(("ip link set " + netdev + " down").c_str()), 0);
		auto down_at = steady_clock::now();
		EXPECT_TRUE(ProgressBoth(srv, cli,
					 [&] { return srv.AsyncEvents() + cli.AsyncEvents() > ev0; },
					 Scaled(5000)))
			<< "no PORT_ERR seen";
		uint64_t ev_down = srv.AsyncEvents() + cli.AsyncEvents();
		// A connect during the outage: UNAVAILABLE, quickly.
		int closed0 = cli.closed, unavail0 = cli.unavailable;
		auto t0 = steady_clock::now();
		ASSERT_TRUE(cli.Connect(env_.addr1, zcrpc_listener_get_port(srv.l), env_.addr0));
		EXPECT_TRUE(ProgressBoth(srv, cli, [&] { return cli.closed > closed0; },
					 Scaled(5000)));
		double secs = duration<double>(steady_clock::now() - t0).count();
		EXPECT_EQ(cli.closed, closed0 + 1);
		EXPECT_EQ(cli.unavailable, unavail0 + 1)
			<< zcrpc_conn_get_error(cli.conns.back());
		EXPECT_LT(secs, 5.0 * TimeScale()); // the connect deadline is 10 s
		std::printf("connect while down: %s after %.3f s\n",
			    zcrpc_conn_get_error(cli.conns.back()), secs);

		std::this_thread::sleep_until(down_at + 3s);
		ASSERT_EQ(std::system(("ip link set " + netdev + " up").c_str()), 0);
		EXPECT_TRUE(ProgressBoth(srv, cli,
					 [&] { return srv.AsyncEvents() + cli.AsyncEvents() > ev_down; },
					 Scaled(10000)))
			<< "no PORT_ACTIVE seen";
		// Traffic again: a fresh connection echoes (retried while the
		// GIDs come back).
		bool ok = false;
		auto until = steady_clock::now() + Scaled(20000);
		while (!ok && steady_clock::now() < until) {
			Peer c2(0, ctx);
			ok = ConnectAndEcho(srv, c2, env_.addr1, env_.addr0, 1);
			if (!ok)
				std::this_thread::sleep_for(500ms);
		}
		EXPECT_TRUE(ok) << "no traffic after the link came back";
	}
	zcrpc_context_destroy(ctx);
}

// rxe 6.1 raises no QP async events (QP_FATAL and friends), so they are
// injected here through the library's internal hook, on a real connection.
// The event reaches the worker that owns the QP even when another worker
// of the context read it; only that connection fails, exactly once. A CQ
// error fails the connections on that CQ: the worker's CQ on a device is
// shared, so the victim of the CQ error gets a CQ of its own (test hook).
TEST_F(Device, InjectedQpFatalAndCqErrorFailOnlyTheirConnection)
{
	zcrpc_context *ctx = nullptr;
	ASSERT_EQ(zcrpc_context_create(&ctx), ZCRPC_OK);
	{
		Peer srv(0, ctx), cli(0, ctx);
		ASSERT_TRUE(srv.Listen(env_.addr1));
		ASSERT_TRUE(
			ConnectAndEcho(srv, cli, env_.addr1, env_.addr0, 1));
		zcrpc__test_next_cq_entries(
			4096); // a private CQ for the next one
		ASSERT_TRUE(
			ConnectAndEcho(srv, cli, env_.addr1, env_.addr0, 1));
		ASSERT_TRUE(
			ConnectAndEcho(srv, cli, env_.addr1, env_.addr0, 1));
		ASSERT_EQ(cli.conns.size(), 3u);
		std::swap(cli.conns[1],
			  cli.conns[2]); // conns[1]: the private CQ's
		zcrpc_conn *victim = cli.conns[0], *victim2 = cli.conns[1];

		// Read by the server's worker: handed over to the client's.
		ASSERT_EQ(zcrpc__worker_test_async_event(srv.w, victim, IBV_EVENT_QP_FATAL),
			  ZCRPC_OK);
		EXPECT_TRUE(ProgressBoth(srv, cli, [&] { return cli.closed >= 1; }, Scaled(5000)));
		EXPECT_EQ(zcrpc_conn_get_state(victim), ZCRPC_CONN_CLOSED);
		EXPECT_EQ(zcrpc_conn_get_status(victim), ZCRPC_UNAVAILABLE);
		EXPECT_NE(std::strstr(zcrpc_conn_get_error(victim), "async event"), nullptr)
			<< zcrpc_conn_get_error(victim);
		// A CQ error on the owner's own worker.
		ASSERT_EQ(zcrpc__worker_test_async_event(cli.w, victim2, IBV_EVENT_CQ_ERR),
			  ZCRPC_OK);
		EXPECT_TRUE(ProgressBoth(srv, cli, [&] { return cli.closed >= 2; }, Scaled(5000)));
		EXPECT_EQ(zcrpc_conn_get_status(victim2), ZCRPC_UNAVAILABLE);
		// Each failed once; the third connection still echoes.
		ProgressBoth(srv, cli, [] { return false; }, 300ms);
		EXPECT_EQ(cli.closed, 2);
		EXPECT_EQ(cli.unavailable, 2);
		int before = cli.recvd;
		ASSERT_EQ(zcrpc_conn_send(cli.conns[2], "still", 5), ZCRPC_OK);
		EXPECT_TRUE(ProgressBoth(srv, cli, [&] { return cli.recvd == before + 1; },
					 Scaled(5000)));
		// The server sees its two peers go (their QPs were errored).
		EXPECT_TRUE(ProgressBoth(srv, cli, [&] { return srv.closed == 2; }, Scaled(15000)));
		for (auto *c : cli.conns)
			zcrpc_conn_destroy(c);
		cli.conns.clear();
		EXPECT_EQ(cli.InUse(), 0u);
	}
	zcrpc_context_destroy(ctx);
}

// Item 7 of issue 14: port events are per port. rxe has one port, so a
// second port's PORT_ERR is injected (the real port-1 path is the link-down
// test above): connections on port 1 keep connecting and echoing; port 1's
// own PORT_ERR fails a connect there fast, naming the port, until its
// PORT_ACTIVE.
TEST_F(Device, PortEventsAreThePortsOwnAPort2ErrorLeavesPort1Working)
{
	zcrpc_context *ctx = nullptr;
	ASSERT_EQ(zcrpc_context_create(&ctx), ZCRPC_OK);
	{
		Peer srv(0, ctx), cli(0, ctx);
		ASSERT_TRUE(srv.Listen(env_.addr1));
		ASSERT_TRUE(ConnectAndEcho(srv, cli, env_.addr1, env_.addr0, 1));
		zcrpc_conn *c = cli.conns[0];
		zcrpc_conn_info info;
		zcrpc_conn_get_info(c, &info, sizeof(info));
		ASSERT_EQ(info.port, 1u);

		ASSERT_EQ(zcrpc__worker_test_port_event(cli.w, c, 2, IBV_EVENT_PORT_ERR), ZCRPC_OK);
		EXPECT_TRUE(ConnectAndEcho(srv, cli, env_.addr1, env_.addr0, 1))
			<< "a port-2 error stopped port 1";

		ASSERT_EQ(zcrpc__worker_test_port_event(cli.w, c, 1, IBV_EVENT_PORT_ERR), ZCRPC_OK);
		const int closed0 = cli.closed;
		ASSERT_TRUE(cli.Connect(env_.addr1, zcrpc_listener_get_port(srv.l), env_.addr0));
		EXPECT_TRUE(ProgressBoth(srv, cli, [&] { return cli.closed > closed0; },
					 Scaled(5000)));
		zcrpc_conn *refused = cli.conns.back();
		EXPECT_EQ(zcrpc_conn_get_status(refused), ZCRPC_UNAVAILABLE);
		EXPECT_NE(std::strstr(zcrpc_conn_get_error(refused), "port 1 of"), nullptr)
			<< zcrpc_conn_get_error(refused);
		// The established connections are not failed by a port event.
		int before = cli.recvd;
		ASSERT_EQ(zcrpc_conn_send(c, "still", 5), ZCRPC_OK);
		EXPECT_TRUE(ProgressBoth(srv, cli, [&] { return cli.recvd == before + 1; },
					 Scaled(5000)));

		ASSERT_EQ(zcrpc__worker_test_port_event(cli.w, c, 1, IBV_EVENT_PORT_ACTIVE),
			  ZCRPC_OK);
		EXPECT_TRUE(ConnectAndEcho(srv, cli, env_.addr1, env_.addr0, 1))
			<< "port 1 back, port 2 still down";
		EXPECT_EQ(zcrpc__worker_test_port_event(cli.w, c, 1, IBV_EVENT_QP_FATAL),
			  ZCRPC_INVALID_ARGUMENT);
		for (auto *k : cli.conns)
			zcrpc_conn_destroy(k);
		cli.conns.clear();
	}
	zcrpc_context_destroy(ctx);
}

// T19 with a real overrun: a connection whose completion queue is far
// smaller than its queues (test hook) takes a burst while its worker does
// not progress; rxe reports the overrun as IBV_EVENT_CQ_ERR, and only that
// connection fails, UNAVAILABLE, naming the event. Nothing leaks.
TEST_F(Device, RealCqOverrunFailsOnlyItsConnection)
{
	// The server guarantees its whole window (64 credits), so the client
	// can burst well past the tiny CQ without waiting for a credit.
	Peer srv(0, nullptr, 64), cli(0);
	ASSERT_TRUE(srv.Listen(env_.addr1));
	ASSERT_TRUE(ConnectAndEcho(srv, cli, env_.addr1, env_.addr0, 1));
	zcrpc__test_next_cq_entries(4); // the client's next connection
	ASSERT_TRUE(ConnectAndEcho(srv, cli, env_.addr1, env_.addr0, 1));
	zcrpc_conn *normal = cli.conns[0], *small = cli.conns[1];
	uint64_t events0 = cli.AsyncEvents() + srv.AsyncEvents();

	// The send completions pile up in the 4-entry CQ while neither side
	// progresses (the server neither echoes nor returns credits, so no
	// receive completion comes: a receive that finds the CQ full would put
	// the QP in error, and the peer's disconnect could name the failure
	// first).
	// Messages too large to go inline, so each is signaled (its slot
	// returns on its completion: docs/design.md "Send ring and signaling").
	srv.echo = false;
	int sent = 0;
	const std::string burst(1024, 'o');
	while (zcrpc_conn_send(small, burst.data(), burst.size()) == ZCRPC_OK)
		sent++;
	ASSERT_GE(sent, 16) << "too few sends to overrun the CQ";
	std::this_thread::sleep_for(Scaled(500));
	auto until = steady_clock::now() + Scaled(10000);
	while (cli.closed < 1 && steady_clock::now() < until)
		zcrpc_worker_progress(cli.w, 0);
	EXPECT_EQ(cli.closed, 1) << "the overrun was not reported";
	srv.echo = true;
	EXPECT_EQ(zcrpc_conn_get_state(small), ZCRPC_CONN_CLOSED);
	EXPECT_EQ(zcrpc_conn_get_status(small), ZCRPC_UNAVAILABLE);
	EXPECT_NE(std::strstr(zcrpc_conn_get_error(small), "CQ error"), nullptr)
		<< zcrpc_conn_get_error(small);
	EXPECT_GT(cli.AsyncEvents() + srv.AsyncEvents(), events0);
	std::printf("[T19] %d sends into a 4-entry CQ: %s\n", sent, zcrpc_conn_get_error(small));

	// Exactly that connection failed; the other one still echoes.
	ProgressBoth(srv, cli, [] { return false; }, 300ms);
	EXPECT_EQ(cli.closed, 1);
	EXPECT_EQ(cli.unavailable, 1);
	EXPECT_EQ(zcrpc_conn_get_state(normal), ZCRPC_CONN_ESTABLISHED);
	int before = cli.recvd;
	ASSERT_EQ(zcrpc_conn_send(normal, "still", 5), ZCRPC_OK);
	EXPECT_TRUE(ProgressBoth(srv, cli, [&] { return cli.recvd == before + 1; }, Scaled(5000)));
	EXPECT_TRUE(ProgressBoth(srv, cli, [&] { return srv.closed == 1; }, Scaled(15000)))
		<< "the server did not see the failed connection go";
	for (auto *c : cli.conns)
		zcrpc_conn_destroy(c);
	cli.conns.clear();
	ProgressBoth(srv, cli, [] { return false; }, 200ms);
	EXPECT_EQ(cli.InUse(), 0u);
}

} // namespace
