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

#include <cstdint>
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

// n equal flows started together from a to b as one flow with their bandwidth shares. SimGrid's
// max-min gives each flow of a saturated link a rate inversely proportional to its sharing penalty
// (CM02 without weight-S: the route's latency, src/surf/network_cm02.cpp
// NetworkCm02Model::communicate), so n equal flows started together on one route keep equal rates
// and move like one flow of a n-th of their penalty, which SimGrid solves with one variable
// instead of n. flows_merge(a, b) says whether that is exact on the route: where none of the n
// flows could have gone faster than the merged one may (the bound of each, comm_action_set_bounds:
// the route's narrowest link, which all share unless it is a FATPIPE, and TCP-gamma /
// (2 latency), moved by the latency factor of Ethernet routes), with numasim's network model, and
// on a route with a latency (below).
bool flows_merge(const sg4::Host* a, const sg4::Host* b);
// Gives `comm`, a flow of a route flows_merge accepts, the shares of n flows. To be called when
// its latency phase ends, at its start + the route's `latency`: SimGrid gives the flow its
// penalty then (update_actions_state_lazy, from a member of the network action that the public
// API does not reach) and a flow shares nothing before (penalty 0), so that setting it at that
// date, before the next solve, is as if the flow had started with it.
void weigh_as_flows(const sg4::CommPtr& comm, double latency, int n);
// Sets `comm`'s sharing penalty (its max-min weight's inverse) now, through its model action's
// public Action::set_sharing_penalty: weigh_as_flows, and a flow started without latency phase,
// to which CM02 gives a penalty of 1 (flows.cpp).
void set_sharing_penalty(const sg4::CommPtr& comm, double penalty);

// Whether numasim's model (configure_network_model, install_ethernet_factors) runs.
bool own_network_model();

// The next flow numasim starts from src to dst with `bytes` gets the latency factor `factor`
// (< 0: its route's own; 0: no latency phase) instead of its route's. To be called right before
// that flow's start, with no simcall in between, for every flow numasim starts (flows.cpp): the
// factor callback, which SimGrid's kernel runs when it handles the start (after the actor yields,
// in the order the actors yielded), takes the announcements in order and checks that the flow is
// the announced one.
void announce_latency_factor(const sg4::Host* src, const sg4::Host* dst, uint64_t bytes, double factor);

} // namespace numasim
