#include "mpi/starpu_mpi.hpp"
#include "mpi/starpu_mpi_nmad_coop.hpp"
#include "sleep.hpp"

#include <algorithm>

XBT_LOG_NEW_DEFAULT_SUBCATEGORY(numasim_mpi, numasim, "numasim StarPU-MPI");

namespace numasim {

MpiRuntime::MpiRuntime(const Topology& topo, const Dag& dag, DataWizard& data, const RunConfig& cfg,
                       const Progress& progress, std::function<void(uint32_t r)> received)
    : topo_(topo), dag_(dag), data_(data), cfg_(cfg), progress_(progress), received_(std::move(received)),
      threads_(topo.nranks()), recv_state_(dag.receptions.size(), 0), posted_(dag.receptions.size(), 1),
      send_waiting_(dag.receptions.size(), 0), send_node_(dag.receptions.size(), -1),
      coop_(build_coop_sends(dag)), group_triggered_(coop_.ngroups(), 0),
      group_first_(coop_.ngroups(), kNone), sender_(dag.receptions.size()),
      next_send_(dag.receptions.size(), kNone), forward_(dag.receptions.size(), kNone),
      recv_node_(dag.receptions.size()), relay_(dag.receptions.size(), kNone) {
  for (size_t r = 0; r < dag.receptions.size(); r++) {
    sender_[r] = dag.receptions[r].src;
    recv_node_[r] = static_cast<int8_t>(topo.home(dag.receptions[r].dst));
  }
  if (cfg_.mpi_backend == MpiBackend::nmad && cfg_.mpi_tree != McastTree::flat)
    build_trees();
}

// NewMadeleine's multicast of each bag of two receivers or more (mpi/starpu_mpi_nmad_coop.hpp):
// who sends each copy, and in which order.
void MpiRuntime::build_trees() {
  std::vector<uint32_t> sends;
  for (uint32_t g = 0; g < coop_.ngroups(); g++) {
    const auto members = coop_.group(g);
    // nm_mcast_isend is called for bags of two or more (_starpu_mpi_coop_sends_data_ready)
    if (members.size() < 2)
      continue;
    const int nodes = static_cast<int>(members.size()) + 1;
    for (int i = 0; i < nodes; i++) {
      sends.clear();
      for (int c : mcast_children(cfg_.mpi_tree, nodes, i))
        sends.push_back(members[c - 1]);
      if (sends.empty())
        continue;
      const uint16_t from = i == 0 ? dag_.receptions[members[0]].src : dag_.receptions[members[i - 1]].dst;
      for (size_t k = 0; k < sends.size(); k++) {
        sender_[sends[k]] = from;
        relay_[sends[k]] = i == 0 ? kNone : members[i - 1];
        if (k + 1 < sends.size())
          next_send_[sends[k]] = sends[k + 1];
      }
      (i == 0 ? group_first_[g] : forward_[members[i - 1]]) = sends[0];
    }
  }
}

void MpiRuntime::trigger(uint32_t r) {
  // The bag's first send acquires the data for all (_starpu_mpi_coop_send); the others of the bag
  // are triggered by the same write and wait with it.
  const uint32_t g = coop_.group_of[r];
  if (group_triggered_[g])
    return;
  group_triggered_[g] = 1;
  // The owner sends once its copy is in RAM. The StarPU-MPI of the study's era acquires the data
  // on STARPU_MAIN_RAM, so with STARPU_USE_NUMA a tile valid on another NUMA node is first copied
  // there. StarPU 1.4.10 sends from the first RAM node holding a valid copy, STARPU_MAIN_RAM
  // first, and otherwise fetches it into STARPU_MAIN_RAM (the least loaded node, RAM not being
  // limited: mpi/src/starpu_mpi.c _starpu_mpi_choose_node, sending branch; `_starpu_mpi_has_cuda`
  // is off with a network that is not CUDA-aware), chosen once for the bag
  // (starpu_mpi_coop_sends.c _starpu_mpi_coop_send_acquired_callback). Where the receiver
  // receives: reception_node.
  const Reception& rc = dag_.receptions[r];
  uint32_t h = data_.handle(rc.src, rc.tile);
  const int home = topo_.home(rc.src);
  int node = home;
  if (choose_node() && !data_.valid_on(rc.src, h, home))
    for (int l = 0; l < data_.ram_nodes(rc.src); l++)
      if (data_.valid_on(rc.src, h, l)) {
        node = l;
        break;
      }
  for (uint32_t m : coop_.group(g)) {
    recv_state_[m] = kRecvTriggered;
    send_node_[m] = static_cast<int8_t>(node);
  }
  if (data_.valid_on(rc.src, h, node))
    send_group(g);
  else
    data_.request(rc.src, h, home, kRecvFlag | r);
}

int choose_reception_node(const std::vector<int>& order, const std::vector<bool>& allocated,
                          const std::vector<double>& available, double needed, int main_ram) {
  // 1. The handle's home node if it is a CPU RAM node: none here (MpiRuntime::reception_node).
  // 2. With _starpu_mpi_has_cuda, a GPU where the handle is allocated: off here, as for the
  //    sending branch (a network that is not CUDA-aware).
  // 3. The first CPU RAM node, in StarPU's numbering, where the handle is allocated
  //    (handle->per_node[i].allocated).
  for (int l : order)
    if (allocated[l])
      return l;
  // 4. "No luck, take the least loaded node": the CPU RAM node with the most memory available
  //    (starpu_memory_get_available) if it holds the handle's allocation size
  //    (starpu_data_get_alloc_size), and strictly more than the best so far, so that equals keep
  //    the node numbered first; STARPU_MAIN_RAM when none qualifies.
  double maximum = 0;
  int node = main_ram;
  for (int l : order)
    if (available[l] >= needed && available[l] > maximum) {
      node = l;
      maximum = available[l];
    }
  return node;
}

int MpiRuntime::reception_node(uint32_t r) const {
  // StarPU 1.4.10 mpi/src/starpu_mpi.c _starpu_mpi_choose_node, receiving branch (mode & STARPU_W:
  // _starpu_mpi_irecv_common calls _starpu_mpi_isend_irecv_common with STARPU_W). It runs in
  // _starpu_mpi_acquired_callback once the handle is acquired, with the node still -1:
  // _starpu_mpi_isend_irecv_common fixes STARPU_MAIN_RAM beforehand (a pre-reservation) only with
  // _starpu_mpi_mem_throttle, STARPU_MPI_MEM_THROTTLE, 0 by default (mpi/src/starpu_mpi_private.c).
  // For a tile the rank has not read yet the acquisition is granted at once, in the thread
  // submitting its first local reader (datawizard/user_interactions.c
  // starpu_data_acquire_cb_pre_sync_callback -> _starpu_data_acquire_continuation_non_blocking).
  // The handle has no home node: apps/lu registers the tiles a rank does not own with home -1
  // (apps/lu/lu.c, starpu_matrix_data_register), as Chameleon does
  // (runtime/starpu/control/runtime_descriptor.c RUNTIME_data_getaddr: home_node -1).
  const Reception& rc = dag_.receptions[r];
  const int rank = rc.dst;
  const uint32_t h = data_.handle(rank, rc.tile);
  const int n = data_.ram_nodes(rank);
  std::vector<bool> allocated(n);
  std::vector<double> available(n);
  for (int l = 0; l < n; l++) {
    allocated[l] = data_.ram_allocated(h, l);
    available[l] = data_.available(rank, l);
  }
  return choose_reception_node(data_.ram_order(rank), allocated, available, data_.tile_bytes(),
                               topo_.home(rank));
}

void MpiRuntime::allocate_buffer(uint32_t r) {
  const Reception& rc = dag_.receptions[r];
  if (choose_node())
    recv_node_[r] = static_cast<int8_t>(reception_node(r));
  data_.allocate_reception(rc.dst, data_.handle(rc.dst, rc.tile), recv_node_[r]);
}

void MpiRuntime::note_buffer(uint32_t r) {
  const Reception& rc = dag_.receptions[r];
  recv_node_[r] = static_cast<int8_t>(reception_node(r));
  data_.note_reception_buffer(rc.dst, data_.handle(rc.dst, rc.tile), recv_node_[r]);
}

void MpiRuntime::data_ready(uint32_t r) {
  send_group(coop_.group_of[r]);
}

// The acquired bag goes to the backend (_starpu_mpi_submit_coop_sends), in the bag's order.
void MpiRuntime::send_group(uint32_t g) {
  const auto members = coop_.group(g);
  const int owner = dag_.receptions[members[0]].src;
  if (group_first_[g] != kNone) {
    enqueue(owner, true, group_first_[g]);
    return;
  }
  for (uint32_t m : members)
    enqueue(owner, true, m);
}

void MpiRuntime::delivered(uint32_t r) {
  // Along a tree, the sender goes on with its next child once this copy is through
  // (nm_coll_ibcast_step: the next step starts when the step's requests completed).
  if (next_send_[r] != kNone)
    enqueue(sender_[r], true, next_send_[r]);
  enqueue(dag_.receptions[r].dst, false, r);
}

void MpiRuntime::post(uint32_t r) {
  posted_[r] = 1;
  if (send_waiting_[r]) {
    send_waiting_[r] = 0;
    enqueue(sender_[r], true, r);
  }
}

void MpiRuntime::enqueue(int rank, bool send, uint32_t r) {
  Thread& m = threads_[rank];
  m.requests.emplace_back(send, r);
  if (m.suspended) {
    m.suspended = false;
    m.actor->resume();
  }
}

void MpiRuntime::progression_loop(int rank) {
  // The progression thread handles requests one at a time, each with a fixed overhead
  // (mpi/src/mpi/starpu_mpi_mpi.c progression loop).
  Thread& m = threads_[rank];
  while (!progress_.finished) {
    const double t0 = sg4::Engine::get_clock();
    if (m.requests.empty()) {
      m.suspended = true;
      sg4::this_actor::suspend();
      if (events_)
        events_->add(EventType::Sleeping, t0, sg4::Engine::get_clock(), -1, rank);
      continue;
    }
    auto [send, r] = m.requests.front();
    m.requests.pop_front();
    if (send && !posted_[r]) { // the receiver has not posted it yet: sent when it does (post)
      send_waiting_[r] = 1;
      continue;
    }
    if (cfg_.mpi_overhead_s > 0)
      numasim::sleep_for(cfg_.mpi_overhead_s);
    const Reception& rc = dag_.receptions[r];
    if (send) {
      recv_state_[r] = kRecvSent;
      // A forwarder sends from the RAM copy it received (the node that reception landed on).
      const int from = sender_[r];
      data_.send_message(from, rc.dst, rc.tile, r, from == rc.src ? send_node_[r] : recv_node_[relay_[r]],
                         recv_node_[r]);
    } else {
      data_.receive(rc.dst, data_.handle(rc.dst, rc.tile), rc.version, recv_node_[r]);
      recv_state_[r] = kRecvDone;
      if (forward_[r] != kNone) // the progression thread forwards what it received (a send request)
        enqueue(rc.dst, true, forward_[r]);
      received_(r);
    }
    if (events_) // StarPU-MPI's thread states (starpu_fxt.c handle_mpi_isend_submit_begin,
                 // _irecv_complete_begin)
      events_->add(send ? EventType::SendSubmitted : EventType::ReceiveCompleted, t0,
                   sg4::Engine::get_clock(), -1, rank);
  }
}

void MpiRuntime::start_actors() {
  for (size_t r = 0; r < topo_.nranks(); r++) {
    const MachineNode& n = topo_.nodes()[r];
    sg4::Host* host = n.cpus.front().host;
    for (const auto& c : n.cpus)
      if (c.index == topo_.threads(static_cast<int>(r)).mpi_core)
        host = c.host;
    threads_[r].actor =
        sg4::Actor::create(n.name + ".mpi", host, [this, r] { progression_loop(static_cast<int>(r)); });
  }
}

void MpiRuntime::finish() {
  for (auto& m : threads_)
    if (m.suspended) {
      m.suspended = false;
      m.actor->resume();
    }
}

uint64_t MpiRuntime::stall_items(std::vector<std::string>& items, size_t max_items,
                                 const std::function<std::string(uint32_t tile)>& tile_name) const {
  uint64_t receptions = 0;
  for (uint32_t r = 0; r < recv_state_.size(); r++) {
    if (recv_state_[r] != kRecvTriggered && recv_state_[r] != kRecvSent)
      continue;
    receptions++;
    if (items.size() >= max_items)
      continue;
    const Reception& rc = dag_.receptions[r];
    const int from = sender_[r];
    const auto& src_requests = threads_[from].requests;
    std::string s = "MPI message of " + tile_name(rc.tile) + " version " + std::to_string(rc.version) +
                    " from " + topo_.nodes()[from].name + " to " + topo_.nodes()[rc.dst].name;
    if (recv_state_[r] == kRecvSent)
      s += " sent, not received";
    else if (std::find(src_requests.begin(), src_requests.end(), std::make_pair(true, r)) !=
             src_requests.end())
      s += " queued at the sender's MPI thread";
    else if (from != rc.src)
      s += " waits for " + topo_.nodes()[from].name + " to forward it";
    else if (data_.valid_on(rc.src, data_.handle(rc.src, rc.tile), topo_.home(rc.src)))
      s += " has its RAM copy but was never queued for sending";
    else
      s += " waits for the sender's RAM copy: " +
           data_.describe(rc.src, rc.tile, topo_.home(rc.src), tile_name(rc.tile));
    items.push_back(s);
  }
  return receptions;
}

} // namespace numasim
