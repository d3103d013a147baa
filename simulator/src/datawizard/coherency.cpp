// Replicas and their coherency (StarPU datawizard/coherency.c): which memory nodes hold the
// current version of a tile, where a copy comes from, what a write invalidates.
#include "datawizard/datawizard.hpp"
#include "error.hpp"

#include <cmath>
#include <limits>

XBT_LOG_NEW_DEFAULT_SUBCATEGORY(numasim_coherency, numasim, "numasim replicas and coherency");

namespace numasim {

DataWizard::DataWizard(const Topology& topo, BusModel& bus, LinkClasses& classes, const Dag& dag,
                       const RunConfig& cfg, const Progress& progress, Hooks hooks)
    : topo_(topo), bus_(bus), classes_(classes), dag_(dag), cfg_(cfg), hooks_(std::move(hooks)),
      progress_(progress) {
  tile_bytes_ = static_cast<double>(cfg_.b) * cfg_.b * sizeof(double);
  mem_stride_ = topo_.mem_stride();
  const size_t nh = dag_.nhandles();
  if (nh * mem_stride_ >= MemState::kNoSlot)
    throw InputError(cfg_.file, "workload",
                     "fewer than 2^32 (tile, rank, memory node) slots: a smaller matrix");
  hstate_.assign(nh, {});
  fetch_id_.assign(nh * mem_stride_, -1);
  pins_.assign(nh * mem_stride_, 0);
  lru_prev_.assign(nh * mem_stride_, MemState::kNoSlot);
  lru_next_.assign(nh * mem_stride_, MemState::kNoSlot);
  in_lru_.assign(nh * mem_stride_, 0);
  evicting_.assign(nh * mem_stride_, 0);
  prefetch_tasks_.assign(nh * mem_stride_, 0);
  dirty_.assign(nh * mem_stride_, 0);
  ms_.resize(topo_.mem().size());
  // Initial data: each tile on its owner's main RAM node (first touch by the main thread).
  for (uint32_t t = 0; t < dag_.ntiles; t++)
    hstate_[t].valid = static_cast<MemMask>(1u << topo_.home(dag_.handle_rank[t])); // owner's handle: t
  // RAM replicas allocated: the owners' tiles, registered by the application before the run.
  ram_alloc_.assign(nh * mem_stride_, 0);
  for (uint32_t t = 0; t < dag_.ntiles; t++)
    ram_alloc_[slot(t, topo_.home(dag_.handle_rank[t]))] = 1;
  // Which RAM nodes have their copies run by a driving thread (a node with several RAM nodes);
  // pinned allocation costs per node: StarPU pins RAM allocations when a CUDA task can be
  // submitted (malloc.c _starpu_malloc_should_pin).
  const size_t nmem = topo_.mem().size();
  ram_copy_q_.resize(nmem);
  thread_copies_.assign(nmem, 0);
  pinned_s_per_mib_.assign(topo_.nranks(), 0.0);
  pinned_stall_.assign(topo_.nranks(), 1.0);
  nram_.assign(topo_.nranks(), 0);
  for (size_t r = 0; r < topo_.nranks(); r++) {
    int rams = 0;
    bool cuda = false;
    for (int wid : topo_.rank_workers(static_cast<int>(r)))
      cuda |= topo_.workers()[wid].cuda;
    for (const auto& g : topo_.nodes()[r].gpus)
      if (cuda && pinned_s_per_mib_[r] == 0) {
        pinned_s_per_mib_[r] = g.pinned_alloc_s_per_mib;
        pinned_stall_[r] = g.pinned_alloc_gpu_stall;
      }
    for (size_t g = 0; g < nmem; g++)
      rams +=
          topo_.mem(static_cast<int>(g)).rank == static_cast<int>(r) && !topo_.mem(static_cast<int>(g)).gpu;
    nram_[r] = rams; // RAM nodes come first (Topology::add_memory_nodes)
    if (rams < 2 || !cfg_.mechanisms(Mechanism::thread_copies))
      continue;
    for (size_t g = 0; g < nmem; g++)
      for (int wid : topo_.rank_workers(static_cast<int>(r)))
        thread_copies_[g] |= drives(topo_.workers()[wid], static_cast<int>(g));
  }
  init_ram_accounting();
  runner_of_pair_.assign(topo_.mem().size() * topo_.mem().size(), -1);
  gpu_copies_.resize(topo_.nranks());
  log_transfers_ = !cfg_.transfers.empty();
}

double DataWizard::tile_copy_estimate(int rank, int src_local, int dst_local) {
  const auto m = static_cast<size_t>(mem_stride_);
  if (tile_copy_estimate_.empty())
    tile_copy_estimate_.assign(topo_.nranks() * m * m, std::numeric_limits<double>::quiet_NaN());
  double& e = tile_copy_estimate_[(static_cast<size_t>(rank) * m + src_local) * m + dst_local];
  if (std::isnan(e))
    e = bus_.estimate(global(rank, src_local), global(rank, dst_local), tile_bytes_);
  return e;
}

int DataWizard::best_source(int rank, uint32_t h, int dst_local) {
  // _starpu_select_src_node: among valid replicas, the one with the best predicted time.
  MemMask valid = hstate_[h].valid;
  int best = -1;
  double best_t = std::numeric_limits<double>::infinity();
  for (int l = 0; l < mem_stride_; l++)
    if (valid & (1u << l)) {
      double t = tile_copy_estimate(rank, l, dst_local);
      if (t < best_t) {
        best_t = t;
        best = l;
      }
    }
  return best;
}

double DataWizard::transfer_penalty(const Task& t, const Worker& w) {
  double penalty = 0;
  for (uint8_t i = 0; i < t.nbuf; i++) {
    uint32_t h = t.handles[i];
    const HandleState& s = hstate_[h];
    if ((s.valid | s.fetching) & (1u << w.mem))
      continue; // present or already requested: _starpu_is_data_present_or_requested
    int src = best_source(w.rank, h, w.mem);
    if (src >= 0)
      penalty += tile_copy_estimate(w.rank, src, w.mem);
  }
  return penalty;
}

void DataWizard::touch(int rank, uint32_t h, int local) {
  const int g = global(rank, local);
  if (!topo_.mem(g).gpu)
    return;
  size_t s = slot(h, local);
  lru_erase(ms_[g], s);
  lru_push(ms_[g], s);
}

void DataWizard::drop_replica(int rank, uint32_t h, int local) {
  const int g = global(rank, local);
  MemState& m = ms_[g];
  change_valid(rank, h, [&] { hstate_[h].valid &= static_cast<MemMask>(~(1u << local)); });
  if (topo_.mem(g).gpu) {
    size_t s = slot(h, local);
    set_clean(rank, h, local);
    if (evicting_[s]) { // invalidated while its write-back was under way: nothing left to write back
      change_use(s, [&] { evicting_[s] = 0; });
      pending_evictions_--;
      m.pending_free -= tile_bytes_;
    }
    if (lru_erase(m, s)) {
      m.used -= tile_bytes_;
      if (events_)
        note_used(g);
      if (!m.waiting.empty() || !m.prefetch.empty())
        serve_waiting(g);
    }
  }
}

// Another waiter for a copy under way; a task that needs it now turns a prefetch into a fetch.
void DataWizard::join_request(uint32_t tid, uint32_t waiter, bool prefetch) {
  Transfer& t = transfers_[tid];
  if (waiter != kNone)
    t.waiters.push_back(waiter);
  if (!prefetch && t.prefetch) {
    t.prefetch = false;
    if (t.queued == 2) {
      MemState& m = ms_[t.gdst];
      m.prefetch.erase({t.prio, t.qseq, tid});
      t.queued = 1;
      m.waiting.insert({t.prio, t.qseq, tid});
      m.reserved += tile_bytes_;
      serve_waiting(t.gdst);
    }
  }
}

bool DataWizard::request(int rank, uint32_t h, int dst_local, uint32_t waiter, bool prefetch, int32_t prio) {
  HandleState& s = hstate_[h];
  MemMask bit = static_cast<MemMask>(1u << dst_local);
  if (s.valid & bit) {
    // A (pre)fetch that finds the data there moves it to the most recently used end
    // (coherency.c _starpu_fetch_data_on_node → _starpu_memchunk_recently_used, numasim:
    // datawizard/memalloc.cpp; StarPU does not touch the chunk when the task ends).
    touch(rank, h, dst_local);
    return true;
  }
  size_t sl = slot(h, dst_local);
  if (s.fetching & bit) {
    join_request(static_cast<uint32_t>(fetch_id_[sl]), waiter, prefetch);
    return false;
  }
  int src = best_source(rank, h, dst_local);
  xbt_assert(src >= 0, "no valid replica of handle %u on rank %d", h, rank);
  uint32_t tid = new_transfer();
  Transfer& t = transfers_[tid];
  t.rank = rank;
  t.handle = h;
  t.gsrc = global(rank, src);
  t.gdst = global(rank, dst_local);
  t.mpi = false;
  t.prefetch = prefetch;
  t.prio = prio;
  t.queued = 0;
  t.version = s.version;
  t.waiters.clear();
  if (waiter != kNone)
    t.waiters.push_back(waiter);
  s.fetching |= bit;
  change_use(sl, [&] { fetch_id_[sl] = static_cast<int32_t>(tid); });
  admit(tid);
  return false;
}

void DataWizard::prefetch_task(const Task& t, const Worker& w) {
  for (uint8_t i = 0; i < t.nbuf; i++) {
    uint32_t h = t.handles[i];
    const size_t sl = slot(h, w.mem);
    change_use(sl, [&] { prefetch_tasks_[sl]++; }); // coherency.c: nb_tasks_prefetch of the replica
    request(w.rank, h, w.mem, kNone, true, t.prio);
  }
}

void DataWizard::fetch_task(Task& t, uint32_t task, const Worker& w) {
  // _starpu_fetch_task_input: every operand must be valid on the worker's memory node.
  t.pending = 0;
  for (uint8_t i = 0; i < t.nbuf; i++) {
    uint32_t h = t.handles[i];
    size_t sl = slot(h, w.mem);
    change_use(sl, [&] {
      pins_[sl]++;
      if (prefetch_tasks_[sl] > 0) // _starpu_fetch_task_input: the task now holds it itself
        prefetch_tasks_[sl]--;
    });
    if (!request(w.rank, h, w.mem, task, false, t.prio))
      t.pending++;
  }
}

void DataWizard::task_done(const Task& t, const Worker& w) {
  // Write: the worker's replica becomes the only valid one (MSI invalidation).
  uint32_t written = t.handles[t.nbuf - 1];
  HandleState& s = hstate_[written];
  for (int l = 0; l < mem_stride_; l++)
    if (l != w.mem && (s.valid & (1u << l)))
      drop_replica(w.rank, written, l);
  change_valid(w.rank, written, [&] { s.valid = static_cast<MemMask>(1u << w.mem); });
  s.version++;
  const int g = global(w.rank, w.mem);
  const bool gpu = topo_.mem(g).gpu;
  if (gpu)
    set_dirty(w.rank, written, w.mem); // _starpu_memchunk_dirty
  for (uint8_t i = 0; i < t.nbuf; i++) {
    const size_t sl = slot(t.handles[i], w.mem);
    change_use(sl, [&] { pins_[sl]--; });
  }
  if (gpu)
    tidy(g);
  if (!ms_[g].waiting.empty() || !ms_[g].prefetch.empty()) // the operands are evictable again
    serve_waiting(g);
}

void DataWizard::receive(int rank, uint32_t h, uint32_t version, int local) {
  if (!ram_alloc_[slot(h, local)]) { // the reception buffer, unless allocated when posted (not charged)
    ram_alloc_[slot(h, local)] = 1;
    count_ram_buffer(global(rank, local));
  }
  // Received into RAM node `local`; this version replaces any older cached one.
  HandleState& s = hstate_[h];
  for (int l = 0; l < mem_stride_; l++)
    if (s.valid & (1u << l))
      drop_replica(rank, h, l);
  s.version = version;
  change_valid(rank, h, [&] { s.valid = static_cast<MemMask>(1u << local); });
}

// A local copy landed: the replica is valid unless the tile was rewritten meanwhile.
void DataWizard::copy_landed(const Transfer& t0) {
  int local = topo_.mem(t0.gdst).local;
  HandleState& s = hstate_[t0.handle];
  MemMask bit = static_cast<MemMask>(1u << local);
  s.fetching &= static_cast<MemMask>(~bit);
  const size_t sl = slot(t0.handle, local);
  change_use(sl, [&] { fetch_id_[sl] = -1; });
  if (s.version == t0.version) {
    if (pending_dirty_ > 0)
      for (int l = 0; l < mem_stride_; l++) // the replica it came from is no longer the only copy
        set_clean(t0.rank, t0.handle, l);
    change_valid(t0.rank, t0.handle, [&] { s.valid |= bit; });
  } else // the tile was rewritten meanwhile: the copy is stale
    drop_replica(t0.rank, t0.handle, local);
  if (local == topo_.home(t0.rank) && pending_evictions_ > 0)
    finish_eviction(t0.rank, t0.handle);
  if (topo_.mem(t0.gdst).gpu) {
    MemState& dm = ms_[t0.gdst];
    tidy(t0.gdst);
    dm.inflight--;
    if (!dm.waiting.empty() || !dm.prefetch.empty())
      serve_waiting(t0.gdst);
  }
}

OperandReadiness DataWizard::readiness(int rank, uint32_t h, int local) const {
  const HandleState& hs = hstate_[h];
  const MemMask bit = static_cast<MemMask>(1u << local);
  bool valid = hs.valid & bit, loading = hs.fetching & bit;
  // Allocated: valid, or its copy got its space (not waiting in an allocation queue).
  bool allocated =
      valid || (loading && transfers_[static_cast<uint32_t>(fetch_id_[slot(h, local)])].queued == 0);
  return {valid, loading, allocated};
}

std::string DataWizard::describe(int rank, uint32_t h, int local, const std::string& tile_name) const {
  const int g = global(rank, local);
  const MemNode& n = topo_.mem(g);
  const MemState& m = ms_[g];
  std::string s = tile_name + "@" + n.host->get_name() + ": ";
  const HandleState& hs = hstate_[h];
  if (hs.valid & (1u << local))
    return s + "valid";
  if (!(hs.fetching & (1u << local)))
    return s + "no copy requested (valid on mask " + std::to_string(hs.valid) + ")";
  const Transfer& t = transfers_[static_cast<uint32_t>(fetch_id_[slot(h, local)])];
  s += std::string(t.prefetch ? "prefetch" : "fetch") + " from " + topo_.mem(t.gsrc).host->get_name();
  char buf[160];
  if (t.queued) {
    std::snprintf(
        buf, sizeof buf,
        " waits for memory (%s queue; used %.0f + reserved %.0f of %.0f MiB, %d copies landing, %.0f MiB "
        "being written back)",
        t.queued == 1 ? "fetch" : "prefetch", m.used / 1048576, m.reserved / 1048576, n.capacity / 1048576,
        m.inflight, m.pending_free / 1048576);
    return s + buf;
  }
  if (t.nwait > 0)
    return s + " waits for " + std::to_string(t.nwait) + " earlier GPU copies";
  return s + " started, not landed";
}

} // namespace numasim
