// The tiled LU without pivoting as a task graph (Chameleon compute/pzgetrf_nopiv.c
// submission order and priorities), with StarPU-MPI's owner-computes rule
// (mpi/src/starpu_mpi_task_insert.c; at run time numasim: mpi/starpu_mpi.cpp): a task runs on the rank owning
// the tile it writes; a tile version read on another rank is sent there once (per version and destination)
// and cached.
#pragma once
#include "config.hpp"

#include <cstdint>
#include <vector>

namespace numasim {

constexpr uint32_t kNone = 0xFFFFFFFFu;

struct Task {
  uint32_t handles[3] = {0, 0, 0}; // operands as the rank's data handles (Dag::handle_tile); the last
                                   // one is written (RW), the others read
  uint8_t nbuf = 0;
  TaskKind kind = TaskKind::gemm;
  uint16_t rank = 0;
  int32_t prio = 0;
  uint32_t succ_begin = 0, succ_end = 0;
  // runtime state
  int32_t worker = -1;
  float predicted = 0; // expected length on the chosen worker (s)
  uint16_t step = 0;   // k
  uint8_t pending = 0; // operands not yet on the worker's memory node
};
// 40 bytes: the scheduler and the data wizard read tasks in no particular order, and at 200²
// tiles (2.7M tasks) every byte of a Task is a cache miss more (bench/numasim_growth.py).
static_assert(sizeof(Task) == 40);

// When a task ran (runtime state read only by the trace).
struct TaskSpan {
  double start = 0, end = 0;
};

// A tile version that a rank reads but does not own: one MPI message.
struct Reception {
  uint32_t tile, version;
  uint16_t src, dst;
  uint32_t succ_begin = 0, succ_end = 0;
  // The send's priority: that of the task whose submission made it, the first reader on `dst`
  // (mpi/src/starpu_mpi_task_insert.c _starpu_mpi_exchange_data_before_execution passes the task's
  // priority to starpu_mpi_isend_detached_prio).
  int32_t prio = 0;
  // The task whose submission on `dst` posted the reception (its first reader there): the main
  // thread allocates the buffer then (Simulation::main_thread).
  uint32_t first_reader = 0;
};

struct Dag {
  std::vector<Task> tasks;
  // Unresolved predecessors (tasks and receptions) of each task, apart from Task: release()
  // decrements it along every edge, and reaching a whole Task for it missed the cache (4 % of a
  // study-scale run).
  std::vector<uint16_t> ndeps;
  // Per task, kept only when a trace is asked for (RunConfig::trace): writing a record nobody
  // reads was a cache miss per task at 200² tiles (bench/RESULTS.md).
  std::vector<TaskSpan> spans;
  std::vector<Reception> receptions;
  std::vector<uint32_t> succ;  // node ids: < tasks.size() is a task, else a reception (id - tasks.size())
  std::vector<uint32_t> ready; // tasks without predecessors, in submission order
  std::vector<uint32_t> ready_recvs; // receptions of initial data
  uint64_t count_by_kind[kNumKinds] = {0, 0, 0, 0};
  // Data handles: one per (rank, tile) the rank holds a replica of (StarPU-MPI registers a tile on
  // every rank that reads it). A tile's handle on its owner is the tile's index, so the ranks' own
  // tiles, which every step updates, have dense per-handle state (at 200² tiles, per-(rank, tile)
  // state left the cache: bench/RESULTS.md); a tile received by another rank gets the next id at
  // its first reception, in submission order.
  size_t ntiles = 0;                  // NT²
  std::vector<uint32_t> handle_tile;  // per handle: its tile
  std::vector<uint16_t> handle_rank;  // per handle: the rank holding it
  std::vector<uint32_t> handle_index; // [rank * NT² + tile] -> handle; kNone if the rank never holds it
  size_t nhandles() const { return handle_tile.size(); }
  // The handle of `tile` on `rank`; kNone if the rank never holds the tile.
  uint32_t handle_of(int rank, uint32_t tile) const {
    size_t i = static_cast<size_t>(rank) * ntiles + tile;
    return i < handle_index.size() ? handle_index[i] : kNone;
  }
  uint32_t tile(const Task& t, int i) const { return handle_tile[t.handles[i]]; }
};

Dag build_lu_dag(const RunConfig& cfg);

} // namespace numasim
