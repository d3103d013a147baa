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

// StarPU 1.4.10's choice of the RAM node a rank receives a tile on (mpi/src/starpu_mpi.c
// _starpu_mpi_choose_node, receiving branch, for a handle without home node and a network that is
// not CUDA-aware; MpiRuntime::reception_node cites each step): the first node of `order` (the
// rank's RAM nodes in StarPU's numbering) where `allocated[node]`, else the node with the most
// `available[node]` bytes (-1: unknown) among those holding `needed`, the first of equals, else
// `main_ram`. Nodes are local indices into `allocated` and `available`.
int choose_reception_node(const std::vector<int>& order, const std::vector<bool>& allocated,
                          const std::vector<double>& available, double needed, int main_ram);

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
  // StarPU 1.4.10's _starpu_mpi_choose_node picks the RAM node of each send (trigger) and
  // reception (reception_node): run description `mpi.memory_node: "choose_node"`, or the mechanism
  // mpi_main_ram switched off (mechanisms.hpp). Otherwise, as the StarPU-MPI of the study's era,
  // both use STARPU_MAIN_RAM.
  bool choose_node() const { return cfg_.mpi_choose_node || !cfg_.mechanisms(Mechanism::mpi_main_ram); }
  // Where reception r lands on its destination: STARPU_MAIN_RAM, or with choose_node() the RAM
  // node StarPU 1.4.10 chooses when the reception is posted (reception_node). The buffer is allocated
  // then: by the main thread, paying for a pinned allocation (allocate_buffer, from
  // Simulation::main_thread), or at no cost (note_buffer, for ranks whose main thread is not
  // simulated: the whole graph is submitted at once).
  int reception_node(uint32_t r) const;
  void allocate_buffer(uint32_t r);
  void note_buffer(uint32_t r);
  int landing_node(uint32_t r) const { return recv_node_[r]; }
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
  std::vector<int8_t> recv_node_; // per reception: the destination's local RAM node it lands on
  std::vector<uint32_t>
      relay_; // per reception: the reception whose destination forwards it (kNone: the owner sends)
  RuntimeEvents* events_ = nullptr;

  void build_trees();
  void send_group(uint32_t g);
  void enqueue(int rank, bool send, uint32_t r); // a send (data in RAM) or a reception (data landed)
  void progression_loop(int rank);
};

} // namespace numasim
