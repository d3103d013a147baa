/* Per-task cost of StarPU's CUDA worker, apart from the kernel: what the worker thread does
 * for every task (pop, data checks, launch, completion detection, termination).
 *
 *   starpu_task_overhead --tasks N [--chains K]
 *
 * Submits N tasks of three buffers (R, R, RW: the shape of an LU gemm) over K independent
 * chains of tiny vectors already on the GPU; each CUDA implementation is one cublasDscal of a
 * single element (a kernel of a few microseconds), asynchronous (STARPU_CUDA_ASYNC) as
 * apps/lu's codelets. Prints CSV `pipeline,tasks,elapsed_s,per_task_s`, for the
 * STARPU_CUDA_PIPELINE the process runs with (src/drivers/cuda/driver_cuda.c: the number of
 * tasks a CUDA worker keeps queued on its stream). Run with STARPU_NCPU=0 so that the CUDA
 * worker runs every task; a run with pipeline 1 gives the worker's host time plus the kernel
 * per task, a run with pipeline 2 lets the host time overlap the previous kernel. */
#include <starpu.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef STARPU_USE_CUDA
#include <cublas_v2.h>
#include <starpu_cublas_v2.h>

static void cuda_tiny(void *buffers[], void *cl_arg)
{
	(void)cl_arg;
	const double a = 1.0;
	cublasStatus_t st = cublasDscal(starpu_cublas_get_local_handle(), 1, &a,
	                                (double *)STARPU_VECTOR_GET_PTR(buffers[2]), 1);
	if (st != CUBLAS_STATUS_SUCCESS)
		STARPU_CUBLAS_REPORT_ERROR(st);
}
#endif

static struct starpu_codelet cl = {
#ifdef STARPU_USE_CUDA
	.cuda_funcs = {cuda_tiny},
	.cuda_flags = {STARPU_CUDA_ASYNC},
#endif
	.nbuffers = 3,
	.modes = {STARPU_R, STARPU_R, STARPU_RW},
	.name = "tiny",
};

int main(int argc, char **argv)
{
	int ntasks = 0, chains = 64;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--tasks"))
			ntasks = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--chains"))
			chains = atoi(argv[i + 1]);
	}
	if (ntasks <= 0 || chains <= 0) {
		fprintf(stderr, "error: arguments: expected starpu_task_overhead --tasks N [--chains K]\n");
		return 2;
	}
	if (starpu_init(NULL) != 0)
		return 1;
	if (starpu_cuda_worker_get_count() == 0) {
		fprintf(stderr, "error: StarPU: workers: expected a CUDA worker\n");
		starpu_shutdown();
		return 1;
	}
#ifdef STARPU_USE_CUDA
	starpu_cublas_init();
#endif
	int nh = 3 * chains;
	double *v = calloc((size_t)nh * 8, sizeof(double));
	starpu_data_handle_t *h = malloc(sizeof(*h) * (size_t)nh);
	for (int i = 0; i < nh; i++)
		starpu_vector_data_register(&h[i], STARPU_MAIN_RAM, (uintptr_t)(v + 8 * i), 8, sizeof(double));
	/* Warm-up: every vector on the GPU, the kernel loaded; then the timed tasks. */
	for (int round = 0; round < 2; round++) {
		int n = round == 0 ? chains : ntasks;
		double t0 = starpu_timing_now();
		for (int i = 0; i < n; i++) {
			int c = i % chains;
			int ret = starpu_task_insert(&cl, STARPU_R, h[3 * c], STARPU_R, h[3 * c + 1], STARPU_RW, h[3 * c + 2], 0);
			STARPU_CHECK_RETURN_VALUE(ret, "starpu_task_insert");
		}
		starpu_task_wait_for_all();
		double elapsed = (starpu_timing_now() - t0) * 1e-6;
		if (round == 1) {
			const char *pl = getenv("STARPU_CUDA_PIPELINE");
			printf("pipeline,tasks,elapsed_s,per_task_s\n%s,%d,%.9g,%.9g\n", pl ? pl : "default", n, elapsed,
			       elapsed / n);
		}
	}
	for (int i = 0; i < nh; i++)
		starpu_data_unregister(h[i]);
	free(h);
	free(v);
#ifdef STARPU_USE_CUDA
	starpu_cublas_shutdown();
#endif
	starpu_shutdown();
	return 0;
}
