/* Does a pinned host allocation in one thread hold a GPU that another thread keeps busy?
 *
 *   hostalloc_stall --bytes B --reps R [--device D] [--depth Q] [--op-ms T]
 *
 * StarPU allocates a NUMA replica with cudaHostAlloc(Portable) in whichever thread handles the
 * copy (a CUDA driver or a CPU worker: datawizard/copy_driver.c -> memalloc.c -> malloc.c
 * _starpu_malloc_flags_on_node), while the CUDA drivers keep their streams fed STARPU_CUDA_PIPELINE
 * (2) operations ahead. This reproduces that: a "driver" thread keeps one non-blocking stream Q
 * operations ahead (default 2) with back-to-back device work of about T ms (default 0.5):
 * a memset kernel (cudaMemsetAsync), a host->device copy of B bytes, a memset, a device->host
 * copy of B bytes, from pinned buffers, an event recorded before and after each; an "allocator"
 * thread meanwhile makes R pinned allocations of B bytes (cudaHostAlloc, cudaHostAllocPortable),
 * each followed after a pause by its cudaFreeHost. From the events (timed on the device, placed on
 * the host clock by one event waited for before the run) and the host times of each call:
 *
 *   alloc_idle, free_idle          the calls' own time with the device idle (R each)
 *   alloc_busy, free_busy          the same while the driver thread keeps the device busy
 *   gpu_lost_{alloc,free}          device time lost in the window of each call (from its start to
 *                                  its end plus two operations): the gaps between operations plus
 *                                  their excess over the median duration of their kind (a device
 *                                  held with work queued stretches an operation, a device left
 *                                  without work shows a gap)
 *   gpu_lost_base                  the same in windows of equal length just before each call
 *   gpu_maxlost_{alloc,free,base}  the largest loss of one operation in those windows
 *   launch_{alloc,free,base}       host time of the longest memset launch submitted in the window
 *   copy_submit_{alloc,free,base}  host time of the longest cudaMemcpyAsync submitted in it
 *
 * as CSV rows `what,bytes,depth,op_ms,reps,median_s,min_s,max_s` (over the R windows; depth and
 * op_ms are the driver thread's settings, so that runs of several settings share one file). A device
 * held during the call shows gpu_lost_alloc near alloc_busy and well above gpu_lost_base, and
 * launches or copies submitted meanwhile that return only after it; a device that keeps running
 * shows gpu_lost_alloc near gpu_lost_base. docs/pinned-allocations.md says what the model takes.
 *
 * The CUDA runtime is opened with dlopen (HOSTALLOC_STALL_CUDART names another library), so this
 * builds without CUDA; without a runtime or a device it says so on stderr and exits with status 3
 * (2: bad arguments, 1: a CUDA call failed). */
#define _GNU_SOURCE
#include "cudart_dlopen.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Values of the runtime API (driver_types.h): cudaSuccess 0, cudaMemcpyHostToDevice 1,
 * cudaMemcpyDeviceToHost 2, cudaHostAllocPortable 1, cudaStreamNonBlocking 1 (StarPU's streams:
 * drivers/cuda/driver_cuda.c starpu_cudaStreamCreate). */
typedef void *stream_t;
typedef void *event_t;
static struct {
	int (*get_device_count)(int *);
	int (*set_device)(int);
	int (*malloc_)(void **, size_t);
	int (*free_)(void *);
	int (*host_alloc)(void **, size_t, unsigned);
	int (*free_host)(void *);
	int (*stream_create)(stream_t *, unsigned);
	int (*memset_async)(void *, int, size_t, stream_t);
	int (*memcpy_async)(void *, const void *, size_t, int, stream_t);
	int (*event_create)(event_t *);
	int (*event_record)(event_t, stream_t);
	int (*event_sync)(event_t);
	int (*event_elapsed)(float *, event_t, event_t);
	int (*stream_sync)(stream_t);
	const char *(*error_string)(int);
} cu;

static int open_cuda(char *why, size_t len)
{
	void *h = cudart_dlopen("HOSTALLOC_STALL_CUDART", why, len);
	if (!h)
		return 0;
	struct {
		void **fn;
		const char *name;
	} syms[] = {{(void **)&cu.get_device_count, "cudaGetDeviceCount"},
	            {(void **)&cu.set_device, "cudaSetDevice"},
	            {(void **)&cu.malloc_, "cudaMalloc"},
	            {(void **)&cu.free_, "cudaFree"},
	            {(void **)&cu.host_alloc, "cudaHostAlloc"},
	            {(void **)&cu.free_host, "cudaFreeHost"},
	            {(void **)&cu.stream_create, "cudaStreamCreateWithFlags"},
	            {(void **)&cu.memset_async, "cudaMemsetAsync"},
	            {(void **)&cu.memcpy_async, "cudaMemcpyAsync"},
	            {(void **)&cu.event_create, "cudaEventCreate"},
	            {(void **)&cu.event_record, "cudaEventRecord"},
	            {(void **)&cu.event_sync, "cudaEventSynchronize"},
	            {(void **)&cu.event_elapsed, "cudaEventElapsedTime"},
	            {(void **)&cu.stream_sync, "cudaStreamSynchronize"},
	            {(void **)&cu.error_string, "cudaGetErrorString"}};
	for (size_t i = 0; i < sizeof syms / sizeof *syms; i++)
		if (!(*syms[i].fn = dlsym(h, syms[i].name))) {
			snprintf(why, len, "the CUDA runtime lacks %s", syms[i].name);
			return 0;
		}
	int n = 0;
	if (cu.get_device_count(&n) != 0 || n <= 0) {
		snprintf(why, len, "no CUDA device (cudaGetDeviceCount)");
		return 0;
	}
	return n;
}

static void check(int e, const char *what)
{
	if (e != 0) {
		fprintf(stderr, "error: CUDA: %s: %s\n", what, cu.error_string ? cu.error_string(e) : "?");
		exit(1);
	}
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void pause_s(double s)
{
	struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
	nanosleep(&ts, NULL);
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static int row_depth; /* the driver thread's settings, printed in every row */
static double row_op_ms;

static void row(const char *what, size_t bytes, const double *v, int n)
{
	double *t = malloc((size_t)n * sizeof *t);
	memcpy(t, v, (size_t)n * sizeof *t);
	qsort(t, (size_t)n, sizeof *t, cmp);
	printf("%s,%zu,%d,%g,%d,%.9g,%.9g,%.9g\n", what, bytes, row_depth, row_op_ms, n, t[n / 2], t[0], t[n - 1]);
	free(t);
}

#define MAX_OPS 16384
enum { OP_MEMSET, OP_H2D, OP_D2H };
struct op {
	int kind;
	double s0, s1; /* host clock around the submission call */
	event_t before, after;
};

static struct {
	stream_t stream;
	void *dev, *pin_src, *pin_dst;
	size_t memset_bytes, bytes;
	int depth, nops;
	volatile int stop, failed;
	struct op ops[MAX_OPS];
} drv;

/* Back-to-back device work, `depth` operations ahead, until told to stop. */
static void *driver_main(void *arg)
{
	(void)arg;
	static const int cycle[4] = {OP_MEMSET, OP_H2D, OP_MEMSET, OP_D2H};
	for (int i = 0; i < MAX_OPS && !drv.stop; i++) {
		if (i >= drv.depth && cu.event_sync(drv.ops[i - drv.depth].after) != 0) {
			drv.failed = 1;
			break;
		}
		struct op *o = &drv.ops[i];
		o->kind = cycle[i % 4];
		int e = cu.event_record(o->before, drv.stream);
		o->s0 = now();
		if (o->kind == OP_MEMSET)
			e |= cu.memset_async(drv.dev, i & 0xff, drv.memset_bytes, drv.stream);
		else if (o->kind == OP_H2D)
			e |= cu.memcpy_async(drv.dev, drv.pin_src, drv.bytes, 1, drv.stream);
		else
			e |= cu.memcpy_async(drv.pin_dst, drv.dev, drv.bytes, 2, drv.stream);
		o->s1 = now();
		e |= cu.event_record(o->after, drv.stream);
		if (e) {
			drv.failed = 1;
			break;
		}
		drv.nops = i + 1;
	}
	cu.stream_sync(drv.stream);
	return NULL;
}

/* The device timeline of every operation on the host clock (`zero`: the event whose completion
 * the host saw at `h0`) and the median duration of each kind. */
static double *op_b, *op_e, op_med[3];

static void timeline(event_t zero, double h0)
{
	op_b = calloc((size_t)drv.nops, sizeof(double));
	op_e = calloc((size_t)drv.nops, sizeof(double));
	double *d = calloc((size_t)drv.nops, sizeof(double));
	for (int i = 0; i < drv.nops; i++) {
		float b = 0, e = 0;
		check(cu.event_elapsed(&b, zero, drv.ops[i].before), "cudaEventElapsedTime");
		check(cu.event_elapsed(&e, zero, drv.ops[i].after), "cudaEventElapsedTime");
		op_b[i] = h0 + b * 1e-3;
		op_e[i] = h0 + e * 1e-3;
	}
	for (int k = 0; k < 3; k++) {
		int n = 0;
		for (int i = 0; i < drv.nops; i++)
			if (drv.ops[i].kind == k)
				d[n++] = op_e[i] - op_b[i];
		qsort(d, (size_t)n, sizeof *d, cmp);
		op_med[k] = n ? d[n / 2] : 0;
	}
	free(d);
}

struct window_stats {
	double lost, maxlost, launch, copy;
};

/* In the host-clock window [w0, w1]: the device time lost, over the operations whose span from
 * the previous one's end to their own end meets the window, as the gap before each plus its
 * excess over the median of its kind (a device held with work queued shows as longer operations,
 * a device left without work as gaps), each in proportion to the part of its span inside the
 * window; the largest such loss of one operation; the longest submission calls. */
static struct window_stats window(double w0, double w1)
{
	struct window_stats s = {0, 0, 0, 0};
	for (int i = 1; i < drv.nops; i++) {
		const struct op *o = &drv.ops[i];
		double lo = op_e[i - 1] > w0 ? op_e[i - 1] : w0, hi = op_e[i] < w1 ? op_e[i] : w1;
		if (hi > lo && op_e[i] > op_e[i - 1]) {
			double gap = op_b[i] - op_e[i - 1], excess = op_e[i] - op_b[i] - op_med[o->kind];
			double lost = ((gap > 0 ? gap : 0) + (excess > 0 ? excess : 0)) * (hi - lo) / (op_e[i] - op_e[i - 1]);
			s.lost += lost;
			if (lost > s.maxlost)
				s.maxlost = lost;
		}
		if (o->s1 >= w0 && o->s0 <= w1) {
			double d = o->s1 - o->s0;
			if (o->kind == OP_MEMSET && d > s.launch)
				s.launch = d;
			if (o->kind != OP_MEMSET && d > s.copy)
				s.copy = d;
		}
	}
	return s;
}

int main(int argc, char **argv)
{
	size_t bytes = 0;
	int reps = 0, device = 0, depth = 2;
	double op_ms = 0.5;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--bytes"))
			bytes = strtoull(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--reps"))
			reps = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--device"))
			device = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--depth"))
			depth = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--op-ms"))
			op_ms = atof(argv[i + 1]);
		else {
			fprintf(stderr, "error: arguments: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	if (bytes == 0 || reps <= 0 || reps > 1000 || depth < 1 || !(op_ms > 0)) {
		fprintf(stderr, "error: arguments: expected hostalloc_stall --bytes B --reps R (1..1000) [--device D] "
		                "[--depth Q >= 1] [--op-ms T > 0]\n");
		return 2;
	}
	char why[300];
	if (!open_cuda(why, sizeof why)) {
		fprintf(stderr, "hostalloc_stall: %s: nothing measured\n", why);
		return 3;
	}
	check(cu.set_device(device), "cudaSetDevice");
	check(cu.free_(NULL), "context creation");
	check(cu.stream_create(&drv.stream, 1), "cudaStreamCreateWithFlags");
	for (int i = 0; i < MAX_OPS; i++) {
		check(cu.event_create(&drv.ops[i].before), "cudaEventCreate");
		check(cu.event_create(&drv.ops[i].after), "cudaEventCreate");
	}
	event_t zero, probe;
	check(cu.event_create(&zero), "cudaEventCreate");
	check(cu.event_create(&probe), "cudaEventCreate");

	/* The memset size that takes about op_ms on this device (timed on 64 MiB after one warm-up). */
	size_t probe_bytes = 64u << 20;
	check(cu.malloc_(&drv.dev, probe_bytes), "cudaMalloc");
	check(cu.memset_async(drv.dev, 0, probe_bytes, drv.stream), "cudaMemsetAsync");
	check(cu.event_record(probe, drv.stream), "cudaEventRecord");
	check(cu.memset_async(drv.dev, 1, probe_bytes, drv.stream), "cudaMemsetAsync");
	check(cu.event_record(zero, drv.stream), "cudaEventRecord");
	check(cu.event_sync(zero), "cudaEventSynchronize");
	float probe_ms = 0;
	check(cu.event_elapsed(&probe_ms, probe, zero), "cudaEventElapsedTime");
	double want = probe_ms > 0 ? probe_bytes * (op_ms / probe_ms) : probe_bytes;
	want = want < (1u << 20) ? (1u << 20) : want > (double)(1ul << 30) ? (double)(1ul << 30) : want;
	drv.memset_bytes = (size_t)want;
	drv.bytes = bytes;
	drv.depth = depth;
	check(cu.free_(drv.dev), "cudaFree");
	check(cu.malloc_(&drv.dev, drv.memset_bytes > bytes ? drv.memset_bytes : bytes), "cudaMalloc");
	check(cu.host_alloc(&drv.pin_src, bytes, 1), "cudaHostAlloc");
	check(cu.host_alloc(&drv.pin_dst, bytes, 1), "cudaHostAlloc");
	memset(drv.pin_src, 1, bytes);
	fprintf(stderr, "hostalloc_stall: memset of %zu B per kernel (%.3f ms for 64 MiB), copies of %zu B, depth %d\n",
	        drv.memset_bytes, probe_ms, bytes, depth);

	double *alloc_idle = calloc((size_t)reps, sizeof(double)), *free_idle = calloc((size_t)reps, sizeof(double));
	double *alloc_busy = calloc((size_t)reps, sizeof(double)), *free_busy = calloc((size_t)reps, sizeof(double));
	double *a0 = calloc((size_t)reps, sizeof(double)), *f0 = calloc((size_t)reps, sizeof(double));
	void *buf;
	for (int r = 0; r < reps; r++) { /* the device idle */
		double t0 = now();
		check(cu.host_alloc(&buf, bytes, 1), "cudaHostAlloc");
		double t1 = now();
		check(cu.free_host(buf), "cudaFreeHost");
		alloc_idle[r] = t1 - t0;
		free_idle[r] = now() - t1;
	}
	qsort(alloc_idle, (size_t)reps, sizeof(double), cmp);
	/* Windows: the call, then two operations for the device to drain; the pause between calls
	 * leaves room for a base window of the same length before each, the call on a busy device
	 * up to three times as long as on an idle one. */
	double margin = 2 * op_ms * 1e-3, pause = 4 * alloc_idle[reps / 2] + 2 * margin + 2e-3;

	check(cu.event_record(zero, drv.stream), "cudaEventRecord");
	check(cu.event_sync(zero), "cudaEventSynchronize");
	double h0 = now();
	pthread_t th;
	if (pthread_create(&th, NULL, driver_main, NULL) != 0) {
		fprintf(stderr, "error: pthread_create\n");
		return 1;
	}
	pause_s(20 * op_ms * 1e-3); /* the pipeline in its steady state */
	int done = 0;
	for (; done < reps && !drv.stop && !drv.failed && drv.nops < MAX_OPS - 64; done++) {
		pause_s(pause);
		a0[done] = now();
		check(cu.host_alloc(&buf, bytes, 1), "cudaHostAlloc (busy device)");
		alloc_busy[done] = now() - a0[done];
		pause_s(pause);
		f0[done] = now();
		check(cu.free_host(buf), "cudaFreeHost (busy device)");
		free_busy[done] = now() - f0[done];
	}
	pause_s(pause);
	drv.stop = 1;
	pthread_join(th, NULL);
	if (drv.failed) {
		fprintf(stderr, "error: CUDA: a call of the driver thread failed\n");
		return 1;
	}
	if (done < reps)
		fprintf(stderr, "hostalloc_stall: %d of %d windows measured (%d operations)\n", done, reps, drv.nops);
	if (done == 0)
		return 1;

	double *v[11];
	for (int k = 0; k < 11; k++)
		v[k] = calloc((size_t)done, sizeof(double));
	timeline(zero, h0);
	for (int r = 0; r < done; r++) {
		double la = alloc_busy[r] + margin, lf = free_busy[r] + margin;
		struct window_stats wa = window(a0[r], a0[r] + la);
		struct window_stats wf = window(f0[r], f0[r] + lf);
		struct window_stats wb = window(a0[r] - la - 1e-3, a0[r] - 1e-3);
		v[0][r] = wa.lost, v[1][r] = wf.lost, v[2][r] = wb.lost;
		v[3][r] = wa.maxlost, v[4][r] = wf.maxlost, v[5][r] = wb.maxlost;
		v[6][r] = wa.launch, v[7][r] = wf.launch, v[8][r] = wb.launch;
		v[9][r] = wa.copy, v[10][r] = wf.copy;
	}
	row_depth = depth, row_op_ms = op_ms;
	printf("what,bytes,depth,op_ms,reps,median_s,min_s,max_s\n");
	row("alloc_idle", bytes, alloc_idle, reps);
	row("free_idle", bytes, free_idle, reps);
	row("alloc_busy", bytes, alloc_busy, done);
	row("free_busy", bytes, free_busy, done);
	const char *names[11] = {"gpu_lost_alloc", "gpu_lost_free", "gpu_lost_base", "gpu_maxlost_alloc",
	                         "gpu_maxlost_free", "gpu_maxlost_base", "launch_alloc", "launch_free",
	                         "launch_base", "copy_submit_alloc", "copy_submit_free"};
	for (int k = 0; k < 11; k++)
		row(names[k], bytes, v[k], done);
	double *cb = calloc((size_t)done, sizeof(double));
	for (int r = 0; r < done; r++)
		cb[r] = window(a0[r] - alloc_busy[r] - margin - 1e-3, a0[r] - 1e-3).copy;
	row("copy_submit_base", bytes, cb, done);
	return 0;
}
