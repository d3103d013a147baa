#include "memory_model.hpp"
#include "error.hpp"
#include "network.hpp"
#include "sleep.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

XBT_LOG_NEW_DEFAULT_SUBCATEGORY(numasim_memory, numasim, "numasim memory system");

namespace numasim {

namespace {
double parse_number(const std::string& text, bool& ok) {
  char* end = nullptr;
  double x = std::strtod(text.c_str(), &end);
  ok = end != text.c_str() && *end == '\0' && std::isfinite(x);
  return x;
}
} // namespace

MemoryParams MemoryParams::from_zone(const sg4::NetZone* zone, const std::string& file) {
  MemoryParams p;
  const std::string where = "zone " + zone->get_name() + " property ";
  if (const char* v = zone->get_property("numa_loaded_latency")) {
    // "u:ratio,u:ratio,...": utilisations increasing in [0, 1], ratios >= 1 and non-decreasing.
    std::stringstream ss(v);
    std::string item;
    while (std::getline(ss, item, ',')) {
      auto colon = item.find(':');
      bool ok_u = false, ok_r = false;
      double u = colon == std::string::npos ? 0 : parse_number(item.substr(0, colon), ok_u);
      double r = colon == std::string::npos ? 0 : parse_number(item.substr(colon + 1), ok_r);
      bool increasing = p.loaded_latency.empty() ||
                        (u > p.loaded_latency.back().first && r >= p.loaded_latency.back().second);
      if (!ok_u || !ok_r || u < 0 || u > 1 || r < 1 || !increasing)
        throw InputError(file, where + "'numa_loaded_latency'",
                         "'u:ratio,...' with utilisations increasing in [0, 1] and latency ratios >= 1, "
                         "non-decreasing; got '" +
                             std::string(v) + "'");
      p.loaded_latency.emplace_back(u, r);
    }
  }
  struct DmaKey {
    const char* name;
    double* field;
    double hi; // credits: cache lines; latencies: seconds
  };
  for (const DmaKey& k : {DmaKey{"numa_dma_read_credits", &p.dma_read_credits, 1e6},
                          DmaKey{"numa_dma_write_credits", &p.dma_write_credits, 1e6},
                          DmaKey{"numa_core_credits", &p.core_credits, 1e6},
                          DmaKey{"numa_dma_read_latency_s", &p.dma_read_latency_s, 1e-3},
                          DmaKey{"numa_dma_write_latency_s", &p.dma_write_latency_s, 1e-3}})
    if (const char* v = zone->get_property(k.name)) {
      bool ok = false;
      double x = parse_number(v, ok);
      if (!ok || x <= 0 || x > k.hi)
        throw InputError(file, where + "'" + k.name + "'",
                         std::string("a positive number at most ") + (k.hi > 1 ? "1e6" : "1e-3") + ", got '" +
                             v + "'");
      *k.field = x;
    }
  const std::string stall = "numa_stall_fraction_", spread = "numa_variability_remote_";
  for (const auto& [key, value] : *zone->get_properties()) {
    bool ok = false;
    if (key.rfind(stall, 0) == 0) {
      double s = parse_number(value, ok);
      if (!ok || s < 0 || s > 1)
        throw InputError(file, where + "'" + key + "'", "a fraction in [0, 1], got '" + value + "'");
      p.stall_fraction.emplace_back(key.substr(stall.size()), s);
    } else if (key.rfind(spread, 0) == 0) {
      double r = parse_number(value, ok);
      if (!ok || r <= 0 || r > 100)
        throw InputError(file, where + "'" + key + "'", "a ratio in (0, 100], got '" + value + "'");
      p.variability_remote.emplace_back(key.substr(spread.size()), r);
    }
  }
  std::sort(p.stall_fraction.begin(), p.stall_fraction.end()); // properties are an unordered map
  std::sort(p.variability_remote.begin(), p.variability_remote.end());
  return p;
}

double MemoryParams::latency_ratio(double u) const {
  if (loaded_latency.empty())
    return 1.0;
  if (u <= loaded_latency.front().first)
    return loaded_latency.front().second;
  for (size_t i = 1; i < loaded_latency.size(); i++) {
    const auto& [u1, r1] = loaded_latency[i];
    if (u <= u1) {
      const auto& [u0, r0] = loaded_latency[i - 1];
      return r0 + (r1 - r0) * (u - u0) / (u1 - u0);
    }
  }
  return loaded_latency.back().second;
}

double MemoryParams::stall(const std::string& kernel) const {
  for (const auto& [k, s] : stall_fraction)
    if (k == kernel)
      return s;
  return 0;
}

double MemoryParams::remote_spread(const std::string& kernel) const {
  for (const auto& [k, r] : variability_remote)
    if (k == kernel)
      return r;
  return 1;
}

MemorySystem::MemorySystem(const MachineNode& node, const std::string& file)
    : p_(MemoryParams::from_zone(node.cpus.front().host->get_englobing_zone(), file)) {
  const int n = static_cast<int>(node.rams.size());
  if (n > kMaxNumaNodes)
    throw InputError(file, "node " + node.name + " ram hosts",
                     "at most " + std::to_string(kMaxNumaNodes) + " NUMA nodes per machine node");
  for (const auto& r : node.rams)
    ram_.push_back(r.host);
  auto core_on = [&](int numa) {
    for (const auto& c : node.cpus)
      if (c.numa == numa)
        return c.host;
    return node.cpus.front().host;
  };
  controller_.assign(n, nullptr);
  demand_.assign(n, 0.0);
  kernel_demand_.assign(n, 0.0);
  qpi_links_.assign(n, std::vector<std::vector<const sg4::Link*>>(n));
  idle_latency_.assign(n, std::vector<double>(n, 0.0));
  remote_demand_.assign(n, std::vector<double>(n, 0.0));
  path_bw_.assign(n, std::vector<double>(n, 0.0));
  qpi_bw_.assign(n, std::vector<double>(n, 0.0));
  constexpr double inf = std::numeric_limits<double>::infinity();
  for (int d = 0; d < n; d++)
    for (int t = 0; t < n; t++) {
      std::vector<sg4::Link*> links;
      double lat = 0;
      ram_[d]->route_to(core_on(t), links, &lat);
      idle_latency_[t][d] = lat;
      double narrowest = inf, qpi = inf;
      for (auto* l : links) {
        const std::string cls = link_class(l->get_name());
        if (cls == "membus")
          controller_[d] = l;
        narrowest = std::min(narrowest, l->get_bandwidth());
        if (cls == "qpi") {
          qpi = std::min(qpi, l->get_bandwidth());
          qpi_links_[t][d].push_back(l);
        }
      }
      path_bw_[t][d] = narrowest;
      qpi_bw_[t][d] = qpi;
    }
}

double MemorySystem::utilisation(int numa) const {
  const sg4::Link* l = controller_[numa];
  return l && l->get_bandwidth() > 0 ? std::min(1.0, demand_[numa] / l->get_bandwidth()) : 0.0;
}

void MemorySystem::begin_kernel(int t, const double* bytes_by_node, double d) {
  if (d > 0)
    for (int p = 0; p < nnuma(); p++) {
      demand_[p] += bytes_by_node[p] / d;
      kernel_demand_[p] += bytes_by_node[p] / d;
      if (p != t)
        remote_demand_[t][p] += bytes_by_node[p] / d;
    }
}

void MemorySystem::end_kernel(int t, const double* bytes_by_node, double d) {
  if (d > 0)
    for (int p = 0; p < nnuma(); p++) {
      demand_[p] = std::max(0.0, demand_[p] - bytes_by_node[p] / d);
      kernel_demand_[p] = std::max(0.0, kernel_demand_[p] - bytes_by_node[p] / d);
      if (p != t)
        remote_demand_[t][p] = std::max(0.0, remote_demand_[t][p] - bytes_by_node[p] / d);
    }
}

void MemorySystem::add_stream(int numa, double rate_Bps) {
  demand_[numa] = std::max(0.0, demand_[numa] + rate_Bps);
}

bool MemorySystem::on_inter_socket_route(int t, int p, const sg4::Link* l) const {
  return t != p && std::find(qpi_links_[t][p].begin(), qpi_links_[t][p].end(), l) != qpi_links_[t][p].end();
}

double MemorySystem::kernel_load(const sg4::Link* l) const {
  double load = 0;
  for (int p = 0; p < nnuma(); p++) {
    if (controller_[p] == l)
      load += kernel_demand_[p];
    for (int t = 0; t < nnuma(); t++)
      if (on_inter_socket_route(t, p, l))
        load += remote_demand_[t][p];
  }
  return load;
}

MemorySystem::KernelTerms MemorySystem::kernel_terms(const sg4::Link* l) const {
  KernelTerms terms;
  for (int p = 0; p < nnuma(); p++) {
    if (controller_[p] == l)
      terms.emplace_back(p, -1);
    for (int t = 0; t < nnuma(); t++)
      if (on_inter_socket_route(t, p, l))
        terms.emplace_back(p, t);
  }
  return terms;
}

bool MemorySystem::carries_kernel_traffic(const sg4::Link* l) const {
  if (controller_of(l) >= 0)
    return true;
  for (int p = 0; p < nnuma(); p++)
    for (int t = 0; t < nnuma(); t++)
      if (on_inter_socket_route(t, p, l))
        return true;
  return false;
}

int MemorySystem::controller_of(const sg4::Link* l) const {
  for (int p = 0; p < nnuma(); p++)
    if (controller_[p] == l)
      return p;
  return -1;
}

double MemorySystem::latency_s(int t, int d) const {
  // The controller's queueing delay grows with its load; the inter-socket hop adds its own idle
  // latency (its own load is not modelled: the measured curves are per memory controller).
  const double local = idle_latency_[d][d];
  return local * p_.latency_ratio(utilisation(d)) + (idle_latency_[t][d] - local);
}

double MemorySystem::stretched(double sigma, int t, const double* bytes_by_node, double d0) const {
  const double idle = idle_latency_[t][t];
  if (sigma <= 0 || d0 <= 0 || idle <= 0)
    return d0;
  double bytes = 0, weighted = 0;
  for (int p = 0; p < nnuma(); p++)
    if (bytes_by_node[p] > 0) {
      bytes += bytes_by_node[p];
      weighted += bytes_by_node[p] * latency_s(t, p);
    }
  if (bytes <= 0)
    return d0;
  return d0 * (1 + sigma * (weighted / bytes / idle - 1));
}

size_t MemorySystem::start_traffic(sg4::Host* core, int t, const double* bytes_by_node, double d,
                                   std::array<FlowId, kMaxNumaNodes>& out) const {
  size_t n = 0;
  for (int p = 0; p < nnuma(); p++) {
    if (bytes_by_node[p] <= 0 || ram_[p] == core)
      continue;
    // After begin_kernel, demand_[p] holds this kernel's rate with the other kernels' and the
    // copies' on node p's controller, and remote_demand_[t][p] the rates of the kernels of node t
    // reading node p (this one included; copies crossing the inter-socket link are not counted
    // there). A rate within 0.1 % of the path's counts as binding, so that the boundary does not
    // depend on rounding.
    const double rate = d > 0 ? bytes_by_node[p] / d : std::numeric_limits<double>::infinity();
    const sg4::Link* controller = controller_[p];
    const bool bound = rate >= 0.999 * path_bw_[t][p] ||
                       (controller && demand_[p] > controller->get_bandwidth()) ||
                       (p != t && remote_demand_[t][p] > qpi_bw_[t][p]);
    if (bound)
      out[n++] = start_flow(ram_[p], core, bytes_by_node[p]);
  }
  return n;
}

bool MemorySystem::oversubscribed(int numa) const {
  const sg4::Link* l = controller_[numa];
  return l && demand_[numa] > l->get_bandwidth();
}

double MemorySystem::dma_window_Bps(int numa, bool to_memory) const {
  const double credits = to_memory ? p_.dma_write_credits : p_.dma_read_credits;
  const double unloaded = to_memory ? p_.dma_write_latency_s : p_.dma_read_latency_s;
  if (credits <= 0 || unloaded <= 0)
    return std::numeric_limits<double>::infinity();
  // The controller's queueing delay, as the cores' loads see it (latency_s): what its load adds to
  // the idle local latency. Both domains cross the controller's queues (the read domain its read
  // queue, the write domain its write-queue admission; section 4.1 of the paper).
  const double idle = idle_latency_[numa][numa];
  const double queueing = idle * (p_.latency_ratio(utilisation(numa)) - p_.latency_ratio(0.0));
  constexpr double kLineBytes = 64; // x86-64 cache line: the IIO's request unit
  return credits * kLineBytes / (unloaded + std::max(0.0, queueing));
}

int MemorySystem::dma_flows(int numa, bool to_memory) const {
  if (to_memory || p_.dma_read_credits <= 0 || p_.core_credits <= 0 || !oversubscribed(numa))
    return 1;
  return std::max(1, static_cast<int>(std::lround(p_.dma_read_credits / p_.core_credits)));
}

namespace {
constexpr double kDmaSplitDelay_s = 1e-8;
} // namespace

MemorySystem::DmaRun MemorySystem::dma_copy(sg4::Host* src, sg4::Host* dst, double bytes, int numa,
                                            bool to_memory, double route_latency, double route_rate) const {
  DmaRun r;
  const double start = sg4::Engine::get_clock();
  const double window = dma_window_Bps(numa, to_memory);
  const double window_end = start + route_latency + bytes / window; // start + latency when unbounded
  r.window_bound = window < route_rate;
  r.flows = dma_flows(numa, to_memory);
  const auto whole = static_cast<uint64_t>(bytes);
  if (r.flows == 1)
    run_flow(src, dst, static_cast<double>(whole));
  else if (flows_merge(src, dst)) // the r.flows equal flows as one flow with their shares (network.hpp)
    run_flow(src, dst, static_cast<double>(whole), r.flows);
  else {
    // SimGrid 3.32's lazy max-min update (network/optim:Lazy, numasim's setting) lets several
    // flows created on one route at the same date as earlier flows on a shared link exceed a link
    // of their route (15 flows through a 14 GB/s link at 29 GB/s: bench/host_network_microbench.py);
    // created one precision step (SimGrid's 1e-9 s) later they get the max-min solution. 10 ns
    // against a copy of tens of microseconds or more.
    numasim::sleep_for(kDmaSplitDelay_s);
    std::vector<FlowId> parts(static_cast<size_t>(r.flows));
    const int n = r.flows;
    const uint64_t part = whole / n;
    for (int i = 0; i < n; i++)
      parts[i] = start_flow(src, dst, static_cast<double>(i + 1 < n ? part : whole - part * (n - 1)));
    for (int i = 0; i < n; i++)
      wait_flow(parts[i]);
  }
  const double left = window_end - sg4::Engine::get_clock();
  if (left > 0)
    numasim::sleep_for(left);
  return r;
}

} // namespace numasim
