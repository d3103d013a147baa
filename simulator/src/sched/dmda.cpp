// The dmda family (StarPU sched_policies/deque_modeling_policy_data_aware.c): each ready task goes
// to the worker with the best fitness α(expected end − best) + β·data penalty; dmdas and dmdasd
// keep each worker's queue sorted by priority and pop the ready task first (fifo_queues.c);
// dmdasd decides with the work queued ahead of the task's priority only.
#include "error.hpp"
#include "sched/sched_policy.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <vector>

XBT_LOG_NEW_DEFAULT_SUBCATEGORY(numasim_dmda, numasim, "numasim dmda, dmdas, dmdasd");

namespace numasim {

namespace {
class Dmda final : public SchedPolicy {
public:
  Dmda(SchedContext ctx, Scheduler variant)
      : SchedPolicy(ctx, variant == Scheduler::dmdasd), sorted_(variant != Scheduler::dmda),
        sorted_decision_(variant == Scheduler::dmdasd) {}
  void push(uint32_t task, int releasing_worker) override;
  int32_t pop(Worker& w) override;
  void post_exec(Worker& w) override { w.exp_start = sg4::Engine::get_clock(); } // dmda_post_exec_hook
  int choose(uint32_t task, double* best_fitness) override;

private:
  const bool sorted_;          // dmdas, dmdasd: priority-sorted queues, ready task first
  const bool sorted_decision_; // dmdasd: _dmda_push_task with sorted_decision = 1
  double queued_before(const Worker& w, int32_t prio) const;
  TaskQueue::const_iterator pop_ready(Worker& w);
  // Per-worker scratch of choose(), sized to the node's worker count (kept between calls: no
  // allocation per decision, and no limit on workers per node).
  std::vector<double> exp_end_, penalty_;
  // The data penalty depends on the worker's memory node only (StarPU computes it per memory
  // node, starpu_task_expected_data_transfer_time): computed once per memory node and decision
  // (choose), then read by push for the chosen worker.
  std::vector<double> mem_penalty_;
};

double Dmda::queued_before(const Worker& w, int32_t prio) const {
  // dmdasd (not dmdas, which passes sorted_decision = 0) decides with the work queued ahead of
  // the task's place in the sorted queue
  // (sched_policies/fifo_queues.c starpu_st_fifo_taskq_get_exp_len_prev_task_list, called by
  // compute_all_performance_predictions with sorted_decision = 1): the whole expected length
  // when the task goes to the tail, else the model lengths of the tasks of priority >= prio.
  if (w.queue.empty() || (w.queue.front().prio == prio && w.queue.back().prio == prio))
    return w.exp_len;
  if (w.queue.front().prio < prio)
    return 0; // the task goes to the head: only the pipeline (not modelled separately) is ahead
  if (w.queue.back().prio >= prio)
    return w.exp_len;
  return queued_at_least(w, prio);
}

int Dmda::choose(uint32_t task, double* best_fitness) {
  // compute_all_performance_predictions + the fitness loop of dmda_push_task.
  const Task& t = ctx_.dag.tasks[task];
  const double now = sg4::Engine::get_clock();
  const auto& ws = ctx_.topo.rank_workers(t.rank);
  const size_t n = ws.size();
  if (exp_end_.size() < n) {
    exp_end_.resize(n);
    penalty_.resize(n);
  }
  double* exp_end = exp_end_.data();
  double* penalty = penalty_.data();
  uint64_t known = 0; // bit m: mem_penalty_[m] is this decision's
  double best_exp_end = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < n; i++) {
    const Worker& w = ctx_.topo.workers()[ws[i]];
    double len = w.length[static_cast<int>(t.kind)];
    if (len < 0) {
      exp_end[i] = -1;
      continue;
    }
    double exp_start = std::max(w.exp_start, now);
    const auto m = static_cast<size_t>(w.mem);
    if (m >= 64)
      throw std::logic_error("dmda: more than 64 memory nodes on a rank");
    if (!(known >> m & 1)) {
      if (m >= mem_penalty_.size())
        mem_penalty_.resize(m + 1);
      mem_penalty_[m] = ctx_.data.transfer_penalty(t, w);
      known |= uint64_t{1} << m;
    }
    penalty[i] = mem_penalty_[m];
    // Work ahead of the task: the whole queue (dmda, dmdas: _dmda_push_task with
    // sorted_decision = 0), or only the work of priority >= the task's (dmdasd, sorted_decision = 1).
    double prev_len = sorted_decision_ ? queued_before(w, t.prio) : w.exp_len;
    exp_end[i] = std::max(exp_start + prev_len, now + penalty[i]) + len;
    best_exp_end = std::min(best_exp_end, exp_end[i]);
  }
  int best = -1;
  double best_fit = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < n; i++) {
    if (exp_end[i] < 0)
      continue;
    // No energy models: the γ term is 0 (local_power = 0).
    double fitness = ctx_.cfg.env.alpha * (exp_end[i] - best_exp_end) + ctx_.cfg.env.beta * penalty[i];
    if (fitness < best_fit) {
      best_fit = fitness;
      best = ws[i];
    }
  }
  if (best_fitness)
    *best_fitness = best_fit;
  return best;
}

void Dmda::push(uint32_t task, int) {
  Task& t = ctx_.dag.tasks[task];
  int wid = choose(task, nullptr);
  if (wid < 0)
    throw InputError(ctx_.cfg.file, "env",
                     std::string("a worker able to run ") + kind_name(t.kind) + " on node " +
                         ctx_.topo.nodes()[t.rank].name);
  Worker& w = ctx_.topo.workers()[wid];
  const double len = w.length[static_cast<int>(t.kind)];
  const double transfer = mem_penalty_[static_cast<size_t>(w.mem)]; // choose's, for this decision
  const double now = sg4::Engine::get_clock();
  t.worker = w.id;
  t.predicted = static_cast<float>(len);
  queue_insert(w, task, sorted_);
  // dmda_push_task_to_workers: transfer time not covered by the queue is added to exp_len.
  w.exp_start = std::max(w.exp_start, now);
  double exp_end = w.exp_start + w.exp_len;
  double extra = now + transfer < exp_end ? 0 : now + transfer - exp_end;
  w.exp_len += len + extra;
  if (ctx_.cfg.env.prefetch) // starpu_prefetch_task_input_for: start fetching the operands now
    ctx_.data.prefetch_task(t, w);
  wake(w);
}

// dmda_pop_ready_task → starpu_st_fifo_taskq_pop_first_ready_task (fifo_queues.c): among the head
// priority, the first task with the fewest non-ready operands, ties broken by the fewest of those
// not being loaded, then by the fewest not allocated (starpu_st_non_ready_buffers_size; equal
// tiles, so counts order as sizes do). Stops at a task that is ready and allocated.
TaskQueue::const_iterator Dmda::pop_ready(Worker& w) {
  auto chosen = w.queue.begin();
  int best[3] = {std::numeric_limits<int>::max(), 0, 0};
  const int32_t head_prio = chosen->prio;
  for (auto it = w.queue.begin(); it != w.queue.end() && it->prio == head_prio; ++it) {
    const Task& t = ctx_.dag.tasks[it->task];
    int cnt[3] = {0, 0, 0}; // non-ready, non-loading, non-allocated
    for (uint8_t i = 0; i < t.nbuf; i++) {
      OperandReadiness r = ctx_.data.readiness(w.rank, t.handles[i], w.mem);
      cnt[0] += !r.valid;
      cnt[1] += !r.valid && !r.loading;
      cnt[2] += !r.allocated;
    }
    if (std::lexicographical_compare(cnt, cnt + 3, best, best + 3)) {
      std::copy(cnt, cnt + 3, best);
      chosen = it;
      if (cnt[0] == 0 && cnt[2] == 0)
        break;
    }
  }
  return chosen;
}

int32_t Dmda::pop(Worker& w) {
  const double now = sg4::Engine::get_clock();
  if (w.queue.empty())
    return -1;
  auto chosen = sorted_ ? pop_ready(w) : w.queue.begin();
  uint32_t task = chosen->task;
  queue_erase(w, chosen);
  // dmda_pre_exec_hook: the task leaves the expected queue length.
  double len = ctx_.dag.tasks[task].predicted;
  w.exp_len = std::max(0.0, w.exp_len - len);
  w.exp_start = now + len;
  return static_cast<int32_t>(task);
}
} // namespace

std::unique_ptr<SchedPolicy> make_dmda(SchedContext ctx, Scheduler variant) {
  return std::make_unique<Dmda>(ctx, variant);
}

} // namespace numasim
