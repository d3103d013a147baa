// Pinned host allocations holding the node's devices (StarPU src/datawizard/malloc.c,
// _starpu_malloc_flags_on_node: a replica of a RAM node on a node with CUDA is allocated with
// cudaHostAlloc(cudaHostAllocPortable)). Measured (calibration/microbench/hostalloc_stall.c,
// bench/data/gpu-device-h200-stall, docs/pinned-allocations.md): while one thread is in
// cudaHostAlloc, a device another thread keeps busy stops, and the kernel or copy it is running
// ends later by the held time (0.87-0.97 of the call; launches return at once). So a hold is not
// only "start nothing until the call ends" (MemState::blocked_until, which it also sets), but a
// pause of what is in flight: DeviceHolds keeps the windows, wait_out_holds lengthens an operation
// by the held time it overlapped.
#pragma once

#include <utility>
#include <vector>

namespace numasim {

class DeviceHolds {
public:
  // A hold [start, end); holds are added in order of start (the simulated clock).
  void add(double start, double end);
  // Time within [a, b] during which the device was held (overlapping holds counted once).
  double held(double a, double b) const;
  // The end of the holds in progress at `t` (`t` if none): no hold begins after the clock.
  double resumes_at(double t) const;
  bool empty() const { return windows_.empty(); }

private:
  std::vector<std::pair<double, double>> windows_;
  double longest_ = 0; // a lookup walks back only as far as a hold can reach
};

// An operation on devices `a` and `b` (nullptr: none) that has run since `start` is paused while
// one of them is held: it ends once it has had, after the clock, as much time without a hold as
// the holds took from it. The calling actor sleeps to that date in one step (past the holds in
// progress, then the time owed), then does the same for the holds that began while it slept,
// until none did.
void wait_out_holds(const DeviceHolds* a, const DeviceHolds* b, double start);
// The end of an operation of `duration` on a device with holds `h`, begun at `start`, given the
// holds known now: the date e with e = start + duration + the time held within [start, e].
double paused_end(const DeviceHolds& h, double start, double duration);

} // namespace numasim
