/* Tile -> owner rank maps (format: docs/interfaces.md section 5; the same
 * rules as testbed/run/distribution.py). */
#ifndef LU_DISTRIBUTION_H
#define LU_DISTRIBUTION_H

/* Owner of tile (m, n) is owners[m * nt + n]. */
struct lu_distribution {
	int nt;
	int *owners;
};

/* P x Q as close to square as possible: P the largest divisor of nranks <= sqrt. */
void lu_near_square_grid(int nranks, int *p, int *q);

/* 2D block-cyclic: owner(m, n) = (m mod P) * Q + (n mod Q), as Chameleon. */
void lu_distribution_block_cyclic(struct lu_distribution *d, int nt, int p, int q);

/* Reads a distribution file; on error writes "error: FILE: KEY: expected ..."
 * into err and returns -1. */
int lu_distribution_read(struct lu_distribution *d, const char *path, int nt, int nranks, char *err,
                         int errlen);

void lu_distribution_free(struct lu_distribution *d);

/* The owner table of a run from its options (apps/lu, apps/chameleon_lu): the distribution file
 * when given, else the P x Q grid (*p, *q; 0 for the near-square grid of nranks, written back),
 * which must have nranks ranks. Returns 0, or -1 after writing "error: KEY: expected ..." into err. */
int lu_distribution_of_run(struct lu_distribution *d, const char *dist_file, int *p, int *q, int nt, int nranks,
                           char *err, int errlen);

/* Rank of this process before MPI is initialized, so that rank 0 alone prints an error found in
 * the arguments or the distribution file: the launcher's variables, or 0 for a single process
 * (apps/lu and apps/chameleon_lu). */
int lu_launcher_rank(void);

/* Prints "error: KEY: expected EXPECTED" on rank 0 and returns the exit status of bad input (2). */
int lu_usage_error(int rank, const char *key, const char *expected);

/* 0 when the matrix order n is a positive multiple of the tile size b, else lu_usage_error's. */
int lu_check_order(long n, long b, int rank);

#endif
