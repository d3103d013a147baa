#include "lu_rank_env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RANK_ENV "LU_RANK_ENV"

/* Space-separated non-negative ids (the engine has expanded StarPU's ranges already); returns
 * their count, or -1. */
static int parse_ids(const char *text, unsigned ids[STARPU_NMAXWORKERS])
{
	int n = 0;
	for (;;) {
		while (*text == ' ')
			text++;
		if (!*text)
			return n > 0 ? n : -1;
		char *end;
		long v = strtol(text, &end, 10);
		if (end == text || v < 0 || (*end && *end != ' ') || n == STARPU_NMAXWORKERS)
			return -1;
		ids[n++] = (unsigned)v;
		text = end;
	}
}

/* A non-negative integer, as StarPU's starpu_getenv_number reads it (include/starpu_helper.h). */
static int parse_number(const char *text)
{
	char *end;
	long v = strtol(text, &end, 10);
	return end == text || *end || v < 0 ? -1 : (int)v;
}

/* The ids repeated over every worker slot: what StarPU does with a shorter STARPU_WORKERS_CPUID /
 * STARPU_WORKERS_CUDAID ("1 2" is "1 2 1 2 ...", src/core/topology.c
 * _starpu_initialize_workers_bindid and _starpu_initialize_workers_deviceid). */
static void fill_cyclic(unsigned dst[STARPU_NMAXWORKERS], const unsigned *ids, int n)
{
	for (int i = 0; i < STARPU_NMAXWORKERS; i++)
		dst[i] = ids[i % n];
}

static int field_error(char *err, size_t errlen, const char *path, long rank, const char *key,
                       const char *expected)
{
	snprintf(err, errlen, "error: %s: rank %ld: %s: expected %s", path, rank, key, expected);
	return 2;
}

static int apply_field(struct starpu_conf *conf, char *field, const char *path, long rank, char *err,
                       size_t errlen)
{
	char *value = strchr(field, '=');
	if (!value)
		return field_error(err, errlen, path, rank, field, "VAR=VALUE");
	*value++ = '\0';
	unsigned ids[STARPU_NMAXWORKERS];
	int n;
	int cpuid = !strcmp(field, "STARPU_WORKERS_CPUID");
	if (cpuid || !strcmp(field, "STARPU_WORKERS_CUDAID")) {
		if ((n = parse_ids(value, ids)) < 0)
			return field_error(err, errlen, path, rank, field, "non-negative ids separated by spaces");
		/* StarPU takes these starpu_conf fields only while the variable is unset (topology.c); the
		 * engine leaves it out of the process environment. */
		if (cpuid) {
			conf->use_explicit_workers_bindid = 1;
			fill_cyclic(conf->workers_bindid, ids, n);
		} else {
			conf->use_explicit_workers_cuda_gpuid = 1;
			fill_cyclic(conf->workers_cuda_gpuid, ids, n);
		}
		return 0;
	}
	int mpi = !strcmp(field, "STARPU_MPI_THREAD_CPUID");
	if (mpi || !strcmp(field, "STARPU_MAIN_THREAD_CPUID")) {
		if (parse_number(value) < 0)
			return field_error(err, errlen, path, rank, field, "a non-negative integer");
		/* Thread binding is not simulated (src/core/topology.c _starpu_bind_thread_on_cpu binds
		 * nothing under STARPU_SIMGRID). What STARPU_MPI_THREAD_CPUID changes is the core count:
		 * once set, starpu_mpi_init_conf no longer reserves a core for the MPI thread while
		 * STARPU_NCPU is unset (mpi/src/starpu_mpi_init.c), by adding 1 to reserve_ncpus (-1
		 * becomes 1). One less here cancels that addition (-2 becomes -1, "unset"); an explicit
		 * STARPU_RESERVE_NCPU replaces the result anyway (src/core/workers.c
		 * _starpu_conf_check_environment). */
		if (mpi && !getenv("STARPU_MPI_THREAD_CPUID") && !getenv("STARPU_MPI_THREAD_COREID") &&
		    conf->ncpus == -1)
			conf->reserve_ncpus = conf->reserve_ncpus == -1 ? -2 : conf->reserve_ncpus - 1;
		return 0;
	}
	return field_error(err, errlen, path, rank, field,
	                   "STARPU_WORKERS_CPUID, STARPU_WORKERS_CUDAID, STARPU_MPI_THREAD_CPUID or "
	                   "STARPU_MAIN_THREAD_CPUID");
}

/* Applies one line to conf (this rank's) or to scratch (another rank's, only checked). */
static int apply_line(char *line, struct starpu_conf *conf, struct starpu_conf *scratch, int rank,
                      const char *path, int *next, char *err, size_t errlen)
{
	char *end;
	long r = strtol(line, &end, 10);
	if (end == line || (*end && *end != '\t') || r != *next)
		return field_error(err, errlen, path, *next, "lines",
		                   "one line per rank in rank order: the rank, then tab-separated VAR=VALUE fields");
	struct starpu_conf *target = r == rank ? conf : scratch;
	++*next;
	char *save = NULL;
	for (char *f = strtok_r(end, "\t", &save); f; f = strtok_r(NULL, "\t", &save))
		if (apply_field(target, f, path, r, err, errlen))
			return 2;
	return 0;
}

int lu_rank_env_apply(struct starpu_conf *conf, int rank, int nranks, char *err, size_t errlen)
{
	const char *path = getenv(RANK_ENV);
	if (!path || !*path)
		return 0;
	FILE *f = fopen(path, "r");
	if (!f)
		return field_error(err, errlen, path, rank, RANK_ENV, "a readable rank settings file");
	struct starpu_conf *scratch = malloc(sizeof *scratch);
	*scratch = *conf;
	char line[16384];
	int status = 0, next = 0;
	while (!status && fgets(line, sizeof line, f)) {
		size_t len = strlen(line);
		if (len && line[len - 1] == '\n')
			line[--len] = '\0';
		else if (!feof(f))
			status = field_error(err, errlen, path, -1, "lines", "lines shorter than 16 KiB");
		if (!status && len && line[0] != '#')
			status = apply_line(line, conf, scratch, rank, path, &next, err, errlen);
	}
	fclose(f);
	free(scratch);
	if (!status && next != nranks)
		status = field_error(err, errlen, path, next, "lines", "a line for every rank");
	return status;
}
