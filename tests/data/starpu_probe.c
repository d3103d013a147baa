/* starpu_probe: does StarPU find the generated performance models?
 *
 * Registers NBUF b x b double matrices, builds one task of codelet SYMBOL (CPU + CUDA
 * implementations, as apps/lu declares them in SimGrid mode), prints for every worker the
 * task footprint and the expected length StarPU reads from the model, then runs the task
 * on each worker kind and prints the simulated duration. Used by tests/test_platform_starpu.py.
 *
 *   starpu_probe SYMBOL NBUF B [cpu]      ("cpu": no CUDA implementation, like getrf)
 */
#include <starpu.h>
#include <stdio.h>
#include <stdlib.h>

static void noop(void *buffers[], void *arg)
{
	(void)buffers;
	(void)arg;
}

static struct starpu_perfmodel model = {.type = STARPU_HISTORY_BASED};

int main(int argc, char **argv)
{
	if (argc != 4 && argc != 5)
	{
		fprintf(stderr, "usage: %s SYMBOL NBUF B [cpu]\n", argv[0]);
		return 2;
	}
	model.symbol = argv[1];
	int nbuf = atoi(argv[2]);
	unsigned b = (unsigned)atoi(argv[3]);

	struct starpu_codelet cl = {
		.cpu_funcs = {noop},
		.cuda_funcs = {(starpu_cuda_func_t)1}, /* never called in SimGrid mode */
		.cuda_flags = {STARPU_CUDA_ASYNC},
		.nbuffers = nbuf,
		.model = &model,
	};
	for (int i = 0; i < nbuf; i++)
		cl.modes[i] = i == nbuf - 1 ? STARPU_RW : STARPU_R;
	if (argc == 5)
		cl.cuda_funcs[0] = NULL;

	if (starpu_init(NULL) != 0)
		return 1;

	starpu_data_handle_t handles[STARPU_NMAXBUFS];
	double *tiles[STARPU_NMAXBUFS];
	for (int i = 0; i < nbuf; i++)
	{
		tiles[i] = calloc((size_t)b * b, sizeof(double));
		starpu_matrix_data_register(&handles[i], STARPU_MAIN_RAM, (uintptr_t)tiles[i], b, b, b, sizeof(double));
	}

	printf("{\"workers\": [");
	unsigned nworkers = starpu_worker_get_count();
	int printed = 0;
	for (unsigned w = 0; w < nworkers; w++)
	{
		if (cl.cuda_funcs[0] == NULL && starpu_worker_get_type(w) != STARPU_CPU_WORKER)
			continue;
		struct starpu_task *task = starpu_task_create();
		task->cl = &cl;
		for (int i = 0; i < nbuf; i++)
			task->handles[i] = handles[i];
		task->execute_on_a_specific_worker = 1;
		task->workerid = w;
		task->synchronous = 1;
		task->destroy = 0;
		struct starpu_perfmodel_arch *arch = starpu_worker_get_perf_archtype(w, STARPU_NMAX_SCHED_CTXS);
		double expected = starpu_task_expected_length(task, arch, 0);
		uint32_t footprint = starpu_task_footprint(&model, task, arch, 0);
		double t0 = starpu_timing_now();
		int ret = starpu_task_submit(task);
		double t1 = starpu_timing_now();
		printf("%s\n {\"worker\": %u, \"type\": \"%s\", \"footprint\": \"%08x\", \"expected_us\": %.6f, "
		       "\"elapsed_us\": %.6f, \"submit\": %d}",
		       printed++ ? "," : "", w, starpu_worker_get_type_as_string(starpu_worker_get_type(w)), footprint,
		       expected, t1 - t0, ret);
		starpu_task_destroy(task);
	}
	printf("]}\n");

	for (int i = 0; i < nbuf; i++)
	{
		starpu_data_unregister(handles[i]);
		free(tiles[i]);
	}
	starpu_shutdown();
	return 0;
}
