// The runtime events a run writes when its description asks for them (`events`, runtime_events.hpp):
// every worker, pushes and pops, thread states, allocations and the GPU bytes used, consistent
// with the run's own counts. One SimGrid engine per process: ctest runs each test on its own.
#include "runtime.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

using namespace numasim;

static const std::string kData = std::string(NUMASIM_SOURCE_ROOT) + "/simulator/tests/data/";
static int argc_ = 1;
static char arg0_[] = "numasim_events_tests";
static char* argv_[] = {arg0_, nullptr};

namespace {

RunConfig config(const std::string& platform, int nt, int q) {
  std::string text = R"({"platform": ")" + kData + platform + R"(", "perfmodels": {"tiny": ")" + kData +
                     R"(tiny_sampling"}, "workload": {"kind": "lu", "n": )" + std::to_string(96 * nt) +
                     R"(, "b": 96, "distribution": {"kind": "block-cyclic", "p": 1, "q": )" +
                     std::to_string(q) +
                     R"(}}, "env": {"STARPU_SCHED": "dmdas"}, "seed": 3, "variability": true,
                     "trace": "t.csv", "events": "e.csv"})";
  return RunConfig::from_json(parse_json(text, "test.json"), "test.json");
}

struct Row {
  std::string type;
  double start, end;
  int rank;
  std::string thread, memnode;
  double value;
};

std::vector<Row> rows(const Simulation& sim) {
  std::ostringstream out;
  sim.write_events(out);
  std::istringstream in(out.str());
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "Type,Start,End,Rank,Thread,MemNode,Value");
  std::vector<Row> rs;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream ls(line);
    for (std::string x; std::getline(ls, x, ',');)
      f.push_back(x);
    if (f.size() == 6) // an empty last field
      f.emplace_back();
    EXPECT_EQ(f.size(), 7u) << line;
    rs.push_back({f[0], std::stod(f[1]), std::stod(f[2]), std::stoi(f[3]), f[4], f[5], std::stod(f[6])});
  }
  return rs;
}

} // namespace

TEST(RuntimeEvents, ConfigReadsTheKeyRelativeToTheDescription) {
  RunConfig c = RunConfig::from_json(parse_json(R"({"platform": "p.xml", "perfmodels": {"m": "d"}, "workload":
      {"kind": "lu", "n": 96, "b": 96}, "events": "e.csv"})",
                                                "dir/run.json"),
                                     "dir/run.json");
  EXPECT_EQ(c.events, "dir/e.csv");
  RunConfig none =
      RunConfig::from_json(parse_json(R"({"platform": "p.xml", "perfmodels": {"m": "d"}, "workload":
      {"kind": "lu", "n": 96, "b": 96}})",
                                      "run.json"),
                           "run.json");
  EXPECT_TRUE(none.events.empty());
}

TEST(RuntimeEvents, TwoRanksTasksThreadsAndMemoryAreAccountedFor) {
  sg4::Engine e(&argc_, argv_);
  Simulation sim(e, config("tiny2.xml", 10, 2));
  Summary s = sim.run();
  ASSERT_NE(sim.events(), nullptr);
  const std::vector<Row> rs = rows(sim);

  // one Worker row per worker of the run, first, with its rank and memory node
  std::map<std::string, int> rank_of;
  size_t workers = 0;
  while (workers < rs.size() && rs[workers].type == "Worker") {
    rank_of[rs[workers].thread] = rs[workers].rank;
    workers++;
  }
  ASSERT_EQ(workers, sim.workers().size());
  for (const Worker& w : sim.workers()) {
    EXPECT_EQ(rank_of.at(w.name), w.rank);
    EXPECT_EQ(rs[w.id].memnode, sim.memnodes()[sim.global_mem(w.rank, w.mem)].host->get_cname());
  }

  // each task pushed once on its rank, then popped once by a worker of that rank; never fewer
  // pushes than pops (the ready count StarVZ plots stays >= 0)
  std::set<int> submitted;
  std::map<int, long> ready;
  std::map<double, int> pushed_at, popped_at;
  std::set<int> pushed, popped;
  size_t sends = 0, receives = 0;
  std::map<std::string, std::vector<std::pair<double, double>>> states;
  std::map<std::string, double> used; // last value per GPU memory node
  size_t gpu_allocs = 0, used_up = 0;
  std::map<std::string, double> last_used;
  for (size_t i = workers; i < rs.size(); i++) {
    const Row& r = rs[i];
    EXPECT_LE(r.start, r.end) << r.type;
    EXPECT_LE(r.end, s.makespan + 1e-9) << r.type; // 9 decimals written
    const int task = static_cast<int>(r.value);
    if (r.type == "Submit") {
      EXPECT_TRUE(pushed.empty()); // all at 0, before the first push
      EXPECT_EQ(r.start, 0.0);
      EXPECT_EQ(r.rank, sim.dag().tasks[task].rank);
      EXPECT_TRUE(submitted.insert(task).second);
    } else if (r.type == "Push") {
      EXPECT_TRUE(pushed.insert(task).second);
      EXPECT_EQ(r.rank, sim.dag().tasks[task].rank);
      ready[r.rank]++;
    } else if (r.type == "Pop") {
      EXPECT_TRUE(pushed.count(task)) << task;
      EXPECT_TRUE(popped.insert(task).second);
      EXPECT_EQ(rank_of.at(r.thread), r.rank);
      EXPECT_EQ(sim.workers()[sim.dag().tasks[task].worker].name, r.thread); // the worker that ran it
      EXPECT_GE(--ready[r.rank], 0);
    } else if (r.type == "SendSubmitted" || r.type == "ReceiveCompleted") {
      (r.type == "SendSubmitted" ? sends : receives)++;
      EXPECT_EQ(r.thread, sim.nodes()[r.rank].name + ".mpi");
      states[r.thread].push_back({r.start, r.end});
    } else if (r.type == "Sleeping" || r.type == "Progressing") {
      EXPECT_TRUE(r.thread.size() > 0);
      states[r.thread].push_back({r.start, r.end});
    } else if (r.type == "Allocating" || r.type == "AllocatingReuse") {
      EXPECT_EQ(r.value, 96.0 * 96 * 8);
      if (r.memnode.find("gpu") != std::string::npos)
        gpu_allocs++;
    } else if (r.type == "Used") {
      if (r.value > last_used[r.memnode])
        used_up++;
      last_used[r.memnode] = r.value;
    } else {
      ADD_FAILURE() << "unexpected event " << r.type;
    }
  }
  EXPECT_EQ(submitted.size(), sim.dag().tasks.size());
  EXPECT_EQ(pushed.size(), sim.dag().tasks.size());
  EXPECT_EQ(popped.size(), sim.dag().tasks.size());
  EXPECT_EQ(sends, s.mpi_messages);
  EXPECT_EQ(receives, s.mpi_messages);
  EXPECT_GT(s.mpi_messages, 0u);
  // every GPU allocation raised the bytes used; the last value is the memory's state at the end
  EXPECT_GT(gpu_allocs, 0u);
  EXPECT_EQ(used_up, gpu_allocs);
  for (const MemNode& m : sim.memnodes())
    if (m.gpu)
      EXPECT_EQ(last_used.at(m.host->get_cname()), sim.mem_state(sim.global_mem(m.rank, m.local)).used);
  // a thread is in one state at a time, and never in one while it runs a task
  for (size_t t = 0; t < sim.dag().tasks.size(); t++) {
    const Worker& w = sim.workers()[sim.dag().tasks[t].worker];
    states[w.name].push_back({sim.dag().spans[t].start, sim.dag().spans[t].end});
  }
  for (auto& [thread, spans] : states) {
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); i++)
      EXPECT_LE(spans[i - 1].second, spans[i].first + 1e-9) << thread << " at " << spans[i].first;
  }
}

TEST(RuntimeEvents, IdleWorkersAreListed) {
  sg4::Engine e(&argc_, argv_);
  Simulation sim(e, config("tiny2.xml", 1, 2)); // one getrf: one worker runs it
  sim.run();
  std::set<std::string> listed, ran;
  for (const Row& r : rows(sim))
    if (r.type == "Worker")
      listed.insert(r.thread);
  for (const Task& t : sim.dag().tasks)
    ran.insert(sim.workers()[t.worker].name);
  EXPECT_EQ(ran.size(), 1u);
  EXPECT_EQ(listed.size(), sim.workers().size());
}

TEST(RuntimeEvents, OffUnlessAsked) {
  sg4::Engine e(&argc_, argv_);
  RunConfig c = config("tiny2.xml", 2, 2);
  c.events.clear();
  Simulation sim(e, c);
  sim.run();
  EXPECT_EQ(sim.events(), nullptr);
  std::ostringstream out;
  EXPECT_THROW(sim.write_events(out), std::logic_error);
}

TEST(RuntimeEvents, EvictionsFreeChunksAndUsedStaysWithinTheGpu) {
  std::ifstream in(kData + "tiny1.xml");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string xml = ss.str();
  const std::string big = "value=\"12884901888\"";
  ASSERT_NE(xml.find(big), std::string::npos);
  xml.replace(xml.find(big), big.size(), "value=\"2097152\""); // room for a few tiles
  const std::string path = ::testing::TempDir() + "tiny1_small_gpu_events.xml";
  std::ofstream(path) << xml;
  sg4::Engine e(&argc_, argv_);
  RunConfig cfg = config("tiny1.xml", 12, 1);
  cfg.platform = path;
  Simulation sim(e, cfg);
  Summary s = sim.run();
  ASSERT_GT(s.evictions, 0u);
  size_t frees = 0;
  double capacity = 0;
  for (const MemNode& m : sim.memnodes())
    if (m.gpu)
      capacity = m.capacity;
  for (const Row& r : rows(sim)) {
    frees += r.type == "Freeing";
    if (r.type == "Used" && s.overcommits == 0)
      EXPECT_LE(r.value, capacity);
  }
  // a chunk is given back for every eviction that frees a replica at once (no write-back first)
  EXPECT_GT(frees, 0u);
  EXPECT_LE(frees, s.evictions);
}
