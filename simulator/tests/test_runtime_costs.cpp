// StarPU's costs outside kernels and transfer times: the thread that runs a copy between RAM
// nodes, pinned host allocations, cudaMalloc / cudaFree (datawizard/, drivers/). Each test reads
// the run through interfaces that exist without these mechanisms (summary JSON, transfer CSV,
// task trace), so that it fails, rather than not compiling, on a numasim that lacks them.
#include "error.hpp"
#include "json.hpp"
#include "report.hpp"
#include "runtime.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

using namespace numasim;

static const std::string kData = std::string(NUMASIM_SOURCE_ROOT) + "/simulator/tests/data/";
static int argc_ = 1;
static char arg0_[] = "numasim_tests";
static char* argv_[] = {arg0_, nullptr};

static RunConfig config(const std::string& platform, int nt, const std::map<std::string, std::string>& env) {
  std::string text = R"({"platform": ")" + platform + R"(", "perfmodels": {"tiny": ")" + kData +
                     R"(tiny_sampling"}, "workload": {"kind": "lu", "n": )" + std::to_string(96 * nt) +
                     R"(, "b": 96, "distribution": {"kind": "block-cyclic", "p": 1, "q": 1}}, "seed": 3,
                     "variability": true})";
  RunConfig c = RunConfig::from_json(parse_json(text, "test.json"), "test.json");
  c.env_raw = env;
  c.env = parse_starpu_env(env, "test.json");
  c.trace = ::testing::TempDir() + "runtime_costs_trace.csv";         // keeps the task spans
  c.transfers = ::testing::TempDir() + "runtime_costs_transfers.csv"; // keeps the transfer log
  return c;
}

// tiny1.xml with GPU 0's properties extended (`props`: XML <prop> elements) and its memory set.
static std::string platform(const std::string& name, const std::string& props,
                            const std::string& gpu_memory = "12884901888") {
  std::ifstream in(kData + "tiny1.xml");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string xml = ss.str();
  const std::string mem = "<prop id=\"memory\" value=\"12884901888\"/>";
  const size_t at = xml.find(mem, xml.find("n1.gpu0"));
  EXPECT_NE(at, std::string::npos);
  xml.replace(at, mem.size(), "<prop id=\"memory\" value=\"" + gpu_memory + "\"/>" + props);
  std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << xml;
  return path;
}

static std::vector<std::vector<std::string>> csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> cells;
    std::string cell;
    std::istringstream l(line);
    while (std::getline(l, cell, ','))
      cells.push_back(cell);
    if (!line.empty() && line.back() == ',')
      cells.emplace_back();
    rows.push_back(cells);
  }
  return rows;
}

static size_t column(const std::vector<std::string>& header, const std::string& name) {
  for (size_t i = 0; i < header.size(); i++)
    if (header[i] == name)
      return i;
  ADD_FAILURE() << "no column " << name;
  return 0;
}

// The summary's `runtime_costs` object (empty when absent).
static std::map<std::string, double> costs(const Summary& s) {
  Json j = parse_json(summary_json(s, 3, 0), "summary");
  std::map<std::string, double> out;
  if (const Json* c = j.find("runtime_costs"))
    for (const auto& [k, v] : c->object)
      out[k] = v.number;
  EXPECT_FALSE(out.empty()) << "no runtime_costs in the summary";
  return out;
}

struct RunResult {
  std::vector<std::vector<std::string>> transfers, trace;
  std::map<std::string, double> costs;
  struct W {
    bool cuda;
    int numa;
    std::string name;
  };
  std::map<std::string, W> workers; // by name
  double makespan = 0;
};

static RunResult run(const std::string& path, int nt, const std::map<std::string, std::string>& env) {
  sg4::Engine e(&argc_, argv_);
  RunConfig cfg = config(path, nt, env);
  Simulation sim(e, cfg);
  Summary s = sim.run();
  RunResult r;
  std::ostringstream tr, ta;
  sim.write_transfers(tr);
  sim.write_trace(ta);
  r.transfers = csv(tr.str());
  r.trace = csv(ta.str());
  r.costs = costs(s);
  r.makespan = s.makespan;
  for (const auto& w : sim.workers())
    r.workers[w.name] = {w.cuda, w.numa, w.name};
  return r;
}

// With STARPU_USE_NUMA, a copy between two RAM nodes is a memcpy run by a thread that drives the
// destination node: a CPU worker of that NUMA node, or a CUDA driver (drivers/cpu/driver_cpu.c
// _starpu_cpu_copy_data, datawizard/datawizard.c __starpu_datawizard_progress,
// drivers/cuda/driver_cuda.c: CUDA workers drive every NUMA node). A CPU worker runs no task while
// it copies; a CUDA driver launches none, but may copy while its kernel runs on the device (it
// polls: drivers/cuda/driver_cuda.c _starpu_cuda_driver_run_once, Simulation::gpu_kernel).
TEST(RuntimeCosts, RamToRamCopyRunsInADrivingThreadThatIsBusyMeanwhile) {
  RunResult r = run(kData + "tiny1.xml", 8, {{"STARPU_USE_NUMA", "1"}, {"STARPU_SCHED", "dmdas"}});
  const auto& h = r.transfers.at(0);
  const size_t src = column(h, "Src"), dst = column(h, "Dst"), start = column(h, "Start"),
               end = column(h, "End"), thread = column(h, "Thread");
  const auto& th = r.trace.at(0);
  const size_t res = column(th, "ResourceId"), ts = column(th, "Start"), te = column(th, "End");
  size_t ram_copies = 0, by_cpu = 0, by_cuda = 0;
  for (size_t i = 1; i < r.transfers.size(); i++) {
    const auto& row = r.transfers[i];
    if (row[src].find("ram") == std::string::npos || row[dst].find("ram") == std::string::npos)
      continue;
    ram_copies++;
    ASSERT_TRUE(r.workers.count(row[thread])) << "copy without a thread: " << row[src] << " -> " << row[dst];
    const RunResult::W& w = r.workers.at(row[thread]);
    const int dst_numa = row[dst].back() - '0';
    if (w.cuda)
      by_cuda++;
    else {
      EXPECT_EQ(w.numa, dst_numa) << "a CPU worker copies into its own NUMA node only";
      by_cpu++;
    }
    const double a = std::stod(row[start]), b = std::stod(row[end]);
    for (size_t k = 1; k < r.trace.size(); k++)
      if (r.trace[k][res] == w.name) {
        const double task_start = std::stod(r.trace[k][ts]), task_end = std::stod(r.trace[k][te]);
        if (w.cuda)
          EXPECT_FALSE(a + 1e-12 < task_start && task_start < b - 1e-12)
              << w.name << " launched a task during its copy [" << a << ", " << b << "]";
        else
          EXPECT_FALSE(task_start < b - 1e-12 && a < task_end - 1e-12)
              << w.name << " ran a task during its copy [" << a << ", " << b << "]";
      }
  }
  EXPECT_GT(ram_copies, 0u);
  EXPECT_GT(by_cpu + by_cuda, 0u);
  EXPECT_EQ(r.costs["thread_copies"], static_cast<double>(ram_copies));
  EXPECT_GT(r.costs["thread_copy_s"], 0);
}

// StarPU's CUDA driver launches its kernels asynchronously (STARPU_CUDA_ASYNC, STARPU_CUDA_PIPELINE
// >= 1) and polls while they run, progressing the NUMA nodes' requests (drivers/cuda/driver_cuda.c
// _starpu_cuda_driver_run_once): it copies between RAM nodes while its kernel runs on the device.
// With STARPU_CUDA_PIPELINE=0 it waits for each kernel (cudaStreamSynchronize) and copies only
// between them.
static size_t copies_during_own_kernel(const RunResult& r) {
  const auto& h = r.transfers.at(0);
  const size_t src = column(h, "Src"), dst = column(h, "Dst"), start = column(h, "Start"),
               thread = column(h, "Thread");
  const auto& th = r.trace.at(0);
  const size_t res = column(th, "ResourceId"), ts = column(th, "Start"), te = column(th, "End");
  size_t n = 0;
  for (size_t i = 1; i < r.transfers.size(); i++) {
    const auto& row = r.transfers[i];
    if (row[src].find("ram") == std::string::npos || row[dst].find("ram") == std::string::npos ||
        row[thread].find("gpu") == std::string::npos)
      continue;
    const double a = std::stod(row[start]);
    for (size_t k = 1; k < r.trace.size(); k++)
      if (r.trace[k][res] == row[thread] && std::stod(r.trace[k][ts]) < a - 1e-12 &&
          a < std::stod(r.trace[k][te]) - 1e-12)
        n++;
  }
  return n;
}

TEST(RuntimeCosts, CudaDriverCopiesBetweenRamNodesWhileItsKernelRuns) {
  RunResult r = run(kData + "tiny1.xml", 8, {{"STARPU_USE_NUMA", "1"}, {"STARPU_SCHED", "dmdas"}});
  EXPECT_GT(copies_during_own_kernel(r), 0u);
}

TEST(RuntimeCosts, CudaDriverWithoutPipelineCopiesOnlyBetweenItsKernels) {
  RunResult r = run(kData + "tiny1.xml", 8,
                    {{"STARPU_USE_NUMA", "1"}, {"STARPU_SCHED", "dmdas"}, {"STARPU_CUDA_PIPELINE", "0"}});
  EXPECT_GT(r.costs["thread_copies"], 0);
  EXPECT_EQ(copies_during_own_kernel(r), 0u);
}

// With CUDA workers StarPU pins RAM allocations: cudaHostAlloc(Portable) by the thread that
// handles the request, with no hwloc binding (datawizard/malloc.c _starpu_malloc_flags_on_node),
// so the pages land on that thread's NUMA node, and the call costs time per MiB (StarPU-SimGrid:
// 650 us per MiB, the same file's SimGrid branch). A replica stays allocated when invalidated,
// so each (tile, RAM node) is allocated once.
TEST(RuntimeCosts, PinnedAllocationsAreChargedOncePerReplicaAndPlacedByTheAllocatingThread) {
  const double per_mib = 650e-6;
  RunResult r = run(platform("tiny1_pinned.xml", "<prop id=\"pinned_alloc_s_per_mib\" value=\"0.00065\"/>"),
                    8, {{"STARPU_USE_NUMA", "1"}, {"STARPU_SCHED", "dmdas"}});
  const auto& h = r.transfers.at(0);
  const size_t src = column(h, "Src"), dst = column(h, "Dst");
  size_t ram_copies = 0, into_ram = 0; // a first buffer comes with a copy into RAM (RAM or GPU source)
  for (size_t i = 1; i < r.transfers.size(); i++)
    if (r.transfers[i][dst].find("ram") != std::string::npos) {
      into_ram++;
      ram_copies += r.transfers[i][src].find("ram") != std::string::npos;
    }
  ASSERT_GT(ram_copies, 0u);
  const double tile_mib = 96.0 * 96 * 8 / 1048576;
  EXPECT_GE(r.costs["pinned_allocs"], 1);
  EXPECT_LE(r.costs["pinned_allocs"], static_cast<double>(into_ram));
  EXPECT_NEAR(r.costs["pinned_alloc_s"], r.costs["pinned_allocs"] * tile_mib * per_mib, 1e-12);
  // Pages placed by the allocating thread, not bound to the memory node: some CPU task reads a
  // tile of its own memory node whose pages are on the other NUMA node.
  const auto& th = r.trace.at(0);
  const size_t res = column(th, "ResourceId"), mem_numa = column(th, "OperandNuma"),
               pages = column(th, "OperandPages");
  size_t off_node = 0;
  for (size_t k = 1; k < r.trace.size(); k++) {
    const auto& row = r.trace[k];
    if (row[res].find("cpu") == std::string::npos)
      continue;
    std::istringstream p(row[pages]);
    for (std::string n; p >> n;)
      off_node += n != row[mem_numa];
  }
  EXPECT_GT(off_node, 0u);
}

// Each pinned allocation is counted once, for the kind of thread that made it: the counts by kind
// add up to the total, and those a CUDA driver made for RAM -> RAM copies are among the CUDA
// driver's own. Allocations slow enough to overlap (several threads in cudaHostAlloc at once)
// check that a thread is not credited with what others allocated while it slept.
TEST(RuntimeCosts, PinnedAllocationsByThreadKindAddUpToTheTotal) {
  RunResult r =
      run(platform("tiny1_pinned_kinds.xml", "<prop id=\"pinned_alloc_s_per_mib\" value=\"0.05\"/>"), 8,
          {{"STARPU_USE_NUMA", "1"}, {"STARPU_SCHED", "dmdas"}});
  const double total = r.costs["pinned_allocs"], cpu = r.costs["pinned_allocs_cpu"],
               cuda = r.costs["pinned_allocs_cuda"], unthreaded = r.costs["pinned_allocs_unthreaded"];
  ASSERT_GE(total, 2);
  EXPECT_GT(cpu, 0) << "no CPU worker allocated";
  EXPECT_GT(cuda, 0) << "no CUDA driver allocated";
  EXPECT_EQ(cpu + cuda + unthreaded, total);
  EXPECT_EQ(unthreaded, 0); // thread copies on: every allocation has its thread
  EXPECT_LE(r.costs["ram_copy_pinned_allocs_cuda"], cuda);
}

// StarPU-MPI of the study's era: the main thread pins the buffer of each tile its rank receives,
// at the submission of the tile's first local reader, then posts the reception
// (Simulation::main_thread). On two one-GPU nodes (tiny2, 2 x 1 grid): one main-thread allocation
// per received tile, no message lands before its receiver's first allocation ended, and the
// node's GPUs are held meanwhile.
TEST(RuntimeCosts, ReceivedTilesArePinnedByTheMainThreadBeforeTheirMessage) {
  const double per_mib = 0.05; // slow, so that the allocations show in the dates
  std::string path = ::testing::TempDir() + "tiny2_recv.xml";
  {
    std::ifstream in(kData + "tiny2.xml");
    std::stringstream ss;
    ss << in.rdbuf();
    std::string xml = ss.str();
    const std::string mem = "<prop id=\"memory\" value=\"12884901888\"/>";
    for (size_t at = xml.find(mem); at != std::string::npos; at = xml.find(mem, at + 1))
      xml.insert(at + mem.size(), "<prop id=\"pinned_alloc_s_per_mib\" value=\"0.05\"/>");
    std::ofstream(path) << xml;
  }
  sg4::Engine e(&argc_, argv_);
  std::string text =
      R"({"platform": ")" + path + R"(", "perfmodels": {"tiny": ")" + kData +
      R"(tiny_sampling"}, "workload": {"kind": "lu", "n": 768, "b": 96, "distribution": {"kind":
                     "block-cyclic", "p": 2, "q": 1}}, "seed": 3, "variability": true})";
  RunConfig cfg = RunConfig::from_json(parse_json(text, "test.json"), "test.json");
  cfg.env = parse_starpu_env({}, "test.json");
  cfg.transfers = ::testing::TempDir() + "recv_transfers.csv";
  Simulation sim(e, cfg);
  Summary s = sim.run();
  std::ostringstream tr;
  sim.write_transfers(tr);
  const auto rows = csv(tr.str());
  const size_t src = column(rows.at(0), "Src"), dst = column(rows.at(0), "Dst"),
               start = column(rows.at(0), "Start");
  std::set<std::pair<std::string, std::string>> received; // (destination node, tile by first start)
  size_t messages = 0;
  double first = 1e9;
  for (size_t i = 1; i < rows.size(); i++) {
    const std::string a = rows[i][src].substr(0, rows[i][src].find('.')),
                      b = rows[i][dst].substr(0, rows[i][dst].find('.'));
    if (a == b)
      continue;
    messages++;
    first = std::min(first, std::stod(rows[i][start]));
  }
  const double one = 96.0 * 96 * 8 / 1048576 * per_mib;
  std::map<std::string, double> costs(s.runtime_costs.begin(), s.runtime_costs.end());
  ASSERT_GT(messages, 0u);
  EXPECT_EQ(costs["pinned_allocs_main"], static_cast<double>(messages)); // each tile received once
  EXPECT_GE(first, one - 1e-12) << "a message moved before its buffer was allocated";
  EXPECT_GE(costs["pinned_gpu_stall_s"], costs["pinned_allocs_main"] * one - 1e-9);
  EXPECT_EQ(costs["pinned_allocs"], costs["pinned_allocs_cpu"] + costs["pinned_allocs_cuda"] +
                                        costs["pinned_allocs_unthreaded"] + costs["pinned_allocs_main"]);
}

// Whether a pinned allocation holds the node's GPUs is uncertain (docs/pinned-allocations.md): the
// machine description's pinned_alloc_gpu_stall gives the share of the call during which the GPUs
// start no copy and no kernel (1 when absent, the CUDA C Programming Guide's implicit
// synchronization; 0: the devices keep running). The summary reports the time they were held.
TEST(RuntimeCosts, PinnedAllocationHoldsTheGpusForTheDescribedShare) {
  RunResult r =
      run(platform("tiny1_pinned_stall.xml", "<prop id=\"pinned_alloc_s_per_mib\" value=\"0.00065\"/>"
                                             "<prop id=\"pinned_alloc_gpu_stall\" value=\"0.25\"/>"),
          8, {{"STARPU_USE_NUMA", "1"}, {"STARPU_SCHED", "dmdas"}});
  ASSERT_GE(r.costs["pinned_allocs"], 1);
  EXPECT_NEAR(r.costs["pinned_gpu_stall_s"], 0.25 * r.costs["pinned_alloc_s"], 1e-12);
}

TEST(RuntimeCosts, PinnedAllocationWithoutStallLeavesTheGpusRunning) {
  RunResult r =
      run(platform("tiny1_pinned_nostall.xml", "<prop id=\"pinned_alloc_s_per_mib\" value=\"0.00065\"/>"
                                               "<prop id=\"pinned_alloc_gpu_stall\" value=\"0\"/>"),
          8, {{"STARPU_USE_NUMA", "1"}, {"STARPU_SCHED", "dmdas"}});
  ASSERT_GE(r.costs["pinned_allocs"], 1);
  EXPECT_GT(r.costs["pinned_alloc_s"], 0);
  EXPECT_EQ(r.costs["pinned_gpu_stall_s"], 0);
}

TEST(RuntimeCosts, PinnedAllocationStallOutsideZeroToOneIsRejected) {
  const std::string p =
      platform("tiny1_pinned_bad.xml", "<prop id=\"pinned_alloc_gpu_stall\" value=\"1.5\"/>");
  sg4::Engine e(&argc_, argv_);
  RunConfig cfg = config(p, 4, {});
  try {
    Simulation sim(e, cfg);
    ADD_FAILURE() << "a stall share of 1.5 was accepted";
  } catch (const InputError& ex) {
    EXPECT_NE(std::string(ex.what()).find("pinned_alloc_gpu_stall"), std::string::npos) << ex.what();
  }
}

// StarPU 1.4's STARPU_CUDA_ONLY_FAST_ALLOC_OTHER_MEMNODES=1: a CUDA driver makes no slow (pinned)
// allocation for the NUMA nodes it drives (datawizard/datawizard.c __starpu_datawizard_progress,
// copy_driver.c: such a request stays for a CPU worker of the node). The StarPU of the study's era
// has no such variable; unset, CUDA drivers allocate as CPU workers do (the tests above).
TEST(RuntimeCosts, CudaDriversMakeNoPinnedAllocationForRamCopiesWhenOnlyFastAllocIsSet) {
  RunResult r =
      run(platform("tiny1_pinned_fast.xml", "<prop id=\"pinned_alloc_s_per_mib\" value=\"0.00065\"/>"), 8,
          {{"STARPU_USE_NUMA", "1"},
           {"STARPU_SCHED", "dmdas"},
           {"STARPU_CUDA_ONLY_FAST_ALLOC_OTHER_MEMNODES", "1"}});
  EXPECT_GE(r.costs["pinned_allocs"], 1);
  EXPECT_EQ(r.costs["ram_copy_pinned_allocs_cuda"], 0);
  EXPECT_GT(r.makespan, 0);
}

// cudaMalloc and cudaFree cost the GPU's driver thread time per call (drivers/cuda/driver_cuda.c
// _starpu_cuda_malloc_on_node / _starpu_cuda_free_on_node; StarPU-SimGrid: 175 us and 750 us),
// and the device's copies wait meanwhile: the first copy into the GPU starts after one cudaMalloc.
// A GPU memory too small for the run makes the reclaim free chunks (cudaFree); reusing a clean
// chunk in place frees nothing (memalloc.c try_to_reuse_potentially_in_use_mc).
TEST(RuntimeCosts, GpuMallocAndFreeAreChargedPerCall) {
  const double malloc_s = 64e-6, free_s = 57e-6;
  RunResult r = run(
      platform("tiny1_gpu_costs.xml",
               "<prop id=\"malloc_s\" value=\"6.4e-05\"/><prop id=\"free_s\" value=\"5.7e-05\"/>", "2097152"),
      12, {{"STARPU_SCHED", "dmdas"}});
  const auto& h = r.transfers.at(0);
  const size_t dst = column(h, "Dst"), start = column(h, "Start");
  double first = 1e9;
  for (size_t i = 1; i < r.transfers.size(); i++)
    if (r.transfers[i][dst].find("gpu") != std::string::npos)
      first = std::min(first, std::stod(r.transfers[i][start]));
  EXPECT_GE(first, malloc_s - 1e-12);
  EXPECT_GE(r.costs["gpu_mallocs"], 1);
  EXPECT_NEAR(r.costs["gpu_malloc_s"], r.costs["gpu_mallocs"] * malloc_s, 1e-12);
  EXPECT_NEAR(r.costs["gpu_free_s"], r.costs["gpu_frees"] * free_s, 1e-12);
  // 1 MiB usable holds 14 tiles: at most that many chunks live at once, so the mallocs beyond
  // them each followed a free.
  EXPECT_GT(r.costs["gpu_frees"], 0);
  EXPECT_LE(r.costs["gpu_mallocs"] - r.costs["gpu_frees"], 14 + 1);
}

// StarPU-MPI's memory node for a send (run description `mpi.memory_node`): the StarPU-MPI of the
// study's era acquires the data on STARPU_MAIN_RAM ("main_ram", the default), StarPU 1.4.10 sends
// from the first RAM node holding a valid copy (mpi/src/starpu_mpi.c _starpu_mpi_choose_node,
// "choose_node"). With STARPU_USE_NUMA a tile last written on the other NUMA node is sent from
// there instead of being copied to STARPU_MAIN_RAM first.
static std::map<std::string, size_t> message_sources(const std::string& memory_node) {
  std::string text = R"({"platform": ")" + kData + R"(tiny2.xml", "perfmodels": {"tiny": ")" + kData +
                     R"(tiny_sampling"}, "workload": {"kind": "lu", "n": 960, "b": 96, "distribution":
                     {"kind": "block-cyclic", "p": 1, "q": 2}}, "seed": 3, "variability": true,
                     "mpi": {"memory_node": ")" +
                     memory_node + R"("}, "env": {"STARPU_USE_NUMA": "1", "STARPU_SCHED": "dmdas"}})";
  RunConfig cfg = RunConfig::from_json(parse_json(text, "test.json"), "test.json");
  cfg.transfers = ::testing::TempDir() + "mpi_node_transfers.csv";
  sg4::Engine e(&argc_, argv_);
  Simulation sim(e, cfg);
  Summary s = sim.run();
  EXPECT_EQ(s.tasks, sim.dag().tasks.size());
  std::ostringstream tr;
  sim.write_transfers(tr);
  auto rows = csv(tr.str());
  const size_t src = column(rows.at(0), "Src"), dst = column(rows.at(0), "Dst");
  std::map<std::string, size_t> from; // sending RAM host -> messages
  for (size_t i = 1; i < rows.size(); i++)
    if (rows[i][src].substr(0, 3) != rows[i][dst].substr(0, 3)) // n1.* -> n2.*: a message
      from[rows[i][src]]++;
  EXPECT_FALSE(from.empty());
  return from;
}

TEST(RuntimeCosts, StudyEraStarpuMpiSendsFromMainRam) {
  auto from = message_sources("main_ram");
  for (const auto& [host, n] : from) // STARPU_MAIN_RAM is NUMA 0's node on tiny2 (first CPU worker)
    EXPECT_NE(host.find("ram0"), std::string::npos) << n << " messages sent from " << host;
}

TEST(RuntimeCosts, Starpu1410SendsFromARamNodeHoldingTheData) {
  auto from = message_sources("choose_node");
  size_t other = 0;
  for (const auto& [host, n] : from)
    other += host.find("ram0") == std::string::npos ? n : 0;
  EXPECT_GT(other, 0u);
}
