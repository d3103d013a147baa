/* NUMA microbenchmarks for the calibration bundle (PaStiX method, INRIA RR-7498):
 * a thread bound to a core of NUMA node T runs a kernel on data first-touched
 * on NUMA node D; the T x D matrix, alone and with every core busy, gives the
 * cost of remote data per kernel. Also STREAM-like triad bandwidth T x D.
 *
 *   numa_bench kernel --kernel dgemm|dtrsm|dgetrf_nopiv|daxpy --b B --reps R
 *                     [--load alone|all]
 *   numa_bench bandwidth --mb MB --reps R
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
	for (int k = 0; k < MAX_NODES; k++) {
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

/* Row T, column D: measured threads on T's cores use data first-touched on D.
 * alone: one thread (first core of T). all: every core runs the kernel; the
 * threads of node T are measured, the others work on their own local data. */
static void kernel_cell(enum kernel k, long b, long reps, int all, int t, int d)
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
	long count = 0;
	int nmeasured = 0;
	double *all_times = alloc_doubles(reps * nw);
	for (int i = 0; i < nw; i++) {
		pthread_join(th[i], NULL);
		if (ws[i].measured) {
			sum += ws[i].sum;
			sum2 += ws[i].sum2;
			memcpy(&all_times[count], ws[i].times, (size_t)ws[i].count * sizeof(double));
			count += ws[i].count;
			nmeasured++;
		}
		free(ws[i].times);
	}
	pthread_barrier_destroy(&barrier);
	qsort(all_times, (size_t)count, sizeof(double), cmp_double);
	double median = count % 2 ? all_times[count / 2] : 0.5 * (all_times[count / 2 - 1] + all_times[count / 2]);
	double mean = sum / count;
	double var = count > 1 ? (sum2 - count * mean * mean) / (count - 1) : 0;
	double sd = var > 0 ? sqrt(var) : 0;
	printf("%s,%ld,%s,%d,%d,%d,%d,%ld,%.9g,%.9g,%.9g,%.9g,%.6g,%.6g\n", kernel_names[k], b, all ? "all" : "alone", t,
	       d, nmeasured, nw, count, mean, sd, median, all_times[0], sd / mean, flops_of(k, b) / median * 1e-9);
	free(all_times);
	fflush(stdout);
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
	                "[--load alone|all]\n       numa_bench bandwidth --mb MB --reps R\n       numa_bench topology\n");
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
	return usage();
}
