// Run description (docs/interfaces.md §4) and the StarPU environment variables
// it carries, interpreted with StarPU 1.4.10's meanings and defaults.
#pragma once
#include "json.hpp"
#include "mechanisms.hpp"
#include "platform.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace numasim {

enum class Scheduler { dmda, dmdas, dmdasd, eager, lws };
// StarPU-MPI's communication backend (run description `mpi.backend`): how a group of cooperative
// sends is sent (mpi/starpu_mpi.hpp).
enum class MpiBackend : uint8_t { mpi, nmad };
// NewMadeleine's multicast tree kinds (`mpi.tree`): nm_coll_tree_kind_e's binomial, chain and flat.
enum class McastTree : uint8_t { binomial, chain, flat };
enum class TaskKind : uint8_t { getrf = 0, trsm_row = 1, trsm_col = 2, gemm = 3 }; // row: A(k,n), col: A(m,k)
constexpr int kNumKinds = 4;
const char* kind_name(TaskKind k); // "getrf", "trsm", "trsm", "gemm" (Value column of the trace)

// One item of a STARPU_WORKERS_CPUID list: an id, a range a-b, or an open range a- (last = -1: up
// to the last PU); expanded on each machine by expand_cpuids (topology.cpp).
struct CpuIdRange {
  int first, last;
};

struct StarpuEnv {
  Scheduler sched = Scheduler::dmdas;       // study default (Chameleon picks dmdas with CUDA workers)
  double alpha = 1, beta = 1, gamma = 1000; // deque_modeling_policy_data_aware.c defaults (sched/dmda.cpp)
  bool prefetch = true;                     // starpu_get_prefetch_flag(): STARPU_PREFETCH default 1
  int cuda_pipeline = 2;                    // drivers/cuda/driver_cuda.c: STARPU_CUDA_PIPELINE default 2
  bool use_numa = false;                    // STARPU_USE_NUMA default 0 (one RAM memory node)
  int ncpu = -1, ncuda = -1, reserve_ncpu = -1;
  std::vector<CpuIdRange> workers_cpuid; // empty: not set
  std::vector<int> workers_cudaid;
  int main_thread_cpuid = -1, mpi_thread_cpuid = -1;
  bool main_thread_bind = false;
  bool homogeneous_cuda = false, homogeneous_cpu = true; // perfmodel.c defaults
  // Linux automatic NUMA balancing (sysctl kernel.numa_balancing, passed as TESTBED_NUMA_BALANCING
  // by testbed/run/factors.py). Default 1: Debian kernels enable it on multi-NUMA machines
  // (CONFIG_NUMA_BALANCING_DEFAULT_ENABLED=y), the study's default level.
  bool numa_balancing = true;
  // STARPU_CUDA_ONLY_FAST_ALLOC_OTHER_MEMNODES (StarPU 1.4 since 2021, default 0; core/workers.c):
  // a CUDA driver does no slow allocation (pinned RAM) for the NUMA nodes it drives
  // (datawizard/datawizard.c __starpu_datawizard_progress). The StarPU of the study's era has no
  // such variable: left at 0 it behaves as that StarPU (docs/page-placement.md).
  bool cuda_only_fast_alloc_other_memnodes = false;
};

// Sizes numasim accepts (checked before allocating; StarPU's matrix interface takes 32-bit sizes).
// 4096^3/3 ≈ 2.3e10 tasks do not fit in memory: check_memory_need lowers the bound to what the
// machine running numasim can hold (779 tiles per dimension in 24 GiB).
constexpr int kMaxTiles = 4096;
constexpr int kMaxTileSize = 65536;

struct RunConfig {
  std::string file; // the run description (for error messages)
  std::string platform;
  std::map<std::string, std::string> perfmodels;      // machine type -> sampling dir
  std::map<std::string, std::string> perfmodel_hosts; // machine type -> host name of its files
  std::string symbols[kNumKinds];
  bool kind_on_cuda[kNumKinds] = {false, true, true, true}; // Chameleon: dgetrf_nopiv is CPU-only
  // Task graph: submission order and priorities of Chameleon's pzgetrf_nopiv ("chameleon") or of
  // StarPU's examples/lu/xlu_implicit.c ("starpu-lu-example"); same tasks and dependencies.
  std::string dag = "chameleon";
  int n = 0, b = 0, nt = 0;
  std::string dist_kind = "block-cyclic";
  int p = 0, q = 0;
  std::string dist_path;
  std::vector<int> owner; // nt*nt, filled by resolve_distribution
  std::map<std::string, std::string> env_raw;
  StarpuEnv env;
  // "env_per_machine" (docs/interfaces.md §4, §6.1): variables that differ between machine types;
  // a rank on machine m runs with {**env, **env_per_machine[m]} (thread placement, memory nodes,
  // NUMA balancing; the scheduler settings are taken from `env`).
  std::map<std::string, std::map<std::string, std::string>> env_machine_raw;
  std::map<std::string, StarpuEnv> env_machine;
  const StarpuEnv& env_for(const std::string& machine) const {
    auto it = env_machine.find(machine);
    return it == env_machine.end() ? env : it->second;
  }
  uint64_t seed = 1;
  bool variability = true;
  double mpi_overhead_s = 0; // per request on the progression thread
  // StarPU-MPI's memory node for sends (run description `mpi.memory_node`): false ("main_ram",
  // the StarPU-MPI of the study's era: the data is acquired on STARPU_MAIN_RAM), true
  // ("choose_node", StarPU 1.4.10 mpi/src/starpu_mpi.c _starpu_mpi_choose_node).
  bool mpi_choose_node = false;
  // `mpi.backend`: "nmad" (default: the study's StarPU-MPI over NewMadeleine, whose cooperative sends
  // are a multicast that receivers forward) or "mpi" (StarPU's MPI backend: the owner sends each
  // copy); `mpi.tree`: the multicast's tree (binomial by default).
  MpiBackend mpi_backend = MpiBackend::nmad;
  McastTree mpi_tree = McastTree::binomial;
  // The modelled mechanisms switched on (run description `mechanisms`: {name: false} switches one
  // off; mechanisms.hpp). kernel_variability off sets `variability` false.
  Mechanisms mechanisms;
  std::string trace, transfers;
  std::string events; // runtime events CSV (runtime_events.hpp), written only when given

  static RunConfig from_json(const Json& j, const std::string& file);
  void resolve_distribution(int nranks);
  int owner_of(int m, int n) const { return owner[static_cast<size_t>(m) * nt + n]; }
};

StarpuEnv parse_starpu_env(const std::map<std::string, std::string>& env, const std::string& file);

// A SimGrid option `--cfg=KEY:VALUE` of numasim's command line, checked before SimGrid reads it
// (InputError naming --cfg otherwise): SimGrid 3.32 aborts on a missing ':' (src/xbt/config.cpp
// Config::set_parse: "badly formatted", xbt_die) and on a model it does not know
// (src/surf/surf_interface.cpp find_model_description: "Model 'X' is invalid!", xbt_die).
void check_cfg_option(const std::string& arg);

// The memory a run's task graph needs, checked before it is built (InputError on workload.n/b):
// NT(NT+1)(2NT+1)/6 tasks of about 160 bytes each (measured, config.cpp), against the machine's physical
// memory and the process's address-space limit (RLIMIT_AS), so that a size that cannot fit is one line, not
// std::bad_alloc after minutes.
void check_memory_need(int nt, const std::string& file);

} // namespace numasim
