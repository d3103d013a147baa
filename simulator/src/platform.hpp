// The numasim platform (docs/interfaces.md §2): nodes, their cores, GPUs, RAM
// (one host per NUMA node) and NICs, found from host and zone properties.
#pragma once
#include <simgrid/s4u.hpp>

#include <string>
#include <vector>

namespace numasim {
namespace sg4 = simgrid::s4u;

struct CoreInfo {
  sg4::Host* host;
  int index; // OS index (STARPU_WORKERS_CPUID refers to it)
  int numa;
};
struct GpuInfo {
  sg4::Host* host;
  int index;
  int numa;
  double memory;            // bytes
  double task_overhead = 0; // s of host time per task on the GPU's CUDA worker (prop task_overhead_s)
  // StarPU's allocation costs with this GPU (0: not described): cudaMalloc and cudaFree of one
  // buffer on it (props malloc_s, free_s), cudaHostAlloc per MiB of host memory (prop
  // pinned_alloc_s_per_mib; pinned allocations serve every GPU of the node).
  double malloc_s = 0, free_s = 0, pinned_alloc_s_per_mib = 0;
  // Share of a pinned allocation's time during which the node's GPUs start no copy and no kernel
  // (prop pinned_alloc_gpu_stall, in [0, 1]; absent: 1, the whole call, as the CUDA C Programming
  // Guide's "Implicit Synchronization" lists page-locked host allocations; docs/pinned-allocations.md).
  double pinned_alloc_gpu_stall = 1;
  // s the first task of each kernel (getrf, trsm, gemm) keeps its CUDA worker longer than the
  // next ones in a process (props first_call_<kernel>_s): see kFirstCallKernels.
  double first_call[3] = {0, 0, 0};
  double task_gap = 0; // s between back-to-back tasks the pipeline does not hide (prop task_gap_s)
};
// The kernels whose first call in a process costs extra (the libraries' first use): one slot
// per cuSOLVER/cuBLAS routine, so both trsm kinds share one.
inline constexpr const char* kFirstCallKernels[3] = {"getrf", "trsm", "gemm"};
struct RamInfo {
  sg4::Host* host;
  int numa;
  double memory;
};
struct NicInfo {
  sg4::Host* host;
  int index;
  int numa;
};

struct MachineNode {
  std::string name;
  std::string machine;
  int rank = -1;
  int threads_per_core = 1;   // StarPU's CPU ids are logical PU ids: core = pu / threads_per_core
  std::vector<CoreInfo> cpus; // sorted by index
  std::vector<GpuInfo> gpus;  // sorted by index
  std::vector<RamInfo> rams;  // sorted by numa; rams[k].numa == k
  std::vector<NicInfo> nics;
  const RamInfo& ram_of_numa(int numa) const;
};

// Reads the loaded platform; nodes sorted by rank (rank i at position i).
// Throws InputError(platform_file, ...) when properties are missing or inconsistent.
std::vector<MachineNode> discover_platform(const sg4::Engine& e, const std::string& platform_file);

// "n1.membus0" -> "membus"; "g5k.switch" -> "switch"; "n1.pcie0_UP" -> "pcie" (split-duplex direction).
std::string link_class(const std::string& link_name);

} // namespace numasim
