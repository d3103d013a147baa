// numasim::weigh_as_flows (src/network.hpp): one flow with the shares of n equal flows started
// together on its route must move as the n flows do, against flows of other latencies that
// saturate links of its route with it, started before it, with it and after its latency phase.
// The n flows run in a child process (SimGrid allows one engine per process).
#include "child_output.hpp"
#include "network.hpp"
#include "sleep.hpp"

#include <simgrid/s4u.hpp>

#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

namespace sg4 = simgrid::s4u;

static const std::string kData = std::string(NUMASIM_SOURCE_ROOT) + "/simulator/tests/data/";

// End dates (%.17g), one line per flow group: the split DMA (its last flow's end), then the others.
static std::string split_dma_scenario(int n, bool merged, const char* optim) {
  int argc = 3;
  char arg0[] = "numasim_tests";
  char quiet[] = "--log=root.thresh:warning";
  std::string optim_arg = std::string("--cfg=network/optim:") + optim;
  char* argv[] = {arg0, quiet, optim_arg.data(), nullptr};
  sg4::Engine e(&argc, argv);
  const bool own = numasim::configure_network_model();
  e.load_platform(kData + "tiny2.xml");
  if (own)
    numasim::install_ethernet_factors(e);
  sg4::Host* ram1 = e.host_by_name("n1.ram1");
  sg4::Host* gpu0 = e.host_by_name("n1.gpu0");
  std::vector<double> ends(4, -1);
  const uint64_t bytes = 600'000'000;
  // The DMA: NUMA 1's RAM -> GPU 0 (membus1, qpi, pcie0: 10 GB/s, 10.18 us), at 1 ms.
  sg4::Actor::create("dma", ram1, [&] {
    numasim::sleep_for(1e-3);
    if (merged) {
      ASSERT_TRUE(numasim::flows_merge(ram1, gpu0));
      sg4::CommPtr one = sg4::Comm::sendto_async(ram1, gpu0, bytes);
      numasim::sleep_for(numasim::route_latency_bandwidth(ram1, gpu0).first);
      numasim::weigh_as_flows(one, numasim::route_latency_bandwidth(ram1, gpu0).first, n);
      one->wait();
    } else {
      std::vector<sg4::CommPtr> parts;
      for (int i = 0; i < n; i++)
        parts.push_back(
            sg4::Comm::sendto_async(ram1, gpu0, i + 1 < n ? bytes / n : bytes - bytes / n * (n - 1)));
      for (auto& c : parts)
        c->wait();
    }
    ends[0] = sg4::Engine::get_clock();
  });
  // Cores streaming from NUMA 1 (membus1 at 40 GB/s saturated with the DMA; other latencies):
  // one from the start, one with the DMA, one after its latency phase, across qpi.
  auto stream = [&](const char* host, double at, uint64_t size, int slot) {
    sg4::Actor::create(std::string("stream") + std::to_string(slot), e.host_by_name(host),
                       [&, host, at, size, slot] {
                         numasim::sleep_for(at);
                         sg4::Comm::sendto(ram1, e.host_by_name(host), size);
                         ends[slot] = sg4::Engine::get_clock();
                       });
  };
  stream("n1.cpu2", 0, 900'000'000, 1);
  stream("n1.cpu3", 1e-3, 500'000'000, 2);
  stream("n1.cpu0", 1e-3 + 5e-5, 700'000'000, 3);
  e.run();
  std::ostringstream out;
  out.precision(17);
  for (double d : ends)
    out << d << '\n';
  return out.str();
}

static void expect_same_dates(int n, const char* optim, std::vector<double>* split_out = nullptr) {
  ChildOutput child = run_in_child([n, optim] { return split_dma_scenario(n, false, optim); });
  ASSERT_TRUE(child.ok) << "the run with " << n << " flows failed";
  const std::vector<double> split = numbers_of(child.text);
  const std::vector<double> merged = numbers_of(split_dma_scenario(n, true, optim));
  ASSERT_EQ(split.size(), 4u);
  ASSERT_EQ(merged.size(), 4u);
  for (size_t i = 0; i < split.size(); i++)
    EXPECT_NEAR(merged[i], split[i], 1e-9 * split[i]) << "flow group " << i << " (" << optim << ")";
  if (split_out)
    *split_out = split;
}

TEST(Network, OneFlowWithTheSharesOfSixteenMovesAsTheSixteenLazy) {
  // Children first: this process's engine comes last.
  ChildOutput one = run_in_child([] { return split_dma_scenario(1, false, "Lazy"); });
  ASSERT_TRUE(one.ok);
  std::vector<double> sixteen;
  expect_same_dates(16, "Lazy", &sixteen);
  ASSERT_EQ(sixteen.size(), 4u);
  // The scenario exercises what it claims: the streams slow the DMA down, and the DMA's sixteen
  // shares make it faster than one flow of one share (which the merged flow would be without them).
  const std::vector<double> single = numbers_of(one.text);
  ASSERT_EQ(single.size(), 4u);
  EXPECT_GT(sixteen[0], 1e-3 + 10.18e-6 + 600e6 / 10e9 * 1.01);
  EXPECT_GT(single[0], sixteen[0] * 1.03); // 0.1081 s against 0.1034 s
  EXPECT_GT(sixteen[3], single[3] * 1.05); // the stream across qpi: 0.0643 s against 0.0592 s
}

TEST(Network, OneFlowWithTheSharesOfSixteenMovesAsTheSixteenFull) {
  expect_same_dates(16, "Full");
}

TEST(Network, OneFlowWithOneShareMovesAsOneFlow) {
  expect_same_dates(1, "Lazy");
}
