#include "runtime.hpp"
#include "error.hpp"
#include "network.hpp"
#include "output.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

XBT_LOG_NEW_DEFAULT_CATEGORY(numasim_runtime, "numasim StarPU runtime model");

namespace numasim {

Simulation::Simulation(sg4::Engine& engine, RunConfig cfg) : engine_(engine), cfg_(std::move(cfg)), rng_(cfg_.seed)
{
  // CM02 with LV08's factors on Ethernet routes only, unless --cfg chose a model (network.hpp).
  const bool own_network_model = configure_network_model();
  // SimGrid reports a missing file as a runtime error (exit 1, an environment fault); here it is the
  // run description's `platform` key that is wrong.
  if (std::error_code ec; !std::filesystem::is_regular_file(cfg_.platform, ec) || !std::ifstream(cfg_.platform))
    throw InputError(cfg_.file, "platform", "a readable SimGrid platform file, got '" + cfg_.platform + "'");
  engine_.load_platform(cfg_.platform);
  if (own_network_model)
    install_ethernet_factors(engine_);
  engine_.seal_platform(); // routes are queried before the run (estimates, tests)
  nodes_ = discover_platform(engine_, cfg_.platform);
  cfg_.resolve_distribution(static_cast<int>(nodes_.size()));
  if (nodes_.size() > 65535)
    throw InputError(cfg_.platform, "nodes", "at most 65535 nodes");
  setup_nodes();
  load_models();
  dag_ = build_lu_dag(cfg_);
  tile_bytes_ = static_cast<double>(cfg_.b) * cfg_.b * sizeof(double);
  ntiles_ = static_cast<size_t>(cfg_.nt) * cfg_.nt;
  size_t nh = ntiles_ * nodes_.size();
  hstate_.assign(nh, {});
  fetch_id_.assign(nh * mem_stride_, -1);
  pins_.assign(nh * mem_stride_, 0);
  lru_prev_.assign(nh * mem_stride_, MemNode::kNoSlot);
  lru_next_.assign(nh * mem_stride_, MemNode::kNoSlot);
  in_lru_.assign(nh * mem_stride_, 0);
  evicting_.assign(nh * mem_stride_, 0);
  prefetch_tasks_.assign(nh * mem_stride_, 0);
  dirty_.assign(nh * mem_stride_, 0);
  // Initial data: each tile on its owner's main RAM node (first touch by the main thread).
  for (uint32_t t = 0; t < ntiles_; t++) {
    int r = cfg_.owner[t];
    hstate_[handle(r, t)].valid = static_cast<MemMask>(1u << home_[r]);
  }
  for (const auto& t : dag_.tasks)
    prio_levels_.push_back(t.prio);
  std::sort(prio_levels_.begin(), prio_levels_.end(), std::greater<>());
  prio_levels_.erase(std::unique(prio_levels_.begin(), prio_levels_.end()), prio_levels_.end());
  prio_rank_.resize(dag_.tasks.size());
  for (size_t i = 0; i < dag_.tasks.size(); i++)
    prio_rank_[i] = static_cast<uint32_t>(
        std::lower_bound(prio_levels_.begin(), prio_levels_.end(), dag_.tasks[i].prio, std::greater<>()) -
        prio_levels_.begin());
  for (auto& w : workers_)
    w.queued_ps.assign(prio_levels_.size() + 1, 0);
  numa_ = std::make_unique<NumaEffects>(*this); // pages, kernel traffic, thread paths (numa_effects.cpp)
  numa_->init();
  routes_.resize(mem_.size() * mem_.size());
  runner_of_pair_.assign(mem_.size() * mem_.size(), -1);
  central_.resize(nodes_.size());
  gpu_copies_.resize(nodes_.size());
  log_transfers_ = !cfg_.transfers.empty();
  recv_state_.assign(dag_.receptions.size(), 0);
}

// Memory StarPU lets itself allocate on a GPU without STARPU_LIMIT_CUDA_MEM: 90% of the
// device memory, in whole MiB (drivers/cuda/driver_cuda.c _starpu_cuda_limit_gpu_mem_if_needed,
// FREE_MARGIN 0.9; StarPU-SimGrid takes the device memory from the host's memsize property).
static double usable_gpu_memory(double bytes)
{
  const double mib = 1024.0 * 1024.0;
  return std::floor(std::floor(bytes / mib) * 0.9) * mib;
}

void Simulation::setup_nodes()
{
  int nranks = static_cast<int>(nodes_.size());
  threads_.resize(nranks);
  rank_mem_.resize(nranks);
  home_.resize(nranks);
  rank_cuda_devices_.resize(nranks);
  rank_workers_.resize(nranks);
  mpi_.resize(nranks);
  for (int r = 0; r < nranks; r++) {
    const MachineNode& n = nodes_[r];
    if (!cfg_.perfmodels.count(n.machine))
      throw InputError(cfg_.file, "perfmodels", "an entry for machine type '" + n.machine + "' (node " + n.name + ")");
    const StarpuEnv& env = cfg_.env_for(n.machine); // per machine type (env_per_machine)
    threads_[r] = place_threads(n, env);
    const NodeThreads& th = threads_[r];
    // Memory nodes (src/core/topology.c): with STARPU_USE_NUMA=1 one RAM node per NUMA node,
    // else one RAM node whose pages the main thread first-touched (its NUMA node).
    auto add_mem = [&](bool gpu, int numa, sg4::Host* host, double cap) {
      MemNode m{r, static_cast<int>(rank_mem_[r].size()), gpu, numa, host, cap};
      rank_mem_[r].push_back(static_cast<int>(mem_.size()));
      mem_.push_back(m);
      return m.local;
    };
    if (env.use_numa) {
      for (const auto& ram : n.rams)
        add_mem(false, ram.numa, ram.host, 0);
      // STARPU_MAIN_RAM (memory node 0, where the application registers its tiles) is the NUMA
      // node of the first CPU worker: _starpu_init_numa_node (src/core/topology.c) registers one
      // RAM memory node per NUMA node of the CPU workers, in worker order.
      home_[r] = th.main_numa;
      for (const auto& wp : th.workers)
        if (!wp.cuda) {
          home_[r] = wp.numa;
          break;
        }
    } else {
      const RamInfo& ram = n.ram_of_numa(th.main_numa);
      home_[r] = add_mem(false, ram.numa, ram.host, 0);
    }
    std::map<int, int> gpu_mem;
    for (const auto& wp : th.workers)
      if (wp.cuda)
        for (const auto& g : n.gpus)
          if (g.index == wp.gpu && !gpu_mem.count(g.index))
            gpu_mem[g.index] = add_mem(true, g.numa, g.host, usable_gpu_memory(g.memory));
    rank_cuda_devices_[r] = static_cast<int>(gpu_mem.size());
    if (rank_mem_[r].size() > kMaxMemNodes)
      throw InputError(cfg_.platform, "node " + n.name,
                       "at most " + std::to_string(kMaxMemNodes) + " memory nodes (RAM NUMA nodes + GPUs)");
    mem_stride_ = std::max(mem_stride_, static_cast<int>(rank_mem_[r].size()));
    for (const auto& wp : th.workers) {
      Worker w;
      w.id = static_cast<int>(workers_.size());
      w.rank = r;
      w.cuda = wp.cuda;
      w.core = wp.core;
      w.numa = wp.numa;
      w.gpu = wp.gpu;
      if (wp.cuda) {
        w.mem = gpu_mem.at(wp.gpu);
        w.devid = cfg_.env.homogeneous_cuda ? 0 : wp.gpu;
        for (const auto& g : n.gpus)
          if (g.index == wp.gpu) {
            w.host = g.host;
            w.task_overhead = g.task_overhead;
          }
        w.name = w.host->get_name();
      } else {
        // A CPU worker works on its NUMA node's memory node when there is one per NUMA node.
        w.mem = env.use_numa ? wp.numa : home_[r];
        w.devid = 0;
        for (const auto& c : n.cpus)
          if (c.index == wp.core)
            w.host = c.host;
        w.name = w.host->get_name();
      }
      rank_workers_[r].push_back(w.id);
      workers_.push_back(std::move(w));
    }
    if (rank_workers_[r].empty())
      throw InputError("env", "STARPU_NCPU/STARPU_NCUDA", "at least one worker on node " + n.name);
  }
}

void Simulation::load_models()
{
  // One model file per (machine type, kind); the footprint is that of the kind's nbuf b×b matrices.
  const int nbuf[kNumKinds] = {1, 2, 2, 3};
  std::map<std::pair<std::string, std::string>, PerfModel> cache;
  for (auto& w : workers_) {
    const std::string& machine = nodes_[w.rank].machine;
    for (int k = 0; k < kNumKinds; k++) {
      if (w.cuda && !cfg_.kind_on_cuda[k]) {
        w.length[k] = -1;
        continue;
      }
      auto key = std::make_pair(machine, cfg_.symbols[k]);
      auto it = cache.find(key);
      if (it == cache.end())
        it = cache.emplace(key, PerfModel::load(cfg_.perfmodels.at(machine), cfg_.symbols[k], machine)).first;
      const PerfModel& m = it->second;
      uint32_t fp = matrix_task_footprint(nbuf[k], cfg_.b, cfg_.b);
      uint64_t size = static_cast<uint64_t>(nbuf[k]) * cfg_.b * cfg_.b * sizeof(double);
      const HistoryEntry* e = m.lookup(w.cuda ? 1 : 0, w.devid, 1, fp, size);
      if (!e) {
        char fps[16];
        std::snprintf(fps, sizeof fps, "%08x", fp);
        throw InputError(m.path, std::string(w.cuda ? "cuda" : "cpu") + (w.cuda ? std::to_string(w.devid) : "") +
                                     "_impl0",
                         std::string("a calibrated history entry for footprint ") + fps + " (size " + std::to_string(size) +
                             ", tile " + std::to_string(cfg_.b) + ") used by worker " + w.name);
      }
      w.length[k] = e->mean_us * 1e-6;
      w.dev[k] = e->dev_us * 1e-6;
    }
  }
}

Simulation::Route& Simulation::route(int gsrc, int gdst)
{
  Route& r = routes_[static_cast<size_t>(gsrc) * mem_.size() + gdst];
  if (!r.known) {
    std::vector<sg4::Link*> links;
    double lat = 0;
    mem_[gsrc].host->route_to(mem_[gdst].host, links, &lat);
    r.latency = lat;
    r.bandwidth = std::numeric_limits<double>::infinity();
    for (auto* l : links) {
      r.bandwidth = std::min(r.bandwidth, l->get_bandwidth());
      r.links.push_back(l->get_name());
      std::string cls = link_class(l->get_name());
      auto it = std::find(class_names_.begin(), class_names_.end(), cls);
      if (it == class_names_.end()) {
        class_names_.push_back(cls);
        class_bytes_.push_back(0);
        it = class_names_.end() - 1;
      }
      r.classes.push_back(static_cast<int>(it - class_names_.begin()));
    }
    r.known = true;
  }
  return r;
}

double Simulation::estimate(int gsrc, int gdst, double bytes)
{
  if (gsrc == gdst)
    return 0;
  // StarPU's bus model, core/perfmodel/perfmodel_bus.c starpu_transfer_predict:
  // latency + size / bandwidth * 2 * ngpus. ngpus is starpu_bus_get_ngpus(), which stays at its
  // default, the node's number of CUDA devices in use (profiling/profiling.c), for every bus
  // whose route crosses a shared host link or starts from RAM (core/simgrid.c
  // _starpu_simgrid_count_ngpus only sets it for single-link GPU routes or PCI "through" links).
  const Route& r = route(gsrc, gdst);
  double ngpus = mem_[gsrc].gpu && r.classes.size() == 1 ? 1.0 : rank_cuda_devices_[mem_[gsrc].rank];
  return r.latency + (std::isfinite(r.bandwidth) && r.bandwidth > 0 ? bytes / r.bandwidth * 2 * ngpus : 0);
}

std::vector<std::string> Simulation::route_links(int gsrc, int gdst) { return route(gsrc, gdst).links; }

// ---------------------------------------------------------------- data management

int Simulation::best_source(int rank, uint32_t h, int dst_local)
{
  // _starpu_select_src_node: among valid replicas, the one with the best predicted time.
  MemMask valid = hstate_[h].valid;
  int best = -1;
  double best_t = std::numeric_limits<double>::infinity();
  for (int l = 0; l < mem_stride_; l++)
    if (valid & (1u << l)) {
      double t = estimate(rank_mem_[rank][l], rank_mem_[rank][dst_local], tile_bytes_);
      if (t < best_t) {
        best_t = t;
        best = l;
      }
    }
  return best;
}

double Simulation::data_penalty(const Task& t, const Worker& w)
{
  double penalty = 0;
  for (uint8_t i = 0; i < t.nbuf; i++) {
    uint32_t h = handle(w.rank, t.tiles[i]);
    const HandleState& s = hstate_[h];
    if ((s.valid | s.fetching) & (1u << w.mem))
      continue; // present or already requested: _starpu_is_data_present_or_requested
    int src = best_source(w.rank, h, w.mem);
    if (src >= 0)
      penalty += estimate(rank_mem_[w.rank][src], rank_mem_[w.rank][w.mem], tile_bytes_);
  }
  return penalty;
}

void Simulation::touch(int rank, uint32_t h, int local)
{
  MemNode& m = mem_[rank_mem_[rank][local]];
  if (!m.gpu)
    return;
  size_t s = slot(h, local);
  lru_erase(m, s);
  lru_push(m, s);
}

bool Simulation::lru_erase(MemNode& m, size_t s)
{
  if (!in_lru_[s])
    return false;
  size_t p = lru_prev_[s], n = lru_next_[s];
  (p == MemNode::kNoSlot ? m.lru_head : lru_next_[p]) = n;
  (n == MemNode::kNoSlot ? m.lru_tail : lru_prev_[n]) = p;
  lru_prev_[s] = lru_next_[s] = MemNode::kNoSlot;
  in_lru_[s] = 0;
  m.lru_size--;
  return true;
}

void Simulation::lru_push(MemNode& m, size_t s)
{
  lru_prev_[s] = m.lru_tail;
  lru_next_[s] = MemNode::kNoSlot;
  (m.lru_tail == MemNode::kNoSlot ? m.lru_head : lru_next_[m.lru_tail]) = s;
  m.lru_tail = s;
  in_lru_[s] = 1;
  m.lru_size++;
}

void Simulation::drop_replica(int rank, uint32_t h, int local)
{
  MemNode& m = mem_[rank_mem_[rank][local]];
  hstate_[h].valid &= static_cast<MemMask>(~(1u << local));
  if (m.gpu) {
    size_t s = slot(h, local);
    set_clean(rank, h, local);
    if (evicting_[s]) { // invalidated while its write-back was under way: nothing left to write back
      evicting_[s] = 0;
      pending_evictions_--;
      m.pending_free -= tile_bytes_;
    }
    if (lru_erase(m, s)) {
      m.used -= tile_bytes_;
      if (!m.waiting.empty() || !m.prefetch.empty())
        serve_waiting(m);
    }
  }
}

void Simulation::make_room(MemNode& m, double need, bool for_prefetch)
{
  // LRU eviction when the GPU memory is full (datawizard/memalloc.c, try_to_throw_mem_chunk):
  // unused replicas are freed; a replica that is the only valid copy (StarPU's OWNER state) is
  // first written back to the main RAM node (transfer_subtree_to_node waits for that request)
  // and keeps its space, and stays a valid source, until the write-back ends (finish_eviction).
  const int rank = m.rank, local = m.local;
  auto evictable = [&](uint32_t victim) {
    size_t vs = slot(victim, local);
    if (pins_[vs] > 0 || fetch_id_[vs] >= 0 || evicting_[vs]) // in use (memalloc.c may_free_subtree)
      return false;
    // memalloc.c starpu_data_can_evict: a prefetch does not evict data prefetched for tasks that
    // have not fetched it yet.
    return !(for_prefetch && prefetch_tasks_[vs] > 0);
  };
  // First, reuse clean chunks: every tile has the same allocation footprint, and an allocation
  // that does not fit first takes over, in LRU order, a chunk that can be thrown away without a
  // write-back (memalloc.c _starpu_allocate_interface → try_to_reuse_potentially_in_use_mc →
  // try_to_throw_mem_chunk skips STARPU_OWNER replicas when reusing: "Only reuse memchunks which
  // are easy to throw away (which is likely thanks to periodic tidying)").
  for (size_t it = lru_first(m); m.used + need - m.pending_free > m.capacity && it != MemNode::kNoSlot;) {
    uint32_t victim = static_cast<uint32_t>(it / mem_stride_);
    it = lru_after(it); // drop_replica erases the victim's entry only
    if (!evictable(victim) || hstate_[victim].valid == (1u << local))
      continue;
    drop_replica(rank, victim, local);
    sum_.evictions++;
  }
  // Only then the generic reclaim (_starpu_memory_reclaim_generic → free_potentially_in_use_mc),
  // in LRU order, which writes sole copies back first.
  size_t it = lru_first(m);
  while (m.used + need - m.pending_free > m.capacity && it != MemNode::kNoSlot) {
    uint32_t victim = static_cast<uint32_t>(it / mem_stride_);
    it = lru_after(it); // drop_replica erases the victim's entry only
    size_t vs = slot(victim, local);
    if (!evictable(victim))
      continue;
    if (hstate_[victim].valid == (1u << local)) {
      set_clean(rank, victim, local); // its write-back is submitted now
      evicting_[vs] = 1;
      pending_evictions_++;
      m.pending_free += tile_bytes_;
      sum_.eviction_writebacks++;
      request(rank, victim, home_[rank], kNone); // or joins a write-back already under way
      continue;
    }
    drop_replica(rank, victim, local);
    sum_.evictions++;
  }
}

void Simulation::serve_waiting(MemNode& m)
{
  // Allocations into a GPU memory are served in request order. One that does not fit waits
  // while evicted dirty replicas are being written back or copies into the memory are under way
  // (they become evictable when they land): the allocating request waits for the reclaim in
  // memalloc.c _starpu_allocate_interface, and a request that got -ENOMEM stays queued and is
  // retried (datawizard/data_request.c). With nothing left to evict or to wait for (every
  // replica in use by a task), the memory is overcommitted rather than deadlocking, and counted.
  if (m.admitting)
    return;
  m.admitting = true;
  auto start = [&](std::set<AllocKey>& q, std::set<AllocKey>::iterator at) {
    uint32_t tid = at->tid;
    q.erase(at);
    if (m.used + tile_bytes_ > m.capacity)
      sum_.overcommits++;
    m.used += tile_bytes_;
    m.peak_used = std::max(m.peak_used, m.used);
    Transfer& t = transfers_[tid];
    t.queued = 0;
    size_t s = slot(t.handle, m.local);
    lru_erase(m, s); // (never listed here: the replica was neither valid nor allocated)
    lru_push(m, s);
    // The copy starts now: from the best replica valid now (the one chosen at request time may
    // have been evicted or invalidated while the allocation waited).
    int src_local = mem_[t.gsrc].local;
    if (!(hstate_[t.handle].valid & (1u << src_local))) {
      int src = best_source(t.rank, t.handle, m.local);
      if (src >= 0)
        t.gsrc = rank_mem_[t.rank][src];
    }
    m.inflight++;
    start_transfer(tid);
  };
  // A request is taken from its list (and its memory allocated) only while fewer than
  // MAX_PENDING_REQUESTS_PER_NODE (5; prefetches: MAX_PENDING_PREFETCH_REQUESTS_PER_NODE, 2)
  // copies are under way between its source and this memory (data_request.c
  // __starpu_handle_node_data_requests takes at most n − npending requests per peer node, highest
  // priority first): copies are allocated just ahead of the links, not ahead of the memory.
  auto startable = [&](std::set<AllocKey>& q, int limit) {
    auto it = q.begin();
    for (; it != q.end(); ++it) {
      const Transfer& t = transfers_[it->tid];
      int src = mem_[t.gsrc].local;
      if (!(hstate_[t.handle].valid & (1u << src)))
        src = best_source(t.rank, t.handle, m.local);
      if (src < 0 || pending_copies(rank_mem_[t.rank][src], t.gdst) < limit)
        break;
    }
    return it;
  };
  bool out_of_memory = false;
  // Eviction may start copies, and starting a copy resumes actors that may change the queues:
  // the chosen entry is looked up again after make_room.
  for (auto it = startable(m.waiting, kMaxPendingFetches); it != m.waiting.end();
       it = startable(m.waiting, kMaxPendingFetches)) {
    const AllocKey key = *it;
    make_room(m, m.reserved, false);
    if (m.used + tile_bytes_ > m.capacity && (m.pending_free > 0 || m.inflight > 0)) {
      out_of_memory = true; // finish_eviction / transfer_done serve the queue again
      break;
    }
    if ((it = m.waiting.find(key)) == m.waiting.end())
      continue;
    m.reserved -= tile_bytes_;
    start(m.waiting, it);
  }
  // Prefetches come after the task fetches (data_request.c: separate prefetch request lists,
  // handled unless the fetch lists ran out of memory; datawizard.c ____starpu_datawizard_progress)
  // and never overcommit: one that finds no room stays queued until a copy lands, a task ends or
  // a fetch takes it over (request()).
  while (!out_of_memory) {
    auto it = startable(m.prefetch, kMaxPendingPrefetches);
    if (it == m.prefetch.end())
      break; // transfer_done serves the queue again
    const AllocKey key = *it;
    make_room(m, tile_bytes_, true);
    if (m.used + tile_bytes_ > m.capacity)
      break;
    if ((it = m.prefetch.find(key)) == m.prefetch.end())
      continue;
    start(m.prefetch, it);
  }
  m.admitting = false;
}

int Simulation::pending_copies(int gsrc, int gdst) const
{
  int32_t rid = runner_of_pair_[static_cast<size_t>(gsrc) * mem_.size() + gdst];
  return rid < 0 ? 0 : runners_[rid].pending;
}

void Simulation::admit(uint32_t tid)
{
  MemNode& m = mem_[transfers_[tid].gdst];
  if (!m.gpu) { // RAM is not limited
    start_transfer(tid);
    return;
  }
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
  serve_waiting(m);
}

void Simulation::set_clean(int rank, uint32_t h, int local)
{
  size_t s = slot(h, local);
  if (!dirty_[s])
    return;
  dirty_[s] = 0;
  mem_[rank_mem_[rank][local]].dirty--;
  pending_dirty_--;
}

void Simulation::tidy(MemNode& m)
{
  // starpu_memchunk_tidy (datawizard/memalloc.c), run at each progress of a memory node: when
  // fewer than STARPU_MINIMUM_CLEAN_BUFFERS (5) % of the allocated buffers are clean, dirty ones
  // (oldest first) are written back to the main RAM node as idle requests, each counted clean at
  // once, until STARPU_TARGET_CLEAN_BUFFERS (10) % are; buffers a task holds are skipped.
  const int64_t nb = static_cast<int64_t>(m.lru_size);
  int64_t clean = nb - m.dirty;
  if (m.dirty == 0 || clean >= nb * 5 / 100)
    return;
  for (size_t it = lru_first(m); it != MemNode::kNoSlot && clean < nb * 10 / 100;) {
    uint32_t h = static_cast<uint32_t>(it / mem_stride_);
    it = lru_after(it);
    size_t s = slot(h, m.local);
    if (!dirty_[s] || pins_[s] > 0 || evicting_[s])
      continue;
    set_clean(m.rank, h, m.local);
    clean++;
    request(m.rank, h, home_[m.rank], kNone);
  }
}

void Simulation::finish_eviction(int rank, uint32_t h)
{
  // A write-back to the main RAM node ended: each replica of h evicted meanwhile is freed now,
  // unless a task got in while the copy ran or the copy is stale (memalloc.c: "a task got in,
  // abort"); then its space stays in use and the waiting allocations look for other victims.
  for (int l = 0; l < mem_stride_; l++) {
    size_t s = slot(h, l);
    if (!evicting_[s])
      continue;
    MemNode& m = mem_[rank_mem_[rank][l]];
    evicting_[s] = 0;
    pending_evictions_--;
    m.pending_free -= tile_bytes_;
    MemMask valid = hstate_[h].valid, bit = static_cast<MemMask>(1u << l);
    if ((valid & bit) && (valid & ~bit) && pins_[s] == 0 && fetch_id_[s] < 0) {
      drop_replica(rank, h, l);
      sum_.evictions++;
    }
    serve_waiting(m);
  }
}
// A transfer record, reusing the slot of a finished one (records are referenced by index).
uint32_t Simulation::new_transfer()
{
  if (!free_transfers_.empty()) {
    uint32_t tid = free_transfers_.back();
    free_transfers_.pop_back();
    return tid;
  }
  transfers_.emplace_back();
  return static_cast<uint32_t>(transfers_.size() - 1);
}


bool Simulation::request(int rank, uint32_t h, int dst_local, uint32_t waiter, bool prefetch, int32_t prio)
{
  HandleState& s = hstate_[h];
  MemMask bit = static_cast<MemMask>(1u << dst_local);
  if (s.valid & bit) {
    // A (pre)fetch that finds the data there moves it to the most recently used end
    // (coherency.c _starpu_fetch_data_on_node → _starpu_memchunk_recently_used; StarPU does not
    // touch the chunk when the task ends).
    touch(rank, h, dst_local);
    return true;
  }
  size_t sl = slot(h, dst_local);
  if (s.fetching & bit) {
    uint32_t tid = static_cast<uint32_t>(fetch_id_[sl]);
    Transfer& t = transfers_[tid];
    if (waiter != kNone)
      t.waiters.push_back(waiter);
    if (!prefetch && t.prefetch) { // a task needs it now: the prefetch becomes a fetch
      t.prefetch = false;
      if (t.queued == 2) {
        MemNode& m = mem_[t.gdst];
        m.prefetch.erase({t.prio, t.qseq, tid});
        t.queued = 1;
        m.waiting.insert({t.prio, t.qseq, tid});
        m.reserved += tile_bytes_;
        serve_waiting(m);
      }
    }
    return false;
  }
  int src = best_source(rank, h, dst_local);
  xbt_assert(src >= 0, "no valid replica of handle %u on rank %d", h, rank);
  uint32_t tid = new_transfer();
  Transfer& t = transfers_[tid];
  t.rank = rank;
  t.handle = h;
  t.gsrc = rank_mem_[rank][src];
  t.gdst = rank_mem_[rank][dst_local];
  t.mpi = false;
  t.prefetch = prefetch;
  t.prio = prio;
  t.queued = 0;
  t.version = s.version;
  t.waiters.clear();
  if (waiter != kNone)
    t.waiters.push_back(waiter);
  s.fetching |= bit;
  fetch_id_[sl] = static_cast<int32_t>(tid);
  admit(tid);
  return false;
}

bool Simulation::sequential(const Transfer& later, const Transfer& earlier) const
{
  // StarPU-SimGrid's ordering constraints between copies (core/simgrid.c transfers_are_sequential,
  // "observed with CUDA"): beyond one stream per (source, destination) pair (the runners), a
  // GPU-GPU copy waits for earlier copies into either of its GPUs, and a copy into a GPU waits
  // for earlier GPU-GPU copies from or to that GPU (crossed GPU-GPU copies included).
  if (later.gsrc == earlier.gsrc && later.gdst == earlier.gdst)
    return false; // same pair: the runner's FIFO
  bool later_gg = mem_[later.gsrc].gpu && mem_[later.gdst].gpu;
  bool earlier_gg = mem_[earlier.gsrc].gpu && mem_[earlier.gdst].gpu;
  if (later_gg && (earlier.gdst == later.gsrc || earlier.gdst == later.gdst))
    return true;
  return earlier_gg && (later.gdst == earlier.gsrc || later.gdst == earlier.gdst);
}

void Simulation::start_transfer(uint32_t tid)
{
  Transfer& t = transfers_[tid];
  t.start = sg4::Engine::get_clock();
  t.nwait = 0;
  if (!t.mpi && (mem_[t.gsrc].gpu || mem_[t.gdst].gpu)) {
    auto& pending = gpu_copies_[t.rank];
    for (uint32_t o : pending)
      t.nwait += sequential(t, transfers_[o]);
    pending.push_back(tid);
  }
  int32_t& rid = runner_of_pair_[static_cast<size_t>(t.gsrc) * mem_.size() + t.gdst];
  if (rid < 0) {
    rid = static_cast<int32_t>(runners_.size());
    runners_.emplace_back();
    runners_[rid].pending = 1;
    runners_[rid].queue.push_back(tid);
    int id = rid;
    runners_[rid].actor = sg4::Actor::create("runner", mem_[t.gsrc].host, [this, id] { runner_loop(id); });
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

void Simulation::runner_loop(int rid)
{
  while (true) {
    if (runners_[rid].queue.empty()) {
      if (finished_)
        return;
      runners_[rid].suspended = true;
      sg4::this_actor::suspend();
      continue;
    }
    uint32_t tid = runners_[rid].queue.front();
    if (transfers_[tid].nwait > 0) { // transfer_done of the copies it waits for resumes us
      if (finished_)
        return;
      runners_[rid].suspended = true;
      sg4::this_actor::suspend();
      continue;
    }
    runners_[rid].queue.pop_front();
    transfers_[tid].start = sg4::Engine::get_clock();
    transfers_[tid].path = numa_->move(transfers_[tid]); // through pages, drivers, MPI thread
    transfer_done(tid);
  }
}

void Simulation::account(int gsrc, int gdst, double bytes, double start, int path)
{
  sum_.transfers++;
  for (int c : numa_->path_classes(path)) // the links the copy actually crossed
    class_bytes_[c] += bytes;
  if (log_transfers_)
    transfer_log_.push_back({start, sg4::Engine::get_clock(), bytes, gsrc, gdst, path});
}

void Simulation::transfer_done(uint32_t tid)
{
  // No reference into transfers_ is held across calls that may request copies (eviction,
  // tidying, waiting allocations): a request may grow the vector.
  const Transfer t0 = [&] {
    Transfer c;
    const Transfer& t = transfers_[tid];
    c.rank = t.rank, c.handle = t.handle, c.gsrc = t.gsrc, c.gdst = t.gdst, c.mpi = t.mpi, c.recv = t.recv;
    c.version = t.version, c.start = t.start, c.path = t.path;
    return c;
  }();
  account(t0.gsrc, t0.gdst, tile_bytes_, t0.start, t0.path);
  if (!t0.mpi && (mem_[t0.gsrc].gpu || mem_[t0.gdst].gpu)) {
    // Resuming an actor yields to the others, which may start copies: resume after the list walk.
    std::vector<int32_t> ready;
    auto& pending = gpu_copies_[t0.rank];
    auto self = std::find(pending.begin(), pending.end(), tid);
    xbt_assert(self != pending.end(), "copy %u missing from the pending GPU copies", tid);
    for (auto it = self + 1; it != pending.end(); ++it) {
      Transfer& later = transfers_[*it];
      if (sequential(later, t0) && --later.nwait == 0)
        ready.push_back(runner_of_pair_[static_cast<size_t>(later.gsrc) * mem_.size() + later.gdst]);
    }
    pending.erase(self);
    for (int32_t rid : ready)
      if (runners_[rid].suspended) {
        runners_[rid].suspended = false;
        runners_[rid].actor->resume();
      }
  }
  runners_[runner_of_pair_[static_cast<size_t>(t0.gsrc) * mem_.size() + t0.gdst]].pending--;
  if (t0.mpi) {
    sum_.mpi_messages++;
    free_transfers_.push_back(tid);
    mpi_enqueue(dag_.receptions[t0.recv].dst, false, t0.recv);
    return;
  }
  int local = mem_[t0.gdst].local;
  HandleState& s = hstate_[t0.handle];
  MemMask bit = static_cast<MemMask>(1u << local);
  s.fetching &= static_cast<MemMask>(~bit);
  fetch_id_[slot(t0.handle, local)] = -1;
  if (s.version == t0.version) {
    if (pending_dirty_ > 0)
      for (int l = 0; l < mem_stride_; l++) // the replica it came from is no longer the only copy
        set_clean(t0.rank, t0.handle, l);
    s.valid |= bit;
  } else // the tile was rewritten meanwhile: the copy is stale
    drop_replica(t0.rank, t0.handle, local);
  if (local == home_[t0.rank] && pending_evictions_ > 0)
    finish_eviction(t0.rank, t0.handle);
  MemNode& dm = mem_[t0.gdst];
  if (dm.gpu) {
    tidy(dm);
    dm.inflight--;
    if (!dm.waiting.empty() || !dm.prefetch.empty())
      serve_waiting(dm);
  }
  // The record is freed only after its waiters are satisfied: waking a worker yields to the other
  // actors, and a request made meanwhile must not reuse this record (the swap below, which keeps
  // the vector's capacity, would then drop the new copy's waiters: a task waiting forever).
  std::vector<uint32_t> waiters;
  waiters.swap(transfers_[tid].waiters);
  for (uint32_t w : waiters)
    satisfy(w);
  waiters.clear();
  transfers_[tid].waiters.swap(waiters); // keep the capacity for reuse
  free_transfers_.push_back(tid);
}

void Simulation::satisfy(uint32_t waiter)
{
  if (waiter & kRecvFlag) { // an MPI send waiting for the data to reach RAM
    mpi_enqueue(dag_.receptions[waiter & ~kRecvFlag].src, true, waiter & ~kRecvFlag);
    return;
  }
  Task& t = dag_.tasks[waiter];
  if (--t.pending == 0 && t.worker >= 0)
    wake(workers_[t.worker]);
}

// ---------------------------------------------------------------- scheduling

void Simulation::wake(Worker& w)
{
  if (w.suspended) {
    w.suspended = false;
    w.actor->resume();
  }
}

void Simulation::wake_idle(int rank, const Task& t)
{
  for (int wid : rank_workers_[rank]) {
    Worker& w = workers_[wid];
    if (w.suspended && w.inflight.empty() && w.length[static_cast<int>(t.kind)] >= 0) {
      wake(w);
      return;
    }
  }
}

double Simulation::queued_before(const Worker& w, int32_t prio) const
{
  // dmdasd (not dmdas, which passes sorted_decision = 0) decides with the work queued ahead of
  // the task's place in the sorted queue
  // (sched_policies/fifo_queues.c starpu_st_fifo_taskq_get_exp_len_prev_task_list, called by
  // compute_all_performance_predictions with sorted_decision = 1): the whole expected length
  // when the task goes to the tail, else the model lengths of the tasks of priority >= prio.
  if (w.queue.empty() || (w.queue.begin()->prio == prio && w.queue.rbegin()->prio == prio))
    return w.exp_len;
  if (w.queue.begin()->prio < prio)
    return 0; // the task goes to the head: only the pipeline (not modelled separately) is ahead
  if (w.queue.rbegin()->prio >= prio)
    return w.exp_len;
  // Fenwick prefix sum over the priority ranks of priorities >= prio.
  size_t n = static_cast<size_t>(std::upper_bound(prio_levels_.begin(), prio_levels_.end(), prio, std::greater<>()) -
                                 prio_levels_.begin());
  int64_t ps = 0;
  for (size_t i = n; i > 0; i -= i & (~i + 1))
    ps += w.queued_ps[i];
  return static_cast<double>(ps) * 1e-12;
}

void Simulation::queue_add(Worker& w, uint32_t task, int sign)
{
  int64_t ps = sign * std::llround(static_cast<double>(dag_.tasks[task].predicted) * 1e12);
  for (size_t i = prio_rank_[task] + 1; i < w.queued_ps.size(); i += i & (~i + 1))
    w.queued_ps[i] += ps;
}

int Simulation::dmda_choose(uint32_t task, double* best_fitness)
{
  // compute_all_performance_predictions + the fitness loop of dmda_push_task
  // (sched_policies/deque_modeling_policy_data_aware.c).
  const Task& t = dag_.tasks[task];
  const double now = sg4::Engine::get_clock();
  const auto& ws = rank_workers_[t.rank];
  double exp_end[256], penalty[256];
  size_t n = std::min<size_t>(ws.size(), 256);
  double best_exp_end = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < n; i++) {
    Worker& w = workers_[ws[i]];
    double len = w.length[static_cast<int>(t.kind)];
    if (len < 0) {
      exp_end[i] = -1;
      continue;
    }
    double exp_start = std::max(w.exp_start, now);
    penalty[i] = data_penalty(t, w);
    // Work ahead of the task: the whole queue (dmda, dmdas: _dmda_push_task with
    // sorted_decision = 0), or only the work of priority >= the task's (dmdasd, sorted_decision = 1).
    double prev_len = cfg_.env.sched == Scheduler::dmdasd ? queued_before(w, t.prio) : w.exp_len;
    exp_end[i] = std::max(exp_start + prev_len, now + penalty[i]) + len;
    best_exp_end = std::min(best_exp_end, exp_end[i]);
  }
  int best = -1;
  double best_fit = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < n; i++) {
    if (exp_end[i] < 0)
      continue;
    // No energy models: the γ term is 0 (local_power = 0).
    double fitness = cfg_.env.alpha * (exp_end[i] - best_exp_end) + cfg_.env.beta * penalty[i];
    if (fitness < best_fit) {
      best_fit = fitness;
      best = ws[i];
    }
  }
  if (best_fitness)
    *best_fitness = best_fit;
  return best;
}

void Simulation::push_to_worker(Worker& w, uint32_t task, double len, double transfer)
{
  Task& t = dag_.tasks[task];
  const double now = sg4::Engine::get_clock();
  t.worker = w.id;
  t.predicted = static_cast<float>(len);
  bool sorted = cfg_.env.sched == Scheduler::dmdas || cfg_.env.sched == Scheduler::dmdasd ||
                cfg_.env.sched == Scheduler::lws;
  w.queue.insert({sorted ? t.prio : 0, seq_++, task});
  queue_add(w, task, +1);
  if (cfg_.env.sched != Scheduler::eager && cfg_.env.sched != Scheduler::lws) { // the dmda family
    // dmda_push_task_to_workers: transfer time not covered by the queue is added to exp_len.
    w.exp_start = std::max(w.exp_start, now);
    double exp_end = w.exp_start + w.exp_len;
    double extra = now + transfer < exp_end ? 0 : now + transfer - exp_end;
    w.exp_len += len + extra;
    if (cfg_.env.prefetch) { // starpu_prefetch_task_input_for: start fetching the operands now
      for (uint8_t i = 0; i < t.nbuf; i++) {
        uint32_t h = handle(w.rank, t.tiles[i]);
        prefetch_tasks_[slot(h, w.mem)]++; // coherency.c: nb_tasks_prefetch of the replica
        request(w.rank, h, w.mem, kNone, true, t.prio);
      }
    }
  }
  wake(w);
}

void Simulation::push_ready(uint32_t task, int releasing_worker)
{
  Task& t = dag_.tasks[task];
  switch (cfg_.env.sched) {
    case Scheduler::dmda:
    case Scheduler::dmdas:
    case Scheduler::dmdasd: {
      int wid = dmda_choose(task);
      if (wid < 0)
        throw InputError(cfg_.file, "env", std::string("a worker able to run ") + kind_name(t.kind) + " on node " +
                                               nodes_[t.rank].name);
      Worker& w = workers_[wid];
      push_to_worker(w, task, w.length[static_cast<int>(t.kind)], data_penalty(t, w));
      break;
    }
    case Scheduler::eager: // one central FIFO per node (sched_policies/eager_central_policy.c)
      central_[t.rank].insert({0, seq_++, task});
      wake_idle(t.rank, t);
      break;
    case Scheduler::lws: { // the releasing worker's own queue (sched_policies/work_stealing_policy.c)
      int wid = releasing_worker;
      if (wid < 0 || workers_[wid].rank != t.rank || workers_[wid].length[static_cast<int>(t.kind)] < 0) {
        const auto& ws = rank_workers_[t.rank];
        wid = -1;
        for (size_t i = 0; i < ws.size() && wid < 0; i++) {
          const Worker& c = workers_[ws[(seq_ + i) % ws.size()]];
          if (c.length[static_cast<int>(t.kind)] >= 0)
            wid = c.id;
        }
      }
      Worker& w = workers_[wid];
      push_to_worker(w, task, w.length[static_cast<int>(t.kind)], 0);
      wake_idle(t.rank, t); // an idle worker may steal it
      break;
    }
  }
}

int32_t Simulation::pop(Worker& w)
{
  const double now = sg4::Engine::get_clock();
  auto can_run = [&](uint32_t task) { return w.length[static_cast<int>(dag_.tasks[task].kind)] >= 0; };
  if (cfg_.env.sched == Scheduler::eager) {
    auto& q = central_[w.rank];
    for (auto it = q.begin(); it != q.end(); ++it)
      if (can_run(it->task)) {
        uint32_t task = it->task;
        q.erase(it);
        dag_.tasks[task].worker = w.id;
        return static_cast<int32_t>(task);
      }
    return -1;
  }
  if (cfg_.env.sched == Scheduler::lws) {
    auto take = [&](Worker& from) -> int32_t {
      for (auto it = from.queue.begin(); it != from.queue.end(); ++it)
        if (can_run(it->task)) {
          uint32_t task = it->task;
          from.queue.erase(it);
          queue_add(from, task, -1);
          dag_.tasks[task].worker = w.id;
          return static_cast<int32_t>(task);
        }
      return -1;
    };
    int32_t got = take(w);
    const auto& ws = rank_workers_[w.rank];
    size_t me = std::find(ws.begin(), ws.end(), w.id) - ws.begin();
    for (size_t i = 1; got < 0 && i < ws.size(); i++) // steal from the next workers in turn
      got = take(workers_[ws[(me + i) % ws.size()]]);
    return got;
  }
  if (w.queue.empty())
    return -1;
  auto chosen = w.queue.begin();
  if (cfg_.env.sched == Scheduler::dmdas || cfg_.env.sched == Scheduler::dmdasd) { // dmda_pop_ready_task
    // starpu_st_fifo_taskq_pop_first_ready_task (fifo_queues.c): among the head priority, the
    // first task with the fewest non-ready operands, ties broken by the fewest of those not being
    // loaded, then by the fewest not allocated (starpu_st_non_ready_buffers_size; equal tiles, so
    // counts order as sizes do). Stops at a task that is ready and allocated.
    const MemMask bit = static_cast<MemMask>(1u << w.mem);
    int best[3] = {std::numeric_limits<int>::max(), 0, 0};
    int32_t head_prio = chosen->prio;
    for (auto it = w.queue.begin(); it != w.queue.end() && it->prio == head_prio; ++it) {
      const Task& t = dag_.tasks[it->task];
      int cnt[3] = {0, 0, 0}; // non-ready, non-loading, non-allocated
      for (uint8_t i = 0; i < t.nbuf; i++) {
        uint32_t h = handle(w.rank, t.tiles[i]);
        const HandleState& hs = hstate_[h];
        bool valid = hs.valid & bit, loading = hs.fetching & bit;
        // Allocated: valid, or its copy got its space (not waiting in an allocation queue).
        bool allocated = valid || (loading && transfers_[static_cast<uint32_t>(fetch_id_[slot(h, w.mem)])].queued == 0);
        cnt[0] += !valid;
        cnt[1] += !valid && !loading;
        cnt[2] += !allocated;
      }
      if (std::lexicographical_compare(cnt, cnt + 3, best, best + 3)) {
        std::copy(cnt, cnt + 3, best);
        chosen = it;
        if (cnt[0] == 0 && cnt[2] == 0)
          break;
      }
    }
  }
  uint32_t task = chosen->task;
  w.queue.erase(chosen);
  queue_add(w, task, -1);
  // dmda_pre_exec_hook: the task leaves the expected queue length.
  double len = dag_.tasks[task].predicted;
  w.exp_len = std::max(0.0, w.exp_len - len);
  w.exp_start = now + len;
  return static_cast<int32_t>(task);
}

// ---------------------------------------------------------------- execution

double Simulation::sample_duration(const Worker& w, TaskKind k)
{
  double mean = w.length[static_cast<int>(k)];
  double sd = w.dev[static_cast<int>(k)];
  if (!cfg_.variability || sd <= 0 || mean <= 0)
    return mean;
  // Lognormal with the calibrated mean and standard deviation (durations stay positive).
  double s2 = std::log1p((sd * sd) / (mean * mean));
  double mu = std::log(mean) - s2 / 2;
  return std::exp(mu + std::sqrt(s2) * normal_(rng_));
}

void Simulation::prepare(Worker& w, uint32_t task)
{
  // _starpu_fetch_task_input: every operand must be valid on the worker's memory node.
  Task& t = dag_.tasks[task];
  t.worker = w.id;
  t.pending = 0;
  for (uint8_t i = 0; i < t.nbuf; i++) {
    uint32_t h = handle(w.rank, t.tiles[i]);
    size_t sl = slot(h, w.mem);
    pins_[sl]++;
    if (prefetch_tasks_[sl] > 0) // _starpu_fetch_task_input: the task now holds it itself
      prefetch_tasks_[sl]--;
    if (!request(w.rank, h, w.mem, task, false, t.prio))
      t.pending++;
  }
}

// How long a task holds its CUDA worker: the kernel plus the worker thread's host time per task
// (pop, data checks, launch, completion and termination; calibration/microbench/
// starpu_task_overhead.c measures it). With STARPU_CUDA_PIPELINE >= 2 the worker queues the next
// kernel behind the running one (src/drivers/cuda/driver_cuda.c, pipeline of async tasks), so
// when tasks run back to back the host time overlaps the previous kernel: the worker then
// advances by max(host, kernel), the steady state of a two-stage pipeline; after an idle gap
// nothing overlaps and the task costs host + kernel.
double Simulation::cuda_occupancy(const Worker& w, double kernel) const
{
  if (w.task_overhead <= 0)
    return kernel;
  bool back_to_back = cfg_.env.cuda_pipeline >= 2 && sg4::Engine::get_clock() <= w.last_end;
  return back_to_back ? std::max(w.task_overhead, kernel) : w.task_overhead + kernel;
}

void Simulation::execute(Worker& w, uint32_t task)
{
  Task& t = dag_.tasks[task];
  double d = sample_duration(w, t.kind);
  if (w.cuda)
    d = cuda_occupancy(w, d);
  numa_->run_task(w, task, d); // sets t.start; remote traffic, faults, GPU launch path
  t.end = sg4::Engine::get_clock();
  w.last_end = t.end;
  // Write: the worker's replica becomes the only valid one (MSI invalidation).
  uint32_t written = handle(w.rank, t.tiles[t.nbuf - 1]);
  HandleState& s = hstate_[written];
  for (int l = 0; l < mem_stride_; l++)
    if (l != w.mem && (s.valid & (1u << l)))
      drop_replica(w.rank, written, l);
  s.valid = static_cast<MemMask>(1u << w.mem);
  s.version++;
  MemNode& wm = mem_[rank_mem_[w.rank][w.mem]];
  size_t wsl = slot(written, w.mem);
  if (wm.gpu && !dirty_[wsl]) { // _starpu_memchunk_dirty
    dirty_[wsl] = 1;
    wm.dirty++;
    pending_dirty_++;
  }
  for (uint8_t i = 0; i < t.nbuf; i++)
    pins_[slot(handle(w.rank, t.tiles[i]), w.mem)]--;
  if (wm.gpu)
    tidy(wm);
  if (!wm.waiting.empty() || !wm.prefetch.empty()) // the operands are evictable again
    serve_waiting(wm);
  w.executed++;
  w.exp_start = sg4::Engine::get_clock(); // dmda_post_exec_hook
  sum_.by_kind[static_cast<int>(t.kind)]++;
  (w.cuda ? sum_.on_cuda : sum_.on_cpu)++;
  done_tasks_++;
  last_task_end_ = t.end;
  release(task, w.id);
  if (done_tasks_ == dag_.tasks.size())
    finish_all();
}

void Simulation::release(uint32_t node_id, int releasing_worker)
{
  const uint32_t ntasks = static_cast<uint32_t>(dag_.tasks.size());
  uint32_t b, e;
  if (node_id < ntasks) {
    b = dag_.tasks[node_id].succ_begin;
    e = dag_.tasks[node_id].succ_end;
  } else {
    b = dag_.receptions[node_id - ntasks].succ_begin;
    e = dag_.receptions[node_id - ntasks].succ_end;
  }
  for (uint32_t i = b; i < e; i++) {
    uint32_t s = dag_.succ[i];
    if (s >= ntasks)
      trigger_reception(s - ntasks);
    else if (--dag_.tasks[s].ndeps == 0)
      push_ready(s, releasing_worker);
  }
}

void Simulation::worker_loop(int wid)
{
  Worker& w = workers_[wid];
  size_t depth = w.cuda ? static_cast<size_t>(std::max(1, cfg_.env.cuda_pipeline)) : 1;
  while (!finished_) {
    while (w.inflight.size() < depth) {
      int32_t task = pop(w);
      if (task < 0)
        break;
      prepare(w, static_cast<uint32_t>(task));
      w.inflight.push_back(static_cast<uint32_t>(task));
    }
    if (w.inflight.empty() || dag_.tasks[w.inflight.front()].pending > 0) {
      w.suspended = true; // resumed by a push or by the arrival of an operand
      sg4::this_actor::suspend();
      continue;
    }
    uint32_t task = w.inflight.front();
    w.inflight.pop_front();
    execute(w, task);
  }
}

// ---------------------------------------------------------------- StarPU-MPI

void Simulation::trigger_reception(uint32_t r)
{
  // The owner sends once its copy is in RAM (StarPU-MPI acquires the data on the main RAM node).
  const Reception& rc = dag_.receptions[r];
  recv_state_[r] = kRecvTriggered;
  uint32_t h = handle(rc.src, rc.tile);
  if (hstate_[h].valid & (1u << home_[rc.src]))
    mpi_enqueue(rc.src, true, r);
  else
    request(rc.src, h, home_[rc.src], kRecvFlag | r);
}

void Simulation::mpi_enqueue(int rank, bool send, uint32_t r)
{
  MpiThread& m = mpi_[rank];
  m.requests.emplace_back(send, r);
  if (m.suspended) {
    m.suspended = false;
    m.actor->resume();
  }
}

void Simulation::mpi_loop(int rank)
{
  // The progression thread handles requests one at a time, each with a fixed overhead
  // (mpi/src/mpi/starpu_mpi_mpi.c progression loop).
  MpiThread& m = mpi_[rank];
  while (!finished_) {
    if (m.requests.empty()) {
      m.suspended = true;
      sg4::this_actor::suspend();
      continue;
    }
    auto [send, r] = m.requests.front();
    m.requests.pop_front();
    if (cfg_.mpi_overhead_s > 0)
      sg4::this_actor::sleep_for(cfg_.mpi_overhead_s);
    const Reception& rc = dag_.receptions[r];
    if (send) {
      recv_state_[r] = kRecvSent;
      uint32_t tid = new_transfer();
      Transfer& t = transfers_[tid];
      t.rank = rc.dst;
      t.handle = handle(rc.dst, rc.tile);
      t.gsrc = rank_mem_[rc.src][home_[rc.src]];
      t.gdst = rank_mem_[rc.dst][home_[rc.dst]];
      t.mpi = true;
      t.recv = r;
      t.waiters.clear();
      start_transfer(tid);
    } else {
      // Received into the main RAM node; this version replaces any older cached one.
      uint32_t h = handle(rc.dst, rc.tile);
      HandleState& s = hstate_[h];
      for (int l = 0; l < mem_stride_; l++)
        if (s.valid & (1u << l))
          drop_replica(rc.dst, h, l);
      s.version = rc.version;
      s.valid = static_cast<MemMask>(1u << home_[rc.dst]);
      recv_state_[r] = kRecvDone;
      release(static_cast<uint32_t>(dag_.tasks.size()) + r, -1);
    }
  }
}

void Simulation::finish_all()
{
  finished_ = true;
  sum_.makespan = sg4::Engine::get_clock();
  for (auto& w : workers_)
    if (w.suspended) {
      w.suspended = false;
      w.actor->resume();
    }
  for (auto& m : mpi_)
    if (m.suspended) {
      m.suspended = false;
      m.actor->resume();
    }
  for (auto& r : runners_)
    if (r.suspended) {
      r.suspended = false;
      r.actor->resume();
    }
}

Summary Simulation::run()
{
  for (auto& w : workers_)
    w.actor = sg4::Actor::create(w.name, w.host, [this, id = w.id] { worker_loop(id); });
  for (size_t r = 0; r < nodes_.size(); r++) {
    const NodeThreads& th = threads_[r];
    sg4::Host* host = nodes_[r].cpus.front().host;
    for (const auto& c : nodes_[r].cpus)
      if (c.index == th.mpi_core)
        host = c.host;
    mpi_[r].actor = sg4::Actor::create(nodes_[r].name + ".mpi", host, [this, r] { mpi_loop(static_cast<int>(r)); });
  }
  numa_->start_actors();
  // The main thread submits the whole graph at t=0; ready tasks are pushed in submission order.
  sg4::Actor::create("main", nodes_[0].cpus.front().host, [this] {
    if (dag_.tasks.empty()) {
      finish_all();
      return;
    }
    for (uint32_t r : dag_.ready_recvs)
      trigger_reception(r);
    for (uint32_t t : dag_.ready)
      push_ready(t, -1);
  });
  engine_.run();
  if (!finished_) // SimGrid ran out of events with tasks left: name what they wait for
    throw std::runtime_error(stall_report(4));
  sum_.tasks = done_tasks_;
  for (size_t c = 0; c < class_names_.size(); c++)
    sum_.bytes_by_link_class[class_names_[c]] = class_bytes_[c];
  sum_.numa = numa_->summary();
  sum_.workers = workers_.size();
  for (const auto& w : workers_)
    (w.cuda ? sum_.cuda_workers : sum_.cpu_workers)++;
  return sum_;
}

std::string Simulation::tile_name(uint32_t tile) const
{
  return "A(" + std::to_string(tile / cfg_.nt) + "," + std::to_string(tile % cfg_.nt) + ")";
}

std::string Simulation::task_name(uint32_t task) const
{
  const Task& t = dag_.tasks[task];
  static const char* names[kNumKinds] = {"getrf", "trsm_row", "trsm_col", "gemm"};
  std::string s = std::string(names[static_cast<int>(t.kind)]) + "(k=" + std::to_string(t.step) + ", writes " +
                  tile_name(t.tiles[t.nbuf - 1]) + ")";
  return s;
}

std::string Simulation::operand_state(int rank, uint32_t tile, int local) const
{
  // What a (rank, tile) replica on memory node `local` waits for.
  const uint32_t h = handle(rank, tile);
  const MemNode& m = mem_[rank_mem_[rank][local]];
  std::string s = tile_name(tile) + "@" + m.host->get_name() + ": ";
  const HandleState& hs = hstate_[h];
  if (hs.valid & (1u << local))
    return s + "valid";
  if (!(hs.fetching & (1u << local)))
    return s + "no copy requested (valid on mask " + std::to_string(hs.valid) + ")";
  const Transfer& t = transfers_[static_cast<uint32_t>(fetch_id_[slot(h, local)])];
  s += std::string(t.prefetch ? "prefetch" : "fetch") + " from " + mem_[t.gsrc].host->get_name();
  char buf[160];
  if (t.queued) {
    std::snprintf(buf, sizeof buf, " waits for memory (%s queue; used %.0f + reserved %.0f of %.0f MiB, %d copies landing, %.0f MiB being written back)",
                  t.queued == 1 ? "fetch" : "prefetch", m.used / 1048576, m.reserved / 1048576, m.capacity / 1048576,
                  m.inflight, m.pending_free / 1048576);
    return s + buf;
  }
  if (t.nwait > 0)
    return s + " waits for " + std::to_string(t.nwait) + " earlier GPU copies";
  return s + " started, not landed";
}

std::string Simulation::stall_report(size_t max_items) const
{
  // One line: how many tasks never ran, then the first blocked ones (prepared by a worker and
  // waiting for operands, or queued) with what each waits for.
  std::vector<std::string> items;
  uint64_t prepared = 0, queued = 0, waiting_deps = 0;
  for (const auto& w : workers_) {
    for (uint32_t task : w.inflight) {
      prepared++;
      if (items.size() >= max_items)
        continue;
      const Task& t = dag_.tasks[task];
      std::string s = task_name(task) + " on " + w.name + " waits for";
      bool any = false;
      for (uint8_t i = 0; i < t.nbuf; i++)
        if (!(hstate_[handle(w.rank, t.tiles[i])].valid & (1u << w.mem))) {
          s += std::string(any ? ";" : "") + " " + operand_state(w.rank, t.tiles[i], w.mem);
          any = true;
        }
      items.push_back(any ? s
                          : task_name(task) + " on " + w.name + " has its operands but was not started (" +
                                std::to_string(t.pending) + " operand arrivals pending" +
                                (w.suspended ? ", worker suspended)" : ")"));
    }
  }
  for (const auto& w : workers_)
    for (const auto& q : w.queue) {
      queued++;
      if (items.size() < max_items)
        items.push_back(task_name(q.task) + " queued on " + w.name + " (" + std::to_string(w.inflight.size()) +
                        " tasks in its pipeline)");
    }
  for (const auto& c : central_)
    queued += c.size();
  uint64_t receptions = 0;
  for (uint32_t r = 0; r < recv_state_.size(); r++) {
    if (recv_state_[r] != kRecvTriggered && recv_state_[r] != kRecvSent)
      continue;
    receptions++;
    if (items.size() >= max_items)
      continue;
    const Reception& rc = dag_.receptions[r];
    std::string s = "MPI message of " + tile_name(rc.tile) + " version " + std::to_string(rc.version) + " from " +
                    nodes_[rc.src].name + " to " + nodes_[rc.dst].name;
    if (recv_state_[r] == kRecvSent)
      s += " sent, not received";
    else if (std::find(mpi_[rc.src].requests.begin(), mpi_[rc.src].requests.end(), std::make_pair(true, r)) !=
             mpi_[rc.src].requests.end())
      s += " queued at the sender's MPI thread";
    else if (hstate_[handle(rc.src, rc.tile)].valid & (1u << home_[rc.src]))
      s += " has its RAM copy but was never queued for sending";
    else
      s += " waits for the sender's RAM copy: " + operand_state(rc.src, rc.tile, home_[rc.src]);
    items.push_back(s);
  }
  for (const auto& t : dag_.tasks)
    waiting_deps += t.ndeps > 0;
  char head[256];
  std::snprintf(head, sizeof head,
                "deadlock at t = %.6f s (last task ended at %.6f s): %llu of %zu tasks not executed (%llu prepared "
                "by a worker, %llu queued, %llu waiting for predecessors; %llu MPI messages not received); blocked: ",
                sg4::Engine::get_clock(), last_task_end_, static_cast<unsigned long long>(dag_.tasks.size() - done_tasks_),
                dag_.tasks.size(), static_cast<unsigned long long>(prepared), static_cast<unsigned long long>(queued),
                static_cast<unsigned long long>(waiting_deps), static_cast<unsigned long long>(receptions));
  std::string s = head;
  for (size_t i = 0; i < items.size(); i++)
    s += (i ? " | " : "") + items[i];
  if (items.empty())
    s += "no task prepared or queued, no message under way (a release was lost)";
  return s;
}

void Simulation::write_trace(const std::string& path) const
{
  write_output(path, "trace", [this](std::ostream& out) { write_trace(out); });
}

void Simulation::write_transfers(const std::string& path) const
{
  write_output(path, "transfers", [this](std::ostream& out) { write_transfers(out); });
}

void Simulation::write_trace(std::ostream& out) const
{
  out << "ResourceId,Start,End,Duration,Value,JobId,Node,WorkerNuma,WorkerMemNode,OperandNuma,Priority,Step,"
         "OperandPages,RemoteBytes\n";
  char buf[256];
  for (size_t i = 0; i < dag_.tasks.size(); i++) {
    const Task& t = dag_.tasks[i];
    if (t.worker < 0)
      continue;
    const Worker& w = workers_[t.worker];
    const MemNode& m = mem_[rank_mem_[w.rank][w.mem]];
    std::snprintf(buf, sizeof buf, "%s,%.9f,%.9f,%.9f,%s,%zu,%d,%d,%s,%d,%d,%d\n", w.name.c_str(), t.start, t.end,
                  t.end - t.start, kind_name(t.kind), i, w.rank, w.numa, m.host->get_cname(), m.numa, t.prio,
                  t.step);
    buf[std::strlen(buf) - 1] = ','; // NUMA node of each operand's pages as read, remote bytes
    out << buf << numa_->operand_pages(static_cast<uint32_t>(i)) << ',' << numa_->remote_bytes(static_cast<uint32_t>(i))
        << '\n';
  }
}

void Simulation::write_transfers(std::ostream& out) const
{
  out << "Start,End,Bytes,Src,Dst,Links\n";
  char buf[256];
  for (const auto& r : transfer_log_) {
    std::string links;
    for (const auto& l : numa_->path_links(r.path))
      links += (links.empty() ? "" : " ") + l;
    std::snprintf(buf, sizeof buf, "%.9f,%.9f,%.0f,%s,%s,", r.start, r.end, r.bytes, mem_[r.gsrc].host->get_cname(),
                  mem_[r.gdst].host->get_cname());
    out << buf << links << "\n";
  }
}

} // namespace numasim
