/* Chameleon's tiled LU without pivoting (CHAMELEON_dgetrf_nopiv_Tile) on the testbed's tile ->
 * rank mapping: a 2D block-cyclic P x Q grid or a distribution file (docs/interfaces.md section
 * 5, the format apps/lu reads, with the same reader: apps/lu/lu_distribution.c). The
 * `real` and `starpu-simgrid` engines run it for `--app chameleon` (testbed/run/engines/chameleon_app.py).
 *
 * usage: chameleon_lu --n N --b B [--dist FILE | --p P --q Q] [--seed S] [--check] [--nowarmup]
 *
 * It does what Chameleon 1.2's testing driver does for `chameleon_dtesting -o getrf_nopiv -t -1
 * -g -1` (testing/chameleon_ztesting.c main, testing/testing_zgetrf_nopiv.c
 * testing_zgetrf_nopiv_desc), with the descriptor created by CHAMELEON_Desc_Create_User and a
 * get_rankof of its own instead of CHAMELEON_Desc_Create's P x Q grid:
 *   - CHAMELEON_Init(-1, -1): StarPU counts the workers (STARPU_NCPU, STARPU_NCUDA, ... apply);
 *   - the matrix generated as the testing driver does: CHAMELEON_dplgtr_Tile(0, ChamUpper, A,
 *     seed) then CHAMELEON_dplgtr_Tile(N, ChamLower, A, seed + 1), diagonally dominant by the
 *     bump N on the diagonal, so that the LU without pivoting is stable;
 *   - a warm-up LU first (the driver's default, "to load libraries"; --nowarmup leaves it out),
 *     then the timed one: CHAMELEON_Distributed_start, CHAMELEON_dgetrf_nopiv_Tile,
 *     CHAMELEON_Distributed_stop between two RUNTIME_get_time (testing/testings.c
 *     testing_start, testing_stop);
 *   - with --check (not in simulation, where kernels do not run), the testing driver's check
 *     (testing/testing_zcheck_facto.c check_zxxtrf, ChamGeneral, ChamUpperLower): the matrix
 *     generated again, ||A||_1 and ||A - L U||_1, SUCCESS when ||A - L U|| / (||A|| N eps) <= 60.
 * Rank 0 prints the testing driver's `;`-separated header and line (testing/run_list.c
 * run_print_header, run_print_line) with the columns of getrf_nopiv, and two of its own:
 * `distribution` (block-cyclic or file) and `tiles_by_rank`, the number of tiles of each rank
 * as Chameleon's descriptor records them (its get_rankof after creation). The exit status is
 * the number of failures, as the testing driver's; bad input is one line `error: KEY: expected
 * ...` on rank 0, exit 2, as apps/lu. */
#include <chameleon.h>
#include <chameleon/flops.h>
#include <float.h>
#include <getopt.h>
#include <math.h>
#include <starpu.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lu_distribution.h"

struct options {
	long n, b;
	const char *dist_file;
	int p, q;
	unsigned long long seed;
	int check;
	int warmup;
};

/* The owner table the descriptor's get_rankof reads (one matrix layout per process). */
static struct lu_distribution owners;

/* A blkrankof_fct_t (include/chameleon/struct.h: int (*)(const CHAM_desc_t *, int, int)), the
 * last argument of CHAMELEON_Desc_Create_User (include/chameleon.h, control/descriptor.c): the
 * rank of tile (m, n). Chameleon calls it once per tile when it creates a descriptor
 * (control/descriptor.c chameleon_desc_init_tiles stores it in tile->rank; desc->get_rankof
 * reads it back afterwards), also for the copies CHAMELEON_Desc_Copy makes of it. */
static int rank_of_tile(const CHAM_desc_t *desc, int m, int n)
{
	(void)desc;
	return owners.owners[m * owners.nt + n];
}

/* Returns 0, or an exit status (2) after printing the error on rank 0. */
static int parse_options(int argc, char **argv, struct options *o, int rank)
{
	static const struct option longopts[] = {
		{"n", required_argument, 0, 'n'},    {"b", required_argument, 0, 'b'},
		{"dist", required_argument, 0, 'd'}, {"p", required_argument, 0, 'p'},
		{"q", required_argument, 0, 'q'},    {"seed", required_argument, 0, 's'},
		{"check", no_argument, 0, 'c'},      {"nowarmup", no_argument, 0, 'w'},
		{0, 0, 0, 0},
	};
	*o = (struct options){.seed = 1, .warmup = 1};
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'n': o->n = atol(optarg); break;
		case 'b': o->b = atol(optarg); break;
		case 'd': o->dist_file = optarg; break;
		case 'p': o->p = atoi(optarg); break;
		case 'q': o->q = atoi(optarg); break;
		case 's': o->seed = strtoull(optarg, NULL, 10); break;
		case 'c': o->check = 1; break;
		case 'w': o->warmup = 0; break;
		default:
			return lu_usage_error(rank, "arguments",
			                   "chameleon_lu --n N --b B [--dist FILE|--p P --q Q] [--seed S] [--check] "
			                   "[--nowarmup]");
		}
	}
	if (lu_check_order(o->n, o->b, rank) != 0)
		return 2;
	if (o->dist_file && (o->p || o->q))
		return lu_usage_error(rank, "--dist/--p/--q", "either a distribution file or a P x Q grid");
#ifdef CHAMELEON_SIMULATION
	if (o->check)
		return lu_usage_error(rank, "--check", "a native build (in simulation Chameleon's kernels do not run)");
#endif
	return 0;
}

/* The owner table of the run: the file, or the P x Q grid (Chameleon's chameleon_getrankof_2d,
 * control/descriptor_helpers.c, (m mod P) Q + (n mod Q)); and the grid the descriptor gets: P x Q,
 * or for a file the near-square grid of the ranks, which Chameleon's workspaces use (the
 * reductions of compute/pzlange.c, the task window of compute/pzgetrf_nopiv.c: P Q = ranks). */
static int read_owners(struct options *o, int nt, int size, int rank)
{
	char err[512];
	if (lu_distribution_of_run(&owners, o->dist_file, &o->p, &o->q, nt, size, err, sizeof err) != 0) {
		if (rank == 0)
			fprintf(stderr, "%s\n", err);
		return 2;
	}
	if (o->dist_file)
		lu_near_square_grid(size, &o->p, &o->q);
	return 0;
}

static CHAM_desc_t *create_matrix(const struct options *o)
{
	CHAM_desc_t *desc = NULL;
	int n = (int)o->n, b = (int)o->b;
	/* CHAMELEON_MAT_ALLOC_TILE: StarPU allocates each tile on its owner when first written
	 * (control/descriptor.c chameleon_desc_init_internal), whatever the mapping; the global
	 * allocation (CHAMELEON_MAT_ALLOC_GLOBAL) lays the local tiles out by the P x Q grid. */
	int rc = CHAMELEON_Desc_Create_User(&desc, CHAMELEON_MAT_ALLOC_TILE, ChamRealDouble, b, b, b * b, n, n, 0, 0, n,
	                                    n, o->p, o->q, NULL, NULL, rank_of_tile);
	if (rc != CHAMELEON_SUCCESS) {
		fprintf(stderr, "CHAMELEON_Desc_Create_User failed and returned %d\n", rc);
		exit(1);
	}
	return desc;
}

/* testing_zgetrf_nopiv_desc's generation: the upper part random, the lower part random with the
 * bump N on the diagonal (CHAMELEON_zplgtr_Tile, codelet zplgsy). */
static void generate(CHAM_desc_t *A, const struct options *o)
{
	CHAMELEON_dplgtr_Tile(0., ChamUpper, A, o->seed);
	CHAMELEON_dplgtr_Tile((double)o->n, ChamLower, A, o->seed + 1);
}

struct run {
	double time;
	int hres;
	double anorm, rnorm;
	int failed;
};

/* check_zxxtrf for a general matrix factorized in place (ChamGeneral, ChamUpperLower):
 * L = the strictly lower part of LU with a unit diagonal, U its upper part, A0 - L U. The copies
 * keep the mapping (CHAMELEON_Desc_Copy passes the descriptor's get_rankof on). */
static void check(CHAM_desc_t *LU, const struct options *o, struct run *r)
{
	CHAM_desc_t *A0 = CHAMELEON_Desc_Copy(LU, CHAMELEON_MAT_ALLOC_TILE);
	CHAM_desc_t *L = CHAMELEON_Desc_Copy(LU, CHAMELEON_MAT_ALLOC_TILE);
	CHAM_desc_t *U = CHAMELEON_Desc_Copy(LU, CHAMELEON_MAT_ALLOC_TILE);
	generate(A0, o);
	CHAMELEON_dlaset_Tile(ChamUpperLower, 0., 0., L);
	CHAMELEON_dlaset_Tile(ChamUpperLower, 0., 0., U);
	CHAMELEON_dlacpy_Tile(ChamLower, LU, L);
	CHAMELEON_dlaset_Tile(ChamUpper, 0., 1., L);
	CHAMELEON_dlacpy_Tile(ChamUpper, LU, U);
	r->anorm = CHAMELEON_dlange_Tile(ChamOneNorm, A0);
	/* Chameleon 1.2 picks SUMMA-C for a product across ranks but makes its workspaces only for a
	 * descriptor of chameleon_getrankof_2d (compute/zgemm.c CHAMELEON_zgemm_WS_Alloc; pzgemm.c
	 * then reads the missing ones): the generic algorithm, which any mapping takes */
	setenv("CHAMELEON_GEMM_ALGO", "generic", 1);
	CHAMELEON_dgemm_Tile(ChamNoTrans, ChamNoTrans, -1., L, U, 1., A0);
	r->rnorm = CHAMELEON_dlange_Tile(ChamOneNorm, A0);
	/* testing_getaccuracy: LAPACK's dlamch('e'), the relative machine precision 2^-53 */
	double result = r->rnorm / (r->anorm * (double)o->n * (DBL_EPSILON / 2));
	r->failed = isnan(result) || isinf(result) || result > 60.0;
	CHAMELEON_Desc_Destroy(&A0);
	CHAMELEON_Desc_Destroy(&L);
	CHAMELEON_Desc_Destroy(&U);
}

static struct run one_lu(const struct options *o, int *tiles_by_rank, int size)
{
	struct run r = {0};
	CHAM_desc_t *A = create_matrix(o);
	if (tiles_by_rank) {
		memset(tiles_by_rank, 0, sizeof(int) * (size_t)size);
		for (int m = 0; m < A->mt; m++)
			for (int n = 0; n < A->nt; n++)
				tiles_by_rank[A->get_rankof(A, m, n)]++;
	}
	generate(A, o);
	CHAMELEON_Distributed_start();
	double t0 = RUNTIME_get_time();
	r.hres = CHAMELEON_dgetrf_nopiv_Tile(A);
	CHAMELEON_Distributed_stop();
	r.time = RUNTIME_get_time() - t0;
	if (o->check)
		check(A, o, &r);
	CHAMELEON_Desc_Destroy(&A);
	return r;
}

static void print_result(const struct options *o, const struct run *r, const int *tiles_by_rank, int size)
{
	double gflops = r->hres == CHAMELEON_SUCCESS ? flops_dgetrf((double)o->n, (double)o->n) * 1e-9 / r->time : -1.;
	printf("Id;Function;threads;gpus;P;Q;mtxfmt;nb;m;n;lda;seedA;bump;distribution;tiles_by_rank;tsub;time;gflops%s\n",
	       o->check ? ";||A||;||A-fact(A)||;RETURN" : "");
	printf("0;dgetrf_nopiv;%d;%u;%d;%d;1;%ld;%ld;%ld;%ld;%llu;%e;%s;", CHAMELEON_GetThreadNbr(),
	       starpu_cuda_worker_get_count(), o->p, o->q, o->b, o->n, o->n, o->n, o->seed, (double)o->n,
	       o->dist_file ? "file" : "block-cyclic");
	for (int i = 0; i < size; i++)
		printf("%s%d", i ? "," : "", tiles_by_rank[i]);
	printf(";%e;%e;%e", 0., r->time, gflops);
	if (o->check)
		printf(";%e;%e;%s", r->anorm, r->rnorm, r->failed ? "FAILED" : "SUCCESS");
	printf("\n");
	fflush(stdout);
}

int main(int argc, char **argv)
{
	struct options o;
	int status;
#ifndef CHAMELEON_SIMULATION
	/* Arguments are checked before StarPU starts (which may calibrate the bus); errors are
	 * printed by rank 0 only. */
	if ((status = parse_options(argc, argv, &o, lu_launcher_rank())))
		return status;
#endif
	int rc = CHAMELEON_Init(-1, -1);
	if (rc != CHAMELEON_SUCCESS) {
		fprintf(stderr, "CHAMELEON_Init failed and returned %d.\n", rc);
		return 1;
	}
	int rank = CHAMELEON_Comm_rank(), size = CHAMELEON_Comm_size();
#ifdef CHAMELEON_SIMULATION
	/* SMPI runs main inside the simulation: Chameleon (StarPU-MPI) is up around any early exit */
	if ((status = parse_options(argc, argv, &o, rank))) {
		CHAMELEON_Finalize();
		return status;
	}
#endif
	if ((status = read_owners(&o, (int)(o.n / o.b), size, rank))) {
		CHAMELEON_Finalize();
		return status;
	}
	CHAMELEON_Set(CHAMELEON_TILE_SIZE, (int)o.b);
	if (o.warmup)
		one_lu(&o, NULL, size);
	int *tiles_by_rank = malloc(sizeof(int) * (size_t)size);
	struct run r = one_lu(&o, tiles_by_rank, size);
	if (rank == 0)
		print_result(&o, &r, tiles_by_rank, size);
	free(tiles_by_rank);
	lu_distribution_free(&owners);
	CHAMELEON_Finalize();
	return (r.hres != CHAMELEON_SUCCESS) + r.failed;
}
