// StarPU-MPI at run time (mpi/src/): a tile version read on another rank (owner computes,
// receptions of the task graph: lu_dag.cpp, mpi/src/starpu_mpi_task_insert.c, cached per version
// and destination as mpi/src/starpu_mpi_cache.c) is sent once its RAM copy exists; every request
// goes through the node's progression thread (mpi/src/mpi/starpu_mpi_mpi.c), one at a time.
// The sends of one value form a bag of cooperative sends (mpi/starpu_mpi_coop_sends.hpp), acquired
// once; the backend (RunConfig::mpi_backend) sends it:
// * "mpi" (mpi/src/mpi/starpu_mpi_mpi.c _starpu_mpi_submit_coop_sends; its diffusion tree,
//   _starpu_mpi_coop_sends_build_tree, is compiled out in 1.4.10): the owner sends every copy, in
//   the bag's order, all at once;
// * "nmad" (mpi/src/nmad/starpu_mpi_nmad_coop.c): a multicast along a tree
//   (mpi/starpu_mpi_nmad_coop.hpp); a receiver that has wholly received the data forwards it to
//   its children one after the other, through its own progression thread, from its own RAM copy
//   (the reception buffer), on its own NIC.
#pragma once
#include "datawizard/datawizard.hpp"
#include "lu_dag.hpp"
#include "mpi/starpu_mpi_coop_sends.hpp"
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
  void trigger(uint32_t r);    // the tile version of reception r was written
  void data_ready(uint32_t r); // the owner's copy for reception r's bag reached RAM
  void delivered(uint32_t r);  // reception r's message landed in the destination's RAM
  // Reception r is posted only once its buffer is allocated (Simulation::main_thread): until
  // post(r), a send ready for it waits (NewMadeleine's rendezvous: large data moves once the
  // receive is posted).
  void hold_until_posted(uint32_t r) { posted_[r] = 0; }
  void post(uint32_t r);
  void start_actors();                                         // one progression thread per node
  void finish();                                               // the run ended: the threads return
  void set_events(RuntimeEvents* events) { events_ = events; } // the threads' states (runtime_events.hpp)
  // Messages triggered and not received; the first of them (up to `max_items` items in all) described.
  uint64_t stall_items(std::vector<std::string>& items, size_t max_items,
                       const std::function<std::string(uint32_t tile)>& tile_name) const;
  // Who sends reception r (its owner, or the receiver that forwards it), and what that rank sends
  // once r is sent / what r's destination forwards first once it has r (kNone: nothing).
  int sender(uint32_t r) const { return sender_[r]; }
  uint32_t next_send(uint32_t r) const { return next_send_[r]; }
  uint32_t first_forward(uint32_t r) const { return forward_[r]; }
  const CoopSends& coop_sends() const { return coop_; }

private:
  struct Thread {
    std::deque<std::pair<bool, uint32_t>> requests; // (is_send, reception)
    sg4::ActorPtr actor;
    bool suspended = false;
  };
  // Per reception: not triggered yet, triggered (the send waits for the RAM copy, the MPI thread or
  // its forwarder), sent, received (for the stall report).
  static constexpr uint8_t kRecvTriggered = 1, kRecvSent = 2, kRecvDone = 3;
  const Topology& topo_;
  const Dag& dag_;
  DataWizard& data_;
  const RunConfig& cfg_;
  const Progress& progress_;
  std::function<void(uint32_t)> received_;
  std::vector<Thread> threads_;
  std::vector<uint8_t> recv_state_;
  std::vector<uint8_t> posted_;       // per reception: its receive is posted (its buffer exists)
  std::vector<uint8_t> send_waiting_; // per reception: its send waits for the post
  std::vector<int8_t> send_node_;     // per reception: local RAM node the owner sends from
  CoopSends coop_;
  std::vector<uint8_t> group_triggered_;
  std::vector<uint32_t> group_first_; // per bag: the owner's first send along the tree (kNone: all at once)
  std::vector<uint16_t> sender_;
  std::vector<uint32_t> next_send_, forward_;
  RuntimeEvents* events_ = nullptr;

  void build_trees();
  void send_group(uint32_t g);
  void enqueue(int rank, bool send, uint32_t r); // a send (data in RAM) or a reception (data landed)
  void progression_loop(int rank);
};

} // namespace numasim
