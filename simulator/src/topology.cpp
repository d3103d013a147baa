#include "topology.hpp"
#include "error.hpp"
#include "perfmodel.hpp"

#include <simgrid/s4u/Link.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

XBT_LOG_NEW_DEFAULT_SUBCATEGORY(numasim_topology, numasim,
                                "numasim workers, memory nodes and thread binding");

namespace numasim {

std::vector<int> expand_cpuids(const std::vector<CpuIdRange>& list, int nhwpus) {
  // topology.c _starpu_initialize_workers_bindid: workers_bindid[i] = val % nhwpus, a range a-b
  // adds a..b, an open range a- runs to nhwpus - 1; the list is not repeated to the number of
  // workers (workers_nbindid = number of entries): _starpu_get_next_bindid starts over instead.
  std::vector<int> out;
  for (const CpuIdRange& r : list) {
    const long last = r.last < 0 ? std::max<long>(r.first, nhwpus - 1) : r.last;
    for (long v = r.first; v <= last; v++)
      out.push_back(static_cast<int>(v % nhwpus));
  }
  return out;
}

namespace {
// StarPU's list of bind ids (logical PUs) and which are taken by an active thread
// (topology.c _starpu_get_next_bindid, every thread here being STARPU_THREAD_ACTIVE).
class BindIds {
public:
  BindIds(const MachineNode& node, const StarpuEnv& env) : tpc_(std::max(1, node.threads_per_core)) {
    const int nhwpus = static_cast<int>(node.cpus.size()) * tpc_;
    if (!env.workers_cpuid.empty())
      ids_ = expand_cpuids(env.workers_cpuid, nhwpus);
    else // one PU per core (STARPU_NTHREADS_PER_CORE = 1): the first PU of each core
      for (const auto& c : node.cpus)
        ids_.push_back(c.index * tpc_);
    bound_.assign(ids_.size(), false);
  }

  // The next PU: the preferred core's first PU if it is in the list and free, else the next free
  // entry from the last one used; when every entry is taken, StarPU starts over (overloading).
  int next(int preferred_core = -1) {
    if (preferred_core >= 0) {
      const int want = preferred_core * tpc_;
      for (size_t i = 0; i < ids_.size(); i++)
        if (ids_[i] == want) {
          if (!bound_[i]) {
            bound_[i] = true;
            return want;
          }
          break;
        }
    }
    size_t i = current_;
    while (i < ids_.size() && bound_[i])
      i++;
    if (i == ids_.size()) { // "Finished binding on all cpus, restart from start"
      bound_.assign(ids_.size(), false);
      i = 0;
    }
    bound_[i] = true;
    current_ = i;
    return ids_[i];
  }
  int core_of(int pu) const { return pu / tpc_; }

private:
  const int tpc_;
  std::vector<int> ids_;
  std::vector<bool> bound_;
  size_t current_ = 0;
};

// ncpus as _starpu_init_cpu_config (src/drivers/cpu/driver_cpu.c) and
// _starpu_topology_check_ndevices (src/core/topology.c) compute it: by default the cores not
// taken by CUDA drivers minus reserve_ncpus; an explicit STARPU_NCPU is not capped by the cores
// (overflow allowed) but reserve_ncpus is subtracted from it too.
int cpu_worker_count(const StarpuEnv& env, int ncores, int ncuda, int reserve) {
  if (env.ncpu == 0)
    return 0;
  int n = env.ncpu < 0 ? std::max(0, ncores - ncuda) : env.ncpu;
  if (reserve > 0)
    n = n < reserve ? 0 : n - reserve;
  return n;
}
} // namespace

NodeThreads place_threads(const MachineNode& node, const StarpuEnv& env) {
  NodeThreads t;
  auto numa_of = [&](int core) {
    for (const auto& c : node.cpus)
      if (c.index == core)
        return c.numa;
    return -1;
  };
  auto checked = [&](int core, const char* var) {
    if (numa_of(core) < 0)
      throw InputError("env", var,
                       "a CPU id of node " + node.name + " (0.." + std::to_string(node.cpus.back().index) +
                           "), got " + std::to_string(core));
    return core;
  };
  BindIds ids(node, env);
  const int tpc = std::max(1, node.threads_per_core);
  // reserve_ncpus: STARPU_RESERVE_NCPU, else 1 for StarPU-MPI's progression thread when neither
  // STARPU_MPI_THREAD_CPUID nor STARPU_NCPU is set (mpi/src/starpu_mpi_init.c; an explicit
  // STARPU_RESERVE_NCPU replaces it, src/core/workers.c _starpu_conf_check_environment), plus 1
  // for a bound main thread (workers.c).
  int reserve =
      env.reserve_ncpu >= 0 ? env.reserve_ncpu : (env.mpi_thread_cpuid < 0 && env.ncpu < 0 ? 1 : -1);
  // Main thread (topology.c _starpu_init_machine_config): STARPU_MAIN_THREAD_BIND takes a bind
  // id, the requested core's if given and free; STARPU_MAIN_THREAD_CPUID alone binds it without
  // taking one (workers may share its PU).
  if (env.main_thread_bind) {
    reserve = reserve < 0 ? 1 : reserve + 1;
    int got = ids.next(env.main_thread_cpuid >= 0 ? env.main_thread_cpuid / tpc : -1);
    t.main_core = ids.core_of(env.main_thread_cpuid >= 0 ? env.main_thread_cpuid : got);
  } else if (env.main_thread_cpuid >= 0)
    t.main_core = env.main_thread_cpuid / tpc;
  if (t.main_core >= 0)
    checked(t.main_core, "STARPU_MAIN_THREAD_CPUID");
  // STARPU_MPI_THREAD_CPUID takes its bind id now, before the workers (topology.c).
  if (env.mpi_thread_cpuid >= 0)
    ids.next(checked(env.mpi_thread_cpuid / tpc, "STARPU_MPI_THREAD_CPUID"));
  // CUDA workers: STARPU_NCUDA (-1: all), devices from STARPU_WORKERS_CUDAID (driver_cuda.c), one
  // driver thread per device bound to the next bind id.
  int ngpu = static_cast<int>(node.gpus.size());
  int ncuda = env.ncuda < 0 ? ngpu : std::min(env.ncuda, ngpu); // StarPU warns and caps
  for (int i = 0; i < ncuda; i++) {
    int dev = env.workers_cudaid.empty() ? i : env.workers_cudaid[i % env.workers_cudaid.size()];
    if (std::none_of(node.gpus.begin(), node.gpus.end(), [&](const GpuInfo& g) { return g.index == dev; }))
      throw InputError("env", "STARPU_WORKERS_CUDAID",
                       "GPU ids of node " + node.name + ", got " + std::to_string(dev));
    int core = checked(ids.core_of(ids.next()), "STARPU_WORKERS_CPUID");
    t.workers.push_back({true, core, numa_of(core), dev});
  }
  const int ncpu = cpu_worker_count(env, static_cast<int>(node.cpus.size()), ncuda, reserve);
  for (int i = 0; i < ncpu; i++) {
    int core = checked(ids.core_of(ids.next()), "STARPU_WORKERS_CPUID");
    t.workers.push_back({false, core, numa_of(core), -1});
  }
  // An unbound main thread first-touches on NUMA 0 (the study's observation: "mostly NUMA 0").
  t.main_numa = t.main_core >= 0 ? numa_of(t.main_core) : 0;
  // MPI progression thread: STARPU_MPI_THREAD_CPUID, else the next bind id after the workers
  // (mpi/src/mpi/starpu_mpi_mpi.c _starpu_mpi_progress_thread_func, starpu_get_next_bindid; the
  // thread itself: mpi/starpu_mpi.cpp).
  t.mpi_core = env.mpi_thread_cpuid >= 0 ? env.mpi_thread_cpuid / tpc
                                         : checked(ids.core_of(ids.next()), "STARPU_WORKERS_CPUID");
  t.mpi_numa = numa_of(t.mpi_core);
  return t;
}

// Memory StarPU lets itself allocate on a GPU without STARPU_LIMIT_CUDA_MEM: 90% of the
// device memory, in whole MiB (drivers/cuda/driver_cuda.c _starpu_cuda_limit_gpu_mem_if_needed,
// FREE_MARGIN 0.9; StarPU-SimGrid takes the device memory from the host's memsize property).
static double usable_gpu_memory(double bytes) {
  const double mib = 1024.0 * 1024.0;
  return std::floor(std::floor(bytes / mib) * 0.9) * mib;
}

Topology::Topology(const RunConfig& cfg, std::vector<MachineNode> nodes)
    : cfg_(cfg), nodes_(std::move(nodes)) {
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

void Topology::setup_node(int r) {
  const MachineNode& n = nodes_[r];
  if (!cfg_.perfmodels.count(n.machine))
    throw InputError(cfg_.file, "perfmodels",
                     "an entry for machine type '" + n.machine + "' (node " + n.name + ")");
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

// The size StarPU's memory manager gives a RAM node of `memory` bytes: core/topology.c
// _starpu_cpu_get_global_mem_size, `global_mem *= 0.9` on a size_t ("Don't eat all memory for
// ourself").
static double starpu_global_size(double memory) {
  return std::floor(0.9 * memory);
}

// Memory nodes (src/core/topology.c): with STARPU_USE_NUMA=1 one RAM node per NUMA node, else one
// RAM node whose pages the main thread first-touched (its NUMA node); then one per driven GPU.
// Returns GPU index -> local memory node.
std::map<int, int> Topology::add_memory_nodes(int r, const StarpuEnv& env) {
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
      mem_[rank_mem_[r][add_mem(false, ram.numa, ram.host, 0)]].global_size = starpu_global_size(ram.memory);
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
    // numa_enabled off: hwloc's root object total_memory, the sum of the NUMA nodes' (topology.c)
    double total = 0;
    for (const auto& any : n.rams)
      total += any.memory;
    mem_[rank_mem_[r][home_[r]]].global_size = starpu_global_size(total);
  }
  std::map<int, int> gpu_mem;
  for (const auto& wp : th.workers)
    if (wp.cuda)
      for (const auto& g : n.gpus)
        if (g.index == wp.gpu && !gpu_mem.count(g.index)) {
          gpu_mem[g.index] = add_mem(true, g.numa, g.host, usable_gpu_memory(g.memory));
          mem_.back().malloc_s = g.malloc_s;
          mem_.back().free_s = g.free_s;
        }
  return gpu_mem;
}

void Topology::add_workers(int r, const StarpuEnv& env, const std::map<int, int>& gpu_mem) {
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
          std::copy(std::begin(g.first_call), std::end(g.first_call), std::begin(w.first_call));
          w.task_gap = g.task_gap;
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
void Topology::load_models() {
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
        it = cache
                 .emplace(key, PerfModel::load(cfg_.perfmodels.at(machine), cfg_.symbols[k],
                                               cfg_.perfmodel_hosts.at(machine)))
                 .first;
      const PerfModel& m = it->second;
      uint32_t fp = matrix_task_footprint(nbuf[k], cfg_.b, cfg_.b);
      uint64_t size = static_cast<uint64_t>(nbuf[k]) * cfg_.b * cfg_.b * sizeof(double);
      const HistoryEntry* e = m.lookup(w.cuda ? 1 : 0, w.devid, 1, fp, size);
      if (!e) {
        char fps[16];
        std::snprintf(fps, sizeof fps, "%08x", fp);
        throw InputError(
            m.path, std::string(w.cuda ? "cuda" : "cpu") + (w.cuda ? std::to_string(w.devid) : "") + "_impl0",
            std::string("a calibrated history entry for footprint ") + fps + " (size " +
                std::to_string(size) + ", tile " + std::to_string(cfg_.b) + ") used by worker " + w.name);
      }
      w.length[k] = e->mean_us * 1e-6;
      w.dev[k] = e->dev_us * 1e-6;
    }
  }
}

const Topology::CopyThread& Topology::copy_thread(int rank, int numa) const {
  // A copy between two RAM nodes is a memcpy by one thread: StarPU's (drivers/cpu/driver_cpu.c
  // _starpu_cpu_copy_data, run by a worker of the destination node: datawizard/coherency.c
  // link_supports_direct_transfers; its bus calibration times the same memcpy,
  // core/perfmodel/perfmodel_bus.c measure_bandwidth_latency_between_numa) and the kernel's page
  // migration (mm/migrate.c, in the faulting thread). A core's link is the first of its routes.
  auto known = copy_threads_.find({rank, numa});
  if (known != copy_threads_.end())
    return known->second; // a run asks once per copy
  CopyThread ct;
  const Worker* core = nullptr;
  for (int wid : rank_workers_[rank]) {
    const Worker& w = workers_[wid];
    if (!w.cuda && (!core || (w.numa == numa && core->numa != numa)))
      core = &w;
  }
  if (core) {
    ct.core = core->host;
    std::vector<sg4::Link*> links;
    double latency = 0;
    ct.core->route_to(mem(global_mem(rank, home(rank))).host, links, &latency);
    if (!links.empty())
      ct.rate = links.front()->get_bandwidth() / 2;
  }
  return copy_threads_[{rank, numa}] = ct;
}

} // namespace numasim
