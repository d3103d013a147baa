// The schedulers' task queue (src/sched/task_queue.hpp) against std::set, the container it
// replaced: the same order after any sequence of inserts, head pops and erasures elsewhere.
#include "sched/task_queue.hpp"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

using namespace numasim;

static std::vector<uint32_t> tasks_of(const TaskQueue& q) {
  std::vector<uint32_t> v;
  for (const auto& k : q)
    v.push_back(k.task);
  return v;
}

TEST(TaskQueue, HighestPriorityFirstThenPushOrder) {
  TaskQueue q;
  q.insert({5, 10, 2});
  q.insert({7, 11, 3});
  q.insert({5, 12, 1});
  // sched_policies/fifo_queues.c sorted insert
  EXPECT_EQ(tasks_of(q), (std::vector<uint32_t>{11, 12, 10}));
  EXPECT_EQ(q.front().task, 11u);
  EXPECT_EQ(q.back().task, 10u);
}

TEST(TaskQueue, MatchesAnOrderedSet) {
  std::mt19937 rng(7);
  TaskQueue q;
  std::set<QueueKey> ref;
  uint64_t seq = 0;
  size_t head_pops = 0, middle_erases = 0, front_inserts = 0;
  for (int step = 0; step < 20000; step++) {
    int op = static_cast<int>(rng() % 10);
    if (op < 5 || ref.empty()) { // few priorities, so that ties are frequent
      QueueKey k{static_cast<int32_t>(rng() % 6) - 2, static_cast<uint32_t>(step), seq++};
      front_inserts += !ref.empty() && k < *ref.begin();
      q.insert(k);
      ref.insert(k);
    } else if (op < 8) {
      q.erase(q.begin());
      ref.erase(ref.begin());
      head_pops++;
    } else {
      size_t at = rng() % ref.size();
      auto qi = q.begin() + static_cast<std::ptrdiff_t>(at);
      auto ri = std::next(ref.begin(), static_cast<std::ptrdiff_t>(at));
      ASSERT_EQ(qi->task, ri->task);
      q.erase(qi);
      ref.erase(ri);
      middle_erases += at > 0;
    }
    ASSERT_EQ(q.size(), ref.size());
    ASSERT_EQ(q.empty(), ref.empty());
    if (!ref.empty()) {
      ASSERT_EQ(q.front().task, ref.begin()->task);
      ASSERT_EQ(q.back().task, ref.rbegin()->task);
    }
  }
  std::vector<uint32_t> expected;
  for (const auto& k : ref)
    expected.push_back(k.task);
  EXPECT_EQ(tasks_of(q), expected);
  // every path was taken
  EXPECT_GT(head_pops, 1000u);
  EXPECT_GT(middle_erases, 1000u);
  EXPECT_GT(front_inserts, 100u);
}
