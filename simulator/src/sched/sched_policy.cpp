// The policy interface's shared parts: per-worker priority queues (StarPU
// sched_policies/fifo_queues.c) and the choice of a policy from STARPU_SCHED
// (core/sched_policy.c).
#include "sched/sched_policy.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

XBT_LOG_NEW_DEFAULT_SUBCATEGORY(numasim_sched, numasim, "numasim scheduling policies");

namespace numasim {

SchedPolicy::SchedPolicy(SchedContext ctx, bool sums_by_prio) : ctx_(ctx), sums_by_prio_(sums_by_prio) {
  if (!sums_by_prio_)
    return;
  const auto& tasks = ctx_.dag.tasks;
  for (const auto& t : tasks)
    prio_levels_.push_back(t.prio);
  std::sort(prio_levels_.begin(), prio_levels_.end(), std::greater<>());
  prio_levels_.erase(std::unique(prio_levels_.begin(), prio_levels_.end()), prio_levels_.end());
  prio_rank_.resize(tasks.size());
  for (size_t i = 0; i < tasks.size(); i++)
    prio_rank_[i] = static_cast<uint32_t>(
        std::lower_bound(prio_levels_.begin(), prio_levels_.end(), tasks[i].prio, std::greater<>()) -
        prio_levels_.begin());
  for (auto& w : ctx_.topo.workers())
    w.queued_ps.assign(prio_levels_.size() + 1, 0);
}

void SchedPolicy::queue_add(Worker& w, uint32_t task, int sign) {
  if (!sums_by_prio_)
    return;
  int64_t ps = sign * std::llround(static_cast<double>(ctx_.dag.tasks[task].predicted) * 1e12);
  for (size_t i = prio_rank_[task] + 1; i < w.queued_ps.size(); i += i & (~i + 1))
    w.queued_ps[i] += ps;
}

void SchedPolicy::queue_insert(Worker& w, uint32_t task, bool sorted) {
  w.queue.insert({sorted ? ctx_.dag.tasks[task].prio : 0, task, seq_++});
  queue_add(w, task, +1);
}

void SchedPolicy::queue_erase(Worker& w, TaskQueue::const_iterator it) {
  uint32_t task = it->task;
  w.queue.erase(it);
  queue_add(w, task, -1);
}

double SchedPolicy::queued_at_least(const Worker& w, int32_t prio) const {
  if (!sums_by_prio_)
    throw std::logic_error("SchedPolicy::queued_at_least: the policy was built without sums_by_prio");
  size_t n =
      static_cast<size_t>(std::upper_bound(prio_levels_.begin(), prio_levels_.end(), prio, std::greater<>()) -
                          prio_levels_.begin());
  int64_t ps = 0;
  for (size_t i = n; i > 0; i -= i & (~i + 1))
    ps += w.queued_ps[i];
  return static_cast<double>(ps) * 1e-12;
}

void SchedPolicy::wake_idle(int rank, const Task& t) {
  for (int wid : ctx_.topo.rank_workers(rank)) {
    Worker& w = ctx_.topo.workers()[wid];
    if (w.suspended && w.inflight.empty() && w.length[static_cast<int>(t.kind)] >= 0) {
      wake(w);
      return;
    }
  }
}

std::unique_ptr<SchedPolicy> make_sched_policy(SchedContext ctx) {
  switch (ctx.cfg.env.sched) {
  case Scheduler::dmda:
  case Scheduler::dmdas:
  case Scheduler::dmdasd:
    return make_dmda(ctx, ctx.cfg.env.sched);
  case Scheduler::eager:
    return make_eager(ctx);
  case Scheduler::lws:
    return make_lws(ctx);
  }
  return nullptr;
}

} // namespace numasim
