// The StarPU runtime model (StarPU's core/: workers.c driver loops, jobs and task release): it
// wires the parts laid out as StarPU's own tree — topology (topology.cpp), scheduling policies
// (sched/), data management (datawizard/), StarPU-MPI (mpi/), NUMA mechanisms (numa_effects.cpp) —
// and drives them with a small number of S4U actors (one per worker, one progression thread per
// node, one copy runner per memory-node pair), never one actor per task.
#pragma once
#include "config.hpp"
#include "datawizard/datawizard.hpp"
#include "lu_dag.hpp"
#include "mpi/starpu_mpi.hpp"
#include "numa_effects.hpp"
#include "perfmodel_bus.hpp"
#include "platform.hpp"
#include "sched/sched_policy.hpp"
#include "topology.hpp"

#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

namespace numasim {

struct Summary {
  double makespan = 0;
  uint64_t tasks = 0;
  uint64_t by_kind[kNumKinds] = {0, 0, 0, 0};
  uint64_t on_cpu = 0, on_cuda = 0;
  uint64_t transfers = 0, mpi_messages = 0, evictions = 0, overcommits = 0;
  uint64_t eviction_writebacks = 0; // evictions of a sole (dirty) copy, written back to RAM first
  std::map<std::string, double> bytes_by_link_class;
  std::map<std::string, double> numa; // NumaEffects::summary (remote reads, migrations, ...)
  // Threads' time in RAM->RAM copies, pinned and GPU allocation calls (DataCounters)
  std::map<std::string, double> runtime_costs;
  size_t workers = 0, cpu_workers = 0, cuda_workers = 0;
  std::vector<int> cpu_workers_by_rank; // per MPI rank (node), in rank order
};

class Simulation {
public:
  // Loads the platform into `engine` and the models; throws InputError on bad input.
  Simulation(sg4::Engine& engine, RunConfig cfg);
  ~Simulation();
  Summary run();

  // Introspection for tests and traces.
  const std::vector<MachineNode>& nodes() const { return topo_->nodes(); }
  const std::vector<Worker>& workers() const { return topo_->workers(); }
  const std::vector<MemNode>& memnodes() const { return topo_->mem(); }
  const NodeThreads& threads(int rank) const { return topo_->threads(rank); }
  const Dag& dag() const { return dag_; }
  int global_mem(int rank, int local) const { return topo_->global_mem(rank, local); }
  const MemState& mem_state(int gmem) const { return data_->mem_state(gmem); } // GPU memory accounting
  int home_mem(int rank) const { return topo_->home(rank); } // local index of the main RAM node
  MemMask valid_mask(int rank, uint32_t tile) const {
    uint32_t h = data_->handle(rank, tile);
    return h == kNone ? 0 : data_->state(h).valid;
  }
  double estimate(int gsrc, int gdst, double bytes) { return bus_->estimate(gsrc, gdst, bytes); }
  using TransferRecord = numasim::TransferRecord;
  const std::vector<TransferRecord>& transfer_log() const { return data_->transfer_log(); }
  bool eviction_counts_match() const { return data_->eviction_counts_match(); }
  std::vector<std::string> route_links(int gsrc, int gdst) { return bus_->route_links(gsrc, gdst); }

  // Scheduling decision of dmda for a ready task (exposed for unit tests; -1 under other policies).
  int dmda_choose(uint32_t task, double* best_fitness = nullptr) {
    return sched_->choose(task, best_fitness);
  }

  NumaEffects& numa() { return *numa_; }
  const MpiRuntime& mpi() const { return *mpi_; }
  const DataWizard& data() const { return *data_; }

  // Task trace and transfer log as CSV (output.cpp); the path versions go through write_output
  // (output.hpp): checked, temporary file renamed in, OutputError on failure.
  void write_trace(std::ostream& out) const;
  void write_transfers(std::ostream& out) const;
  void write_trace(const std::string& path) const;
  void write_transfers(const std::string& path) const;
  // Runtime events (run description `events`, runtime_events.hpp): the workers, then one row per event.
  void write_events(std::ostream& out) const;
  void write_events(const std::string& path) const;
  const RuntimeEvents* events() const { return events_.get(); } // null unless `events` is asked for
  // One line naming how many tasks never ran and the first `max_items` blocked tasks, each with
  // the replicas (tile, memory node) it waits for and why (the watchdog's message; stall_report.cpp).
  std::string stall_report(size_t max_items) const;

private:
  sg4::Engine& engine_;
  RunConfig cfg_;
  Progress progress_;
  LinkClasses classes_;
  std::unique_ptr<Topology> topo_;
  Dag dag_;
  std::unique_ptr<BusModel> bus_;
  std::unique_ptr<DataWizard> data_;
  std::unique_ptr<SchedPolicy> sched_;
  std::unique_ptr<MpiRuntime> mpi_;
  std::unique_ptr<NumaEffects> numa_;
  std::unique_ptr<RuntimeEvents> events_; // run description `events`; null otherwise
  std::mt19937_64 rng_;
  std::normal_distribution<double> normal_{0.0, 1.0};
  double last_task_end_ = 0;
  Summary sum_;

  void load_platform();
  void operand_ready(uint32_t waiter); // DataWizard::Hooks::ready
  void ram_copy_queued(int gdst);      // DataWizard::Hooks::ram_copy_queued
  bool ram_threads_ = false;           // some RAM->RAM copy was queued for a driving thread
  double precision_ = 1e-9;            // SimGrid's surf/precision, read once (gpu_kernel's hot path)
  // Per rank: the tasks of index below it are submitted (Simulation::main_thread); the ready ones
  // above it wait in deferred_.
  std::vector<uint32_t> submitted_;
  std::vector<std::vector<uint32_t>> deferred_;
  bool submits_slowly(int rank) const; // its main thread pins the reception buffers (main_thread)
  void main_thread(int rank);
  void submit_until(int rank, uint32_t bound);
  void worker_loop(int wid);
  void prepare(Worker& w, uint32_t task);
  void execute(Worker& w, uint32_t task);
  bool progress_one(Worker& w); // runs one RAM->RAM copy the worker's thread drives, if one waits
  void gpu_kernel(Worker& w, double start, double duration);
  double cuda_occupancy(const Worker& w, double kernel) const;
  static double first_call(Worker& w, TaskKind kind);
  double sample_duration(const Worker& w, TaskKind k);
  void release(uint32_t node_id, int releasing_worker);
  void push(uint32_t task, int releasing_worker); // sched_->push, recorded in events_
  void finish_all();
  void fill_summary();
  std::string tile_name(uint32_t tile) const;
  std::string task_name(uint32_t task) const;
  void stall_tasks(std::vector<std::string>& items, size_t max_items, uint64_t& prepared,
                   uint64_t& queued) const;
};

} // namespace numasim
