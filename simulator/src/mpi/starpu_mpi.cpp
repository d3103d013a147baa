#include "mpi/starpu_mpi.hpp"
#include "sleep.hpp"

#include <algorithm>

XBT_LOG_NEW_DEFAULT_SUBCATEGORY(numasim_mpi, numasim, "numasim StarPU-MPI");

namespace numasim {

MpiRuntime::MpiRuntime(const Topology& topo, const Dag& dag, DataWizard& data, const RunConfig& cfg,
                       const Progress& progress, std::function<void(uint32_t r)> received)
    : topo_(topo), dag_(dag), data_(data), cfg_(cfg), progress_(progress), received_(std::move(received)),
      threads_(topo.nranks()), recv_state_(dag.receptions.size(), 0), send_node_(dag.receptions.size(), -1) {}

void MpiRuntime::trigger(uint32_t r) {
  // The owner sends once its copy is in RAM. The StarPU-MPI of the study's era acquires the data
  // on STARPU_MAIN_RAM, so with STARPU_USE_NUMA a tile valid on another NUMA node is first copied
  // there. StarPU 1.4.10 sends from the first RAM node holding a valid copy, STARPU_MAIN_RAM
  // first, and otherwise fetches it into STARPU_MAIN_RAM (the least loaded node, RAM not being
  // limited: mpi/src/starpu_mpi.c _starpu_mpi_choose_node, sending branch; `_starpu_mpi_has_cuda`
  // is off with a network that is not CUDA-aware). Receptions go to STARPU_MAIN_RAM in both:
  // 1.4.10 receives where the handle is already allocated, STARPU_MAIN_RAM first, which the first
  // reception allocated.
  const Reception& rc = dag_.receptions[r];
  recv_state_[r] = kRecvTriggered;
  uint32_t h = data_.handle(rc.src, rc.tile);
  const int home = topo_.home(rc.src);
  send_node_[r] = static_cast<int8_t>(home);
  // The mechanism switched off sends as 1.4.10 does (mechanisms.hpp).
  const bool choose_node = cfg_.mpi_choose_node || !cfg_.mechanisms(Mechanism::mpi_main_ram);
  if (choose_node && !data_.valid_on(rc.src, h, home))
    for (int l = 0; l < data_.ram_nodes(rc.src); l++)
      if (data_.valid_on(rc.src, h, l)) {
        send_node_[r] = static_cast<int8_t>(l);
        break;
      }
  if (data_.valid_on(rc.src, h, send_node_[r]))
    enqueue(rc.src, true, r);
  else
    data_.request(rc.src, h, topo_.home(rc.src), kRecvFlag | r);
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
    if (m.requests.empty()) {
      m.suspended = true;
      sg4::this_actor::suspend();
      continue;
    }
    auto [send, r] = m.requests.front();
    m.requests.pop_front();
    if (cfg_.mpi_overhead_s > 0)
      numasim::sleep_for(cfg_.mpi_overhead_s);
    const Reception& rc = dag_.receptions[r];
    if (send) {
      recv_state_[r] = kRecvSent;
      data_.send_message(rc.src, rc.dst, rc.tile, r, send_node_[r]);
    } else {
      data_.receive(rc.dst, data_.handle(rc.dst, rc.tile), rc.version);
      recv_state_[r] = kRecvDone;
      received_(r);
    }
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
    const auto& src_requests = threads_[rc.src].requests;
    std::string s = "MPI message of " + tile_name(rc.tile) + " version " + std::to_string(rc.version) +
                    " from " + topo_.nodes()[rc.src].name + " to " + topo_.nodes()[rc.dst].name;
    if (recv_state_[r] == kRecvSent)
      s += " sent, not received";
    else if (std::find(src_requests.begin(), src_requests.end(), std::make_pair(true, r)) !=
             src_requests.end())
      s += " queued at the sender's MPI thread";
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
