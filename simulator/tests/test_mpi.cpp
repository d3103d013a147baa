// StarPU-MPI's cooperative sends (mpi/starpu_mpi_coop_sends.hpp) and how each backend sends a bag
// (mpi/starpu_mpi.hpp): StarPU's MPI backend from the owner, NewMadeleine's multicast along a tree
// (mpi/starpu_mpi_nmad_coop.hpp). One simulation per test: ctest runs each test in its own process.
#include "error.hpp"
#include "mpi/starpu_mpi_coop_sends.hpp"
#include "mpi/starpu_mpi_nmad_coop.hpp"
#include "runtime.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

using namespace numasim;

static const std::string kData = std::string(NUMASIM_SOURCE_ROOT) + "/simulator/tests/data/";

TEST(McastTree, BinomialIsNewMadeleines) {
  // nm_coll_trees.h nm_coll_binomial_step over 8 nodes: the root sends to 4, 2, 1 in that order;
  // 4 to 6 then 5; 2 to 3; 6 to 7.
  EXPECT_EQ(mcast_children(McastTree::binomial, 8, 0), (std::vector<int>{4, 2, 1}));
  EXPECT_EQ(mcast_children(McastTree::binomial, 8, 4), (std::vector<int>{6, 5}));
  EXPECT_EQ(mcast_children(McastTree::binomial, 8, 2), (std::vector<int>{3}));
  EXPECT_EQ(mcast_children(McastTree::binomial, 8, 6), (std::vector<int>{7}));
  for (int leaf : {1, 3, 5, 7})
    EXPECT_TRUE(mcast_children(McastTree::binomial, 8, leaf).empty());
  // Five nodes (a bag of four): height 3, the root still starts with 4, which has no child.
  EXPECT_EQ(mcast_children(McastTree::binomial, 5, 0), (std::vector<int>{4, 2, 1}));
  EXPECT_EQ(mcast_children(McastTree::binomial, 5, 2), (std::vector<int>{3}));
  EXPECT_TRUE(mcast_children(McastTree::binomial, 5, 4).empty());
  EXPECT_EQ(mcast_children(McastTree::chain, 5, 2), (std::vector<int>{3}));
  EXPECT_TRUE(mcast_children(McastTree::chain, 5, 4).empty());
  EXPECT_EQ(mcast_children(McastTree::flat, 5, 0), (std::vector<int>{1, 2, 3, 4}));
  EXPECT_TRUE(mcast_children(McastTree::flat, 5, 1).empty());
}

TEST(McastTree, EveryReceiverHasOneParentThatSendsToIt) {
  for (McastTree kind : {McastTree::binomial, McastTree::chain, McastTree::flat})
    for (int nodes = 1; nodes <= 70; nodes++) {
      std::vector<int> got(nodes, 0);
      int height = 0;
      for (int i = 0; i < nodes; i++)
        for (int c : mcast_children(kind, nodes, i)) {
          ASSERT_GT(c, 0);
          ASSERT_LT(c, nodes);
          got[c]++;
          EXPECT_EQ(mcast_parent(kind, nodes, c), i) << nodes << " nodes, child " << c;
        }
      EXPECT_EQ(mcast_parent(kind, nodes, 0), -1);
      for (int i = 1; i < nodes; i++)
        EXPECT_EQ(got[i], 1) << nodes << " nodes, node " << i;
      // A binomial tree reaches everyone in ceil(log2(nodes)) steps: a node's depth in sends
      // (its parent's sends before it, plus its parent's own arrival) is at most that.
      if (kind != McastTree::binomial)
        continue;
      std::vector<int> arrival(nodes, 0);
      for (int i = 0; i < nodes; i++) { // parents have lower indices: arrival[i] is known
        int step = arrival[i];
        for (int c : mcast_children(kind, nodes, i))
          arrival[c] = ++step;
      }
      for (int i = 0; i < nodes; i++)
        height = std::max(height, arrival[i]);
      int log2 = 0;
      while ((1 << log2) < nodes)
        log2++;
      EXPECT_EQ(height, log2) << nodes;
    }
}

static RunConfig config(const std::string& platform, int nt, const std::string& distribution,
                        const std::string& mpi) {
  std::string text = R"({"platform": ")" + kData + platform + R"(", "perfmodels": {"tiny": ")" + kData +
                     R"(tiny_sampling"}, "workload": {"kind": "lu", "n": )" + std::to_string(96 * nt) +
                     R"(, "b": 96, "distribution": )" + distribution + R"(}, "seed": 3, "variability": false,
                     "env": {"STARPU_SCHED": "dmdas"}, "mpi": )" +
                     mpi + "}";
  RunConfig c = RunConfig::from_json(parse_json(text, "test.json"), "test.json");
  c.transfers = "unused.csv"; // keep the transfer log (written only by main)
  return c;
}

// Bags on a 2 x 2 block-cyclic LU: every value written by a task is one bag of all its receptions,
// highest priority first, ties in submission order; initial data is sent one reception at a time.
TEST(CoopSends, OneBagPerWrittenValueSortedByPriority) {
  RunConfig c = config("tiny2.xml", 8, R"({"kind": "block-cyclic", "p": 2, "q": 2})", "{}");
  c.resolve_distribution(4);
  Dag dag = build_lu_dag(c);
  CoopSends bags = build_coop_sends(dag);
  std::set<uint32_t> initial(dag.ready_recvs.begin(), dag.ready_recvs.end());
  std::map<std::pair<uint32_t, uint32_t>, std::set<uint32_t>> by_value; // (tile, version) -> bags
  size_t multi = 0;
  ASSERT_EQ(bags.members.size(), dag.receptions.size());
  for (uint32_t g = 0; g < bags.ngroups(); g++) {
    auto m = bags.group(g);
    ASSERT_FALSE(m.empty());
    multi += m.size() > 1;
    for (size_t i = 0; i < m.size(); i++) {
      const Reception& r = dag.receptions[m[i]];
      EXPECT_EQ(bags.group_of[m[i]], g);
      EXPECT_EQ(r.tile, dag.receptions[m[0]].tile);
      EXPECT_EQ(r.version, dag.receptions[m[0]].version);
      if (initial.count(m[i]))
        EXPECT_EQ(m.size(), 1u);
      else
        by_value[{r.tile, r.version}].insert(g);
      if (i > 0) {
        const Reception& p = dag.receptions[m[i - 1]];
        EXPECT_TRUE(p.prio > r.prio || (p.prio == r.prio && m[i - 1] < m[i])) << "bag " << g;
      }
    }
  }
  EXPECT_GT(multi, 0u);
  for (const auto& [value, groups] : by_value)
    EXPECT_EQ(groups.size(), 1u) << "tile " << value.first << " version " << value.second;
}

// A(0,0)'s first value goes to ranks 1-4 (tests/data/bcast5.dist). Its readers' priorities
// (Chameleon's getrf_nopiv: trsm at 2NT - 2k - m) order the bag ranks 1, 3 (priority 5), 2, 4
// (priority 4), tree indices 1-4; the binomial tree over 5 nodes: 0 -> 4, 2, 1 and 2 -> 3, so
// rank 0 sends to ranks 4, 3, 1 one after the other and rank 3 forwards to rank 2.
struct Message {
  int from, to;
  double start, end;
};
static std::vector<Message> messages(const Simulation& sim) {
  std::vector<Message> out;
  for (const auto& t : sim.transfer_log()) {
    const int a = sim.memnodes()[t.gsrc].rank, b = sim.memnodes()[t.gdst].rank;
    if (a != b)
      out.push_back({a, b, t.start, t.end});
  }
  return out;
}
static const Message& find(const std::vector<Message>& ms, int from, int to) {
  for (const auto& m : ms)
    if (m.from == from && m.to == to)
      return m;
  static const Message none{-1, -1, 0, 0};
  return none;
}
// The messages `hops` (from, to) exist, and each starts once the one before it ended.
static void expect_in_turn(const std::vector<Message>& ms, const std::vector<std::pair<int, int>>& hops) {
  const Message* prev = nullptr;
  for (auto [from, to] : hops) {
    const Message& m = find(ms, from, to);
    ASSERT_EQ(m.from, from) << "no message " << from << " -> " << to;
    if (prev)
      EXPECT_LE(prev->end, m.start) << from << " -> " << to;
    prev = &m;
  }
}
static const std::string kBcast5 = R"({"kind": "file", "path": ")" + kData + "bcast5.dist\"}";

static int argc_ = 1;
static char arg0_[] = "numasim_tests";
static char* argv_[] = {arg0_, nullptr};

TEST(NmadMulticast, BinomialTreeForwardsThroughReceivers) {
  sg4::Engine e(&argc_, argv_);
  Simulation sim(e, config("tiny5.xml", 3, kBcast5, R"({"backend": "nmad"})"));
  Summary s = sim.run();
  EXPECT_EQ(s.tasks, 14u);
  const auto ms = messages(sim);
  // rank 2 gets A(0,0) from rank 3, not from its owner
  EXPECT_EQ(find(ms, 0, 2).from, -1);
  // the owner's sends one after the other, in step order; the forward once rank 3 has the data
  expect_in_turn(ms, {{0, 4}, {0, 3}, {0, 1}});
  expect_in_turn(ms, {{0, 3}, {3, 2}});
  // who sends what (MpiRuntime): the bag's tree
  const Dag& dag = sim.dag();
  std::map<int, uint32_t> recv_of; // destination rank -> reception of A(0,0) version 1
  for (uint32_t r = 0; r < dag.receptions.size(); r++)
    if (dag.receptions[r].tile == 0 && dag.receptions[r].version == 1)
      recv_of[dag.receptions[r].dst] = r;
  ASSERT_EQ(recv_of.size(), 4u);
  EXPECT_EQ(sim.mpi().sender(recv_of[2]), 3);
  EXPECT_EQ(sim.mpi().first_forward(recv_of[3]), recv_of[2]);
  EXPECT_EQ(sim.mpi().next_send(recv_of[4]), recv_of[3]);
  EXPECT_EQ(sim.mpi().next_send(recv_of[3]), recv_of[1]);
  EXPECT_EQ(sim.mpi().next_send(recv_of[1]), kNone);
}

TEST(NmadMulticast, ChainForwardsAlongTheBagsOrder) {
  sg4::Engine e(&argc_, argv_);
  Simulation sim(e, config("tiny5.xml", 3, kBcast5, R"({"backend": "nmad", "tree": "chain"})"));
  sim.run();
  // ranks in the bag's order: 1, 3, 2, 4
  expect_in_turn(messages(sim), {{0, 1}, {1, 3}, {3, 2}, {2, 4}});
}

TEST(MpiBackend, OwnerSendsEveryCopyAtOnce) {
  sg4::Engine e(&argc_, argv_);
  Simulation sim(e, config("tiny5.xml", 3, kBcast5, R"({"backend": "mpi"})"));
  sim.run();
  const auto ms = messages(sim);
  const double t0 = find(ms, 0, 1).start;
  for (int to = 1; to <= 4; to++) {
    const Message& m = find(ms, 0, to);
    ASSERT_EQ(m.from, 0) << to;
    EXPECT_EQ(m.start, t0) << to; // one bag, acquired once, handed to the thread together
  }
  for (const auto& m : ms)
    EXPECT_TRUE(m.from == 0 || m.to == 0) << m.from << " -> " << m.to; // nobody forwards
}

// Where StarPU 1.4.10 receives a tile (mpi/src/starpu_mpi.c _starpu_mpi_choose_node, receiving
// branch; numasim: MpiRuntime::reception_node) on tiny2 (two nodes of two NUMA nodes, one RAM
// memory node each with STARPU_USE_NUMA=1), CPU workers only: a tile the rank does not own has no
// home node and no buffer before its reception, so it goes to the RAM node with the most memory
// available, global_size (0.9 x the NUMA node's memory) minus what StarPU allocated there, ties to
// the node numbered first. Every buffer of a rank whose main thread is not simulated is chosen and
// allocated at the submission of the whole graph, in submission order, before any copy: so
// (receptions of one rank in order) the node with more room takes them until the other has as much.
static const uint64_t kTileBytes = 96 * 96 * 8; // b = 96

// tiny2.xml with every node's NUMA 0 and NUMA 1 memory set to m0 and m1 bytes.
static std::string numa_memories(double m0, double m1, const std::string& name) {
  std::ifstream in(kData + "tiny2.xml");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string xml = ss.str();
  for (int numa : {0, 1}) {
    const std::string from =
        R"(<prop id="numa" value=")" + std::to_string(numa) + R"("/><prop id="memory" value="68719476736"/>)";
    char to[128];
    std::snprintf(to, sizeof to, R"(<prop id="numa" value="%d"/><prop id="memory" value="%.0f"/>)", numa,
                  numa ? m1 : m0);
    for (size_t at = xml.find(from); at != std::string::npos; at = xml.find(from, at))
      xml.replace(at, from.size(), to);
  }
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << xml;
  return path;
}

// Per destination rank, the local RAM node of each of its receptions, in submission order.
static std::map<int, std::vector<int>> landing_nodes(const std::string& platform,
                                                     const std::string& memory_node) {
  std::string text = R"({"platform": ")" + platform + R"(", "perfmodels": {"tiny": ")" + kData +
                     R"(tiny_sampling"}, "workload": {"kind": "lu", "n": 768, "b": 96, "distribution":
                     {"kind": "block-cyclic", "p": 1, "q": 2}}, "seed": 3, "variability": false,
                     "env": {"STARPU_USE_NUMA": "1", "STARPU_NCUDA": "0", "STARPU_SCHED": "dmdas"},
                     "mpi": {"memory_node": ")" +
                     memory_node + R"("}})";
  RunConfig cfg = RunConfig::from_json(parse_json(text, "test.json"), "test.json");
  cfg.transfers = "unused.csv";
  sg4::Engine e(&argc_, argv_);
  Simulation sim(e, cfg);
  Summary s = sim.run();
  EXPECT_EQ(s.tasks, sim.dag().tasks.size());
  std::map<int, std::vector<int>> nodes;
  for (uint32_t r = 0; r < sim.dag().receptions.size(); r++)
    nodes[sim.dag().receptions[r].dst].push_back(sim.mpi().landing_node(r));
  // Each message landed where its reception was posted (the transfer log's destination host).
  std::map<int, int> landed; // global memory node -> messages
  for (const auto& t : sim.transfer_log())
    if (sim.memnodes()[t.gsrc].rank != sim.memnodes()[t.gdst].rank)
      landed[t.gdst]++;
  std::map<int, int> posted;
  for (uint32_t r = 0; r < sim.dag().receptions.size(); r++)
    for (size_t g = 0; g < sim.memnodes().size(); g++)
      if (sim.memnodes()[g].rank == sim.dag().receptions[r].dst && !sim.memnodes()[g].gpu &&
          sim.memnodes()[g].local == sim.mpi().landing_node(r))
        posted[static_cast<int>(g)]++;
  EXPECT_EQ(landed, posted);
  return nodes;
}

TEST(ReceptionNode, StudyEraStarpuMpiReceivesOnMainRam) {
  for (const auto& [rank, nodes] : landing_nodes(kData + "tiny2.xml", "main_ram"))
    for (int n : nodes)
      EXPECT_EQ(n, 0) << "rank " << rank;
}

TEST(ReceptionNode, Starpu1410AlternatesBetweenEqualNumaNodes) {
  // Equal nodes: a tie keeps node 0, whose reception then leaves node 1 ahead, and so on.
  const auto nodes = landing_nodes(kData + "tiny2.xml", "choose_node");
  ASSERT_EQ(nodes.size(), 2u);
  for (const auto& [rank, seq] : nodes) {
    ASSERT_GE(seq.size(), 4u) << rank;
    for (size_t i = 0; i < seq.size(); i++)
      EXPECT_EQ(seq[i], static_cast<int>(i % 2)) << "rank " << rank << ", reception " << i;
  }
}

TEST(ReceptionNode, Starpu1410FillsTheRoomierNodeFirst) {
  // NUMA 1 has 3.5 tiles more than NUMA 0 after StarPU's 0.9 factor: it takes the first four
  // receptions (3.5, 2.5, 1.5, 0.5 tiles ahead), then the nodes alternate from node 0.
  const double m0 = 1e9, m1 = m0 + 3.5 * kTileBytes / 0.9;
  const auto nodes = landing_nodes(numa_memories(m0, m1, "roomier1.xml"), "choose_node");
  for (const auto& [rank, seq] : nodes) {
    ASSERT_GE(seq.size(), 6u) << rank;
    for (size_t i = 0; i < seq.size(); i++)
      EXPECT_EQ(seq[i], i < 4 ? 1 : static_cast<int>((i - 4) % 2 == 0 ? 0 : 1))
          << "rank " << rank << ", " << i;
  }
}

// starpu_memory_get_available is -1 for a node of size 0 (unknown), and a node must hold the
// tile's allocation size: with NUMA 1 unknown, or smaller than a tile, all goes to STARPU_MAIN_RAM.
TEST(ReceptionNode, Starpu1410SkipsANodeOfUnknownSize) {
  for (const auto& [rank, seq] : landing_nodes(numa_memories(1e9, 0, "unknown1.xml"), "choose_node"))
    for (int n : seq)
      EXPECT_EQ(n, 0) << "rank " << rank;
}

TEST(ReceptionNode, Starpu1410SkipsANodeSmallerThanATile) {
  for (const auto& [rank, seq] :
       landing_nodes(numa_memories(1e9, 0.5 * kTileBytes / 0.9, "small1.xml"), "choose_node"))
    for (int n : seq)
      EXPECT_EQ(n, 0) << "rank " << rank;
}

TEST(ReceptionNode, RuleTakesTheFirstNodeHoldingABufferThenTheRoomiest) {
  const double t = kTileBytes;
  const std::vector<int> numbered{0, 1};
  // a tile already allocated on node 1 is received there, though node 0 has more room
  EXPECT_EQ(choose_reception_node(numbered, {false, true}, {10 * t, t}, t, 0), 1);
  // allocated on both: the node numbered first
  EXPECT_EQ(choose_reception_node(numbered, {true, true}, {t, 10 * t}, t, 0), 0);
  EXPECT_EQ(choose_reception_node({1, 0}, {true, true}, {t, 10 * t}, t, 0), 1);
  // allocated nowhere: the most room, the first of equals, none that cannot hold the tile
  EXPECT_EQ(choose_reception_node(numbered, {false, false}, {t, 2 * t}, t, 0), 1);
  EXPECT_EQ(choose_reception_node(numbered, {false, false}, {2 * t, 2 * t}, t, 0), 0);
  EXPECT_EQ(choose_reception_node({1, 0}, {false, false}, {2 * t, 2 * t}, t, 0), 1);
  EXPECT_EQ(choose_reception_node(numbered, {false, false}, {t / 2, -1}, t, 0), 0);
  EXPECT_EQ(choose_reception_node(numbered, {false, false}, {t / 2, t / 2}, t, 1), 1); // STARPU_MAIN_RAM
}

TEST(ReceptionNode, Starpu1410ReceivesWhereTheTileHasABuffer) {
  // After the run the rule is asked again for every reception, as for a second reception of the
  // tile: it answers the first RAM node holding a buffer of the tile, whatever the room left. On
  // a machine whose NUMA 1 has far more room, every reception lands on NUMA 1, and a tile that
  // NUMA 0's worker also read has a buffer on NUMA 0 too: asked again, it goes to NUMA 0.
  std::string text = R"({"platform": ")" + numa_memories(1e9, 2e9, "buffer1.xml") +
                     R"(", "perfmodels": {"tiny": ")" + kData +
                     R"(tiny_sampling"}, "workload": {"kind": "lu", "n": 768, "b": 96, "distribution":
                     {"kind": "block-cyclic", "p": 1, "q": 2}}, "seed": 3, "variability": false,
                     "env": {"STARPU_USE_NUMA": "1", "STARPU_NCUDA": "0", "STARPU_SCHED": "dmdas"},
                     "mpi": {"memory_node": "choose_node"}})";
  RunConfig cfg = RunConfig::from_json(parse_json(text, "test.json"), "test.json");
  sg4::Engine e(&argc_, argv_);
  Simulation sim(e, cfg);
  sim.run();
  const DataWizard& data = sim.data();
  size_t held_on_0 = 0;
  for (uint32_t r = 0; r < sim.dag().receptions.size(); r++) {
    const int rank = sim.dag().receptions[r].dst;
    const uint32_t h = data.handle(rank, sim.dag().receptions[r].tile);
    EXPECT_EQ(sim.mpi().landing_node(r), 1) << "reception " << r;
    ASSERT_TRUE(data.ram_allocated(h, 1)) << "reception " << r;
    ASSERT_GT(data.available(rank, 1), data.available(rank, 0));
    const int first = data.ram_allocated(h, 0) ? 0 : 1;
    EXPECT_EQ(sim.mpi().reception_node(r), first) << "reception " << r;
    held_on_0 += first == 0;
  }
  EXPECT_GT(held_on_0, 0u);
}

TEST(ReceptionNode, Starpu1410MainThreadPinsEachBufferOnTheNodeItChose) {
  // With pinned allocations (a GPU and its cudaHostAlloc cost) the main thread allocates each
  // reception's buffer while it submits (Simulation::main_thread), on the node the rule gives at
  // that moment, which counts what the workers allocated meanwhile: both NUMA nodes get some.
  std::ifstream in(kData + "tiny2.xml");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string xml = ss.str();
  const std::string gpu = R"(<prop id="kind" value="gpu"/>)";
  for (size_t at = xml.find(gpu); at != std::string::npos; at = xml.find(gpu, at + 1))
    xml.insert(at + gpu.size(), R"(<prop id="pinned_alloc_s_per_mib" value="0.00065"/>)");
  const std::string platform = ::testing::TempDir() + "pinned2.xml";
  std::ofstream(platform) << xml;
  std::string text = R"({"platform": ")" + platform + R"(", "perfmodels": {"tiny": ")" + kData +
                     R"(tiny_sampling"}, "workload": {"kind": "lu", "n": 768, "b": 96, "distribution":
                     {"kind": "block-cyclic", "p": 1, "q": 2}}, "seed": 3, "variability": false,
                     "env": {"STARPU_USE_NUMA": "1", "STARPU_SCHED": "dmdas"},
                     "mpi": {"memory_node": "choose_node"}})";
  RunConfig cfg = RunConfig::from_json(parse_json(text, "test.json"), "test.json");
  sg4::Engine e(&argc_, argv_);
  Simulation sim(e, cfg);
  Summary s = sim.run();
  EXPECT_EQ(s.tasks, sim.dag().tasks.size());
  EXPECT_EQ(s.runtime_costs.at("pinned_allocs_main"), static_cast<double>(sim.dag().receptions.size()));
  std::set<int> nodes;
  for (uint32_t r = 0; r < sim.dag().receptions.size(); r++)
    nodes.insert(sim.mpi().landing_node(r));
  EXPECT_EQ(nodes, (std::set<int>{0, 1}));
}
