/* platform_info: load a SimGrid platform and print it as JSON (used by tests).
 *
 *   platform_info PLATFORM.xml [SRC DST]...
 *
 * Prints {"zones": [...], "hosts": [...], "links": [...], "routes": [...]}:
 * zones and hosts with their properties, links with bandwidth (B/s) and latency (s),
 * and for each SRC DST pair the names of the links SimGrid routes through.
 */
#include <simgrid/s4u.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

XBT_LOG_NEW_DEFAULT_CATEGORY(platform_info, "Platform description dump");

namespace sg4 = simgrid::s4u;

namespace {

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    default:
      if (static_cast<unsigned char>(c) < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        out += buf;
      } else {
        out += c;
      }
    }
  }
  return out + "\"";
}

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// Sorted so that the output does not depend on hash-map order.
std::string properties(const std::unordered_map<std::string, std::string>* props) {
  std::map<std::string, std::string> sorted;
  if (props)
    sorted.insert(props->begin(), props->end());
  std::string out = "{";
  for (const auto& [k, v] : sorted)
    out += (out.size() > 1 ? ", " : "") + quoted(k) + ": " + quoted(v);
  return out + "}";
}

const char* sharing(sg4::Link::SharingPolicy policy) {
  switch (policy) {
  case sg4::Link::SharingPolicy::FATPIPE:
    return "FATPIPE";
  case sg4::Link::SharingPolicy::SPLITDUPLEX:
    return "SPLITDUPLEX";
  default:
    return "SHARED";
  }
}

} // namespace

int main(int argc, char* argv[]) {
  sg4::Engine engine(&argc, argv);
  if (argc < 2 || argc % 2 != 0) {
    std::cerr << "usage: " << argv[0] << " PLATFORM.xml [SRC DST]...\n";
    return 2;
  }
  engine.load_platform(argv[1]);
  engine.seal_platform(); // Floyd computes its routes when sealed, normally at run()

  std::ostringstream out;
  out << "{\n \"zones\": [";
  // NetZone::get_parent() is not safe on the root zone in SimGrid 3.32: track parents here.
  std::vector<std::pair<sg4::NetZone*, std::string>> zones;
  std::vector<std::pair<sg4::NetZone*, std::string>> todo{{engine.get_netzone_root(), ""}};
  while (not todo.empty()) {
    auto [zone, parent] = todo.back();
    todo.pop_back();
    zones.emplace_back(zone, parent);
    for (auto* child : zone->get_children())
      todo.emplace_back(child, zone->get_name());
  }
  std::sort(zones.begin(), zones.end(),
            [](auto& a, auto& b) { return a.first->get_name() < b.first->get_name(); });
  for (size_t i = 0; i < zones.size(); i++) {
    const auto& [zone, parent] = zones[i];
    out << (i ? ",\n  " : "\n  ") << "{\"name\": " << quoted(zone->get_name())
        << ", \"parent\": " << (parent.empty() ? "null" : quoted(parent))
        << ", \"properties\": " << properties(zone->get_properties()) << "}";
  }
  out << "],\n \"hosts\": [";
  auto hosts = engine.get_all_hosts();
  for (size_t i = 0; i < hosts.size(); i++) {
    out << (i ? ",\n  " : "\n  ") << "{\"name\": " << quoted(hosts[i]->get_name())
        << ", \"speed\": " << number(hosts[i]->get_speed())
        << ", \"zone\": " << quoted(hosts[i]->get_englobing_zone()->get_name())
        << ", \"properties\": " << properties(hosts[i]->get_properties()) << "}";
  }
  out << "],\n \"links\": [";
  auto links = engine.get_all_links();
  for (size_t i = 0; i < links.size(); i++) {
    out << (i ? ",\n  " : "\n  ") << "{\"name\": " << quoted(links[i]->get_name())
        << ", \"bandwidth\": " << number(links[i]->get_bandwidth())
        << ", \"latency\": " << number(links[i]->get_latency())
        << ", \"sharing\": " << quoted(sharing(links[i]->get_sharing_policy())) << "}";
  }
  out << "],\n \"routes\": [";
  for (int a = 2; a + 1 < argc; a += 2) {
    const sg4::Host* src = sg4::Host::by_name_or_null(argv[a]);
    const sg4::Host* dst = sg4::Host::by_name_or_null(argv[a + 1]);
    if (!src || !dst) {
      std::cerr << "error: unknown host " << (src ? argv[a + 1] : argv[a]) << "\n";
      return 1;
    }
    std::vector<sg4::Link*> route;
    double latency = 0;
    src->route_to(dst, route, &latency);
    out << (a > 2 ? ",\n  " : "\n  ") << "{\"src\": " << quoted(argv[a])
        << ", \"dst\": " << quoted(argv[a + 1]) << ", \"latency\": " << number(latency) << ", \"links\": [";
    for (size_t i = 0; i < route.size(); i++)
      out << (i ? ", " : "") << quoted(route[i]->get_name());
    out << "]}";
  }
  out << "]\n}\n";
  std::cout << out.str();
  return 0;
}
