// Waiting out a known duration in an actor: a task's computation, a launch or submission
// latency, a fixed overhead.
//
// sg4::this_actor::sleep_for puts an action in the CPU model's max-min system (a variable on the
// host's constraint, set up, solved around and freed), although a sleep shares nothing with
// anything. hold_for takes the same simulated time through a SimGrid kernel timer that resumes
// the suspended actor (SimGrid 3.32 include/simgrid/kernel/Timer.hpp: timers run in maestro at
// their date; the timer is set in a simcall, as any change of the simulated world, and
// Actor::resume called from maestro runs at once, include/simgrid/simix.hpp simcall_answered).
// The end date is start + seconds exactly; a sleep action's end carries the CPU model's
// floating-point updates (a dgemm's end 1 ns apart in the 9th decimal), after which a schedule
// may take another course. A study-scale run takes 7 % less time (issue 13, bench/RESULTS.md).
//
// Only for an actor that nothing else resumes while it holds: numasim resumes its workers,
// copy runners and MPI threads only when their own `suspended` flag is set, which it is not here.
#pragma once
#include <simgrid/kernel/Timer.hpp>
#include <simgrid/s4u.hpp>
#include <simgrid/simix.hpp>

namespace numasim {

inline void hold_for(double seconds) {
  namespace sg4 = simgrid::s4u;
  if (seconds <= 0)
    return;
  sg4::ActorPtr self = sg4::Actor::self();
  const double date = sg4::Engine::get_clock() + seconds;
  simgrid::kernel::actor::simcall_answered(
      [self, date] { simgrid::kernel::timer::Timer::set(date, [self] { self->resume(); }); });
  sg4::this_actor::suspend();
}

} // namespace numasim
