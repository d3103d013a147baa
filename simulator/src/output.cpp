#include "output.hpp"
#include "error.hpp"
#include "runtime.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <stdexcept>
#include <streambuf>
#include <sys/stat.h>
#include <unistd.h>

XBT_LOG_NEW_DEFAULT_SUBCATEGORY(numasim_output, numasim, "numasim output writers");

namespace numasim {

namespace {

// A stream buffer on a file descriptor that keeps the errno of its first failed write
// (std::ofstream loses it, and reports a failed final flush nowhere).
class FdBuf : public std::streambuf {
public:
  explicit FdBuf(int fd) : fd_(fd) { setp(buf_, buf_ + sizeof buf_); }
  int error() const { return err_; }

protected:
  int_type overflow(int_type c) override {
    if (!drain())
      return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  int sync() override { return drain() ? 0 : -1; }

private:
  bool drain() {
    if (err_)
      return false;
    for (const char* p = pbase(); p < pptr();) {
      ssize_t n = ::write(fd_, p, static_cast<size_t>(pptr() - p));
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0) {
        err_ = n < 0 ? errno : ENOSPC;
        return false;
      }
      p += n;
    }
    setp(buf_, buf_ + sizeof buf_);
    return true;
  }

  int fd_;
  int err_ = 0;
  char buf_[1 << 16];
};

[[noreturn]] void fail(const std::string& path, int err) {
  throw OutputError(path + ": " + std::strerror(err ? err : EIO));
}

} // namespace

void write_output(const std::string& path, const std::string& key,
                  const std::function<void(std::ostream&)>& fill) {
  struct stat st;
  bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode))
    throw InputError(path, key, "a file to write, found a directory");
  bool in_place = exists && !S_ISREG(st.st_mode);
  std::string target = path;
  if (!in_place) {
    size_t slash = path.rfind('/');
    std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
    std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
    target = dir + "." + base + ".tmp-" + std::to_string(::getpid());
  }
  int fd = ::open(target.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0)
    fail(path, errno);
  auto discard = [&] {
    if (!in_place)
      ::unlink(target.c_str());
  };
  int err = 0;
  try {
    FdBuf buf(fd);
    std::ostream out(&buf);
    fill(out);
    out.flush();
    if (!out || buf.error())
      err = buf.error() ? buf.error() : EIO;
  } catch (...) {
    ::close(fd);
    discard();
    throw;
  }
  if (::close(fd) != 0 && !err)
    err = errno;
  if (!err && !in_place && std::rename(target.c_str(), path.c_str()) != 0)
    err = errno;
  if (err) {
    discard();
    fail(path, err);
  }
}

void write_stdout(const std::string& text) {
  errno = 0;
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0)
    fail("stdout", errno);
}

void Simulation::write_trace(const std::string& path) const {
  write_output(path, "trace", [this](std::ostream& out) { write_trace(out); });
}

void Simulation::write_transfers(const std::string& path) const {
  write_output(path, "transfers", [this](std::ostream& out) { write_transfers(out); });
}

void Simulation::write_events(const std::string& path) const {
  write_output(path, "events", [this](std::ostream& out) { write_events(out); });
}

const char* event_name(EventType t) {
  switch (t) {
  case EventType::Push:
    return "Push";
  case EventType::Pop:
    return "Pop";
  case EventType::Sleeping:
    return "Sleeping";
  case EventType::Progressing:
    return "Progressing";
  case EventType::SendSubmitted:
    return "SendSubmitted";
  case EventType::ReceiveCompleted:
    return "ReceiveCompleted";
  case EventType::Allocating:
    return "Allocating";
  case EventType::AllocatingReuse:
    return "AllocatingReuse";
  case EventType::Freeing:
    return "Freeing";
  case EventType::Used:
    return "Used";
  }
  return "?";
}

// One row per task (docs/interfaces.md §10): StarVZ-like columns, then where its operands' pages
// were and the bytes it read remotely (numa_effects.cpp). X, Y: the row m and column n of the tile
// the task writes, as StarPU's FxT tool reports them: the coordinates of the task's first written
// handle (src/debug/traces/starpu_fxt.c, handle_codelet_details), which Chameleon sets to (m, n)
// (runtime/starpu/control/runtime_descriptor.c, starpu_data_set_coordinates(handle, 2, m, n)).
void Simulation::write_trace(std::ostream& out) const {
  if (dag_.spans.empty())
    throw std::logic_error(
        "Simulation::write_trace: the run kept no per-task records (RunConfig::trace empty)");
  out << "ResourceId,Start,End,Duration,Value,JobId,Node,WorkerNuma,WorkerMemNode,OperandNuma,Priority,Step,"
         "X,Y,"
         "OperandPages,RemoteBytes,OperandAllocators\n";
  char buf[256];
  for (size_t i = 0; i < dag_.tasks.size(); i++) {
    const Task& t = dag_.tasks[i];
    if (t.worker < 0)
      continue;
    const Worker& w = workers()[t.worker];
    const MemNode& m = topo_->mem(topo_->global_mem(w.rank, w.mem));
    const TaskSpan& span = dag_.spans[i];
    const uint32_t tile = dag_.tile(t, t.nbuf - 1); // m * NT + n (lu_dag.cpp); the last operand is written
    std::snprintf(buf, sizeof buf, "%s,%.9f,%.9f,%.9f,%s,%zu,%d,%d,%s,%d,%d,%d,%zu,%zu\n", w.name.c_str(),
                  span.start, span.end, span.end - span.start, kind_name(t.kind), i, w.rank, w.numa,
                  m.host->get_cname(), m.numa, t.prio, t.step, static_cast<size_t>(tile / cfg_.nt),
                  static_cast<size_t>(tile % cfg_.nt));
    buf[std::strlen(buf) - 1] = ','; // NUMA node of each operand's pages as read, remote bytes
    out << buf << numa_->operand_pages(static_cast<uint32_t>(i)) << ','
        << numa_->remote_bytes(static_cast<uint32_t>(i)) << ','
        << numa_->operand_allocators(static_cast<uint32_t>(i)) << '\n';
  }
}

// One row per copy (docs/interfaces.md §10). For copies between two memory nodes of one rank,
// `Estimate` is the copy's time as the scheduler predicts it (BusModel::estimate, StarPU's
// starpu_transfer_predict: the figure dmda's data penalty adds up and STARPU_SCHED_BETA scales) and
// `Calibrated` the bus calibration's figure it starts from (latency + bytes / bandwidth, one copy
// on an idle node); both empty for MPI messages between ranks, which no scheduler estimate covers.
void Simulation::write_transfers(std::ostream& out) const {
  // Thread: the worker whose thread ran a memcpy
  out << "Start,End,Bytes,Src,Dst,Links,Estimate,Calibrated,Thread\n";
  char buf[256];
  for (const auto& r : data_->transfer_log()) {
    std::string links;
    for (const auto& l : numa_->path_links(r.path))
      links += (links.empty() ? "" : " ") + l;
    const MemNode &src = topo_->mem(r.gsrc), &dst = topo_->mem(r.gdst);
    std::snprintf(buf, sizeof buf, "%.9f,%.9f,%.0f,%s,%s,", r.start, r.end, r.bytes, src.host->get_cname(),
                  dst.host->get_cname());
    out << buf << links << ',';
    if (src.rank == dst.rank) {
      std::snprintf(buf, sizeof buf, "%.9f,%.9f", bus_->estimate(r.gsrc, r.gdst, r.bytes),
                    bus_->calibrated(r.gsrc, r.gdst, r.bytes));
      out << buf;
    } else {
      out << ',';
    }
    out << ',' << (r.thread >= 0 ? workers()[r.thread].name : std::string()) << "\n";
  }
}

// Runtime events (docs/interfaces.md §10): first one `Worker` row per worker of the run (Thread its
// name, MemNode its memory node's host, Value its NUMA node), every worker whether it ran a task or
// not; one `Submit` row per task (Value the task); then the log in the order it was recorded. Thread: the
// worker, or `<node>.mpi` for the MPI thread of a rank; MemNode: the memory node of an allocation, a free,
// the bytes used, a copy's destination; Value: bytes (allocations, frees, Used), the task (Push, Pop: the
// trace's JobId).
void Simulation::write_events(std::ostream& out) const {
  if (!events_)
    throw std::logic_error("Simulation::write_events: the run kept no events (RunConfig::events empty)");
  out << "Type,Start,End,Rank,Thread,MemNode,Value\n";
  char buf[320];
  for (const Worker& w : workers()) {
    const MemNode& m = topo_->mem(topo_->global_mem(w.rank, w.mem));
    std::snprintf(buf, sizeof buf, "Worker,0,0,%d,%s,%s,%d\n", w.rank, w.name.c_str(), m.host->get_cname(),
                  w.numa);
    out << buf;
  }
  // The main thread submits the whole graph at 0, in submission order (Simulation::run)
  for (size_t i = 0; i < dag_.tasks.size(); i++)
    out << "Submit,0,0," << dag_.tasks[i].rank << ",,," << i << '\n';
  for (const RuntimeEvent& e : events_->log) {
    std::string thread, memnode;
    int rank;
    switch (e.type) { // `where`: a rank (tasks, thread states) or a global memory node
    case EventType::Push:
    case EventType::Pop:
    case EventType::Sleeping:
    case EventType::SendSubmitted:
    case EventType::ReceiveCompleted:
      rank = e.where;
      if (e.who >= 0)
        thread = workers()[e.who].name;
      else if (e.type != EventType::Push)
        thread = nodes()[e.where].name + ".mpi";
      break;
    default: {
      const MemNode& m = topo_->mem(e.where);
      rank = m.rank;
      memnode = m.host->get_cname();
      if (e.who >= 0)
        thread = workers()[e.who].name;
    }
    }
    std::snprintf(buf, sizeof buf, "%s,%.9f,%.9f,%d,%s,%s,%.0f\n", event_name(e.type), e.start, e.end, rank,
                  thread.c_str(), memnode.c_str(), e.value);
    out << buf;
  }
}

} // namespace numasim
