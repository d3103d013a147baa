#include "platform.hpp"
#include "error.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

XBT_LOG_NEW_DEFAULT_SUBCATEGORY(numasim_platform, numasim, "numasim platform discovery");

namespace numasim {

const RamInfo& MachineNode::ram_of_numa(int numa) const {
  for (const auto& r : rams)
    if (r.numa == numa)
      return r;
  return rams.front();
}

std::string link_class(const std::string& link_name) {
  auto dot = link_name.find('.');
  std::string cls = dot == std::string::npos ? link_name : link_name.substr(dot + 1);
  // The two directions of a split-duplex link X are SimGrid links X_UP and X_DOWN.
  for (const char* dir : {"_UP", "_DOWN"}) {
    const size_t n = std::strlen(dir);
    if (cls.size() > n && cls.compare(cls.size() - n, n, dir) == 0) {
      cls.resize(cls.size() - n);
      break;
    }
  }
  while (!cls.empty() && std::isdigit(static_cast<unsigned char>(cls.back())))
    cls.pop_back();
  return cls;
}

namespace {
int int_prop(const sg4::Host* h, const char* key, const std::string& file) {
  const char* v = h->get_property(key);
  if (!v)
    throw InputError(file, "host " + h->get_name() + " property '" + key + "'", "an integer");
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end || end == v)
    throw InputError(file, "host " + h->get_name() + " property '" + key + "'",
                     std::string("an integer, got '") + v + "'");
  return static_cast<int>(x);
}
double double_prop(const sg4::Host* h, const char* key, const std::string& file) {
  const char* v = h->get_property(key);
  if (!v)
    throw InputError(file, "host " + h->get_name() + " property '" + key + "'", "a number of bytes");
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (end == v || *end || !(x >= 0) || !std::isfinite(x))
    throw InputError(file, "host " + h->get_name() + " property '" + key + "'",
                     std::string("a number of bytes (0 or more), got '") + v + "'");
  return x;
}
double optional_seconds(const sg4::Host* h, const char* key, const std::string& file) {
  const char* v = h->get_property(key);
  char* end = nullptr;
  double x = std::strtod(v, &end);
  if (end == v || *end || !(x >= 0) || x > 1)
    throw InputError(file, "host " + h->get_name() + " property '" + key + "'",
                     std::string("a duration in seconds in [0, 1], got '") + v + "'");
  return x;
}
} // namespace

std::vector<MachineNode> discover_platform(const sg4::Engine& e, const std::string& file) {
  auto hosts = e.get_all_hosts();
  std::sort(hosts.begin(), hosts.end(), [](auto* a, auto* b) { return a->get_name() < b->get_name(); });
  std::map<std::string, MachineNode> by_name;
  for (auto* h : hosts) {
    const char* node = h->get_property("node");
    const char* kind = h->get_property("kind");
    if (!node || !kind)
      continue; // not a numasim host (e.g. a helper host)
    MachineNode& n = by_name[node];
    if (n.name.empty()) {
      n.name = node;
      auto* zone = h->get_englobing_zone();
      const char* machine = zone->get_property("machine");
      const char* rank = zone->get_property("rank");
      if (!machine || !rank)
        throw InputError(file, "zone " + zone->get_name() + " properties 'machine' and 'rank'",
                         "both set on the zone of node " + n.name);
      n.machine = machine;
      n.rank = std::atoi(rank);
      if (const char* tpc = zone->get_property("threads_per_core"))
        n.threads_per_core = std::max(1, std::atoi(tpc));
    }
    std::string k = kind;
    int numa = int_prop(h, "numa", file);
    if (k == "cpu")
      n.cpus.push_back({h, int_prop(h, "index", file), numa});
    else if (k == "gpu") {
      auto opt = [&](const char* key) { return h->get_property(key) ? optional_seconds(h, key, file) : 0.0; };
      n.gpus.push_back({h, int_prop(h, "index", file), numa, double_prop(h, "memory", file),
                        opt("task_overhead_s"), opt("malloc_s"), opt("free_s"),
                        opt("pinned_alloc_s_per_mib")});
      for (int i = 0; i < 3; i++) {
        std::string key = std::string("first_call_") + kFirstCallKernels[i] + "_s";
        if (h->get_property(key.c_str()))
          n.gpus.back().first_call[i] = optional_seconds(h, key.c_str(), file);
      }
      if (h->get_property("task_gap_s"))
        n.gpus.back().task_gap = optional_seconds(h, "task_gap_s", file);
      if (h->get_property("pinned_alloc_gpu_stall")) {
        const double f = double_prop(h, "pinned_alloc_gpu_stall", file);
        if (!(f >= 0 && f <= 1))
          throw InputError(file, "host " + h->get_name() + " property 'pinned_alloc_gpu_stall'",
                           "a share of the allocation's time in [0, 1]");
        n.gpus.back().pinned_alloc_gpu_stall = f;
      }
    } else if (k == "ram")
      n.rams.push_back({h, numa, double_prop(h, "memory", file)});
    else if (k == "nic")
      n.nics.push_back({h, int_prop(h, "index", file), numa});
    else
      throw InputError(file, "host " + h->get_name() + " property 'kind'",
                       "cpu, gpu, ram or nic, got '" + k + "'");
  }
  if (by_name.empty())
    throw InputError(file, "hosts",
                     "hosts with properties kind/node/numa (numasim platform, docs/interfaces.md §2)");
  std::vector<MachineNode> nodes;
  for (auto& [name, n] : by_name) {
    std::sort(n.cpus.begin(), n.cpus.end(), [](auto& a, auto& b) { return a.index < b.index; });
    std::sort(n.gpus.begin(), n.gpus.end(), [](auto& a, auto& b) { return a.index < b.index; });
    std::sort(n.rams.begin(), n.rams.end(), [](auto& a, auto& b) { return a.numa < b.numa; });
    std::sort(n.nics.begin(), n.nics.end(), [](auto& a, auto& b) { return a.index < b.index; });
    if (n.cpus.empty() || n.rams.empty())
      throw InputError(file, "node " + name, "at least one host of kind cpu and one of kind ram");
    for (size_t k = 0; k < n.rams.size(); k++)
      if (n.rams[k].numa != static_cast<int>(k))
        throw InputError(file, "node " + name + " ram hosts", "one ram host per NUMA node 0..K-1");
    nodes.push_back(std::move(n));
  }
  std::sort(nodes.begin(), nodes.end(), [](auto& a, auto& b) { return a.rank < b.rank; });
  for (size_t i = 0; i < nodes.size(); i++)
    if (nodes[i].rank != static_cast<int>(i))
      throw InputError(file, "zone property 'rank'",
                       "ranks 0.." + std::to_string(nodes.size() - 1) + " each used once (node " +
                           nodes[i].name + ")");
  XBT_DEBUG("%zu nodes", nodes.size());
  return nodes;
}

} // namespace numasim
