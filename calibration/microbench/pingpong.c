/* MPI ping-pong between two ranks: one-way latency and bandwidth per message size.
 *
 *   mpirun -np 2 [--host a,b] pingpong [--max-bytes N] [--reps R]
 *
 * Rank 0 sends a message of `bytes` bytes to rank 1, which sends it back; the
 * one-way time is half the round trip (classic ping-pong, as the Intel MPI
 * Benchmarks / OSU osu_latency define it). Sizes 1, 4, 16, ... up to
 * --max-bytes; each size runs a few warm-up round trips, then R timed ones.
 * Output (rank 0, CSV on stdout): a `# host0=... host1=... same_host=0|1` line,
 * then rows bytes,reps,min_s,median_s,mean_s,bandwidth_Bps with one-way times
 * and bandwidth = bytes / median one-way time. Bad options: `error: ...`, exit 2.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WARMUP 5

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static long parse_positive(const char *opt, const char *text, int rank)
{
	char *end = NULL;
	long v = strtol(text, &end, 10);
	if (!end || *end || v <= 0) {
		if (rank == 0)
			fprintf(stderr, "error: %s: expected a positive integer, got '%s'\n", opt, text);
		MPI_Finalize();
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int rank, size;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	long max_bytes = 4L << 20, reps = 100;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--max-bytes") && i + 1 < argc)
			max_bytes = parse_positive("--max-bytes", argv[++i], rank);
		else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = parse_positive("--reps", argv[++i], rank);
		else {
			if (rank == 0)
				fprintf(stderr, "error: %s: expected --max-bytes N or --reps R\n", argv[i]);
			MPI_Finalize();
			return 2;
		}
	}
	if (size != 2) {
		if (rank == 0)
			fprintf(stderr, "error: mpirun -np: expected exactly 2 ranks, got %d\n", size);
		MPI_Finalize();
		return 2;
	}
	char host[MPI_MAX_PROCESSOR_NAME] = {0}, other[MPI_MAX_PROCESSOR_NAME] = {0};
	int len;
	MPI_Get_processor_name(host, &len);
	MPI_Sendrecv(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 1 - rank, 0, other, MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
	             1 - rank, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	char *buf = malloc((size_t)max_bytes);
	double *t = malloc(sizeof(double) * (size_t)reps);
	if (!buf || !t) {
		fprintf(stderr, "error: --max-bytes: expected a size that fits in memory, got %ld\n", max_bytes);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	memset(buf, 1, (size_t)max_bytes);
	if (rank == 0) {
		printf("# host0=%s host1=%s same_host=%d\n", host, other, strcmp(host, other) == 0);
		printf("bytes,reps,min_s,median_s,mean_s,bandwidth_Bps\n");
	}
	for (long bytes = 1; bytes <= max_bytes; bytes *= 4) {
		for (long r = -WARMUP; r < reps; r++) {
			MPI_Barrier(MPI_COMM_WORLD);
			double t0 = MPI_Wtime();
			if (rank == 0) {
				MPI_Send(buf, (int)bytes, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
				MPI_Recv(buf, (int)bytes, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			} else {
				MPI_Recv(buf, (int)bytes, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				MPI_Send(buf, (int)bytes, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
			}
			if (r >= 0)
				t[r] = (MPI_Wtime() - t0) / 2.0;
		}
		if (rank == 0) {
			double sum = 0;
			for (long r = 0; r < reps; r++)
				sum += t[r];
			qsort(t, (size_t)reps, sizeof(double), cmp_double);
			double median = reps % 2 ? t[reps / 2] : (t[reps / 2 - 1] + t[reps / 2]) / 2.0;
			printf("%ld,%ld,%.9g,%.9g,%.9g,%.6g\n", bytes, reps, t[0], median, sum / reps, bytes / median);
		}
	}
	free(buf);
	free(t);
	MPI_Finalize();
	return 0;
}
