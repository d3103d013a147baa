// Each mechanism's switch (run description `mechanisms`, mechanisms.hpp) removes its mechanism's
// cost and nothing else: where a machine parameter carries the whole cost, the run with the switch
// off equals the run with that parameter zeroed, to the last digit; otherwise the counter that
// measures the mechanism is zero with the switch off and positive with it on. Runs on tiny1/tiny2
// with every mechanism's parameters given (full_platform), each in a forked child.
#include "error.hpp"
#include "mechanisms.hpp"
#include "scratch_runs.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

using namespace numasim;

namespace {

// The machine parameters that give each mechanism a cost on the tiny platforms.
const Env kZone = {{"numa_stall_fraction_dgemm", "0.3"},
                   {"numa_stall_fraction_dtrsm", "0.3"},
                   {"numa_stall_fraction_dgetrf_nopiv", "0.3"},
                   {"numa_loaded_latency", "0:1,0.5:1.5,1:4"},
                   {"numa_gemm_block_k", "32"},
                   {"numa_dma_read_credits", "8"}, // 8 lines x 64 B / 0.5 us = 1 GB/s < the 2 GB/s route
                   {"numa_dma_read_latency_s", "5e-7"},
                   {"numa_dma_write_credits", "8"},
                   {"numa_dma_write_latency_s", "5e-7"},
                   {"numa_core_credits", "10"},
                   {"numa_balancing_scan_delay_s", "0.001"},
                   {"numa_balancing_scan_period_s", "0.001"},
                   {"numa_hinting_fault_cost_s", "1e-7"}};
const Env kGpu = {
    {"pinned_alloc_s_per_mib", "0.00065"}, {"malloc_s", "0.000175"}, {"free_s", "0.00075"},
    {"task_overhead_s", "2e-5"},           {"task_gap_s", "5e-6"},   {"first_call_gemm_s", "0.002"},
    {"first_call_trsm_s", "0.001"}};

Env without(Env props, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    props.erase(k);
  return props;
}

// tiny1/tiny2 with the given parameters and memory controllers of 2 GB/s (instead of 40), so that
// the 96-tiles' kernels can be bandwidth-bound.
std::string full_platform(const std::string& base, const Env& zone, const Env& gpu, const std::string& name) {
  const std::string path = platform_with(base, zone, gpu, name);
  std::stringstream ss;
  ss << std::ifstream(path).rdbuf();
  std::string xml = ss.str();
  for (size_t at = xml.find("bandwidth=\"40GBps\""); at != std::string::npos;
       at = xml.find("bandwidth=\"40GBps\"", at))
    xml.replace(at, 18, "bandwidth=\"2GBps\"");
  std::ofstream(path) << xml;
  return path;
}

std::string off(const char* name) {
  return std::string(R"("mechanisms": {")") + name + R"(": false})";
}

Facts run(const std::string& platform, int nt, const Env& env, int q = 1, const std::string& extra = "") {
  return in_child(platform, config(platform, nt, env, q, 3, extra),
                  [](Simulation&, Summary&) { return Facts{}; });
}

const Env kNuma = {{"STARPU_USE_NUMA", "1"}, {"STARPU_SCHED", "dmdas"}};
const Env kCpuOnly = {{"STARPU_NCUDA", "0"}, {"STARPU_NCPU", "4"}, {"TESTBED_NUMA_BALANCING", "1"}};

} // namespace

TEST(Mechanisms, EveryNameIsKnownAndAnUnknownOneIsRefused) {
  for (const auto& m : kMechanisms) {
    Mechanism id;
    ASSERT_TRUE(mechanism_by_name(m.name, id)) << m.name;
    EXPECT_EQ(id, m.id);
    EXPECT_EQ(&kMechanisms[static_cast<size_t>(id)], &m) << "kMechanisms is in the enum's order";
  }
  const std::string p = kData + "tiny1.xml";
  EXPECT_THROW(config(p, 4, {}, 1, 3, R"("mechanisms": {"pinned_allocs": false})"), InputError);
  EXPECT_THROW(config(p, 4, {}, 1, 3, R"("mechanisms": {"pinned_alloc": 0})"), InputError);
  EXPECT_THROW(config(p, 4, {}, 1, 3, R"("mechanisms": ["pinned_alloc"])"), InputError);
  RunConfig c = config(p, 4, {}, 1, 3, R"("mechanisms": {"pinned_alloc": false, "cuda_malloc": true})");
  EXPECT_FALSE(c.mechanisms(Mechanism::pinned_alloc));
  EXPECT_TRUE(c.mechanisms(Mechanism::cuda_malloc));
  EXPECT_TRUE(c.mechanisms(Mechanism::memory_latency_stall));
}

TEST(Mechanisms, MemoryLatencyStallOffIsTheRunWithoutStallFractions) {
  const std::string p = full_platform("tiny1.xml", kZone, kGpu, "stall_on.xml");
  const std::string zero =
      full_platform("tiny1.xml",
                    without(kZone, {"numa_stall_fraction_dgemm", "numa_stall_fraction_dtrsm",
                                    "numa_stall_fraction_dgetrf_nopiv"}),
                    kGpu, "stall_zero.xml");
  Facts on = run(p, 8, {});
  Facts o = run(p, 8, {}, 1, off("memory_latency_stall"));
  Facts z = run(zero, 8, {});
  EXPECT_GT(on["numa.memory_stall_s"], 0);
  EXPECT_EQ(o["numa.memory_stall_s"], 0);
  EXPECT_EQ(o["makespan"], z["makespan"]);
  EXPECT_NE(o["makespan"], on["makespan"]);
}

TEST(Mechanisms, MemoryBandwidthSharingOffStartsNoKernelFlow) {
  const std::string p = full_platform("tiny1.xml", kZone, kGpu, "bw.xml");
  Facts on = run(p, 8, kCpuOnly);
  Facts o = run(p, 8, kCpuOnly, 1, off("memory_bandwidth_sharing"));
  EXPECT_GT(on["numa.kernel_flows"], 0);
  EXPECT_EQ(o["numa.kernel_flows"], 0);
  // the kernels' bytes are still counted (the controllers' utilisation, hence the stall, remains)
  EXPECT_EQ(o["numa.kernel_memory_bytes"], on["numa.kernel_memory_bytes"]);
  EXPECT_GT(o["numa.memory_stall_s"], 0);
}

TEST(Mechanisms, DmaUnderLoadOffIsTheRunWithoutCreditWindows) {
  const std::string p = full_platform("tiny1.xml", kZone, kGpu, "dma_on.xml");
  const std::string zero = full_platform(
      "tiny1.xml",
      without(kZone, {"numa_dma_read_credits", "numa_dma_read_latency_s", "numa_dma_write_credits",
                      "numa_dma_write_latency_s", "numa_core_credits"}),
      kGpu, "dma_zero.xml");
  Facts on = run(p, 8, {});
  Facts o = run(p, 8, {}, 1, off("dma_under_load"));
  Facts z = run(zero, 8, {});
  EXPECT_GT(on["numa.dma_window_bound_copies"], 0);
  EXPECT_EQ(o["numa.dma_window_bound_copies"], 0);
  EXPECT_EQ(o["numa.dma_split_copies"], 0);
  EXPECT_EQ(o["makespan"], z["makespan"]);
}

TEST(Mechanisms, PinnedAllocOffIsTheRunWithoutItsCostPerMiB) {
  const std::string p = full_platform("tiny1.xml", kZone, kGpu, "pin_on.xml");
  const std::string zero =
      full_platform("tiny1.xml", kZone, without(kGpu, {"pinned_alloc_s_per_mib"}), "pin0.xml");
  Facts on = run(p, 8, kNuma);
  Facts o = run(p, 8, kNuma, 1, off("pinned_alloc"));
  Facts z = run(zero, 8, kNuma);
  EXPECT_GT(on["costs.pinned_alloc_s"], 0);
  EXPECT_EQ(o["costs.pinned_alloc_s"], 0);
  EXPECT_EQ(o["costs.pinned_gpu_stall_s"], 0);
  EXPECT_EQ(o["makespan"], z["makespan"]);
}

TEST(Mechanisms, PinnedAllocGpuStallOffKeepsTheThreadsCostOnly) {
  const std::string p = full_platform("tiny1.xml", kZone, kGpu, "pin_stall.xml");
  Facts on = run(p, 8, kNuma);
  Facts o = run(p, 8, kNuma, 1, off("pinned_alloc_gpu_stall"));
  EXPECT_GT(on["costs.pinned_gpu_stall_s"], 0);
  EXPECT_LE(on["costs.pinned_gpu_stall_s"], on["costs.pinned_alloc_s"] + 1e-12) << "one GPU on tiny1";
  EXPECT_EQ(o["costs.pinned_gpu_stall_s"], 0);
  EXPECT_GT(o["costs.pinned_alloc_s"], 0); // the allocating thread still pays
  // Off is the run whose GPUs are held for none of the call (no hold: nothing delayed, nothing paused).
  Env none = kGpu;
  none["pinned_alloc_gpu_stall"] = "0";
  Facts z = run(full_platform("tiny1.xml", kZone, none, "pin_stall0.xml"), 8, kNuma);
  EXPECT_EQ(o["makespan"], z["makespan"]);
  EXPECT_NE(on["makespan"], z["makespan"]);
}

TEST(Mechanisms, CudaMallocOffIsTheRunWithoutMallocAndFreeCosts) {
  const std::string p = full_platform("tiny1.xml", kZone, kGpu, "malloc_on.xml");
  const std::string zero =
      full_platform("tiny1.xml", kZone, without(kGpu, {"malloc_s", "free_s"}), "malloc0.xml");
  Facts on = run(p, 8, {});
  Facts o = run(p, 8, {}, 1, off("cuda_malloc"));
  Facts z = run(zero, 8, {});
  EXPECT_GT(on["costs.gpu_malloc_s"], 0);
  EXPECT_EQ(o["costs.gpu_malloc_s"], 0);
  EXPECT_EQ(o["costs.gpu_free_s"], 0);
  EXPECT_EQ(o["makespan"], z["makespan"]);
}

TEST(Mechanisms, ThreadCopiesOffLeavesTheWorkersFreeOfCopies) {
  const std::string p = full_platform("tiny1.xml", kZone, kGpu, "copies.xml");
  auto ram_copies = [](Simulation& sim, Summary&) {
    Facts f;
    for (const auto& r : sim.transfer_log())
      f["ram_to_ram"] += !sim.memnodes()[r.gsrc].gpu && !sim.memnodes()[r.gdst].gpu;
    return f;
  };
  Facts on = in_child(p, config(p, 8, kNuma), ram_copies);
  Facts o = in_child(p, config(p, 8, kNuma, 1, 3, off("thread_copies")), ram_copies);
  EXPECT_GT(on["costs.thread_copies"], 0);
  EXPECT_EQ(on["costs.thread_copies"], on["ram_to_ram"]);
  EXPECT_EQ(o["costs.thread_copies"], 0);
  EXPECT_EQ(o["costs.thread_copy_s"], 0);
  EXPECT_GT(o["ram_to_ram"], 0); // the copies still happen, in copy actors
  EXPECT_GT(o["costs.pinned_alloc_s"], 0);
}

// The main thread pins one buffer per tile its rank receives, before posting the reception and
// submitting what follows (Simulation::main_thread); off, no such allocation and no hold for it.
TEST(Mechanisms, ReceptionBuffersOffMakesNoMainThreadAllocation) {
  const std::string p = full_platform("tiny2.xml", kZone, kGpu, "recv.xml");
  Facts on = run(p, 8, kNuma, 2);
  Facts o = run(p, 8, kNuma, 2, off("reception_buffers"));
  EXPECT_GT(on["costs.pinned_allocs_main"], 0);
  EXPECT_EQ(o["costs.pinned_allocs_main"], 0);
  EXPECT_EQ(on["costs.pinned_allocs"] - on["costs.pinned_allocs_main"], o["costs.pinned_allocs"]);
  EXPECT_GT(on["costs.pinned_gpu_stall_s"], o["costs.pinned_gpu_stall_s"]); // the GPUs held for them
}

TEST(Mechanisms, MpiMainRamOffSendsAsStarpu1410) {
  const std::string p = full_platform("tiny2.xml", kZone, kGpu, "mpi.xml");
  Facts o = run(p, 8, kNuma, 2, off("mpi_main_ram"));
  Facts chosen = run(p, 8, kNuma, 2, R"("mpi": {"memory_node": "choose_node"})");
  Facts on = run(p, 8, kNuma, 2);
  EXPECT_EQ(o["makespan"], chosen["makespan"]);
  EXPECT_NE(o["makespan"], on["makespan"]);
}

TEST(Mechanisms, LaunchCostsOffRemovesLaunchWaitsAndHostTimes) {
  const std::string p = full_platform("tiny1.xml", kZone, kGpu, "launch.xml");
  const std::string zero = full_platform(
      "tiny1.xml", kZone,
      without(kGpu, {"task_overhead_s", "task_gap_s", "first_call_gemm_s", "first_call_trsm_s"}),
      "launch0.xml");
  Facts on = run(p, 8, {});
  Facts o = run(p, 8, {}, 1, off("launch_costs"));
  Facts z = run(zero, 8, {});
  Facts zo = run(zero, 8, {}, 1, off("launch_costs"));
  EXPECT_GT(on["numa.gpu_launch_waits"], 0);
  EXPECT_EQ(o["numa.gpu_launch_waits"], 0);
  // what remains of the mechanism without its GPU parameters is the launch and submission latency:
  // off, the parameters no longer matter
  EXPECT_EQ(o["makespan"], zo["makespan"]);
  EXPECT_GT(z["numa.gpu_launch_waits"], 0);
}

TEST(Mechanisms, NumaBalancingOffIsTheKernelSettingOff) {
  const std::string p = full_platform("tiny1.xml", kZone, kGpu, "balancing.xml");
  Env disabled = kCpuOnly;
  disabled["TESTBED_NUMA_BALANCING"] = "0";
  Facts on = run(p, 10, kCpuOnly);
  Facts o = run(p, 10, kCpuOnly, 1, off("numa_balancing"));
  Facts z = run(p, 10, disabled);
  EXPECT_GT(on["numa.hinting_faults"], 0);
  EXPECT_EQ(o["numa.hinting_faults"], 0);
  EXPECT_EQ(o["numa.migrations"], 0);
  EXPECT_EQ(o["makespan"], z["makespan"]);
}

TEST(Mechanisms, KernelVariabilityOffIsTheModelsMeans) {
  const std::string p = full_platform("tiny1.xml", kZone, kGpu, "variability.xml");
  Facts o = run(p, 8, {}, 1, off("kernel_variability"));
  RunConfig plain = config(p, 8, {});
  plain.variability = false; // the run description's "variability": false
  Facts means = in_child(p, plain, [](Simulation&, Summary&) { return Facts{}; });
  Facts seed4 = in_child(p, config(p, 8, {}, 1, 4, off("kernel_variability")),
                         [](Simulation&, Summary&) { return Facts{}; });
  EXPECT_EQ(o["makespan"], means["makespan"]);
  EXPECT_EQ(o["makespan"], seed4["makespan"]) << "no draw depends on the seed";
}

TEST(Mechanisms, AllOnIsTheDefault) {
  const std::string p = full_platform("tiny2.xml", kZone, kGpu, "all_on.xml");
  std::string all = R"("mechanisms": {)";
  for (size_t i = 0; i < kMechanisms.size(); i++)
    all += std::string(i ? ", " : "") + "\"" + kMechanisms[i].name + "\": true";
  all += "}";
  Facts def = run(p, 6, kNuma, 2);
  Facts on = run(p, 6, kNuma, 2, all);
  EXPECT_EQ(def["makespan"], on["makespan"]);
  EXPECT_EQ(def["costs.pinned_alloc_s"], on["costs.pinned_alloc_s"]);
}
