#include "rdma_env.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <csignal>

#include <dirent.h>
#include <execinfo.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#ifndef __SANITIZE_ADDRESS__ /* ASan's own report says more */
namespace {
// A test process that crashes prints its stack before it dies (ctest shows
// the output; the guests keep no core files): frames as binary(+offset),
// which addr2line -e on the same build resolves.
void OnFatal(int sig)
{
	static const char msg[] = "\n*** fatal signal, the stack:\n";
	void *bt[64];
	ssize_t r = write(2, msg, sizeof(msg) - 1);
	(void)r;
	backtrace_symbols_fd(bt, backtrace(bt, 64), 2);
	std::signal(sig, SIG_DFL);
	std::raise(sig);
}

struct FatalStack {
	FatalStack()
	{
		void *bt[1];
		backtrace(bt, 1); // loads what backtrace needs now, not in the handler
		std::signal(SIGSEGV, OnFatal);
		std::signal(SIGBUS, OnFatal);
	}
} fatal_stack;
} // namespace
#endif

static std::string Env(const char *name)
{
	const char *v = std::getenv(name);
	return v ? v : "";
}

RxeEnv GetRxeEnv()
{
	return {Env("ZCRPC_RXE_DEV0"),	    Env("ZCRPC_RXE_DEV1"),
		Env("ZCRPC_RXE_ADDR0"),	    Env("ZCRPC_RXE_ADDR1"),
		Env("ZCRPC_RXE_UNREACHABLE"), Env("ZCRPC_RXE_ADDR0_V6"),
		Env("ZCRPC_RXE_ADDR1_V6"),
		Env("ZCRPC_RXE_PROVIDER").empty() ? std::string("rxe")
						  : Env("ZCRPC_RXE_PROVIDER")};
}

bool MaskHas(const char *token)
{
	std::string caps = "," + Env("ZCRPC_DEVICE_CAPS") + ",";
	return caps.find("," + std::string(token) + ",") != std::string::npos;
}

double TimeScale()
{
	const char *v = std::getenv("ZCRPC_TEST_TIME_SCALE");
	double s = v ? std::atof(v) : 1.0;
	return s > 0 ? s : 1.0;
}

static int64_t ReadCounter(const std::string &dev, const char *name)
{
	std::ifstream f("/sys/class/infiniband/" + dev + "/ports/1/hw_counters/" + name);
	int64_t v = -1;
	if (!(f >> v))
		return -1;
	return v;
}

// The guest's TCP segment counter @field ("OutSegs", "InSegs") from
// /proc/net/snmp (-1 if unreadable).
static int64_t TcpCounter(const char *field)
{
	std::ifstream f("/proc/net/snmp");
	std::string names, values;
	while (std::getline(f, names) && std::getline(f, values)) {
		if (names.rfind("Tcp:", 0) != 0)
			continue;
		std::istringstream n(names), v(values);
		std::string key, val;
		while (n >> key && v >> val)
			if (key == field)
				return std::stoll(val);
	}
	return -1;
}

int64_t DevCounter(const std::string &dev, const char *name)
{
	// siw has no hw_counters: it carries RDMA over the kernel's TCP, so
	// the guest's TCP segments stand in for its packets (machine-wide).
	if (dev.rfind("siw", 0) == 0) {
		if (std::strcmp(name, "sent_pkts") == 0)
			return TcpCounter("OutSegs");
		if (std::strcmp(name, "rcvd_pkts") == 0)
			return TcpCounter("InSegs");
	}
	return ReadCounter(dev, name);
}

int64_t RxeCounter(const RxeEnv &env, const char *name)
{
	if (env.provider == "siw") // one machine-wide TCP counter for both
		return DevCounter(env.dev0, name);
	int64_t a = ReadCounter(env.dev0, name), b = ReadCounter(env.dev1, name);
	if (a < 0 || b < 0)
		return -1;
	return a + b;
}

void RdmaTest::SetUp()
{
	env_ = GetRxeEnv();
	ASSERT_FALSE(env_.addr0.empty() || env_.dev0.empty() || env_.dev1.empty())
		<< "ZCRPC_RXE_ADDR0/DEV0/DEV1 unset: run the rdma tests through "
		   "scripts/rxe-vm (they need Soft-RoCE)";
	int n = 0;
	ibv_device **list = ibv_get_device_list(&n);
	bool found0 = false, found1 = false;
	for (int i = 0; list && i < n; i++) {
		found0 |= env_.dev0 == ibv_get_device_name(list[i]);
		found1 |= env_.dev1 == ibv_get_device_name(list[i]);
	}
	if (list)
		ibv_free_device_list(list);
	ASSERT_TRUE(found0 && found1) << "RDMA devices " << env_.dev0 << "/" << env_.dev1
				      << " not present (" << n << " devices found)";
}

bool ProgressUntil(zcrpc_worker *w, const std::function<bool()> &done,
		   std::chrono::milliseconds timeout)
{
	// The answer is the check that ended the loop: asking again could
	// read a condition that held and then stopped holding (another
	// thread's counters) and report false at once.
	auto end = std::chrono::steady_clock::now() + timeout;
	for (;;) {
		if (done())
			return true;
		if (std::chrono::steady_clock::now() >= end)
			return false;
		zcrpc_worker_progress(w, 0);
	}
}

EchoServer::EchoServer(const std::string &addr, const zcrpc_worker_opts *opts)
{
	if (zcrpc_worker_create(opts, &w_) != ZCRPC_OK)
		return;
	zcrpc_listen_opts lo;
	zcrpc_listen_opts_init(&lo);
	zcrpc_conn_handlers lh;
	zcrpc_conn_handlers_init(&lh);
	lo.on_accept = OnAccept;
	lo.arg = this;
	lh.on_recv = OnRecv;
	lh.on_state = OnState;
	lh.arg = this;
	lo.conn_handlers = &lh;
	if (zcrpc_listen(w_, addr.c_str(), "0", &lo, &l_) != ZCRPC_OK)
		return;
	port_ = zcrpc_listener_get_port(l_);
	ok_ = port_ != 0;
	thread_ = std::thread([this] {
		while (!stop_.load(std::memory_order_relaxed))
			zcrpc_worker_progress(w_, 0);
	});
}

EchoServer::~EchoServer()
{
	stop_ = true;
	if (thread_.joinable())
		thread_.join();
	zcrpc_listener_destroy(l_);
	zcrpc_worker_destroy(w_);
}

void EchoServer::OnAccept(zcrpc_listener *, zcrpc_conn *, void *arg)
{
	static_cast<EchoServer *>(arg)->accepted_++;
}

void EchoServer::OnRecv(zcrpc_conn *c, const void *data, size_t len, void *arg)
{
	auto *s = static_cast<EchoServer *>(arg);
	if (zcrpc_conn_send(c, data, len) == ZCRPC_OK)
		s->echoed_++;
	else
		zcrpc_conn_close(c);
}

void EchoServer::OnState(zcrpc_conn *c, zcrpc_conn_state st, zcrpc_status status, void *arg)
{
	auto *s = static_cast<EchoServer *>(arg);
	if (st != ZCRPC_CONN_CLOSED)
		return;
	s->last_close_ = status;
	s->closed_++;
	zcrpc_conn_destroy(c);
}

// ---- diagnostics of a failed test ------------------------------------------

static void ReadDir(const std::string &dir, const std::string &prefix, DevCounters &out)
{
	DIR *d = opendir(dir.c_str());
	if (!d)
		return;
	while (struct dirent *e = readdir(d)) {
		if (e->d_name[0] == '.')
			continue;
		std::ifstream f(dir + "/" + e->d_name);
		int64_t v;
		if (f >> v)
			out[prefix + e->d_name] = v;
	}
	closedir(d);
}

DevCounters SnapshotDevCounters()
{
	static const char *const groups[] = {"cm_tx_msgs", "cm_rx_msgs", "cm_tx_retries",
					     "cm_rx_duplicates", "hw_counters"};
	DevCounters out;
	DIR *d = opendir("/sys/class/infiniband");
	if (!d)
		return out;
	while (struct dirent *e = readdir(d)) {
		if (e->d_name[0] == '.')
			continue;
		std::string port = std::string("/sys/class/infiniband/") + e->d_name + "/ports/1/";
		for (const char *g : groups)
			ReadDir(port + g, std::string(e->d_name) + " " + g + "/", out);
	}
	closedir(d);
	return out;
}

std::string CountersMoved(const DevCounters &before, const DevCounters &after)
{
	std::string s;
	for (const auto &kv : after) {
		auto it = before.find(kv.first);
		int64_t d = kv.second - (it == before.end() ? 0 : it->second);
		if (d == 0)
			continue;
		if (!s.empty())
			s += ' ';
		s += kv.first + (d > 0 ? " +" : " ") + std::to_string(d);
	}
	return s;
}

// The first @max_lines lines of @cmd's output (the guest has iproute2's rdma).
static std::string CommandOutput(const char *cmd, int max_lines)
{
	std::string out;
	FILE *p = popen(cmd, "r");
	if (!p)
		return "(cannot run it)\n";
	char line[512];
	int n = 0;
	while (fgets(line, sizeof(line), p))
		if (n++ < max_lines)
			out += line;
	pclose(p);
	if (n > max_lines)
		out += "(" + std::to_string(n - max_lines) + " more lines)\n";
	return out;
}

std::string RdmaDiagnostics(const DevCounters &since)
{
	std::string moved = CountersMoved(since, SnapshotDevCounters());
	return "device counters moved since the test began: " +
	       (moved.empty() ? std::string("none") : moved) + "\nrdma resource show cm_id:\n" +
	       CommandOutput("rdma resource show cm_id 2>&1", 40) +
	       "rdma resource show qp:\n" + CommandOutput("rdma resource show qp 2>&1", 40);
}

namespace {

// Prints RdmaDiagnostics at a test's first failure, while what the test
// made is still alive: the next CI failure says where a connect stopped.
class FailureDiagnostics : public ::testing::EmptyTestEventListener {
	void OnTestStart(const ::testing::TestInfo &) override
	{
		before_ = SnapshotDevCounters();
		reported_ = false;
	}
	void OnTestPartResult(const ::testing::TestPartResult &r) override
	{
		if (!r.failed() || reported_)
			return;
		reported_ = true;
		std::fprintf(stderr, "[rdma diagnostics at the first failure]\n%s",
			     RdmaDiagnostics(before_).c_str());
	}
	DevCounters before_;
	bool reported_ = false;
};

[[maybe_unused]] const bool registered = [] {
	if (Env("ZCRPC_RXE_DEV0").empty()) // not in a guest: nothing to read
		return false;
	::testing::UnitTest::GetInstance()->listeners().Append(new FailureDiagnostics);
	return true;
}();

} // namespace
