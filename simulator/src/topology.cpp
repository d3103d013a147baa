#include "topology.hpp"
#include "error.hpp"
#include "perfmodel.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

XBT_LOG_NEW_DEFAULT_SUBCATEGORY(numasim_topology, numasim, "numasim workers, memory nodes and thread binding");

namespace numasim {

NodeThreads place_threads(const MachineNode& node, const StarpuEnv& env_pu)
{
  // StarPU's CPU ids are logical PU ids (topology.c, _starpu_initialize_workers_bindid); numasim places
  // threads on cores, so PU p runs on core p / threads_per_core.
  StarpuEnv env = env_pu;
  const int tpc = std::max(1, node.threads_per_core);
  if (env.main_thread_cpuid >= 0)
    env.main_thread_cpuid /= tpc;
  if (env.mpi_thread_cpuid >= 0)
    env.mpi_thread_cpuid /= tpc;
  for (int& pu : env.workers_cpuid)
    pu /= tpc;
  NodeThreads t;
  auto numa_of = [&](int core) {
    for (const auto& c : node.cpus)
      if (c.index == core)
        return c.numa;
    return -1;
  };
  auto check_core = [&](int core, const char* var) {
    if (numa_of(core) < 0)
      throw InputError("env", var, "a CPU id of node " + node.name + " (0.." +
                                       std::to_string(node.cpus.back().index) + "), got " + std::to_string(core));
  };
  std::set<int> taken; // cores bound to an active thread (starpu_get_next_bindid skips them)
  // Main thread (topology.c: STARPU_MAIN_THREAD_CPUID / STARPU_MAIN_THREAD_BIND).
  if (env.main_thread_cpuid >= 0) {
    check_core(env.main_thread_cpuid, "STARPU_MAIN_THREAD_CPUID");
    taken.insert(env.main_thread_cpuid);
  }
  if (env.mpi_thread_cpuid >= 0) {
    check_core(env.mpi_thread_cpuid, "STARPU_MPI_THREAD_CPUID");
    taken.insert(env.mpi_thread_cpuid);
  }
  // reserve_ncpus: StarPU-MPI first reserves 1 for its progression thread when neither
  // STARPU_MPI_THREAD_CPUID nor STARPU_NCPU is set (mpi/src/starpu_mpi_init.c), then
  // _starpu_conf_check_environment (src/core/workers.c) overwrites it with STARPU_RESERVE_NCPU
  // when that is set. A bound main thread adds one more there; here it takes its own bind id below.
  int reserve = (env.mpi_thread_cpuid < 0 && env.ncpu < 0) ? 1 : 0;
  if (env.reserve_ncpu >= 0)
    reserve = env.reserve_ncpu;
  // Bind ids in order: STARPU_WORKERS_CPUID (wrapping when shorter, topology.c) or all cores.
  std::vector<int> order;
  if (!env.workers_cpuid.empty()) {
    for (int c : env.workers_cpuid)
      check_core(c, "STARPU_WORKERS_CPUID");
    for (size_t i = 0; i < node.cpus.size(); i++)
      order.push_back(env.workers_cpuid[i % env.workers_cpuid.size()]);
  } else
    for (const auto& c : node.cpus)
      order.push_back(c.index);
  size_t next = 0;
  auto next_bindid = [&]() -> int {
    while (next < order.size() && taken.count(order[next]))
      next++;
    if (next >= order.size()) { // fall back to any free core
      for (const auto& c : node.cpus)
        if (!taken.count(c.index)) {
          taken.insert(c.index);
          return c.index;
        }
      return -1;
    }
    int c = order[next++];
    taken.insert(c);
    return c;
  };
  // A bound main thread without STARPU_MAIN_THREAD_CPUID takes the first bind id, before the
  // drivers and workers (topology.c; docs/interfaces.md §6.1, testbed/factors.py starpu_placement).
  if (env.main_thread_bind && env.main_thread_cpuid < 0)
    t.main_core = next_bindid();
  // CUDA workers: STARPU_NCUDA (-1: all), devices from STARPU_WORKERS_CUDAID (driver_cuda_init.c).
  int ngpu = static_cast<int>(node.gpus.size());
  int ncuda = env.ncuda < 0 ? ngpu : std::min(env.ncuda, ngpu); // StarPU warns and caps
  for (int i = 0; i < ncuda; i++) {
    int dev = env.workers_cudaid.empty() ? i : env.workers_cudaid[i % env.workers_cudaid.size()];
    const GpuInfo* g = nullptr;
    for (const auto& x : node.gpus)
      if (x.index == dev)
        g = &x;
    if (!g)
      throw InputError("env", "STARPU_WORKERS_CUDAID", "GPU ids of node " + node.name + ", got " + std::to_string(dev));
    WorkerPlacement w;
    w.cuda = true;
    w.gpu = dev;
    w.core = next_bindid();
    w.numa = numa_of(w.core);
    t.workers.push_back(w);
  }
  // Worker count as _starpu_init_cpu_config (src/drivers/cpu/driver_cpu.c): cores minus the CUDA
  // drivers' cores (_starpu_cpu_busy_cpu) minus reserve_ncpus, which counts a bound main thread
  // (src/core/workers.c); explicitly placed main/MPI threads are not subtracted again, their
  // cores are only skipped when binding.
  if (env.main_thread_bind)
    reserve++;
  int avail_cores = static_cast<int>(node.cpus.size()) - ncuda;
  int ncpu = env.ncpu >= 0 ? std::min(env.ncpu, avail_cores) : std::max(0, avail_cores - reserve);
  for (int i = 0; i < ncpu; i++) {
    WorkerPlacement w;
    w.core = next_bindid();
    if (w.core < 0)
      break;
    w.numa = numa_of(w.core);
    t.workers.push_back(w);
  }
  if (env.main_thread_cpuid >= 0)
    t.main_core = env.main_thread_cpuid;
  // An unbound main thread first-touches on NUMA 0 (the study's observation: "mostly NUMA 0").
  t.main_numa = t.main_core >= 0 ? numa_of(t.main_core) : 0;
  // MPI progression thread: STARPU_MPI_THREAD_CPUID, else the next free bind id after the workers
  // (mpi/src/starpu_mpi_private.c / starpu_get_next_bindid).
  t.mpi_core = env.mpi_thread_cpuid >= 0 ? env.mpi_thread_cpuid : next_bindid();
  if (t.mpi_core < 0)
    t.mpi_core = node.cpus.back().index;
  t.mpi_numa = numa_of(t.mpi_core);
  return t;
}


// Memory StarPU lets itself allocate on a GPU without STARPU_LIMIT_CUDA_MEM: 90% of the
// device memory, in whole MiB (drivers/cuda/driver_cuda.c _starpu_cuda_limit_gpu_mem_if_needed,
// FREE_MARGIN 0.9; StarPU-SimGrid takes the device memory from the host's memsize property).
static double usable_gpu_memory(double bytes)
{
  const double mib = 1024.0 * 1024.0;
  return std::floor(std::floor(bytes / mib) * 0.9) * mib;
}

Topology::Topology(const RunConfig& cfg, std::vector<MachineNode> nodes) : cfg_(cfg), nodes_(std::move(nodes))
{
  const int nranks = static_cast<int>(nodes_.size());
  threads_.resize(nranks);
  rank_mem_.resize(nranks);
  home_.resize(nranks);
  rank_cuda_devices_.resize(nranks);
  rank_workers_.resize(nranks);
  for (int r = 0; r < nranks; r++)
    setup_node(r);
  load_models();
}

void Topology::setup_node(int r)
{
  const MachineNode& n = nodes_[r];
  if (!cfg_.perfmodels.count(n.machine))
    throw InputError(cfg_.file, "perfmodels", "an entry for machine type '" + n.machine + "' (node " + n.name + ")");
  const StarpuEnv& env = cfg_.env_for(n.machine); // per machine type (env_per_machine)
  threads_[r] = place_threads(n, env);
  std::map<int, int> gpu_mem = add_memory_nodes(r, env);
  rank_cuda_devices_[r] = static_cast<int>(gpu_mem.size());
  if (rank_mem_[r].size() > kMaxMemNodes)
    throw InputError(cfg_.platform, "node " + n.name,
                     "at most " + std::to_string(kMaxMemNodes) + " memory nodes (RAM NUMA nodes + GPUs)");
  mem_stride_ = std::max(mem_stride_, static_cast<int>(rank_mem_[r].size()));
  add_workers(r, env, gpu_mem);
  if (rank_workers_[r].empty())
    throw InputError("env", "STARPU_NCPU/STARPU_NCUDA", "at least one worker on node " + n.name);
}

// Memory nodes (src/core/topology.c): with STARPU_USE_NUMA=1 one RAM node per NUMA node, else one
// RAM node whose pages the main thread first-touched (its NUMA node); then one per driven GPU.
// Returns GPU index -> local memory node.
std::map<int, int> Topology::add_memory_nodes(int r, const StarpuEnv& env)
{
  const MachineNode& n = nodes_[r];
  const NodeThreads& th = threads_[r];
  auto add_mem = [&](bool gpu, int numa, sg4::Host* host, double cap) {
    MemNode m{r, static_cast<int>(rank_mem_[r].size()), gpu, numa, host, cap};
    rank_mem_[r].push_back(static_cast<int>(mem_.size()));
    mem_.push_back(m);
    return m.local;
  };
  if (env.use_numa) {
    for (const auto& ram : n.rams)
      add_mem(false, ram.numa, ram.host, 0);
    // STARPU_MAIN_RAM (memory node 0, where the application registers its tiles) is the NUMA
    // node of the first CPU worker: _starpu_init_numa_node (src/core/topology.c) registers one
    // RAM memory node per NUMA node of the CPU workers, in worker order.
    home_[r] = th.main_numa;
    for (const auto& wp : th.workers)
      if (!wp.cuda) {
        home_[r] = wp.numa;
        break;
      }
  } else {
    const RamInfo& ram = n.ram_of_numa(th.main_numa);
    home_[r] = add_mem(false, ram.numa, ram.host, 0);
  }
  std::map<int, int> gpu_mem;
  for (const auto& wp : th.workers)
    if (wp.cuda)
      for (const auto& g : n.gpus)
        if (g.index == wp.gpu && !gpu_mem.count(g.index))
          gpu_mem[g.index] = add_mem(true, g.numa, g.host, usable_gpu_memory(g.memory));
  return gpu_mem;
}

void Topology::add_workers(int r, const StarpuEnv& env, const std::map<int, int>& gpu_mem)
{
  const MachineNode& n = nodes_[r];
  for (const auto& wp : threads_[r].workers) {
    Worker w;
    w.id = static_cast<int>(workers_.size());
    w.rank = r;
    w.cuda = wp.cuda;
    w.core = wp.core;
    w.numa = wp.numa;
    w.gpu = wp.gpu;
    if (wp.cuda) {
      w.mem = gpu_mem.at(wp.gpu);
      w.devid = cfg_.env.homogeneous_cuda ? 0 : wp.gpu;
      for (const auto& g : n.gpus)
        if (g.index == wp.gpu) {
          w.host = g.host;
          w.task_overhead = g.task_overhead;
        }
    } else {
      // A CPU worker works on its NUMA node's memory node when there is one per NUMA node.
      w.mem = env.use_numa ? wp.numa : home_[r];
      w.devid = 0;
      for (const auto& c : n.cpus)
        if (c.index == wp.core)
          w.host = c.host;
    }
    w.name = w.host->get_name();
    rank_workers_[r].push_back(w.id);
    workers_.push_back(std::move(w));
  }
}

// One model file per (machine type, kind); the footprint is that of the kind's nbuf b×b matrices
// (core/perfmodel/perfmodel_history.c; numasim: perfmodel.cpp).
void Topology::load_models()
{
  const int nbuf[kNumKinds] = {1, 2, 2, 3};
  std::map<std::pair<std::string, std::string>, PerfModel> cache;
  for (auto& w : workers_) {
    const std::string& machine = nodes_[w.rank].machine;
    for (int k = 0; k < kNumKinds; k++) {
      if (w.cuda && !cfg_.kind_on_cuda[k]) {
        w.length[k] = -1;
        continue;
      }
      auto key = std::make_pair(machine, cfg_.symbols[k]);
      auto it = cache.find(key);
      if (it == cache.end())
        it = cache.emplace(key, PerfModel::load(cfg_.perfmodels.at(machine), cfg_.symbols[k], machine)).first;
      const PerfModel& m = it->second;
      uint32_t fp = matrix_task_footprint(nbuf[k], cfg_.b, cfg_.b);
      uint64_t size = static_cast<uint64_t>(nbuf[k]) * cfg_.b * cfg_.b * sizeof(double);
      const HistoryEntry* e = m.lookup(w.cuda ? 1 : 0, w.devid, 1, fp, size);
      if (!e) {
        char fps[16];
        std::snprintf(fps, sizeof fps, "%08x", fp);
        throw InputError(m.path,
                         std::string(w.cuda ? "cuda" : "cpu") + (w.cuda ? std::to_string(w.devid) : "") + "_impl0",
                         std::string("a calibrated history entry for footprint ") + fps + " (size " +
                             std::to_string(size) + ", tile " + std::to_string(cfg_.b) + ") used by worker " + w.name);
      }
      w.length[k] = e->mean_us * 1e-6;
      w.dev[k] = e->dev_us * 1e-6;
    }
  }
}

} // namespace numasim
