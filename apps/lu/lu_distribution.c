#include "lu_distribution.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void lu_near_square_grid(int nranks, int *p, int *q)
{
	int best = 1;
	for (int i = 1; (long)i * i <= nranks; i++)
		if (nranks % i == 0)
			best = i;
	*p = best;
	*q = nranks / best;
}

void lu_distribution_block_cyclic(struct lu_distribution *d, int nt, int p, int q)
{
	d->nt = nt;
	d->owners = malloc(sizeof(int) * (size_t)nt * nt);
	for (int m = 0; m < nt; m++)
		for (int n = 0; n < nt; n++)
			d->owners[m * nt + n] = (m % p) * q + (n % q);
}

void lu_distribution_free(struct lu_distribution *d)
{
	free(d->owners);
	d->owners = NULL;
}

int lu_distribution_read(struct lu_distribution *d, const char *path, int nt, int nranks, char *err,
                         int errlen)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		snprintf(err, errlen, "error: %s: file: expected a readable distribution file (%s)", path,
		         strerror(errno));
		return -1;
	}
	d->nt = nt;
	d->owners = malloc(sizeof(int) * (size_t)nt * nt);
	char line[1 << 16];
	int row = 0, lineno = 0, rc = 0;
	while (rc == 0 && fgets(line, sizeof line, f)) {
		lineno++;
		char *s = line;
		while (isspace((unsigned char)*s))
			s++;
		if (*s == '#' || *s == '\0')
			continue;
		if (row >= nt) {
			snprintf(err, errlen, "error: %s: line %d: expected %d rows (NT = N/b), found more", path,
			         lineno, nt);
			rc = -1;
			break;
		}
		int col = 0;
		char *end;
		for (;;) {
			while (isspace((unsigned char)*s))
				s++;
			if (*s == '\0')
				break;
			long v = strtol(s, &end, 10);
			if (end == s || (*end && !isspace((unsigned char)*end))) {
				snprintf(err, errlen, "error: %s: line %d: expected integer owner ranks", path, lineno);
				rc = -1;
				break;
			}
			if (v < 0 || v >= nranks) {
				snprintf(err, errlen, "error: %s: line %d column %d: expected a rank in [0, %d), got %ld",
				         path, lineno, col + 1, nranks, v);
				rc = -1;
				break;
			}
			if (col < nt)
				d->owners[row * nt + col] = (int)v;
			col++;
			s = end;
		}
		if (rc == 0 && col != nt) {
			snprintf(err, errlen, "error: %s: line %d: expected %d owner ranks (NT = N/b), got %d", path,
			         lineno, nt, col);
			rc = -1;
		}
		row++;
	}
	fclose(f);
	if (rc == 0 && row != nt) {
		snprintf(err, errlen, "error: %s: rows: expected %d rows (NT = N/b), got %d", path, nt, row);
		rc = -1;
	}
	if (rc != 0)
		lu_distribution_free(d);
	return rc;
}

int lu_launcher_rank(void)
{
	const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"};
	for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
		if (getenv(vars[i]))
			return atoi(getenv(vars[i]));
	return 0;
}

int lu_distribution_of_run(struct lu_distribution *d, const char *dist_file, int *p, int *q, int nt, int nranks,
                           char *err, int errlen)
{
	if (dist_file)
		return lu_distribution_read(d, dist_file, nt, nranks, err, errlen);
	if (*p <= 0 || *q <= 0)
		lu_near_square_grid(nranks, p, q);
	if (*p * *q != nranks) {
		snprintf(err, errlen, "error: --p/--q: expected P x Q = number of ranks (%d), got %d x %d", nranks, *p, *q);
		return -1;
	}
	lu_distribution_block_cyclic(d, nt, *p, *q);
	return 0;
}

int lu_usage_error(int rank, const char *key, const char *expected)
{
	if (rank == 0)
		fprintf(stderr, "error: %s: expected %s\n", key, expected);
	return 2;
}

int lu_check_order(long n, long b, int rank)
{
	if (n > 0 && b > 0 && n % b == 0)
		return 0;
	char msg[128];
	snprintf(msg, sizeof msg, "N a positive multiple of b, got N=%ld b=%ld", n, b);
	return lu_usage_error(rank, "--n/--b", msg);
}
