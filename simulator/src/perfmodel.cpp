#include "perfmodel.hpp"
#include "error.hpp"
#include "json.hpp"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <xbt/log.h>

XBT_LOG_NEW_DEFAULT_SUBCATEGORY(numasim_perfmodel, numasim, "numasim StarPU performance models");

namespace numasim {

uint32_t crc32c_be(uint32_t input, uint32_t inputcrc) {
  // Bytes in memory order of a little-endian uint32 (hash.c hashes &input byte by byte).
  uint32_t crc = inputcrc;
  for (int i = 0; i < 4; i++) {
    uint8_t byte = (input >> (8 * i)) & 0xFF;
    crc ^= static_cast<uint32_t>(byte) << 24;
    for (int b = 0; b < 8; b++)
      crc = (crc << 1) ^ ((crc & 0x80000000u) ? 0x1EDC6F41u : 0u);
  }
  return crc;
}

uint32_t matrix_task_footprint(unsigned nbuffers, uint32_t nx, uint32_t ny) {
  // matrix_interface.c: crc(nx, ny); footprint.c: handle footprint = crc(that, interface id 0);
  // task footprint folds the handle footprints in buffer order.
  uint32_t handle = crc32c_be(crc32c_be(nx, ny), 0);
  uint32_t fp = 0;
  for (unsigned i = 0; i < nbuffers; i++)
    fp = crc32c_be(handle, fp);
  return fp;
}

std::string ArchModel::name() const {
  switch (devtype) {
  case 0:
    return ncores > 1 ? "cpu_" + std::to_string(ncores) : "cpu";
  case 1:
    return "cuda" + std::to_string(devid);
  case 2:
    return "opencl" + std::to_string(devid);
  default:
    return "dev" + std::to_string(devtype) + "_" + std::to_string(devid);
  }
}

namespace {
// Lines of the file without comments ('#') and blank lines (as _starpu_drop_comments skips them).
class Lines {
public:
  Lines(const std::string& text, const std::string& path) : path_(path) {
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
      size_t first = line.find_first_not_of(" \t\r");
      if (first == std::string::npos || line[first] == '#')
        continue;
      lines_.push_back(line);
    }
  }
  std::vector<std::string> next_fields(const char* what) {
    if (pos_ >= lines_.size())
      throw InputError(path_, what, "more lines (truncated performance model)");
    std::istringstream in(lines_[pos_++]);
    std::vector<std::string> out;
    std::string f;
    while (in >> f)
      out.push_back(f);
    return out;
  }
  long next_int(const char* what) {
    auto f = next_fields(what);
    char* end = nullptr;
    long v = f.empty() ? 0 : std::strtol(f[0].c_str(), &end, 10);
    if (f.size() != 1 || *end)
      throw InputError(path_, what, "one integer on line " + std::to_string(pos_));
    return v;
  }
  const std::string& path() const { return path_; }

private:
  std::string path_;
  std::vector<std::string> lines_;
  size_t pos_ = 0;
};

// A number of a history entry: the whole field parsed, finite, and at least `min` (strictly
// above it when `strict`): StarPU writes such values for every calibrated entry
// (perfmodel_history.c dump_history_entry); anything else is a damaged file, not a timing.
double entry_number(const std::string& s, const std::string& path, const std::string& what, double min,
                    bool strict) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || *end || !std::isfinite(v) || v < min || (strict && v == min))
    throw InputError(path, what,
                     std::string(strict ? "a finite number > " : "a finite number >= ") +
                         std::to_string(static_cast<long>(min)) + ", got '" + s + "'");
  return v;
}
} // namespace

PerfModel PerfModel::parse(const std::string& text, const std::string& path, const std::string& symbol) {
  Lines in(text, path);
  PerfModel m;
  m.symbol = symbol;
  m.path = path;
  long version = in.next_int("version");
  if (version != 45)
    throw InputError(path, "version", "performance model format 45, got " + std::to_string(version));
  long ncombs = in.next_int("number of combinations");
  for (long c = 0; c < ncombs; c++) {
    ArchModel a;
    long ndevices = in.next_int("number of types devices");
    for (long d = 0; d < ndevices; d++) {
      int type = in.next_int("device type");
      int devid = in.next_int("device id");
      int ncores = in.next_int("number of cores");
      if (d == 0) { // multi-device combinations (parallel tasks) are not used by numasim
        a.devtype = type;
        a.devid = devid;
        a.ncores = ncores;
      }
    }
    long nimpls = in.next_int("number of implementations");
    for (long i = 0; i < nimpls; i++) {
      long nentries = in.next_int("number of entries");
      if (in.next_fields("regression").size() != 9)
        throw InputError(path, "regression line", "9 fields (sumlnx .. maxx)");
      if (in.next_fields("non-linear regression").size() != 3)
        throw InputError(path, "non-linear regression line", "3 fields (a b c)");
      auto ncoeff = in.next_fields("multiple regression");
      if (ncoeff.empty())
        throw InputError(path, "multiple regression", "ncoeff");
      std::vector<HistoryEntry> entries;
      for (long e = 0; e < nentries; e++) {
        auto f = in.next_fields("history entry");
        // 8 fields (hash size flops mean dev sum sum2 n), or 7 in files without flops.
        if (f.size() != 8 && f.size() != 7)
          throw InputError(path, "history entry", "'hash size [flops] mean dev sum sum2 n'");
        size_t k = f.size() == 8 ? 3 : 2;
        HistoryEntry h;
        std::string where =
            "history entry " + std::to_string(e + 1) + " of combination " + std::to_string(c + 1);
        char* end = nullptr;
        unsigned long fp = std::strtoul(f[0].c_str(), &end, 16);
        if (f[0].size() != 8 || *end)
          throw InputError(path, where + " hash", "8 hexadecimal digits, got '" + f[0] + "'");
        h.footprint = static_cast<uint32_t>(fp);
        h.size = static_cast<uint64_t>(entry_number(f[1], path, where + " size", 0, true));
        double n = entry_number(f[k + 4], path, where + " n", 0, false);
        if (n != std::floor(n) || n > 4e9)
          throw InputError(path, where + " n", "a sample count (integer), got '" + f[k + 4] + "'");
        h.nsample = static_cast<unsigned>(n);
        h.dev_us = entry_number(f[k + 1], path, where + " dev", 0, false);
        // StarPU writes an entry without samples (n = 0, mean 0) while it calibrates, when every
        // sample so far was left out as an outlier: valid, but it carries no timing (skipped).
        if (h.nsample == 0 && entry_number(f[k], path, where + " mean", 0, false) == 0)
          continue;
        h.mean_us = entry_number(f[k], path, where + " mean", 0, true);
        entries.push_back(h);
      }
      a.impls.push_back(std::move(entries));
    }
    m.combs.push_back(std::move(a));
  }
  return m;
}

PerfModel PerfModel::load(const std::string& sampling_dir, const std::string& symbol,
                          const std::string& host) {
  std::string path = sampling_dir + "/codelets/45/" + symbol + "." + host;
  return parse(
      read_input_file(path, "perfmodels",
                      "a StarPU performance model for symbol '" + symbol + "' on host '" + host + "'"),
      path, symbol);
}

const ArchModel* PerfModel::arch(int devtype, int devid, int ncores) const {
  for (const auto& a : combs)
    if (a.devtype == devtype && a.devid == devid && a.ncores == ncores)
      return &a;
  return nullptr;
}

const HistoryEntry* PerfModel::lookup(int devtype, int devid, int ncores, uint32_t footprint,
                                      uint64_t size) const {
  const ArchModel* a = arch(devtype, devid, ncores);
  if (!a || a->impls.empty())
    return nullptr;
  const auto& entries = a->impls[0];
  auto usable = [](const HistoryEntry& e) { return e.nsample > 0 && std::isfinite(e.mean_us); };
  for (const auto& e : entries)
    if (e.footprint == footprint && usable(e))
      return &e;
  const HistoryEntry* by_size = nullptr;
  for (const auto& e : entries)
    if (e.size == size && usable(e)) {
      if (by_size)
        return nullptr; // ambiguous: several footprints of that size
      by_size = &e;
    }
  return by_size;
}

} // namespace numasim
