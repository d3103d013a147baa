// The flows numasim starts between two hosts of the platform: copies and their legs, DMA, MPI
// legs, kernels' memory traffic (docs/network-model.md "Flows alone on their route").
//
// A flow alone on every link of its route gets from SimGrid's max-min what the route gives one
// flow: after its latency phase (the route's latency times the latency factor) it moves at the
// narrowest link's bandwidth, bounded by TCP-gamma / (2 x the route's latency), times the
// bandwidth factor (SimGrid 3.32 src/surf/network_cm02.cpp NetworkCm02Model::communicate,
// comm_action_set_bounds, comm_action_set_variable; Action::get_rate), and its end date follows.
// Such a flow is computed here, without a SimGrid activity, for as long as it stays alone: the
// moment another flow starts on one of its links, it is taken back into SimGrid as a flow with
// what it has left (the rest of its latency phase, or its remaining bytes with no latency phase
// and the route's sharing penalty, which CM02 would have given it by then), so that max-min
// shares the links from that date on as if it had been SimGrid's from its start. A flow that is
// not alone when it starts is SimGrid's. At study scale 43 % of the flows start alone
// (bench/RESULTS.md); each spares SimGrid an activity and the max-min solves of its events.
//
// Exact only under numasim's network model (CM02, LV08's factors on Ethernet routes, no
// cross-traffic, no weight-S): under another model (--cfg=network/model:...) or with
// --cfg=numasim/lone-flows:no every flow is SimGrid's.
#pragma once
#include <simgrid/s4u.hpp>

#include <cstdint>

namespace numasim {
namespace sg4 = simgrid::s4u;

using FlowId = uint32_t;

// Starts a flow of `bytes` from src to dst (whole bytes: the fraction is dropped, as from a SimGrid
// comm's size). shares > 1: it counts as that many equal flows
// started together (network.hpp weigh_as_flows; only on a route flows_merge accepts).
FlowId start_flow(sg4::Host* src, sg4::Host* dst, double bytes, int shares = 1);
// The calling actor waits for the flow's end; the id is free afterwards.
void wait_flow(FlowId f);
// Ends the flow now, wherever it is (nobody waits for it: a load the microbenchmarks stop).
void cancel_flow(FlowId f);
inline void run_flow(sg4::Host* src, sg4::Host* dst, double bytes, int shares = 1) {
  wait_flow(start_flow(src, dst, bytes, shares));
}

struct FlowCounts {
  uint64_t alone = 0;      // started alone on their route
  uint64_t simgrid = 0;    // started as SimGrid flows
  uint64_t taken_back = 0; // started alone, then taken back into SimGrid
};
FlowCounts flow_counts();

// Forgets the flows of an earlier engine (a new Simulation starts clean) and reads the options.
void reset_flows();

} // namespace numasim
