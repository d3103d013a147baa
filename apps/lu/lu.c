/* Tiled LU without pivoting on StarPU-MPI, with Chameleon's task graph,
 * priorities and perf-model symbols (compute/pzgetrf_nopiv.c). Owner computes:
 * each rank inserts every task; StarPU-MPI runs a task on the owner of the data
 * it writes and moves the tiles it reads. Prints one JSON line on rank 0.
 *
 * usage: lu --n N --b B [--dist FILE | --p P --q Q] [--seed S] [--check]
 *           [--symbols chameleon|starpu-lu] [--no-folded] [--getrf-gpu]
 *           [--dag chameleon|starpu-lu-example] [--report-workers]
 *
 * --report-workers adds "workers_by_rank": each rank's CPU worker bind ids and CUDA workers'
 * devices and bind ids, as its StarPU set them up. In the SimGrid build the file named by
 * LU_RANK_ENV gives each rank its own StarPU settings (lu_rank_env.h).
 *
 * gemm and trsm run on CPUs and, in a CUDA build (or in simulation), on GPUs; getrf_nopiv
 * runs on CPUs only unless --getrf-gpu (cuSOLVER; Chameleon's GPU getrf_nopiv kernels and
 * StarPU's LU example do the same). */
#include <getopt.h>
#include <math.h>
#include <mpi.h>
#include <starpu.h>
#include <starpu_mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lu_codelets.h"
#include "lu_distribution.h"
#include "lu_rank_env.h"

#ifndef STARPU_SIMGRID
#include <cblas.h>
#endif

struct options {
	long n, b;
	const char *dist_file;
	int p, q;
	unsigned long long seed;
	int check;
	const char *symbols;
	int folded;
	int getrf_gpu;
	int example_dag; /* --dag starpu-lu-example */
	int report_workers;
};

/* Tasks executed by this rank, per kind, then (last slot) those run by CUDA workers. */
#define ON_CUDA LU_NKINDS
#define NCOUNTS (LU_NKINDS + 1)
static unsigned long executed[NCOUNTS];

/* Runs after each task on the rank that executed it (also in simulation). */
static void count_task(void *arg)
{
	__atomic_fetch_add((unsigned long *)arg, 1, __ATOMIC_RELAXED);
	/* StarPU runs a task's callback on the worker that executed it (also for asynchronous
	 * CUDA tasks: the CUDA worker's driver loop terminates them, drivers/cuda/driver_cuda.c). */
	int w = starpu_worker_get_id();
	if (w >= 0 && starpu_worker_get_type(w) == STARPU_CUDA_WORKER)
		__atomic_fetch_add(&executed[ON_CUDA], 1, __ATOMIC_RELAXED);
}

static int usage_error(int rank, const char *key, const char *expected)
{
	if (rank == 0)
		fprintf(stderr, "error: %s: expected %s\n", key, expected);
	return 2;
}

/* Returns 0, or an exit status (2) after printing the error on rank 0. */
static int parse_options(int argc, char **argv, struct options *o, int rank)
{
	static const struct option longopts[] = {
		{"n", required_argument, 0, 'n'},      {"b", required_argument, 0, 'b'},
		{"dist", required_argument, 0, 'd'},   {"p", required_argument, 0, 'p'},
		{"q", required_argument, 0, 'q'},      {"seed", required_argument, 0, 's'},
		{"check", no_argument, 0, 'c'},        {"symbols", required_argument, 0, 'y'},
		{"no-folded", no_argument, 0, 'f'},    {"getrf-gpu", no_argument, 0, 'g'},
		{"dag", required_argument, 0, 'D'},    {"report-workers", no_argument, 0, 'w'},
		{0, 0, 0, 0},
	};
	*o = (struct options){.seed = 1, .symbols = "chameleon", .folded = 1};
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
		case 'y': o->symbols = optarg; break;
		case 'f': o->folded = 0; break;
		case 'g': o->getrf_gpu = 1; break;
		case 'w': o->report_workers = 1; break;
		case 'D':
			if (strcmp(optarg, "chameleon") && strcmp(optarg, "starpu-lu-example"))
				return usage_error(rank, "--dag", "chameleon or starpu-lu-example");
			o->example_dag = !strcmp(optarg, "starpu-lu-example");
			break;
		default:
			return usage_error(rank, "arguments",
			                   "lu --n N --b B [--dist FILE|--p P --q Q] [--seed S] [--check] "
			                   "[--symbols chameleon|starpu-lu] [--no-folded] [--getrf-gpu] "
			                   "[--dag chameleon|starpu-lu-example] [--report-workers]");
		}
	}
	if (o->n <= 0 || o->b <= 0 || o->n % o->b != 0) {
		char msg[128];
		snprintf(msg, sizeof msg, "N a positive multiple of b, got N=%ld b=%ld", o->n, o->b);
		return usage_error(rank, "--n/--b", msg);
	}
	if (lu_select_symbols(o->symbols) != 0)
		return usage_error(rank, "--symbols", "chameleon or starpu-lu");
	if (o->getrf_gpu && lu_enable_getrf_on_cuda() != 0)
		return usage_error(rank, "--getrf-gpu", "a build with CUDA and cuSOLVER (or the SimGrid build)");
#ifdef STARPU_SIMGRID
	if (o->check)
		return usage_error(rank, "--check", "a real build (simulation computes no values)");
#endif
	return 0;
}

static int priority(int nt, int k, int m, int n, enum lu_kind kind)
{
	switch (kind) {
	case LU_GETRF: return 2 * nt - 2 * k;
	case LU_TRSM_COL: return 2 * nt - 2 * k - m;
	case LU_TRSM_ROW: return 2 * nt - 2 * k - n;
	case LU_GEMM: return 2 * nt - 2 * k - n - m;
	default: return 0;
	}
}

#define TILE(m, n) tiles[(size_t)(m) * nt + (n)]

#ifndef STARPU_SIMGRID
static void submit_generation(starpu_data_handle_t *tiles, int nt, const struct options *o)
{
	for (int m = 0; m < nt; m++)
		for (int n = 0; n < nt; n++) {
			struct lu_plrnt_args a = {m, n, (int)o->b, (int)o->n, o->seed};
			int ret = starpu_mpi_task_insert(MPI_COMM_WORLD, &lu_cl_plrnt, STARPU_VALUE, &a, sizeof a,
			                                 STARPU_W, TILE(m, n), STARPU_CALLBACK_WITH_ARG_NFREE,
			                                 count_task, &executed[LU_PLRNT], 0);
			STARPU_CHECK_RETURN_VALUE(ret, "starpu_mpi_task_insert plrnt");
		}
}

#endif

/* Right-looking LU without pivoting, loop order of Chameleon's pzgetrf_nopiv. */
static void submit_lu(starpu_data_handle_t *tiles, int nt)
{
	int ret;
	for (int k = 0; k < nt; k++) {
		starpu_iteration_push(k); /* the step in the trace, as Chameleon's RUNTIME_iteration_push */
		ret = starpu_mpi_task_insert(MPI_COMM_WORLD, &lu_cl_getrf, STARPU_RW, TILE(k, k), STARPU_PRIORITY,
		                             priority(nt, k, k, k, LU_GETRF), STARPU_CALLBACK_WITH_ARG_NFREE,
		                             count_task, &executed[LU_GETRF], 0);
		STARPU_CHECK_RETURN_VALUE(ret, "starpu_mpi_task_insert getrf");
		for (int m = k + 1; m < nt; m++) {
			ret = starpu_mpi_task_insert(MPI_COMM_WORLD, &lu_cl_trsm_col, STARPU_R, TILE(k, k), STARPU_RW,
			                             TILE(m, k), STARPU_PRIORITY, priority(nt, k, m, k, LU_TRSM_COL),
			                             STARPU_CALLBACK_WITH_ARG_NFREE, count_task,
			                             &executed[LU_TRSM_COL], 0);
			STARPU_CHECK_RETURN_VALUE(ret, "starpu_mpi_task_insert trsm");
		}
		for (int n = k + 1; n < nt; n++) {
			ret = starpu_mpi_task_insert(MPI_COMM_WORLD, &lu_cl_trsm_row, STARPU_R, TILE(k, k), STARPU_RW,
			                             TILE(k, n), STARPU_PRIORITY, priority(nt, k, k, n, LU_TRSM_ROW),
			                             STARPU_CALLBACK_WITH_ARG_NFREE, count_task,
			                             &executed[LU_TRSM_ROW], 0);
			STARPU_CHECK_RETURN_VALUE(ret, "starpu_mpi_task_insert trsm");
			for (int m = k + 1; m < nt; m++) {
				ret = starpu_mpi_task_insert(MPI_COMM_WORLD, &lu_cl_gemm, STARPU_R, TILE(m, k), STARPU_R,
				                             TILE(k, n), STARPU_RW, TILE(m, n), STARPU_PRIORITY,
				                             priority(nt, k, m, n, LU_GEMM), STARPU_CALLBACK_WITH_ARG_NFREE,
				                             count_task, &executed[LU_GEMM], 0);
				STARPU_CHECK_RETURN_VALUE(ret, "starpu_mpi_task_insert gemm");
			}
		}
		/* The panel and row of step k are not read again after step k. */
		for (int i = k; i < nt; i++) {
			starpu_mpi_cache_flush(MPI_COMM_WORLD, TILE(i, k));
			if (i > k)
				starpu_mpi_cache_flush(MPI_COMM_WORLD, TILE(k, i));
		}
		starpu_iteration_pop();
	}
}

/* The same tasks in the submission order and with the priorities of StarPU's LU example
 * (examples/lu/xlu_implicit.c dw_codelet_facto_v3 and create_task_*: per step, getrf, then
 * for each i the row and the column trsm, then the updates; "bottom-level-based" priorities). */
static void submit_lu_example_order(starpu_data_handle_t *tiles, int nt)
{
	int ret;
	for (int k = 0; k < nt; k++) {
		starpu_iteration_push(k);
		ret = starpu_mpi_task_insert(MPI_COMM_WORLD, &lu_cl_getrf, STARPU_RW, TILE(k, k), STARPU_PRIORITY,
		                             3 * nt - 3 * k, STARPU_CALLBACK_WITH_ARG_NFREE, count_task,
		                             &executed[LU_GETRF], 0);
		STARPU_CHECK_RETURN_VALUE(ret, "starpu_mpi_task_insert getrf");
		for (int i = k + 1; i < nt; i++) {
			ret = starpu_mpi_task_insert(MPI_COMM_WORLD, &lu_cl_trsm_row, STARPU_R, TILE(k, k), STARPU_RW,
			                             TILE(k, i), STARPU_PRIORITY, 3 * nt - (2 * k + i),
			                             STARPU_CALLBACK_WITH_ARG_NFREE, count_task, &executed[LU_TRSM_ROW], 0);
			STARPU_CHECK_RETURN_VALUE(ret, "starpu_mpi_task_insert trsm");
			ret = starpu_mpi_task_insert(MPI_COMM_WORLD, &lu_cl_trsm_col, STARPU_R, TILE(k, k), STARPU_RW,
			                             TILE(i, k), STARPU_PRIORITY, 3 * nt - (2 * k + i),
			                             STARPU_CALLBACK_WITH_ARG_NFREE, count_task, &executed[LU_TRSM_COL], 0);
			STARPU_CHECK_RETURN_VALUE(ret, "starpu_mpi_task_insert trsm");
		}
		for (int i = k + 1; i < nt; i++)
			for (int j = k + 1; j < nt; j++) {
				ret = starpu_mpi_task_insert(MPI_COMM_WORLD, &lu_cl_gemm, STARPU_R, TILE(i, k), STARPU_R,
				                             TILE(k, j), STARPU_RW, TILE(i, j), STARPU_PRIORITY,
				                             3 * nt - (k + i + j), STARPU_CALLBACK_WITH_ARG_NFREE, count_task,
				                             &executed[LU_GEMM], 0);
				STARPU_CHECK_RETURN_VALUE(ret, "starpu_mpi_task_insert gemm");
			}
		for (int i = k; i < nt; i++) {
			starpu_mpi_cache_flush(MPI_COMM_WORLD, TILE(i, k));
			if (i > k)
				starpu_mpi_cache_flush(MPI_COMM_WORLD, TILE(k, i));
		}
		starpu_iteration_pop();
	}
}

#ifndef STARPU_SIMGRID
/* Copies every tile into a dense column-major N x N matrix on rank 0. */
static double *gather(starpu_data_handle_t *tiles, int nt, int b, int rank)
{
	size_t n = (size_t)nt * b;
	double *dense = rank == 0 ? malloc(sizeof(double) * n * n) : NULL;
	for (int m = 0; m < nt; m++)
		for (int j = 0; j < nt; j++) {
			starpu_mpi_get_data_on_node(MPI_COMM_WORLD, TILE(m, j), 0);
			if (rank != 0)
				continue;
			starpu_data_acquire(TILE(m, j), STARPU_R);
			const double *t = (const double *)starpu_data_get_local_ptr(TILE(m, j));
			for (int c = 0; c < b; c++)
				memcpy(dense + (size_t)(m * b) + ((size_t)j * b + c) * n, t + (size_t)c * b,
				       sizeof(double) * b);
			starpu_data_release(TILE(m, j));
		}
	starpu_mpi_cache_flush_all_data(MPI_COMM_WORLD);
	return dense;
}

/* ||A - L U||_F / ||A||_F with L unit lower and U upper packed in lu. */
static double residual(const double *a, const double *lu, size_t n)
{
	double *l = calloc(n * n, sizeof(double)), *u = calloc(n * n, sizeof(double));
	double *r = malloc(sizeof(double) * n * n);
	for (size_t j = 0; j < n; j++)
		for (size_t i = 0; i < n; i++) {
			double v = lu[i + j * n];
			if (i > j)
				l[i + j * n] = v;
			else
				u[i + j * n] = v;
			if (i == j)
				l[i + j * n] = 1.0;
		}
	memcpy(r, a, sizeof(double) * n * n);
	cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, -1.0, l, (int)n, u,
	            (int)n, 1.0, r, (int)n);
	double num = 0, den = 0;
	for (size_t i = 0; i < n * n; i++) {
		num += r[i] * r[i];
		den += a[i] * a[i];
	}
	free(l);
	free(u);
	free(r);
	return sqrt(num) / sqrt(den);
}
#endif

/* Task counts of all ranks, summed on rank 0 through StarPU-MPI (in SimGrid
 * mode StarPU owns MPI initialization and finalization, so no raw MPI calls). */
/* Sends every rank's `mine` (n elements of `elem` bytes) to rank 0, which hands each received
 * copy to `on_receive` in rank order (a StarPU-MPI vector per rank, tags base + r). */
static void gather_on_root(int rank, int size, void *mine, size_t n, size_t elem, int tag_base,
                           void (*on_receive)(int r, const void *data, void *ctx), void *ctx)
{
	void *remote = rank == 0 ? malloc(n * elem) : NULL;
	starpu_data_handle_t h;
	starpu_vector_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)(rank == 0 ? remote : mine), (uint32_t)n, elem);
	for (int r = 1; r < size; r++) {
		if (rank == r)
			starpu_mpi_send(h, 0, tag_base + r, MPI_COMM_WORLD);
		else if (rank == 0) {
			MPI_Status st;
			starpu_mpi_recv(h, r, tag_base + r, MPI_COMM_WORLD, &st);
			starpu_data_acquire(h, STARPU_R);
			on_receive(r, remote, ctx);
			starpu_data_release(h);
		}
	}
	starpu_data_unregister(h);
	free(remote);
}

static void add_counts(int r, const void *data, void *ctx)
{
	(void)r;
	const unsigned long *remote = data;
	unsigned long *total = ctx;
	for (int k = 0; k < NCOUNTS; k++)
		total[k] += remote[k];
}

static void sum_counts_on_root(int rank, int size, unsigned long total[NCOUNTS])
{
	memcpy(total, executed, sizeof executed);
	gather_on_root(rank, size, executed, NCOUNTS, sizeof(unsigned long), 0x7fff0000, add_counts, total);
}

/* Per rank: CPU worker count, CUDA worker count, then LU_MAXREPORT slots each of CPU bind ids,
 * CUDA device ids and CUDA bind ids. */
#define LU_MAXREPORT 64
#define REPORT_INTS (2 + 3 * LU_MAXREPORT)

static void fill_worker_report(int v[REPORT_INTS])
{
	memset(v, 0, sizeof(int) * REPORT_INTS);
	for (unsigned w = 0; w < starpu_worker_get_count(); w++) {
		enum starpu_worker_archtype t = starpu_worker_get_type((int)w);
		if (t == STARPU_CPU_WORKER && v[0] < LU_MAXREPORT)
			v[2 + v[0]++] = starpu_worker_get_bindid((int)w);
		else if (t == STARPU_CUDA_WORKER && v[1] < LU_MAXREPORT) {
			v[2 + LU_MAXREPORT + v[1]] = starpu_worker_get_devid((int)w);
			v[2 + 2 * LU_MAXREPORT + v[1]++] = starpu_worker_get_bindid((int)w);
		}
	}
}

#define REPORT_BYTES (sizeof(int) * REPORT_INTS)

static void store_report(int r, const void *data, void *ctx)
{
	memcpy((int *)ctx + (size_t)r * REPORT_INTS, data, REPORT_BYTES);
}

/* Every rank's worker report, in rank order, on rank 0 (NULL elsewhere). */
static int *gather_worker_reports(int rank, int size)
{
	int mine[REPORT_INTS];
	int *all = rank == 0 ? malloc(REPORT_BYTES * (size_t)size) : NULL;
	fill_worker_report(mine);
	if (rank == 0)
		memcpy(all, mine, sizeof mine);
	gather_on_root(rank, size, mine, REPORT_INTS, sizeof(int), 0x7ffe0000, store_report, all);
	return all;
}

static void print_ints(const char *key, const int *v, int n, const char *sep)
{
	printf("\"%s\": [", key);
	for (int i = 0; i < n; i++)
		printf("%s%d", i ? ", " : "", v[i]);
	printf("]%s", sep);
}

static void print_worker_reports(const int *all, int size)
{
	printf(", \"workers_by_rank\": [");
	for (int r = 0; r < size; r++) {
		const int *v = all + (size_t)r * REPORT_INTS;
		printf("%s{", r ? ", " : "");
		print_ints("cpu_bindids", v + 2, v[0], ", ");
		print_ints("cuda_devids", v + 2 + LU_MAXREPORT, v[1], ", ");
		print_ints("cuda_bindids", v + 2 + 2 * LU_MAXREPORT, v[1], "}");
	}
	printf("]");
}

/* Rank of this process before StarPU-MPI is initialized (errors are printed by
 * rank 0 only): the launcher's variables, or 0 for a single process. */
#ifndef STARPU_SIMGRID
static int launcher_rank(void)
{
	const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"};
	for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
		if (getenv(vars[i]))
			return atoi(getenv(vars[i]));
	return 0;
}
#endif

/* Starts StarPU-MPI; returns 0, or 2 when the rank settings file is bad (StarPU is started all
 * the same: under SMPI it must be shut down around any exit). */
static int start_starpu(int *argc, char ***argv, int *rank, int *size)
{
	setenv("STARPU_SILENT", "1", 0); /* stdout carries only the JSON line */
	struct starpu_conf conf;
	starpu_conf_init(&conf);
	int status = 0;
#ifdef STARPU_SIMGRID
	/* This rank's own StarPU settings. StarPU-MPI knows the rank already: under SimGrid its
	 * progression is initialized before main, and starpu_mpi_world_rank makes no MPI call
	 * (mpi/src/starpu_mpi_init.c starpu_mpi_comm_rank). */
	char err[1024];
	int me = starpu_mpi_world_rank();
	if ((status = lu_rank_env_apply(&conf, me, starpu_mpi_world_size(), err, sizeof err))) {
		if (me == 0)
			fprintf(stderr, "%s\n", err);
		starpu_conf_init(&conf);
	}
#endif
	int ret = starpu_mpi_init_conf(argc, argv, 1, MPI_COMM_WORLD, &conf);
	if (ret == -ENODEV) {
		/* the settings leave no worker: bad input, not a failure of the run */
		fprintf(stderr, "error: StarPU: workers: expected at least one CPU worker (STARPU_NCPU and the cores "
		                "left after STARPU_RESERVE_NCPU, the MPI thread and the CUDA drivers)\n");
		exit(2);
	}
	STARPU_CHECK_RETURN_VALUE(ret, "starpu_mpi_init_conf");
	lu_cuda_init();
	starpu_mpi_comm_rank(MPI_COMM_WORLD, rank);
	starpu_mpi_comm_size(MPI_COMM_WORLD, size);
	return status;
}

int main(int argc, char **argv)
{
	struct options o;
	int rank, size, status, ret;
#ifdef STARPU_SIMGRID
	/* SMPI runs main inside the simulation: StarPU-MPI must be up (and shut
	 * down) around any early exit. */
	status = start_starpu(&argc, &argv, &rank, &size);
	if (status || (status = parse_options(argc, argv, &o, rank))) {
		starpu_mpi_shutdown();
		return status;
	}
#else
	/* Arguments are checked before StarPU starts (which may calibrate the bus). */
	if ((status = parse_options(argc, argv, &o, launcher_rank())))
		return status;
	openblas_set_num_threads(1); /* StarPU workers are the parallelism: sequential kernels */
	start_starpu(&argc, &argv, &rank, &size);
#endif
	int nt = (int)(o.n / o.b), b = (int)o.b;

	struct lu_distribution dist;
	if (o.dist_file) {
		char err[512];
		if (lu_distribution_read(&dist, o.dist_file, nt, size, err, sizeof err) != 0) {
			if (rank == 0)
				fprintf(stderr, "%s\n", err);
			starpu_mpi_shutdown();
			return 2;
		}
	} else {
		if (o.p <= 0 || o.q <= 0)
			lu_near_square_grid(size, &o.p, &o.q);
		if (o.p * o.q != size) {
			char msg[128];
			snprintf(msg, sizeof msg, "P x Q = number of ranks (%d), got %d x %d", size, o.p, o.q);
			status = usage_error(rank, "--p/--q", msg);
			starpu_mpi_shutdown();
			return status;
		}
		lu_distribution_block_cyclic(&dist, nt, o.p, o.q);
	}

	/* Owned tiles live in main RAM; the others are registered without home and
	 * receive copies as needed. In simulation the tiles are folded (their
	 * content is bogus, so a 96000^2 matrix takes no real memory) and unique:
	 * all tiles share one folded block, because one mapping per 1 MiB of a
	 * 74 GB matrix exceeds vm.max_map_count (65530) and counts in the RSS. */
	size_t tile_bytes = sizeof(double) * (size_t)b * b;
	int flags = STARPU_MALLOC_PINNED;
	if (o.folded)
		flags |= STARPU_MALLOC_SIMULATION_FOLDED | STARPU_MALLOC_SIMULATION_UNIQUE;
#ifdef STARPU_SIMGRID
	/* Copies StarPU allocates in RAM (tiles received from other ranks) are
	 * folded too, as Chameleon does in simulation. */
	if (o.folded)
		starpu_malloc_on_node_set_default_flags(STARPU_MAIN_RAM, STARPU_MALLOC_PINNED | STARPU_MALLOC_COUNT |
		                                                             STARPU_MALLOC_SIMULATION_FOLDED);
#endif
	starpu_data_handle_t *tiles = malloc(sizeof(*tiles) * (size_t)nt * nt);
	void **ptrs = calloc((size_t)nt * nt, sizeof(void *));
	for (int m = 0; m < nt; m++)
		for (int n = 0; n < nt; n++) {
			int owner = dist.owners[m * nt + n];
			if (owner == rank) {
				ret = starpu_malloc_flags(&ptrs[m * nt + n], tile_bytes, flags);
				STARPU_CHECK_RETURN_VALUE(ret, "starpu_malloc_flags");
				starpu_matrix_data_register(&TILE(m, n), STARPU_MAIN_RAM, (uintptr_t)ptrs[m * nt + n], b, b,
				                            b, sizeof(double));
			} else {
				starpu_matrix_data_register(&TILE(m, n), -1, 0, b, b, b, sizeof(double));
			}
			starpu_mpi_data_register(TILE(m, n), (int64_t)m * nt + n, owner);
			/* The tile's (row, column) in FxT's data.rec, as Chameleon sets them
			 * (runtime_descriptor.c starpu_data_set_coordinates): the trace's X, Y. */
			starpu_data_set_coordinates(TILE(m, n), 2, m, n);
		}

	/* In simulation the tiles' values are meaningless and generation would need
	 * its own calibrated model: only the factorization is simulated. */
#ifndef STARPU_SIMGRID
	submit_generation(tiles, nt, &o);
	starpu_mpi_wait_for_all(MPI_COMM_WORLD);
	double *a_copy = o.check ? gather(tiles, nt, b, rank) : NULL;
#endif
	starpu_mpi_barrier(MPI_COMM_WORLD);

	double t0 = starpu_timing_now();
	if (o.example_dag)
		submit_lu_example_order(tiles, nt);
	else
		submit_lu(tiles, nt);
	/* When the main thread inserts tasks more slowly than the workers run them, the run is
	 * submission-bound: the time it took is reported next to the makespan. */
	double submitted = (starpu_timing_now() - t0) * 1e-6;
	starpu_mpi_wait_for_all(MPI_COMM_WORLD);
	starpu_mpi_barrier(MPI_COMM_WORLD);
	double makespan = (starpu_timing_now() - t0) * 1e-6;

	double res = NAN;
#ifndef STARPU_SIMGRID
	if (o.check) {
		double *lu = gather(tiles, nt, b, rank);
		if (rank == 0)
			res = residual(a_copy, lu, (size_t)nt * b);
		free(lu);
		free(a_copy);
	}
#endif

	for (size_t i = 0; i < (size_t)nt * nt; i++) {
		starpu_data_unregister(tiles[i]);
		if (ptrs[i])
			starpu_free_flags(ptrs[i], tile_bytes, flags);
	}
	free(tiles);
	free(ptrs);
	unsigned long total[NCOUNTS];
	sum_counts_on_root(rank, size, total);
	int *reports = o.report_workers ? gather_worker_reports(rank, size) : NULL;
	if (rank == 0) {
		double n = (double)o.n;
		unsigned long ntasks = total[LU_GETRF] + total[LU_TRSM_ROW] + total[LU_TRSM_COL] + total[LU_GEMM];
		printf("{\"build\": \"%s\", \"n\": %ld, \"b\": %ld, \"nt\": %d, \"ranks\": %d, \"symbols\": \"%s\", "
		       "\"seed\": %llu, \"makespan_s\": %.9g, \"gflops\": %.6g, \"tasks\": %lu, "
		       "\"tasks_by_kind\": {\"getrf\": %lu, \"trsm\": %lu, \"gemm\": %lu, \"plrnt\": %lu}, "
		       "\"cuda_workers\": %u, \"tasks_on_cuda\": %lu, \"getrf_on_gpu\": %s, \"submission_s\": %.9g",
#ifdef STARPU_SIMGRID
		       "simgrid",
#else
		       "real",
#endif
		       o.n, o.b, nt, size, o.symbols, o.seed, makespan, 2.0 / 3.0 * n * n * n / makespan * 1e-9,
		       ntasks, total[LU_GETRF], total[LU_TRSM_ROW] + total[LU_TRSM_COL], total[LU_GEMM],
		       total[LU_PLRNT], starpu_cuda_worker_get_count(), total[ON_CUDA],
		       o.getrf_gpu ? "true" : "false", submitted);
		if (!o.dist_file)
			printf(", \"p\": %d, \"q\": %d", o.p, o.q);
		if (o.check)
			printf(", \"residual\": %.6e", res);
		if (reports)
			print_worker_reports(reports, size);
		printf("}\n");
		fflush(stdout);
	}
	free(reports);
	lu_distribution_free(&dist);
	lu_cuda_shutdown();
	starpu_mpi_shutdown();
	return 0;
}
