// StarPU's thread binding as numasim replays it (topology.cpp place_threads) against the fixture
// shared with the Python replay (tests/data/binding_cases.json, tests/test_binding.py).
#include "config.hpp"
#include "error.hpp"
#include "topology.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

using namespace numasim;

namespace {
const std::string kCases = std::string(NUMASIM_SOURCE_ROOT) + "/tests/data/binding_cases.json";

// A machine node with the case's layout: cores numbered in NUMA order, GPU j on gpu_numa[j].
MachineNode node_of(const std::string& name, const nlohmann::json& layout) {
  MachineNode n;
  n.name = name;
  n.threads_per_core = layout.at("threads_per_core").get<int>();
  int core = 0, numa = 0;
  for (int count : layout.at("cores_per_numa").get<std::vector<int>>()) {
    for (int i = 0; i < count; i++)
      n.cpus.push_back({nullptr, core++, numa});
    n.rams.push_back({nullptr, numa, 0});
    numa++;
  }
  int j = 0;
  for (int g : layout.at("gpu_numa").get<std::vector<int>>())
    n.gpus.push_back({nullptr, j++, g, 0});
  return n;
}
} // namespace

TEST(Binding, SharedFixtureMatchesStarPU) {
  std::ifstream in(kCases);
  ASSERT_TRUE(in) << kCases;
  const nlohmann::json doc = nlohmann::json::parse(in);
  ASSERT_GE(doc.at("cases").size(), 7u);
  for (const auto& c : doc.at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    SCOPED_TRACE(name);
    MachineNode node = node_of(name, c.at("layout"));
    StarpuEnv env = parse_starpu_env(c.at("env").get<std::map<std::string, std::string>>(), kCases);
    NodeThreads t = place_threads(node, env);
    const auto& e = c.at("expected");
    EXPECT_EQ(t.main_core, e.at("main").is_null() ? -1 : e.at("main").get<int>());
    EXPECT_EQ(t.mpi_core, e.at("mpi").get<int>());
    std::vector<int> drivers, cpus;
    for (const auto& w : t.workers)
      (w.cuda ? drivers : cpus).push_back(w.core);
    EXPECT_EQ(drivers, e.at("gpu_drivers").get<std::vector<int>>());
    EXPECT_EQ(cpus, e.at("cpu_workers").get<std::vector<int>>());
    for (const auto& w : t.workers) // NUMA node of the bound core
      EXPECT_EQ(w.numa, node.cpus[w.core].numa);
  }
}

TEST(Binding, CpuIdListsExpandAsStarPU) {
  // topology.c _starpu_initialize_workers_bindid: ids modulo the number of PUs, `a-` up to the last.
  StarpuEnv e = parse_starpu_env({{"STARPU_WORKERS_CPUID", "6-9,3- 11"}}, "f");
  EXPECT_EQ(expand_cpuids(e.workers_cpuid, 8), (std::vector<int>{6, 7, 0, 1, 3, 4, 5, 6, 7, 3}));
  EXPECT_EQ(expand_cpuids(parse_starpu_env({{"STARPU_WORKERS_CPUID", "9-"}}, "f").workers_cpuid, 8),
            (std::vector<int>{1}));
  EXPECT_THROW(parse_starpu_env({{"STARPU_WORKERS_CPUID", "3-1"}}, "f"), InputError);
  EXPECT_THROW(parse_starpu_env({{"STARPU_WORKERS_CPUID", "-1"}}, "f"), InputError);
  EXPECT_THROW(parse_starpu_env({{"STARPU_WORKERS_CPUID", "a"}}, "f"), InputError);
  EXPECT_THROW(parse_starpu_env({{"STARPU_WORKERS_CUDAID", "0-"}}, "f"), InputError);
}
