#include "network.hpp"
#include "platform.hpp"

#include <deque>
#include <limits>
#include <map>
#include <simgrid/kernel/resource/Action.hpp>
#include <simgrid/kernel/resource/Model.hpp>
#include <simgrid/kernel/resource/NetworkModelIntf.hpp>
#include <stdexcept>

#include <unordered_set>
#include <xbt/config.hpp>

XBT_LOG_NEW_DEFAULT_SUBCATEGORY(numasim_network, numasim, "numasim network model");

namespace numasim {

namespace {
bool own_model_installed = false; // numasim's CM02 with LV08's factors on Ethernet only
// flows_merge's answer per route, asked at every split DMA copy (routes and the network options
// are fixed once the platform is loaded; cleared with each engine's configuration)
std::map<std::pair<const sg4::Host*, const sg4::Host*>, bool> merge_known;

// The latency factors announced for the next flows (announce_latency_factor), in the order their
// starts reach SimGrid's kernel.
struct Announced {
  const sg4::Host* src;
  const sg4::Host* dst;
  double bytes;
  double factor;
};
std::deque<Announced> announced;

// The factor of a flow of `bytes` from src to dst: the announced one if it is the next announced
// flow's (a negative announcement: the route's own).
double announced_factor(double bytes, const sg4::Host* src, const sg4::Host* dst, double own) {
  if (announced.empty())
    return own;
  const Announced a = announced.front();
  if (a.src != src || a.dst != dst || a.bytes != bytes)
    return own;
  announced.pop_front();
  return a.factor >= 0 ? a.factor : own;
}

bool route_merges(const sg4::Host* a, const sg4::Host* b) {
  std::vector<sg4::Link*> links;
  double lat = 0;
  const_cast<sg4::Host*>(a)->route_to(const_cast<sg4::Host*>(b), links, &lat);
  if (lat <= 0 || links.empty() || crosses_ethernet(links))
    return false;
  double bw = std::numeric_limits<double>::infinity();
  for (const auto* l : links) {
    if (l->get_sharing_policy() == sg4::Link::SharingPolicy::FATPIPE)
      return false;
    bw = std::min(bw, l->get_bandwidth());
  }
  const double gamma = simgrid::config::get_value<double>("network/TCP-gamma");
  return simgrid::config::get_value<double>("network/weight-S") == 0 &&
         (gamma <= 0 || gamma / (2 * lat) >= bw);
}
} // namespace

bool configure_network_model() {
  own_model_installed = false;
  merge_known.clear();
  announced.clear();
  if (!simgrid::config::is_default("network/model"))
    return false; // the command line chose a model (e.g. the bench's SMPI): SimGrid's, as is
  sg4::Engine::set_config("network/model:CM02");
  if (simgrid::config::is_default("network/crosstraffic"))
    sg4::Engine::set_config("network/crosstraffic:0");
  return true;
}

bool crosses_ethernet(const std::vector<sg4::Link*>& links) {
  // SimGrid runs the factor callbacks for every flow (NetworkCm02Model::communicate), ~1M times
  // at the study's scale: the class of a link is computed once and kept in the link's user data
  // (xbt::Extendable slot 0, which nothing else in numasim uses), read without hashing. A
  // pointer to one of these two markers; null means not classified yet.
  static const char kEth = 1, kOther = 0;
  for (auto* l : links) {
    const char* c = l->get_data<const char>();
    if (c == nullptr) {
      c = link_class(l->get_name()) == "eth" ? &kEth : &kOther;
      l->set_data(const_cast<char*>(c));
    }
    if (c == &kEth)
      return true;
  }
  return false;
}

void install_ethernet_factors(sg4::Engine& engine) {
  auto* model = engine.get_netzone_root()->get_network_model();
  // SimGrid refuses a callback when network/bandwidth-factor or latency-factor was also given on
  // the command line (NetworkCm02Model::check_bw_factor_cb): then those global factors apply.
  if (!simgrid::config::is_default("network/bandwidth-factor") ||
      !simgrid::config::is_default("network/latency-factor")) {
    XBT_INFO("network/bandwidth-factor or latency-factor given: applied to every flow");
    return;
  }
  model->set_bw_factor_cb([](double, const sg4::Host*, const sg4::Host*, const std::vector<sg4::Link*>& links,
                             const std::unordered_set<sg4::NetZone*>&) {
    return crosses_ethernet(links) ? kLv08BandwidthFactor : 1.0;
  });
  model->set_lat_factor_cb([](double size, const sg4::Host* src, const sg4::Host* dst,
                              const std::vector<sg4::Link*>& links,
                              const std::unordered_set<sg4::NetZone*>&) {
    return announced_factor(size, src, dst, crosses_ethernet(links) ? kLv08LatencyFactor : 1.0);
  });
  own_model_installed = true;
}

std::pair<double, double> route_latency_bandwidth(const sg4::Host* a, const sg4::Host* b) {
  std::vector<sg4::Link*> links;
  double lat = 0;
  const_cast<sg4::Host*>(a)->route_to(const_cast<sg4::Host*>(b), links, &lat);
  double bw = std::numeric_limits<double>::infinity();
  for (auto* l : links)
    bw = std::min(bw, l->get_bandwidth());
  return {lat, bw};
}

bool flows_merge(const sg4::Host* a, const sg4::Host* b) {
  if (!own_model_installed)
    return false;
  auto [it, added] = merge_known.try_emplace({a, b}, false);
  if (added)
    it->second = route_merges(a, b);
  return it->second;
}

bool own_network_model() {
  return own_model_installed;
}

void announce_latency_factor(const sg4::Host* src, const sg4::Host* dst, uint64_t bytes, double factor) {
  if (own_model_installed)
    announced.push_back({src, dst, static_cast<double>(bytes), factor});
}

void weigh_as_flows(const sg4::CommPtr& comm, double latency, int n) {
  if (n > 1)
    set_sharing_penalty(comm, latency / n);
}

void set_sharing_penalty(const sg4::CommPtr& comm, double penalty) {
  // The flow's model action among the network model's newest started ones (SimGrid 3.32 public
  // kernel/resource/Model.hpp get_started_action_set, Action.hpp get_activity).
  auto* model = dynamic_cast<simgrid::kernel::resource::Model*>(
      comm->get_source()->get_englobing_zone()->get_network_model());
  if (model) {
    auto* started = model->get_started_action_set();
    for (auto it = started->rbegin(); it != started->rend(); ++it)
      if (it->get_activity() == comm->get_impl()) {
        it->set_sharing_penalty(penalty);
        return;
      }
  }
  throw std::logic_error("set_sharing_penalty: the flow is not among the network model's started actions");
}

} // namespace numasim
