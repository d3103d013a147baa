#include "mechanisms.hpp"

#include <string>

namespace numasim {

const std::array<MechanismInfo, kNumMechanisms> kMechanisms = {{
    {Mechanism::memory_latency_stall, "memory_latency_stall", "memory_model.cpp MemorySystem::stretched",
     "a CPU kernel's memory-stalled part no longer grows with the latency of remote or loaded memory"},
    {Mechanism::memory_bandwidth_sharing, "memory_bandwidth_sharing",
     "memory_model.cpp MemorySystem::start_traffic",
     "CPU kernels start no traffic flows: they no longer share memory controllers and inter-socket links "
     "with each other and with copies"},
    {Mechanism::dma_under_load, "dma_under_load", "memory_model.cpp MemorySystem::dma_copy",
     "a GPU copy is one flow at its route's rate: no credit window at the loaded latency, no split share "
     "of a saturated controller"},
    {Mechanism::pinned_alloc, "pinned_alloc", "datawizard/data_request.cpp DataWizard::allocate_ram",
     "a RAM replica's pinned allocation (cudaHostAlloc) costs no time, and blocks no GPU"},
    {Mechanism::pinned_alloc_gpu_stall, "pinned_alloc_gpu_stall",
     "datawizard/malloc.cpp DeviceHolds, wait_out_holds; datawizard/data_request.cpp "
     "DataWizard::allocate_ram",
     "the node's GPUs keep running, launching and copying while a pinned allocation runs (the allocating "
     "thread still pays its cost)"},
    {Mechanism::cuda_malloc, "cuda_malloc", "datawizard/memalloc.cpp DataWizard::gpu_alloc_call",
     "cudaMalloc and cudaFree cost no time (the device's copies and launches do not wait for them)"},
    {Mechanism::thread_copies, "thread_copies", "datawizard/data_request.cpp DataWizard::run_ram_copy",
     "copies between RAM nodes run in a copy actor at the copying thread's rate instead of occupying the "
     "worker or driver that progresses the node; that actor allocates the replica, its pages bound to the "
     "node"},
    {Mechanism::mpi_main_ram, "mpi_main_ram",
     "mpi/starpu_mpi.cpp MpiRuntime::trigger, MpiRuntime::reception_node",
     "StarPU-MPI sends from the first RAM node holding a valid copy and receives on the RAM node holding "
     "a buffer of the tile or with the most memory left (StarPU 1.4.10's _starpu_mpi_choose_node) "
     "instead of fetching the data into STARPU_MAIN_RAM first and receiving there"},
    {Mechanism::launch_costs, "launch_costs",
     "numa_effects.cpp NumaEffects::run_on_gpu, runtime.cpp Simulation::execute",
     "no launch latency from the driver's core to its GPU, no copy submission delay, no per-task host time "
     "or back-to-back gap of a CUDA worker, no first-call cost of a kernel"},
    {Mechanism::numa_balancing, "numa_balancing", "numa_balancing.cpp NumaEffects::hinting_faults",
     "Linux's automatic NUMA balancing scans nothing: no hinting faults, no page migrations"},
    {Mechanism::kernel_variability, "kernel_variability", "runtime.cpp Simulation::sample_duration",
     "every kernel takes its model's mean (the run description's \"variability\": false)"},
    {Mechanism::reception_buffers, "reception_buffers", "runtime.cpp Simulation::main_thread",
     "a received tile's buffer costs no pinned allocation in the main thread: tasks are submitted and "
     "receptions posted at once, the buffer first touched by the MPI thread"},
}};

bool mechanism_by_name(const std::string& name, Mechanism& out) {
  for (const auto& m : kMechanisms)
    if (name == m.name) {
      out = m.id;
      return true;
    }
  return false;
}

std::string mechanisms_json() {
  auto quoted = [](const char* s) {
    std::string out = "\"";
    for (const char* p = s; *p; p++) {
      if (*p == '"' || *p == '\\')
        out += '\\';
      out += *p;
    }
    return out + "\"";
  };
  std::string out = "[";
  for (std::size_t i = 0; i < kMechanisms.size(); i++) {
    const auto& m = kMechanisms[i];
    out += std::string(i ? ",\n " : "") + "{\"name\": " + quoted(m.name) + ", \"home\": " + quoted(m.home) +
           ", \"what\": " + quoted(m.what) + "}";
  }
  return out + "]";
}

} // namespace numasim
