#include "fault_util.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rdma_env.h"

extern char **environ;

using namespace std::chrono;

std::map<std::string, int64_t> RdmaResources()
{
	std::map<std::string, int64_t> m;
	FILE *f = popen("rdma resource show 2>/dev/null", "r");
	if (!f)
		return m;
	char line[512];
	bool any = false;
	while (fgets(line, sizeof(line), f)) {
		// "0: rxe0: pd 1 cq 2 qp 1 cm_id 0 mr 0 ctx 0 srq 0"
		std::istringstream in(line);
		std::string idx, dev, key;
		in >> idx >> dev;
		int64_t v;
		while (in >> key >> v) {
			m[key] += v;
			any = true;
		}
	}
	if (pclose(f) != 0 || !any)
		m.clear();
	return m;
}

std::string ResourceDetail()
{
	std::string out;
	FILE *f = popen("rdma resource show pd 2>&1; rdma resource show qp 2>&1 | grep -v 'qpn 1 '", "r");
	if (!f)
		return out;
	char line[512];
	while (fgets(line, sizeof(line), f))
		out += line;
	pclose(f);
	return out;
}

std::string ResourcesStr(const std::map<std::string, int64_t> &m)
{
	std::string s;
	for (auto &kv : m)
		s += kv.first + " " + std::to_string(kv.second) + " ";
	return s.empty() ? "(rdma resource show failed)" : s;
}

bool SameResources(const std::map<std::string, int64_t> &a,
		   const std::map<std::string, int64_t> &b)
{
	if (a.empty() || b.empty())
		return false;
	for (const char *k : {"pd", "cq", "qp", "cm_id", "mr"}) {
		auto x = a.find(k), y = b.find(k);
		if (x == a.end() || y == b.end() || x->second != y->second)
			return false;
	}
	return true;
}

std::map<std::string, int64_t> WaitResources(const std::map<std::string, int64_t> &base,
					     milliseconds timeout)
{
	auto until = steady_clock::now() + timeout;
	std::map<std::string, int64_t> now = RdmaResources();
	while (!SameResources(base, now) && steady_clock::now() < until) {
		std::this_thread::sleep_for(50ms);
		now = RdmaResources();
	}
	return now;
}

milliseconds ScaledMs(int ms)
{
	return milliseconds(static_cast<int64_t>(ms * TimeScale()));
}

std::string FaultPeer()
{
	const char *v = std::getenv("ZCRPC_TEST_FAULT_PEER");
	return v && *v ? v : ZCRPC_TEST_FAULT_PEER;
}

bool SpawnChild(const std::vector<std::string> &args, bool capture_stdout, Child *out)
{
	std::vector<char *> argv;
	for (auto &a : args)
		argv.push_back(const_cast<char *>(a.c_str()));
	argv.push_back(nullptr);
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	int p[2] = {-1, -1};
	if (capture_stdout) {
		if (pipe2(p, O_CLOEXEC))
			return false;
		posix_spawn_file_actions_adddup2(&fa, p[1], 1);
	}
	pid_t pid;
	int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
	posix_spawn_file_actions_destroy(&fa);
	if (capture_stdout)
		close(p[1]);
	if (rc) {
		if (capture_stdout)
			close(p[0]);
		return false;
	}
	out->pid = pid;
	out->out_fd = p[0];
	return true;
}

std::string Child::ReadLine(milliseconds timeout)
{
	auto until = steady_clock::now() + timeout;
	for (;;) {
		auto nl = buffered.find('\n');
		if (nl != std::string::npos) {
			std::string line = buffered.substr(0, nl);
			buffered.erase(0, nl + 1);
			return line;
		}
		auto left = duration_cast<milliseconds>(until - steady_clock::now()).count();
		if (left <= 0 || out_fd < 0)
			return "";
		pollfd pfd{out_fd, POLLIN, 0};
		if (poll(&pfd, 1, static_cast<int>(left)) <= 0)
			continue;
		char buf[512];
		ssize_t n = read(out_fd, buf, sizeof(buf));
		if (n <= 0)
			return "";
		buffered.append(buf, static_cast<size_t>(n));
	}
}

int Child::Kill()
{
	if (pid <= 0)
		return -1;
	kill(pid, SIGKILL);
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
	}
	pid = -1;
	return st;
}

int Child::Wait(milliseconds timeout)
{
	if (pid <= 0)
		return -1;
	auto until = steady_clock::now() + timeout;
	int st = 0;
	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid) {
			pid = -1;
			return st;
		}
		if (steady_clock::now() >= until)
			return Kill();
		std::this_thread::sleep_for(10ms);
	}
}

Child::~Child()
{
	if (pid > 0)
		Kill();
	if (out_fd >= 0)
		close(out_fd);
}

bool SoakServer::Start(const std::string &addr, const zcrpc_server_opts *o)
{
	if (zcrpc_worker_create(nullptr, &w_) != ZCRPC_OK ||
	    zcrpc_server_create(w_, o, &s_) != ZCRPC_OK)
		return false;
	ss_ = soak_server_new(s_);
	if (!ss_ || zcrpc_server_listen(s_, addr.c_str(), "0") != ZCRPC_OK)
		return false;
	thread_ = std::thread([this] {
		while (!stop_.load()) {
			if (auto *job = job_.load()) {
				(*job)();
				job_ = nullptr;
			}
			if (paused.load()) {
				std::this_thread::sleep_for(1ms);
				continue;
			}
			zcrpc_worker_progress(w_, 1);
			soak_server_tick(ss_);
		}
	});
	return true;
}

void SoakServer::Run(const std::function<void()> &fn)
{
	if (!thread_.joinable()) {
		fn();
		return;
	}
	job_ = &fn;
	while (job_.load())
		std::this_thread::sleep_for(1ms);
}

void SoakServer::Stop()
{
	stop_ = true;
	if (thread_.joinable())
		thread_.join();
}

SoakServer::~SoakServer()
{
	Stop();
	soak_server_free(ss_);
	zcrpc_server_destroy(s_);
	zcrpc_worker_destroy(w_);
}
