// The StarPU runtime model: workers, memory nodes and replicas, schedulers,
// StarPU-MPI, all driven by a small number of S4U actors (one per worker, one
// progression thread per node, a pool of data movers) — never one actor per task.
#pragma once
#include "config.hpp"
#include "lu_dag.hpp"
#include "numa_effects.hpp"
#include "perfmodel.hpp"
#include "platform.hpp"

#include <deque>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace numasim {

constexpr int kMaxMemNodes = 16; // per machine node: RAM nodes + GPU memories (bits of MemMask)
using MemMask = uint16_t;         // a set of memory nodes of one machine node (local indices)

// A copy waiting for space in a GPU memory. StarPU's request lists are priority lists (the
// requesting task's priority; data_request.c _starpu_data_request_prio_list_pop_front_highest):
// highest priority first, then request order.
struct AllocKey {
  int32_t prio;
  uint64_t seq;
  uint32_t tid;
  bool operator<(const AllocKey& o) const { return prio != o.prio ? prio > o.prio : seq < o.seq; }
};

struct MemNode {
  int rank;
  int local;  // index within its rank
  bool gpu;
  int numa;   // NUMA node of the RAM, or the GPU's NUMA node
  sg4::Host* host;
  double capacity; // bytes usable for tiles (GPU memory); RAM is not limited
  double used = 0;         // bytes of allocated replicas (valid, being fetched, or being written back)
  double reserved = 0;     // bytes of the allocations in `waiting`
  double pending_free = 0; // bytes of evicted dirty replicas whose write-back is under way
  double peak_used = 0;
  int inflight = 0;        // copies into this memory under way (their replicas become evictable)
  int dirty = 0;           // replicas here that are the only valid copy, no write-back submitted
  // GPU replicas allocated here, least recently used first: an intrusive doubly-linked list
  // through Simulation::lru_prev_/lru_next_ (per slot). Entries only ever enter at the most
  // recent end, so the order is the one of a set sorted by a use counter (StarPU's mc_list with
  // _starpu_memchunk_recently_used), with O(1) moves instead of a tree's erase + insert.
  static constexpr size_t kNoSlot = SIZE_MAX;
  size_t lru_head = kNoSlot, lru_tail = kNoSlot, lru_size = 0;
  std::set<AllocKey> waiting;  // task fetches into this memory waiting for space
  std::set<AllocKey> prefetch; // prefetches waiting for space, served after the fetches
  bool admitting = false;       // admit() is running (no re-entry from drop_replica)
};

struct QueueKey {
  int32_t prio;
  uint64_t seq;
  uint32_t task;
  bool operator<(const QueueKey& o) const { return prio != o.prio ? prio > o.prio : seq < o.seq; }
};

struct Worker {
  int id, rank;
  bool cuda;
  int core, numa, gpu;
  int mem;       // local memory node
  int devid;     // perf-model device id (CUDA device, or 0 for CPUs)
  sg4::Host* host;
  std::string name; // e.g. chifflet-1.cpu2 / chifflet-1.gpu0
  double length[kNumKinds] = {0, 0, 0, 0}; // perf-model mean (s), <0: cannot run
  double dev[kNumKinds] = {0, 0, 0, 0};
  // dmda's per-worker expectations (deque_modeling_policy_data_aware.c)
  double exp_start = 0, exp_len = 0;
  std::set<QueueKey> queue;
  // Model lengths of the queued tasks by priority rank (Fenwick tree, integer picoseconds so
  // that sums do not depend on the order of insertions): dmdas' work ahead of a priority.
  std::vector<int64_t> queued_ps;
  std::deque<uint32_t> inflight; // popped tasks (more than one with STARPU_CUDA_PIPELINE)
  double task_overhead = 0;       // CUDA worker: host time per task (s), from the platform
  double last_end = -1;           // end of the worker's last task (back-to-back detection)
  sg4::ActorPtr actor;
  bool suspended = false;
  uint64_t executed = 0;
};

struct Transfer {
  int rank;          // rank of the handle (local) or of the destination (MPI)
  uint32_t handle;   // handle index
  int gsrc, gdst;    // global memory nodes
  bool mpi = false;  // network message of reception `recv`
  uint32_t recv = 0;
  uint32_t version = 0;
  double start = 0;
  int path = -1; // links actually crossed (NumaEffects::move)
  uint8_t queued = 0; // waiting for space in the destination: 1 fetch queue, 2 prefetch queue
  int nwait = 0;      // earlier copies it must wait for (core/simgrid.c transfers_are_sequential)
  bool prefetch = false;
  int32_t prio = 0;     // priority of the requesting task (orders the allocation queues)
  uint64_t qseq = 0;    // order of entry into an allocation queue
  std::vector<uint32_t> waiters; // task ids, or kRecvFlag|reception id
};

struct Summary {
  double makespan = 0;
  uint64_t tasks = 0;
  uint64_t by_kind[kNumKinds] = {0, 0, 0, 0};
  uint64_t on_cpu = 0, on_cuda = 0;
  uint64_t transfers = 0, mpi_messages = 0, evictions = 0, overcommits = 0;
  uint64_t eviction_writebacks = 0; // evictions of a sole (dirty) copy, written back to RAM first
  std::map<std::string, double> bytes_by_link_class;
  std::map<std::string, double> numa; // NumaEffects::summary (remote reads, migrations, ...)
  size_t workers = 0, cpu_workers = 0, cuda_workers = 0;
};

class Simulation {
public:
  // Loads the platform into `engine` and the models; throws InputError on bad input.
  Simulation(sg4::Engine& engine, RunConfig cfg);
  Summary run();

  // Introspection for tests and traces.
  const std::vector<MachineNode>& nodes() const { return nodes_; }
  const std::vector<Worker>& workers() const { return workers_; }
  const std::vector<MemNode>& memnodes() const { return mem_; }
  const NodeThreads& threads(int rank) const { return threads_[rank]; }
  const Dag& dag() const { return dag_; }
  int global_mem(int rank, int local) const { return rank_mem_[rank][local]; }
  int home_mem(int rank) const { return home_[rank]; } // local index of the main RAM node
  MemMask valid_mask(int rank, uint32_t tile) const { return hstate_[handle(rank, tile)].valid; }
  double estimate(int gsrc, int gdst, double bytes);
  struct TransferRecord {
    double start, end, bytes;
    int gsrc, gdst;
    int path; // NumaEffects path id (links crossed)
  };
  const std::vector<TransferRecord>& transfer_log() const { return transfer_log_; }
  std::vector<std::string> route_links(int gsrc, int gdst);

  // Scheduling decision of dmda for a ready task (exposed for unit tests).
  int dmda_choose(uint32_t task, double* best_fitness = nullptr);

  NumaEffects& numa() { return *numa_; }

  // Task trace and transfer log as CSV; the path versions go through write_output
  // (output.hpp): checked, temporary file renamed in, OutputError on failure.
  void write_trace(std::ostream& out) const;
  void write_transfers(std::ostream& out) const;
  // One line naming how many tasks never ran and the first `max_items` blocked tasks, each with
  // the replicas (tile, memory node) it waits for and why (the watchdog's message).
  std::string stall_report(size_t max_items) const;

  void write_trace(const std::string& path) const;
  void write_transfers(const std::string& path) const;

private:
  friend class NumaEffects; // the NUMA mechanisms read and update pages, paths and link classes
  static constexpr uint32_t kRecvFlag = 0x80000000u;
  struct HandleState {
    uint32_t version = 0;
    MemMask valid = 0;    // memory nodes (local indices) holding the current version
    MemMask fetching = 0; // memory nodes with a transfer under way
  };
  struct Route {
    bool known = false;
    double latency = 0, bandwidth = 0;
    std::vector<int> classes;
    std::vector<std::string> links;
  };
  struct MpiThread {
    std::deque<std::pair<bool, uint32_t>> requests; // (is_send, reception)
    sg4::ActorPtr actor;
    bool suspended = false;
  };

  sg4::Engine& engine_;
  RunConfig cfg_;
  std::vector<MachineNode> nodes_;
  std::vector<NodeThreads> threads_;
  std::vector<MemNode> mem_;
  std::vector<std::vector<int>> rank_mem_; // local -> global memory node
  std::vector<int> home_;                  // per rank: local index of the main RAM node
  std::vector<int> rank_cuda_devices_;     // per rank: GPUs driven by a CUDA worker (StarPU's ndevices)
  std::vector<std::vector<int>> rank_workers_;
  std::vector<Worker> workers_;
  Dag dag_;
  double tile_bytes_ = 0;
  size_t ntiles_ = 0;
  std::vector<HandleState> hstate_;
  std::vector<int32_t> fetch_id_; // (handle, local mem) -> transfer in flight
  std::vector<uint16_t> pins_;    // (handle, local mem) -> tasks holding the replica
  std::vector<size_t> lru_prev_, lru_next_; // (handle, local mem) -> neighbours in MemNode's LRU list
  std::vector<uint8_t> in_lru_;              // (handle, local mem) -> in its MemNode's LRU list
  bool lru_erase(MemNode& m, size_t s);      // false if s was not in the list
  void lru_push(MemNode& m, size_t s);       // at the most recently used end (s not in the list)
  size_t lru_first(const MemNode& m) const { return m.lru_head; }
  size_t lru_after(size_t s) const { return lru_next_[s]; }
  std::vector<uint8_t> evicting_; // (handle, local mem) -> evicted, its write-back to RAM under way
  uint64_t pending_evictions_ = 0; // slots with evicting_ set
  std::vector<uint16_t> prefetch_tasks_; // (handle, local mem) -> queued tasks it was prefetched for
  std::vector<uint8_t> dirty_;           // (handle, local mem) -> counted in MemNode::dirty
  uint64_t pending_dirty_ = 0;           // slots with dirty_ set
  uint64_t seq_ = 0;
  uint64_t alloc_seq_ = 0; // order of entry into the GPU allocation queues
  std::vector<Transfer> transfers_;
  std::vector<uint32_t> free_transfers_;
  uint32_t new_transfer();
  // One runner per (source, destination) memory node pair: transfers of a pair are sequential,
  // as in StarPU-SimGrid (core/simgrid.c transfer_queue/transfer_execute: one CUDA stream per pair).
  struct Runner {
    std::deque<uint32_t> queue;
    int pending = 0; // copies started on this pair and not finished (StarPU's data_requests_npending)
    sg4::ActorPtr actor;
    bool suspended = false;
  };
  // Per rank: local copies into or out of a GPU, started and not finished, in start order.
  std::vector<std::vector<uint32_t>> gpu_copies_;
  bool sequential(const Transfer& later, const Transfer& earlier) const;
  std::vector<int32_t> runner_of_pair_; // dense [gsrc * nmem + gdst] -> runner, -1 if none yet
  std::vector<Runner> runners_;
  std::vector<MpiThread> mpi_;
  // Per reception: not triggered yet, triggered (the send waits for the RAM copy or the MPI
  // thread), sent, received (for the stall report).
  static constexpr uint8_t kRecvTriggered = 1, kRecvSent = 2, kRecvDone = 3;
  std::vector<uint8_t> recv_state_;
  std::vector<std::set<QueueKey>> central_; // eager: one queue per rank
  std::vector<Route> routes_;               // dense [gsrc * nmem + gdst]
  std::vector<std::string> class_names_;
  std::vector<double> class_bytes_;
  std::mt19937_64 rng_;
  std::normal_distribution<double> normal_{0.0, 1.0};
  uint64_t done_tasks_ = 0;
  double last_task_end_ = 0;
  bool finished_ = false;
  Summary sum_;
  std::vector<TransferRecord> transfer_log_;
  bool log_transfers_ = false;
  std::unique_ptr<NumaEffects> numa_;

  uint32_t handle(int rank, uint32_t tile) const { return static_cast<uint32_t>(rank * ntiles_ + tile); }
  int mem_stride_ = 1; // most memory nodes of a machine node: per-(handle, memory node) arrays' stride
  size_t slot(uint32_t h, int local) const { return static_cast<size_t>(h) * mem_stride_ + local; }
  Route& route(int gsrc, int gdst);
  void setup_nodes();
  void load_models();

  // scheduling
  void push_ready(uint32_t task, int releasing_worker);
  void push_to_worker(Worker& w, uint32_t task, double predicted_length, double predicted_transfer);
  int32_t pop(Worker& w);
  double data_penalty(const Task& t, const Worker& w);
  double queued_before(const Worker& w, int32_t prio) const;
  void queue_add(Worker& w, uint32_t task, int sign); // keeps Worker::queued_ps in step with queue
  std::vector<int32_t> prio_levels_;  // distinct task priorities, decreasing
  std::vector<uint32_t> prio_rank_;   // per task: index of its priority in prio_levels_
  void wake(Worker& w);
  void wake_idle(int rank, const Task& t);

  // data
  int best_source(int rank, uint32_t h, int dst_local);
  bool request(int rank, uint32_t h, int dst_local, uint32_t waiter, bool prefetch = false,
               int32_t prio = 0); // true if valid
  static constexpr int kMaxPendingFetches = 5;    // datawizard/data_request.h MAX_PENDING_REQUESTS_PER_NODE
  static constexpr int kMaxPendingPrefetches = 2; // data_request.h MAX_PENDING_PREFETCH_REQUESTS_PER_NODE
  int pending_copies(int gsrc, int gdst) const;    // copies started on the pair, not finished
  void admit(uint32_t tid);        // allocates the destination replica (maybe later), starts the copy
  void serve_waiting(MemNode& m);  // allocates and starts the waiting copies that fit
  void make_room(MemNode& m, double need, bool for_prefetch); // evicts LRU replicas until `need` fits
  void finish_eviction(int rank, uint32_t h);
  void set_clean(int rank, uint32_t h, int local);
  void tidy(MemNode& m); // writes dirty replicas back ahead of need (memalloc.c starpu_memchunk_tidy)
  void drop_replica(int rank, uint32_t h, int local);
  void touch(int rank, uint32_t h, int local);
  void start_transfer(uint32_t tid);
  void transfer_done(uint32_t tid);
  void account(int gsrc, int gdst, double bytes, double start, int path);
  void satisfy(uint32_t waiter);

  // execution
  void worker_loop(int wid);
  void prepare(Worker& w, uint32_t task);
  void execute(Worker& w, uint32_t task);
  double cuda_occupancy(const Worker& w, double kernel) const;
  void release(uint32_t node_id, int releasing_worker);
  void trigger_reception(uint32_t r);
  void mpi_loop(int rank);
  void mpi_enqueue(int rank, bool send, uint32_t r);
  void runner_loop(int rid);
  void finish_all();
  std::string tile_name(uint32_t tile) const;
  std::string task_name(uint32_t task) const;
  std::string operand_state(int rank, uint32_t tile, int local) const;
  double sample_duration(const Worker& w, TaskKind k);
};

} // namespace numasim
