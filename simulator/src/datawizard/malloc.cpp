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

void wait_out_holds(const DeviceHolds* a, const DeviceHolds* b, double start) {
  for (double from = start;;) {
    const double to = simgrid::s4u::Engine::get_clock();
    double extra = 0;
    for (const DeviceHolds* h : {a, b})
      if (h != nullptr && !h->empty())
        extra = std::max(extra, h->held(from, to));
    if (extra <= 0)
      return;
    from = to;
    sleep_for(extra);
  }
}

} // namespace numasim
