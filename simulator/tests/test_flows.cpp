// numasim's flows (src/flows.hpp): a flow computed alone on its route and taken back into SimGrid
// when another flow starts on one of its links must end when the same flows, all SimGrid's
// (--cfg=numasim/lone-flows:no), end: taken back after its latency phase, during it (an Ethernet
// route, with LV08's latency factor), with the shares of 16 flows, and one that ended before
// anybody waited for it. Each mode runs in its own process (SimGrid allows one engine per process).
#include "child_output.hpp"
#include "flows.hpp"
#include "network.hpp"
#include "sleep.hpp"

#include <simgrid/s4u.hpp>

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

namespace sg4 = simgrid::s4u;

static const std::string kData = std::string(NUMASIM_SOURCE_ROOT) + "/simulator/tests/data/";

struct Started {
  const char* src;
  const char* dst;
  double at;
  double bytes;
  int shares;
  double wait_at; // the waiter comes then (0: at once)
};

// End dates (%.17g), one per flow, then the counts: alone, taken back, SimGrid's.
static std::string scenario(bool lone) {
  int argc = 3;
  char arg0[] = "numasim_tests";
  char quiet[] = "--log=root.thresh:warning";
  std::string mode = std::string("--cfg=numasim/lone-flows:") + (lone ? "yes" : "no");
  char* argv[] = {arg0, quiet, mode.data(), nullptr};
  sg4::Engine e(&argc, argv);
  const bool own = numasim::configure_network_model();
  e.load_platform(kData + "tiny2.xml");
  if (own)
    numasim::install_ethernet_factors(e);
  numasim::reset_flows();
  const std::vector<Started> flows = {
      // alone, then taken back after its latency phase by the next one, which takes most of qpi
      {"n1.ram1", "n1.gpu0", 0, 600e6, 1, 0},
      {"n1.ram1", "n1.cpu0", 1e-3, 900e6, 1, 0},
      // alone, taken back 20 ns into its 90 ns latency phase (membus0)
      {"n1.ram0", "n1.cpu1", 2e-3, 500e6, 1, 0},
      {"n1.ram0", "n1.nic0", 2e-3 + 20e-9, 200e6, 1, 0},
      // Ethernet (latency x 13.01, bandwidth x 0.97): taken back 0.5 ms into its 1.31 ms latency phase
      {"n1.nic0", "n2.nic0", 3e-3, 100e6, 1, 0},
      {"n1.nic0", "n2.nic0", 3.5e-3, 50e6, 1, 0},
      // the shares of 16 flows: alone then taken back; then SimGrid's from its start
      {"n2.ram1", "n2.gpu0", 10e-3, 600e6, 16, 0},
      {"n2.ram1", "n2.cpu0", 20e-3, 800e6, 1, 0},
      {"n2.ram1", "n2.gpu0", 30e-3, 300e6, 16, 0},
      // ended alone before its waiter comes; the next one on its links is alone
      {"n2.ram0", "n2.cpu0", 0, 1e6, 1, 50e-3},
      {"n2.ram0", "n2.cpu1", 1e-3, 1e6, 1, 0},
  };
  std::vector<double> ends(flows.size(), -1);
  for (size_t i = 0; i < flows.size(); i++)
    sg4::Actor::create("f" + std::to_string(i), e.host_by_name(flows[i].src), [&, i] {
      const Started& s = flows[i];
      numasim::sleep_for(s.at);
      const numasim::FlowId id =
          numasim::start_flow(e.host_by_name(s.src), e.host_by_name(s.dst), s.bytes, s.shares);
      if (s.wait_at > 0)
        numasim::sleep_for(s.wait_at - sg4::Engine::get_clock());
      numasim::wait_flow(id);
      ends[i] = sg4::Engine::get_clock();
    });
  e.run();
  std::ostringstream out;
  out.precision(17);
  for (double d : ends)
    out << d << '\n';
  const numasim::FlowCounts c = numasim::flow_counts();
  out << c.alone << '\n' << c.taken_back << '\n' << c.simgrid << '\n';
  return out.str();
}

TEST(Flows, AloneOrTakenBackTheyEndAsSimGridsFlows) {
  ChildOutput simgrid = run_in_child([] { return scenario(false); });
  ChildOutput lone = run_in_child([] { return scenario(true); });
  ASSERT_TRUE(simgrid.ok && lone.ok);
  const std::vector<double> a = numbers_of(simgrid.text), b = numbers_of(lone.text);
  ASSERT_EQ(a.size(), 14u);
  ASSERT_EQ(b.size(), 14u);
  for (size_t i = 0; i < 11; i++) {
    EXPECT_GT(a[i], 0) << "flow " << i;
    EXPECT_NEAR(b[i], a[i], 1e-9 * a[i]) << "flow " << i;
  }
  // All SimGrid's without lone flows; with them, what the scenario is built to exercise.
  EXPECT_EQ(a[11], 0);
  EXPECT_EQ(a[12], 0);
  EXPECT_EQ(a[13], 11);
  EXPECT_EQ(b[11], 6); // 0, 2, 4, 6, 9 and 10 alone when they start
  EXPECT_EQ(b[12], 4); // 0, 2, 4 and 6 taken back
  EXPECT_EQ(b[13], 5); // 1, 3, 5, 7 and 8 SimGrid's
  // The scenario shares links: the flows taken back end later than alone.
  EXPECT_GT(a[0], 600e6 / 10e9 * 1.05);
  EXPECT_GT(a[6], 10e-3 + 600e6 / 10e9 * 1.01);
}
