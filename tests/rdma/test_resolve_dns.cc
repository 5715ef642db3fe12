// The "dns:" resolver (src/rpc/resolve_dns.c) over rxe in the guest: a
// dnsmasq child process on 127.0.0.1 (and ::1) serves a hosts file and SRV
// records with a TTL of 1 s; zcrpc_test_lb_peer processes are the servers.
// A and AAAA names reach the server they name; SRV records spread calls
// over their servers and a record added later gets calls within a
// re-resolution; an answer is not asked again before its TTL ends, unless
// a backend fails; a name that does not exist, one without addresses, a DNS
// server that answers garbage and one that never answers fail calls
// UNAVAILABLE saying why; targets that do not parse are refused; and a
// channel destroyed at any moment, a query in flight, returns at once and
// leaves no thread or descriptor behind.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fault_util.h"
#include "lb_util.h"
#include "rdma_env.h"
#include "zcrpc/balance.h"
#include "zcrpc/rpc.h"

using namespace std::chrono;
using namespace std::chrono_literals;

namespace
{

const char *kDnsmasq = "/usr/sbin/dnsmasq";

// A UDP port free now on 127.0.0.1 (bound to 0, read, closed).
uint16_t FreeUdpPort()
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	sockaddr_in a{};
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t len = sizeof(a);
	uint16_t port = 0;
	if (bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) == 0 &&
	    getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) == 0)
		port = ntohs(a.sin_port);
	close(fd);
	return port;
}

// A UDP socket bound on 127.0.0.1 (ephemeral port), or -1.
int BoundUdp(uint16_t *port)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	sockaddr_in a{};
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t len = sizeof(a);
	if (bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) ||
	    getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len)) {
		close(fd);
		return -1;
	}
	*port = ntohs(a.sin_port);
	return fd;
}

// A DNS query (RFC 1035 4.1) for @name, @type, class IN.
std::string DnsQuery(uint16_t id, const std::string &name, uint16_t type)
{
	std::string q;
	auto u16 = [&](uint16_t v) {
		q += static_cast<char>(v >> 8);
		q += static_cast<char>(v & 0xff);
	};
	u16(id);
	u16(0x0100); // RD
	u16(1);
	u16(0);
	u16(0);
	u16(0);
	std::stringstream ss(name);
	std::string label;
	while (std::getline(ss, label, '.'))
		if (!label.empty()) {
			q += static_cast<char>(label.size());
			q += label;
		}
	q += '\0';
	u16(type);
	u16(1);
	return q;
}

// Asks 127.0.0.1:@port for @name's @type records until an answer comes or
// @timeout passes: its answer count, or -1 (no answer) / -2 - rcode.
int DnsAsk(uint16_t port, const std::string &name, uint16_t type,
	   milliseconds timeout)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	sockaddr_in a{};
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons(port);
	int result = -1;
	auto until = steady_clock::now() + timeout;
	// (an answer to an earlier query of these counts too)
	const uint16_t first = 0x4242;
	for (uint16_t id = first; steady_clock::now() < until && result == -1; id++) {
		std::string q = DnsQuery(id, name, type);
		sendto(fd, q.data(), q.size(), 0, reinterpret_cast<sockaddr *>(&a),
		       sizeof(a));
		pollfd p{fd, POLLIN, 0};
		while (result == -1 && poll(&p, 1, 100) > 0) {
			unsigned char buf[1500];
			ssize_t n = recv(fd, buf, sizeof(buf), 0);
			uint16_t got = n < 12 ? 0 : static_cast<uint16_t>(buf[0] << 8 | buf[1]);
			if (n < 12 || got < first || got > id || !(buf[2] & 0x80)) {
				std::printf("DnsAsk %s: ignored %zd bytes (id %u)\n",
					    name.c_str(), n, got);
				continue;
			}
			int rcode = buf[3] & 0x0f;
			result = rcode ? -2 - rcode : (buf[6] << 8 | buf[7]);
		}
	}
	close(fd);
	return result;
}

// dnsmasq as a child process, serving only what the test gives it: the
// hosts file @dir/hosts (re-read on SIGHUP), SRV and TXT records from
// @dir/conf (read at start only: Restart() for new ones), names under
// "test." answered locally (NXDOMAIN when unknown), TTL 1 s.
struct Dnsmasq {
	std::string dir;
	uint16_t port = 0;
	int ttl = 1; // of every answer, seconds
	Child child;

	std::string Path(const char *f) const
	{
		return dir + "/" + f;
	}

	void WriteHosts(const std::string &text)
	{
		std::string tmp = Path("hosts.tmp");
		std::ofstream(tmp) << text;
		std::rename(tmp.c_str(), Path("hosts").c_str());
	}

	void WriteConf(const std::vector<std::string> &lines)
	{
		std::ofstream f(Path("conf"));
		for (auto &l : lines)
			f << l << "\n";
	}

	// Starts it on @port (0: a free one) and waits until it answers.
	bool Start(uint16_t p = 0)
	{
		if (!p)
			p = FreeUdpPort();
		port = p;
		std::vector<std::string> args = {
			kDnsmasq,
			"--keep-in-foreground",
			"--bind-interfaces",
			"--listen-address=127.0.0.1,::1",
			"--port=" + std::to_string(port),
			"--no-resolv",
			"--no-hosts",
			"--no-poll",
			"--addn-hosts=" + Path("hosts"),
			"--conf-file=" + Path("conf"),
			"--local=/test/",
			"--local-ttl=" + std::to_string(ttl),
			"--pid-file=",
			"--user=root",
			"--log-facility=" + Path("log"),
			"--log-queries",
		};
		if (!SpawnChild(args, false, &child))
			return false;
		// the hosts file is always there: wait for its name
		return DnsAsk(port, "up.test", 1, Scaled(10000)) == 1;
	}

	bool Restart()
	{
		child.Kill();
		return Start(port);
	}

	void Hup()
	{
		kill(child.pid, SIGHUP);
	}

	// Queries of @what ("SRV] _lb._tcp.test") in its log.
	int Queries(const std::string &what) const
	{
		std::ifstream f(Path("log"));
		std::string l;
		int n = 0;
		while (std::getline(f, l))
			n += l.find("query[" + what + " ") != std::string::npos;
		return n;
	}

	std::string LogTail() const
	{
		std::ifstream f(Path("log"));
		std::vector<std::string> lines;
		std::string l;
		while (std::getline(f, l))
			lines.push_back(l);
		std::string out;
		for (size_t i = lines.size() > 30 ? lines.size() - 30 : 0; i < lines.size(); i++)
			out += lines[i] + "\n";
		return out;
	}
};

std::string Str(const std::vector<std::string> &v)
{
	std::string s;
	for (auto &x : v)
		s += (s.empty() ? "" : ", ") + x;
	return "[" + s + "]";
}

// One synchronous Who call on @ch: its status, *@msg its message.
zcrpc_status CallOnce(zcrpc_channel *ch, std::string *msg)
{
	zcrpc_result r;
	uint64_t id = 1;
	zcrpc_status st = zcrpc_call(ch, zcrpc_method_id(kLbWho), &id, sizeof(id),
				     nullptr, &r, sizeof(r));
	*msg = r.message ? r.message : "";
	zcrpc_result_free(&r);
	return st;
}

// Calls on @ch until one fails with a message holding @want (or @t):
// every call meanwhile must fail UNAVAILABLE. The last message.
std::string FailUntil(zcrpc_worker *w, zcrpc_channel *ch, const std::string &want,
		      milliseconds t)
{
	std::string msg;
	ProgressUntil(w, [&] {
		zcrpc_status st = CallOnce(ch, &msg);
		EXPECT_EQ(st, ZCRPC_UNAVAILABLE) << msg;
		return msg.find(want) != std::string::npos || st != ZCRPC_UNAVAILABLE;
	}, t);
	return msg;
}

// A DNS server in a thread that answers every query with garbage:
// @echo copies the query's id and question and adds an answer cut short
// (c-ares takes it as an answer to its query and cannot parse it);
// otherwise random bytes.
class GarbageDns {
public:
	explicit GarbageDns(bool echo) : echo_(echo)
	{
		fd_ = BoundUdp(&port_);
		if (fd_ >= 0)
			thread_ = std::thread([this] { Run(); });
	}
	~GarbageDns()
	{
		stop_ = true;
		if (thread_.joinable())
			thread_.join();
		if (fd_ >= 0)
			close(fd_);
	}
	uint16_t port() const { return port_; }
	int answered() const { return answered_.load(); }

private:
	void Run()
	{
		std::mt19937 rng(12345);
		while (!stop_) {
			pollfd p{fd_, POLLIN, 0};
			if (poll(&p, 1, 50) <= 0)
				continue;
			unsigned char q[1500];
			sockaddr_storage from;
			socklen_t fl = sizeof(from);
			ssize_t n = recvfrom(fd_, q, sizeof(q), 0,
					     reinterpret_cast<sockaddr *>(&from), &fl);
			if (n < 12)
				continue;
			std::string a;
			if (echo_) {
				a.assign(reinterpret_cast<char *>(q), static_cast<size_t>(n));
				a[2] = static_cast<char>(a[2] | 0x80); // QR
				a[7] = 1;			      // ANCOUNT 1
				a[10] = a[11] = 0;		      // no EDNS record
				// name (a pointer to the question), A, IN, TTL 60,
				// RDLENGTH 4, then 2 of its 4 bytes
				const unsigned char rr[] = {0xc0, 0x0c, 0, 1, 0, 1, 0, 0,
							    0,	  60,	0, 4, 10, 0};
				a.append(reinterpret_cast<const char *>(rr), sizeof(rr));
			} else {
				size_t len = 1 + rng() % 200;
				for (size_t i = 0; i < len; i++)
					a += static_cast<char>(rng());
			}
			sendto(fd_, a.data(), a.size(), 0, reinterpret_cast<sockaddr *>(&from),
			       fl);
			answered_++;
		}
	}
	bool echo_;
	int fd_ = -1;
	uint16_t port_ = 0;
	std::atomic<bool> stop_{false};
	std::atomic<int> answered_{0};
	std::thread thread_;
};

// Entries of /proc/self/@what ("fd", "task").
int CountProc(const char *what)
{
	std::string path = std::string("/proc/self/") + what;
	DIR *d = opendir(path.c_str());
	if (!d)
		return -1;
	int n = 0;
	while (dirent *e = readdir(d))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - (std::string(what) == "fd"); // opendir's own
}

class ResolveDns : public RdmaTest
{
protected:
	std::vector<LbPeer> peers_;
	Dnsmasq dns_;

	void SetUp() override
	{
		RdmaTest::SetUp();
		dns_.dir = "/tmp/zcrpc-dns-" + std::to_string(getpid());
		mkdir(dns_.dir.c_str(), 0755);
	}

	void TearDown() override
	{
		if (HasFailure())
			std::printf("dnsmasq's log:\n%s", dns_.LogTail().c_str());
		dns_.child.Kill();
		for (const char *f : {"hosts", "hosts.tmp", "conf", "log"})
			std::remove(dns_.Path(f).c_str());
		rmdir(dns_.dir.c_str());
	}

	void StartPeers(int n, const std::string &addr)
	{
		ASSERT_TRUE(StartLbPeers(peers_, n, addr));
	}

	// SRV records of _lb._tcp.test for peers @idx, all at target.test.
	std::vector<std::string> Srv(const std::vector<size_t> &idx)
	{
		std::vector<std::string> l = {"txt-record=txtonly.test,\"no address\""};
		for (size_t i : idx)
			l.push_back("srv-host=_lb._tcp.test,target.test," +
				    std::to_string(peers_[i].port) + ",0,0");
		return l;
	}

	std::string Authority() const
	{
		return "dns://127.0.0.1:" + std::to_string(dns_.port) + "/";
	}
};

} // namespace

TEST_F(ResolveDns, AnARecordsCallsReachTheServerItNamesAndFollowItsChange)
{
	StartPeers(1, env_.addr0);
	dns_.WriteHosts(env_.addr0 + " target.test up.test\n");
	dns_.WriteConf(Srv({}));
	ASSERT_TRUE(dns_.Start()) << dns_.LogTail();
	std::string port = std::to_string(peers_[0].port);
	LbClient cl;
	ASSERT_EQ(cl.Open(Authority() + "target.test:" + port, "pick_first"), ZCRPC_OK);
	ASSERT_TRUE(cl.Load(50, 4, Scaled(20000), ZCRPC_CALL_WAIT_FOR_READY));
	EXPECT_EQ(cl.PerServer()["s0"], 50) << cl.FirstFailure();
	EXPECT_EQ(Str(cl.Backends()), Str({env_.addr0 + " " + port}));

	// The name moves (hosts file re-read on SIGHUP, TTL 1 s): the set
	// follows within a re-resolution, and back.
	dns_.WriteHosts("198.51.100.7 target.test\n" + env_.addr0 + " up.test\n");
	dns_.Hup();
	EXPECT_TRUE(ProgressUntil(cl.w, [&] {
		return Str(cl.Backends()) == Str({"198.51.100.7 " + port});
	}, Scaled(8000))) << Str(cl.Backends());
	dns_.WriteHosts(env_.addr0 + " target.test up.test\n");
	dns_.Hup();
	ASSERT_TRUE(ProgressUntil(cl.w, [&] {
		return Str(cl.Backends()) == Str({env_.addr0 + " " + port});
	}, Scaled(8000))) << Str(cl.Backends());
	uint64_t from = cl.next_id;
	ASSERT_TRUE(cl.Load(20, 4, Scaled(20000), ZCRPC_CALL_WAIT_FOR_READY));
	EXPECT_EQ(cl.PerServer(from)["s0"], 20) << cl.FirstFailure(from);
}

TEST_F(ResolveDns, AnAaaaRecordThroughAnIpv6AuthorityReachesItsServerAndBothFamiliesAreUsed)
{
	ASSERT_FALSE(env_.addr0_v6.empty()) << "ZCRPC_RXE_ADDR0_V6 unset";
	StartPeers(1, env_.addr0_v6);
	dns_.WriteHosts(env_.addr0 + " up.test both.test\n" + env_.addr0_v6 +
			" v6.test both.test\n");
	dns_.WriteConf(Srv({}));
	ASSERT_TRUE(dns_.Start()) << dns_.LogTail();
	std::string port = std::to_string(peers_[0].port);
	std::string auth = "dns://[::1]:" + std::to_string(dns_.port) + "/";
	LbClient cl;
	ASSERT_EQ(cl.Open(auth + "v6.test:" + port, "pick_first"), ZCRPC_OK);
	ASSERT_TRUE(cl.Load(30, 4, Scaled(20000), ZCRPC_CALL_WAIT_FOR_READY));
	EXPECT_EQ(cl.PerServer()["s0"], 30) << cl.FirstFailure();
	EXPECT_EQ(Str(cl.Backends()), Str({env_.addr0_v6 + " " + port}));

	// A name with both: its A and its AAAA record, each with the port.
	LbClient both;
	ASSERT_EQ(both.Open(Authority() + "both.test:7777", "pick_first"), ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(both.w, [&] { return both.Backends().size() == 2; },
				  Scaled(5000)));
	auto b = both.Backends();
	std::sort(b.begin(), b.end());
	std::vector<std::string> want = {env_.addr0 + " 7777", env_.addr0_v6 + " 7777"};
	std::sort(want.begin(), want.end());
	EXPECT_EQ(Str(b), Str(want));
}

TEST_F(ResolveDns, SrvRecordsSpreadCallsOverTheirServersAndANewRecordGetsCallsWithinOneReResolution)
{
	StartPeers(3, env_.addr0);
	dns_.WriteHosts(env_.addr0 + " target.test up.test\n");
	dns_.WriteConf(Srv({0, 1}));
	ASSERT_TRUE(dns_.Start()) << dns_.LogTail();
	ASSERT_EQ(DnsAsk(dns_.port, "_lb._tcp.test", 33, Scaled(2000)), 2);
	LbClient cl;
	ASSERT_EQ(cl.Open(Authority() + "_lb._tcp.test", "round_robin"), ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(cl.w, [&] { return cl.Backends().size() == 2; },
				  Scaled(5000)))
		<< Str(cl.Backends());
	ASSERT_TRUE(ProgressUntil(cl.w, [&] { return cl.Ready() == 2; }, Scaled(10000)));
	ASSERT_TRUE(cl.Load(400, 16, Scaled(30000), ZCRPC_CALL_WAIT_FOR_READY));
	auto per = cl.PerServer();
	EXPECT_EQ(per.size(), 2u) << cl.FirstFailure();
	EXPECT_GE(per["s0"], 100);
	EXPECT_GE(per["s1"], 100);
	EXPECT_EQ(per.count("s2"), 0u);

	// A third record: dnsmasq reads SRV records at start only, so it
	// restarts (on the same port) with three. Meanwhile its queries fail
	// and the set stays; within a TTL of the restart s2 is in it.
	dns_.WriteConf(Srv({0, 1, 2}));
	ASSERT_TRUE(dns_.Restart()) << dns_.LogTail();
	ASSERT_EQ(DnsAsk(dns_.port, "_lb._tcp.test", 33, Scaled(2000)), 3);
	ASSERT_TRUE(ProgressUntil(cl.w, [&] { return cl.Backends().size() == 3; },
				  Scaled(8000)))
		<< Str(cl.Backends());
	// round_robin connects to it at once; once up it has its third
	ASSERT_TRUE(ProgressUntil(cl.w, [&] { return cl.Ready() == 3; }, Scaled(10000)));
	uint64_t from = cl.next_id;
	ASSERT_TRUE(cl.Load(600, 16, Scaled(30000), ZCRPC_CALL_WAIT_FOR_READY));
	per = cl.PerServer(from);
	EXPECT_EQ(per.size(), 3u) << cl.FirstFailure(from);
	for (auto &kv : per)
		std::printf("%s: %d calls\n", kv.first.c_str(), kv.second);
	EXPECT_GE(per["s2"], 100);
	EXPECT_EQ(cl.FirstFailure(), "") << "no call failed, the restart included";
}

TEST_F(ResolveDns, AnAnswerStandsForItsTtlAndABackendsFailureResolvesAgainAtOnce)
{
	StartPeers(2, env_.addr0);
	dns_.ttl = 3600; // used for 30 s, the longest
	dns_.WriteHosts(env_.addr0 + " target.test up.test\n");
	dns_.WriteConf(Srv({0}));
	ASSERT_TRUE(dns_.Start()) << dns_.LogTail();
	LbClient cl;
	ASSERT_EQ(cl.Open(Authority() + "_lb._tcp.test", "round_robin"), ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(cl.w, [&] { return cl.Ready() == 1; }, Scaled(10000)));
	ASSERT_TRUE(cl.Load(20, 4, Scaled(20000), ZCRPC_CALL_WAIT_FOR_READY));
	EXPECT_EQ(cl.PerServer()["s0"], 20) << cl.FirstFailure();
	// Not asked again while the answer stands.
	ProgressUntil(cl.w, [] { return false; }, 2500ms);
	EXPECT_EQ(dns_.Queries("SRV] _lb._tcp.test"), 1);

	// s1 replaces s0 in DNS: unseen until the TTL ends...
	dns_.WriteConf(Srv({1}));
	ASSERT_TRUE(dns_.Restart()) << dns_.LogTail();
	ProgressUntil(cl.w, [] { return false; }, 1500ms);
	std::string s0 = env_.addr0 + " " + std::to_string(peers_[0].port);
	std::string s1 = env_.addr0 + " " + std::to_string(peers_[1].port);
	EXPECT_EQ(Str(cl.Backends()), Str({s0}));
	// ...or until s0 fails: the channel asks again, and it is s1.
	peers_[0].child->Kill();
	ASSERT_TRUE(ProgressUntil(cl.w, [&] { return Str(cl.Backends()) == Str({s1}); },
				  Scaled(8000)))
		<< Str(cl.Backends());
	uint64_t from = cl.next_id;
	ASSERT_TRUE(cl.Load(20, 4, Scaled(20000), ZCRPC_CALL_WAIT_FOR_READY));
	EXPECT_EQ(cl.PerServer(from)["s1"], 20) << cl.FirstFailure(from);
}

TEST_F(ResolveDns, ANameThatDoesNotExistOrHasNoAddressFailsCallsUnavailableSayingSo)
{
	dns_.WriteHosts("127.0.0.1 up.test\n");
	dns_.WriteConf(Srv({}));
	ASSERT_TRUE(dns_.Start()) << dns_.LogTail();
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	struct Case {
		std::string target, want;
	} cases[] = {
		{"nosuch.test:7000", "dns: nosuch.test: Domain name not found"},
		{"_nosuch._tcp.test", "dns: _nosuch._tcp.test: Domain name not found"},
		// exists, no A/AAAA or no SRV: an empty set, status OK
		{"txtonly.test:7000", "the resolver returned no addresses"},
		{"txtonly.test", "the resolver returned no addresses"},
	};
	for (auto &c : cases) {
		zcrpc_channel *ch = nullptr;
		ASSERT_EQ(zcrpc_channel_create_target(w, (Authority() + c.target).c_str(),
						      nullptr, &ch),
			  ZCRPC_OK)
			<< c.target;
		std::string msg = FailUntil(w, ch, c.want, Scaled(5000));
		EXPECT_NE(msg.find(c.want), std::string::npos) << c.target << ": " << msg;
		EXPECT_EQ(zcrpc_channel_get_backends(ch, nullptr, 0, 0), 0u);
		zcrpc_channel_destroy(ch);
	}

	// A server found later: a name that comes to exist is resolved again
	// (its failure's retry) and a waiting call completes on it.
	StartPeers(1, env_.addr0);
	LbClient cl;
	ASSERT_EQ(cl.Open(Authority() + "late.test:" + std::to_string(peers_[0].port),
			  "pick_first"),
		  ZCRPC_OK);
	std::string msg = FailUntil(cl.w, cl.ch, "dns: late.test: Domain name not found",
				    Scaled(5000));
	EXPECT_NE(msg.find("Domain name not found"), std::string::npos) << msg;
	ASSERT_EQ(cl.Start(kLbWho, nullptr, 5000000, ZCRPC_CALL_WAIT_FOR_READY), ZCRPC_OK);
	dns_.WriteHosts("127.0.0.1 up.test\n" + env_.addr0 + " late.test\n");
	dns_.Hup();
	ASSERT_TRUE(ProgressUntil(cl.w, [&] { return cl.live == 0; }, Scaled(8000)));
	const LbOutcome &last = cl.out[cl.next_id - 1];
	EXPECT_EQ(last.status, ZCRPC_OK) << last.message;
	EXPECT_EQ(last.server, "s0");
	zcrpc_worker_destroy(w);
}

TEST_F(ResolveDns, ServersThatAnswerGarbageOrNothingFailCallsClearlyAndDestroyIsPrompt)
{
	GarbageDns echo(true), noise(false);
	ASSERT_NE(echo.port(), 0);
	ASSERT_NE(noise.port(), 0);
	uint16_t silent_port = 0;
	int silent = BoundUdp(&silent_port); // bound, never read
	ASSERT_GE(silent, 0);
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	auto at = [](uint16_t p, const std::string &name) {
		return "dns://127.0.0.1:" + std::to_string(p) + "/" + name;
	};
	struct Case {
		std::string target, want;
	} cases[] = {
		{at(echo.port(), "garbage.test:7000"), "dns: garbage.test: Misformatted DNS reply"},
		{at(echo.port(), "_garbage._tcp.test"),
		 "dns: _garbage._tcp.test: Misformatted DNS reply"},
		{at(noise.port(), "noise.test:7000"), "dns: noise.test: "},
		{at(silent_port, "silent.test:7000"),
		 "dns: silent.test: Timeout while contacting DNS servers"},
		{at(silent_port, "_silent._tcp.test"),
		 "dns: _silent._tcp.test: Timeout while contacting DNS servers"},
	};
	for (auto &c : cases) {
		zcrpc_channel *ch = nullptr;
		ASSERT_EQ(zcrpc_channel_create_target(w, c.target.c_str(), nullptr, &ch), ZCRPC_OK)
			<< c.target;
		std::string msg = FailUntil(w, ch, c.want, Scaled(10000));
		EXPECT_NE(msg.find(c.want), std::string::npos) << c.target << ": " << msg;
		std::printf("%s: %s\n", c.target.c_str(), msg.c_str());
		// Again, while it retries: destroy does not wait for c-ares.
		ProgressUntil(w, [] { return false; }, 1200ms);
		auto t0 = steady_clock::now();
		zcrpc_channel_destroy(ch);
		auto took = duration_cast<milliseconds>(steady_clock::now() - t0);
		EXPECT_LT(took, Scaled(1000)) << c.target << ": destroy took " << took.count()
					       << " ms";
	}
	EXPECT_GT(echo.answered(), 0);
	EXPECT_GT(noise.answered(), 0);
	zcrpc_worker_destroy(w);
	close(silent);
}

TEST_F(ResolveDns, TargetsThatDoNotParseAreRefused)
{
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	std::string long_label(64, 'a'), long_name;
	for (int i = 0; i < 26; i++)
		long_name += "abcdefghi.";
	long_name += "example"; // 267 bytes
	for (const std::string &t : std::vector<std::string>{
		     "dns:", "dns:name:99999", "dns:name:0", "dns:name:", "dns:name:80x",
		     "dns:name:-1", "dns::80", "dns:a:b:c", "dns:bad..name:80", "dns:.:80",
		     "dns:.name:80", "dns:bad name:80", "dns:n@me:80", "dns:[::1]",
		     "dns:[::1]:0", "dns:[zz::1]:80", "dns://bad authority/x:1",
		     "dns://127.0.0.1", "dns://127.0.0.1/", "dns://127.0.0.1:99999/x:1",
		     "dns://127.0.0.1:0/x:1", "dns://127.0.0.1:/x:1", "dns://ns.example/x:1",
		     "dns://[::1/x:1", "dns://[zz::1]:53/x:1", "dns://[::1]x/x:1",
		     "dns://1.2.3.4.5/x:1", "dns:///", "dns:" + long_label + ".test:80",
		     "dns:" + long_name + ":80", "dns:" + long_name}) {
		zcrpc_channel *ch = nullptr;
		EXPECT_EQ(zcrpc_channel_create_target(w, t.c_str(), nullptr, &ch),
			  ZCRPC_INVALID_ARGUMENT)
			<< t;
		EXPECT_EQ(ch, nullptr) << t;
		if (ch)
			zcrpc_channel_destroy(ch);
	}
	// The forms that do parse (a DNS server nobody runs: only parsing).
	for (const std::string &t : std::vector<std::string>{
		     "dns:name.test:80", "dns:name.test.:80", "dns:_kv._tcp.name.test",
	      "dns:[::1]:80", "dns:10.0.0.1:80", "dns:///name.test:80",
	      "dns://127.0.0.1/name.test:80", "dns://127.0.0.1:5353/_a._udp.test",
	      "dns://[::1]/name.test:80", "dns://[::1]:5353/name.test:80",
	      "dns:" + std::string(63, 'a') + ".test:80"}) {
		zcrpc_channel *ch = nullptr;
		EXPECT_EQ(zcrpc_channel_create_target(w, t.c_str(), nullptr, &ch), ZCRPC_OK)
			<< t;
		zcrpc_channel_destroy(ch);
	}
	zcrpc_worker_destroy(w);
}

TEST_F(ResolveDns, ADestroyRightAfterCreateWithAQueryInFlightIsPromptAndLeavesNothing)
{
	StartPeers(1, env_.addr0);
	dns_.WriteHosts(env_.addr0 + " target.test up.test\n");
	dns_.WriteConf(Srv({0}));
	ASSERT_TRUE(dns_.Start()) << dns_.LogTail();
	uint16_t silent_port = 0;
	int silent = BoundUdp(&silent_port);
	ASSERT_GE(silent, 0);
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	const std::string targets[] = {
		"dns://127.0.0.1:" + std::to_string(silent_port) + "/silent.test:7000",
		"dns://127.0.0.1:" + std::to_string(silent_port) + "/_silent._tcp.test",
		Authority() + "target.test:" + std::to_string(peers_[0].port),
		Authority() + "_lb._tcp.test",
		Authority() + "nosuch.test:7000",
	};
	// One round first: whatever the worker makes once (and keeps) is made.
	for (auto &t : targets) {
		zcrpc_channel *ch = nullptr;
		ASSERT_EQ(zcrpc_channel_create_target(w, t.c_str(), nullptr, &ch), ZCRPC_OK);
		zcrpc_channel_destroy(ch);
	}
	// (threads of earlier tests and connections may still be ending)
	ProgressUntil(w, [] { return false; }, 300ms);
	int fds = CountProc("fd"), tasks = CountProc("task");
	ASSERT_GT(fds, 0);
	milliseconds worst{0};
	for (int round = 0; round < 20; round++)
		for (auto &t : targets) {
			zcrpc_channel *ch = nullptr;
			ASSERT_EQ(zcrpc_channel_create_target(w, t.c_str(), nullptr, &ch),
				  ZCRPC_OK);
			if (round % 2) // let the query leave first
				std::this_thread::sleep_for(2ms);
			auto t0 = steady_clock::now();
			zcrpc_channel_destroy(ch);
			auto took = duration_cast<milliseconds>(steady_clock::now() - t0);
			worst = std::max(worst, took);
		}
	std::printf("slowest destroy: %lld ms\n", static_cast<long long>(worst.count()));
	EXPECT_LT(worst, Scaled(1000));
	// Not more than before: each resolver's thread, eventfd and c-ares
	// sockets went with its channel.
	// (a joined thread leaves /proc a moment after pthread_join returned)
	EXPECT_LE(CountProc("fd"), fds) << "a descriptor was left";
	EXPECT_TRUE(ProgressUntil(w, [&] { return CountProc("task") <= tasks; },
				  Scaled(2000)))
		<< "a thread was left: " << CountProc("task") << " vs " << tasks;
	std::printf("fds %d -> %d, threads %d -> %d\n", fds, CountProc("fd"), tasks,
		    CountProc("task"));

	// And one that resolved and has a call in flight: the same.
	LbClient cl;
	ASSERT_EQ(cl.Open(Authority() + "_lb._tcp.test", "pick_first"), ZCRPC_OK);
	ASSERT_TRUE(cl.Load(10, 2, Scaled(20000), ZCRPC_CALL_WAIT_FOR_READY));
	EXPECT_EQ(cl.PerServer()["s0"], 10) << cl.FirstFailure();
	ASSERT_EQ(cl.Start(), ZCRPC_OK);
	auto t0 = steady_clock::now();
	zcrpc_channel_destroy(cl.ch);
	cl.ch = nullptr;
	EXPECT_LT(steady_clock::now() - t0, Scaled(1000));
	EXPECT_EQ(cl.live, 0) << "the call in flight completed (CANCELLED)";
	zcrpc_worker_destroy(w);
	close(silent);
}
