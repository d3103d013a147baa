// The scheduling policy interface (StarPU core/sched_policy.c, struct starpu_sched_policy): a
// ready task is pushed, a worker pops its next task, a hook runs when a task ends. One file per
// policy: dmda.cpp (dmda, dmdas, dmdasd), eager.cpp, lws.cpp; make_sched_policy picks one from
// STARPU_SCHED.
#pragma once
#include "datawizard/datawizard.hpp"
#include "lu_dag.hpp"
#include "topology.hpp"

#include <memory>
#include <vector>

namespace numasim {

// What a policy reads and acts on: the graph, the workers, the replicas.
struct SchedContext {
  const RunConfig& cfg;
  Topology& topo;
  Dag& dag;
  DataWizard& data;
};

class SchedPolicy {
public:
  // sums_by_prio: keep Worker::queued_ps (queued_at_least) in step with the queues; only dmdasd
  // reads them, and updating them on every push and pop cost the other policies ≈ 2 % of a run.
  explicit SchedPolicy(SchedContext ctx, bool sums_by_prio = false);
  virtual ~SchedPolicy() = default;
  // A task became ready (its predecessors ended); releasing_worker: the worker that ended the
  // last of them, -1 for the main thread or an MPI reception.
  virtual void push(uint32_t task, int releasing_worker) = 0;
  // The next task of worker w, or -1 if none.
  virtual int32_t pop(Worker& w) = 0;
  // A task ended on w (post_exec_hook).
  virtual void post_exec(Worker& w) { (void)w; }
  // The worker dmda would choose for a ready task (tests); -1 for the other policies.
  virtual int choose(uint32_t task, double* best_fitness) { return (void)task, (void)best_fitness, -1; }
  // Tasks queued outside the workers' queues (the stall report).
  virtual size_t central_queued() const { return 0; }

protected:
  SchedContext ctx_;
  uint64_t seq_ = 0;                 // order of pushes
  std::vector<int32_t> prio_levels_; // distinct task priorities, decreasing
  std::vector<uint32_t> prio_rank_;  // per task: index of its priority in prio_levels_ (sums_by_prio)

  bool can_run(const Worker& w, uint32_t task) const {
    return w.length[static_cast<int>(ctx_.dag.tasks[task].kind)] >= 0;
  }
  // A worker's queue (sorted by priority, or FIFO with `sorted` false), with Worker::queued_ps
  // in step when sums_by_prio (fifo_queues.c).
  void queue_insert(Worker& w, uint32_t task, bool sorted);
  void queue_erase(Worker& w, TaskQueue::const_iterator it);
  // Wakes an idle worker of `rank` able to run t.
  void wake_idle(int rank, const Task& t);
  // Model lengths of the tasks queued on w with a priority >= prio (Fenwick prefix sum; needs
  // sums_by_prio).
  double queued_at_least(const Worker& w, int32_t prio) const;

private:
  const bool sums_by_prio_;
  void queue_add(Worker& w, uint32_t task, int sign);
};

std::unique_ptr<SchedPolicy> make_dmda(SchedContext ctx, Scheduler variant);
std::unique_ptr<SchedPolicy> make_eager(SchedContext ctx);
std::unique_ptr<SchedPolicy> make_lws(SchedContext ctx);
// The policy STARPU_SCHED names (core/sched_policy.c _starpu_select_sched_policy).
std::unique_ptr<SchedPolicy> make_sched_policy(SchedContext ctx);

} // namespace numasim
