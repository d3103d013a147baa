// numasim's SimGrid network model (docs/network-model.md).
//
// SimGrid's default model, LV08, multiplies every flow's latency by 13.01 and its bandwidth by
// 0.97 and weighs bottleneck sharing by RTT (weight-S = 20537): corrections fitted on TCP flows
// over wide-area and cluster Ethernet links (Velho & Legrand, SIMUTools 2009). numasim's
// platforms also route memory-bus, PCIe and inter-socket copies through SimGrid links, where
// those TCP corrections mean nothing. So numasim runs SimGrid's CM02 model (the same max-min
// sharing without corrective factors) and applies LV08's two factors, through the per-flow
// factor callbacks of SimGrid's NetworkModelIntf, only to flows whose route crosses an Ethernet
// link (link class `eth`).
#pragma once
#include <simgrid/s4u.hpp>

#include <utility>
#include <vector>

namespace numasim {
namespace sg4 = simgrid::s4u;

// LV08's corrections, SimGrid 3.32 src/surf/network_cm02.cpp surf_network_model_init_LegrandVelho:
//   set_default<double>("network/latency-factor", 13.01);
//   set_default<double>("network/bandwidth-factor", 0.97);
constexpr double kLv08LatencyFactor = 13.01;
constexpr double kLv08BandwidthFactor = 0.97;

// Before the platform is loaded: selects CM02 and turns SimGrid's cross-traffic off
// (network/crosstraffic adds 5 % of every flow's rate on the reverse route, modelling TCP acks,
// which contradicts full-duplex links), unless the command line (--cfg=network/model:...) chose a
// model. Returns true when numasim's model was selected (then call install_ethernet_factors).
bool configure_network_model();

// After the platform is loaded: installs the bandwidth and latency factor callbacks (SimGrid
// 3.32 include/simgrid/kernel/resource/NetworkModelIntf.hpp set_bw_factor_cb/set_lat_factor_cb;
// src/surf/network_cm02.cpp comm_action_set_bounds calls them with the flow's route).
void install_ethernet_factors(sg4::Engine& engine);

// True when one of the links is an Ethernet link (class `eth`, either direction of a split-duplex one).
bool crosses_ethernet(const std::vector<sg4::Link*>& links);

// The route from a to b: its latency (s) and its narrowest link's bandwidth (B/s, infinite for
// an empty route), i.e. what one flow alone on it gets.
std::pair<double, double> route_latency_bandwidth(const sg4::Host* a, const sg4::Host* b);

} // namespace numasim
