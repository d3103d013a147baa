#include "numa_effects.hpp"
#include "datawizard/datawizard.hpp"
#include "error.hpp"
#include "network.hpp"
#include "sleep.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <xbt/config.hpp>

XBT_LOG_NEW_DEFAULT_SUBCATEGORY(numasim_numa, numasim, "numasim NUMA mechanisms");

namespace numasim {

namespace {
// The BLAS kernel of a task kind: the names of numa_bench's kernels and of the stall fractions.
const char* kernel_of(TaskKind k) {
  switch (k) {
  case TaskKind::getrf:
    return "dgetrf_nopiv";
  case TaskKind::trsm_row:
  case TaskKind::trsm_col:
    return "dtrsm";
  case TaskKind::gemm:
    return "dgemm";
  }
  return "?";
}
} // namespace

NumaParams NumaParams::from_zone(const sg4::NetZone* zone, const std::string& file) {
  NumaParams p;
  auto get = [&](const char* key, double& field) {
    const char* v = zone->get_property(std::string("numa_") + key);
    if (!v)
      return;
    char* end = nullptr;
    double x = std::strtod(v, &end);
    if (end == v || *end || !std::isfinite(x) || x < 0)
      throw InputError(file, "zone " + zone->get_name() + " property 'numa_" + key + "'",
                       std::string("a non-negative number, got '") + v + "'");
    field = x;
  };
  get("gemm_block_k", p.gemm_block_k);
  get("control_message_bytes", p.control_message_bytes);
  get("page_bytes", p.page_bytes);
  get("hinting_fault_cost_s", p.hinting_fault_cost_s);
  get("balancing_scan_delay_s", p.balancing_scan_delay_s);
  get("balancing_scan_period_s", p.balancing_scan_period_s);
  get("balancing_scan_size_bytes", p.balancing_scan_size_bytes);
  get("migrate_ratelimit_bytes", p.migrate_ratelimit_bytes);
  get("migrate_ratelimit_window_s", p.migrate_ratelimit_window_s);
  if (p.page_bytes <= 0 || p.balancing_scan_period_s <= 0 || p.migrate_ratelimit_window_s <= 0)
    throw InputError(file,
                     "zone " + zone->get_name() +
                         " numa_page_bytes/numa_balancing_scan_period_s/"
                         "numa_migrate_ratelimit_window_s",
                     "positive numbers");
  return p;
}

void NumaEffects::init() {
  const size_t nranks = topo_.nranks();
  ranks_.resize(nranks);
  page_.assign(data_.nhandles(), -1);
  slot_page_.assign(data_.nhandles() * static_cast<size_t>(topo_.mem_stride()), -1);
  marked_.assign(data_.nhandles(), 0);
  last_fault_.assign(data_.nhandles(), -1);
  if (!cfg_.trace.empty()) {
    remote_bytes_.assign(dag_.tasks.size(), 0.f);
    op_pages_.assign(dag_.tasks.size(), 0xFFFF);
    slot_alloc_.assign(data_.nhandles() * static_cast<size_t>(topo_.mem_stride()), FirstAlloc{});
    op_alloc_.assign(dag_.tasks.size(), {});
  }
  last_end_.assign(topo_.workers().size(), 0.0);
  driver_of_gpu_mem_.assign(topo_.mem().size(), nullptr);
  copy_control_delay_.assign(topo_.mem().size(), std::numeric_limits<double>::quiet_NaN());
  launch_control_delay_.assign(topo_.workers().size(), std::numeric_limits<double>::quiet_NaN());
  for (size_t r = 0; r < nranks; r++)
    init_rank(static_cast<int>(r));
  tcp_gamma_ = simgrid::config::get_value<double>("network/TCP-gamma");
}

void NumaEffects::init_rank(int r) {
  const MachineNode& n = topo_.nodes()[r];
  const StarpuEnv& env = cfg_.env_for(n.machine);
  const NodeThreads& th = topo_.threads(r);
  RankInfo& ri = ranks_[r];
  ri.p = NumaParams::from_zone(n.cpus.front().host->get_englobing_zone(), cfg_.platform);
  ri.mem = std::make_unique<MemorySystem>(n, cfg_.platform);
  for (int k = 0; k < kNumKinds; k++) {
    ri.stall[k] = ri.mem->params().stall(kernel_of(static_cast<TaskKind>(k)));
    ri.spread[k] = ri.mem->params().remote_spread(kernel_of(static_cast<TaskKind>(k)));
  }
  ri.use_numa = env.use_numa;
  ri.main_numa = th.main_numa;
  ri.mpi_numa = th.mpi_numa;
  for (const auto& ram : n.rams)
    ri.ram.push_back(ram.host);
  for (const auto& c : n.cpus)
    if (c.index == th.mpi_core)
      ri.mpi_host = c.host;
  if (!ri.mpi_host)
    ri.mpi_host = n.cpus.front().host;
  // With CUDA workers StarPU pins every RAM allocation (datawizard/malloc.c
  // _starpu_malloc_should_pin; Chameleon's RUNTIME_malloc asks for STARPU_MALLOC_PINNED):
  // cudaHostAlloc populates the pages in the allocating thread, and pinned pages are never
  // migrated by NUMA balancing. Without CUDA, memory is pageable and first touched by its writer.
  std::vector<int> cpu_numas;
  for (int wid : topo_.rank_workers(r)) {
    const Worker& w = topo_.workers()[wid];
    if (w.cuda) {
      ri.pinned = true;
      for (const auto& c : n.cpus)
        if (c.index == w.core)
          driver_of_gpu_mem_[topo_.global_mem(r, w.mem)] = c.host;
    } else
      cpu_numas.push_back(w.numa);
  }
  // Balancing migrates pageable memory only; with STARPU_USE_NUMA=1 StarPU binds each RAM node's
  // allocations to its NUMA node (malloc.c: hwloc_alloc_membind HWLOC_MEMBIND_BIND), which the
  // kernel does not migrate either.
  ri.balancing = env.numa_balancing && !ri.pinned && !ri.use_numa && n.rams.size() > 1 &&
                 cfg_.mechanisms(Mechanism::numa_balancing);
  ri.window_end.assign(n.rams.size(), -1.0);
  ri.window_bytes.assign(n.rams.size(), 0.0);
  first_touch(r, cpu_numas);
}

// First touch of the application's tiles (owner's RAM replica).
void NumaEffects::first_touch(int r, const std::vector<int>& cpu_numas) {
  const RankInfo& ri = ranks_[r];
  size_t k = 0;
  for (uint32_t t = 0; t < data_.ntiles(); t++) {
    if (cfg_.owner[t] != r)
      continue;
    uint32_t h = data_.handle(r, t);
    // the application's matrix: allocated by the main thread (starpu_malloc, Chameleon's
    // RUNTIME_malloc) before the run; pageable pages are placed by their first writer below
    record_alloc(h, topo_.home(r), AllocKind::main, ri.main_numa);
    if (ri.use_numa) { // one memory node per NUMA node: its allocations live on its node ...
      page_[h] = static_cast<int8_t>(topo_.mem(topo_.global_mem(r, topo_.home(r))).numa);
      // ... unless pinned: the main thread's cudaHostAlloc populated them, no hwloc binding
      // (datawizard/malloc.c _starpu_malloc_flags_on_node)
      if (ri.pinned && ri.main_numa != page_[h])
        slot_page_[static_cast<size_t>(h) * topo_.mem_stride() + topo_.home(r)] =
            static_cast<int8_t>(ri.main_numa);
    } else if (ri.pinned || cpu_numas.empty()) // cudaHostAlloc in the main thread populates the matrix
      page_[h] = static_cast<int8_t>(ri.main_numa);
    else // pageable: first written by dplrnt, spread evenly over the CPU workers in submission order
      page_[h] = static_cast<int8_t>(cpu_numas[k++ % cpu_numas.size()]);
  }
}

int NumaEffects::page_numa(int rank, uint32_t tile) const {
  uint32_t h = data_.handle(rank, tile);
  return h == kNone ? -1 : page_[h];
}

int NumaEffects::slot_numa(int rank, uint32_t h, int local) const {
  const int8_t p = slot_page_[static_cast<size_t>(h) * topo_.mem_stride() + local];
  return p >= 0 ? p : topo_.mem(topo_.global_mem(rank, local)).numa;
}

sg4::Host* NumaEffects::ram_host(int rank, uint32_t h, int gmem) const {
  const MemNode& m = topo_.mem(gmem);
  const RankInfo& ri = ranks_[rank];
  if (ri.use_numa)
    return ri.pinned && !m.gpu ? ri.ram[slot_numa(rank, h, m.local)] : m.host;
  if (page_[h] < 0)
    return m.host;
  return ri.ram[page_[h]];
}

int NumaEffects::operand_numa(const Worker& w, uint32_t h) const {
  const MemNode& m = topo_.mem(topo_.global_mem(w.rank, w.mem));
  if (m.gpu)
    return -1;
  if (ranks_[w.rank].use_numa)
    return ranks_[w.rank].pinned ? slot_numa(w.rank, h, w.mem) : m.numa;
  if (page_[h] < 0)
    return m.numa;
  return page_[h];
}

sg4::Host* NumaEffects::thread_core(const Worker& w) const {
  if (!w.cuda)
    return w.host;
  sg4::Host* drv = driver_of_gpu_mem_[topo_.global_mem(w.rank, w.mem)]; // the CUDA driver's core
  return drv ? drv : w.host;
}

void NumaEffects::record_alloc(uint32_t h, int local, AllocKind kind, int numa) {
  if (slot_alloc_.empty())
    return;
  FirstAlloc& a = slot_alloc_[static_cast<size_t>(h) * topo_.mem_stride() + local];
  if (a.kind == AllocKind::none)
    a = {kind, static_cast<int8_t>(numa), static_cast<float>(sg4::Engine::get_clock())};
}

void NumaEffects::allocated(int rank, uint32_t h, int gdst, const Worker* pinner, bool main_thread) {
  const MemNode& m = topo_.mem(gdst);
  if (main_thread) { // cudaHostAlloc in the main thread populates the pages on its NUMA node
    RankInfo& ri = ranks_[rank];
    record_alloc(h, m.local, AllocKind::main, ri.main_numa);
    if (!ri.pinned)
      return;
    if (!ri.use_numa) {
      if (page_[h] < 0)
        page_[h] = static_cast<int8_t>(ri.main_numa);
    } else {
      slot_page_[static_cast<size_t>(h) * topo_.mem_stride() + m.local] =
          static_cast<int8_t>(ri.main_numa == m.numa ? -1 : ri.main_numa);
    }
    return;
  }
  record_alloc(h, m.local,
               !pinner        ? AllocKind::copy
               : pinner->cuda ? AllocKind::cuda
                              : AllocKind::cpu,
               pinner ? pinner->numa : -1);
  if (!pinner || !ranks_[rank].use_numa || !ranks_[rank].pinned)
    return; // bound to the memory node's NUMA node (hwloc_alloc_membind), or the one RAM node
  const int numa = pinner->numa; // cudaHostAlloc populates the pages in the allocating thread
  slot_page_[static_cast<size_t>(h) * topo_.mem_stride() + m.local] =
      static_cast<int8_t>(numa == m.numa ? -1 : numa);
}

void NumaEffects::Legs::add(sg4::Host* a, sg4::Host* b) {
  if (n == kMaxLegs)
    throw std::logic_error("numasim: a copy with more than " + std::to_string(kMaxLegs) + " legs");
  at[n++] = {a, b};
}

size_t NumaEffects::LegsHash::operator()(const Legs& l) const {
  size_t h = l.n;
  for (const auto& leg : l) // boost::hash_combine's mixing
    for (const void* p : {static_cast<const void*>(leg.src), static_cast<const void*>(leg.dst)})
      h ^= std::hash<const void*>{}(p) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}

int NumaEffects::intern(const Legs& legs, double cpu_copy_rate) {
  auto it = path_ids_.find(legs);
  if (it != path_ids_.end())
    return it->second;
  Path p;
  // The copy streams through every RAM it touches at its pipeline's rate: the narrowest leg's
  // (a message's RAM -> MPI-core leg alone could run at a core's 12 GB/s, but it only carries
  // what the 1.25 GB/s Ethernet leg drains).
  p.stream_bw = std::numeric_limits<double>::infinity();
  for (const auto& l : legs) {
    std::vector<sg4::Link*> links;
    double lat = 0;
    l.src->route_to(l.dst, links, &lat);
    PathLeg leg;
    for (auto* link : links) {
      p.links.push_back(link->get_name());
      p.classes.push_back(classes_.id(link_class(link->get_name())));
      leg.links.push_back(link_id(link));
    }
    // A lone flow's rate under CM02 (SimGrid 3.32 src/surf/network_cm02.cpp, communicate): the
    // narrowest link's bandwidth, bounded by TCP-gamma / (2 latency).
    const auto [latency, bw] = route_latbw(l.src, l.dst);
    leg.latency = latency;
    leg.rate = tcp_gamma_ > 0 && latency > 0 ? std::min(bw, tcp_gamma_ / (2 * latency)) : bw;
    // A memcpy's legs (RAM -> core, core -> RAM) both go at the thread's copy rate.
    leg.rate = std::min(leg.rate, cpu_copy_rate);
    p.legs.push_back(std::move(leg));
    p.stream_bw = std::min({p.stream_bw, bw, cpu_copy_rate});
  }
  double slowest = std::numeric_limits<double>::infinity();
  for (const auto& leg : p.legs)
    slowest = std::min(slowest, leg.rate);
  // Each link the copy crosses, with the bottleneck nearest to it along the path.
  std::vector<int> flat, bottleneck_at;
  for (auto& leg : p.legs) {
    // A thread's memcpy is bound by the thread (its copy rate), not by a link: no leg is narrowest.
    leg.narrowest = !std::isfinite(cpu_copy_rate) && leg.rate <= 1.001 * slowest;
    for (int l : leg.links) {
      if (leg.narrowest && link_loads_[l].bandwidth <= 1.001 * slowest)
        bottleneck_at.push_back(static_cast<int>(flat.size()));
      flat.push_back(l);
    }
  }
  for (size_t i = 0; i < flat.size(); i++) {
    int nearest = -1;
    for (int at : bottleneck_at)
      if (nearest < 0 || std::abs(at - static_cast<int>(i)) < std::abs(nearest - static_cast<int>(i)))
        nearest = at;
    const int bottleneck = nearest < 0 ? flat[i] : flat[nearest];
    auto c = std::find_if(p.crossings.begin(), p.crossings.end(),
                          [&](const auto& x) { return x.link == flat[i]; });
    if (c == p.crossings.end())
      p.crossings.push_back({flat[i], 1, bottleneck});
    else
      c->times++;
  }
  int id = static_cast<int>(paths_.size());
  paths_.push_back(std::move(p));
  path_ids_.emplace(legs, id);
  return id;
}

int NumaEffects::link_id(const sg4::Link* l) {
  auto it = link_ids_.find(l);
  if (it != link_ids_.end())
    return it->second;
  LinkLoad load;
  load.link = l;
  load.bandwidth = l->get_bandwidth();
  for (const auto& r : ranks_)
    if (r.mem && r.mem->carries_kernel_traffic(l)) {
      load.kernels = r.mem.get();
      load.kernel_terms = r.mem->kernel_terms(l);
      load.controller = r.mem->controller_of(l);
    }
  link_loads_.push_back(load);
  return link_ids_[l] = static_cast<int>(link_loads_.size() - 1);
}

std::pair<double, double> NumaEffects::route_latbw(const sg4::Host* a, const sg4::Host* b) {
  auto key = std::make_pair(a, b);
  auto it = latbw_.find(key);
  if (it == latbw_.end())
    it = latbw_.emplace(key, route_latency_bandwidth(a, b)).first;
  return it->second;
}

double NumaEffects::control_delay(int rank, const sg4::Host* driver, const sg4::Host* gpu) {
  const auto [lat, bw] = route_latbw(driver, gpu);
  double bytes = ranks_[rank].p.control_message_bytes;
  return lat + (std::isfinite(bw) && bw > 0 ? bytes / bw : 0);
}

void NumaEffects::stream_demand(int path, int sign) {
  const Path& p = paths_[path];
  if (!std::isfinite(p.stream_bw) || p.stream_bw <= 0)
    return;
  for (const auto& c : p.crossings) {
    LinkLoad& l = link_loads_[c.link];
    const double before = l.controller >= 0 ? copies_load(l) : 0.0;
    auto& groups = l.groups;
    auto g = std::find_if(groups.begin(), groups.end(),
                          [&c](const CopyGroup& x) { return x.bottleneck == c.bottleneck; });
    if (g == groups.end()) {
      groups.emplace_back();
      g = groups.end() - 1;
      g->bottleneck = c.bottleneck;
    }
    g->rate += sign * c.times * p.stream_bw;
    g->by_times[std::min(c.times, 3)] += sign;
    if (g->by_times[1] + g->by_times[2] + g->by_times[3] == 0) { // the last one ended
      *g = groups.back();
      groups.pop_back();
    }
    if (l.controller >= 0)
      l.kernels->add_stream(l.controller, copies_load(l) - before);
  }
}

double NumaEffects::copies_load(const LinkLoad& l) const {
  // An upper bound of the rate of the copies crossing l: each copy streams at most at its
  // pipeline's rate, and the copies that share a bottleneck together at most at its bandwidth
  // (five messages arriving from five senders share the receiver's 10 GbE port: its MPI core
  // forwards 1.25 GB/s, not five times that). A copy is counted under its bottleneck nearest to l
  // (a message's sender-side links under the sender's port, its receiver-side links under the
  // receiver's), and as many times as it crosses l.
  double load = 0;
  for (const auto& g : l.groups) {
    const int times = g.by_times[3] > 0 ? 3 : g.by_times[2] > 0 ? 2 : 1;
    load += std::min(g.rate, times * link_loads_[g.bottleneck].bandwidth);
  }
  return load;
}

bool NumaEffects::oversubscribed(const PathLeg& leg) const {
  for (int id : leg.links) {
    const LinkLoad& l = link_loads_[id];
    const double kernels = l.kernels ? l.kernels->kernel_load(l.kernel_terms) : 0.0;
    if (kernels + copies_load(l) > l.bandwidth)
      return true;
  }
  return false;
}

std::vector<std::string> NumaEffects::control_links(int gpu_gmem) {
  sg4::Host* drv = driver_of_gpu_mem_[gpu_gmem];
  if (!drv)
    return {};
  Legs legs;
  legs.add(drv, topo_.mem(gpu_gmem).host);
  return paths_[intern(legs)].links;
}

void NumaEffects::run_legs(int path, const Legs& legs, double bytes, const Dma* dma) {
  // Legs of one pipelined copy run concurrently: the copy ends when its slowest leg ends, and
  // each leg contends on its own links. A leg faster than the pipeline's rate only carries what
  // the narrowest leg drains, spread over the whole copy; as a SimGrid flow it would run as a
  // burst at its own rate (a message's RAM -> MPI-core leg at a core's 12 GB/s in the first
  // 0.6 ms of a 6.4 ms Ethernet transfer), loading its links with traffic that is not there. So,
  // decided at the copy's start (stream_demand has counted this copy): the narrowest legs are
  // flows; a faster leg is a flow only where one of its links is oversubscribed by the copies'
  // streams and the kernels' average rates (then it may bind); otherwise it takes its time alone
  // (latency + bytes / rate), which the copy waits for if the flows end earlier. At most 5 legs
  // (an MPI message): a fixed array, no allocation per copy.
  if (legs.size() == 1) {
    if (!dma) {
      run_flow(legs[0].src, legs[0].dst, bytes);
      return;
    }
    const PathLeg& leg = paths_[path].legs[0];
    const auto r =
        dma->mem->dma_copy(legs[0].src, legs[0].dst, bytes, dma->numa, dma->to_memory, leg.latency, leg.rate);
    dma_split_ += r.flows > 1;
    dma_window_bound_ += r.window_bound;
    return;
  }
  // Decided before any simcall: other actors may intern paths (and move paths_) meanwhile.
  const double start = sg4::Engine::get_clock();
  double alone_end = start;
  std::array<bool, kMaxLegs> flow{};
  for (size_t i = 0; i < legs.size(); i++) {
    const PathLeg& leg = paths_[path].legs[i];
    flow[i] = leg.narrowest || oversubscribed(leg);
    if (!flow[i]) {
      spread_legs_++;
      alone_end = std::max(alone_end, start + leg.latency + static_cast<uint64_t>(bytes) / leg.rate);
    }
  }
  std::array<FlowId, kMaxLegs> flows{};
  size_t n = 0;
  for (size_t i = 0; i < legs.size(); i++)
    if (flow[i])
      flows[n++] = start_flow(legs[i].src, legs[i].dst, bytes);
  for (size_t i = 0; i < n; i++)
    wait_flow(flows[i]);
  const double left = alone_end - sg4::Engine::get_clock();
  if (left > 0)
    numasim::sleep_for(left);
}

std::pair<sg4::Host*, sg4::Host*> NumaEffects::network_split(int a, int b) {
  // The NICs where the message's route between the two MPI threads leaves node a and enters
  // node b, when that route is exactly (thread a -> NIC a) + (NIC a -> NIC b) + (NIC b -> thread b);
  // {nullptr, nullptr} otherwise (then the message stays one leg between the threads).
  const size_t n = ranks_.size(), k = static_cast<size_t>(a) * n + b;
  if (split_.empty()) {
    split_.assign(n * n, {nullptr, nullptr});
    split_known_.assign(n * n, 0);
  }
  if (split_known_[k])
    return split_[k];
  split_known_[k] = 1;
  auto links = [](sg4::Host* x, sg4::Host* y) {
    std::vector<sg4::Link*> l;
    double lat = 0;
    x->route_to(y, l, &lat);
    return l;
  };
  sg4::Host* ta = ranks_[a].mpi_host;
  sg4::Host* tb = ranks_[b].mpi_host;
  const auto whole = links(ta, tb);
  for (const auto& na : topo_.nodes()[a].nics)
    for (const auto& nb : topo_.nodes()[b].nics) {
      auto parts = links(ta, na.host);
      auto mid = links(na.host, nb.host), tail = links(nb.host, tb);
      parts.insert(parts.end(), mid.begin(), mid.end());
      parts.insert(parts.end(), tail.begin(), tail.end());
      if (parts == whole && !mid.empty())
        return split_[k] = {na.host, nb.host};
    }
  return split_[k];
}

int NumaEffects::move(const Transfer& tr, const Worker* worker) {
  // A copy: transfers_ may grow (and move) while this actor blocks.
  struct {
    bool mpi;
    uint32_t recv, handle;
    int rank, gsrc, gdst;
    double submitted;
  } const t{tr.mpi, tr.recv, tr.handle, tr.rank, tr.gsrc, tr.gdst, tr.submitted};
  const MemNode& src = topo_.mem(t.gsrc);
  const MemNode& dst = topo_.mem(t.gdst);
  Legs legs;
  auto add = [&](sg4::Host* a, sg4::Host* b) {
    if (a != b)
      legs.add(a, b);
  };
  double cpu_rate = std::numeric_limits<double>::infinity(); // finite for a memcpy
  if (t.mpi) {
    // StarPU-MPI: the progression thread copies the data between the RAM replica and the NIC
    // (mpi/src/mpi/starpu_mpi_mpi.c, numasim: mpi/starpu_mpi.cpp; TCP sends and receives are CPU copies in
    // that thread), so the message crosses the thread's socket on both ends: RAM -> MPI core -> NIC ->
    // network -> NIC -> MPI core -> RAM. A thread on the NIC's remote socket adds the inter-socket link.
    // The sender is the tile's owner, or a receiver forwarding the copy it received
    // (mpi/starpu_mpi.hpp, NewMadeleine's multicast): its own replica, thread and NIC.
    const Reception& rc = dag_.receptions[t.recv];
    const int from = src.rank;
    uint32_t hs = data_.handle(from, rc.tile);
    RankInfo& rd = ranks_[rc.dst];
    if (!rd.use_numa && page_[t.handle] < 0) // receive buffer first touched by the progression thread
      page_[t.handle] = static_cast<int8_t>(rd.mpi_numa);
    record_alloc(t.handle, dst.local, AllocKind::mpi, rd.use_numa ? -1 : rd.mpi_numa);
    // The network part is its own leg (NIC to NIC): the legs are pipelined, each contending on its
    // own links, as for the other legs; this keeps each node's links out of the other nodes'
    // sharing systems (SimGrid re-solves a flow's whole connected component at each event).
    add(ram_host(from, hs, t.gsrc), ranks_[from].mpi_host);
    auto [nic_src, nic_dst] = network_split(from, rc.dst);
    if (nic_src) {
      add(ranks_[from].mpi_host, nic_src);
      add(nic_src, nic_dst);
      add(nic_dst, rd.mpi_host);
    } else
      add(ranks_[from].mpi_host, rd.mpi_host);
    add(rd.mpi_host, ram_host(rc.dst, t.handle, t.gdst));
  } else if (src.gpu != dst.gpu) {
    // cudaMemcpyAsync submitted by the GPU's driver thread: the submission travels from the
    // driver's core to the GPU before the DMA starts (cross-socket when the driver is remote). It
    // leaves when StarPU issues the copy (`submitted`), not when the stream is free: a copy queued
    // behind the stream's earlier copies had its submission arrive meanwhile (asynchronous CUDA
    // copies are enqueued on the stream; the DMA engine runs them back to back), as a kernel
    // launched ahead pays no launch latency (run_on_gpu).
    int g = src.gpu ? t.gsrc : t.gdst;
    sg4::Host* drv = driver_of_gpu_mem_[g];
    if (drv && cfg_.mechanisms(Mechanism::launch_costs)) {
      double& d = copy_control_delay_[g];
      if (std::isnan(d))
        d = control_delay(topo_.mem(g).rank, drv, topo_.mem(g).host);
      const double now = sg4::Engine::get_clock();
      const double wait = now == t.submitted ? d : t.submitted + d - now; // d exactly on an idle stream
      if (wait > 0)
        numasim::sleep_for(wait);
    }
    sg4::Host* ram = src.gpu ? ram_host(t.rank, t.handle, t.gdst) : ram_host(t.rank, t.handle, t.gsrc);
    if (src.gpu)
      add(src.host, ram);
    else
      add(ram, dst.host);
    const RankInfo& ri = ranks_[t.rank];
    auto numa = std::find(ri.ram.begin(), ri.ram.end(), ram);
    if (ri.mem && numa != ri.ram.end() && legs.size() == 1 && cfg_.mechanisms(Mechanism::dma_under_load)) {
      const Dma dma{ri.mem.get(), static_cast<int>(numa - ri.ram.begin()), src.gpu};
      return copy(legs, data_.tile_bytes(), cpu_rate, &dma);
    }
  } else if (!src.gpu && !dst.gpu) {
    // RAM -> RAM (STARPU_USE_NUMA's copies between NUMA nodes): a memcpy by a worker of the
    // destination node, reading through its core's link and writing back through it (memory_bench's
    // memcpy), not a DMA at the inter-socket link's rate.
    sg4::Host* from = ram_host(t.rank, t.handle, t.gsrc);
    sg4::Host* to = ram_host(t.rank, t.handle, t.gdst);
    Topology::CopyThread thread = topo_.copy_thread(t.rank, dst.numa);
    if (worker) { // the thread that progressed the request (DataWizard::run_ram_copy)
      thread.core = thread_core(*worker);
      auto known = thread_rate_.find(thread.core);
      if (known == thread_rate_.end()) { // half its core's link, as Topology::copy_thread
        std::vector<sg4::Link*> links;
        double latency = 0;
        thread.core->route_to(to, links, &latency);
        const double rate =
            links.empty() ? std::numeric_limits<double>::infinity() : links.front()->get_bandwidth() / 2;
        known = thread_rate_.emplace(thread.core, rate).first;
      }
      thread.rate = known->second;
    }
    if ((from != to || worker) && thread.core) {
      add(from, thread.core);
      add(thread.core, to);
      cpu_rate = thread.rate;
    } else
      add(from, to); // no CPU worker on the node: nothing to model the thread with
  } else {
    add(src.host, dst.host); // GPU -> GPU
  }
  if (legs.empty()) // both ends on the same host (pages already where the copy goes)
    legs.add(src.host, dst.host);
  return copy(legs, data_.tile_bytes(), cpu_rate);
}

int NumaEffects::copy(const Legs& legs, double bytes, double cpu_copy_rate, const Dma* dma) {
  int path = intern(legs, cpu_copy_rate);
  stream_demand(path, +1);
  run_legs(path, legs, bytes, dma);
  stream_demand(path, -1);
  return path;
}

double NumaEffects::run_task(const Worker& w, uint32_t task, double duration) {
  const double now = sg4::Engine::get_clock();
  if (w.cuda)
    run_on_gpu(w, duration);
  else
    run_on_cpu(w, task, duration);
  return now;
}

void NumaEffects::run_on_gpu(const Worker& w, double duration) {
  // The driver launches the kernel asynchronously as soon as the operands are there; when the
  // GPU has been idle (nothing launched ahead), the launch latency driver core -> GPU is paid
  // before the kernel starts (drivers/cuda/driver_cuda.c; hidden by STARPU_CUDA_PIPELINE).
  const double now = sg4::Engine::get_clock();
  if (now > last_end_[w.id] && cfg_.mechanisms(Mechanism::launch_costs)) {
    if (sg4::Host* drv = driver_of_gpu_mem_[topo_.global_mem(w.rank, w.mem)]) {
      double& d = launch_control_delay_[w.id];
      if (std::isnan(d))
        d = control_delay(w.rank, drv, w.host);
      if (d > 0) {
        launch_waits_++;
        numasim::sleep_for(d);
      }
    }
  }
  const double start = sg4::Engine::get_clock();
  if (gpu_kernel_) {
    gpu_kernel_(w, start, duration);
  } else {
    if (duration > 0)
      numasim::sleep_for(duration);
    // A pinned allocation on the node during the kernel pauses it (DataWizard::wait_out_holds).
    data_.wait_out_holds(topo_.global_mem(w.rank, w.mem), -1, start);
  }
  last_end_[w.id] = sg4::Engine::get_clock();
}

// Bytes the CPU kernel of `task` moves from each NUMA node's RAM; records the operands' pages and
// remote bytes for the trace. Returns the remote bytes.
double NumaEffects::kernel_traffic(const Worker& w, uint32_t task, double* by_node) {
  const Task& t = dag_.tasks[task];
  const RankInfo& ri = ranks_[w.rank];
  double passes = ri.p.gemm_block_k > 0 ? std::ceil(cfg_.b / ri.p.gemm_block_k) : 1.0;
  uint16_t packed = 0;
  double remote = 0;
  for (uint8_t i = 0; i < t.nbuf; i++) {
    uint32_t h = t.handles[i];
    int p = operand_numa(w, h);
    if (!op_alloc_.empty())
      op_alloc_[task][i] = slot_alloc_[static_cast<size_t>(h) * topo_.mem_stride() + w.mem];
    packed |= static_cast<uint16_t>((p >= 0 && p < kMaxNumaNodes ? p : 15) << (4 * i));
    if (p < 0 || p >= ri.mem->nnuma())
      continue;
    double bytes = (i + 1 == t.nbuf ? 2 * passes : 1.0) * data_.tile_bytes();
    by_node[p] += bytes;
    if (p != w.numa)
      remote += bytes;
  }
  for (uint8_t i = t.nbuf; i < 4; i++)
    packed |= static_cast<uint16_t>(15u << (4 * i));
  if (!op_pages_.empty()) { // a trace is asked for
    op_pages_[task] = packed;
    remote_bytes_[task] = static_cast<float>(remote);
  }
  if (remote > 0) {
    remote_total_ += remote;
    remote_tasks_++;
  }
  for (int p = 0; p < kMaxNumaNodes; p++)
    kernel_bytes_ += by_node[p];
  return remote;
}

void NumaEffects::run_on_cpu(const Worker& w, uint32_t task, double duration) {
  if (ranks_[w.rank].balancing)
    hinting_faults(w, task);
  // The kernel's memory traffic (docs/memory-model.md): read-only operands are read once; the
  // written tile is read and written once per pass over k (ceil(b / kc) passes of a k-blocked
  // BLAS; one pass without kc). All of it, local or remote, goes through the memory controller of
  // the node holding the pages, concurrently with the computation; the part of the kernel stalled
  // on memory latency grows with the latency of those pages (hop, controller load).
  RankInfo& ri = ranks_[w.rank];
  double by_node[kMaxNumaNodes] = {0, 0, 0, 0};
  const double remote = kernel_traffic(w, task, by_node);
  const int kind = static_cast<int>(dag_.tasks[task].kind);
  if (remote > 0 && ri.spread[kind] != 1 && cfg_.variability) {
    double bytes = 0;
    for (int p = 0; p < kMaxNumaNodes; p++)
      bytes += by_node[p];
    duration = respread(duration, w.length[kind], w.dev[kind], ri.spread[kind], remote / bytes);
  }
  ri.mem->begin_kernel(w.numa, by_node, duration);
  const double d = cfg_.mechanisms(Mechanism::memory_latency_stall)
                       ? ri.mem->stretched(ri.stall[kind], w.numa, by_node, duration)
                       : duration;
  stall_time_ += d - duration;
  std::array<FlowId, kMaxNumaNodes> traffic{};
  const size_t nflows = cfg_.mechanisms(Mechanism::memory_bandwidth_sharing)
                            ? ri.mem->start_traffic(w.host, w.numa, by_node, d, traffic)
                            : 0;
  kernel_flows_ += nflows;
  if (d > 0)
    numasim::sleep_for(d);
  for (size_t i = 0; i < nflows; i++)
    wait_flow(traffic[i]);
  ri.mem->end_kernel(w.numa, by_node, duration);
}

double NumaEffects::respread(double d, double mean, double sd, double ratio, double remote_share) {
  // Lognormal d = m exp(-s2/2 + s z) (Simulation::sample_duration): m (d/m)^f has log-sd f s
  // and mean m exp(f (f - 1) s2 / 2), divided out.
  if (d <= 0 || mean <= 0 || sd <= 0)
    return d;
  const double f = 1 + (ratio - 1) * remote_share;
  const double s2 = std::log1p((sd * sd) / (mean * mean));
  return mean * std::pow(d / mean, f) * std::exp(-f * (f - 1) * s2 / 2);
}

double NumaEffects::remote_bytes(uint32_t task) const {
  if (remote_bytes_.empty())
    throw std::logic_error("NumaEffects::remote_bytes: recorded only when a trace is asked for");
  return remote_bytes_[task];
}

std::string NumaEffects::operand_pages(uint32_t task) const {
  if (op_pages_.empty())
    throw std::logic_error("NumaEffects::operand_pages: recorded only when a trace is asked for");
  const Task& t = dag_.tasks[task];
  if (t.worker >= 0 && topo_.workers()[t.worker].cuda)
    return "gpu";
  std::string s;
  for (uint8_t i = 0; i < t.nbuf; i++) {
    int v = (op_pages_[task] >> (4 * i)) & 15;
    s += (i ? " " : "") + (v == 15 ? std::string("?") : std::to_string(v));
  }
  return s;
}

std::string NumaEffects::operand_allocators(uint32_t task) const {
  if (op_alloc_.empty())
    throw std::logic_error("NumaEffects::operand_allocators: recorded only when a trace is asked for");
  const Task& t = dag_.tasks[task];
  if (t.worker >= 0 && topo_.workers()[t.worker].cuda)
    return "gpu";
  static const char* const names[] = {"?", "main", "cpu", "cuda", "copy", "mpi"};
  std::string s;
  char buf[48];
  for (uint8_t i = 0; i < t.nbuf; i++) {
    const FirstAlloc& a = op_alloc_[task][i];
    if (a.kind == AllocKind::none)
      std::snprintf(buf, sizeof buf, "%s?", i ? " " : "");
    else
      std::snprintf(buf, sizeof buf, "%s%s:%d:%.6f", i ? " " : "", names[static_cast<int>(a.kind)], a.numa,
                    static_cast<double>(a.at));
    s += buf;
  }
  return s;
}

std::map<std::string, double> NumaEffects::summary() const {
  return {{"remote_read_bytes", remote_total_},
          {"remote_read_tasks", static_cast<double>(remote_tasks_)},
          {"hinting_faults", static_cast<double>(faults_)},
          {"fault_time_s", fault_time_},
          {"migrations", static_cast<double>(migrations_)},
          {"migrated_bytes", migrated_bytes_},
          {"gpu_launch_waits", static_cast<double>(launch_waits_)},
          {"memory_stall_s", stall_time_},
          {"kernel_flows", static_cast<double>(kernel_flows_)},
          {"spread_copy_legs", static_cast<double>(spread_legs_)},
          {"dma_split_copies", static_cast<double>(dma_split_)},
          {"dma_window_bound_copies", static_cast<double>(dma_window_bound_)},
          {"kernel_memory_bytes", kernel_bytes_}};
}

} // namespace numasim
