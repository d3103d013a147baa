// StarPU-MPI's cooperative sends (mpi/starpu_mpi_coop_sends.hpp) and how each backend sends a bag
// (mpi/starpu_mpi.hpp): StarPU's MPI backend from the owner, NewMadeleine's multicast along a tree
// (mpi/starpu_mpi_nmad_coop.hpp). One simulation per test: ctest runs each test in its own process.
#include "error.hpp"
#include "mpi/starpu_mpi_coop_sends.hpp"
#include "mpi/starpu_mpi_nmad_coop.hpp"
#include "runtime.hpp"

#include <gtest/gtest.h>

#include <map>
#include <set>

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
