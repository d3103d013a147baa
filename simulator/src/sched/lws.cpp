// lws, locality work stealing (StarPU sched_policies/work_stealing_policy.c): a ready task goes to
// the queue of the worker that released it (priority-sorted); an idle worker steals from the next
// workers in turn.
#include "sched/sched_policy.hpp"

#include <algorithm>

XBT_LOG_NEW_DEFAULT_SUBCATEGORY(numasim_lws, numasim, "numasim lws policy");

namespace numasim {

namespace {
class Lws final : public SchedPolicy {
public:
  explicit Lws(SchedContext ctx) : SchedPolicy(ctx) {}
  void push(uint32_t task, int releasing_worker) override;
  int32_t pop(Worker& w) override;

private:
  int32_t take(Worker& from, Worker& w);
};

void Lws::push(uint32_t task, int releasing_worker) {
  Task& t = ctx_.dag.tasks[task];
  auto& workers = ctx_.topo.workers();
  int wid = releasing_worker; // the releasing worker's own queue
  if (wid < 0 || workers[wid].rank != t.rank || !can_run(workers[wid], task)) {
    const auto& ws = ctx_.topo.rank_workers(t.rank);
    wid = -1;
    for (size_t i = 0; i < ws.size() && wid < 0; i++) {
      const Worker& c = workers[ws[(seq_ + i) % ws.size()]];
      if (can_run(c, task))
        wid = c.id;
    }
  }
  Worker& w = workers[wid];
  t.worker = w.id;
  t.predicted = static_cast<float>(w.length[static_cast<int>(t.kind)]);
  queue_insert(w, task, true);
  wake(w);
  wake_idle(t.rank, t); // an idle worker may steal it
}

int32_t Lws::take(Worker& from, Worker& w) {
  for (auto it = from.queue.begin(); it != from.queue.end(); ++it)
    if (can_run(w, it->task)) {
      uint32_t task = it->task;
      queue_erase(from, it);
      ctx_.dag.tasks[task].worker = w.id;
      return static_cast<int32_t>(task);
    }
  return -1;
}

int32_t Lws::pop(Worker& w) {
  int32_t got = take(w, w);
  const auto& ws = ctx_.topo.rank_workers(w.rank);
  size_t me = std::find(ws.begin(), ws.end(), w.id) - ws.begin();
  for (size_t i = 1; got < 0 && i < ws.size(); i++) // steal from the next workers in turn
    got = take(ctx_.topo.workers()[ws[(me + i) % ws.size()]], w);
  return got;
}
} // namespace

std::unique_ptr<SchedPolicy> make_lws(SchedContext ctx) {
  return std::make_unique<Lws>(ctx);
}

} // namespace numasim
