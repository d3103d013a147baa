// Runs of numasim on the hand-written platforms of tests/data (tiny1: one node, 4 cores on 2 NUMA
// nodes, GPU 0 and NIC 0 on NUMA 0; tiny2: two such nodes), each in a forked child (SimGrid: one
// engine per process) that reports facts of the run as numbers; shared by the tests that compare
// configurations (test_factors.cpp, test_mechanisms.cpp).
#pragma once
#include "child_output.hpp"
#include "runtime.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

inline const std::string kData = std::string(NUMASIM_SOURCE_ROOT) + "/simulator/tests/data/";
using Env = std::map<std::string, std::string>;
using Facts = std::map<std::string, double>;

// A directory of this test process's own under the system's temporary directory (mkdtemp),
// removed when the process ends (the forked children leave with _exit and keep it).
inline const std::filesystem::path& scratch() {
  struct Dir {
    std::filesystem::path path;
    Dir() {
      std::string tmpl = (std::filesystem::temp_directory_path() / "numasim_tests_XXXXXX").string();
      if (!mkdtemp(tmpl.data()))
        throw std::runtime_error("mkdtemp failed in " + std::filesystem::temp_directory_path().string());
      path = tmpl;
    }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Dir dir;
  return dir.path;
}

// `base` (tiny1.xml, tiny2.xml) with `props` added to every node zone (numa_* parameters of
// numa_effects.cpp and memory_model.cpp) and `gpu_props` to every GPU host (platform.cpp's GPU
// properties), saved as `name` (default: base's name) in the scratch directory.
inline std::string platform_with(const std::string& base, const Env& props, const Env& gpu_props = {},
                                 const std::string& name = "") {
  std::ifstream in(kData + base);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string xml = ss.str();
  auto insert_after = [&xml](const std::string& anchor, const Env& extra_props) {
    std::string extra;
    for (const auto& [k, v] : extra_props)
      extra += "<prop id=\"" + k + "\" value=\"" + v + "\"/>";
    for (size_t at = xml.find(anchor); at != std::string::npos; at = xml.find(anchor, at + 1))
      xml.insert(at + anchor.size(), extra);
  };
  insert_after("<prop id=\"machine\" value=\"tiny\"/>", props);
  insert_after("<prop id=\"kind\" value=\"gpu\"/>", gpu_props);
  std::string path = (scratch() / (name.empty() ? base : name)).string();
  std::ofstream(path) << xml;
  return path;
}

// An LU of nt x nt tiles of 96 on `platform` (tests/data's tiny models), block-cyclic on 1 x q
// nodes; `extra`: more members of the run description (e.g. R"("mechanisms": {...})").
inline numasim::RunConfig config(const std::string& platform, int nt, const Env& env, int q = 1,
                                 uint64_t seed = 3, const std::string& extra = "") {
  std::string text = R"({"platform": ")" + platform + R"(", "perfmodels": {"tiny": ")" + kData +
                     R"(tiny_sampling"}, "workload": {"kind": "lu", "n": )" + std::to_string(96 * nt) +
                     R"(, "b": 96, "distribution": {"kind": "block-cyclic", "p": 1, "q": )" +
                     std::to_string(q) + R"(}}, "seed": )" + std::to_string(seed) +
                     R"(, "variability": true)" + (extra.empty() ? "" : ", " + extra) + "}";
  numasim::RunConfig c = numasim::RunConfig::from_json(numasim::parse_json(text, "test.json"), "test.json");
  c.env_raw = env;
  c.env = numasim::parse_starpu_env(env, "test.json");
  c.transfers = (scratch() / "unused.csv").string();   // enables the transfer log (not written)
  c.trace = (scratch() / "unused_trace.csv").string(); // and the per-task records (not written)
  return c;
}

// Runs `body(sim, summary)` after a simulation in a child process; returns the facts it reports,
// with the makespan, the summary's `numa` counters (numa.<key>) and its runtime costs (costs.<key>).
template <class Body> Facts in_child(const std::string& platform, numasim::RunConfig cfg, Body body) {
  ChildOutput child = run_in_child([&] {
    int argc = 1;
    char a0[] = "numasim_tests";
    char* argv[] = {a0, nullptr};
    simgrid::s4u::Engine e(&argc, argv);
    numasim::Simulation sim(e, cfg);
    numasim::Summary s = sim.run();
    Facts f = body(sim, s);
    f["makespan"] = s.makespan;
    for (const auto& [k, v] : s.numa)
      f["numa." + k] = v;
    for (const auto& [k, v] : s.runtime_costs)
      f["costs." + k] = v;
    std::string out;
    char buf[160];
    for (const auto& [k, v] : f) {
      std::snprintf(buf, sizeof buf, "%s=%.17g\n", k.c_str(), v);
      out += buf;
    }
    return out;
  });
  EXPECT_TRUE(child.ok) << "child failed for " << platform;
  Facts f;
  std::istringstream in(child.text);
  for (std::string line; std::getline(in, line);) {
    auto eq = line.find('=');
    f[line.substr(0, eq)] = std::stod(line.substr(eq + 1));
  }
  return f;
}
