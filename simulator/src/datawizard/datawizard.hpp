// StarPU's data management (src/datawizard/) for the tiles of the LU: replicas and their MSI
// coherency (coherency.cpp), GPU memory allocation, LRU eviction and write-backs (memalloc.cpp),
// copy requests and the actors that carry them (data_request.cpp). It owns its state; the runtime
// learns that an operand is valid on a memory node through Hooks::ready, and that an MPI message
// landed through Hooks::delivered.
#pragma once
#include "datawizard/malloc.hpp"
#include "lu_dag.hpp"
#include "perfmodel_bus.hpp"
#include "runtime_events.hpp"
#include "topology.hpp"

#include <deque>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace numasim {

class NumaEffects;

using MemMask = uint16_t; // a set of memory nodes of one machine node (local indices)
// A waiter of a copy: a task id, or kRecvFlag | reception id (an MPI send waiting for a RAM copy).
constexpr uint32_t kRecvFlag = 0x80000000u;

// A copy waiting for space in a GPU memory. StarPU's request lists are priority lists (the
// requesting task's priority; data_request.c _starpu_data_request_prio_list_pop_front_highest):
// highest priority first, then request order.
struct AllocKey {
  int32_t prio;
  uint64_t seq;
  uint32_t tid;
  bool operator<(const AllocKey& o) const { return prio != o.prio ? prio > o.prio : seq < o.seq; }
};

// Allocation state of one memory node (GPU memories; RAM is not limited).
struct MemState {
  double used = 0;         // bytes of allocated replicas (valid, being fetched, or being written back)
  double reserved = 0;     // bytes of the allocations in `waiting`
  double pending_free = 0; // bytes of evicted dirty replicas whose write-back is under way
  double peak_used = 0;
  int inflight = 0; // copies into this memory under way (their replicas become evictable)
  // Bytes of device memory obtained with cudaMalloc and not given back with cudaFree (GPU
  // memories): `chunks - used` are chunks StarPU keeps for reuse (invalidated replicas stay
  // allocated, freed ones wait in the allocation cache: memalloc.c try_to_find_reusable_mc).
  double chunks = 0;
  // The GPU's driver thread is in cudaMalloc/cudaFree until then, and the device's copies wait
  // (CUDA C Programming Guide, "Implicit Synchronization": a device memory allocation between
  // two commands of different streams serialises them; cudaFree synchronises the device).
  double blocked_until = 0;
  // Pinned host allocations of the node hold the device itself: what is in flight is paused
  // (datawizard/malloc.hpp).
  numasim::DeviceHolds holds;
  int dirty = 0; // replicas here that are the only valid copy, no write-back submitted
  // GPU replicas allocated here, least recently used first: an intrusive doubly-linked list
  // through DataWizard::lru_prev_/lru_next_ (per slot). Entries only ever enter at the most
  // recent end, so the order is the one of a set sorted by a use counter (StarPU's mc_list with
  // _starpu_memchunk_recently_used; numasim: datawizard/memalloc.cpp), with O(1) moves instead of a tree's
  // erase + insert.
  // Slots as 32-bit indices (DataWizard's constructor checks they fit): at 200² tiles there are
  // millions of slots, and the links' size is cache misses.
  static constexpr uint32_t kNoSlot = UINT32_MAX;
  uint32_t lru_head = kNoSlot, lru_tail = kNoSlot;
  size_t lru_size = 0;
  // make_room's candidates in the list (DataWizard::eviction_state), [0] for a fetch, [1] for a
  // prefetch: its walks stop after the last one instead of walking a list where nothing can be
  // freed (under GPU memory pressure most calls found nothing: 69 % of a one-node run's time,
  // bench/RESULTS.md).
  uint32_t evictable[2] = {0, 0}; // not in use
  uint32_t reusable[2] = {0, 0};  // not in use and not the only valid copy
  std::set<AllocKey> waiting;     // task fetches into this memory waiting for space
  std::set<AllocKey> prefetch;    // prefetches waiting for space, served after the fetches
  bool admitting = false;         // serve_waiting() is running (no re-entry from drop_replica)
};

// Replicas of one handle (a tile on one rank): StarPU's per-node MSI states.
struct HandleState {
  uint32_t version = 0;
  MemMask valid = 0;    // memory nodes (local indices) holding the current version
  MemMask fetching = 0; // memory nodes with a transfer under way
};

struct Transfer {
  int rank;         // rank of the handle (local) or of the destination (MPI)
  uint32_t handle;  // handle index
  int gsrc, gdst;   // global memory nodes
  bool mpi = false; // network message of reception `recv`
  uint32_t recv = 0;
  uint32_t version = 0;
  double start = 0;
  double submitted = 0; // when the copy was issued (start_transfer); `start`: when its stream took it
  int path = -1;        // links actually crossed (NumaEffects::move)
  uint8_t queued = 0;   // waiting for space in the destination: 1 fetch queue, 2 prefetch queue
  int nwait = 0;        // earlier copies it must wait for (core/simgrid.c transfers_are_sequential)
  bool prefetch = false;
  int32_t prio = 0;              // priority of the requesting task (orders the allocation queues)
  uint64_t qseq = 0;             // order of entry into an allocation queue
  std::vector<uint32_t> waiters; // task ids, or kRecvFlag|reception id
  int thread = -1;               // worker whose thread ran the copy (a memcpy between RAM nodes), -1: none
};

struct TransferRecord {
  double start, end, bytes;
  int gsrc, gdst;
  int path;   // NumaEffects path id (links crossed)
  int thread; // worker whose thread ran the copy, -1: a DMA engine or the MPI thread
};

struct DataCounters {
  uint64_t transfers = 0, mpi_messages = 0, evictions = 0, overcommits = 0;
  uint64_t eviction_writebacks = 0; // evictions of a sole (dirty) copy, written back to RAM first
  // StarPU's costs outside the kernels and the copies' transfer time (summary `runtime_costs`).
  uint64_t thread_copies = 0, pinned_allocs = 0, gpu_mallocs = 0, gpu_frees = 0;
  // pinned_allocs by the kind of the allocating thread (they add up to pinned_allocs): a CPU worker,
  // a CUDA driver, or no modelled thread (the copy itself, when thread copies are switched off)
  uint64_t pinned_allocs_cpu = 0, pinned_allocs_cuda = 0, pinned_allocs_unthreaded = 0;
  uint64_t pinned_allocs_main = 0;          // the main thread: StarPU-MPI's reception buffers
  uint64_t ram_copy_pinned_allocs_cuda = 0; // of pinned_allocs_cuda, those for a RAM->RAM copy
  double thread_copy_s = 0, pinned_alloc_s = 0, gpu_malloc_s = 0, gpu_free_s = 0;
  double pinned_gpu_stall_s = 0; // of pinned_alloc_s, the time the node's GPUs were held meanwhile
};

// What a task's operand on a memory node still needs (fifo_queues.c starpu_st_non_ready_buffers_*;
// numasim: sched/dmda.cpp pop_ready).
struct OperandReadiness {
  bool valid, loading, allocated;
};

class DataWizard {
public:
  struct Hooks {
    std::function<void(uint32_t waiter)> ready;   // a copy a task (or an MPI send) waited for landed
    std::function<void(uint32_t recv)> delivered; // the network message of reception `recv` landed
    // A copy between two RAM nodes waits for a thread driving its destination (wake one).
    std::function<void(int gdst)> ram_copy_queued;
  };
  DataWizard(const Topology& topo, BusModel& bus, LinkClasses& classes, const Dag& dag, const RunConfig& cfg,
             const Progress& progress, Hooks hooks);
  void set_mover(NumaEffects* numa) { numa_ = numa; } // moves copies along their threads' paths
  void finish();                                      // the run ended: copy actors return (resumed)
  // Allocations, frees and the GPU bytes used are recorded there when not null (runtime_events.hpp).
  void set_events(RuntimeEvents* events) { events_ = events; }

  uint32_t handle(int rank, uint32_t tile) const { return dag_.handle_of(rank, tile); } // Dag::handle_of
  size_t nhandles() const { return hstate_.size(); }
  size_t ntiles() const { return dag_.ntiles; }
  double tile_bytes() const { return tile_bytes_; }
  const HandleState& state(uint32_t h) const { return hstate_[h]; }
  bool valid_on(int rank, uint32_t h, int local) const { return hstate_[h].valid & (1u << local); }
  const DataCounters& counters() const { return counters_; }
  const MemState& mem_state(int gmem) const { return ms_[gmem]; }
  // A kernel or copy on memory nodes a and b (GPU memories count; -1: none) that has run since
  // `start` waits out the time a pinned allocation held its device (datawizard/malloc.hpp).
  void wait_out_holds(int gmem_a, int gmem_b, double start) const;
  // When an operation of `duration` begun at `start` on GPU memory `gmem` ends, paused by the
  // node's pinned allocations known so far (numasim::paused_end).
  double paused_end(int gmem, double start, double duration) const {
    return numasim::paused_end(ms_[gmem].holds, start, duration);
  }
  const std::vector<TransferRecord>& transfer_log() const { return transfer_log_; }
  // MemState::evictable and reusable equal a count over the LRU lists (tests).
  bool eviction_counts_match() const;

  // coherency.cpp
  // Asks for a valid replica of handle h on memory node `dst_local` of `rank` for `waiter`
  // (kNone: nobody waits); true if it is valid already, else Hooks::ready(waiter) follows.
  bool request(int rank, uint32_t h, int dst_local, uint32_t waiter, bool prefetch = false, int32_t prio = 0);
  // Predicted time to bring the task's missing operands to the worker's memory node (dmda's penalty).
  double transfer_penalty(const Task& t, const Worker& w);
  // A scheduler placed a task on `w`: prefetch its operands (starpu_prefetch_task_input_for).
  void prefetch_task(const Task& t, const Worker& w);
  // A worker takes the task: pins its operands and fetches them, counting each one missing in
  // t.pending as soon as it is requested (Hooks::ready counts it down when it lands).
  void fetch_task(Task& t, uint32_t task, const Worker& w);
  // The task ended on w: its written tile's replica on w becomes the only valid one; operands unpinned.
  void task_done(const Task& t, const Worker& w);
  // An MPI message delivered version `version` of handle h into the rank's RAM node `local`
  // (its main RAM node, or the one StarPU 1.4.10 chose: reception_node).
  void receive(int rank, uint32_t h, uint32_t version, int local);
  OperandReadiness readiness(int rank, uint32_t h, int local) const;
  // What the replica of handle h of `rank` on memory node `local` waits for (stall report).
  std::string describe(int rank, uint32_t h, int local, const std::string& tile_name) const;

  // data_request.cpp
  // Sends version `version` of tile `tile` as an MPI message (reception `recv`, src -> dst rank)
  // from the sender's local RAM node `src_local` into the receiver's `dst_local`.
  void send_message(int src, int dst, uint32_t tile, uint32_t recv, int src_local, int dst_local);
  int ram_nodes(int rank) const { return nram_[rank]; } // RAM memory nodes: local 0 .. n - 1
  double estimate(int gsrc, int gdst) { return bus_.estimate(gsrc, gdst, tile_bytes_); }

  // Copies between RAM memory nodes are a memcpy by a thread that drives the destination node
  // (drivers/cpu/driver_cpu.c _starpu_cpu_copy_data): a CPU worker of that NUMA node, or a CUDA
  // driver, which drives every NUMA node (drivers/cuda/driver_cuda.c, _starpu_worker_drives_memory_node
  // in the CUDA worker's init). Such a copy waits in its destination's request list until one of
  // those threads progresses it (datawizard/datawizard.c __starpu_datawizard_progress, at each
  // turn of the driver loop, between tasks and while a task waits for its inputs).
  bool drives(const Worker& w, int gdst) const;
  // Takes the next queued RAM->RAM copy that worker w's thread drives (highest priority, then
  // request order); -1 if none.
  int32_t take_ram_copy(const Worker& w);
  // Runs it in the calling worker's actor (blocking): the destination's allocation if it has none
  // (pinned: cudaHostAlloc by this thread, pages on its NUMA node), then the memcpy.
  void run_ram_copy(uint32_t tid, Worker& w);
  // Pinned host allocations (malloc.c _starpu_malloc_flags_on_node): seconds per MiB, 0 when the
  // node has no CUDA worker or its description gives no cost.
  double pinned_cost_per_mib(int rank) const { return pinned_s_per_mib_[rank]; }
  // The main thread allocates the buffer of a tile `rank` receives, on its RAM node `local`
  // (Simulation::main_thread); the calling actor sleeps for it.
  void allocate_reception(int rank, uint32_t h, int local) {
    allocate_ram(rank, h, global(rank, local), nullptr, true);
  }
  // The same buffer allocated at no cost (no pinning, or the mechanism reception_buffers off): the
  // submitting thread's malloc (datawizard/coherency.c _starpu_create_request_to_fetch_data, "just
  // quickly allocate"), counted on the node and recorded as an allocation by no worker.
  void note_reception_buffer(int rank, uint32_t h, int local);
  // A buffer of handle h is allocated on RAM node `local` (StarPU's per_node[].allocated).
  bool ram_allocated(uint32_t h, int local) const { return ram_alloc_[slot(h, local)]; }
  // The rank's RAM nodes (local indices) in StarPU's numbering of memory nodes (memory_manager.cpp).
  const std::vector<int>& ram_order(int rank) const { return ram_order_[rank]; }
  // What StarPU's memory manager reports as available on RAM node `local` of `rank`
  // (memory_manager.cpp).
  double available(int rank, int local) const;

private:
  const Topology& topo_;
  BusModel& bus_;
  LinkClasses& classes_;
  const Dag& dag_;
  const RunConfig& cfg_;
  Hooks hooks_;
  const Progress& progress_;
  NumaEffects* numa_ = nullptr;
  double tile_bytes_ = 0;
  // The bus model's estimate of a tile's copy per (rank, source, destination) local memory node,
  // asked for every operand of every candidate node at each scheduling decision (NaN: not yet).
  std::vector<double> tile_copy_estimate_;
  double tile_copy_estimate(int rank, int src_local, int dst_local);
  int mem_stride_ = 1;
  DataCounters counters_;
  std::vector<MemState> ms_; // per global memory node
  std::vector<HandleState> hstate_;
  std::vector<int32_t> fetch_id_;             // (handle, local mem) -> transfer in flight
  std::vector<uint16_t> pins_;                // (handle, local mem) -> tasks holding the replica
  std::vector<uint32_t> lru_prev_, lru_next_; // (handle, local mem) -> neighbours in MemState's LRU list
  std::vector<uint8_t> in_lru_;               // (handle, local mem) -> in its MemState's LRU list
  std::vector<uint8_t> evicting_;        // (handle, local mem) -> evicted, its write-back to RAM under way
  uint64_t pending_evictions_ = 0;       // slots with evicting_ set
  std::vector<uint16_t> prefetch_tasks_; // (handle, local mem) -> queued tasks it was prefetched for
  std::vector<uint8_t> dirty_;           // (handle, local mem) -> counted in MemState::dirty
  std::vector<uint8_t> ram_alloc_;       // (handle, local RAM mem) -> a buffer is allocated there
  // per global RAM node: bytes of the buffers StarPU allocated there (memory_manager.c used_size:
  // every replica and reception buffer, STARPU_MALLOC_COUNT; not the tiles the application
  // allocated itself and registered). Nothing frees a RAM buffer in numasim (RAM replicas stay
  // allocated when invalidated, and nothing evicts them), so it only grows.
  std::vector<double> ram_used_;
  std::vector<std::vector<int>> ram_order_;    // per rank: RAM nodes (local) in StarPU's numbering
  std::vector<std::set<AllocKey>> ram_copy_q_; // per global RAM node: copies waiting for a thread
  std::vector<uint8_t> thread_copies_;         // per global RAM node: its copies are run by threads
  std::vector<double> pinned_s_per_mib_;       // per rank
  std::vector<double> pinned_stall_;           // per rank: share of a pinned allocation the GPUs wait
  std::vector<int> nram_;                      // per rank: RAM memory nodes (local 0 .. nram - 1)
  uint64_t ram_seq_ = 0;
  uint64_t pending_dirty_ = 0; // slots with dirty_ set
  uint64_t alloc_seq_ = 0;     // order of entry into the GPU allocation queues
  std::vector<Transfer> transfers_;
  std::vector<uint32_t> free_transfers_;
  // One runner per (source, destination) memory node pair: transfers of a pair are sequential,
  // as in StarPU-SimGrid (core/simgrid.c transfer_queue/transfer_execute: one CUDA stream per pair;
  // numasim: datawizard/data_request.cpp).
  struct Runner {
    std::deque<uint32_t> queue;
    int pending = 0; // copies started on this pair and not finished (StarPU's data_requests_npending)
    sg4::ActorPtr actor;
    bool suspended = false;
  };
  std::vector<std::vector<uint32_t>>
      gpu_copies_;                      // per rank: GPU copies started, not finished, in start order
  std::vector<int32_t> runner_of_pair_; // dense [gsrc * nmem + gdst] -> runner, -1 if none yet
  std::vector<Runner> runners_;
  std::vector<TransferRecord> transfer_log_;
  bool log_transfers_ = false;
  RuntimeEvents* events_ = nullptr; // run description `events` (runtime_events.hpp), else null
  void note_used(int gmem);         // the bytes allocated on GPU memory node gmem changed

  size_t slot(uint32_t h, int local) const { return static_cast<size_t>(h) * mem_stride_ + local; }
  // What make_room may do with slot s, as bits (0: nothing, not listed or in use: memalloc.c
  // may_free_subtree).
  static constexpr uint8_t kEvict = 1;            // free it for a fetch
  static constexpr uint8_t kEvictForPrefetch = 2; // also for a prefetch: not prefetched for a task
                                                  // that has not fetched it (starpu_data_can_evict)
  static constexpr uint8_t kReuse = 4;            // another copy is valid: freed with no write-back (loop 1)
  uint8_t eviction_state(size_t s) const {
    if (!in_lru_[s] || pins_[s] > 0 || fetch_id_[s] >= 0 || evicting_[s])
      return 0;
    const uint32_t h = static_cast<uint32_t>(s / mem_stride_);
    const bool sole = hstate_[h].valid == (1u << (s % mem_stride_));
    return static_cast<uint8_t>(kEvict | (prefetch_tasks_[s] > 0 ? 0 : kEvictForPrefetch) |
                                (sole ? 0 : kReuse));
  }
  static void count_evictable(MemState& m, uint8_t before, uint8_t after);
  // The one way the states eviction_state reads change: `change` applied with the counts of the
  // memory of slot s (change_use) or of every memory of handle h of `rank` (change_valid) in step.
  template <class Change> void change_use(size_t s, Change change) {
    const uint8_t before = eviction_state(s);
    change();
    const uint8_t after = eviction_state(s);
    if (after != before)
      count_evictable(ms_[global(dag_.handle_rank[s / mem_stride_], static_cast<int>(s % mem_stride_))],
                      before, after);
  }
  template <class Change> void change_valid(int rank, uint32_t h, Change change) {
    uint8_t before[kMaxMemNodes];
    for (int l = 0; l < mem_stride_; l++)
      before[l] = eviction_state(slot(h, l));
    change();
    for (int l = 0; l < mem_stride_; l++)
      if (uint8_t after = eviction_state(slot(h, l)); after != before[l])
        count_evictable(ms_[global(rank, l)], before[l], after);
  }
  int global(int rank, int local) const { return topo_.global_mem(rank, local); }

  // coherency.cpp
  int best_source(int rank, uint32_t h, int dst_local);
  void join_request(uint32_t tid, uint32_t waiter, bool prefetch);
  void drop_replica(int rank, uint32_t h, int local);
  void touch(int rank, uint32_t h, int local);
  void copy_landed(const Transfer& t);

  // memalloc.cpp
  static constexpr int kMaxPendingFetches = 5;    // datawizard/data_request.h MAX_PENDING_REQUESTS_PER_NODE
  static constexpr int kMaxPendingPrefetches = 2; // data_request.h MAX_PENDING_PREFETCH_REQUESTS_PER_NODE
  bool lru_erase(MemState& m, size_t s);          // false if s was not in the list
  void lru_push(MemState& m, size_t s);           // at the most recently used end (s not in the list)
  void admit(uint32_t tid);     // allocates the destination replica (maybe later), starts the copy
  void serve_waiting(int gmem); // allocates and starts the waiting copies that fit
  void serve_fetches(int gmem, bool& out_of_memory);
  void serve_prefetches(int gmem);
  void start_waiting(int gmem, std::set<AllocKey>& q, std::set<AllocKey>::iterator at);
  std::set<AllocKey>::iterator startable(int gmem, std::set<AllocKey>& q, int limit);
  void make_room(int gmem, double need, bool for_prefetch); // evicts LRU replicas until `need` fits
  void write_back(int gmem, uint32_t victim);
  void finish_eviction(int rank, uint32_t h);
  void set_clean(int rank, uint32_t h, int local);
  void set_dirty(int rank, uint32_t h, int local);
  void tidy(int gmem); // writes dirty replicas back ahead of need (memalloc.c starpu_memchunk_tidy)
  // cudaMalloc / cudaFree of one tile on GPU memory gmem by its driver thread: the device's copies
  // wait until it ends; returns when it ends.
  double gpu_alloc_call(int gmem, double cost);
  void gpu_free_chunk(int gmem); // a replica freed by the generic reclaim: its chunk is cudaFree'd
  // The first buffer of handle h on RAM node gdst, allocated by `thread` (blocking: pinned cost).
  // true when this call made a pinned allocation (the thread's own, whatever others did while it slept)
  // `main_thread`: the application's thread allocates (thread null), a reception's buffer.
  bool allocate_ram(int rank, uint32_t h, int gdst, const Worker* thread, bool main_thread = false);
  // memory_manager.cpp: a buffer now allocated on RAM node gdst, counted in ram_used_.
  void count_ram_buffer(int gdst);
  void init_ram_accounting();
  const Worker* driver_of(int gpu_gmem) const; // the CUDA worker driving a GPU memory node

  // data_request.cpp
  uint32_t new_transfer();
  int pending_copies(int gsrc, int gdst) const; // copies started on the pair, not finished
  bool sequential(const Transfer& later, const Transfer& earlier) const;
  void start_transfer(uint32_t tid);
  void runner_loop(int rid);
  void transfer_done(uint32_t tid);
  void release_sequential(uint32_t tid, const Transfer& t0);
  void account(int gsrc, int gdst, double bytes, double start, int path, int thread);
};

} // namespace numasim
