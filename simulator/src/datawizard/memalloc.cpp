// GPU memory: allocation of replicas, LRU eviction, write-backs of sole copies and tidying
// (StarPU datawizard/memalloc.c, with the request queues of datawizard/data_request.c that wait
// for space). RAM is not limited.
#include "datawizard/datawizard.hpp"

#include <algorithm>

XBT_LOG_NEW_DEFAULT_SUBCATEGORY(numasim_memalloc, numasim, "numasim GPU memory allocation and eviction");

namespace numasim {

void DataWizard::count_evictable(MemState& m, uint8_t before, uint8_t after) {
  const uint8_t kind[2] = {kEvict, kEvictForPrefetch};
  for (int k = 0; k < 2; k++) {
    m.evictable[k] += ((after & kind[k]) != 0) - ((before & kind[k]) != 0);
    m.reusable[k] += ((after & kind[k]) && (after & kReuse)) - ((before & kind[k]) && (before & kReuse));
  }
}

bool DataWizard::eviction_counts_match() const {
  for (const MemState& m : ms_) {
    MemState counted;
    for (size_t s = m.lru_head; s != MemState::kNoSlot; s = lru_next_[s])
      count_evictable(counted, 0, eviction_state(s));
    for (int k = 0; k < 2; k++)
      if (counted.evictable[k] != m.evictable[k] || counted.reusable[k] != m.reusable[k])
        return false;
  }
  return true;
}

bool DataWizard::lru_erase(MemState& m, size_t s) {
  if (!in_lru_[s])
    return false;
  count_evictable(m, eviction_state(s), 0);
  const uint32_t p = lru_prev_[s], n = lru_next_[s];
  (p == MemState::kNoSlot ? m.lru_head : lru_next_[p]) = n;
  (n == MemState::kNoSlot ? m.lru_tail : lru_prev_[n]) = p;
  lru_prev_[s] = lru_next_[s] = MemState::kNoSlot;
  in_lru_[s] = 0;
  m.lru_size--;
  return true;
}

void DataWizard::lru_push(MemState& m, size_t s) {
  lru_prev_[s] = m.lru_tail;
  lru_next_[s] = MemState::kNoSlot;
  (m.lru_tail == MemState::kNoSlot ? m.lru_head : lru_next_[m.lru_tail]) = static_cast<uint32_t>(s);
  m.lru_tail = static_cast<uint32_t>(s);
  in_lru_[s] = 1;
  m.lru_size++;
  count_evictable(m, 0, eviction_state(s));
}

// A sole copy chosen for eviction: written back to the main RAM node first; it keeps its space,
// and stays a valid source, until the write-back ends (finish_eviction).
void DataWizard::write_back(int gmem, uint32_t victim) {
  const MemNode& n = topo_.mem(gmem);
  set_clean(n.rank, victim, n.local); // its write-back is submitted now
  const size_t s = slot(victim, n.local);
  change_use(s, [&] { evicting_[s] = 1; });
  pending_evictions_++;
  ms_[gmem].pending_free += tile_bytes_;
  counters_.eviction_writebacks++;
  request(n.rank, victim, topo_.home(n.rank), kNone); // or joins a write-back already under way
}

void DataWizard::make_room(int gmem, double need, bool for_prefetch) {
  // LRU eviction when the GPU memory is full (datawizard/memalloc.c, try_to_throw_mem_chunk):
  // unused replicas are freed; a replica that is the only valid copy (StarPU's OWNER state) is
  // first written back to the main RAM node (transfer_subtree_to_node waits for that request).
  const MemNode& n = topo_.mem(gmem);
  MemState& m = ms_[gmem];
  const int rank = n.rank, local = n.local;
  const uint8_t may_free = for_prefetch ? kEvictForPrefetch : kEvict;
  auto full = [&] { return m.used + need - m.pending_free > n.capacity; };
  // Each walk stops after its last candidate in the list (MemState::evictable, reusable): freeing
  // or writing back an entry changes no other entry of this memory, and serve_waiting, which
  // calls make_room, is not re-entered.
  // First, reuse clean chunks: every tile has the same allocation footprint, and an allocation
  // that does not fit first takes over, in LRU order, a chunk that can be thrown away without a
  // write-back (memalloc.c _starpu_allocate_interface → try_to_reuse_potentially_in_use_mc →
  // try_to_throw_mem_chunk skips STARPU_OWNER replicas when reusing: "Only reuse memchunks which
  // are easy to throw away (which is likely thanks to periodic tidying)").
  for (size_t it = m.lru_head, ahead = m.reusable[for_prefetch];
       full() && ahead > 0 && it != MemState::kNoSlot;) {
    const size_t s = it;
    it = lru_next_[s]; // drop_replica erases the victim's entry only
    const uint8_t e = eviction_state(s);
    if (!(e & may_free) || !(e & kReuse))
      continue;
    ahead--;
    drop_replica(rank, static_cast<uint32_t>(s / mem_stride_), local);
    counters_.evictions++;
  }
  // Only then the generic reclaim (_starpu_memory_reclaim_generic → free_potentially_in_use_mc),
  // in LRU order, which writes sole copies back first.
  for (size_t it = m.lru_head, ahead = m.evictable[for_prefetch];
       full() && ahead > 0 && it != MemState::kNoSlot;) {
    const size_t s = it;
    const uint32_t victim = static_cast<uint32_t>(s / mem_stride_);
    it = lru_next_[s]; // drop_replica erases the victim's entry only
    const uint8_t e = eviction_state(s);
    if (!(e & may_free))
      continue;
    ahead--;
    if (!(e & kReuse)) { // the only valid copy
      write_back(gmem, victim);
      continue;
    }
    drop_replica(rank, victim, local);
    counters_.evictions++;
    gpu_free_chunk(gmem);
  }
}

// The GPU's driver thread calls cudaMalloc or cudaFree: calls on one device follow each other,
// and the device's copies wait until the call ends (MemState::blocked_until; its CUDA worker
// launches nothing meanwhile: Simulation::execute).
double DataWizard::gpu_alloc_call(int gmem, double cost) {
  MemState& m = ms_[gmem];
  m.blocked_until = std::max(m.blocked_until, sg4::Engine::get_clock()) + cost;
  return m.blocked_until;
}

void DataWizard::gpu_free_chunk(int gmem) {
  // The generic reclaim frees the victim's chunk (memalloc.c _starpu_memory_reclaim_generic ->
  // free_potentially_in_use_mc -> do_free_mem_chunk -> driver_cuda.c _starpu_cuda_free_on_node:
  // cudaFree, which synchronises the device); the allocation that needed the room then calls
  // cudaMalloc. Reusing a clean chunk in place (try_to_reuse_potentially_in_use_mc) frees nothing.
  const MemNode& n = topo_.mem(gmem);
  MemState& m = ms_[gmem];
  m.chunks -= tile_bytes_;
  const double now = sg4::Engine::get_clock();
  double end = now;
  if (n.free_s > 0 && cfg_.mechanisms(Mechanism::cuda_malloc)) {
    end = gpu_alloc_call(gmem, n.free_s);
    counters_.gpu_frees++;
    counters_.gpu_free_s += n.free_s;
  }
  if (events_) {
    const Worker* driver = driver_of(gmem);
    events_->add(EventType::Freeing, std::max(now, end - n.free_s), end, driver ? driver->id : -1, gmem,
                 tile_bytes_);
  }
}

void DataWizard::note_used(int gmem) {
  const double now = sg4::Engine::get_clock();
  events_->add(EventType::Used, now, now, -1, gmem, ms_[gmem].used);
}

// Takes a waiting copy off its queue, allocates its replica and starts it.
void DataWizard::start_waiting(int gmem, std::set<AllocKey>& q, std::set<AllocKey>::iterator at) {
  const MemNode& n = topo_.mem(gmem);
  MemState& m = ms_[gmem];
  uint32_t tid = at->tid;
  q.erase(at);
  if (m.used + tile_bytes_ > n.capacity)
    counters_.overcommits++;
  m.used += tile_bytes_;
  m.peak_used = std::max(m.peak_used, m.used);
  const double now = sg4::Engine::get_clock();
  if (m.used > m.chunks + tile_bytes_ / 2) {
    // No chunk to reuse (memalloc.c _starpu_allocate_interface: try_to_find_reusable_mc, then the
    // driver's allocation, drivers/cuda/driver_cuda.c _starpu_cuda_malloc_on_node: cudaMemGetInfo
    // + cudaMalloc) by the GPU's driver thread, which handles the request; the copy waits for it.
    m.chunks += tile_bytes_;
    double end = now;
    if (n.malloc_s > 0 && cfg_.mechanisms(Mechanism::cuda_malloc)) {
      end = gpu_alloc_call(gmem, n.malloc_s);
      counters_.gpu_mallocs++;
      counters_.gpu_malloc_s += n.malloc_s;
    }
    if (events_) {
      const Worker* driver = driver_of(gmem);
      events_->add(EventType::Allocating, std::max(now, end - n.malloc_s), end, driver ? driver->id : -1,
                   gmem, tile_bytes_);
    }
  } else if (events_) {
    const Worker* driver = driver_of(gmem);
    events_->add(EventType::AllocatingReuse, now, now, driver ? driver->id : -1, gmem, tile_bytes_);
  }
  if (events_)
    note_used(gmem);
  Transfer& t = transfers_[tid];
  t.queued = 0;
  size_t s = slot(t.handle, n.local);
  lru_erase(m, s); // (never listed here: the replica was neither valid nor allocated)
  lru_push(m, s);
  // The copy starts now: from the best replica valid now (the one chosen at request time may
  // have been evicted or invalidated while the allocation waited).
  int src_local = topo_.mem(t.gsrc).local;
  if (!(hstate_[t.handle].valid & (1u << src_local))) {
    int src = best_source(t.rank, t.handle, n.local);
    if (src >= 0)
      t.gsrc = global(t.rank, src);
  }
  m.inflight++;
  start_transfer(tid);
}

// A request is taken from its list (and its memory allocated) only while fewer than
// MAX_PENDING_REQUESTS_PER_NODE (5; prefetches: MAX_PENDING_PREFETCH_REQUESTS_PER_NODE, 2)
// copies are under way between its source and this memory (data_request.c
// __starpu_handle_node_data_requests takes at most n − npending requests per peer node, highest
// priority first): copies are allocated just ahead of the links, not ahead of the memory.
std::set<AllocKey>::iterator DataWizard::startable(int gmem, std::set<AllocKey>& q, int limit) {
  const int local = topo_.mem(gmem).local;
  auto it = q.begin();
  for (; it != q.end(); ++it) {
    const Transfer& t = transfers_[it->tid];
    int src = topo_.mem(t.gsrc).local;
    if (!(hstate_[t.handle].valid & (1u << src)))
      src = best_source(t.rank, t.handle, local);
    if (src < 0 || pending_copies(global(t.rank, src), t.gdst) < limit)
      break;
  }
  return it;
}

// Eviction may start copies, and starting a copy resumes actors that may change the queues:
// the chosen entry is looked up again after make_room.
void DataWizard::serve_fetches(int gmem, bool& out_of_memory) {
  const MemNode& n = topo_.mem(gmem);
  MemState& m = ms_[gmem];
  for (auto it = startable(gmem, m.waiting, kMaxPendingFetches); it != m.waiting.end();
       it = startable(gmem, m.waiting, kMaxPendingFetches)) {
    const AllocKey key = *it;
    make_room(gmem, m.reserved, false);
    if (m.used + tile_bytes_ > n.capacity && (m.pending_free > 0 || m.inflight > 0)) {
      out_of_memory = true; // finish_eviction / transfer_done serve the queue again
      return;
    }
    if ((it = m.waiting.find(key)) == m.waiting.end())
      continue;
    m.reserved -= tile_bytes_;
    start_waiting(gmem, m.waiting, it);
  }
}

// Prefetches come after the task fetches (data_request.c: separate prefetch request lists,
// handled unless the fetch lists ran out of memory; datawizard.c ____starpu_datawizard_progress)
// and never overcommit: one that finds no room stays queued until a copy lands, a task ends or
// a fetch takes it over (request()).
void DataWizard::serve_prefetches(int gmem) {
  const MemNode& n = topo_.mem(gmem);
  MemState& m = ms_[gmem];
  while (true) {
    auto it = startable(gmem, m.prefetch, kMaxPendingPrefetches);
    if (it == m.prefetch.end())
      break; // transfer_done serves the queue again
    const AllocKey key = *it;
    make_room(gmem, tile_bytes_, true);
    if (m.used + tile_bytes_ > n.capacity)
      break;
    if ((it = m.prefetch.find(key)) == m.prefetch.end())
      continue;
    start_waiting(gmem, m.prefetch, it);
  }
}

void DataWizard::serve_waiting(int gmem) {
  // Allocations into a GPU memory are served in request order. One that does not fit waits
  // while evicted dirty replicas are being written back or copies into the memory are under way
  // (they become evictable when they land): the allocating request waits for the reclaim in
  // memalloc.c _starpu_allocate_interface, and a request that got -ENOMEM stays queued and is
  // retried (datawizard/data_request.c). With nothing left to evict or to wait for (every
  // replica in use by a task), the memory is overcommitted rather than deadlocking, and counted.
  MemState& m = ms_[gmem];
  if (m.admitting)
    return;
  m.admitting = true;
  bool out_of_memory = false;
  serve_fetches(gmem, out_of_memory);
  if (!out_of_memory)
    serve_prefetches(gmem);
  m.admitting = false;
}

void DataWizard::admit(uint32_t tid) {
  const int gdst = transfers_[tid].gdst;
  if (!topo_.mem(gdst).gpu) { // RAM is not limited
    start_transfer(tid);
    return;
  }
  MemState& m = ms_[gdst];
  Transfer& t = transfers_[tid];
  t.qseq = alloc_seq_++;
  if (t.prefetch) {
    t.queued = 2;
    m.prefetch.insert({t.prio, t.qseq, tid});
  } else {
    t.queued = 1;
    m.waiting.insert({t.prio, t.qseq, tid});
    m.reserved += tile_bytes_;
  }
  serve_waiting(gdst);
}

void DataWizard::set_clean(int rank, uint32_t h, int local) {
  size_t s = slot(h, local);
  if (!dirty_[s])
    return;
  dirty_[s] = 0;
  ms_[global(rank, local)].dirty--;
  pending_dirty_--;
}

void DataWizard::set_dirty(int rank, uint32_t h, int local) {
  size_t s = slot(h, local);
  if (dirty_[s])
    return;
  dirty_[s] = 1;
  ms_[global(rank, local)].dirty++;
  pending_dirty_++;
}

void DataWizard::tidy(int gmem) {
  // starpu_memchunk_tidy (datawizard/memalloc.c), run at each progress of a memory node: when
  // fewer than STARPU_MINIMUM_CLEAN_BUFFERS (5) % of the allocated buffers are clean, dirty ones
  // (oldest first) are written back to the main RAM node as idle requests, each counted clean at
  // once, until STARPU_TARGET_CLEAN_BUFFERS (10) % are; buffers a task holds are skipped.
  const MemNode& n = topo_.mem(gmem);
  MemState& m = ms_[gmem];
  const int64_t nb = static_cast<int64_t>(m.lru_size);
  int64_t clean = nb - m.dirty;
  if (m.dirty == 0 || clean >= nb * 5 / 100)
    return;
  for (size_t it = m.lru_head; it != MemState::kNoSlot && clean < nb * 10 / 100;) {
    uint32_t h = static_cast<uint32_t>(it / mem_stride_);
    it = lru_next_[it];
    size_t s = slot(h, n.local);
    if (!dirty_[s] || pins_[s] > 0 || evicting_[s])
      continue;
    set_clean(n.rank, h, n.local);
    clean++;
    request(n.rank, h, topo_.home(n.rank), kNone);
  }
}

void DataWizard::finish_eviction(int rank, uint32_t h) {
  // A write-back to the main RAM node ended: each replica of h evicted meanwhile is freed now,
  // unless a task got in while the copy ran or the copy is stale (memalloc.c: "a task got in,
  // abort"); then its space stays in use and the waiting allocations look for other victims.
  for (int l = 0; l < mem_stride_; l++) {
    size_t s = slot(h, l);
    if (!evicting_[s])
      continue;
    const int g = global(rank, l);
    change_use(s, [&] { evicting_[s] = 0; });
    pending_evictions_--;
    ms_[g].pending_free -= tile_bytes_;
    MemMask valid = hstate_[h].valid, bit = static_cast<MemMask>(1u << l);
    if ((valid & bit) && (valid & ~bit) && pins_[s] == 0 && fetch_id_[s] < 0) {
      drop_replica(rank, h, l);
      counters_.evictions++;
      gpu_free_chunk(g);
    }
    serve_waiting(g);
  }
}

} // namespace numasim
