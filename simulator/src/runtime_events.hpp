// What StarPU's FxT trace records besides tasks and copies, for the runs that ask for it (run
// description `events`, docs/interfaces.md §4 and §10): when tasks enter and leave the scheduler,
// the threads' states (a worker asleep or progressing a copy, the MPI thread's requests), the
// memory managers' allocations and frees, and the bytes allocated on each GPU memory node. Off
// (a null log) unless asked for: the simulation never reads it, so it changes no result.
#pragma once
#include <cstdint>
#include <vector>

namespace numasim {

// StarPU's names where StarPU has one (src/debug/traces/starpu_paje.c: the worker states "Sleeping",
// "Progressing"; the MPI thread's "Sleeping", "SendSubmitted", "ReceiveCompleted"; the memory node
// states "Allocating", "AllocatingReuse", "Freeing"; the variable "Used (MB)"); push and pop are
// FxT's _STARPU_FUT_JOB_PUSH / _STARPU_FUT_JOB_POP, which its tool counts as ready tasks. The
// submissions are not logged: the main thread submits the whole graph at 0 (Simulation::run), and
// the writer lists them (output.cpp).
enum class EventType : uint8_t {
  Push,             // a task entered the scheduler (all its dependencies met): who = -1, value = task
  Pop,              // a worker took a task from the scheduler: who = worker, value = task
  Sleeping,         // a worker's thread (who) or the MPI thread of rank `where` (who = -1) waited
  Progressing,      // a worker's thread ran a copy between RAM nodes (its allocation included)
  SendSubmitted,    // the MPI thread of rank `where` handled a send request
  ReceiveCompleted, // the MPI thread of rank `where` handled a landed message
  Allocating,       // a new buffer on memory node `where` (global), by thread `who` (-1: no worker's:
                    // a copy actor, or the main thread for a reception's buffer)
  AllocatingReuse,  // a GPU buffer taken from the chunks StarPU keeps (no allocation call)
  Freeing,          // a GPU chunk given back (cudaFree)
  Used,             // bytes allocated on GPU memory node `where` from now on (value)
};
const char* event_name(EventType t);

struct RuntimeEvent {
  double start, end;
  double value;
  int32_t who;   // worker id, -1: none
  int32_t where; // global memory node, or rank (Push, MPI thread states)
  EventType type;
};

struct RuntimeEvents {
  std::vector<RuntimeEvent> log;
  void add(EventType type, double start, double end, int32_t who, int32_t where, double value = 0) {
    log.push_back({start, end, value, who, where, type});
  }
};

} // namespace numasim
