// The "etcd:" resolver and servers announcing themselves (docs/balancing.md),
// over rxe with server processes of zcrpc_test_lb_peer that announce
// themselves in a real etcd (Debian's etcd-server, run by the suite with a
// data directory under /tmp): round_robin spreads calls over the servers
// announced; a server that announces itself later gets calls within one
// watch event; a killed server's lease expires and it leaves the set while
// the calls go on elsewhere, none completing twice; a server shut down
// gracefully withdraws at once, long before its lease would expire; an
// announcement renews its lease, is announced again when its lease goes,
// and is withdrawn by zcrpc_announcement_withdraw, the shutdown and the
// destroy; bad targets are refused, and an etcd that is not there or
// answers garbage fails the calls (and the announcement) clearly, a
// channel over it going at once.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <curl/curl.h>

#include "fault_util.h"
#include "lb_util.h"
#include "rdma_env.h"
#include "zcrpc/balance.h"
#include "zcrpc/rpc.h"

using namespace std::chrono;
using namespace std::chrono_literals;

namespace
{

// A TCP port nothing listens on now (bound to 127.0.0.1, then closed).
uint16_t FreePort()
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	sockaddr_in a{};
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t len = sizeof(a);
	uint16_t port = 0;
	if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) == 0 &&
	    getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

std::string B64(const std::string &s)
{
	static const char t[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	std::string o;
	size_t i = 0;
	for (; i + 2 < s.size(); i += 3) {
		uint32_t x = static_cast<uint8_t>(s[i]) << 16 |
			     static_cast<uint8_t>(s[i + 1]) << 8 | static_cast<uint8_t>(s[i + 2]);
		o += t[x >> 18], o += t[(x >> 12) & 63], o += t[(x >> 6) & 63], o += t[x & 63];
	}
	if (i < s.size()) {
		uint32_t x = static_cast<uint8_t>(s[i]) << 16 |
			     (i + 1 < s.size() ? static_cast<uint8_t>(s[i + 1]) << 8 : 0);
		o += t[x >> 18], o += t[(x >> 12) & 63];
		o += i + 1 < s.size() ? t[(x >> 6) & 63] : '=';
		o += '=';
	}
	return o;
}

size_t Collect(char *d, size_t size, size_t n, void *arg)
{
	static_cast<std::string *>(arg)->append(d, size * n);
	return size * n;
}

// One request to @url (POST of @body, or GET when empty); the answer, and
// its HTTP status in *@code (0: no answer).
std::string Http(const std::string &url, const std::string &body, long *code)
{
	std::string out;
	*code = 0;
	CURL *h = curl_easy_init();
	if (!h)
		return out;
	curl_easy_setopt(h, CURLOPT_URL, url.c_str());
	if (!body.empty())
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.c_str());
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, Collect);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &out);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_PROXY, "");
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 3000L);
	if (curl_easy_perform(h) == CURLE_OK)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, code);
	curl_easy_cleanup(h);
	return out;
}

// An etcd process of the suite's own: client and peer ports found free, a
// data directory under /tmp, killed with the test (PR_SET_PDEATHSIG) and
// at the suite's end.
struct Etcd {
	pid_t pid = -1;
	uint16_t port = 0;
	std::string dir, url;

	bool Start()
	{
		char tmpl[] = "/tmp/zcrpc-etcd-XXXXXX";
		if (!mkdtemp(tmpl))
			return false;
		dir = tmpl;
		port = FreePort();
		uint16_t peer = FreePort();
		while (peer == port)
			peer = FreePort();
		url = "http://127.0.0.1:" + std::to_string(port);
		std::string purl = "http://127.0.0.1:" + std::to_string(peer);
		std::vector<std::string> args = {
			"/usr/bin/etcd", "--name", "zcrpc-test", "--data-dir", dir + "/data",
			"--listen-client-urls", url, "--advertise-client-urls", url,
			"--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
			"--initial-cluster", "zcrpc-test=" + purl};
		std::vector<char *> argv;
		for (auto &a : args)
			argv.push_back(const_cast<char *>(a.c_str()));
		argv.push_back(nullptr);
		std::string log = dir + "/etcd.log";
		pid_t parent = getpid();
		pid = fork();
		if (pid < 0)
			return false;
		if (pid == 0) { // only async-signal-safe calls until exec
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (getppid() != parent)
				_exit(1);
			int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
			if (fd >= 0) {
				dup2(fd, 1);
				dup2(fd, 2);
			}
			execv(argv[0], argv.data());
			_exit(127);
		}
		// Up once it answers: /health, then a range (the gateway).
		auto until = steady_clock::now() + Scaled(30000);
		while (steady_clock::now() < until) {
			long code;
			std::string h = Http(url + "/health", "", &code);
			if (code == 200 && h.find("true") != std::string::npos &&
			    (Http(url + "/v3/kv/range", "{\"key\":\"AA==\"}", &code), code == 200))
				return true;
			int st;
			if (waitpid(pid, &st, WNOHANG) == pid) {
				pid = -1;
				return false;
			}
			std::this_thread::sleep_for(50ms);
		}
		return false;
	}

	std::string Log() const
	{
		std::string s;
		FILE *f = fopen((dir + "/etcd.log").c_str(), "r");
		if (!f)
			return s;
		char buf[4096];
		size_t n;
		while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
			s.append(buf, n);
		fclose(f);
		return s.size() > 3000 ? s.substr(s.size() - 3000) : s;
	}

	void Stop()
	{
		if (pid > 0) {
			kill(pid, SIGKILL);
			waitpid(pid, nullptr, 0);
			pid = -1;
		}
		if (!dir.empty()) {
			std::error_code ec;
			std::filesystem::remove_all(dir, ec);
			dir.clear();
		}
	}

	std::string Post(const std::string &path, const std::string &body, long *code) const
	{
		return Http(url + path, body, code);
	}

	bool Put(const std::string &key, const std::string &value) const
	{
		long code;
		Post("/v3/kv/put", "{\"key\":\"" + B64(key) + "\",\"value\":\"" + B64(value) + "\"}",
		     &code);
		return code == 200;
	}

	// The keys under @prefix + "/" (the range's answer), -1 on a failure.
	std::string Range(const std::string &prefix, long *code) const
	{
		std::string end = prefix + "0"; // '/' + 1
		return Post("/v3/kv/range",
			    "{\"key\":\"" + B64(prefix + "/") + "\",\"range_end\":\"" + B64(end) +
				    "\"}",
			    code);
	}

	int Count(const std::string &prefix) const
	{
		long code;
		std::string r = Range(prefix, &code);
		if (code != 200)
			return -1;
		std::smatch m;
		if (!std::regex_search(r, m, std::regex("\"count\":\"([0-9]+)\"")))
			return r.find("\"header\"") != std::string::npos ? 0 : -1;
		return std::stoi(m[1]);
	}

	// The lease of the first key under @prefix, "" when none.
	std::string Lease(const std::string &prefix) const
	{
		long code;
		std::string r = Range(prefix, &code);
		std::smatch m;
		if (code != 200 || !std::regex_search(r, m, std::regex("\"lease\":\"([0-9]+)\"")))
			return "";
		return m[1];
	}
};

// A TCP server on 127.0.0.1 that answers every connection with @reply and
// closes it, closes it at once (@reply "close"), or (an empty @reply)
// accepts and never answers.
class FakeServer
{
      public:
	explicit FakeServer(std::string reply) : reply_(std::move(reply))
	{
		fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		sockaddr_in a{};
		a.sin_family = AF_INET;
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		socklen_t len = sizeof(a);
		if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr *>(&a), sizeof(a)) ||
		    listen(fd_, 16) || getsockname(fd_, reinterpret_cast<sockaddr *>(&a), &len))
			return;
		port_ = ntohs(a.sin_port);
		thread_ = std::thread([this] { Run(); });
	}
	~FakeServer()
	{
		stop_ = true;
		if (thread_.joinable())
			thread_.join();
		for (int c : held_)
			close(c);
		if (fd_ >= 0)
			close(fd_);
	}
	uint16_t port() const { return port_; }
	int accepted() const { return accepted_.load(); }
	std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

      private:
	void Run()
	{
		while (!stop_) {
			pollfd p{fd_, POLLIN, 0};
			if (poll(&p, 1, 20) <= 0)
				continue;
			int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
			if (c < 0)
				continue;
			accepted_++;
			if (reply_ == "close") { // before a byte of the request
				close(c);
				continue;
			}
			if (reply_.empty()) {
				held_.push_back(c);
				continue;
			}
			// the request (whatever it is), then the reply
			char buf[4096];
			pollfd q{c, POLLIN, 0};
			if (poll(&q, 1, 500) > 0)
				(void)!read(c, buf, sizeof(buf));
			(void)!write(c, reply_.data(), reply_.size());
			shutdown(c, SHUT_WR);
			std::this_thread::sleep_for(5ms);
			close(c);
		}
	}
	std::string reply_;
	int fd_ = -1;
	uint16_t port_ = 0;
	std::atomic<bool> stop_{false};
	std::atomic<int> accepted_{0};
	std::vector<int> held_;
	std::thread thread_;
};

class ResolveEtcd : public RdmaTest
{
      protected:
	static Etcd *etcd_;

	static void SetUpTestSuite()
	{
		curl_global_init(CURL_GLOBAL_ALL);
		etcd_ = new Etcd;
		if (!etcd_->Start()) {
			std::printf("etcd did not start:\n%s\n", etcd_->Log().c_str());
			etcd_->Stop();
		}
	}

	static void TearDownTestSuite()
	{
		etcd_->Stop();
		delete etcd_;
		etcd_ = nullptr;
	}

	void SetUp() override
	{
		RdmaTest::SetUp();
		if (HasFatalFailure())
			return;
		ASSERT_TRUE(etcd_ && etcd_->pid > 0) << "no etcd (see above)";
	}

	// The registry / target string of @prefix in the suite's etcd.
	std::string Reg(const std::string &prefix) { return "etcd:" + etcd_->url + "/" + prefix; }

	std::vector<LbPeer> peers_;

	void StartPeers(int n, const std::string &prefix, int ttl_s = 2)
	{
		ASSERT_TRUE(StartLbPeers(peers_, n, env_.addr0, Reg(prefix), ttl_s));
	}
};

Etcd *ResolveEtcd::etcd_ = nullptr;

} // namespace

TEST_F(ResolveEtcd, ThreeAnnouncedServersShareRoundRobinCalls)
{
	StartPeers(3, "t1/lb");
	EXPECT_EQ(etcd_->Count("t1/lb"), 3) << "each announced itself before it said listening";
	LbClient cl;
	ASSERT_EQ(cl.Open(Reg("t1/lb")), ZCRPC_OK);
	ASSERT_TRUE(cl.WaitBackends(3, Scaled(5000))) << cl.BackendCount();
	std::set<std::string> want;
	for (auto &p : peers_)
		want.insert(std::to_string(p.port));
	EXPECT_EQ(cl.BackendPorts(), want) << "the values announced are the backends";
	// Connected first (round_robin skips a backend still connecting),
	// then spread.
	ASSERT_TRUE(cl.Load(30, 4, Scaled(20000)));
	ASSERT_TRUE(ProgressUntil(cl.w, [&] { return cl.Ready() == 3; }, Scaled(5000)));
	uint64_t from = cl.next_id;
	ASSERT_TRUE(cl.Load(300, 16, Scaled(30000)));
	auto per = cl.PerServer(from);
	ASSERT_EQ(per.size(), 3u);
	int ok = 0;
	for (auto &kv : per) {
		EXPECT_GE(kv.second, 300 / 3 * 8 / 10) << kv.first;
		ok += kv.second;
	}
	EXPECT_EQ(ok, 300);
	EXPECT_EQ(cl.Twice(), 0);
}

TEST_F(ResolveEtcd, AFourthServerAnnouncedLaterGetsCallsWithinOneWatchEvent)
{
	StartPeers(3, "t2/lb");
	LbClient cl;
	ASSERT_EQ(cl.Open(Reg("t2/lb")), ZCRPC_OK);
	ASSERT_TRUE(cl.WaitBackends(3, Scaled(5000))) << cl.BackendCount();
	ASSERT_TRUE(cl.Load(60, 8, Scaled(20000)));
	EXPECT_EQ(cl.PerServer().count("s3"), 0u);
	StartPeers(1, "t2/lb");
	// Its put is one watch event: the set grows without a refresh.
	ASSERT_TRUE(cl.WaitBackends(4, Scaled(3000))) << cl.BackendCount();
	// The channel connects it at once; round_robin picks it once READY.
	ASSERT_TRUE(ProgressUntil(cl.w, [&] { return cl.Ready() == 4; }, Scaled(5000)));
	uint64_t from = cl.next_id;
	ASSERT_TRUE(cl.Load(200, 16, Scaled(30000)));
	auto per = cl.PerServer(from);
	EXPECT_EQ(per.size(), 4u);
	EXPECT_GT(per["s3"], 0) << "the new server got calls";
	EXPECT_EQ(cl.Failed(), 0);
	EXPECT_EQ(cl.Twice(), 0);
}

TEST_F(ResolveEtcd, AKilledServersLeaseExpiresAndItLeavesTheSetWhileCallsGoOnElsewhere)
{
	StartPeers(3, "t3/lb"); // ttl 2 s
	LbClient cl;
	ASSERT_EQ(cl.Open(Reg("t3/lb")), ZCRPC_OK);
	ASSERT_TRUE(cl.WaitBackends(3, Scaled(5000))) << cl.BackendCount();
	ASSERT_TRUE(cl.Load(150, 8, Scaled(20000)));
	ASSERT_EQ(cl.PerServer().size(), 3u);
	uint64_t at_kill = cl.next_id;
	auto t0 = steady_clock::now();
	peers_[1].child->Kill(); // SIGKILL: nobody revokes its lease
	// Calls go on while the lease runs out: the killed server's fail (at
	// most once each), the others' succeed.
	bool gone = false;
	auto until = t0 + Scaled(2000 + 4000);
	while (!gone && steady_clock::now() < until) {
		ASSERT_TRUE(cl.Load(20, 4, Scaled(20000)));
		gone = cl.BackendCount() == 2;
	}
	auto took = duration_cast<milliseconds>(steady_clock::now() - t0).count();
	std::printf("the killed server left the set after %lld ms; %d calls failed meanwhile\n",
		    static_cast<long long>(took), cl.Failed(at_kill));
	ASSERT_TRUE(gone) << "still " << cl.BackendCount() << " backends";
	EXPECT_EQ(cl.BackendPorts().count(std::to_string(peers_[1].port)), 0u);
	EXPECT_EQ(etcd_->Count("t3/lb"), 2) << "its key went with its lease";
	for (auto &kv : cl.out)
		if (kv.second.status != ZCRPC_OK)
			EXPECT_EQ(kv.second.status, ZCRPC_UNAVAILABLE) << kv.second.message;
	uint64_t after = cl.next_id;
	ASSERT_TRUE(cl.Load(200, 16, Scaled(30000)));
	auto per = cl.PerServer(after);
	EXPECT_EQ(per.count("s1"), 0u);
	EXPECT_EQ(per["s0"] + per["s2"], 200) << "every call after it left succeeded";
	EXPECT_EQ(cl.Twice(), 0) << "no call completes twice";
}

TEST_F(ResolveEtcd, AServerShutDownGracefullyWithdrawsAtOnceLongBeforeItsTtl)
{
	StartPeers(3, "t4/lb", 60); // a lease that cannot expire during the test
	LbClient cl;
	ASSERT_EQ(cl.Open(Reg("t4/lb")), ZCRPC_OK);
	ASSERT_TRUE(cl.WaitBackends(3, Scaled(5000))) << cl.BackendCount();
	ASSERT_TRUE(cl.Load(150, 8, Scaled(20000)));
	uint64_t at_term = cl.next_id;
	kill(peers_[2].child->pid, SIGTERM);
	bool gone = false;
	auto until = steady_clock::now() + Scaled(5000);
	while (!gone && steady_clock::now() < until) {
		ASSERT_TRUE(cl.Load(20, 4, Scaled(20000)));
		gone = cl.BackendCount() == 2;
	}
	ASSERT_TRUE(gone) << "still " << cl.BackendCount() << " backends, a minute before its ttl";
	EXPECT_EQ(cl.BackendPorts().count(std::to_string(peers_[2].port)), 0u);
	EXPECT_EQ(etcd_->Count("t4/lb"), 2) << "its lease was revoked";
	int st = peers_[2].child->Wait(Scaled(10000));
	EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "the peer's shutdown: " << st;
	uint64_t after = cl.next_id;
	ASSERT_TRUE(cl.Load(200, 16, Scaled(30000)));
	auto per = cl.PerServer(after);
	EXPECT_EQ(per.count("s2"), 0u);
	EXPECT_EQ(per["s0"] + per["s1"], 200);
	std::printf("%d calls failed around the graceful shutdown\n", cl.Failed(at_term));
	EXPECT_EQ(cl.Twice(), 0);
}

TEST_F(ResolveEtcd, AnAnnouncementRenewsItsLeaseIsAnnouncedAgainAndIsWithdrawnEveryWay)
{
	zcrpc_worker *w = nullptr;
	zcrpc_server *s = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	ASSERT_EQ(zcrpc_server_create(w, nullptr, &s), ZCRPC_OK);
	zcrpc_announce_opts o;
	zcrpc_announce_opts_init(&o);
	EXPECT_EQ(o.ttl_s, 5);
	o.ttl_s = 2;
	zcrpc_announcement *a = nullptr;
	ASSERT_EQ(zcrpc_server_announce(s, Reg("t5/lb").c_str(), "10.9.9.9:7000", &o, &a),
		  ZCRPC_OK)
		<< zcrpc_last_error();
	ASSERT_NE(a, nullptr);
	long code;
	std::string r = etcd_->Range("t5/lb", &code);
	EXPECT_NE(r.find(B64("t5/lb/10.9.9.9:7000")), std::string::npos) << r;
	EXPECT_NE(r.find(B64("10.9.9.9:7000")), std::string::npos) << r;
	// Renewed: still there well past its ttl (a wait, not a bound: not
	// scaled).
	std::this_thread::sleep_for(4500ms);
	EXPECT_EQ(etcd_->Count("t5/lb"), 1) << "the lease was renewed";
	// Its lease revoked behind its back: announced again, under a new one.
	std::string lease = etcd_->Lease("t5/lb");
	ASSERT_FALSE(lease.empty());
	etcd_->Post("/v3/lease/revoke", "{\"ID\":\"" + lease + "\"}", &code);
	ASSERT_EQ(code, 200);
	auto until = steady_clock::now() + Scaled(3000);
	while (etcd_->Count("t5/lb") != 1 && steady_clock::now() < until)
		std::this_thread::sleep_for(50ms);
	EXPECT_EQ(etcd_->Count("t5/lb"), 1) << "announced again";
	EXPECT_NE(etcd_->Lease("t5/lb"), lease);
	// Withdrawn: the key goes before the call returns.
	zcrpc_announcement_withdraw(a);
	EXPECT_EQ(etcd_->Count("t5/lb"), 0);
	zcrpc_announcement_withdraw(nullptr);
	// The shutdown withdraws (a server listening), and the destroy.
	ASSERT_EQ(zcrpc_server_listen(s, env_.addr0.c_str(), "0"), ZCRPC_OK);
	ASSERT_EQ(zcrpc_server_announce(s, Reg("t5/lb").c_str(), "10.9.9.9:7001", &o, nullptr),
		  ZCRPC_OK);
	ASSERT_EQ(zcrpc_server_announce(s, Reg("t5/lb2").c_str(), "10.9.9.9:7002", &o, nullptr),
		  ZCRPC_OK);
	EXPECT_EQ(etcd_->Count("t5/lb"), 1);
	EXPECT_EQ(etcd_->Count("t5/lb2"), 1);
	EXPECT_EQ(zcrpc_server_shutdown(s, 1000), ZCRPC_OK);
	EXPECT_EQ(etcd_->Count("t5/lb"), 0);
	EXPECT_EQ(etcd_->Count("t5/lb2"), 0);
	zcrpc_server_destroy(s);
	ASSERT_EQ(zcrpc_server_create(w, nullptr, &s), ZCRPC_OK);
	ASSERT_EQ(zcrpc_server_announce(s, Reg("t5/lb").c_str(), "[fd00::1]:7003", &o, nullptr),
		  ZCRPC_OK);
	EXPECT_EQ(etcd_->Count("t5/lb"), 1);
	zcrpc_server_destroy(s);
	EXPECT_EQ(etcd_->Count("t5/lb"), 0);
	zcrpc_worker_destroy(w);
}

TEST_F(ResolveEtcd, BadTargetsAndAnnouncementsAreRefused)
{
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	std::string ep = etcd_->url;
	for (std::string t :
	     {std::string("etcd:"), std::string("etcd:ftp://x/y"),
	      std::string("etcd:http://127.0.0.1:99999/p"), std::string("etcd:http://127.0.0.1:0/p"),
	      std::string("etcd:https://127.0.0.1:2379/p"), std::string("etcd:http://127.0.0.1/p"),
	      std::string("etcd:http://:2379/p"), std::string("etcd:http://127.0.0.1:2379"),
	      std::string("etcd:http://127.0.0.1:2379/"), std::string("etcd:http://127.0.0.1:2379//"),
	      std::string("etcd:http://bad host:2379/p"), std::string("etcd:http://[zz::1]:2379/p"),
	      std::string("etcd:") + ep + "/has space", std::string("etcd:127.0.0.1:2379/p")}) {
		zcrpc_channel *ch = nullptr;
		EXPECT_EQ(zcrpc_channel_create_target(w, t.c_str(), nullptr, &ch),
			  ZCRPC_INVALID_ARGUMENT)
			<< t;
		EXPECT_EQ(ch, nullptr);
	}
	// What does parse (the set aside): accepted.
	for (std::string t : {"etcd:" + ep + "/p", "etcd:" + ep + "/a/b/c/",
			      std::string("etcd:http://[::1]:2379/p")}) {
		zcrpc_channel *ch = nullptr;
		EXPECT_EQ(zcrpc_channel_create_target(w, t.c_str(), nullptr, &ch), ZCRPC_OK) << t;
		zcrpc_channel_destroy(ch);
	}
	zcrpc_server *s = nullptr;
	ASSERT_EQ(zcrpc_server_create(w, nullptr, &s), ZCRPC_OK);
	zcrpc_announce_opts o;
	zcrpc_announce_opts_init(&o);
	std::string reg = Reg("t6/lb");
	EXPECT_EQ(zcrpc_server_announce(nullptr, reg.c_str(), "10.0.0.1:1", &o, nullptr),
		  ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_server_announce(s, nullptr, "10.0.0.1:1", &o, nullptr),
		  ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_server_announce(s, reg.c_str(), nullptr, &o, nullptr),
		  ZCRPC_INVALID_ARGUMENT);
	for (const char *bad : {"consul:x", "etcd:ftp://x/y", "etcd:http://127.0.0.1:99999/p",
				"etcd:http://127.0.0.1:2379/"})
		EXPECT_EQ(zcrpc_server_announce(s, bad, "10.0.0.1:1", &o, nullptr),
			  ZCRPC_INVALID_ARGUMENT)
			<< bad;
	for (const char *bad : {"", "10.0.0.1", "10.0.0.1:0", "10.0.0.1:99999", "a b:1", "::1:80"})
		EXPECT_EQ(zcrpc_server_announce(s, reg.c_str(), bad, &o, nullptr),
			  ZCRPC_INVALID_ARGUMENT)
			<< bad;
	for (int ttl : {0, 1, 3601}) {
		o.ttl_s = ttl;
		EXPECT_EQ(zcrpc_server_announce(s, reg.c_str(), "10.0.0.1:1", &o, nullptr),
			  ZCRPC_INVALID_ARGUMENT)
			<< ttl;
		EXPECT_NE(std::string(zcrpc_last_error()).find("ttl"), std::string::npos);
	}
	zcrpc_announce_opts_init(&o);
	o.size = 1; // shorter than any zcrpc_announce_opts
	EXPECT_EQ(zcrpc_server_announce(s, reg.c_str(), "10.0.0.1:1", &o, nullptr),
		  ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(etcd_->Count("t6/lb"), 0) << "nothing refused was put";
	// A dead registry: UNAVAILABLE at once, saying so.
	zcrpc_announce_opts_init(&o);
	uint16_t dead = FreePort();
	std::string dead_reg = "etcd:http://127.0.0.1:" + std::to_string(dead) + "/t6/lb";
	auto t0 = steady_clock::now();
	EXPECT_EQ(zcrpc_server_announce(s, dead_reg.c_str(), "10.0.0.1:1", &o, nullptr),
		  ZCRPC_UNAVAILABLE);
	EXPECT_LT(steady_clock::now() - t0, Scaled(3000));
	std::string err = zcrpc_last_error();
	EXPECT_NE(err.find("etcd: http://127.0.0.1:" + std::to_string(dead)), std::string::npos)
		<< err;
	EXPECT_NE(err.find("lease"), std::string::npos) << err;
	// A registry that answers garbage.
	FakeServer junk("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
			"Content-Length: 11\r\nConnection: close\r\n\r\nhello world");
	ASSERT_NE(junk.port(), 0);
	EXPECT_EQ(zcrpc_server_announce(s, ("etcd:" + junk.url() + "/t6/lb").c_str(), "10.0.0.1:1",
					&o, nullptr),
		  ZCRPC_UNAVAILABLE);
	err = zcrpc_last_error();
	EXPECT_NE(err.find("not a JSON object"), std::string::npos) << err;
	zcrpc_server_destroy(s);
	zcrpc_worker_destroy(w);
}

TEST_F(ResolveEtcd, AnEtcdThatIsNotThereOrAnswersGarbageFailsCallsClearlyAndTheChannelGoesAtOnce)
{
	struct Case {
		std::string what, reply, expect;
	};
	uint16_t dead = FreePort();
	std::vector<Case> cases = {
		{"nothing listens", "", ""},
		{"200 and not JSON",
		 "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n"
		 "Connection: close\r\n\r\nhello world",
		 "not a JSON object"},
		{"JSON that is not etcd's",
		 "HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\n{\"a\":[]}",
		 "not etcd's"},
		{"an HTTP error", "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n",
		 "HTTP 503"},
		{"not HTTP at all", "SSH-2.0-OpenSSH_9.2\r\n", ""},
		{"a connection closed at once", "close", ""},
	};
	for (auto &c : cases) {
		std::unique_ptr<FakeServer> fake;
		std::string ep = "http://127.0.0.1:" + std::to_string(dead);
		if (c.what != "nothing listens") {
			fake = std::make_unique<FakeServer>(c.reply);
			ASSERT_NE(fake->port(), 0);
			ep = fake->url();
		}
		LbClient cl;
		ASSERT_EQ(cl.Open("etcd:" + ep + "/t7/lb"), ZCRPC_OK) << c.what;
		zcrpc_status st;
		std::string msg = cl.FailureMessage(Scaled(5000), &st);
		std::printf("%s: %s\n", c.what.c_str(), msg.c_str());
		EXPECT_EQ(st, ZCRPC_UNAVAILABLE) << c.what;
		EXPECT_NE(msg.find("etcd: " + ep + ": "), std::string::npos) << c.what << ": " << msg;
		if (!c.expect.empty())
			EXPECT_NE(msg.find(c.expect), std::string::npos) << c.what << ": " << msg;
		EXPECT_EQ(cl.BackendCount(), 0u);
		EXPECT_LT(cl.Close(), Scaled(2000)) << c.what;
	}
	// An etcd that never answers: the destroy ends the range in flight
	// (its own time limit is 3 s) rather than wait for it.
	FakeServer mute("");
	ASSERT_NE(mute.port(), 0);
	LbClient cl;
	ASSERT_EQ(cl.Open("etcd:" + mute.url() + "/t7/lb"), ZCRPC_OK);
	auto until = steady_clock::now() + Scaled(5000);
	while (mute.accepted() == 0 && steady_clock::now() < until)
		std::this_thread::sleep_for(5ms);
	ASSERT_GT(mute.accepted(), 0);
	EXPECT_LT(cl.Close(), std::min<milliseconds>(Scaled(1000), 2500ms));
}

TEST_F(ResolveEtcd, AKeyWhoseValueIsGarbageIsIgnoredWhileTheGoodOnesWork)
{
	ASSERT_TRUE(etcd_->Put("t8/lb/aaa", "not an address"));
	ASSERT_TRUE(etcd_->Put("t8/lb/bbb", "10.0.0.1:99999"));
	StartPeers(2, "t8/lb");
	ASSERT_TRUE(etcd_->Put("t8/lb/zzz", "[::1:80"));
	LbClient cl;
	ASSERT_EQ(cl.Open(Reg("t8/lb")), ZCRPC_OK);
	ASSERT_TRUE(cl.WaitBackends(2, Scaled(5000))) << cl.BackendCount();
	ASSERT_TRUE(cl.Load(100, 8, Scaled(20000)));
	auto per = cl.PerServer();
	EXPECT_EQ(per.size(), 2u);
	EXPECT_EQ(per["s0"] + per["s1"], 100);
	// Only garbage under a prefix: a failed resolution naming a key.
	ASSERT_TRUE(etcd_->Put("t8/bad/one", "garbage"));
	LbClient bad;
	ASSERT_EQ(bad.Open(Reg("t8/bad")), ZCRPC_OK);
	zcrpc_status st;
	std::string msg = bad.FailureMessage(Scaled(5000), &st);
	EXPECT_EQ(st, ZCRPC_UNAVAILABLE);
	EXPECT_NE(msg.find("t8/bad/one"), std::string::npos) << msg;
	EXPECT_NE(msg.find("HOST:PORT"), std::string::npos) << msg;
	// Nothing under a prefix: no backend, said so.
	LbClient none;
	ASSERT_EQ(none.Open(Reg("t8/none")), ZCRPC_OK);
	msg = none.FailureMessage(Scaled(5000), &st);
	EXPECT_EQ(st, ZCRPC_UNAVAILABLE);
	EXPECT_NE(msg.find("no addresses"), std::string::npos) << msg;
}
