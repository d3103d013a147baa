// A scheduler's queue of ready tasks in StarPU's order (sched_policies/fifo_queues.c: sorted by
// priority, highest first, then push order; FIFO when every priority is 0).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace numasim {

struct QueueKey {
  int32_t prio;
  uint32_t task;
  uint64_t seq; // push order (unique)
  bool operator<(const QueueKey& o) const { return prio != o.prio ? prio > o.prio : seq < o.seq; }
};

// A sorted array rather than a tree: a worker's queue holds tens of tasks (40 on average at 200²
// tiles, 9 at 100²), and a binary search and a short move over contiguous keys touch a few cache
// lines where a tree touches one scattered node per level (bench/RESULTS.md). Popping the head
// only advances an offset; the popped prefix is dropped once it outgrows the live part.
class TaskQueue {
public:
  using const_iterator = std::vector<QueueKey>::const_iterator;

  void insert(const QueueKey& k) {
    auto at = std::upper_bound(begin(), end(), k);
    if (at == begin() && head_ > 0) { // ahead of every queued task: into the popped prefix
      keys_[--head_] = k;
      return;
    }
    keys_.insert(at, k);
  }
  void erase(const_iterator it) {
    if (it != begin()) {
      keys_.erase(it);
      return;
    }
    if (++head_ == keys_.size()) {
      keys_.clear();
      head_ = 0;
    } else if (head_ > keys_.size() - head_) {
      keys_.erase(keys_.begin(), keys_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
    }
  }
  const_iterator begin() const { return keys_.begin() + static_cast<std::ptrdiff_t>(head_); }
  const_iterator end() const { return keys_.end(); }
  const QueueKey& front() const { return keys_[head_]; }
  const QueueKey& back() const { return keys_.back(); }
  bool empty() const { return head_ == keys_.size(); }
  size_t size() const { return keys_.size() - head_; }

private:
  std::vector<QueueKey> keys_; // sorted; [0, head_) already popped
  size_t head_ = 0;
};

} // namespace numasim
