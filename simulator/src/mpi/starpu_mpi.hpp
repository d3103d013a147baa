// StarPU-MPI at run time (mpi/src/): a tile version read on another rank (owner computes,
// receptions of the task graph: lu_dag.cpp, mpi/src/starpu_mpi_task_insert.c, cached per version
// and destination as mpi/src/starpu_mpi_cache.c) is sent once its RAM copy exists; every request
// goes through the node's progression thread (mpi/src/mpi/starpu_mpi_mpi.c), one at a time.
#pragma once
#include "datawizard/datawizard.hpp"
#include "lu_dag.hpp"
#include "topology.hpp"

#include <deque>
#include <functional>
#include <string>
#include <vector>

namespace numasim {

class MpiRuntime {
public:
  // `received(r)`: reception r's data is in the destination's RAM (its successors may run).
  MpiRuntime(const Topology& topo, const Dag& dag, DataWizard& data, const RunConfig& cfg,
             const Progress& progress, std::function<void(uint32_t r)> received);
  void trigger(uint32_t r);                      // the tile version of reception r was written
  void enqueue(int rank, bool send, uint32_t r); // a send (data in RAM) or a reception (data landed)
  void start_actors();                           // one progression thread per node
  void finish();                                 // the run ended: the threads return
  // Messages triggered and not received; the first of them (up to `max_items` items in all) described.
  uint64_t stall_items(std::vector<std::string>& items, size_t max_items,
                       const std::function<std::string(uint32_t tile)>& tile_name) const;

private:
  struct Thread {
    std::deque<std::pair<bool, uint32_t>> requests; // (is_send, reception)
    sg4::ActorPtr actor;
    bool suspended = false;
  };
  // Per reception: not triggered yet, triggered (the send waits for the RAM copy or the MPI
  // thread), sent, received (for the stall report).
  static constexpr uint8_t kRecvTriggered = 1, kRecvSent = 2, kRecvDone = 3;
  const Topology& topo_;
  const Dag& dag_;
  DataWizard& data_;
  const RunConfig& cfg_;
  const Progress& progress_;
  std::function<void(uint32_t)> received_;
  std::vector<Thread> threads_;
  std::vector<uint8_t> recv_state_;
  std::vector<int8_t> send_node_; // per reception: local RAM node the sender sends from

  void progression_loop(int rank);
};

} // namespace numasim
