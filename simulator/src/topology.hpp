// Workers and memory nodes of every machine node, and where StarPU binds its threads
// (StarPU 1.4.10 src/core/topology.c, src/core/workers.c, src/drivers/cpu/driver_cpu.c,
// mpi/src/starpu_mpi_init.c). The runtime (runtime.cpp), the schedulers (sched/), the data
// management (datawizard/) and the NUMA mechanisms (numa_effects.cpp) read them.
#pragma once
#include "config.hpp"
#include "platform.hpp"
#include "sched/task_queue.hpp"

#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace numasim {

constexpr int kMaxMemNodes = 16; // per machine node: RAM nodes + GPU memories (bits of a MemMask)

// Where StarPU's threads run on one node (topology.c _starpu_get_next_bindid,
// mpi/src/starpu_mpi_init.c).
struct WorkerPlacement {
  bool cuda = false;
  int core = -1; // OS index of the core the worker (or CUDA driver) thread is bound to
  int numa = 0;
  int gpu = -1; // index of the GPU driven
};
struct NodeThreads {
  std::vector<WorkerPlacement> workers; // CUDA workers first, then CPU workers (StarPU's order)
  int main_core = -1;                   // -1: not bound
  int main_numa = 0;                    // NUMA node where the main thread first-touches data
  int mpi_core = -1;
  int mpi_numa = 0;
};
// Replays StarPU's binding of the main thread, the CUDA drivers, the CPU workers and the MPI
// progression thread on `node` (tests/data/binding_cases.json, shared with the Python replay
// testbed/run/factors.py starpu_placement).
NodeThreads place_threads(const MachineNode& node, const StarpuEnv& env);
// The PUs of a STARPU_WORKERS_CPUID list on a machine of `nhwpus` PUs: ranges expanded (an open
// range `a-` runs to the last PU), every id modulo nhwpus (topology.c
// _starpu_initialize_workers_bindid).
std::vector<int> expand_cpuids(const std::vector<CpuIdRange>& list, int nhwpus);

// A memory node (StarPU's memory nodes: one RAM node, or one per NUMA node, and one per GPU).
struct MemNode {
  int rank;
  int local; // index within its rank
  bool gpu;
  int numa; // NUMA node of the RAM, or the GPU's NUMA node
  sg4::Host* host;
  double capacity;                 // bytes usable for tiles (GPU memory); RAM is not limited
  double malloc_s = 0, free_s = 0; // GPU: cudaMalloc / cudaFree of one buffer (GpuInfo)
  // RAM: the size StarPU's memory manager gives the node (core/topology.c
  // _starpu_cpu_get_global_mem_size: 0.9 x the NUMA node's hwloc local memory with STARPU_USE_NUMA,
  // 0.9 x the machine's without; the STARPU_LIMIT_CPU_*MEM variables, which would lower it, are
  // refused by parse_starpu_env), from the machine description's NUMA memory sizes; 0 when the
  // platform gives none (starpu_memory_get_available then answers -1). Read by StarPU 1.4.10's
  // choice of a reception's node (DataWizard::reception_node).
  double global_size = 0;
};

// A worker (StarPU's struct _starpu_worker, core/workers.h): placement, model lengths, the
// scheduler's per-worker queue and expectations, and its actor.
struct alignas(64) Worker {
  // What dmda reads of every worker of its rank at each decision (sched/dmda.cpp choose) first,
  // in one cache line: 338,350 decisions over 20-30 workers each at the study's scale.
  int id, rank;
  int mem; // local memory node
  bool cuda;
  double exp_start = 0, exp_len = 0;       // dmda's per-worker expectations
  double length[kNumKinds] = {0, 0, 0, 0}; // perf-model mean (s), <0: cannot run
  int core, numa, gpu;
  int devid; // perf-model device id (CUDA device, or 0 for CPUs)
  sg4::Host* host;
  std::string name; // e.g. chifflet-1.cpu2 / chifflet-1.gpu0
  double dev[kNumKinds] = {0, 0, 0, 0};
  TaskQueue queue;
  // Model lengths of the queued tasks by priority rank (Fenwick tree, integer picoseconds so
  // that sums do not depend on the order of insertions): dmdasd's work ahead of a priority.
  std::vector<int64_t> queued_ps;
  std::deque<uint32_t> inflight;    // popped tasks (more than one with STARPU_CUDA_PIPELINE)
  double task_overhead = 0;         // CUDA worker: host time per task (s), from the platform
  double last_end = -1;             // end of the worker's last task (back-to-back detection)
  double busy_until = 0;            // its thread is in an allocation call until then (CUDA driver)
  double first_call[3] = {0, 0, 0}; // CUDA worker: extra time of a kernel's first task (s), from the platform
  bool called[3] = {false, false, false}; // kernels (kFirstCallKernels) this worker has run
  double task_gap = 0; // CUDA worker: s between back-to-back tasks not hidden by the pipeline
  sg4::ActorPtr actor;
  bool suspended = false;
  // CUDA worker: its kernel runs on the device and the driver thread polls meanwhile, asleep
  // until the kernel's end unless a request for a node it drives wakes it (`interrupted`).
  bool in_kernel = false, interrupted = false;
  uint64_t executed = 0;
};

// How far the run is: read by the actors that outlive the last task (copy runners, MPI threads,
// NUMA balancing scanners) to know when to stop.
struct Progress {
  uint64_t done_tasks = 0;
  bool finished = false;
};

// Resumes a worker's actor if it waits for work or operands.
inline void wake(Worker& w) {
  if (w.suspended) {
    w.suspended = false;
    w.actor->resume();
  }
}

// The machine as StarPU configures it on every node: threads, memory nodes, workers and their
// performance models (core/topology.c _starpu_init_machine_config, core/perfmodel).
class Topology {
public:
  // Throws InputError on a node without perf models, workers or with too many memory nodes.
  Topology(const RunConfig& cfg, std::vector<MachineNode> nodes);

  const std::vector<MachineNode>& nodes() const { return nodes_; }
  size_t nranks() const { return nodes_.size(); }
  const NodeThreads& threads(int rank) const { return threads_[rank]; }
  const std::vector<MemNode>& mem() const { return mem_; }
  const MemNode& mem(int gmem) const { return mem_[gmem]; }
  int global_mem(int rank, int local) const { return rank_mem_[rank][local]; }
  int home(int rank) const { return home_[rank]; } // local index of the main RAM node
  int cuda_devices(int rank) const { return rank_cuda_devices_[rank]; }
  const std::vector<int>& rank_workers(int rank) const { return rank_workers_[rank]; }
  std::vector<Worker>& workers() { return workers_; }
  const std::vector<Worker>& workers() const { return workers_; }
  int mem_stride() const { return mem_stride_; } // most memory nodes of a machine node
  // The thread of `rank` that copies from RAM to RAM on NUMA node `numa` (the first CPU worker
  // there, or of the rank when none runs there; core nullptr without CPU workers) and the bytes
  // per second it copies: half its core's link, which carries the reads towards the core and the
  // writes back (memory_bench's memcpy). Looked up once per (rank, NUMA node).
  struct CopyThread {
    sg4::Host* core = nullptr;
    double rate = std::numeric_limits<double>::infinity();
  };
  const CopyThread& copy_thread(int rank, int numa) const;

private:
  const RunConfig& cfg_;
  std::vector<MachineNode> nodes_;
  std::vector<NodeThreads> threads_;
  std::vector<MemNode> mem_;
  std::vector<std::vector<int>> rank_mem_; // local -> global memory node
  std::vector<int> home_;                  // per rank: local index of the main RAM node
  std::vector<int> rank_cuda_devices_;     // per rank: GPUs driven by a CUDA worker (StarPU's ndevices)
  std::vector<std::vector<int>> rank_workers_;
  mutable std::map<std::pair<int, int>, CopyThread> copy_threads_; // (rank, numa) -> copy_thread
  std::vector<Worker> workers_;
  int mem_stride_ = 1;

  void setup_node(int rank);
  std::map<int, int> add_memory_nodes(int rank, const StarpuEnv& env);
  void add_workers(int rank, const StarpuEnv& env, const std::map<int, int>& gpu_mem);
  void load_models();
};

} // namespace numasim
