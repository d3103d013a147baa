#include "flows.hpp"
#include "network.hpp"
#include "sleep.hpp"

#include <simgrid/kernel/resource/Action.hpp>
#include <simgrid/kernel/resource/Model.hpp>
#include <xbt/config.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <unordered_map>
#include <utility>
#include <vector>

XBT_LOG_NEW_DEFAULT_SUBCATEGORY(numasim_flows, numasim, "numasim flows, alone on their route or SimGrid's");

namespace numasim {

namespace {

simgrid::config::Flag<bool> cfg_lone_flows{"numasim/lone-flows",
                                           "Compute a flow alone on its route without SimGrid until another "
                                           "flow starts on one of its links (flows.hpp)",
                                           true};

struct Route {
  sg4::Host* src = nullptr;
  sg4::Host* dst = nullptr;
  std::vector<int> links; // the route's links that a flow shares (not FATPIPE), numasim's ids
  double latency = 0;     // the route's latency, as SimGrid sums it
  double latency_factor = 1;
  double rate = 0; // a lone flow's rate after its latency phase (B/s)
  bool may_run_alone = false;
};

struct Flow {
  int route = -1;
  double bytes = 0;
  int shares = 1;
  // Alone: when its latency phase ends and when it ends.
  double lat_end = 0;
  double end = 0;
  // SimGrid's: the comm, and the date at which its waiter gives it its shares' penalty (< 0: none).
  sg4::CommPtr comm;
  double penalty_at = -1;
  sg4::Actor* sleeper = nullptr; // the actor sleeping in wait_flow until `end`
};

struct LinkUse {
  uint32_t simgrid = 0; // SimGrid flows numasim started on it, not yet waited for
  int64_t alone = -1;   // the flow alone on it
};

class Flows {
public:
  void reset() {
    routes_.clear();
    route_of_.clear();
    link_id_.clear();
    links_.clear();
    flows_.clear();
    free_.clear();
    counts_ = {};
    precision_ = simgrid::config::get_value<double>("surf/precision");
    gamma_ = simgrid::config::get_value<double>("network/TCP-gamma");
    exact_ = cfg_lone_flows && simgrid::config::get_value<double>("network/weight-S") == 0 &&
             !simgrid::config::get_value<bool>("network/crosstraffic");
  }

  FlowId start(sg4::Host* src, sg4::Host* dst, double bytes, int shares) {
    const int r = route(src, dst);
    const FlowId id = allocate();
    Flow& f = flows_[id];
    f.route = r;
    f.bytes = std::trunc(bytes); // whole bytes, as a SimGrid comm's (Comm::sendto_async, uint64_t)
    f.shares = shares;
    const double now = sg4::Engine::get_clock();
    const Route& rt = routes_[r];
    if (rt.may_run_alone && bytes > 0 && free_route(r, now)) {
      f.lat_end = now + rt.latency * rt.latency_factor;
      f.end = f.lat_end + bytes / rt.rate;
      for (int l : rt.links)
        links_[l].alone = id;
      counts_.alone++;
      return id;
    }
    take_back_on(r, now);
    start_in_simgrid(id, bytes, -1);
    counts_.simgrid++;
    return id;
  }

  void wait(FlowId id) {
    for (;;) {
      const double now = sg4::Engine::get_clock();
      Flow& f = flows_[id];
      if (f.comm) {
        if (f.penalty_at >= 0) {
          if (f.penalty_at - now >= precision_) {
            numasim::sleep_for(f.penalty_at - now);
            continue;
          }
          Flow& g = flows_[id];
          g.penalty_at = -1;
          weigh_as_flows(g.comm, routes_[g.route].latency, g.shares);
        }
        sg4::CommPtr comm = flows_[id].comm; // flows_ may move while the actor waits
        comm->wait();
        for (int l : routes_[flows_[id].route].links)
          links_[l].simgrid--;
        release(id);
        return;
      }
      if (f.end - now < precision_) { // below SimGrid's precision a sleep would be rounded up: ended
        clear_alone(id);
        release(id);
        return;
      }
      f.sleeper = sg4::Actor::self();
      numasim::sleep_for(f.end - now);
      flows_[id].sleeper = nullptr;
    }
  }

  void cancel(FlowId id) {
    Flow& f = flows_[id];
    if (f.comm) {
      sg4::CommPtr comm = f.comm;
      for (int l : routes_[f.route].links)
        links_[l].simgrid--;
      release(id);
      comm->cancel();
      return;
    }
    clear_alone(id);
    release(id);
  }

  FlowCounts counts() const { return counts_; }

private:
  std::vector<Route> routes_;
  struct HostPairHash {
    size_t operator()(const std::pair<const sg4::Host*, const sg4::Host*>& p) const {
      return std::hash<const void*>()(p.first) * 31 + std::hash<const void*>()(p.second);
    }
  };
  // Asked at every flow's start: hashed, not ordered.
  std::unordered_map<std::pair<const sg4::Host*, const sg4::Host*>, int, HostPairHash> route_of_;
  std::unordered_map<const sg4::Link*, int> link_id_;
  std::vector<LinkUse> links_;
  std::vector<Flow> flows_;
  std::vector<FlowId> free_;
  FlowCounts counts_;
  double precision_ = 1e-9;
  double gamma_ = 0;
  bool exact_ = false;

  int route(sg4::Host* src, sg4::Host* dst) {
    auto [it, added] = route_of_.try_emplace({src, dst}, static_cast<int>(routes_.size()));
    if (!added)
      return it->second;
    Route rt;
    rt.src = src;
    rt.dst = dst;
    std::vector<sg4::Link*> links;
    src->route_to(dst, links, &rt.latency);
    double bw = std::numeric_limits<double>::infinity();
    bool wifi = false;
    for (auto* l : links) {
      const auto policy = l->get_sharing_policy();
      wifi = wifi || policy == sg4::Link::SharingPolicy::WIFI;
      bw = std::min(bw, l->get_bandwidth());
      if (policy == sg4::Link::SharingPolicy::FATPIPE)
        continue; // a FATPIPE link bounds each flow alone: it couples no flows
      auto [lit, fresh] = link_id_.try_emplace(l, static_cast<int>(links_.size()));
      if (fresh)
        links_.emplace_back();
      rt.links.push_back(lit->second);
    }
    // What one flow gets (comm_action_set_bounds and comm_action_set_variable: the narrowest link,
    // TCP-gamma / (2 latency) on a route with a latency; Action::get_rate: times the bandwidth
    // factor), with numasim's factors (network.cpp install_ethernet_factors).
    if (rt.latency > 0 && gamma_ > 0)
      bw = std::min(bw, gamma_ / (2.0 * rt.latency));
    const bool eth = crosses_ethernet(links);
    rt.latency_factor = eth ? kLv08LatencyFactor : 1.0;
    rt.rate = bw * (eth ? kLv08BandwidthFactor : 1.0);
    rt.may_run_alone =
        exact_ && own_network_model() && !links.empty() && !wifi && std::isfinite(rt.rate) && rt.rate > 0;
    routes_.push_back(std::move(rt));
    return it->second;
  }

  FlowId allocate() {
    if (!free_.empty()) {
      FlowId id = free_.back();
      free_.pop_back();
      return id;
    }
    flows_.emplace_back();
    return static_cast<FlowId>(flows_.size() - 1);
  }

  void release(FlowId id) {
    flows_[id] = Flow{};
    free_.push_back(id);
  }

  bool ended(const Flow& f, double now) const { return f.end - now < precision_; }

  // No SimGrid flow on any of the route's links, and no flow alone there that has not ended.
  bool free_route(int r, double now) {
    for (int l : routes_[r].links) {
      const LinkUse& u = links_[l];
      if (u.simgrid > 0)
        return false;
      if (u.alone >= 0 && !ended(flows_[u.alone], now))
        return false;
    }
    return true;
  }

  void clear_alone(FlowId id) {
    for (int l : routes_[flows_[id].route].links)
      if (links_[l].alone == static_cast<int64_t>(id))
        links_[l].alone = -1;
  }

  void take_back_on(int r, double now) {
    for (int l : routes_[r].links) {
      const int64_t a = links_[l].alone;
      if (a < 0)
        continue;
      if (ended(flows_[a], now))
        clear_alone(static_cast<FlowId>(a)); // its waiter has not come yet: it ended by itself
      else
        take_back(static_cast<FlowId>(a), now);
    }
  }

  // From now on the flow is SimGrid's, with what it has left: in its latency phase, the rest of it
  // (a latency factor of what is left over the route's latency) and all its bytes; after it, the
  // bytes it has not moved, no latency phase (factor 0), and the penalty CM02 gave it when its
  // latency phase ended (the route's latency, a share's for several, network.hpp weigh_as_flows;
  // 1 on a route without latency, comm_action_set_variable).
  void take_back(FlowId id, double now) {
    clear_alone(id);
    counts_.taken_back++;
    Flow& f = flows_[id];
    const Route& rt = routes_[f.route];
    if (now < f.lat_end)
      start_in_simgrid(id, f.bytes, (f.lat_end - now) / rt.latency);
    else
      start_in_simgrid(id, (f.end - now) * rt.rate, 0.0);
    if (sg4::Actor* s = flows_[id].sleeper) {
      flows_[id].sleeper = nullptr;
      numasim::interrupt_sleep(s);
    }
  }

  // latency_factor < 0: the route's own.
  void start_in_simgrid(FlowId id, double bytes, double latency_factor) {
    for (int l : routes_[flows_[id].route].links)
      links_[l].simgrid++; // before the simcall below: actors that run meanwhile see the flow
    const Route& rt = routes_[flows_[id].route];
    const auto size = static_cast<uint64_t>(std::llround(std::max(bytes, 1.0)));
    announce_latency_factor(rt.src, rt.dst, size, latency_factor);
    sg4::CommPtr comm = sg4::Comm::sendto_async(rt.src, rt.dst, size);
    Flow& f = flows_[id];
    f.comm = std::move(comm);
    const Route& r = routes_[f.route];
    if (latency_factor == 0) { // no latency phase: SimGrid gave it a penalty of 1
      if (r.latency > 0)
        set_sharing_penalty(f.comm, r.latency / f.shares);
    } else if (f.shares > 1) { // the shares' penalty when its latency phase ends
      f.penalty_at =
          sg4::Engine::get_clock() + r.latency * (latency_factor < 0 ? r.latency_factor : latency_factor);
    }
  }
};

Flows& flows() {
  static Flows f;
  return f;
}

} // namespace

FlowId start_flow(sg4::Host* src, sg4::Host* dst, double bytes, int shares) {
  return flows().start(src, dst, bytes, shares);
}

void wait_flow(FlowId f) {
  flows().wait(f);
}

void cancel_flow(FlowId f) {
  flows().cancel(f);
}

FlowCounts flow_counts() {
  return flows().counts();
}

void reset_flows() {
  flows().reset();
}

} // namespace numasim
