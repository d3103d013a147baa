/* Codelets of the tiled LU without pivoting.
 *
 * Task kinds, data access modes and perf-model symbols follow Chameleon's
 * compute/pzgetrf_nopiv.c and codelets/codelet_z{getrf_nopiv,trsm,gemm,plrnt}.c
 * (after precision generation: dgetrf_nopiv, dtrsm, dgemm, dplrnt); the
 * alternative symbol set matches StarPU's examples/lu/xlu_kernels.c
 * (starpu_dlu_lu_model_*), whose trsm_ll solves L11 U12 = A12 (our row trsm,
 * A(k,n)) and trsm_ru solves A21 U11^-1 (our column trsm, A(m,k)). Footprints
 * depend only on the tiles' nx, ny (src/datawizard/interfaces/matrix_interface.c),
 * so b x b tiles registered one by one match models recorded on a partitioned
 * matrix with the same tile size. */
#include "lu_codelets.h"

#include <stdint.h>
#include <string.h>

#ifndef STARPU_SIMGRID
#include <cblas.h>
#define LU_HAVE_KERNELS 1
#endif

static struct starpu_perfmodel model_getrf = {.type = STARPU_HISTORY_BASED};
static struct starpu_perfmodel model_trsm_row = {.type = STARPU_HISTORY_BASED};
static struct starpu_perfmodel model_trsm_col = {.type = STARPU_HISTORY_BASED};
static struct starpu_perfmodel model_gemm = {.type = STARPU_HISTORY_BASED};
static struct starpu_perfmodel model_plrnt = {.type = STARPU_HISTORY_BASED, .symbol = "dplrnt"};

int lu_select_symbols(const char *set)
{
	if (strcmp(set, "chameleon") == 0) {
		/* Chameleon has one dtrsm codelet for both sides: both trsm kinds share
		 * one model, as in Chameleon's calibrated files. */
		model_getrf.symbol = "dgetrf_nopiv";
		model_trsm_row.symbol = "dtrsm";
		lu_cl_trsm_row.model = &model_trsm_row;
		lu_cl_trsm_col.model = &model_trsm_row;
		model_gemm.symbol = "dgemm";
		return 0;
	}
	if (strcmp(set, "starpu-lu") == 0) {
		model_getrf.symbol = "starpu_dlu_lu_model_getrf";
		model_trsm_row.symbol = "starpu_dlu_lu_model_trsm_ll";
		model_trsm_col.symbol = "starpu_dlu_lu_model_trsm_ru";
		lu_cl_trsm_row.model = &model_trsm_row;
		lu_cl_trsm_col.model = &model_trsm_col;
		model_gemm.symbol = "starpu_dlu_lu_model_gemm";
		return 0;
	}
	return -1;
}

/* splitmix64 (Steele et al. 2014): a counter-based generator, so any tile can
 * be generated independently and the matrix is the same for any distribution. */
static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

double lu_plrnt_value(unsigned long long seed, int i, int j, int n_global)
{
	uint64_t key = mix64(seed) ^ ((uint64_t)i * (uint64_t)n_global + (uint64_t)j);
	double v = (double)(mix64(key) >> 11) * 0x1.0p-53 - 0.5; /* uniform [-0.5, 0.5) */
	/* Chameleon's plrnt adds a bump of N on the diagonal: diagonally dominant,
	 * hence LU without pivoting is stable. */
	return i == j ? v + n_global : v;
}

#ifdef LU_HAVE_KERNELS
/* A = L U in place, L unit lower, U upper (column-major, leading dimension ld). */
static void getrf_nopiv_unblocked(int n, int ncols, double *a, int ld)
{
	for (int j = 0; j < ncols; j++) {
		double pivot = a[j + (size_t)j * ld];
		for (int i = j + 1; i < n; i++)
			a[i + (size_t)j * ld] /= pivot;
		for (int l = j + 1; l < ncols; l++) {
			double u = a[j + (size_t)l * ld];
			for (int i = j + 1; i < n; i++)
				a[i + (size_t)l * ld] -= a[i + (size_t)j * ld] * u;
		}
	}
}

/* Right-looking blocked LU without pivoting: panels of width nb factored
 * unblocked, the trailing matrix updated with BLAS 3. */
static void getrf_nopiv(int n, double *a, int ld)
{
	const int nb = 32;
	for (int k = 0; k < n; k += nb) {
		int w = n - k < nb ? n - k : nb;
		double *akk = a + k + (size_t)k * ld;
		getrf_nopiv_unblocked(n - k, w, akk, ld);
		int rest = n - k - w;
		if (rest > 0) {
			double *a12 = a + k + (size_t)(k + w) * ld;
			double *a21 = a + (k + w) + (size_t)k * ld;
			double *a22 = a + (k + w) + (size_t)(k + w) * ld;
			cblas_dtrsm(CblasColMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, w, rest, 1.0,
			            akk, ld, a12, ld);
			cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, rest, rest, w, -1.0, a21, ld, a12,
			            ld, 1.0, a22, ld);
		}
	}
}

static void cpu_getrf(void *buffers[], void *cl_arg)
{
	(void)cl_arg;
	getrf_nopiv((int)STARPU_MATRIX_GET_NX(buffers[0]), (double *)STARPU_MATRIX_GET_PTR(buffers[0]),
	            (int)STARPU_MATRIX_GET_LD(buffers[0]));
}

static void cpu_trsm_row(void *buffers[], void *cl_arg)
{
	(void)cl_arg;
	int b = (int)STARPU_MATRIX_GET_NX(buffers[1]);
	cblas_dtrsm(CblasColMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, b, b, 1.0,
	            (double *)STARPU_MATRIX_GET_PTR(buffers[0]), (int)STARPU_MATRIX_GET_LD(buffers[0]),
	            (double *)STARPU_MATRIX_GET_PTR(buffers[1]), (int)STARPU_MATRIX_GET_LD(buffers[1]));
}

static void cpu_trsm_col(void *buffers[], void *cl_arg)
{
	(void)cl_arg;
	int b = (int)STARPU_MATRIX_GET_NX(buffers[1]);
	cblas_dtrsm(CblasColMajor, CblasRight, CblasUpper, CblasNoTrans, CblasNonUnit, b, b, 1.0,
	            (double *)STARPU_MATRIX_GET_PTR(buffers[0]), (int)STARPU_MATRIX_GET_LD(buffers[0]),
	            (double *)STARPU_MATRIX_GET_PTR(buffers[1]), (int)STARPU_MATRIX_GET_LD(buffers[1]));
}

static void cpu_gemm(void *buffers[], void *cl_arg)
{
	(void)cl_arg;
	int b = (int)STARPU_MATRIX_GET_NX(buffers[2]);
	cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, b, b, b, -1.0,
	            (double *)STARPU_MATRIX_GET_PTR(buffers[0]), (int)STARPU_MATRIX_GET_LD(buffers[0]),
	            (double *)STARPU_MATRIX_GET_PTR(buffers[1]), (int)STARPU_MATRIX_GET_LD(buffers[1]), 1.0,
	            (double *)STARPU_MATRIX_GET_PTR(buffers[2]), (int)STARPU_MATRIX_GET_LD(buffers[2]));
}

static void cpu_plrnt(void *buffers[], void *cl_arg)
{
	struct lu_plrnt_args args;
	starpu_codelet_unpack_args(cl_arg, &args);
	double *a = (double *)STARPU_MATRIX_GET_PTR(buffers[0]);
	size_t ld = STARPU_MATRIX_GET_LD(buffers[0]);
	for (int j = 0; j < args.b; j++)
		for (int i = 0; i < args.b; i++)
			a[i + j * ld] = lu_plrnt_value(args.seed, args.m * args.b + i, args.n * args.b + j,
			                               args.n_global);
}
#define KERNEL(f) f
#else
/* In simulation StarPU never calls CPU functions (durations come from the
 * perf models); a non-NULL pointer only declares the CPU implementation. */
static void not_executed_in_simulation(void *buffers[], void *cl_arg)
{
	(void)buffers;
	(void)cl_arg;
	STARPU_ABORT_MSG("LU kernel called in simulation");
}
#define KERNEL(f) not_executed_in_simulation
#endif

/* CUDA implementations (real build with CUDA): cuBLAS on the worker's stream, asynchronous
 * (STARPU_CUDA_ASYNC), as Chameleon's cudablas/compute/cuda_z{gemm,trsm}.c called from
 * codelets/codelet_z{gemm,trsm}.c; StarPU binds each worker's cuBLAS/cuSOLVER handle to
 * its stream (src/drivers/cuda/starpu_cublas.c, starpu_cusolver.c). In simulation, a
 * placeholder pointer declares the implementation (as Chameleon and StarPU's LU example do
 * in SimGrid builds) so that the simulated GPUs of a platform take those tasks. */
#if defined(STARPU_USE_CUDA) && !defined(STARPU_SIMGRID)
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <starpu_cublas_v2.h>
#ifdef STARPU_HAVE_LIBCUSOLVER
#include <cusolverDn.h>
#include <starpu_cusolver.h>
#endif

static void check_cublas(cublasStatus_t st)
{
	if (st != CUBLAS_STATUS_SUCCESS)
		STARPU_CUBLAS_REPORT_ERROR(st);
}

static void cuda_trsm_row(void *buffers[], void *cl_arg)
{
	(void)cl_arg;
	const double one = 1.0;
	int b = (int)STARPU_MATRIX_GET_NX(buffers[1]);
	check_cublas(cublasDtrsm(starpu_cublas_get_local_handle(), CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER,
	                         CUBLAS_OP_N, CUBLAS_DIAG_UNIT, b, b, &one,
	                         (const double *)STARPU_MATRIX_GET_PTR(buffers[0]), (int)STARPU_MATRIX_GET_LD(buffers[0]),
	                         (double *)STARPU_MATRIX_GET_PTR(buffers[1]), (int)STARPU_MATRIX_GET_LD(buffers[1])));
}

static void cuda_trsm_col(void *buffers[], void *cl_arg)
{
	(void)cl_arg;
	const double one = 1.0;
	int b = (int)STARPU_MATRIX_GET_NX(buffers[1]);
	check_cublas(cublasDtrsm(starpu_cublas_get_local_handle(), CUBLAS_SIDE_RIGHT, CUBLAS_FILL_MODE_UPPER,
	                         CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, b, b, &one,
	                         (const double *)STARPU_MATRIX_GET_PTR(buffers[0]), (int)STARPU_MATRIX_GET_LD(buffers[0]),
	                         (double *)STARPU_MATRIX_GET_PTR(buffers[1]), (int)STARPU_MATRIX_GET_LD(buffers[1])));
}

static void cuda_gemm(void *buffers[], void *cl_arg)
{
	(void)cl_arg;
	const double minus_one = -1.0, one = 1.0;
	int b = (int)STARPU_MATRIX_GET_NX(buffers[2]);
	check_cublas(cublasDgemm(starpu_cublas_get_local_handle(), CUBLAS_OP_N, CUBLAS_OP_N, b, b, b, &minus_one,
	                         (const double *)STARPU_MATRIX_GET_PTR(buffers[0]), (int)STARPU_MATRIX_GET_LD(buffers[0]),
	                         (const double *)STARPU_MATRIX_GET_PTR(buffers[1]), (int)STARPU_MATRIX_GET_LD(buffers[1]),
	                         &one, (double *)STARPU_MATRIX_GET_PTR(buffers[2]), (int)STARPU_MATRIX_GET_LD(buffers[2])));
}

#ifdef STARPU_HAVE_LIBCUSOLVER
/* cuSOLVER's getrf without pivoting (devIpiv = NULL), as StarPU's examples/lu/xlu_kernels.c
 * (common_getrf, case 1). Its workspace is one buffer per CUDA worker, allocated on first
 * use and freed by lu_cuda_shutdown, so that the task keeps Chameleon's single buffer (and
 * footprint) instead of StarPU's example's extra scratch handles. */
static struct {
	double *work;
	int *info;
	int lwork;
} getrf_ws[STARPU_NMAXWORKERS];

static void check_cusolver(cusolverStatus_t st)
{
	if (st != CUSOLVER_STATUS_SUCCESS)
		STARPU_CUSOLVER_REPORT_ERROR(st);
}

static void cuda_getrf(void *buffers[], void *cl_arg)
{
	(void)cl_arg;
	cusolverDnHandle_t h = starpu_cusolverDn_get_local_handle();
	int b = (int)STARPU_MATRIX_GET_NX(buffers[0]), ld = (int)STARPU_MATRIX_GET_LD(buffers[0]);
	double *a = (double *)STARPU_MATRIX_GET_PTR(buffers[0]);
	int lwork = 0;
	check_cusolver(cusolverDnDgetrf_bufferSize(h, b, b, a, ld, &lwork));
	int w = starpu_worker_get_id_check();
	if (lwork > getrf_ws[w].lwork) {
		cudaFree(getrf_ws[w].work);
		if (!getrf_ws[w].info && cudaMalloc((void **)&getrf_ws[w].info, sizeof(int)) != cudaSuccess)
			STARPU_ABORT_MSG("cudaMalloc of the getrf info word failed");
		if (cudaMalloc((void **)&getrf_ws[w].work, sizeof(double) * (size_t)lwork) != cudaSuccess)
			STARPU_ABORT_MSG("cudaMalloc of the getrf workspace failed");
		getrf_ws[w].lwork = lwork;
	}
	check_cusolver(cusolverDnDgetrf(h, b, b, a, ld, getrf_ws[w].work, NULL, getrf_ws[w].info));
}

static void free_getrf_workspace(void *arg)
{
	(void)arg;
	int w = starpu_worker_get_id_check();
	cudaFree(getrf_ws[w].work);
	cudaFree(getrf_ws[w].info);
	getrf_ws[w].work = NULL;
	getrf_ws[w].info = NULL;
	getrf_ws[w].lwork = 0;
}
#define GETRF_CUDA_FUNC cuda_getrf
#endif
#define CUDA_IMPL(f) .cuda_funcs = {f}, .cuda_flags = {STARPU_CUDA_ASYNC},
#elif defined(STARPU_SIMGRID)
#define CUDA_IMPL(f) .cuda_funcs = {(starpu_cuda_func_t)1}, .cuda_flags = {STARPU_CUDA_ASYNC},
#define GETRF_CUDA_FUNC ((starpu_cuda_func_t)1)
#else
#define CUDA_IMPL(f)
#endif

void lu_cuda_init(void)
{
#if defined(STARPU_USE_CUDA) && !defined(STARPU_SIMGRID)
	starpu_cublas_init();
#ifdef STARPU_HAVE_LIBCUSOLVER
	starpu_cusolver_init();
#endif
#endif
}

void lu_cuda_shutdown(void)
{
#if defined(STARPU_USE_CUDA) && !defined(STARPU_SIMGRID)
#ifdef STARPU_HAVE_LIBCUSOLVER
	starpu_execute_on_each_worker(free_getrf_workspace, NULL, STARPU_CUDA);
	starpu_cusolver_shutdown();
#endif
	starpu_cublas_shutdown();
#endif
}

int lu_enable_getrf_on_cuda(void)
{
#ifdef GETRF_CUDA_FUNC
	lu_cl_getrf.cuda_funcs[0] = GETRF_CUDA_FUNC;
	lu_cl_getrf.cuda_flags[0] = STARPU_CUDA_ASYNC;
	return 0;
#else
	return -1;
#endif
}

struct starpu_codelet lu_cl_getrf = {
	.cpu_funcs = {KERNEL(cpu_getrf)},
	.nbuffers = 1,
	.modes = {STARPU_RW},
	.model = &model_getrf,
	.name = "getrf",
};

struct starpu_codelet lu_cl_trsm_row = {
	.cpu_funcs = {KERNEL(cpu_trsm_row)},
	CUDA_IMPL(cuda_trsm_row)
	.nbuffers = 2,
	.modes = {STARPU_R, STARPU_RW},
	.model = &model_trsm_row,
	.name = "trsm",
};

struct starpu_codelet lu_cl_trsm_col = {
	.cpu_funcs = {KERNEL(cpu_trsm_col)},
	CUDA_IMPL(cuda_trsm_col)
	.nbuffers = 2,
	.modes = {STARPU_R, STARPU_RW},
	.model = &model_trsm_col,
	.name = "trsm",
};

struct starpu_codelet lu_cl_gemm = {
	.cpu_funcs = {KERNEL(cpu_gemm)},
	CUDA_IMPL(cuda_gemm)
	.nbuffers = 3,
	.modes = {STARPU_R, STARPU_R, STARPU_RW},
	.model = &model_gemm,
	.name = "gemm",
};

struct starpu_codelet lu_cl_plrnt = {
	.cpu_funcs = {KERNEL(cpu_plrnt)},
	.nbuffers = 1,
	.modes = {STARPU_W},
	.model = &model_plrnt,
	.name = "plrnt",
};
