// Copy requests and the actors that carry them (StarPU datawizard/data_request.c, and
// StarPU-SimGrid's transfer queues of core/simgrid.c): one runner per (source, destination)
// memory node pair, StarPU-SimGrid's ordering between GPU copies, accounting of every copy.
#include "datawizard/datawizard.hpp"
#include "numa_effects.hpp"
#include "sleep.hpp"

#include <algorithm>

XBT_LOG_NEW_DEFAULT_SUBCATEGORY(numasim_data_request, numasim, "numasim copy requests");

namespace numasim {

// A transfer record, reusing the slot of a finished one (records are referenced by index).
uint32_t DataWizard::new_transfer() {
  if (!free_transfers_.empty()) {
    uint32_t tid = free_transfers_.back();
    free_transfers_.pop_back();
    return tid;
  }
  transfers_.emplace_back();
  return static_cast<uint32_t>(transfers_.size() - 1);
}

int DataWizard::pending_copies(int gsrc, int gdst) const {
  int32_t rid = runner_of_pair_[static_cast<size_t>(gsrc) * topo_.mem().size() + gdst];
  return rid < 0 ? 0 : runners_[rid].pending;
}

bool DataWizard::sequential(const Transfer& later, const Transfer& earlier) const {
  // StarPU-SimGrid's ordering constraints between copies (core/simgrid.c transfers_are_sequential,
  // "observed with CUDA"): beyond one stream per (source, destination) pair (the runners), a
  // GPU-GPU copy waits for earlier copies into either of its GPUs, and a copy into a GPU waits
  // for earlier GPU-GPU copies from or to that GPU (crossed GPU-GPU copies included).
  if (later.gsrc == earlier.gsrc && later.gdst == earlier.gdst)
    return false; // same pair: the runner's FIFO
  bool later_gg = topo_.mem(later.gsrc).gpu && topo_.mem(later.gdst).gpu;
  bool earlier_gg = topo_.mem(earlier.gsrc).gpu && topo_.mem(earlier.gdst).gpu;
  if (later_gg && (earlier.gdst == later.gsrc || earlier.gdst == later.gdst))
    return true;
  return earlier_gg && (later.gdst == earlier.gsrc || later.gdst == earlier.gdst);
}

void DataWizard::start_transfer(uint32_t tid) {
  Transfer& t = transfers_[tid];
  t.submitted = t.start = sg4::Engine::get_clock();
  t.nwait = 0;
  t.thread = -1;
  if (!t.mpi && thread_copies_[t.gdst] && !topo_.mem(t.gsrc).gpu) {
    // A memcpy between RAM nodes: queued on the destination's request list for a driving thread
    // (datawizard/data_request.c _starpu_post_data_request wakes the workers that drive the
    // node: _starpu_wake_all_blocked_workers_on_node).
    ram_copy_q_[t.gdst].insert({t.prio, ram_seq_++, tid});
    hooks_.ram_copy_queued(t.gdst);
    return;
  }
  if (!t.mpi && (topo_.mem(t.gsrc).gpu || topo_.mem(t.gdst).gpu)) {
    auto& pending = gpu_copies_[t.rank];
    for (uint32_t o : pending)
      t.nwait += sequential(t, transfers_[o]);
    pending.push_back(tid);
  }
  int32_t& rid = runner_of_pair_[static_cast<size_t>(t.gsrc) * topo_.mem().size() + t.gdst];
  if (rid < 0) {
    rid = static_cast<int32_t>(runners_.size());
    runners_.emplace_back();
    runners_[rid].pending = 1;
    runners_[rid].queue.push_back(tid);
    int id = rid;
    runners_[rid].actor =
        sg4::Actor::create("runner", topo_.mem(t.gsrc).host, [this, id] { runner_loop(id); });
    return;
  }
  Runner& r = runners_[rid];
  r.pending++;
  r.queue.push_back(tid);
  if (r.suspended) {
    r.suspended = false;
    r.actor->resume();
  }
}

void DataWizard::runner_loop(int rid) {
  while (true) {
    if (runners_[rid].queue.empty()) {
      if (progress_.finished)
        return;
      runners_[rid].suspended = true;
      sg4::this_actor::suspend();
      continue;
    }
    uint32_t tid = runners_[rid].queue.front();
    if (transfers_[tid].nwait > 0) { // transfer_done of the copies it waits for resumes us
      if (progress_.finished)
        return;
      runners_[rid].suspended = true;
      sg4::this_actor::suspend();
      continue;
    }
    runners_[rid].queue.pop_front();
    if (!transfers_[tid].mpi) { // a device of the copy is in an allocation call: the copy waits
      const int gsrc = transfers_[tid].gsrc, gdst = transfers_[tid].gdst; // transfers_ may move
      for (int g : {gsrc, gdst})
        if (topo_.mem(g).gpu)
          if (const double left = ms_[g].blocked_until - sg4::Engine::get_clock(); left > 0)
            numasim::sleep_for(left);
      // A GPU -> RAM copy into a RAM node without a buffer: the GPU's driver, which handles the
      // request, allocates it first (DataWizard::allocate_ram).
      if (topo_.mem(gsrc).gpu && !topo_.mem(gdst).gpu)
        allocate_ram(transfers_[tid].rank, transfers_[tid].handle, gdst, driver_of(gsrc));
      // RAM -> RAM without thread copies (mechanism switched off): this actor allocates.
      if (!topo_.mem(gsrc).gpu && !topo_.mem(gdst).gpu && !cfg_.mechanisms(Mechanism::thread_copies))
        allocate_ram(transfers_[tid].rank, transfers_[tid].handle, gdst, nullptr);
    }
    const double start = sg4::Engine::get_clock();
    transfers_[tid].start = start;
    transfers_[tid].path = numa_->move(transfers_[tid]); // through pages, drivers, MPI thread
    if (!transfers_[tid].mpi) // a pinned allocation during the copy pauses the devices' DMA
      wait_out_holds(transfers_[tid].gsrc, transfers_[tid].gdst, start);
    transfer_done(tid);
  }
}

void DataWizard::account(int gsrc, int gdst, double bytes, double start, int path, int thread) {
  counters_.transfers++;
  for (int c : numa_->path_classes(path)) // the links the copy actually crossed
    classes_.add_bytes(c, bytes);
  if (log_transfers_)
    transfer_log_.push_back({start, sg4::Engine::get_clock(), bytes, gsrc, gdst, path, thread});
}

const Worker* DataWizard::driver_of(int gpu_gmem) const {
  const MemNode& m = topo_.mem(gpu_gmem);
  for (int wid : topo_.rank_workers(m.rank))
    if (topo_.workers()[wid].cuda && topo_.workers()[wid].mem == m.local)
      return &topo_.workers()[wid];
  return nullptr;
}

bool DataWizard::drives(const Worker& w, int gdst) const {
  const MemNode& m = topo_.mem(gdst);
  // A CPU worker drives its own (NUMA) memory node (drivers/cpu/driver_cpu.c
  // _starpu_cpu_init_worker_memory); a CUDA worker its GPU and every NUMA node
  // (drivers/cuda/driver_cuda.c _starpu_cuda_init_worker_memory: "This worker can also manage
  // transfers on NUMA nodes").
  return m.rank == w.rank && !m.gpu && (w.cuda || w.mem == m.local);
}

int32_t DataWizard::take_ram_copy(const Worker& w) {
  // only_fast: the thread takes no request whose destination still needs a pinned allocation
  // (StarPU 1.4's STARPU_CUDA_ONLY_FAST_ALLOC_OTHER_MEMNODES for CUDA drivers: copy_driver.c
  // _starpu_driver_copy_data_1_to_1 with _STARPU_DATAWIZARD_ONLY_FAST_ALLOC leaves it pending for
  // a CPU worker of the node).
  auto take = [&](int g, bool only_fast) -> int32_t {
    auto& q = ram_copy_q_[g];
    for (auto it = q.begin(); it != q.end(); ++it) { // prio request lists: highest priority first
      const uint32_t tid = it->tid;
      if (only_fast && !ram_alloc_[slot(transfers_[tid].handle, topo_.mem(g).local)])
        continue;
      q.erase(it);
      return static_cast<int32_t>(tid);
    }
    return -1;
  };
  if (!w.cuda)
    return take(global(w.rank, w.mem), false);
  const bool only_fast = cfg_.env_for(topo_.nodes()[w.rank].machine).cuda_only_fast_alloc_other_memnodes &&
                         numa_->pinned(w.rank);
  for (int l = 0; l < nram_[w.rank]; l++) // the NUMA nodes in order (__starpu_datawizard_progress)
    if (int32_t tid = take(global(w.rank, l), only_fast); tid >= 0)
      return tid;
  return -1;
}

bool DataWizard::allocate_ram(int rank, uint32_t h, int gdst, const Worker* thread, bool main_thread) {
  // The destination has no buffer yet: the thread handling the request allocates it
  // (datawizard/copy_driver.c _starpu_driver_copy_data_1_to_1 -> memalloc.c
  // _starpu_allocate_memory_on_node). A replica stays allocated when invalidated (memalloc.c:
  // replicate->allocated), and RAM is not limited (nothing evicted), so each (tile, RAM node) is
  // allocated once. With CUDA workers the allocation is pinned, cudaHostAlloc(Portable) in that
  // thread and no hwloc binding (datawizard/malloc.c _starpu_malloc_flags_on_node: `goto end`
  // before the hwloc branch), so cudaHostAlloc populates the pages where the thread runs.
  const size_t s = slot(h, topo_.mem(gdst).local);
  if (ram_alloc_[s])
    return false;
  ram_alloc_[s] = 1;
  count_ram_buffer(gdst);
  numa_->allocated(rank, h, gdst, thread, main_thread);
  const double per_mib = pinned_s_per_mib_[rank];
  const bool pinned = per_mib > 0 && cfg_.mechanisms(Mechanism::pinned_alloc);
  const double cost = pinned ? tile_bytes_ / 1048576.0 * per_mib : 0;
  if (events_) {
    const double t = sg4::Engine::get_clock();
    events_->add(EventType::Allocating, t, t + cost, thread ? thread->id : -1, gdst, tile_bytes_);
  }
  if (!pinned)
    return false;
  // A page-locked allocation holds the devices (CUDA C Programming Guide, "Implicit
  // Synchronization"; measured: what they run is paused, datawizard/malloc.hpp); portable memory is
  // pinned for every device of the node. The machine description's pinned_alloc_gpu_stall says
  // for which share of the call (1: all of it, 0: the devices keep running;
  // docs/pinned-allocations.md).
  const double now = sg4::Engine::get_clock();
  const double stall = cfg_.mechanisms(Mechanism::pinned_alloc_gpu_stall) ? cost * pinned_stall_[rank] : 0.0;
  if (stall > 0)
    for (size_t g = 0; g < ms_.size(); g++)
      if (topo_.mem(static_cast<int>(g)).rank == rank && topo_.mem(static_cast<int>(g)).gpu) {
        ms_[g].blocked_until = std::max(ms_[g].blocked_until, now + stall);
        ms_[g].holds.add(now, now + stall);
      }
  counters_.pinned_allocs++;
  (main_thread    ? counters_.pinned_allocs_main
   : !thread      ? counters_.pinned_allocs_unthreaded
   : thread->cuda ? counters_.pinned_allocs_cuda
                  : counters_.pinned_allocs_cpu)++;
  counters_.pinned_alloc_s += cost;
  counters_.pinned_gpu_stall_s += stall;
  numasim::sleep_for(cost);
  return true;
}

void DataWizard::note_reception_buffer(int rank, uint32_t h, int local) {
  const size_t s = slot(h, local);
  if (ram_alloc_[s])
    return;
  ram_alloc_[s] = 1;
  count_ram_buffer(global(rank, local));
  if (events_) {
    const double t = sg4::Engine::get_clock();
    events_->add(EventType::Allocating, t, t, -1, global(rank, local), tile_bytes_);
  }
}

void DataWizard::wait_out_holds(int gmem_a, int gmem_b, double start) const {
  auto holds = [this](int g) { return g >= 0 && topo_.mem(g).gpu ? &ms_[g].holds : nullptr; };
  numasim::wait_out_holds(holds(gmem_a), holds(gmem_b), start);
}

void DataWizard::run_ram_copy(uint32_t tid, Worker& w) {
  const double t0 = sg4::Engine::get_clock();
  transfers_[tid].thread = w.id;
  // Counted from this thread's own call: other threads allocate while it sleeps in cudaHostAlloc.
  if (allocate_ram(transfers_[tid].rank, transfers_[tid].handle, transfers_[tid].gdst, &w) && w.cuda)
    counters_.ram_copy_pinned_allocs_cuda++;
  const double start = sg4::Engine::get_clock();
  transfers_[tid].start = start;
  transfers_[tid].path = numa_->move(transfers_[tid], &w);
  counters_.thread_copies++;
  counters_.thread_copy_s += sg4::Engine::get_clock() - t0;
  if (events_)
    events_->add(EventType::Progressing, t0, sg4::Engine::get_clock(), w.id, transfers_[tid].gdst);
  transfer_done(tid);
}

// A GPU copy ended: the later copies that waited for it may start.
void DataWizard::release_sequential(uint32_t tid, const Transfer& t0) {
  // Resuming an actor yields to the others, which may start copies: resume after the list walk.
  std::vector<int32_t> ready;
  auto& pending = gpu_copies_[t0.rank];
  auto self = std::find(pending.begin(), pending.end(), tid);
  xbt_assert(self != pending.end(), "copy %u missing from the pending GPU copies", tid);
  for (auto it = self + 1; it != pending.end(); ++it) {
    Transfer& later = transfers_[*it];
    if (sequential(later, t0) && --later.nwait == 0)
      ready.push_back(runner_of_pair_[static_cast<size_t>(later.gsrc) * topo_.mem().size() + later.gdst]);
  }
  pending.erase(self);
  for (int32_t rid : ready)
    if (runners_[rid].suspended) {
      runners_[rid].suspended = false;
      runners_[rid].actor->resume();
    }
}

void DataWizard::transfer_done(uint32_t tid) {
  // No reference into transfers_ is held across calls that may request copies (eviction,
  // tidying, waiting allocations): a request may grow the vector.
  const Transfer t0 = [&] {
    Transfer c;
    const Transfer& t = transfers_[tid];
    c.rank = t.rank, c.handle = t.handle, c.gsrc = t.gsrc, c.gdst = t.gdst, c.mpi = t.mpi, c.recv = t.recv;
    c.version = t.version, c.start = t.start, c.path = t.path, c.thread = t.thread;
    return c;
  }();
  account(t0.gsrc, t0.gdst, tile_bytes_, t0.start, t0.path, t0.thread);
  if (!t0.mpi && (topo_.mem(t0.gsrc).gpu || topo_.mem(t0.gdst).gpu))
    release_sequential(tid, t0);
  if (t0.thread < 0)
    runners_[runner_of_pair_[static_cast<size_t>(t0.gsrc) * topo_.mem().size() + t0.gdst]].pending--;
  if (t0.mpi) {
    counters_.mpi_messages++;
    free_transfers_.push_back(tid);
    hooks_.delivered(t0.recv);
    return;
  }
  copy_landed(t0);
  // The record is freed only after its waiters are satisfied: waking a worker yields to the other
  // actors, and a request made meanwhile must not reuse this record (the swap below, which keeps
  // the vector's capacity, would then drop the new copy's waiters: a task waiting forever).
  std::vector<uint32_t> waiters;
  waiters.swap(transfers_[tid].waiters);
  for (uint32_t w : waiters)
    hooks_.ready(w);
  waiters.clear();
  transfers_[tid].waiters.swap(waiters); // keep the capacity for reuse
  free_transfers_.push_back(tid);
}

void DataWizard::send_message(int src, int dst, uint32_t tile, uint32_t recv, int src_local, int dst_local) {
  uint32_t tid = new_transfer();
  Transfer& t = transfers_[tid];
  t.rank = dst;
  t.handle = handle(dst, tile);
  t.gsrc = global(src, src_local);
  t.gdst = global(dst, dst_local);
  t.mpi = true;
  t.recv = recv;
  t.waiters.clear();
  start_transfer(tid);
}

void DataWizard::finish() {
  for (auto& r : runners_)
    if (r.suspended) {
      r.suspended = false;
      r.actor->resume();
    }
}

} // namespace numasim
