/* gRPC over TCP, the "what people use today" peer of zcrpc_bench_rpc: the
 * same latency, throughput and bandwidth tests against an Echo/Sink service
 * (bench/grpc/bench.proto), one JSON object per result line on stdout in
 * the format of the zcrpc programs (bench "grpc_lat", "grpc_tput",
 * "grpc_bw"), so bench/report.py reads them as source "grpc".
 *
 *   zcrpc_bench_grpc [-r both|server|client] [-a ADDR] [-p PORT]
 *                    [-m lat|tput|bw] [-s SIZES] [-n ITERS] [-w WARMUP]
 *                    [-c CONNS] [-d DEPTH] [-T SECONDS] [-B BYTES]
 *
 * -r server: a synchronous gRPC server (grpc::ServerBuilder, insecure
 *    credentials, no message size limits) until SIGTERM/SIGINT; "both"
 *    (default) runs it in this process beside the client.
 * -m lat: per size (default 16,256,4K), -n calls (after -w warm-up calls)
 *    one at a time through the blocking stub (Bench::Stub::Echo, a fresh
 *    ClientContext each), the request carrying an 8-byte sequence number
 *    that the reply must echo; round-trip percentiles.
 * -m tput: -c channels (each its own TCP connection: a local subchannel
 *    pool per channel), -d Echo calls of -s bytes (default 16) in flight
 *    per channel, all driven by ONE client thread through one completion
 *    queue (the async API: PrepareAsyncEcho/Finish, each completion starts
 *    the next call); -T seconds (default 5) after 0.5 s warm-up; calls/s.
 * -m bw: per size (default 4K..64M) Sink calls whose request carries that
 *    many payload bytes (the reply: 8 bytes), through the same async
 *    client, -d in flight (default as zcrpc_bench_rpc: up to 64, at most
 *    128 MiB in flight), about -B bytes per size (default 256M); MiB/s of
 *    payload bytes from the first call to the last reply.
 * gRPC waits in epoll (it has no busy-poll mode); TCP, no TLS. */
#include "../bench_common.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <csignal>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench.grpc.pb.h"

using zcrpc::grpcbench::Bench;
using zcrpc::grpcbench::Payload;

static std::atomic<bool> g_stop{false};
static std::string g_addr = "192.0.2.1", g_port = "18800";

static void on_signal(int) { g_stop = true; }

/* ---- server ------------------------------------------------------------- */

class BenchService final : public Bench::Service {
	grpc::Status Echo(grpc::ServerContext *, const Payload *req, Payload *rep) override
	{
		rep->set_data(req->data());
		return grpc::Status::OK;
	}
	grpc::Status Sink(grpc::ServerContext *, const Payload *req, Payload *rep) override
	{
		uint64_t n = req->data().size();

		rep->set_data(&n, sizeof(n));
		return grpc::Status::OK;
	}
};

static std::unique_ptr<grpc::Server> start_server(BenchService *svc)
{
	grpc::ServerBuilder b;

	b.AddListeningPort(g_addr + ":" + g_port, grpc::InsecureServerCredentials());
	b.RegisterService(svc);
	b.SetMaxReceiveMessageSize(-1);
	b.SetMaxSendMessageSize(-1);
	return b.BuildAndStart();
}

/* ---- client ------------------------------------------------------------- */

static std::unique_ptr<Bench::Stub> make_stub()
{
	grpc::ChannelArguments a;

	a.SetMaxReceiveMessageSize(-1);
	a.SetMaxSendMessageSize(-1);
	/* A channel of its own TCP connection (no subchannel sharing). */
	a.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
	auto ch = grpc::CreateCustomChannel(g_addr + ":" + g_port, grpc::InsecureChannelCredentials(),
					    a);
	if (!ch->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(30)))
		return nullptr;
	return Bench::NewStub(ch);
}

static int run_lat(Bench::Stub *stub, const std::vector<size_t> &sizes, long iters, long warmup)
{
	std::vector<double> lat((size_t)iters);
	Payload req, rep;
	uint64_t seq = 0;

	for (size_t s : sizes) {
		std::string data(s, 'x');

		bench_progress("  grpc lat %zu B: %ld calls\n", s, iters);
		for (long i = -warmup; i < iters; i++) {
			double t0 = bench_now_us();
			grpc::ClientContext ctx;

			seq++;
			if (s >= 8)
				memcpy(&data[0], &seq, 8);
			req.set_data(data);
			grpc::Status st = stub->Echo(&ctx, req, &rep);
			if (!st.ok() || rep.data().size() != s ||
			    (s >= 8 && memcmp(rep.data().data(), &seq, 8) != 0)) {
				fprintf(stderr, "client: Echo: %d %s (reply %zu B)\n",
					(int)st.error_code(), st.error_message().c_str(),
					rep.data().size());
				return 1;
			}
			if (i >= 0)
				lat[(size_t)i] = bench_now_us() - t0;
		}
		bench_print_lat("grpc_lat", s, lat.data(), (size_t)iters,
				"\"api\":\"grpc::Stub::Echo (blocking)\",\"poll\":\"epoll\"");
	}
	return 0;
}

/* The async client: calls on several stubs, one completion queue, one thread. */
struct Async {
	struct Call {
		grpc::ClientContext ctx;
		Payload rep;
		grpc::Status st;
		std::unique_ptr<grpc::ClientAsyncResponseReader<Payload>> rpc;
		size_t chan;
	};
	std::vector<std::unique_ptr<Bench::Stub>> stubs;
	grpc::CompletionQueue cq;
	Payload req;
	bool sink = false;
	long started = 0, done = 0, failed = 0;

	void start(size_t chan)
	{
		Call *c = new Call;

		c->chan = chan;
		c->rpc = sink ? stubs[chan]->PrepareAsyncSink(&c->ctx, req, &cq)
			      : stubs[chan]->PrepareAsyncEcho(&c->ctx, req, &cq);
		c->rpc->StartCall();
		c->rpc->Finish(&c->rep, &c->st, c);
		started++;
	}
	/* Waits for one completion; returns its channel, or -1 on failure. */
	long complete()
	{
		void *tag;
		bool ok;

		if (!cq.Next(&tag, &ok))
			return -1;
		Call *c = static_cast<Call *>(tag);
		long chan = (long)c->chan;
		if (!ok || !c->st.ok()) {
			if (failed++ < 5)
				fprintf(stderr, "client: call: %d %s\n", (int)c->st.error_code(),
					c->st.error_message().c_str());
			chan = -1;
		} else {
			done++;
		}
		delete c;
		return chan;
	}
	void drain()
	{
		while (done + failed < started)
			complete();
	}
	~Async()
	{
		void *tag;
		bool ok;

		cq.Shutdown();
		while (cq.Next(&tag, &ok))
			delete static_cast<Call *>(tag);
	}
};

static int run_tput(Async &as, size_t size, long depth, double secs)
{
	size_t nch = as.stubs.size();
	long d0, d1;
	double t0, t1 = 0, end;

	bench_progress("  grpc tput %zu B: %zu conn x %ld in flight, %.1f s\n", size, nch, depth,
		       secs);
	as.req.set_data(std::string(size, 'x'));
	for (size_t i = 0; i < nch; i++)
		for (long k = 0; k < depth; k++)
			as.start(i);
	t0 = bench_now_us();
	for (;;) {
		long ch = as.complete();
		if (ch < 0)
			break;
		t1 = bench_now_us();
		if (t1 - t0 >= 5e5)
			break;
		as.start((size_t)ch);
	}
	d0 = as.done;
	t0 = bench_now_us();
	end = t0 + secs * 1e6;
	for (;;) {
		long ch = as.complete();
		if (ch < 0)
			break;
		t1 = bench_now_us();
		if (t1 >= end)
			break;
		as.start((size_t)ch);
	}
	d1 = as.done;
	as.drain();
	if (as.failed) {
		fprintf(stderr, "client: %ld calls failed\n", as.failed);
		return 1;
	}
	printf("{\"bench\":\"grpc_tput\",\"size\":%zu,\"conns\":%zu,\"depth\":%ld,"
	       "\"secs\":%.3f,\"calls\":%ld,\"calls_per_s\":%.1f,"
	       "\"client\":\"async completion queue, 1 thread\"}\n",
	       size, nch, depth, (t1 - t0) / 1e6, d1 - d0, (double)(d1 - d0) / ((t1 - t0) / 1e6));
	fflush(stdout);
	return 0;
}

static int run_bw(Async &as, const std::vector<size_t> &sizes, double total, long depth_opt)
{
	as.sink = true;
	for (size_t size : sizes) {
		long n = bench_bulk_iters(size, total, 2, 100000);
		long depth = depth_opt > 0 ? depth_opt : bench_bulk_iters(size, 128.0 * 1048576, 2, 64);
		double t0, dt;

		if (depth > n)
			depth = n;
		as.req.set_data(std::string(size, '\xa5'));
		as.started = as.done = as.failed = 0;
		bench_progress("  grpc bw %zu B: %ld calls, %ld in flight\n", size, n, depth);
		t0 = bench_now_us();
		for (long i = 0; i < depth; i++)
			as.start(0);
		while (as.done + as.failed < n) {
			long ch = as.complete();
			if (ch < 0)
				break;
			if (as.started < n)
				as.start(0);
		}
		dt = (bench_now_us() - t0) / 1e6;
		as.drain();
		if (as.failed || as.done != n) {
			fprintf(stderr, "client: %ld calls failed\n", as.failed);
			return 1;
		}
		printf("{\"bench\":\"grpc_bw\",\"size\":%zu,\"iters\":%ld,"
		       "\"depth\":%ld,\"secs\":%.4f,\"mib_s\":%.3f,\"calls_per_s\":%.1f}\n",
		       size, n, depth, dt, (double)size * (double)n / 1048576.0 / dt,
		       (double)n / dt);
		fflush(stdout);
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *role = "both", *mode = "lat", *sizes_arg = nullptr;
	size_t sizes_a[BENCH_MAX_SIZES];
	long iters = 10000, warmup = 1000, depth = 0;
	double secs = 5, total = 256.0 * 1048576;
	int nsizes, opt, rc = 1, nch = 1;
	BenchService svc;
	std::unique_ptr<grpc::Server> server;

	while ((opt = getopt(argc, argv, "r:a:p:m:s:n:w:c:d:T:B:h")) != -1) {
		switch (opt) {
		case 'r': role = optarg; break;
		case 'a': g_addr = optarg; break;
		case 'p': g_port = optarg; break;
		case 'm': mode = optarg; break;
		case 's': sizes_arg = optarg; break;
		case 'n': iters = atol(optarg); break;
		case 'w': warmup = atol(optarg); break;
		case 'c': nch = atoi(optarg); break;
		case 'd': depth = atol(optarg); break;
		case 'T': secs = atof(optarg); break;
		case 'B': total = atof(optarg); break;
		default:
			fprintf(stderr, "usage: %s [-r both|server|client] [-a ADDR] [-p PORT] "
				"[-m lat|tput|bw] [-s SIZES] [-n ITERS] [-w WARMUP] [-c CONNS] "
				"[-d DEPTH] [-T SECONDS] [-B BYTES]\n", argv[0]);
			return opt == 'h' ? 0 : 2;
		}
	}
	std::string m = mode;
	if (!sizes_arg)
		sizes_arg = m == "bw" ? "4K,64K,256K,1M,4M,8M,16M,64M" : m == "lat" ? "16,256,4K" : "16";
	nsizes = bench_parse_sizes(sizes_arg, sizes_a, BENCH_MAX_SIZES);
	if (nsizes < 1 || iters < 1 || warmup < 0 || nch < 1 || nch > 64 || secs <= 0 ||
	    (m != "lat" && m != "tput" && m != "bw")) {
		fprintf(stderr, "bad arguments\n");
		return 2;
	}
	std::vector<size_t> sizes(sizes_a, sizes_a + nsizes);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);

	if (!strcmp(role, "server") || !strcmp(role, "both")) {
		server = start_server(&svc);
		if (!server) {
			fprintf(stderr, "server: cannot listen on %s:%s\n", g_addr.c_str(),
				g_port.c_str());
			return 1;
		}
		fprintf(stderr, "server: listening on %s:%s (gRPC %s)\n", g_addr.c_str(),
			g_port.c_str(), grpc::Version().c_str());
	}
	if (!strcmp(role, "server")) {
		while (!g_stop)
			bench_sleep_us(100000);
		server->Shutdown();
		return 0;
	}

	if (m == "lat") {
		auto stub = make_stub();
		if (!stub) {
			fprintf(stderr, "client: cannot connect to %s:%s\n", g_addr.c_str(),
				g_port.c_str());
			goto out;
		}
		rc = run_lat(stub.get(), sizes, iters, warmup);
	} else {
		Async as;

		if (m == "bw")
			nch = 1;
		for (int i = 0; i < nch; i++) {
			as.stubs.push_back(make_stub());
			if (!as.stubs.back()) {
				fprintf(stderr, "client: cannot connect to %s:%s\n", g_addr.c_str(),
					g_port.c_str());
				goto out;
			}
		}
		bench_progress("client: %d channel(s) connected\n", nch);
		rc = m == "tput" ? run_tput(as, sizes[0], depth > 0 ? depth : 64, secs)
				 : run_bw(as, sizes, total, depth);
	}
	if (rc == 0) {
		printf("{\"bench\":\"grpc_stats\",\"mode\":\"%s\",\"grpc_version\":\"%s\","
		       "\"transport\":\"TCP (HTTP/2, insecure)\",\"server\":\"sync\"}\n",
		       mode, grpc::Version().c_str());
		fflush(stdout);
	}
out:
	if (server)
		server->Shutdown();
	return rc;
}
