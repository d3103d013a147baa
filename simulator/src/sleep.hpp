// numasim::sleep_for: an actor waits out a known duration (a task's computation, a launch or
// submission latency, a page fault, a NUMA-balancing scan period).
//
// sg4::this_actor::sleep_for puts an action in the CPU model's max-min system (a variable on the
// host's constraint, set up, solved around, kept in the model's action heap and freed), although
// a sleep shares nothing with anything: at study scale that is 400k actions, ~10 % of a run.
// numasim::sleep_for keeps the sleepers in its own heap and lets SimGrid know only the earliest
// date, through one kernel timer, so that SimGrid's clock stops there.
//
// It reproduces SimGrid 3.32's sleep exactly, date and order of wake-ups, so that a run gives the
// same result to the last digit (tests/golden, bench/numasim_scale.py's outputs):
// - the duration is at least surf/precision (src/surf/cpu_cas01.cpp CpuCas01::sleep) and the end
//   date is start + duration (src/kernel/resource/Model.cpp next_occurring_event_lazy);
// - at each time advance, every sleep ending within surf/precision of the new date ends
//   (src/kernel/resource/CpuImpl.cpp CpuModel::update_actions_state_lazy, double_equals), in the
//   order of the CPU model's action heap: by date; equal dates in heap insertion order (a stable
//   boost pairing heap, include/simgrid/kernel/resource/Action.hpp), i.e. sleeps begun between two
//   time advances in the reverse order of their start (CpuCas01::sleep pushes each to the front of
//   the modified set, which the next solve drains front first into the heap);
// - the sleepers wake from Engine::on_time_advance, which SimGrid calls right after a solve
//   (src/kernel/EngineImpl.cpp EngineImpl::solve): before the ended actions of the network model
//   are handled, as the CPU model's were (the CPU model precedes the network model).
// The actor suspends itself (one simcall, as sleep_for's) and is resumed from maestro; numasim
// resumes its workers, copy runners and MPI threads only when their own `suspended` flag is set,
// never while they sleep here. The heap is changed from the actor's context, not in a simcall:
// a simcall more would change the order in which actors run; SimGrid runs numasim's actors one
// at a time in one thread (contexts/nthreads = 1, its default).
#pragma once

#include <simgrid/forward.h>

namespace numasim {

void sleep_for(double seconds);

// Ends the sleep of `actor` (in sleep_for) now: it is resumed and its wake-up forgotten. For a
// thread that polls while it waits (a CUDA driver whose kernel runs on the device).
void interrupt_sleep(simgrid::s4u::Actor* actor);

// Forgets the sleepers of an earlier engine in this process (a new Simulation starts clean);
// throws InputError when SimGrid runs actors in parallel (contexts/nthreads > 1).
void reset_sleeps();

} // namespace numasim
