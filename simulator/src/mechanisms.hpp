// The mechanisms numasim models beyond the kernels' calibrated durations and the platform's
// links, each with a switch (run description `mechanisms`, docs/interfaces.md §4): the ledger of
// `testbed explain` runs a factor's levels with every mechanism on, then with each one off in
// turn, and attributes the factor's effect to them. A switch removes its mechanism's cost and
// nothing else; simulator/tests/test_mechanisms.cpp checks each against an input without that
// cost (its parameters zeroed) or against the counter that measures it.
#pragma once
#include <array>
#include <cstddef>
#include <string>

namespace numasim {

enum class Mechanism : unsigned char {
  memory_latency_stall,     // kernels stretched by the latency of remote or loaded memory
  memory_bandwidth_sharing, // kernels' traffic as flows sharing controllers and inter-socket links
  dma_under_load,           // GPU DMA's credit window and its share of a saturated controller
  pinned_alloc,             // cudaHostAlloc of a RAM replica, in the allocating thread
  pinned_alloc_gpu_stall,   // the node's GPUs waiting while a pinned allocation runs
  cuda_malloc,              // cudaMalloc / cudaFree by a GPU's driver thread
  thread_copies,            // RAM -> RAM copies performed by the thread progressing the node
  mpi_main_ram,             // StarPU-MPI sends from and receives on STARPU_MAIN_RAM (a copy there first)
  launch_costs,             // GPU launch latency, copy submission, per-task host time, first calls
  numa_balancing,           // Linux's NUMA hinting faults and page migrations
  kernel_variability,       // lognormal kernel durations and their spread on remote pages
  reception_buffers,        // StarPU-MPI's pinned reception buffers, allocated by the main thread
};
constexpr std::size_t kNumMechanisms = 12;

struct MechanismInfo {
  Mechanism id;
  const char* name; // the run description's key
  const char* home; // where it is modelled (simulator/src/...)
  const char* what; // what switching it off removes
};

// In the order of the enum; `numasim --mechanisms` prints it as JSON.
extern const std::array<MechanismInfo, kNumMechanisms> kMechanisms;

// Which mechanisms a run has on (all by default).
struct Mechanisms {
  std::array<bool, kNumMechanisms> on{};
  Mechanisms() { on.fill(true); }
  bool operator()(Mechanism m) const { return on[static_cast<std::size_t>(m)]; }
  void set(Mechanism m, bool value) { on[static_cast<std::size_t>(m)] = value; }
};

// The mechanism named `name`; false when there is none.
bool mechanism_by_name(const std::string& name, Mechanism& out);
// kMechanisms as a JSON array of {name, home, what}.
std::string mechanisms_json();

} // namespace numasim
