// Thread placement and StarPU variables (src/core/topology.c, mpi/src/starpu_mpi_init.c).
#include "config.hpp"
#include "error.hpp"
#include "json.hpp"
#include "topology.hpp"

#include <gtest/gtest.h>

using namespace numasim;

static MachineNode chifflet_like() {
  MachineNode n;
  n.name = "chifflet-1";
  for (int i = 0; i < 28; i++)
    n.cpus.push_back({nullptr, i, i < 14 ? 0 : 1});
  n.gpus = {{nullptr, 0, 0, 11e9}, {nullptr, 1, 1, 11e9}};
  n.rams = {{nullptr, 0, 1e11}, {nullptr, 1, 1e11}};
  return n;
}

TEST(Threads, StudyDefaultsGive24CpuAnd2CudaWorkers) {
  // The study's baseline (config/factors.yaml): the MPI thread's core via STARPU_RESERVE_NCPU
  // (which overrides StarPU-MPI's own +1), the main thread's via STARPU_MAIN_THREAD_BIND.
  StarpuEnv e =
      parse_starpu_env({{"STARPU_RESERVE_NCPU", "1"}, {"STARPU_MAIN_THREAD_BIND", "1"}}, "run.json");
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

TEST(Threads, ExplicitPlacement) {
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

TEST(Env, UnknownSchedulerOrValueIsInputError) {
  EXPECT_THROW(parse_starpu_env({{"STARPU_SCHED", "heft"}}, "f"), InputError);
  EXPECT_THROW(parse_starpu_env({{"STARPU_USE_NUMA", "2"}}, "f"), InputError);
  EXPECT_THROW(parse_starpu_env({{"STARPU_CUDA_PIPELINE", "x"}}, "f"), InputError);
  EXPECT_THROW(parse_starpu_env({{"STARPU_NOT_A_VARIABLE", "1"}}, "f"), InputError);
  EXPECT_NO_THROW(parse_starpu_env({{"STARPU_SCHED", "lws"}, {"STARPU_SILENT", "1"}}, "f"));
  // What StarPU aborts on (include/starpu_helper.h starpu_get_env_number: not an integer, or
  // negative), refused as StarPU-SimGrid refuses it, inert variables included.
  EXPECT_THROW(parse_starpu_env({{"STARPU_CALIBRATE", "abc"}}, "f"), InputError);
  EXPECT_THROW(parse_starpu_env({{"STARPU_SILENT", "-1"}}, "f"), InputError);
  EXPECT_THROW(parse_starpu_env({{"STARPU_NCPU", "-1"}}, "f"), InputError);
  EXPECT_THROW(parse_starpu_env({{"STARPU_MAIN_THREAD_CPUID", "-1"}}, "f"), InputError);
  EXPECT_THROW(parse_starpu_env({{"STARPU_WORKERS_CUDAID", ""}}, "f"), InputError);
  EXPECT_THROW(parse_starpu_env({{"STARPU_WORKERS_CPUID", " , "}}, "f"), InputError);
  EXPECT_NO_THROW(parse_starpu_env({{"STARPU_CALIBRATE", ""}, {"STARPU_NCPU", "0"}}, "f"));
}

// StarPU 1.4's STARPU_CUDA_ONLY_FAST_ALLOC_OTHER_MEMNODES (core/workers.c, an integer: nonzero is on);
// unset it is off, the behaviour of the StarPU of the study's era, which lacks the variable.
TEST(Env, CudaOnlyFastAllocOtherMemnodes) {
  EXPECT_FALSE(parse_starpu_env({}, "f").cuda_only_fast_alloc_other_memnodes);
  EXPECT_TRUE(parse_starpu_env({{"STARPU_CUDA_ONLY_FAST_ALLOC_OTHER_MEMNODES", "1"}}, "f")
                  .cuda_only_fast_alloc_other_memnodes);
  EXPECT_FALSE(parse_starpu_env({{"STARPU_CUDA_ONLY_FAST_ALLOC_OTHER_MEMNODES", "0"}}, "f")
                   .cuda_only_fast_alloc_other_memnodes);
  EXPECT_THROW(parse_starpu_env({{"STARPU_CUDA_ONLY_FAST_ALLOC_OTHER_MEMNODES", "yes"}}, "f"), InputError);
}

TEST(Config, CfgOptionsCheckedBeforeSimGrid) {
  EXPECT_THROW(check_cfg_option("--cfg=nocolon"), InputError);
  EXPECT_THROW(check_cfg_option("--cfg=tracing:"), InputError);
  EXPECT_THROW(check_cfg_option("--cfg=network/model:Nope"), InputError);
  EXPECT_NO_THROW(check_cfg_option("--cfg=network/model:SMPI"));
  EXPECT_NO_THROW(check_cfg_option("--cfg=contexts/stack-size:512"));
}

TEST(Config, TaskGraphMustFitInMemory) {
  EXPECT_THROW(check_memory_need(4096, "f"), InputError); // 2.3e10 tasks: 3.4 TiB
  EXPECT_NO_THROW(check_memory_need(100, "f"));           // the study's size: 338,350 tasks
}

TEST(Distribution, BlockCyclicChameleonRule) {
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

// The run description's JSON is read strictly: the parser must not take a mistake for a
// default or a last-wins value.
static std::string input_error(const std::string& text) {
  try {
    RunConfig::from_json(parse_json(text, "run.json"), "run.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}
static const char* kMinimal =
    R"({"platform": "x.xml", "perfmodels": {"t": "s"}, "workload": {"kind": "lu", "n": 96, "b": 96}})";

TEST(Json, StrictSyntax) {
  EXPECT_THROW(parse_json(R"({"a": 1, "a": 2})", "f"), InputError);
  EXPECT_THROW(parse_json(R"({"a": NaN})", "f"), InputError);
  EXPECT_THROW(parse_json(R"({"a": -Infinity})", "f"), InputError);
  EXPECT_THROW(parse_json(R"({"a": 0x10})", "f"), InputError);
  EXPECT_THROW(parse_json(R"({"a": 1e400})", "f"), InputError);
  EXPECT_THROW(parse_json(R"({"a": 1} trailing)", "f"), InputError);
  EXPECT_THROW(parse_json("\"\xff\"", "f"), InputError);
  EXPECT_THROW(parse_json(std::string(100000, '[') + std::string(100000, ']'), "f"), InputError);
  EXPECT_NO_THROW(parse_json(std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']'), "f"));
  Json j = parse_json(R"({"seed": 9007199254740993, "x": [1, {"y": "\u00e9"}]})", "f");
  EXPECT_EQ(j.find("seed")->integer, 9007199254740993LL); // above 2^53: kept exactly
  EXPECT_EQ(j.find("x")->array[1].find("y")->string, "\xc3\xa9");
}

TEST(Json, DuplicateKeyNamesItsPath) {
  std::string e;
  try {
    parse_json(R"({"workload": {"n": 1, "n": 2}})", "run.json");
  } catch (const InputError& x) {
    e = x.what();
  }
  EXPECT_NE(e.find("run.json: workload.n: expected each key once"), std::string::npos) << e;
}

TEST(RunDescription, UnknownKeysAndWrongTypesAreNamed) {
  std::string base = kMinimal;
  auto with = [&](const std::string& extra) { return base.substr(0, base.size() - 1) + ", " + extra + "}"; };
  EXPECT_EQ(input_error(base), "");
  EXPECT_NE(input_error(with(R"("variabilty": false)")).find("run.json: variabilty: expected a known key"),
            std::string::npos);
  EXPECT_NE(input_error(with(R"("seed": "abc")")).find("seed"), std::string::npos);
  EXPECT_NE(input_error(with(R"("seed": 1.5)")).find("seed"), std::string::npos);
  EXPECT_NE(input_error(with(R"("variability": "yes")")).find("variability"), std::string::npos);
  EXPECT_NE(input_error(with(R"("mpi": {"overhead": 1})")).find("mpi.overhead"), std::string::npos);
  EXPECT_NE(
      input_error(with(R"("env": {"STARPU_WORKERS_CPUID": "0-99999999999"})")).find("STARPU_WORKERS_CPUID"),
      std::string::npos);
  // Env values are strings, as environment variables are; env_per_machine names machine types.
  EXPECT_NE(input_error(with(R"("env": {"STARPU_NCPU": 2})")).find("env.STARPU_NCPU: expected a string"),
            std::string::npos);
  EXPECT_NE(input_error(with(R"("env_per_machine": {"nope": {}})")).find("env_per_machine.nope"),
            std::string::npos);
  RunConfig c =
      RunConfig::from_json(parse_json(with(R"("seed": 9007199254740993, "variability": false)"), "f"), "f");
  EXPECT_EQ(c.seed, 9007199254740993ULL);
  EXPECT_FALSE(c.variability);
}

// mpi.backend: NewMadeleine's multicast by default (the study's StarPU-MPI), StarPU's MPI backend on
// request; mpi.tree: NewMadeleine's tree kinds.
TEST(RunDescription, MpiBackendAndTree) {
  std::string base = kMinimal;
  auto with = [&](const std::string& extra) { return base.substr(0, base.size() - 1) + ", " + extra + "}"; };
  RunConfig d = RunConfig::from_json(parse_json(base, "f"), "f");
  EXPECT_EQ(d.mpi_backend, MpiBackend::nmad);
  EXPECT_EQ(d.mpi_tree, McastTree::binomial);
  RunConfig m =
      RunConfig::from_json(parse_json(with(R"("mpi": {"backend": "mpi", "tree": "chain"})"), "f"), "f");
  EXPECT_EQ(m.mpi_backend, MpiBackend::mpi);
  EXPECT_EQ(m.mpi_tree, McastTree::chain);
  EXPECT_NE(input_error(with(R"("mpi": {"backend": "openmpi"})")).find("run.json: mpi.backend"),
            std::string::npos);
  EXPECT_NE(input_error(with(R"("mpi": {"backend": 1})")).find("mpi.backend"), std::string::npos);
  EXPECT_NE(input_error(with(R"("mpi": {"tree": "binary"})")).find("run.json: mpi.tree"), std::string::npos);
}
