// The study's factors A-G as mechanisms, on the hand-written 2-NUMA platforms of
// tests/data (tiny1: one node, 4 cores on 2 NUMA nodes, GPU 0 and NIC 0 on NUMA 0; tiny2: two
// such nodes). Each configuration runs in a forked child (SimGrid: one engine per process) that
// reports what the mechanism did; the test compares configurations.
#include "error.hpp"
#include "runtime.hpp"
#include "scratch_runs.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace numasim;

static bool has(const std::vector<std::string>& links, const std::string& l) {
  return std::find(links.begin(), links.end(), l) != links.end();
}

// Copies between memory nodes: count, bytes, and how many crossed the inter-socket link.
static Facts transfer_facts(Simulation& sim) {
  Facts f;
  for (const auto& r : sim.transfer_log()) {
    const MemNode& a = sim.memnodes()[r.gsrc];
    const MemNode& b = sim.memnodes()[r.gdst];
    auto links = sim.numa().path_links(r.path);
    f["bytes_between_memnodes"] += r.bytes;
    if (!a.gpu && !b.gpu && a.rank == b.rank) {
      f["ram_to_ram"] += 1;
      f["ram_to_ram_over_qpi"] += has(links, "n1.qpi");
    }
    if (a.rank != b.rank) {
      f["mpi"] += 1;
      f["mpi_over_qpi"] += has(links, "n1.qpi") || has(links, "n2.qpi");
      f["mpi_over_nic"] += has(links, "n1.nicpcie0");
    }
  }
  return f;
}

// NUMA node of the pages of the 36 tiles of a 6x6 LU on rank 0, and the main thread's node.
static Facts tile_pages(Simulation& sim, Summary&) {
  Facts f;
  for (uint32_t t = 0; t < 36; t++)
    f["pages_on_" + std::to_string(sim.numa().page_numa(0, t))] += 1;
  f["main_numa"] = sim.threads(0).main_numa;
  return f;
}

TEST(Factors, A_UseNumaCopiesAcrossQpiAndRemovesRemoteReads) {
  std::string p = platform_with("tiny1.xml", {{"numa_gemm_block_k", "32"}});
  auto body = [](Simulation& sim, Summary&) { return transfer_facts(sim); };
  Facts def = in_child(p, config(p, 8, {{"STARPU_USE_NUMA", "0"}}), body);
  Facts a = in_child(p, config(p, 8, {{"STARPU_USE_NUMA", "1"}, {"STARPU_NCUDA", "0"}}), body);
  Facts pinned = in_child(p, config(p, 8, {{"STARPU_USE_NUMA", "1"}}), body);
  // Default: one RAM node with pages on the main thread's NUMA node 0; the CPU worker on
  // NUMA 1 reads them remotely, and no RAM-to-RAM copy exists.
  EXPECT_GT(def["numa.remote_read_bytes"], 0);
  EXPECT_EQ(def["ram_to_ram"], 0);
  // A=1 without CUDA: data is copied to the worker's NUMA memory node over the inter-socket link
  // instead, into buffers bound to that node (malloc.c hwloc_alloc_membind).
  EXPECT_EQ(a["numa.remote_read_bytes"], 0);
  EXPECT_GT(a["ram_to_ram"], 0);
  EXPECT_EQ(a["ram_to_ram_over_qpi"], a["ram_to_ram"]);
  // With CUDA the buffers are pinned and not bound (malloc.c _starpu_malloc_flags_on_node): the
  // replicas a NUMA-0 thread (the CUDA driver) allocated for NUMA 1's memory node are on NUMA 0,
  // and the NUMA-1 worker still reads remotely.
  EXPECT_GT(pinned["ram_to_ram"], 0);
  EXPECT_GT(pinned["numa.remote_read_bytes"], 0);
}

TEST(Factors, D_MainThreadMovesFirstTouchToNuma1) {
  std::string p = platform_with("tiny1.xml", {});
  Facts def = in_child(p, config(p, 6, {{"STARPU_MAIN_THREAD_BIND", "1"}}), tile_pages);
  Facts d = in_child(p, config(p, 6, {{"STARPU_MAIN_THREAD_BIND", "1"}, {"STARPU_MAIN_THREAD_CPUID", "2"}}),
                     tile_pages);
  // With a CUDA worker StarPU pins the matrix: cudaHostAlloc in the main thread places it.
  EXPECT_EQ(def["main_numa"], 0);
  EXPECT_EQ(def["pages_on_0"], 36);
  EXPECT_EQ(d["main_numa"], 1);
  EXPECT_EQ(d["pages_on_1"], 36);
  // Without CUDA (pageable memory) the tiles are first touched by the CPU workers running dplrnt.
  Facts cpu = in_child(
      p, config(p, 6, {{"STARPU_NCUDA", "0"}, {"STARPU_NCPU", "3"}, {"STARPU_MAIN_THREAD_CPUID", "2"}}),
      tile_pages);
  EXPECT_GT(cpu["pages_on_0"], 0);
  EXPECT_GT(cpu["pages_on_1"], 0);
}

TEST(Factors, A_MainRamIsTheFirstCpuWorkersNumaNode) {
  // STARPU_USE_NUMA=1 without CUDA (pageable): StarPU's memory node 0, where the tiles are
  // registered, is the NUMA node of the first CPU worker (topology.c _starpu_init_numa_node), not
  // the main thread's; hwloc_alloc_membind binds the tiles there (malloc.c).
  std::string p = platform_with("tiny1.xml", {});
  Facts a = in_child(p,
                     config(p, 6,
                            {{"STARPU_USE_NUMA", "1"},
                             {"STARPU_NCUDA", "0"},
                             {"STARPU_NCPU", "2"},
                             {"STARPU_MAIN_THREAD_CPUID", "0"},
                             {"STARPU_WORKERS_CPUID", "2 3 1"}}),
                     tile_pages);
  EXPECT_EQ(a["main_numa"], 0);
  EXPECT_EQ(a["pages_on_1"], 36);
}

TEST(Factors, C_MpiThreadPlacementChangesTheLinksOfMessages) {
  std::string p = platform_with("tiny2.xml", {});
  auto body = [](Simulation& sim, Summary&) {
    Facts f = transfer_facts(sim);
    f["mpi_numa"] = sim.threads(0).mpi_numa;
    return f;
  };
  // Default: the MPI thread takes the core left over, the last one (NUMA 1); the NIC is on NUMA 0.
  Facts def = in_child(p, config(p, 6, {}, 2), body);
  Facts c = in_child(p, config(p, 6, {{"STARPU_MPI_THREAD_CPUID", "1"}}, 2), body);
  EXPECT_EQ(def["mpi_numa"], 1);
  EXPECT_EQ(c["mpi_numa"], 0);
  ASSERT_GT(def["mpi"], 0);
  ASSERT_GT(c["mpi"], 0);
  EXPECT_EQ(def["mpi_over_nic"], def["mpi"]);
  EXPECT_EQ(def["mpi_over_qpi"], def["mpi"]); // RAM -> MPI core (NUMA 1) -> qpi -> NIC
  EXPECT_EQ(c["mpi_over_qpi"], 0);
}

TEST(Factors, B_DriverCoreDecidesWorkersAndTheGpuControlPath) {
  std::string p = platform_with("tiny1.xml", {});
  auto body = [](Simulation& sim, Summary&) {
    Facts f;
    for (const auto& w : sim.workers()) {
      if (w.cuda) {
        f["driver_core"] = w.core;
        f["control_over_qpi"] = has(sim.numa().control_links(sim.global_mem(0, w.mem)), "n1.qpi");
      } else
        f["cpu_worker_core_" + std::to_string(w.core)] = 1;
    }
    return f;
  };
  Facts def = in_child(p, config(p, 6, {}), body);
  // The driver of GPU 0 (NUMA 0) bound to core 2 (NUMA 1): its launches and copy submissions cross qpi.
  Facts b =
      in_child(p, config(p, 6, {{"STARPU_WORKERS_CPUID", "2 0 1 3"}, {"STARPU_WORKERS_CUDAID", "0"}}), body);
  EXPECT_EQ(def["driver_core"], 0);
  EXPECT_EQ(def["control_over_qpi"], 0);
  EXPECT_EQ(def["cpu_worker_core_2"], 1);
  EXPECT_EQ(b["driver_core"], 2);
  EXPECT_EQ(b["control_over_qpi"], 1);
  EXPECT_EQ(b["cpu_worker_core_0"], 1);
  EXPECT_EQ(b["cpu_worker_core_2"], 0);
  EXPECT_NE(def["makespan"], b["makespan"]);
}

TEST(Factors, E_SchedBetaChangesBytesMovedBetweenMemoryNodes) {
  std::string p = platform_with("tiny1.xml", {});
  auto body = [](Simulation& sim, Summary&) { return transfer_facts(sim); };
  Facts b1 = in_child(p, config(p, 10, {{"STARPU_SCHED_BETA", "1"}}), body);
  Facts b10 = in_child(p, config(p, 10, {{"STARPU_SCHED_BETA", "10"}}), body);
  EXPECT_GT(b1["bytes_between_memnodes"], 0);
  EXPECT_NE(b1["bytes_between_memnodes"], b10["bytes_between_memnodes"]);
}

TEST(Factors, F_CudaPipelineHidesGpuLaunches) {
  std::string p = platform_with("tiny1.xml", {});
  auto body = [](Simulation&, Summary& s) { return Facts{{"on_cuda", static_cast<double>(s.on_cuda)}}; };
  Facts f1 = in_child(p, config(p, 10, {{"STARPU_CUDA_PIPELINE", "1"}}), body);
  Facts f4 = in_child(p, config(p, 10, {{"STARPU_CUDA_PIPELINE", "4"}}), body);
  ASSERT_GT(f1["on_cuda"], 0);
  // Tasks popped ahead have their operands fetched while the GPU computes: fewer idle gaps,
  // hence fewer launches paid on an idle GPU.
  EXPECT_LT(f4["numa.gpu_launch_waits"], f1["numa.gpu_launch_waits"]);
}

TEST(Factors, G_NumaBalancingMigratesPagesOnlyWhenEnabled) {
  // Scan every millisecond so that the small run sees scans (the machine descriptions use Linux's 1 s).
  std::string p = platform_with("tiny1.xml", {{"numa_balancing_scan_delay_s", "0.001"},
                                              {"numa_balancing_scan_period_s", "0.001"},
                                              {"numa_hinting_fault_cost_s", "1e-7"}});
  auto body = [](Simulation& sim, Summary&) {
    Facts f;
    for (uint32_t t = 0; t < 100; t++)
      f["pages_on_" + std::to_string(sim.numa().page_numa(0, t))] += 1;
    f["balancing"] = sim.numa().balancing(0);
    return f;
  };
  // Pageable memory (no CUDA worker); main thread on NUMA 0.
  Env base = {{"STARPU_NCUDA", "0"}, {"STARPU_NCPU", "4"}};
  Env on = base, off = base;
  on["TESTBED_NUMA_BALANCING"] = "1";
  off["TESTBED_NUMA_BALANCING"] = "0";
  Facts g_on = in_child(p, config(p, 10, on), body);
  Facts g_off = in_child(p, config(p, 10, off), body);
  EXPECT_EQ(g_on["balancing"], 1);
  EXPECT_GT(g_on["numa.hinting_faults"], 0);
  EXPECT_GT(g_on["numa.migrations"], 0);
  EXPECT_EQ(g_off["balancing"], 0);
  EXPECT_EQ(g_off["numa.hinting_faults"], 0);
  EXPECT_EQ(g_off["numa.migrations"], 0);
  // Pinned memory (a CUDA worker) is never migrated.
  Facts pinned = in_child(p, config(p, 10, {{"TESTBED_NUMA_BALANCING", "1"}}), body);
  EXPECT_EQ(pinned["balancing"], 0);
  EXPECT_EQ(pinned["numa.migrations"], 0);
}

TEST(Factors, SeedsGiveADistributionAndAreReproducible) {
  std::string p = platform_with("tiny2.xml", {});
  auto body = [](Simulation&, Summary&) { return Facts{}; };
  Env env = {{"STARPU_USE_NUMA", "0"}};
  double a = in_child(p, config(p, 6, env, 2, 11), body)["makespan"];
  double a2 = in_child(p, config(p, 6, env, 2, 11), body)["makespan"];
  EXPECT_EQ(a, a2);
  std::set<double> seen = {a};
  for (uint64_t seed : {12, 13, 14})
    seen.insert(in_child(p, config(p, 6, env, 2, seed), body)["makespan"]);
  EXPECT_GE(seen.size(), 3u);
}

TEST(Factors, TraceShowsOperandPagesAndRemoteBytes) {
  std::string p = platform_with("tiny1.xml", {});
  std::string trace = (scratch() / "trace.csv").string();
  auto body = [trace](Simulation& sim, Summary&) {
    sim.write_trace(trace);
    return Facts{};
  };
  in_child(p, config(p, 6, {}), body);
  std::ifstream in(trace);
  std::string header, line;
  std::getline(in, header);
  EXPECT_NE(header.find("OperandPages,RemoteBytes"), std::string::npos);
  // RemoteBytes: the cell after as many commas as precede it in the header
  const auto commas = [](const std::string& s, size_t end) {
    return std::count(s.begin(), s.begin() + end, ',');
  };
  const auto column = commas(header, header.find("RemoteBytes"));
  int remote_rows = 0;
  while (std::getline(in, line)) {
    size_t at = 0;
    for (long c = 0; c < column; c++)
      at = line.find(',', at) + 1;
    double remote = std::stod(line.substr(at, line.find(',', at) - at));
    if (remote > 0) {
      remote_rows++;
      EXPECT_NE(line.find(",1,"), std::string::npos) << line; // a worker on NUMA 1 reading NUMA 0 pages
    }
  }
  EXPECT_GT(remote_rows, 0);
  std::remove(trace.c_str());
}

TEST(Factors, EnvPerMachineAppliesToItsMachineType) {
  RunConfig c = RunConfig::from_json(
      parse_json(
          R"({"platform": "x.xml", "perfmodels": {"tiny": "s"}, "workload": {"kind": "lu", "n": 96, "b": 96},
                    "env": {"STARPU_SCHED_BETA": "10"},
                    "env_per_machine": {"tiny": {"STARPU_MPI_THREAD_CPUID": "1", "TESTBED_NUMA_BALANCING": "0"}}})",
          "t.json"),
      "t.json");
  EXPECT_EQ(c.env_for("tiny").mpi_thread_cpuid, 1);
  EXPECT_FALSE(c.env_for("tiny").numa_balancing);
  EXPECT_EQ(c.env_for("tiny").beta, 10);
  EXPECT_EQ(c.env_for("other").mpi_thread_cpuid, -1);
  EXPECT_THROW(RunConfig::from_json(parse_json(R"({"platform": "x", "perfmodels": {"t": "s"},
      "workload": {"kind": "lu", "n": 96, "b": 96}, "env_per_machine": {"t": {"TESTBED_NUMA_BALANCING": "2"}}})",
                                               "t.json"),
                                    "t.json"),
               InputError);
}

// Pages on the fourth NUMA node (index 3) are named in the trace's OperandPages column: the main
// thread bound on NUMA 3 pins the matrix there. (2 bits per operand used to print them as "?".)
TEST(Factors, OperandPagesNameTheFourthNumaNode) {
  std::string p = platform_with("quad1.xml", {});
  auto body = [](Simulation& sim, Summary&) {
    Facts f;
    for (uint32_t t = 0; t < sim.dag().tasks.size(); t++) {
      const std::string pages = sim.numa().operand_pages(t);
      f["on_3"] += pages.find('3') != std::string::npos;
      f["unknown"] += pages.find('?') != std::string::npos;
    }
    f["main_numa"] = sim.threads(0).main_numa;
    return f;
  };
  Facts d =
      in_child(p, config(p, 6, {{"STARPU_MAIN_THREAD_BIND", "1"}, {"STARPU_MAIN_THREAD_CPUID", "6"}}), body);
  EXPECT_EQ(d["main_numa"], 3);
  EXPECT_GT(d["on_3"], 0);
  EXPECT_EQ(d["unknown"], 0);
}
