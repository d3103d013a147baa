/* Per-rank StarPU settings of the SimGrid build: SMPI runs every rank in one process, whose
 * environment StarPU reads with getenv, so the starpu-simgrid engine
 * (testbed/run/engines/starpu_simgrid.py) writes what differs between machine types into a file
 * named by LU_RANK_ENV, one line per rank: the rank, then tab-separated VAR=VALUE fields. */
#ifndef LU_RANK_ENV_H
#define LU_RANK_ENV_H

#include <stddef.h>
#include <starpu.h>

/* Applies the line of `rank` of the LU_RANK_ENV file (when the variable is set) to conf, which
 * starpu_conf_init has filled; every line is checked (lines 0 .. nranks-1 in order), so all ranks
 * fail alike. Returns 0, or 2 after writing "error: FILE: rank R: KEY: expected ..." into err. */
int lu_rank_env_apply(struct starpu_conf *conf, int rank, int nranks, char *err, size_t errlen);

#endif
