/* NUMA microbenchmarks for the calibration bundle (PaStiX method, INRIA RR-7498):
 * a thread bound to a core of NUMA node T runs a kernel on data first-touched
 * on NUMA node D; the T x D matrix, alone and with every core busy, gives the
 * cost of remote data per kernel. Also STREAM-like triad bandwidth T x D.
 *
 *   numa_bench kernel --kernel dgemm|dtrsm|dgetrf_nopiv|daxpy --b B --reps R
 *                     [--load alone|all]
 *   numa_bench bandwidth --mb MB --reps R
 *   numa_bench penalty --b B --reps R [--copies auto|none]
 *   numa_bench copies --node D --seconds S
 *
 * penalty: the remote BLAS 3 penalty of the LU's kernels (dgemm, dtrsm, dgetrf_nopiv) at tile B
 * with every core busy (docs/blas3-remote-penalty.md): for each ordered pair of NUMA nodes
 * (T, D != T), the median call time of T's threads on data of D over that on data of T, all
 * other cores running the same kernel on their own node's data. With --copies auto (default)
 * and a CUDA device, the same cells again while every GPU copies 64 MiB back and forth between
 * its memory and a pinned buffer on node D (cudaMemcpy, the CUDA runtime opened with dlopen:
 * no CUDA at build time). Exit 3, with a message, on one NUMA node: there is no remote memory.
 * copies: the host<->GPU copy rate alone from a buffer on node D (exit 3 without a CUDA device).
 * Exit status: 0 done, 1 a failure (allocation, affinity, a CUDA copy), 2 bad arguments, 3 nothing
 * to measure here (penalty: one NUMA node; copies: no CUDA device). NUMA_BENCH_NODES="0-7;8-15"
 * replaces the NUMA layout read from sysfs (to run the several-node cells on a one-node machine).
 *
 * Output: CSV on stdout, one row per (T, D) cell, header first; GF/s from the
 * median call time, rel_std = standard deviation / mean over all calls.
 * Binding with sched_setaffinity, placement by first touch (no libnuma), NUMA
 * layout from /sys/devices/system/node. Tiles are cycled through a pool larger
 * than twice the last-level cache so that each call reads from memory, as LU
 * tasks do, not from a warm cache. */
#define _GNU_SOURCE
#include <cblas.h>
#include <dirent.h>
#include "cudart_dlopen.h"
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

extern void openblas_set_num_threads(int);

#define MAX_CPUS 1024
#define MAX_NODES 64

/* ------------------------------------------------------------------ topology */

static int nnodes;
static int node_cpus[MAX_NODES][MAX_CPUS]; /* one PU per physical core */
static int node_ncpus[MAX_NODES];
static long llc_bytes = 32L << 20;

static int parse_cpulist(const char *s, int *out, int max)
{
	int n = 0;
	while (*s && *s != '\n') {
		char *end;
		long a = strtol(s, &end, 10), b = a;
		if (end == s)
			break;
		if (*end == '-')
			b = strtol(end + 1, &end, 10);
		for (long c = a; c <= b && n < max; c++)
			out[n++] = (int)c;
		s = *end == ',' ? end + 1 : end;
	}
	return n;
}

static int read_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	int ok = fgets(buf, (int)len, f) != NULL;
	fclose(f);
	return ok ? 0 : -1;
}

/* The first PU of a core stands for the core: other hyperthreads are skipped. */
static int is_first_thread(int cpu)
{
	char path[128], buf[256];
	int sib[MAX_CPUS];
	snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", cpu);
	if (read_line(path, buf, sizeof buf))
		return 1;
	return parse_cpulist(buf, sib, MAX_CPUS) == 0 || sib[0] == cpu;
}

static void read_topology(void)
{
	cpu_set_t allowed;
	sched_getaffinity(0, sizeof allowed, &allowed);
	char path[128], buf[4096];
	/* NUMA_BENCH_NODES="0-3;4-7" replaces the NUMA layout read from sysfs (CPU lists of nodes 0, 1,
	 * ...): it exercises the cells of several nodes on a one-node machine, where "remote" data is
	 * then as local as the rest (its penalties are about 1). */
	const char *fake = getenv("NUMA_BENCH_NODES");
	for (int k = 0; fake && *fake && k < MAX_NODES; k++) {
		int cpus[MAX_CPUS], n = parse_cpulist(fake, cpus, MAX_CPUS);
		node_ncpus[k] = 0;
		for (int i = 0; i < n; i++)
			if (CPU_ISSET(cpus[i], &allowed) && is_first_thread(cpus[i]))
				node_cpus[k][node_ncpus[k]++] = cpus[i];
		nnodes = k + 1;
		fake = strchr(fake, ';');
		fake = fake ? fake + 1 : NULL;
	}
	const int from_env = nnodes > 0;
	for (int k = 0; !from_env && k < MAX_NODES; k++) {
		snprintf(path, sizeof path, "/sys/devices/system/node/node%d/cpulist", k);
		if (read_line(path, buf, sizeof buf))
			break;
		int cpus[MAX_CPUS], n = parse_cpulist(buf, cpus, MAX_CPUS);
		node_ncpus[k] = 0;
		for (int i = 0; i < n; i++)
			if (CPU_ISSET(cpus[i], &allowed) && is_first_thread(cpus[i]))
				node_cpus[k][node_ncpus[k]++] = cpus[i];
		nnodes = k + 1;
	}
	if (nnodes == 0) { /* no NUMA information: one node with the allowed CPUs */
		nnodes = 1;
		for (int c = 0; c < MAX_CPUS; c++)
			if (CPU_ISSET(c, &allowed) && is_first_thread(c))
				node_cpus[0][node_ncpus[0]++] = c;
	}
	for (int i = 0; i < 8; i++) {
		char lvl[16], size[32];
		snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
		if (read_line(path, lvl, sizeof lvl))
			break;
		snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
		if (atoi(lvl) >= 3 && !read_line(path, size, sizeof size)) {
			long v = atol(size);
			llc_bytes = strchr(size, 'M') ? v << 20 : strchr(size, 'K') ? v << 10 : v;
		}
	}
}

static void bind_to(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof set, &set)) {
		fprintf(stderr, "error: sched_setaffinity(cpu %d): %s\n", cpu, strerror(errno));
		exit(1);
	}
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* ------------------------------------------------------------------ kernels */

enum kernel { DGEMM, DTRSM, DGETRF_NOPIV, DAXPY };
static const char *kernel_names[] = {"dgemm", "dtrsm", "dgetrf_nopiv", "daxpy"};

/* One set of operands; sizes in doubles. */
struct operands {
	double *a, *b, *c, *pristine;
};

static double flops_of(enum kernel k, long b)
{
	switch (k) {
	case DGEMM: return 2.0 * b * b * b;
	case DTRSM: return (double)b * b * b;
	case DGETRF_NOPIV: return 2.0 * b * b * b / 3.0;
	case DAXPY: return 2.0 * b * b;
	}
	return 0;
}

/* LU without pivoting of a b x b column-major tile, blocked by ib columns:
 * unblocked panel (scale + rank-1 updates), then triangular solve and update
 * of the trailing matrix with BLAS 3 (the structure of Chameleon's
 * CORE_dgetrf_nopiv; written from the algorithm, not from its code). */
static void getrf_nopiv(long b, double *a)
{
	const long ib = 32;
	for (long k = 0; k < b; k += ib) {
		long kb = k + ib < b ? ib : b - k;
		for (long j = k; j < k + kb; j++) {
			double inv = 1.0 / a[j + j * b];
			cblas_dscal((int)(b - j - 1), inv, &a[j + 1 + j * b], 1);
			if (j + 1 < k + kb)
				cblas_dger(CblasColMajor, (int)(b - j - 1), (int)(k + kb - j - 1), -1.0, &a[j + 1 + j * b], 1,
				           &a[j + (j + 1) * b], (int)b, &a[j + 1 + (j + 1) * b], (int)b);
		}
		long rest = b - k - kb;
		if (rest > 0) {
			cblas_dtrsm(CblasColMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, (int)kb, (int)rest, 1.0,
			            &a[k + k * b], (int)b, &a[k + (k + kb) * b], (int)b);
			cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, (int)rest, (int)rest, (int)kb, -1.0,
			            &a[k + kb + k * b], (int)b, &a[k + (k + kb) * b], (int)b, 1.0, &a[k + kb + (k + kb) * b],
			            (int)b);
		}
	}
}

static void run_kernel(enum kernel k, long b, struct operands *o)
{
	switch (k) {
	case DGEMM: /* the LU update A(m,n) -= A(m,k) A(k,n) */
		cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, (int)b, (int)b, (int)b, -1.0, o->a, (int)b, o->b,
		            (int)b, 1.0, o->c, (int)b);
		break;
	case DTRSM: /* the LU panel solve A(m,k) <- A(m,k) U(k,k)^-1 */
		cblas_dtrsm(CblasColMajor, CblasRight, CblasUpper, CblasNoTrans, CblasNonUnit, (int)b, (int)b, 1.0, o->a,
		            (int)b, o->c, (int)b);
		break;
	case DGETRF_NOPIV: getrf_nopiv(b, o->c); break;
	case DAXPY: cblas_daxpy((int)(b * b), 0.5, o->a, 1, o->c, 1); break;
	}
}

/* Kernels that overwrite their input are reset from a pristine copy (untimed). */
static int needs_reset(enum kernel k) { return k == DTRSM || k == DGETRF_NOPIV; }

static double *alloc_doubles(long n)
{
	void *p = NULL;
	if (posix_memalign(&p, 4096, (size_t)n * sizeof(double))) {
		fprintf(stderr, "error: out of memory (%ld doubles)\n", n);
		exit(1);
	}
	return p;
}

/* Allocate and first-touch one operand set on the calling thread's NUMA node. */
static void init_operands(struct operands *o, enum kernel k, long b, unsigned seed)
{
	long n = b * b;
	o->a = alloc_doubles(n);
	o->b = k == DGEMM ? alloc_doubles(n) : NULL;
	o->c = alloc_doubles(n);
	o->pristine = needs_reset(k) ? alloc_doubles(n) : NULL;
	for (long i = 0; i < n; i++) {
		o->a[i] = (double)rand_r(&seed) / RAND_MAX;
		o->c[i] = (double)rand_r(&seed) / RAND_MAX;
		if (o->b)
			o->b[i] = (double)rand_r(&seed) / RAND_MAX;
	}
	for (long i = 0; i < b; i++) { /* diagonally dominant: no pivoting needed */
		o->a[i + i * b] += (double)b;
		o->c[i + i * b] += (double)b;
	}
	if (o->pristine)
		memcpy(o->pristine, o->c, (size_t)n * sizeof(double));
}

static void free_operands(struct operands *o)
{
	free(o->a);
	free(o->b);
	free(o->c);
	free(o->pristine);
}

/* ------------------------------------------------------------------ kernel matrix */

struct worker {
	int cpu, data_cpu, measured;
	enum kernel kernel;
	long b, reps, nsets;
	pthread_barrier_t *barrier;
	double sum, sum2; /* per-call seconds */
	long count;
	double *times; /* reps entries */
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	bind_to(w->data_cpu); /* first touch on the data node */
	struct operands *sets = calloc((size_t)w->nsets, sizeof *sets);
	for (long s = 0; s < w->nsets; s++)
		init_operands(&sets[s], w->kernel, w->b, (unsigned)(w->cpu * 7919 + s));
	bind_to(w->cpu);
	long n = w->b * w->b;
	run_kernel(w->kernel, w->b, &sets[0]); /* warm up BLAS (buffers, dispatch) */
	pthread_barrier_wait(w->barrier);
	for (long r = 0; r < w->reps; r++) {
		struct operands *o = &sets[r % w->nsets];
		if (o->pristine)
			memcpy(o->c, o->pristine, (size_t)n * sizeof(double));
		if (o->pristine && w->nsets > 1) /* evict the reset copy: touch the next set */
			memcpy(sets[(r + 1) % w->nsets].c, sets[(r + 1) % w->nsets].pristine, (size_t)n * sizeof(double));
		double t0 = now();
		run_kernel(w->kernel, w->b, o);
		double dt = now() - t0;
		w->sum += dt;
		w->sum2 += dt * dt;
		w->times[w->count++] = dt;
	}
	pthread_barrier_wait(w->barrier);
	for (long s = 0; s < w->nsets; s++)
		free_operands(&sets[s]);
	free(sets);
	return NULL;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static long pool_sets(enum kernel k, long b)
{
	long per_set = (k == DGEMM ? 3 : needs_reset(k) ? 3 : 2) * b * b * (long)sizeof(double);
	long n = (2 * llc_bytes + per_set - 1) / per_set;
	return n < 2 ? 2 : n;
}

struct cell {
	double mean, sd, median, min;
	long count;
	int nmeasured, nw;
};

/* Row T, column D: measured threads on T's cores use data first-touched on D.
 * alone: one thread (first core of T). all: every core runs the kernel; the
 * threads of node T are measured, the others work on their own local data. */
static struct cell measure_cell(enum kernel k, long b, long reps, int all, int t, int d)
{
	struct worker ws[MAX_CPUS];
	int nw = 0;
	for (int node = 0; node < nnodes; node++)
		for (int i = 0; i < node_ncpus[node]; i++) {
			int measured = node == t && (all || i == 0);
			if (!all && !measured)
				continue;
			int cpu = node_cpus[node][i];
			int dcpu = measured ? node_cpus[d][i % node_ncpus[d]] : cpu;
			ws[nw++] = (struct worker){.cpu = cpu, .data_cpu = dcpu, .measured = measured, .kernel = k, .b = b,
			                           .reps = reps, .nsets = pool_sets(k, b)};
		}
	pthread_barrier_t barrier;
	pthread_barrier_init(&barrier, NULL, (unsigned)nw);
	pthread_t th[MAX_CPUS];
	for (int i = 0; i < nw; i++) {
		ws[i].barrier = &barrier;
		ws[i].times = alloc_doubles(reps);
		pthread_create(&th[i], NULL, worker_main, &ws[i]);
	}
	double sum = 0, sum2 = 0;
	struct cell c = {.nw = nw};
	double *all_times = alloc_doubles(reps * nw);
	for (int i = 0; i < nw; i++) {
		pthread_join(th[i], NULL);
		if (ws[i].measured) {
			sum += ws[i].sum;
			sum2 += ws[i].sum2;
			memcpy(&all_times[c.count], ws[i].times, (size_t)ws[i].count * sizeof(double));
			c.count += ws[i].count;
			c.nmeasured++;
		}
		free(ws[i].times);
	}
	pthread_barrier_destroy(&barrier);
	long n = c.count;
	qsort(all_times, (size_t)n, sizeof(double), cmp_double);
	c.median = n % 2 ? all_times[n / 2] : 0.5 * (all_times[n / 2 - 1] + all_times[n / 2]);
	c.min = all_times[0];
	c.mean = sum / n;
	double var = n > 1 ? (sum2 - n * c.mean * c.mean) / (n - 1) : 0;
	c.sd = var > 0 ? sqrt(var) : 0;
	free(all_times);
	return c;
}

static void kernel_cell(enum kernel k, long b, long reps, int all, int t, int d)
{
	struct cell c = measure_cell(k, b, reps, all, t, d);
	printf("%s,%ld,%s,%d,%d,%d,%d,%ld,%.9g,%.9g,%.9g,%.9g,%.6g,%.6g\n", kernel_names[k], b, all ? "all" : "alone", t,
	       d, c.nmeasured, c.nw, c.count, c.mean, c.sd, c.median, c.min, c.sd / c.mean,
	       flops_of(k, b) / c.median * 1e-9);
	fflush(stdout);
}

/* ------------------------------------------------------------------ host<->GPU copies */

/* The few CUDA runtime entry points the copies need, opened with dlopen so that numa_bench
 * builds and runs without CUDA. Values of the runtime API (cuda_runtime_api.h, driver_types.h):
 * cudaSuccess 0, cudaMemcpyHostToDevice 1, cudaMemcpyDeviceToHost 2, cudaHostRegisterPortable 1,
 * cudaDeviceScheduleBlockingSync 4 (the copying thread sleeps while the DMA runs). */
static struct {
	int (*get_device_count)(int *);
	int (*set_device)(int);
	int (*set_device_flags)(unsigned);
	int (*malloc_)(void **, size_t);
	int (*free_)(void *);
	int (*host_register)(void *, size_t, unsigned);
	int (*host_unregister)(void *);
	int (*memcpy_)(void *, const void *, size_t, int);
	int ndev;
} cuda;

/* Number of CUDA devices (0 with the reason in `why` when there is no usable runtime or device). */
static int cuda_devices(char *why, size_t len)
{
	void *h = cudart_dlopen("NUMA_BENCH_CUDART", why, len);
	if (!h)
		return 0;
	*(void **)&cuda.get_device_count = dlsym(h, "cudaGetDeviceCount");
	*(void **)&cuda.set_device = dlsym(h, "cudaSetDevice");
	*(void **)&cuda.set_device_flags = dlsym(h, "cudaSetDeviceFlags");
	*(void **)&cuda.malloc_ = dlsym(h, "cudaMalloc");
	*(void **)&cuda.free_ = dlsym(h, "cudaFree");
	*(void **)&cuda.host_register = dlsym(h, "cudaHostRegister");
	*(void **)&cuda.host_unregister = dlsym(h, "cudaHostUnregister");
	*(void **)&cuda.memcpy_ = dlsym(h, "cudaMemcpy");
	if (!cuda.get_device_count || !cuda.set_device || !cuda.malloc_ || !cuda.free_ || !cuda.host_register ||
	    !cuda.host_unregister || !cuda.memcpy_) {
		snprintf(why, len, "the CUDA runtime lacks an entry point");
		return 0;
	}
	int n = 0;
	if (cuda.get_device_count(&n) != 0 || n <= 0) {
		snprintf(why, len, "no CUDA device (cudaGetDeviceCount)");
		return 0;
	}
	cuda.ndev = n;
	return n;
}

#define COPY_BYTES (64L << 20)

struct copier {
	int device, node;
	volatile int *stop;
	double bytes, seconds;
	int failed;
};

/* One GPU: 64 MiB host->device then device->host until *stop, from a buffer first-touched and
 * pinned in place (cudaHostRegister) on `node`, the thread bound to that node's cores. */
static void *copier_main(void *arg)
{
	struct copier *c = arg;
	cpu_set_t set;
	CPU_ZERO(&set);
	for (int i = 0; i < node_ncpus[c->node]; i++)
		CPU_SET(node_cpus[c->node][i], &set);
	sched_setaffinity(0, sizeof set, &set);
	double *host = alloc_doubles(COPY_BYTES / (long)sizeof(double));
	memset(host, 1, COPY_BYTES); /* first touch on the node */
	void *dev = NULL;
	int ok = cuda.set_device(c->device) == 0;
	if (ok && cuda.set_device_flags) /* before the context exists; refused (harmlessly) once it does */
		cuda.set_device_flags(4);
	ok = ok && cuda.malloc_(&dev, COPY_BYTES) == 0 && cuda.host_register(host, COPY_BYTES, 1) == 0;
	if (!ok) {
		c->failed = 1;
		free(host);
		return NULL;
	}
	double t0 = now();
	while (!*c->stop) {
		if (cuda.memcpy_(dev, host, COPY_BYTES, 1) != 0 || cuda.memcpy_(host, dev, COPY_BYTES, 2) != 0) {
			c->failed = 1;
			break;
		}
		c->bytes += 2.0 * COPY_BYTES;
	}
	c->seconds = now() - t0;
	cuda.host_unregister(host);
	cuda.free_(dev);
	free(host);
	return NULL;
}

struct copies {
	pthread_t th[MAX_NODES];
	struct copier c[MAX_NODES];
	volatile int stop;
	int n;
};

static void copies_start(struct copies *cp, int ndev, int node)
{
	cp->stop = 0;
	cp->n = ndev < MAX_NODES ? ndev : MAX_NODES;
	for (int g = 0; g < cp->n; g++) {
		cp->c[g] = (struct copier){.device = g, .node = node, .stop = &cp->stop};
		pthread_create(&cp->th[g], NULL, copier_main, &cp->c[g]);
	}
	struct timespec ramp = {0, 200000000}; /* let the copies reach their rate first */
	nanosleep(&ramp, NULL);
}

/* Stops the copies; their total rate (bytes/s summed over the GPUs), or -1 if one failed. */
static double copies_stop(struct copies *cp)
{
	cp->stop = 1;
	double rate = 0;
	int failed = 0;
	for (int g = 0; g < cp->n; g++) {
		pthread_join(cp->th[g], NULL);
		failed |= cp->c[g].failed;
		rate += cp->c[g].seconds > 0 ? cp->c[g].bytes / cp->c[g].seconds : 0;
	}
	return failed ? -1 : rate;
}

/* ------------------------------------------------------------------ remote penalty */

static int penalty_main(long b, long reps, const char *copies)
{
	if (nnodes < 2) {
		fprintf(stderr, "numa_bench penalty: %d NUMA node: no memory on another socket, the remote penalty "
		                "cannot be measured on this machine\n",
		        nnodes);
		return 3;
	}
	char why[256] = "";
	int ndev = strcmp(copies, "none") ? cuda_devices(why, sizeof why) : 0;
	if (!strcmp(copies, "auto") && ndev == 0)
		fprintf(stderr, "numa_bench penalty: %s: the cells with concurrent host<->GPU copies are skipped\n", why);
	const enum kernel ks[] = {DGEMM, DTRSM, DGETRF_NOPIV};
	printf("kernel,b,copies,thread_node,data_node,threads,calls,local_median_s,remote_median_s,penalty,"
	       "local_rel_std,remote_rel_std,copy_gbps\n");
	for (int with = 0; with <= (ndev > 0); with++)
		for (size_t i = 0; i < sizeof ks / sizeof *ks; i++)
			for (int t = 0; t < nnodes; t++)
				for (int d = 0; d < nnodes; d++) {
					if (t == d || !node_ncpus[t] || !node_ncpus[d])
						continue;
					struct copies cp;
					double rate = 0;
					if (with)
						copies_start(&cp, ndev, d);
					struct cell local = measure_cell(ks[i], b, reps, 1, t, t);
					struct cell remote = measure_cell(ks[i], b, reps, 1, t, d);
					if (with && (rate = copies_stop(&cp)) < 0) {
						fprintf(stderr, "error: numa_bench penalty: a host<->GPU copy failed\n");
						return 1;
					}
					printf("%s,%ld,%s,%d,%d,%d,%ld,%.9g,%.9g,%.6g,%.6g,%.6g,%.6g\n", kernel_names[ks[i]], b,
					       with ? "gpu" : "none", t, d, remote.nmeasured, remote.count, local.median, remote.median,
					       remote.median / local.median, local.sd / local.mean, remote.sd / remote.mean,
					       rate * 1e-9);
					fflush(stdout);
				}
	return 0;
}

static int copies_main(int node, double seconds)
{
	char why[256] = "";
	if (node < 0 || node >= nnodes || !node_ncpus[node]) {
		fprintf(stderr, "error: numa_bench copies: --node %d: this machine has NUMA nodes 0..%d\n", node, nnodes - 1);
		return 2;
	}
	int ndev = cuda_devices(why, sizeof why);
	if (ndev == 0) {
		fprintf(stderr, "numa_bench copies: %s\n", why);
		return 3;
	}
	struct copies cp;
	copies_start(&cp, ndev, node);
	struct timespec ts = {(time_t)seconds, (long)((seconds - (long)seconds) * 1e9)};
	nanosleep(&ts, NULL);
	double rate = copies_stop(&cp);
	if (rate < 0) {
		fprintf(stderr, "error: numa_bench copies: a host<->GPU copy failed\n");
		return 1;
	}
	printf("devices,data_node,copy_bytes,copy_gbps\n%d,%d,%ld,%.6g\n", ndev, node, COPY_BYTES, rate * 1e-9);
	return 0;
}

/* ------------------------------------------------------------------ bandwidth */

struct bw_worker {
	int cpu, data_cpu;
	long n, reps;
	pthread_barrier_t *barrier;
	double *x, *y, *z;
};

static double *bw_start_end; /* per rep: start/end of the slowest thread */

static void *bw_main(void *arg)
{
	struct bw_worker *w = arg;
	bind_to(w->data_cpu);
	w->x = alloc_doubles(w->n);
	w->y = alloc_doubles(w->n);
	w->z = alloc_doubles(w->n);
	for (long i = 0; i < w->n; i++) {
		w->x[i] = 0;
		w->y[i] = 1;
		w->z[i] = 2;
	}
	bind_to(w->cpu);
	for (long r = 0; r < w->reps; r++) {
		pthread_barrier_wait(w->barrier);
		double t0 = now();
		for (long i = 0; i < w->n; i++) /* triad */
			w->x[i] = w->y[i] + 3.0 * w->z[i];
		double t1 = now();
		pthread_barrier_wait(w->barrier);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		/* slowest thread defines the rep's time (min start, max end) */
		double *se = &bw_start_end[2 * r];
		double cur;
		do {
			cur = se[0];
		} while (t0 < cur && !__atomic_compare_exchange(&se[0], &cur, &t0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
		do {
			cur = se[1];
		} while (t1 > cur && !__atomic_compare_exchange(&se[1], &cur, &t1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
	}
	if (w->x[0] != 7.0)
		fprintf(stderr, "warning: triad check failed\n");
	free(w->x);
	free(w->y);
	free(w->z);
	return NULL;
}

/* All cores of node T stream arrays first-touched on node D (t = -1: every core
 * of the machine on its own node's memory). Reports the best rep (STREAM rule). */
static void bandwidth_cell(long mb, long reps, int t, int d)
{
	struct bw_worker ws[MAX_CPUS];
	int nw = 0;
	for (int node = 0; node < nnodes; node++) {
		if (t >= 0 && node != t)
			continue;
		for (int i = 0; i < node_ncpus[node]; i++) {
			int cpu = node_cpus[node][i];
			int dnode = t >= 0 ? d : node;
			ws[nw++] = (struct bw_worker){.cpu = cpu, .data_cpu = node_cpus[dnode][i % node_ncpus[dnode]]};
		}
	}
	long total = mb * (1L << 20) / (long)sizeof(double) / 3; /* elements per array, all threads */
	bw_start_end = malloc((size_t)reps * 2 * sizeof(double));
	for (long r = 0; r < reps; r++) {
		bw_start_end[2 * r] = 1e300;
		bw_start_end[2 * r + 1] = -1e300;
	}
	pthread_barrier_t barrier;
	pthread_barrier_init(&barrier, NULL, (unsigned)nw);
	pthread_t th[MAX_CPUS];
	for (int i = 0; i < nw; i++) {
		ws[i].n = total / nw;
		ws[i].reps = reps;
		ws[i].barrier = &barrier;
		pthread_create(&th[i], NULL, bw_main, &ws[i]);
	}
	for (int i = 0; i < nw; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&barrier);
	double best = 1e300, sum = 0, sum2 = 0;
	for (long r = 0; r < reps; r++) {
		double dt = bw_start_end[2 * r + 1] - bw_start_end[2 * r];
		best = dt < best ? dt : best;
		sum += dt;
		sum2 += dt * dt;
	}
	double mean = sum / reps, var = reps > 1 ? (sum2 - reps * mean * mean) / (reps - 1) : 0;
	double bytes = 3.0 * sizeof(double) * (double)(total / nw) * nw;
	printf("triad,%s,%d,%d,%d,%ld,%.6g,%.9g,%.9g,%.6g,%.6g\n", t >= 0 ? "node" : "machine", t, t >= 0 ? d : -1, nw,
	       reps, bytes, best, mean, var > 0 ? sqrt(var) / mean : 0, bytes / best * 1e-9);
	free(bw_start_end);
	fflush(stdout);
}

/* ------------------------------------------------------------------ main */

static int usage(void)
{
	fprintf(stderr, "usage: numa_bench kernel --kernel dgemm|dtrsm|dgetrf_nopiv|daxpy --b B --reps R "
	                "[--load alone|all]\n       numa_bench bandwidth --mb MB --reps R\n"
	                "       numa_bench penalty --b B --reps R [--copies auto|none]\n"
	                "       numa_bench copies --node D --seconds S\n       numa_bench topology\n");
	return 2;
}

static const char *opt(int argc, char **argv, const char *name, const char *def)
{
	for (int i = 2; i + 1 < argc; i++)
		if (!strcmp(argv[i], name))
			return argv[i + 1];
	return def;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return usage();
	openblas_set_num_threads(1);
	read_topology();
	if (!strcmp(argv[1], "topology")) {
		printf("node,cpus,llc_bytes\n");
		for (int k = 0; k < nnodes; k++) {
			printf("%d,", k);
			for (int i = 0; i < node_ncpus[k]; i++)
				printf("%s%d", i ? " " : "", node_cpus[k][i]);
			printf(",%ld\n", llc_bytes);
		}
		return 0;
	}
	if (!strcmp(argv[1], "kernel")) {
		const char *kname = opt(argc, argv, "--kernel", NULL);
		long b = atol(opt(argc, argv, "--b", "0")), reps = atol(opt(argc, argv, "--reps", "0"));
		const char *load = opt(argc, argv, "--load", "alone");
		int k = -1;
		for (int i = 0; i < 4; i++)
			if (kname && !strcmp(kname, kernel_names[i]))
				k = i;
		if (k < 0 || b <= 0 || reps <= 0 || (strcmp(load, "alone") && strcmp(load, "all")))
			return usage();
		printf("kernel,b,load,thread_node,data_node,threads_measured,threads_total,calls,mean_s,std_s,"
		       "median_s,min_s,rel_std,gflops\n");
		for (int t = 0; t < nnodes; t++)
			for (int d = 0; d < nnodes; d++)
				if (node_ncpus[t] && node_ncpus[d])
					kernel_cell((enum kernel)k, b, reps, !strcmp(load, "all"), t, d);
		return 0;
	}
	if (!strcmp(argv[1], "bandwidth")) {
		long mb = atol(opt(argc, argv, "--mb", "0")), reps = atol(opt(argc, argv, "--reps", "0"));
		if (mb <= 0 || reps <= 0)
			return usage();
		printf("kernel,scope,thread_node,data_node,threads,reps,bytes,best_s,mean_s,rel_std,gbps\n");
		for (int t = 0; t < nnodes; t++)
			for (int d = 0; d < nnodes; d++)
				if (node_ncpus[t] && node_ncpus[d])
					bandwidth_cell(mb, reps, t, d);
		bandwidth_cell(mb, reps, -1, -1);
		return 0;
	}
	if (!strcmp(argv[1], "penalty")) {
		long b = atol(opt(argc, argv, "--b", "0")), reps = atol(opt(argc, argv, "--reps", "0"));
		const char *copies = opt(argc, argv, "--copies", "auto");
		if (b <= 0 || reps <= 0 || (strcmp(copies, "auto") && strcmp(copies, "none")))
			return usage();
		return penalty_main(b, reps, copies);
	}
	if (!strcmp(argv[1], "copies")) {
		const char *node = opt(argc, argv, "--node", NULL);
		double seconds = atof(opt(argc, argv, "--seconds", "0"));
		if (!node || seconds <= 0)
			return usage();
		return copies_main(atoi(node), seconds);
	}
	return usage();
}
