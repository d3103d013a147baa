// Linux's automatic NUMA balancing (kernel.numa_balancing = 1), the mechanism factor G switches
// off: a scanner unmaps the next scan_size bytes every scan period (kernel/sched/fair.c
// task_numa_work), the next access takes a hinting fault per page (mm/memory.c do_numa_page ->
// task_numa_fault), and a page whose two last faults came from the same other node is migrated by
// the faulting thread (should_numa_migrate_memory, mm/migrate.c migrate_misplaced_page), within a
// rate limit per target node (numamigrate_update_ratelimit). Parameters: the machine's `numa`
// keys page_bytes, hinting_fault_cost_s, balancing_scan_*, migrate_ratelimit_* (NumaParams);
// switch: Mechanism::numa_balancing (a run without it starts no scanner); test:
// tests/test_mechanisms.cpp, Mechanisms.NumaBalancingOffIsTheKernelSettingOff.
#include "datawizard/datawizard.hpp"
#include "numa_effects.hpp"
#include "sleep.hpp"

#include <algorithm>
#include <cmath>

namespace numasim {

void NumaEffects::hinting_faults(const Worker& w, uint32_t task) {
  RankInfo& ri = ranks_[w.rank];
  const Task& t = dag_.tasks[task];
  double fault_time = 0;
  for (uint8_t i = 0; i < t.nbuf; i++) {
    uint32_t h = t.handles[i];
    if (!marked_[h])
      continue;
    // The kernel touches every page of the tile: one NUMA hinting fault per page
    // (kernel/sched/fair.c task_numa_fault via mm/memory.c do_numa_page).
    marked_[h] = 0;
    faults_++;
    fault_time += std::ceil(data_.tile_bytes() / ri.p.page_bytes) * ri.p.hinting_fault_cost_s;
    int p = page_[h];
    int me = w.numa;
    // Two-pass filter (kernel/sched/fair.c should_numa_migrate_memory): migrate only when the
    // previous fault on these pages came from the same node.
    bool want = p >= 0 && p != me && last_fault_[h] == me;
    last_fault_[h] = static_cast<int8_t>(me);
    if (!want)
      continue;
    // Rate limit per target node (mm/migrate.c numamigrate_update_ratelimit).
    double now = sg4::Engine::get_clock();
    if (now > ri.window_end[me]) {
      ri.window_end[me] = now + ri.p.migrate_ratelimit_window_s;
      ri.window_bytes[me] = 0;
    }
    if (ri.window_bytes[me] + data_.tile_bytes() > ri.p.migrate_ratelimit_bytes)
      continue;
    ri.window_bytes[me] += data_.tile_bytes();
    // migrate_misplaced_page copies the pages in the faulting thread.
    if (fault_time > 0) {
      numasim::sleep_for(fault_time);
      fault_time_ += fault_time;
      fault_time = 0;
    }
    Legs legs; // a memcpy by the faulting thread, on its core
    legs.add(ri.ram[p], w.host);
    legs.add(w.host, ri.ram[me]);
    copy(legs, data_.tile_bytes(), topo_.copy_thread(w.rank, me).rate);
    page_[h] = static_cast<int8_t>(me);
    migrations_++;
    migrated_bytes_ += data_.tile_bytes();
  }
  if (fault_time > 0) {
    numasim::sleep_for(fault_time);
    fault_time_ += fault_time;
  }
}

void NumaEffects::scan_loop(int rank) {
  // task_numa_work (kernel/sched/fair.c): every scan period, the next scan_size bytes of the
  // address space are made PROT_NONE so that the next access faults. Tiles are taken in handle
  // order as the address order.
  RankInfo& ri = ranks_[rank];
  size_t per_scan =
      static_cast<size_t>(std::max(1.0, std::floor(ri.p.balancing_scan_size_bytes / data_.tile_bytes())));
  numasim::sleep_for(ri.p.balancing_scan_delay_s);
  uint64_t last_done = progress_.done_tasks;
  int idle_scans = 0;
  while (!progress_.finished) {
    size_t marked = 0;
    for (size_t visited = 0; visited < data_.ntiles() && marked < per_scan; visited++) {
      uint32_t h = data_.handle(rank, static_cast<uint32_t>(ri.scan_cursor));
      ri.scan_cursor = (ri.scan_cursor + 1) % data_.ntiles();
      if (h != kNone && page_[h] >= 0) { // kNone: a tile the rank never holds, no pages
        marked_[h] = 1;
        marked++;
      }
    }
    // Stop when nothing progresses (a deadlocked run must end, not scan forever).
    idle_scans = progress_.done_tasks == last_done ? idle_scans + 1 : 0;
    last_done = progress_.done_tasks;
    if (idle_scans > 1000)
      return;
    numasim::sleep_for(ri.p.balancing_scan_period_s);
  }
}

void NumaEffects::start_actors() {
  for (size_t r = 0; r < ranks_.size(); r++)
    if (ranks_[r].balancing) {
      int rank = static_cast<int>(r);
      auto a = sg4::Actor::create(topo_.nodes()[r].name + ".numab", ranks_[r].ram[0],
                                  [this, rank] { scan_loop(rank); });
      a->daemonize();
    }
}

} // namespace numasim
