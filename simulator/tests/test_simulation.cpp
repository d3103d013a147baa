// End-to-end mechanisms on hand-written platforms (tests/data/tiny*.xml). SimGrid allows one
// engine per process: ctest runs every test in its own process (gtest_discover_tests).
#include "error.hpp"
#include "runtime.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

using namespace numasim;

static const std::string kData = std::string(NUMASIM_SOURCE_ROOT) + "/simulator/tests/data/";

static RunConfig config(const std::string& platform, int nt, const std::map<std::string, std::string>& env,
                        int q = 1) {
  std::string text = R"({"platform": ")" + kData + platform + R"(", "perfmodels": {"tiny": ")" + kData +
                     R"(tiny_sampling"}, "workload": {"kind": "lu", "n": )" + std::to_string(96 * nt) +
                     R"(, "b": 96, "distribution": {"kind": "block-cyclic", "p": 1, "q": )" +
                     std::to_string(q) + R"(}}, "seed": 3, "variability": true})";
  RunConfig c = RunConfig::from_json(parse_json(text, "test.json"), "test.json");
  c.env_raw = env;
  c.env = parse_starpu_env(env, "test.json");
  return c;
}

static int argc_ = 1;
static char arg0_[] = "numasim_tests";
static char* argv_[] = {arg0_, nullptr};

TEST(Simulation, LuOneNodeTaskCounts) {
  sg4::Engine e(&argc_, argv_);
  Simulation sim(e, config("tiny1.xml", 12, {{"STARPU_SCHED", "dmdas"}}));
  Summary s = sim.run();
  const uint64_t NT = 12;
  uint64_t gemm = 0;
  for (uint64_t k = 0; k < NT; k++)
    gemm += (NT - 1 - k) * (NT - 1 - k);
  EXPECT_EQ(s.by_kind[0], NT);
  EXPECT_EQ(s.by_kind[1] + s.by_kind[2], NT * (NT - 1));
  EXPECT_EQ(s.by_kind[3], gemm);
  EXPECT_EQ(s.tasks, NT + NT * (NT - 1) + gemm);
  EXPECT_GT(s.makespan, 0);
  // getrf_nopiv has no CUDA implementation: every getrf ran on a CPU worker.
  for (const auto& t : sim.dag().tasks)
    if (t.kind == TaskKind::getrf)
      EXPECT_FALSE(sim.workers()[t.worker].cuda);
}

TEST(Simulation, GpuReadOfRamDataCrossesPcieAndWriteInvalidates) {
  sg4::Engine e(&argc_, argv_);
  Simulation sim(e, config("tiny1.xml", 6, {{"STARPU_SCHED", "dmdas"}}));
  int ram = sim.global_mem(0, sim.home_mem(0));
  int gpu = -1;
  for (const auto& m : sim.memnodes())
    if (m.gpu)
      gpu = sim.global_mem(0, m.local);
  ASSERT_GE(gpu, 0);
  auto links = sim.route_links(ram, gpu);
  EXPECT_EQ(links, (std::vector<std::string>{"n1.membus0", "n1.pcie0"}));
  Summary s = sim.run();
  EXPECT_GT(s.on_cuda, 0u);
  EXPECT_GT(s.bytes_by_link_class["pcie"], 0);
  // After the run, each tile's last writer holds the only valid replica.
  for (uint32_t tile = 0; tile < 36; tile++) {
    uint8_t v = sim.valid_mask(0, tile);
    EXPECT_NE(v, 0);
  }
  uint32_t last = static_cast<uint32_t>(sim.dag().tasks.size() - 1); // getrf(NT-1): writes A(5,5)
  const Task& t = sim.dag().tasks[last];
  EXPECT_EQ(sim.valid_mask(0, sim.dag().tile(t, 0)), 1u << sim.workers()[t.worker].mem);
  // A write leaves the writer's replica only: after the run, a tile is valid on its last writer's
  // memory node and on the nodes of tasks that read it after that write, nowhere else. For some
  // tiles a task used the tile on another memory node before the last write (a replica existed
  // there) and no later reader brought it back: the write dropped that replica.
  std::vector<uint8_t> allowed(36, 0), before(36, 0);
  for (const auto& task : sim.dag().tasks) { // submission order = dependency order per tile
    uint8_t bit = static_cast<uint8_t>(1u << sim.workers()[task.worker].mem);
    for (uint8_t i = 0; i + 1 < task.nbuf; i++)
      allowed[sim.dag().tile(task, i)] |= bit; // read after the tile's current last write
    uint32_t w = sim.dag().tile(task, task.nbuf - 1);
    before[w] |= allowed[w];
    allowed[w] = bit;
  }
  int dropped = 0;
  for (uint32_t tile = 0; tile < 36; tile++) {
    uint8_t v = sim.valid_mask(0, tile);
    EXPECT_EQ(v & ~allowed[tile], 0) << "tile " << tile;
    dropped += (before[tile] & ~allowed[tile] & ~v) != 0;
  }
  EXPECT_GT(dropped, 0); // some replica on another node was invalidated by a later write
}

TEST(Simulation, RemoteReadGoesThroughNicsAndNetwork) {
  sg4::Engine e(&argc_, argv_);
  Simulation sim(e, config("tiny2.xml", 6, {{"STARPU_SCHED", "dmdas"}}, 2));
  int src = sim.global_mem(0, sim.home_mem(0));
  int dst = sim.global_mem(1, sim.home_mem(1));
  auto links = sim.route_links(src, dst);
  EXPECT_EQ(links, (std::vector<std::string>{"n1.membus0", "n1.nicpcie0", "n1.eth", "c.switch", "n2.eth",
                                             "n2.nicpcie0", "n2.membus0"}));
  Summary s = sim.run();
  EXPECT_GT(s.mpi_messages, 0u);
  EXPECT_DOUBLE_EQ(s.bytes_by_link_class["switch"], s.mpi_messages * 96.0 * 96 * 8);
  EXPECT_DOUBLE_EQ(s.bytes_by_link_class["eth"], 2 * s.bytes_by_link_class["switch"]);
}

TEST(Simulation, UseNumaCreatesOneRamNodePerNuma) {
  sg4::Engine e(&argc_, argv_);
  Simulation sim(e, config("tiny1.xml", 6, {{"STARPU_USE_NUMA", "1"}}));
  int rams = 0;
  for (const auto& m : sim.memnodes())
    rams += !m.gpu;
  EXPECT_EQ(rams, 2);
  // CPU workers on NUMA 1 use the NUMA 1 memory node; an inter-NUMA copy crosses the qpi link.
  auto links = sim.route_links(sim.global_mem(0, 0), sim.global_mem(0, 1));
  EXPECT_NE(std::find(links.begin(), links.end(), "n1.qpi"), links.end());
  Summary s = sim.run();
  EXPECT_EQ(s.tasks, 6u + 30u + 55u);
}

TEST(Simulation, DmdaPicksLeastExpectedEnd) {
  sg4::Engine e(&argc_, argv_);
  Simulation sim(e, config("tiny1.xml", 4, {{"STARPU_SCHED", "dmda"}, {"STARPU_SCHED_BETA", "0"}}));
  // gemm(1,1) of step 0: CPU 6 ms vs GPU 0.5 ms (+ transfers, ignored with beta=0 but counted in
  // exp_end): all queues empty at t=0, so the GPU has the least expected end.
  uint32_t gemm = 0;
  while (sim.dag().tasks[gemm].kind != TaskKind::gemm)
    gemm++;
  int w = sim.dmda_choose(gemm);
  ASSERT_GE(w, 0);
  EXPECT_TRUE(sim.workers()[w].cuda);
  // getrf only runs on CPUs: the first CPU worker (ties keep StarPU's worker order).
  int g = sim.dmda_choose(0);
  EXPECT_FALSE(sim.workers()[g].cuda);
  // Non-empty queues: dmda's expected queue length (exp_len) of the GPU holds 1 s of work, and the
  // first CPU worker's 0.1 s: the gemm goes to a CPU worker whose queue is empty.
  auto& ws = const_cast<std::vector<Worker>&>(sim.workers());
  ws[w].exp_len = 1.0;
  int first_cpu = -1;
  for (const auto& x : ws)
    if (!x.cuda && first_cpu < 0)
      first_cpu = x.id;
  ASSERT_GE(first_cpu, 0);
  ws[first_cpu].exp_len = 0.1;
  int busy = sim.dmda_choose(gemm);
  ASSERT_GE(busy, 0);
  EXPECT_FALSE(sim.workers()[busy].cuda);
  EXPECT_NE(busy, first_cpu);
  EXPECT_EQ(sim.workers()[busy].exp_len, 0);
}

// dmdas passes sorted_decision = 0 to _dmda_push_task (deque_modeling_policy_data_aware.c
// dmda_push_sorted_task): a task is placed by the whole expected queue length, whatever its
// priority. Only dmdasd (sorted_decision = 1) counts just the work queued ahead of the task's place.
// A GPU holding 1 s of low-priority work: dmdas sends the highest-priority gemm to a CPU, dmdasd
// to the GPU (nothing queued ahead of it there).
static int choose_with_low_priority_work_on_the_gpu(const char* sched) {
  sg4::Engine e(&argc_, argv_);
  Simulation sim(e, config("tiny1.xml", 4, {{"STARPU_SCHED", sched}, {"STARPU_SCHED_BETA", "0"}}));
  const auto& tasks = sim.dag().tasks;
  uint32_t gemm = 0, low = 0;
  for (uint32_t i = 0; i < tasks.size(); i++) {
    if (tasks[i].kind == TaskKind::gemm &&
        (tasks[gemm].kind != TaskKind::gemm || tasks[i].prio > tasks[gemm].prio))
      gemm = i;
    if (tasks[i].prio < tasks[low].prio)
      low = i;
  }
  EXPECT_LT(tasks[low].prio, tasks[gemm].prio);
  auto& ws = const_cast<std::vector<Worker>&>(sim.workers());
  for (auto& w : ws)
    if (w.cuda) {
      w.queue.insert({tasks[low].prio, low, 0});
      w.exp_len = 1.0;
    }
  int w = sim.dmda_choose(gemm);
  EXPECT_GE(w, 0);
  return w < 0 ? -1 : sim.workers()[w].cuda;
}

TEST(Simulation, DmdasPlacesByTheWholeQueue) {
  EXPECT_EQ(choose_with_low_priority_work_on_the_gpu("dmdas"), 0);
}

TEST(Simulation, DmdasdPlacesByTheWorkAheadOfThePriority) {
  EXPECT_EQ(choose_with_low_priority_work_on_the_gpu("dmdasd"), 1);
}

// StarPU-SimGrid orders copies beyond one stream per (source, destination) pair
// (core/simgrid.c transfers_are_sequential): a GPU-GPU copy and a copy into one of its two GPUs
// never run at the same time. tiny1 with a second GPU on the same socket.
TEST(Simulation, GpuToGpuCopiesAreSequentialWithCopiesIntoTheirGpus) {
  std::ifstream in(kData + "tiny1.xml");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string xml = ss.str();
  const std::string gpu0 = "<host id=\"n1.gpu0\"", route0 = "<route src=\"n1.gpu0\"";
  size_t h = xml.find(gpu0), r = xml.find(route0);
  ASSERT_NE(h, std::string::npos);
  ASSERT_NE(r, std::string::npos);
  std::string host = xml.substr(h, xml.find('\n', h) - h), route = xml.substr(r, xml.find('\n', r) - r);
  auto sub = [](std::string s, const std::string& a, const std::string& b) {
    for (size_t p = s.find(a); p != std::string::npos; p = s.find(a, p + b.size()))
      s.replace(p, a.size(), b);
    return s;
  };
  std::string host1 = sub(sub(host, "gpu0", "gpu1"), "\"index\" value=\"0\"", "\"index\" value=\"1\"");
  std::string route1 = sub(sub(route, "gpu0", "gpu1"), "pcie0", "pcie1");
  size_t l = xml.find("<link id=\"n1.pcie0\"");
  ASSERT_NE(l, std::string::npos);
  // Inserted from the end of the file backwards: hosts, then links, then routes.
  xml.insert(xml.find('\n', r) + 1, "   " + route1 + "\n");
  xml.insert(xml.find('\n', l) + 1, "   <link id=\"n1.pcie1\" bandwidth=\"10GBps\" latency=\"10us\"/>\n");
  xml.insert(xml.find('\n', h) + 1, "   " + host1 + "\n");
  std::string path = ::testing::TempDir() + "tiny1_two_gpus.xml";
  std::ofstream(path) << xml;
  sg4::Engine e(&argc_, argv_);
  RunConfig cfg =
      config("tiny1.xml", 10,
             {{"STARPU_SCHED", "dmdas"}, {"STARPU_NCPU", "1"}, {"STARPU_PERF_MODEL_HOMOGENEOUS_CUDA", "1"}});
  cfg.platform = path;
  cfg.transfers = ::testing::TempDir() + "tiny1_two_gpus_transfers.csv"; // keeps the transfer log
  Simulation sim(e, cfg);
  Summary s = sim.run();
  EXPECT_EQ(s.tasks, sim.dag().tasks.size());
  std::set<int> gpus;
  for (const auto& m : sim.memnodes())
    if (m.gpu)
      gpus.insert(sim.global_mem(0, m.local));
  ASSERT_EQ(gpus.size(), 2u);
  const auto& log = sim.transfer_log();
  size_t gpu_gpu = 0, overlaps = 0;
  for (const auto& x : log) {
    if (!gpus.count(x.gsrc) || !gpus.count(x.gdst))
      continue;
    gpu_gpu++;
    for (const auto& p : log)
      if ((p.gdst == x.gsrc || p.gdst == x.gdst) && !(p.gsrc == x.gsrc && p.gdst == x.gdst) &&
          p.start < x.end && x.start < p.end)
        overlaps++;
  }
  EXPECT_GT(gpu_gpu, 0u);
  EXPECT_EQ(overlaps, 0u);
}

TEST(Simulation, DmdasRunsHigherPriorityFirstOnAWorker) {
  sg4::Engine e(&argc_, argv_);
  RunConfig cfg =
      config("tiny1.xml", 8, {{"STARPU_SCHED", "dmdas"}, {"STARPU_NCUDA", "0"}, {"STARPU_NCPU", "1"}});
  cfg.trace = ::testing::TempDir() + "dmdas_trace.csv"; // keeps when each task ran (not written)
  Simulation sim(e, cfg);
  sim.run();
  // One worker: whenever two tasks were both ready and queued, the higher priority ran first.
  // Check on step 0's trsm tasks (all released by getrf(0) at once): start order follows priority.
  std::vector<std::pair<double, int>> starts;
  for (size_t i = 0; i < sim.dag().tasks.size(); i++) {
    const Task& t = sim.dag().tasks[i];
    if (t.step == 0 && (t.kind == TaskKind::trsm_row || t.kind == TaskKind::trsm_col))
      starts.emplace_back(sim.dag().spans[i].start, t.prio);
  }
  std::sort(starts.begin(), starts.end());
  for (size_t i = 1; i < starts.size(); i++)
    EXPECT_GE(starts[i - 1].second, starts[i].second);
}

// A GPU memory of 2 MiB (tiny1.xml's GPU with its memory property cut down; StarPU uses 90% in
// whole MiB, driver_cuda.c FREE_MARGIN: 1 MiB, 14 tiles of 96x96 doubles) forces the
// eviction of tiles the GPU wrote, whose only valid copy is on the GPU: the copy must stay valid
// until its write-back to RAM ends (memalloc.c), and a later read on the GPU must find a source.
// Before that was modelled, the run aborted with "no valid replica of handle".
TEST(Simulation, EvictingDirtyTilesWritesThemBackFirst) {
  std::ifstream in(kData + "tiny1.xml");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string xml = ss.str();
  const std::string big = "value=\"12884901888\"";
  const double tile = 96.0 * 96 * 8, capacity = 1024.0 * 1024;
  ASSERT_NE(xml.find(big), std::string::npos);
  xml.replace(xml.find(big), big.size(), "value=\"2097152\"");
  std::string path = ::testing::TempDir() + "tiny1_small_gpu.xml";
  std::ofstream(path) << xml;
  sg4::Engine e(&argc_, argv_);
  RunConfig cfg = config("tiny1.xml", 12, {{"STARPU_SCHED", "dmdas"}});
  cfg.platform = path;
  cfg.transfers = ::testing::TempDir() + "tiny1_small_gpu_transfers.csv"; // keeps the transfer log
  Simulation sim(e, cfg);
  // make_room's counts of evictable entries stay equal to a count over the GPU's LRU list.
  int checks = 0, mismatches = 0;
  sg4::Actor::create("check_counts", e.get_all_hosts().front(), [&] {
    for (;;) {
      sg4::this_actor::sleep_for(1e-3);
      checks++;
      mismatches += !sim.eviction_counts_match();
    }
  })->daemonize();
  Summary s = sim.run();
  EXPECT_GT(checks, 10);
  EXPECT_EQ(mismatches, 0);
  EXPECT_TRUE(sim.eviction_counts_match());
  EXPECT_EQ(s.tasks, sim.dag().tasks.size());
  EXPECT_GT(s.on_cuda, 0u);
  EXPECT_GT(s.eviction_writebacks, 0u);
  EXPECT_GE(s.evictions, s.eviction_writebacks);
  EXPECT_EQ(s.overcommits, 0u); // at most CUDA pipeline (2) x 3 operands are in use at once
  int gpu = -1;
  for (const auto& m : sim.memnodes())
    if (m.gpu) {
      gpu = sim.global_mem(0, m.local);
      const double peak = sim.mem_state(gpu).peak_used;
      EXPECT_LE(peak, capacity); // space of an evicted dirty tile is reused only after its write-back
      EXPECT_GT(peak, capacity - tile);
    }
  ASSERT_GE(gpu, 0);
  for (uint32_t tile_id = 0; tile_id < 144; tile_id++)
    EXPECT_NE(sim.valid_mask(0, tile_id), 0) << "tile " << tile_id;
  // Write-backs GPU -> RAM happened (the dirty evictions at least).
  int ram = sim.global_mem(0, sim.home_mem(0));
  size_t d2h = 0;
  for (const auto& r : sim.transfer_log())
    d2h += r.gsrc == gpu && r.gdst == ram;
  EXPECT_GE(d2h, s.eviction_writebacks);
}

TEST(Simulation, MissingHostsAreInputError) {
  sg4::Engine e(&argc_, argv_);
  RunConfig c = config("tiny1.xml", 4, {});
  c.perfmodels = {{"other", kData + "tiny_sampling"}};
  EXPECT_THROW(Simulation(e, c), InputError);
}

// A RAM host's memory (its NUMA node's size, read by StarPU 1.4.10's choice of where a tile is
// received) that is not a number of bytes: one message naming the host and the property.
TEST(Simulation, RamMemoryThatIsNotANumberOfBytesIsInputError) {
  std::ifstream in(kData + "tiny1.xml");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string xml = ss.str();
  const std::string ram =
      R"(<prop id="kind" value="ram"/><prop id="numa" value="1"/><prop id="memory" value="68719476736"/>)";
  ASSERT_NE(xml.find(ram), std::string::npos);
  xml.replace(xml.find(ram), ram.size(),
              R"(<prop id="kind" value="ram"/><prop id="numa" value="1"/><prop id="memory" value="64GiB"/>)");
  const std::string path = ::testing::TempDir() + "tiny1_bad_ram.xml";
  std::ofstream(path) << xml;
  sg4::Engine e(&argc_, argv_);
  RunConfig c = config("tiny1.xml", 4, {});
  c.platform = path;
  try {
    Simulation sim(e, c);
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& err) {
    const std::string what = err.what();
    EXPECT_NE(what.find("host n1.ram1 property 'memory'"), std::string::npos) << what;
    EXPECT_NE(what.find("a number of bytes (0 or more), got '64GiB'"), std::string::npos) << what;
  }
}

// The watchdog: a simulation that runs out of events with tasks left ends with one message that
// counts them and names the blocked tasks and what they wait for. Forced here by killing actors:
// every copy runner as it starts (no copy ever lands), or rank 0's MPI thread.
TEST(Simulation, StuckRunNamesItsBlockedTasks) {
  sg4::Engine e(&argc_, argv_);
  Simulation sim(e, config("tiny1.xml", 6, {{"STARPU_SCHED", "dmdas"}}));
  std::vector<sg4::ActorPtr> runners;
  sg4::Actor::on_creation_cb([&runners](sg4::Actor& a) {
    if (a.get_name() == "runner")
      runners.emplace_back(&a);
  });
  // Kills each runner during its first copy (copies last > 1 us), for the first 10 ms.
  sg4::Actor::create("reaper", e.get_all_hosts().front(), [&runners] {
    while (sg4::Engine::get_clock() < 0.01) {
      for (auto& r : runners)
        r->kill();
      runners.clear();
      sg4::this_actor::sleep_for(1e-6);
    }
  });
  try {
    sim.run();
    FAIL() << "a run without copies finished";
  } catch (const std::runtime_error& err) {
    std::string msg = err.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg; // one line
    EXPECT_EQ(msg.rfind("deadlock at t = ", 0), 0u) << msg;
    EXPECT_NE(msg.find(" tasks not executed ("), std::string::npos) << msg;
    // A task on the GPU waits for an operand whose copy from RAM never ends.
    EXPECT_NE(msg.find("on n1.gpu0 waits for A("), std::string::npos) << msg;
    EXPECT_NE(msg.find("@n1.gpu0: fetch from n1.ram0 started, not landed"), std::string::npos) << msg;
  }
}

TEST(Simulation, StuckRunNamesItsBlockedMessages) {
  sg4::Engine e(&argc_, argv_);
  Simulation sim(e, config("tiny2.xml", 4, {{"STARPU_SCHED", "dmdas"}}, 2));
  // Without rank 0's progression thread, no message leaves rank 0.
  sg4::Actor::create("killer", e.get_all_hosts().front(), [] {
    for (const auto& a : sg4::Engine::get_instance()->get_all_actors())
      if (a->get_name() == "n1.mpi")
        a->kill();
  });
  try {
    sim.run();
    FAIL() << "a run without rank 0's MPI thread finished";
  } catch (const std::runtime_error& err) {
    std::string msg = err.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_EQ(msg.rfind("deadlock at t = ", 0), 0u) << msg;
    EXPECT_NE(msg.find("MPI message of A(0,0) version 1 from n1 to n2 queued at the sender's MPI thread"),
              std::string::npos)
        << msg;
  }
}

// dmda weighs every worker of the node: 300 CPU workers, only the 291st has an empty queue, so a
// getrf (CPU only) goes to it. numasim's dmda used to look at the first 256 workers only.
TEST(Simulation, DmdaWeighsEveryWorkerOfAWideNode) {
  sg4::Engine e(&argc_, argv_);
  Simulation sim(e, config("wide1.xml", 4, {{"STARPU_SCHED", "dmda"}, {"STARPU_SCHED_BETA", "0"}}));
  auto& ws = const_cast<std::vector<Worker>&>(sim.workers());
  int cpus = 0, idle = -1;
  for (auto& w : ws)
    if (!w.cuda) {
      w.exp_len = 1.0;
      if (cpus++ == 290)
        idle = w.id;
    }
  ASSERT_GT(cpus, 290);
  ws[idle].exp_len = 0;
  EXPECT_EQ(sim.dmda_choose(0), idle);
}

// A copy of rank 0's tile `tile` between global memory nodes src and dst (for NumaEffects::move).
static Transfer rank0_copy(uint32_t tile, int src, int dst) {
  Transfer t{};
  t.rank = 0;
  t.handle = tile;
  t.gsrc = src;
  t.gdst = dst;
  return t;
}

// Rank 0's first GPU memory node (global index), -1 if none.
static int first_gpu_mem(const Simulation& sim) {
  for (const auto& m : sim.memnodes())
    if (m.gpu)
      return sim.global_mem(0, m.local);
  return -1;
}

// Two copies from RAM to the same GPU share its PCIe link (10 GB/s): together they stream at most
// 10 GB/s through the memory controller they read, which is what the controller's utilisation
// (the loaded-latency curve's input, and the kernels' test for binding traffic) counts; each at
// its own 10 GB/s, as before, made it 20 GB/s.
TEST(Simulation, CopiesSharingABottleneckLoadTheControllerAtItsRate) {
  sg4::Engine e(&argc_, argv_);
  Simulation sim(e, config("tiny1.xml", 4, {{"STARPU_SCHED", "dmdas"}}));
  const int ram = sim.global_mem(0, sim.home_mem(0));
  const int gpu = first_gpu_mem(sim);
  ASSERT_GE(gpu, 0);
  sg4::Host* ram_host = sim.memnodes()[ram].host;
  for (uint32_t tile : {14u, 15u}) // tiles no task of the first step reads
    sg4::Actor::create("copy", ram_host, [&sim, ram, gpu, tile] {
      Transfer t = rank0_copy(tile, ram, gpu);
      sim.numa().move(t);
    });
  double copies = -1, alone = -1;
  sg4::Actor::create("probe", ram_host, [&] {
    // driver -> GPU submission (~10 us), then both copies stream until ~25 us
    sg4::this_actor::sleep_for(20e-6);
    const MemorySystem& mem = sim.numa().memory(0);
    const sg4::Link* membus = sg4::Link::by_name("n1.membus0");
    copies = mem.utilisation(0) * membus->get_bandwidth() - mem.kernel_load(membus);
    sg4::this_actor::sleep_for(1e-3); // both copies over
    alone = mem.utilisation(0) * membus->get_bandwidth() - mem.kernel_load(membus);
  });
  sim.run();
  EXPECT_NEAR(copies, 10e9, 1e3);
  EXPECT_NEAR(alone, 0, 1e3);
}

// STARPU_USE_NUMA's copy between two RAM nodes is a memcpy by one thread (StarPU
// drivers/cpu/driver_cpu.c _starpu_cpu_copy_data): the reads and the writes share that thread's
// core link, 15 GB/s on tiny1, so it copies at 7.5 GB/s, not at the inter-socket link's 19.2 GB/s
// (once a DMA-like flow between the two RAMs).
TEST(Simulation, RamToRamCopyRunsAtOneThreadsMemcpyRate) {
  sg4::Engine e(&argc_, argv_);
  Simulation sim(e, config("tiny1.xml", 4, {{"STARPU_USE_NUMA", "1"}, {"STARPU_SCHED", "dmdas"}}));
  int rams[2] = {-1, -1};
  for (const auto& m : sim.memnodes())
    if (!m.gpu && m.numa < 2)
      rams[m.numa] = sim.global_mem(0, m.local);
  ASSERT_GE(rams[0], 0);
  ASSERT_GE(rams[1], 0);
  double took = -1;
  sg4::Actor::create("copy", sim.memnodes()[rams[0]].host, [&] {
    Transfer t = rank0_copy(15, rams[0], rams[1]); // a tile no task of the first step writes
    const double start = sg4::Engine::get_clock();
    sim.numa().move(t);
    took = sg4::Engine::get_clock() - start;
  });
  sim.run();
  const double bytes = 96.0 * 96 * 8;
  EXPECT_GT(took, bytes / 7.5e9);
  EXPECT_LT(took, bytes / 7.5e9 + 1e-6); // + the routes' latencies (< 0.3 us)
}

// A CUDA copy's submission (driver core -> GPU) leaves when StarPU issues the copy: a copy that
// waited behind its stream's earlier copies starts as soon as the stream is free, one on an idle
// stream first waits for its submission (NumaEffects::move; once every copy
// waited for it when its stream took it).
TEST(Simulation, CudaCopyIssuedEarlierSkipsItsSubmissionDelay) {
  sg4::Engine e(&argc_, argv_);
  Simulation sim(e, config("tiny1.xml", 4, {{"STARPU_SCHED", "dmdas"}}));
  const int ram = sim.global_mem(0, sim.home_mem(0));
  const int gpu = first_gpu_mem(sim);
  ASSERT_GE(gpu, 0);
  double idle = -1, queued = -1;
  sg4::Actor::create("copy", sim.memnodes()[ram].host, [&] {
    Transfer t = rank0_copy(15, ram, gpu); // a tile no task of the first step reads
    sg4::this_actor::sleep_for(1.0);       // after the LU's own copies
    t.submitted = sg4::Engine::get_clock();
    double start = t.submitted;
    sim.numa().move(t); // issued now, on an idle stream
    idle = sg4::Engine::get_clock() - start;
    sg4::this_actor::sleep_for(1.0);
    t.submitted = sg4::Engine::get_clock() - 1e-3; // issued 1 ms ago, taken by its stream now
    start = sg4::Engine::get_clock();
    sim.numa().move(t);
    queued = sg4::Engine::get_clock() - start;
  });
  sim.run();
  const double bytes = 96.0 * 96 * 8;
  EXPECT_GT(idle - queued, 1e-6);                 // the submission's travel (> 1 us on tiny1)
  EXPECT_LT(queued, bytes / 10e9 * 1.01 + 20e-6); // the DMA alone: PCIe 10 GB/s plus the route's latency
}
