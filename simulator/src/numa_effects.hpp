// NUMA mechanisms of numasim: where pages live, the memory traffic of CPU kernels that read
// remote pages, the paths transfers take through the threads that drive them (GPU drivers,
// the StarPU-MPI progression thread) and Linux's automatic NUMA balancing.
//
// Nothing here is an effect table: every cost is a SimGrid activity on the platform's links
// (memory buses, inter-socket link, PCIe, NIC), sized by parameters of the machine description
// (`numa:` section, passed as `numa_*` zone properties, docs/interfaces.md §2).
#pragma once
#include "config.hpp"
#include "memory_model.hpp"
#include "platform.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace numasim {

struct Dag;
class DataWizard;
class LinkClasses;
class Topology;
struct Progress;
struct Transfer;
struct Worker;

// Parameters of one machine type (zone properties `numa_<key>`; defaults documented per field).
struct NumaParams {
  // Depth of the k-blocking of the CPU BLAS (Goto's algorithm): the written tile is read and
  // written once per pass over k, ceil(b / kc) passes. 0 (property absent): compulsory traffic
  // only (each operand read once, the written one also written once).
  double gemm_block_k = 0;
  // Bytes a GPU driver thread sends to its GPU per operation (kernel launch, copy submission).
  double control_message_bytes = 64;
  // Linux automatic NUMA balancing (kernel/sched/fair.c, mm/migrate.c; defaults of
  // Documentation/admin-guide/sysctl/kernel.rst and mm/migrate.c of Linux 4.19).
  double page_bytes = 4096;
  double hinting_fault_cost_s = 0;                        // no cost unless the machine description gives one
  double balancing_scan_delay_s = 1.0;                    // numa_balancing_scan_delay_ms = 1000
  double balancing_scan_period_s = 1.0;                   // numa_balancing_scan_period_min_ms = 1000
  double balancing_scan_size_bytes = 256.0 * 1024 * 1024; // numa_balancing_scan_size_mb = 256
  double migrate_ratelimit_bytes = 128.0 * 1024 * 1024;   // ratelimit_pages = 128 MB ...
  double migrate_ratelimit_window_s = 0.1;                // ... per 100 ms window, per target node

  static NumaParams from_zone(const sg4::NetZone* zone, const std::string& platform_file);
};

class NumaEffects {
public:
  NumaEffects(const Topology& topo, const DataWizard& data, const Dag& dag, const RunConfig& cfg,
              const Progress& progress, LinkClasses& classes)
      : topo_(topo), data_(data), dag_(dag), cfg_(cfg), progress_(progress), classes_(classes) {}
  void init();         // after the memory nodes, workers and initial replicas exist
  void start_actors(); // balancing scanners (daemons)

  // Runs one task on worker `w` for `duration` of computation, adding the GPU launch path or the
  // CPU kernel's remote memory traffic and NUMA hinting faults; returns the task's start.
  double run_task(const Worker& w, uint32_t task, double duration);
  // How the driver of a CUDA worker waits for its kernel (begun at `start`, `duration` of work)
  // to end: Simulation::gpu_kernel, which progresses requests meanwhile. Unset: it sleeps.
  void set_gpu_kernel(std::function<void(const Worker&, double start, double duration)> wait) {
    gpu_kernel_ = std::move(wait);
  }
  // A duration drawn for local data, given the spread of remote pages: the log-deviation from
  // the model mean scaled by 1 + (ratio - 1) * remote share of the bytes, the mean kept.
  static double respread(double d, double mean, double sd, double ratio, double remote_share);
  // Moves one transfer (blocking, in a runner actor) along the path its threads give it;
  // returns the path id (links crossed) for accounting and the transfer CSV.
  // `thread`: the worker whose thread runs a RAM -> RAM memcpy (DataWizard::run_ram_copy).
  int move(const Transfer& t, const Worker* thread = nullptr);
  // A buffer of handle h was allocated on RAM memory node gdst by `pinner` (cudaHostAlloc, its pages
  // where that thread runs), or bound to the node's NUMA node (pinner nullptr: hwloc_alloc_membind).
  // `main_thread`: the application's thread pinned it (a reception's buffer, StarPU-MPI).
  void allocated(int rank, uint32_t h, int gdst, const Worker* pinner, bool main_thread = false);

  // Introspection (tests, traces, summary).
  int page_numa(int rank, uint32_t tile) const; // NUMA node of the RAM replica's pages, -1: none
  bool pinned(int rank) const { return ranks_[rank].pinned; }
  bool balancing(int rank) const { return ranks_[rank].balancing; }
  const std::vector<std::string>& path_links(int path) const { return paths_[path].links; }
  const std::vector<int>& path_classes(int path) const { return paths_[path].classes; }
  std::vector<std::string> control_links(int gpu_gmem); // driver core -> GPU
  const MemorySystem& memory(int rank) const { return *ranks_[rank].mem; }
  // The trace's per-task columns, recorded only when a trace is asked for (RunConfig::trace).
  double remote_bytes(uint32_t task) const;
  std::string operand_pages(uint32_t task) const; // e.g. "0 1 1", "gpu gpu gpu"
  // Who first allocated the RAM replica each operand of a CPU task read, and when: per operand
  // `kind:numa:seconds` (kind main, cpu, cuda, copy, mpi; numa: the allocating thread's NUMA node,
  // -1 when no thread is modelled), `?` when unknown; "gpu ..." for a GPU task. With a trace only.
  std::string operand_allocators(uint32_t task) const;
  std::map<std::string, double> summary() const;

private:
  struct RankInfo {
    NumaParams p;
    std::unique_ptr<MemorySystem> mem;
    double stall[kNumKinds] = {0, 0, 0, 0};  // stall fraction per task kind
    double spread[kNumKinds] = {1, 1, 1, 1}; // remote / local spread of the durations per task kind
    bool use_numa = false, pinned = false, balancing = false;
    int main_numa = 0, mpi_numa = 0;
    sg4::Host* mpi_host = nullptr;
    std::vector<sg4::Host*> ram; // by NUMA node
    size_t scan_cursor = 0;
    std::vector<double> window_end, window_bytes; // migration rate limit, per target node
  };
  // One leg of a copy's path (see run_legs).
  struct PathLeg {
    double latency = 0, rate = 0; // what the leg's route gives one flow alone: s, B/s
    bool narrowest = false;       // its rate is the pipeline's (within 0.1 %): always a flow
    std::vector<int> links;       // indices in link_loads_
  };
  struct Path {
    std::vector<std::string> links;
    std::vector<int> classes; // indices in LinkClasses
    // The copy's stream (stream_demand): its pipeline's rate, the narrowest leg's route alone.
    double stream_bw = 0;
    std::vector<PathLeg> legs;
    // The links the copy crosses, each once (see copies_load); its bottlenecks are the links of
    // its narrowest legs whose bandwidth is the pipeline's rate (10 GbE up at the sender, down at
    // the receiver).
    struct Crossing {
      int link;       // index in link_loads_
      int times;      // how many times the copy crosses it (a message enters and leaves the MPI core)
      int bottleneck; // the copy's bottleneck nearest to it along the path (index in link_loads_)
    };
    std::vector<Crossing> crossings;
  };
  // The running copies that cross a link and share the same bottleneck (see copies_load).
  struct CopyGroup {
    int bottleneck = -1;
    double rate = 0;               // sum of times * pipeline rate
    std::array<int, 4> by_times{}; // copies crossing the link [min(times, 3)] times ([0] unused)
  };
  // A link that copies cross: the running copies on it, by bottleneck, and the machine node whose
  // kernels' memory traffic may also cross it.
  struct LinkLoad {
    const sg4::Link* link = nullptr;
    double bandwidth = 0;
    std::vector<CopyGroup> groups;
    MemorySystem* kernels = nullptr;
    MemorySystem::KernelTerms kernel_terms; // what of `kernels`' traffic crosses it (kernel_load)
    int controller = -1;                    // the NUMA node of `kernels` whose memory controller this link is
  };
  static constexpr size_t kMaxLegs = 5; // an MPI message: RAM, MPI core, NIC, NIC, MPI core, RAM
  struct Leg {
    sg4::Host* src;
    sg4::Host* dst;
    bool operator==(const Leg&) const = default;
  };
  // A copy's legs in order: a fixed array (no allocation per copy), the key of its interned path.
  struct Legs {
    std::array<Leg, kMaxLegs> at{};
    size_t n = 0;
    void add(sg4::Host* a, sg4::Host* b);
    size_t size() const { return n; }
    bool empty() const { return n == 0; }
    const Leg& operator[](size_t i) const { return at[i]; }
    const Leg* begin() const { return at.data(); }
    const Leg* end() const { return at.data() + n; }
    bool operator==(const Legs& o) const { return n == o.n && std::equal(begin(), end(), o.begin()); }
  };
  struct LegsHash {
    size_t operator()(const Legs& l) const;
  };

  const Topology& topo_;
  const DataWizard& data_;
  const Dag& dag_;
  const RunConfig& cfg_;
  const Progress& progress_;
  LinkClasses& classes_; // the link classes of the paths (interned on first use)
  std::vector<RankInfo> ranks_;
  std::vector<int8_t> page_; // per handle: NUMA node of the RAM replica's pages (-1: not allocated)
  // Per (handle, memory node), with STARPU_USE_NUMA and pinned memory: NUMA node of that RAM
  // replica's pages when not its memory node's (-1: the node's own, hwloc-bound).
  std::vector<int8_t> slot_page_;
  std::map<const sg4::Host*, double> thread_rate_; // a thread's core -> its memcpy rate
  std::vector<uint8_t> marked_;                    // per handle: pages protected by the last balancing scan
  std::vector<int8_t> last_fault_; // per handle: NUMA node of the last hinting fault (two-pass filter)
  std::function<void(const Worker&, double, double)> gpu_kernel_; // set_gpu_kernel
  std::vector<float> remote_bytes_;                               // per task, with a trace only
  std::vector<uint16_t> op_pages_; // per task, with a trace only: 4 bits per operand (NUMA node, 15: GPU)
  // The first allocation of a RAM replica (with a trace only): the allocating thread's kind and
  // NUMA node, and when. Per (handle, memory node) in slot_alloc_, per task operand in op_alloc_.
  enum class AllocKind : int8_t { none, main, cpu, cuda, copy, mpi };
  struct FirstAlloc {
    AllocKind kind = AllocKind::none;
    int8_t numa = -1;
    float at = 0;
  };
  std::vector<FirstAlloc> slot_alloc_;
  std::vector<std::array<FirstAlloc, 4>> op_alloc_;
  void record_alloc(uint32_t h, int local, AllocKind kind, int numa);
  std::vector<double> last_end_;              // per worker: end of its last task (GPU launch hiding)
  std::vector<sg4::Host*> driver_of_gpu_mem_; // global GPU memory node -> its driver's core host (or null)
  // control_delay of a GPU's copy submissions (per global GPU memory node) and of a CUDA worker's
  // launches (per worker), on first use: both are a route's fixed latency and bandwidth (NaN: not yet).
  std::vector<double> copy_control_delay_, launch_control_delay_;
  std::unordered_map<Legs, int, LegsHash> path_ids_;
  std::vector<Path> paths_;
  std::map<std::pair<const sg4::Host*, const sg4::Host*>, std::pair<double, double>> latbw_;
  std::vector<LinkLoad> link_loads_;
  std::map<const sg4::Link*, int> link_ids_;
  double tcp_gamma_ = 0; // SimGrid's network/TCP-gamma (B): a flow's rate is at most gamma / (2 latency)
  std::vector<std::pair<sg4::Host*, sg4::Host*>>
      split_; // [src rank * nranks + dst rank]: NICs, see network_split
  std::vector<uint8_t> split_known_;
  double remote_total_ = 0, migrated_bytes_ = 0, fault_time_ = 0, stall_time_ = 0, kernel_bytes_ = 0;
  uint64_t migrations_ = 0, faults_ = 0, launch_waits_ = 0, remote_tasks_ = 0, kernel_flows_ = 0,
           spread_legs_ = 0;
  uint64_t dma_split_ = 0;        // DMA copies started as several flows (MemorySystem::dma_flows)
  uint64_t dma_window_bound_ = 0; // DMA copies whose credit window was below their route's rate

  sg4::Host* ram_host(int rank, uint32_t h, int gmem) const;
  int operand_numa(const Worker& w, uint32_t h) const;
  int slot_numa(int rank, uint32_t h, int local) const; // NUMA node of a use_numa RAM replica
  sg4::Host* thread_core(const Worker& w) const;        // the core a worker's thread runs on
  int intern(const Legs& legs, double cpu_copy_rate = std::numeric_limits<double>::infinity());
  double control_delay(int rank, const sg4::Host* driver, const sg4::Host* gpu);
  int link_id(const sg4::Link* l);
  bool oversubscribed(const PathLeg& leg) const;
  // A host <-> GPU copy's DMA through NUMA node `numa`'s controller (MemorySystem::dma_window_Bps,
  // dma_flows): reading host memory, or writing it (`to_memory`).
  struct Dma {
    const MemorySystem* mem;
    int numa;
    bool to_memory;
  };
  void run_legs(int path, const Legs& legs, double bytes, const Dma* dma = nullptr);
  // One copy along `legs` (counted in the controllers' load while it runs); cpu_copy_rate: the
  // copying thread's rate for a memcpy (RAM -> core -> RAM), infinite for DMA and MPI copies;
  // `dma`: the device's DMA when the copy is one. Returns its interned path.
  int copy(const Legs& legs, double bytes, double cpu_copy_rate, const Dma* dma = nullptr);
  // The copy along interned path `path` is counted on every link it crosses at its pipeline's
  // rate (Path::stream_bw; sign +1 at its start, -1 at its end); the memory controllers among
  // them carry the copies' bounded load (copies_load) in their node's MemorySystem.
  void stream_demand(int path, int sign);
  double copies_load(const LinkLoad& l) const;
  std::pair<double, double> route_latbw(const sg4::Host* a, const sg4::Host* b); // latency, min bw
  std::pair<sg4::Host*, sg4::Host*> network_split(int src_rank, int dst_rank);
  void init_rank(int rank);
  void first_touch(int rank, const std::vector<int>& cpu_numas);
  void run_on_gpu(const Worker& w, double duration);
  void run_on_cpu(const Worker& w, uint32_t task, double duration);
  double kernel_traffic(const Worker& w, uint32_t task, double* by_node);
  void hinting_faults(const Worker& w, uint32_t task);
  void scan_loop(int rank);
};

} // namespace numasim
