// Pinned host allocations holding the node's devices (StarPU src/datawizard/malloc.c); the
// measurement and the model are in malloc.hpp and docs/pinned-allocations.md.
#include "datawizard/malloc.hpp"

#include "sleep.hpp"

#include <simgrid/s4u/Engine.hpp>

#include <algorithm>

namespace numasim {

void DeviceHolds::add(double start, double end) {
  windows_.emplace_back(start, end);
  longest_ = std::max(longest_, end - start);
}

double DeviceHolds::held(double a, double b) const {
  // The first hold that can reach a, then a sweep to the right counting each instant once.
  size_t i = windows_.size();
  while (i > 0 && windows_[i - 1].first + longest_ > a)
    i--;
  double total = 0, reach = a;
  for (; i < windows_.size() && windows_[i].first < b; i++) {
    const double lo = std::max(windows_[i].first, reach), hi = std::min(windows_[i].second, b);
    if (hi > lo) {
      total += hi - lo;
      reach = hi;
    }
  }
  return total;
}

double DeviceHolds::resumes_at(double t) const {
  double end = t;
  for (size_t i = windows_.size(); i > 0 && windows_[i - 1].first + longest_ > t; i--)
    if (windows_[i - 1].first <= t)
      end = std::max(end, windows_[i - 1].second);
  return end;
}

void wait_out_holds(const DeviceHolds* a, const DeviceHolds* b, double start) {
  // Each round: the time the holds took from [from, to] beyond what the previous round already
  // slept through (`waited`) is owed; the operation resumes when the holds in progress at `to`
  // end and runs the owed time. Sleeping in one step, not in steps of the time held in the last
  // step, matters: an operation ending just inside a chain of holds would wake once per step.
  double from = start, waited = 0;
  for (;;) {
    const double to = simgrid::s4u::Engine::get_clock();
    double owed = 0, resume = to;
    for (const DeviceHolds* h : {a, b})
      if (h != nullptr && !h->empty()) {
        owed = std::max(owed, h->held(from, to) - waited);
        resume = std::max(resume, h->resumes_at(to));
      }
    // Below the clock's resolution what is left is rounding: sleep_for would round it up to
    // surf/precision.
    if (owed <= 1e-12)
      return;
    from = to;
    waited = resume - to;
    sleep_for(resume + owed - to);
  }
}

double paused_end(const DeviceHolds& h, double start, double duration) {
  // A fixed point reached from below: each round adds the holds the longer span now covers.
  double end = start + duration;
  while (!h.empty()) {
    const double e = start + duration + h.held(start, end);
    if (e <= end)
      break;
    end = e;
  }
  return end;
}

} // namespace numasim
