/* Shared helpers of the zcrpc benchmark programs: clock, percentiles, size
 * lists, one-JSON-object-per-line output. Header-only, static functions. */
#ifndef ZCRPC_BENCH_COMMON_H
#define ZCRPC_BENCH_COMMON_H

#ifndef _GNU_SOURCE /* g++ defines it (bench/grpc is C++) */
#define _GNU_SOURCE
#endif
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BENCH_MAX_SIZES 32

static inline double bench_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* With ZCRPC_BENCH_PIN=1, pins the calling thread to @cpu (server thread
 * 1, client 0) when the machine has more than one CPU. Off by default: in
 * the TCG guest it did not remove the 4 ms-tick stalls (bench/README.md). */
static inline void bench_pin(int cpu)
{
	cpu_set_t set;
	const char *e = getenv("ZCRPC_BENCH_PIN");

	if (!e || *e != '1' || sysconf(_SC_NPROCESSORS_ONLN) < 2)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) != 0)
		perror("sched_setaffinity");
}

static inline void bench_sleep_us(long us)
{
	struct timespec ts = {us / 1000000, (us % 1000000) * 1000};

	nanosleep(&ts, NULL);
}

static int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* The sample at quantile @q of sorted @v (nearest rank). */
static inline double bench_quantile(const double *v, size_t n, double q)
{
	size_t k = (size_t)((double)n * q + 0.999999);

	if (k < 1)
		k = 1;
	if (k > n)
		k = n;
	return v[k - 1];
}

/* Sorts @v and prints one latency line as JSON on stdout. */
static inline void bench_print_lat(const char *bench, size_t size, double *v,
				   size_t n, const char *extra)
{
	double sum = 0;
	size_t i;

	qsort(v, n, sizeof(*v), bench_cmp_double);
	for (i = 0; i < n; i++)
		sum += v[i];
	printf("{\"bench\":\"%s\",\"size\":%zu,\"iters\":%zu,"
	       "\"rtt_min_us\":%.3f,\"rtt_p50_us\":%.3f,\"rtt_avg_us\":%.3f,"
	       "\"rtt_p99_us\":%.3f,\"rtt_p999_us\":%.3f,\"rtt_max_us\":%.3f%s%s}\n",
	       bench, size, n, v[0], bench_quantile(v, n, 0.5), sum / (double)n,
	       bench_quantile(v, n, 0.99), bench_quantile(v, n, 0.999), v[n - 1],
	       extra && *extra ? "," : "", extra ? extra : "");
	fflush(stdout);
}

/* "16,256,4K,1M" -> sizes; returns the count, or -1 on a bad list. */
static inline int bench_parse_sizes(const char *s, size_t *out, int max)
{
	int n = 0;

	while (*s) {
		char *end;
		unsigned long long v = strtoull(s, &end, 10);

		if (end == s || n == max)
			return -1;
		if (*end == 'K' || *end == 'k')
			v <<= 10, end++;
		else if (*end == 'M' || *end == 'm')
			v <<= 20, end++;
		out[n++] = (size_t)v;
		if (*end == ',')
			end++;
		else if (*end)
			return -1;
		s = end;
	}
	return n;
}

/* Iterations for a bulk size: about @total bytes, clamped to [lo, hi]. */
static inline long bench_bulk_iters(size_t size, double total, long lo, long hi)
{
	long n = (long)(total / (double)size);

	return n < lo ? lo : n > hi ? hi : n;
}

static inline void bench_progress(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fflush(stderr);
}

#endif
