// The watchdog's message of a run that stalls (a deadlock: SimGrid runs out of events with tasks
// left): what the first blocked tasks and MPI messages wait for (docs/interfaces.md §7).
#include "runtime.hpp"

#include <algorithm>
#include <cstdio>

XBT_LOG_NEW_DEFAULT_SUBCATEGORY(numasim_stall, numasim, "numasim stall report");

namespace numasim {

std::string Simulation::tile_name(uint32_t tile) const {
  return "A(" + std::to_string(tile / cfg_.nt) + "," + std::to_string(tile % cfg_.nt) + ")";
}

std::string Simulation::task_name(uint32_t task) const {
  const Task& t = dag_.tasks[task];
  static const char* names[kNumKinds] = {"getrf", "trsm_row", "trsm_col", "gemm"};
  std::string s = std::string(names[static_cast<int>(t.kind)]) + "(k=" + std::to_string(t.step) +
                  ", writes " + tile_name(dag_.tile(t, t.nbuf - 1)) + ")";
  return s;
}

// Tasks prepared by a worker and waiting for operands, then queued tasks.
void Simulation::stall_tasks(std::vector<std::string>& items, size_t max_items, uint64_t& prepared,
                             uint64_t& queued) const {
  for (const auto& w : workers()) {
    for (uint32_t task : w.inflight) {
      prepared++;
      if (items.size() >= max_items)
        continue;
      const Task& t = dag_.tasks[task];
      std::string s = task_name(task) + " on " + w.name + " waits for";
      bool any = false;
      for (uint8_t i = 0; i < t.nbuf; i++)
        if (!data_->valid_on(w.rank, t.handles[i], w.mem)) {
          s += std::string(any ? ";" : "") + " " +
               data_->describe(w.rank, t.handles[i], w.mem, tile_name(dag_.tile(t, i)));
          any = true;
        }
      items.push_back(any ? s
                          : task_name(task) + " on " + w.name + " has its operands but was not started (" +
                                std::to_string(t.pending) + " operand arrivals pending" +
                                (w.suspended ? ", worker suspended)" : ")"));
    }
  }
  for (const auto& w : workers())
    for (const auto& q : w.queue) {
      queued++;
      if (items.size() < max_items)
        items.push_back(task_name(q.task) + " queued on " + w.name + " (" +
                        std::to_string(w.inflight.size()) + " tasks in its pipeline)");
    }
  queued += sched_->central_queued();
}

std::string Simulation::stall_report(size_t max_items) const {
  // One line: how many tasks never ran, then the first blocked ones (prepared by a worker and
  // waiting for operands, or queued) with what each waits for.
  std::vector<std::string> items;
  uint64_t prepared = 0, queued = 0, waiting_deps = 0;
  stall_tasks(items, max_items, prepared, queued);
  uint64_t receptions =
      mpi_->stall_items(items, max_items, [this](uint32_t tile) { return tile_name(tile); });
  for (uint16_t n : dag_.ndeps)
    waiting_deps += n > 0;
  char head[256];
  std::snprintf(
      head, sizeof head,
      "deadlock at t = %.6f s (last task ended at %.6f s): %llu of %zu tasks not executed (%llu prepared "
      "by a worker, %llu queued, %llu waiting for predecessors; %llu MPI messages not received); blocked: ",
      sg4::Engine::get_clock(), last_task_end_,
      static_cast<unsigned long long>(dag_.tasks.size() - progress_.done_tasks), dag_.tasks.size(),
      static_cast<unsigned long long>(prepared), static_cast<unsigned long long>(queued),
      static_cast<unsigned long long>(waiting_deps), static_cast<unsigned long long>(receptions));
  std::string s = head;
  for (size_t i = 0; i < items.size(); i++)
    s += (i ? " | " : "") + items[i];
  if (items.empty())
    s += "no task prepared or queued, no message under way (a release was lost)";
  return s;
}

} // namespace numasim
