#include "rdma2_env.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "rdma_env.h"

static std::string Env(const char *name)
{
	const char *v = std::getenv(name);
	return v ? v : "";
}

Rxe2Env GetRxe2Env()
{
	return {Env("ZCRPC_VMCTL"), Env("ZCRPC_RXE2_DEV"), Env("ZCRPC_RXE2_ADDR_SELF"),
		Env("ZCRPC_RXE2_ADDR_PEER")};
}

int Shell(const std::string &cmd, std::string *out)
{
	FILE *p = popen((cmd + " 2>&1").c_str(), "r");
	if (!p)
		return -1;
	std::string text;
	char buf[4096];
	size_t n;
	while ((n = fread(buf, 1, sizeof(buf), p)) > 0)
		text.append(buf, n);
	int st = pclose(p);
	if (out)
		*out = text;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

int VmCtl(const std::string &args, std::string *out)
{
	return Shell(GetRxe2Env().vmctl + " " + args, out);
}

int64_t LocalCounter(const std::string &dev, const char *name)
{
	return DevCounter(dev, name);
}

int64_t PeerCounter(const std::string &dev, const char *name)
{
	std::string out;
	if (VmCtl("peer-run cat /sys/class/infiniband/" + dev + "/ports/1/hw_counters/" + name,
		  &out) != 0)
		return -1;
	return std::atoll(out.c_str());
}

std::chrono::milliseconds Scaled(double ms)
{
	return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(ms * TimeScale())));
}

int64_t NumberAfter(const std::string &text, const std::string &key)
{
	size_t at = text.find(key);
	if (at == std::string::npos)
		return -1;
	return std::atoll(text.c_str() + at + key.size());
}

void Rdma2Test::SetUp()
{
	env_ = GetRxe2Env();
	ASSERT_FALSE(env_.vmctl.empty() || env_.dev.empty() || env_.self.empty() ||
		     env_.peer.empty())
		<< "ZCRPC_VMCTL/ZCRPC_RXE2_DEV/ZCRPC_RXE2_ADDR_SELF/ZCRPC_RXE2_ADDR_PEER unset: "
		   "run the rdma2 tests through scripts/rxe-vm --two (two guests)";
	ASSERT_EQ(access(env_.vmctl.c_str(), X_OK), 0) << env_.vmctl << " is not executable";
	int n = 0;
	ibv_device **list = ibv_get_device_list(&n);
	bool found = false;
	for (int i = 0; list && i < n; i++)
		found |= env_.dev == ibv_get_device_name(list[i]);
	if (list)
		ibv_free_device_list(list);
	ASSERT_TRUE(found) << "RDMA device " << env_.dev << " not present (" << n
			   << " devices found)";
}

void Rdma2Test::TearDown()
{
	if (touched_peer_) {
		EXPECT_EQ(VmCtl("thaw-peer"), 0);
		EXPECT_EQ(VmCtl("link-up"), 0);
	}
	if (netem_) {
		Shell("tc qdisc del dev eth0 root");
		VmCtl("peer-run tc qdisc del dev eth0 root");
	}
	if (nft_)
		VmCtl("peer-run nft delete table inet zcrpc_rdma2");
}

PeerServer::PeerServer(const Rxe2Env &env, int port, const std::string &opts) : port_(port)
{
	std::string cmd = "peer-run --bg " ZCRPC_RDMA2_PEER_SERVER " -a " + env.peer + " -p " +
			  std::to_string(port) + " " + opts;
	std::string out;
	if (VmCtl(cmd, &out) != 0) {
		ADD_FAILURE() << "peer-run failed: " << out;
		return;
	}
	handle_ = out.substr(0, out.find('\n'));
	// Wait until it listens (or exits).
	auto end = std::chrono::steady_clock::now() + Scaled(60000);
	while (std::chrono::steady_clock::now() < end) {
		VmCtl("peer-out " + handle_, &out);
		if (out.find("listening on") != std::string::npos) {
			ok_ = true;
			return;
		}
		std::string st;
		VmCtl("peer-status " + handle_, &st);
		if (st.rfind("running", 0) != 0) {
			VmCtl("peer-err " + handle_, &st);
			ADD_FAILURE() << "peer server exited: " << out << st;
			stopped_ = true;
			return;
		}
		std::this_thread::sleep_for(std::chrono::milliseconds(200));
	}
	ADD_FAILURE() << "peer server did not listen within 60 s (scaled)";
}

std::string PeerServer::Stop()
{
	if (stopped_ || handle_.empty())
		return out_;
	stopped_ = true;
	VmCtl("peer-kill " + handle_ + " TERM");
	if (VmCtl("peer-wait " + handle_ + " 30", &out_) == 124) {
		VmCtl("peer-kill " + handle_ + " KILL");
		VmCtl("peer-wait " + handle_ + " 30", &out_);
	}
	return out_;
}

void PeerServer::Kill(const std::function<int(const std::string &)> &ctl)
{
	if (stopped_ || handle_.empty())
		return;
	stopped_ = true;
	if (ctl)
		ctl("peer-kill " + handle_ + " KILL");
	else
		VmCtl("peer-kill " + handle_ + " KILL");
	VmCtl("peer-wait " + handle_ + " 30", &out_);
}

PeerServer::~PeerServer()
{
	Stop();
}

uint32_t EchoMethod()
{
	return zcrpc_method_id("/zcrpc.test.Peer/Echo");
}

uint32_t HoldMethod()
{
	return zcrpc_method_id("/zcrpc.test.Peer/Hold");
}

zcrpc_worker_opts ClientWorkerOpts(uint32_t keepalive_ms)
{
	zcrpc_worker_opts o;
	zcrpc_worker_opts_init(&o);
	o.ack_timeout_exp = 14;
	o.retry_count = 6;
	o.keepalive_ms = keepalive_ms;
	return o;
}

double RetryRoundMs(const zcrpc_worker_opts &o)
{
	return (o.retry_count + 1) * 4.096e-3 * std::ldexp(1.0, o.ack_timeout_exp);
}
