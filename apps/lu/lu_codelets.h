/* Codelets of the tiled LU without pivoting: Chameleon's task kinds and
 * perf-model symbols (or StarPU's LU example symbols, see lu_select_symbols). */
#ifndef LU_CODELETS_H
#define LU_CODELETS_H

#include <starpu.h>

enum lu_kind { LU_GETRF, LU_TRSM_ROW, LU_TRSM_COL, LU_GEMM, LU_PLRNT, LU_NKINDS };

/* Symbol sets: "chameleon" (dgetrf_nopiv, dtrsm, dgemm, dplrnt) or "starpu-lu"
 * (starpu_dlu_lu_model_{getrf,trsm_ll,trsm_ru,gemm}). Returns 0, or -1 if unknown. */
int lu_select_symbols(const char *set);

/* Generation arguments of one tile: Chameleon-style diagonally dominant random
 * matrix, value(i,j) a pure function of (seed, i, j), plus n on the diagonal. */
struct lu_plrnt_args {
	int m, n;          /* tile coordinates */
	int b;             /* tile size */
	int n_global;      /* matrix order N (diagonal bump) */
	unsigned long long seed;
};

extern struct starpu_codelet lu_cl_getrf;    /* A(k,k) RW */
extern struct starpu_codelet lu_cl_trsm_row; /* A(k,k) R, A(k,n) RW: L(k,k)^-1 A(k,n) */
extern struct starpu_codelet lu_cl_trsm_col; /* A(k,k) R, A(m,k) RW: A(m,k) U(k,k)^-1 */
extern struct starpu_codelet lu_cl_gemm;     /* A(m,k) R, A(k,n) R, A(m,n) RW */
extern struct starpu_codelet lu_cl_plrnt;    /* A(m,n) W */

/* CUDA support of the real build (cuBLAS/cuSOLVER handles); no-ops without CUDA. */
void lu_cuda_init(void);
void lu_cuda_shutdown(void);
/* Lets getrf_nopiv run on CUDA workers too (cuSOLVER getrf without pivoting; a declared
 * implementation in simulation). Returns 0, or -1 if this build has no such kernel. */
int lu_enable_getrf_on_cuda(void);

/* The element generator, shared with the residual check (which needs no tiles). */
double lu_plrnt_value(unsigned long long seed, int i, int j, int n_global);

#endif
