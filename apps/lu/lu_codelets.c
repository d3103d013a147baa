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

/* In simulation, gemm and trsm also declare a CUDA implementation (placeholder
 * pointer, as Chameleon and StarPU's LU example do in SimGrid builds), so that
 * the simulated GPUs of a platform take them; getrf_nopiv stays CPU only. */
#ifdef STARPU_SIMGRID
#define SIMULATED_CUDA .cuda_funcs = {(starpu_cuda_func_t)1}, .cuda_flags = {STARPU_CUDA_ASYNC},
#else
#define SIMULATED_CUDA
#endif

struct starpu_codelet lu_cl_getrf = {
	.cpu_funcs = {KERNEL(cpu_getrf)},
	.nbuffers = 1,
	.modes = {STARPU_RW},
	.model = &model_getrf,
	.name = "getrf",
};

struct starpu_codelet lu_cl_trsm_row = {
	.cpu_funcs = {KERNEL(cpu_trsm_row)},
	SIMULATED_CUDA
	.nbuffers = 2,
	.modes = {STARPU_R, STARPU_RW},
	.model = &model_trsm_row,
	.name = "trsm",
};

struct starpu_codelet lu_cl_trsm_col = {
	.cpu_funcs = {KERNEL(cpu_trsm_col)},
	SIMULATED_CUDA
	.nbuffers = 2,
	.modes = {STARPU_R, STARPU_RW},
	.model = &model_trsm_col,
	.name = "trsm",
};

struct starpu_codelet lu_cl_gemm = {
	.cpu_funcs = {KERNEL(cpu_gemm)},
	SIMULATED_CUDA
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
