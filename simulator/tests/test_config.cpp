// Thread placement and StarPU variables (src/core/topology.c, mpi/src/starpu_mpi_init.c).
#include "config.hpp"
#include "error.hpp"

#include <gtest/gtest.h>

using namespace numasim;

static MachineNode chifflet_like()
{
  MachineNode n;
  n.name = "chifflet-1";
  for (int i = 0; i < 28; i++)
    n.cpus.push_back({nullptr, i, i < 14 ? 0 : 1});
  n.gpus = {{nullptr, 0, 0, 11e9}, {nullptr, 1, 1, 11e9}};
  n.rams = {{nullptr, 0, 1e11}, {nullptr, 1, 1e11}};
  return n;
}

TEST(Threads, StudyDefaultsGive24CpuAnd2CudaWorkers)
{
  // The study's baseline (config/factors.yaml): the MPI thread's core via STARPU_RESERVE_NCPU
  // (which overrides StarPU-MPI's own +1), the main thread's via STARPU_MAIN_THREAD_BIND.
  StarpuEnv e = parse_starpu_env({{"STARPU_RESERVE_NCPU", "1"}, {"STARPU_MAIN_THREAD_BIND", "1"}}, "run.json");
  NodeThreads t = place_threads(chifflet_like(), e);
  int cpu = 0, cuda = 0;
  for (auto& w : t.workers)
    (w.cuda ? cuda : cpu)++;
  EXPECT_EQ(cuda, 2);
  EXPECT_EQ(cpu, 24);
  // The bound main thread takes bind id 0 (topology.c), then the CUDA drivers, all on NUMA 0
  // (factor B's default).
  EXPECT_EQ(t.main_core, 0);
  EXPECT_EQ(t.workers[0].core, 1);
  EXPECT_EQ(t.workers[1].core, 2);
  EXPECT_EQ(t.mpi_numa, 1); // progression thread after the workers: NUMA 1 (factor C's default)
  EXPECT_EQ(t.main_numa, 0);
}

TEST(Threads, ExplicitPlacement)
{
  StarpuEnv e = parse_starpu_env({{"STARPU_WORKERS_CPUID", "0 14 1-13 15-25"},
                                  {"STARPU_MPI_THREAD_CPUID", "13"},
                                  {"STARPU_MAIN_THREAD_CPUID", "27"}},
                                 "run.json");
  NodeThreads t = place_threads(chifflet_like(), e);
  EXPECT_EQ(t.workers[0].core, 0);
  EXPECT_EQ(t.workers[1].core, 14);
  EXPECT_EQ(t.workers[1].numa, 1);
  EXPECT_EQ(t.mpi_core, 13);
  EXPECT_EQ(t.mpi_numa, 0);
  EXPECT_EQ(t.main_numa, 1);
  for (auto& w : t.workers) {
    EXPECT_NE(w.core, 13);
    EXPECT_NE(w.core, 27);
  }
}

TEST(Env, UnknownSchedulerOrValueIsInputError)
{
  EXPECT_THROW(parse_starpu_env({{"STARPU_SCHED", "heft"}}, "f"), InputError);
  EXPECT_THROW(parse_starpu_env({{"STARPU_USE_NUMA", "2"}}, "f"), InputError);
  EXPECT_THROW(parse_starpu_env({{"STARPU_CUDA_PIPELINE", "x"}}, "f"), InputError);
  EXPECT_THROW(parse_starpu_env({{"STARPU_NOT_A_VARIABLE", "1"}}, "f"), InputError);
  EXPECT_NO_THROW(parse_starpu_env({{"STARPU_SCHED", "lws"}, {"STARPU_SILENT", "1"}}, "f"));
}

TEST(Distribution, BlockCyclicChameleonRule)
{
  RunConfig c;
  c.nt = 4;
  c.p = 2;
  c.q = 3;
  c.resolve_distribution(6);
  EXPECT_EQ(c.owner_of(0, 0), 0);
  EXPECT_EQ(c.owner_of(1, 2), 5);
  EXPECT_EQ(c.owner_of(3, 3), 3);
  RunConfig bad = c;
  bad.p = 4;
  bad.q = 4;
  EXPECT_THROW(bad.resolve_distribution(6), InputError);
}
