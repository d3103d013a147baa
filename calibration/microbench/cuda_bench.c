/* GPU allocation and copy costs as StarPU pays them, on one CUDA device.
 *
 *   cuda_bench --bytes B --reps R [--device D]
 *
 * Prints CSV rows `what,bytes,reps,median_s,min_s,max_s`:
 *   malloc      cudaMemGetInfo + cudaMalloc of B bytes, as StarPU's CUDA allocator does for
 *               every buffer it places on a GPU (src/drivers/cuda/driver_cuda.c,
 *               _starpu_cuda_malloc_on_node: free-memory check, then cudaMalloc)
 *   free        cudaFree of such a buffer (_starpu_cuda_free_on_node)
 *   h2d, d2h    one cudaMemcpyAsync of B bytes from/to pinned host memory (cudaHostAlloc,
 *               as STARPU_MALLOC_PINNED), waited for with cudaStreamSynchronize
 *   hostalloc   cudaHostAlloc of B bytes with the flags StarPU's starpu_malloc_flags uses for
 *               STARPU_MALLOC_PINNED (src/datawizard/malloc.c, _starpu_malloc_flags_on_node):
 *               cudaHostAllocPortable|cudaHostAllocMapped when StarPU is built with CUDA
 *               mapping (configure's default --enable-cuda-map) and the device can map host
 *               memory, else cudaHostAllocPortable alone (row hostalloc_portable, always
 *               measured); apps/lu allocates every tile so (lu.c, starpu_malloc_flags)
 *   hostfree    cudaFreeHost of such a buffer (malloc.c, _starpu_free_flags_on_node)
 * StarPU-SimGrid charges 175 us per allocation and 750 us per free (driver_cuda.c, SimGrid
 * branch); this measures the device at hand. Built by calibration/microbench/Makefile when a
 * CUDA toolkit is found. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void row(const char *what, size_t bytes, double *t, int reps)
{
	qsort(t, (size_t)reps, sizeof *t, cmp);
	printf("%s,%zu,%d,%.9g,%.9g,%.9g\n", what, bytes, reps, t[reps / 2], t[0], t[reps - 1]);
}

static void check(cudaError_t e, const char *what)
{
	if (e != cudaSuccess) {
		fprintf(stderr, "error: CUDA: %s: %s\n", what, cudaGetErrorString(e));
		exit(1);
	}
}

int main(int argc, char **argv)
{
	size_t bytes = 0;
	int reps = 0, device = 0;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--bytes"))
			bytes = strtoull(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--reps"))
			reps = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--device"))
			device = atoi(argv[i + 1]);
	}
	if (bytes == 0 || reps <= 0) {
		fprintf(stderr, "error: arguments: expected cuda_bench --bytes B --reps R [--device D]\n");
		return 2;
	}
	check(cudaSetDevice(device), "cudaSetDevice");
	check(cudaFree(0), "context creation");
	void **bufs = calloc((size_t)reps, sizeof *bufs);
	double *t = calloc((size_t)reps, sizeof *t);
	printf("what,bytes,reps,median_s,min_s,max_s\n");

	for (int r = 0; r < reps; r++) { /* reps live buffers, as tiles accumulate on a GPU */
		size_t free_b, total_b;
		double t0 = now();
		check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
		check(cudaMalloc(&bufs[r], bytes), "cudaMalloc");
		t[r] = now() - t0;
	}
	row("malloc", bytes, t, reps);

	void *host;
	cudaStream_t s;
	check(cudaHostAlloc(&host, bytes, cudaHostAllocPortable), "cudaHostAlloc");
	memset(host, 1, bytes);
	check(cudaStreamCreate(&s), "cudaStreamCreate");
	for (int dir = 0; dir < 2; dir++) {
		for (int r = 0; r < reps; r++) {
			double t0 = now();
			if (dir == 0)
				check(cudaMemcpyAsync(bufs[r], host, bytes, cudaMemcpyHostToDevice, s), "H2D copy");
			else
				check(cudaMemcpyAsync(host, bufs[r], bytes, cudaMemcpyDeviceToHost, s), "D2H copy");
			check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
			t[r] = now() - t0;
		}
		row(dir == 0 ? "h2d" : "d2h", bytes, t, reps);
	}

	for (int r = 0; r < reps; r++) {
		double t0 = now();
		check(cudaFree(bufs[r]), "cudaFree");
		t[r] = now() - t0;
	}
	row("free", bytes, t, reps);

	cudaStreamDestroy(s);
	check(cudaFreeHost(host), "cudaFreeHost");

	/* Pinned host allocations: reps live buffers (as replicas accumulate in RAM), then freed, per
	 * flag set. */
	int can_map = 0;
	check(cudaDeviceGetAttribute(&can_map, cudaDevAttrCanMapHostMemory, device), "cudaDeviceGetAttribute");
	const unsigned int flag_sets[2] = {cudaHostAllocPortable, cudaHostAllocPortable | cudaHostAllocMapped};
	const char *names[2][2] = {{"hostalloc_portable", "hostfree_portable"}, {"hostalloc", "hostfree"}};
	for (int f = 0; f < (can_map ? 2 : 1); f++) {
		for (int r = 0; r < reps; r++) {
			double t0 = now();
			check(cudaHostAlloc(&bufs[r], bytes, flag_sets[f]), "cudaHostAlloc");
			t[r] = now() - t0;
		}
		row(names[f][0], bytes, t, reps);
		for (int r = 0; r < reps; r++) {
			double t0 = now();
			check(cudaFreeHost(bufs[r]), "cudaFreeHost");
			t[r] = now() - t0;
		}
		row(names[f][1], bytes, t, reps);
	}
	free(bufs);
	free(t);
	return 0;
}
