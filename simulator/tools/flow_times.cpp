/* flow_times: start flows at t = 0 on a platform, under numasim's network model, and print when
 * each one ends (used by tests of the link physics, tests/test_link_physics.py).
 *
 *   flow_times PLATFORM.xml SRC DST BYTES [SRC DST BYTES]... [--cfg=...]
 *
 * Prints {"network_model": "...", "flows": [{"src", "dst", "bytes", "end", "latency",
 * "bandwidth", "links"}]}: the flow's end date (s), and its route's latency (s), smallest link
 * bandwidth (B/s) and links as SimGrid routes it. The network model is numasim's
 * (simulator/src/network.hpp) unless --cfg=network/model:... chooses one.
 */
#include "network.hpp"

#include <simgrid/s4u.hpp>
#include <xbt/config.hpp>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

XBT_LOG_NEW_DEFAULT_CATEGORY(flow_times, "Flow completion times");

namespace sg4 = simgrid::s4u;

namespace {
struct Flow {
  sg4::Host* src;
  sg4::Host* dst;
  double bytes;
  double end = -1;
};

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}
} // namespace

int main(int argc, char* argv[]) {
  sg4::Engine engine(&argc, argv);
  if (argc < 5 || (argc - 2) % 3 != 0) {
    std::cerr << "usage: " << argv[0] << " PLATFORM.xml SRC DST BYTES [SRC DST BYTES]... [--cfg=...]\n";
    return 2;
  }
  const bool own = numasim::configure_network_model();
  engine.load_platform(argv[1]);
  if (own)
    numasim::install_ethernet_factors(engine);
  engine.seal_platform();
  std::vector<Flow> flows;
  for (int a = 2; a + 2 < argc; a += 3) {
    sg4::Host* src = sg4::Host::by_name_or_null(argv[a]);
    sg4::Host* dst = sg4::Host::by_name_or_null(argv[a + 1]);
    if (!src || !dst) {
      std::cerr << "error: unknown host " << (src ? argv[a + 1] : argv[a]) << "\n";
      return 1;
    }
    flows.push_back({src, dst, std::strtod(argv[a + 2], nullptr)});
  }
  for (size_t i = 0; i < flows.size(); i++)
    sg4::Actor::create("flow" + std::to_string(i), flows[i].src, [&flows, i] {
      sg4::Comm::sendto(flows[i].src, flows[i].dst, static_cast<uint64_t>(flows[i].bytes));
      flows[i].end = sg4::Engine::get_clock();
    });
  engine.run();
  std::cout << "{\"network_model\": \"" << simgrid::config::get_value<std::string>("network/model")
            << "\", \"flows\": [";
  for (size_t i = 0; i < flows.size(); i++) {
    std::vector<sg4::Link*> route;
    double latency = 0, bw = std::numeric_limits<double>::infinity();
    flows[i].src->route_to(flows[i].dst, route, &latency);
    std::string links;
    for (const auto* l : route) {
      bw = std::min(bw, l->get_bandwidth());
      links += (links.empty() ? "\"" : ", \"") + l->get_name() + "\"";
    }
    std::cout << (i ? ",\n  " : "\n  ") << "{\"src\": \"" << flows[i].src->get_name() << "\", \"dst\": \""
              << flows[i].dst->get_name() << "\", \"bytes\": " << number(flows[i].bytes)
              << ", \"end\": " << number(flows[i].end) << ", \"latency\": " << number(latency)
              << ", \"bandwidth\": " << number(bw) << ", \"links\": [" << links << "]}";
  }
  std::cout << "]}\n";
  return 0;
}
