// eager (StarPU sched_policies/eager_central_policy.c): one central FIFO per node; an idle worker
// takes the first task it can run.
#include "sched/sched_policy.hpp"

XBT_LOG_NEW_DEFAULT_SUBCATEGORY(numasim_eager, numasim, "numasim eager policy");

namespace numasim {

namespace {
class Eager final : public SchedPolicy {
public:
  explicit Eager(SchedContext ctx) : SchedPolicy(ctx), central_(ctx.topo.nranks()) {}

  void push(uint32_t task, int) override {
    const Task& t = ctx_.dag.tasks[task];
    central_[t.rank].insert({0, task, seq_++});
    wake_idle(t.rank, t);
  }

  int32_t pop(Worker& w) override {
    auto& q = central_[w.rank];
    for (auto it = q.begin(); it != q.end(); ++it)
      if (can_run(w, it->task)) {
        uint32_t task = it->task;
        q.erase(it);
        ctx_.dag.tasks[task].worker = w.id;
        return static_cast<int32_t>(task);
      }
    return -1;
  }

  size_t central_queued() const override {
    size_t n = 0;
    for (const auto& c : central_)
      n += c.size();
    return n;
  }

private:
  std::vector<TaskQueue> central_; // one queue per rank
};
} // namespace

std::unique_ptr<SchedPolicy> make_eager(SchedContext ctx) {
  return std::make_unique<Eager>(ctx);
}

} // namespace numasim
