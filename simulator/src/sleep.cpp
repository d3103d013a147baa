#include "sleep.hpp"
#include "error.hpp"

#include <simgrid/kernel/Timer.hpp>
#include <simgrid/s4u.hpp>
#include <xbt/config.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

XBT_LOG_NEW_DEFAULT_SUBCATEGORY(numasim_sleep, numasim, "numasim sleeps outside the CPU model");

namespace numasim {
namespace sg4 = simgrid::s4u;

namespace {

struct Sleeper {
  double date;
  // Order among equal dates (the CPU model's heap insertion order): time advances before this
  // sleep began, then the reverse of the order of start between two advances.
  uint64_t order;
  sg4::Actor* actor;
  uint64_t ticket; // the actor's sleep this entry is for: an older one was interrupted
};

// std::push_heap keeps the largest on top: "later" ranks lower. A type, not a function, so that
// the heap operations inline the comparison.
struct Later {
  bool operator()(const Sleeper& a, const Sleeper& b) const {
    return a.date != b.date ? a.date > b.date : a.order > b.order;
  }
};
constexpr Later later;

class Sleeps {
public:
  void sleep_for(double seconds) {
    if (seconds <= 0)
      return;
    connect();
    seconds = std::max(seconds, precision_);
    sg4::Actor* self = sg4::Actor::self();
    heap_.push_back({sg4::Engine::get_clock() + seconds, (advances_ << 32) | (0xffffffffu - started_++), self,
                     ticket(self)});
    std::push_heap(heap_.begin(), heap_.end(), later);
    arm();
    sg4::this_actor::suspend();
  }

  // The sleeper wakes now, its date forgotten: its entry stays in the heap, stale (a new ticket),
  // and is dropped when it reaches the top (an O(log n) interruption instead of a heap rebuild).
  void interrupt(sg4::Actor* a) {
    tickets_[slot(a)]++;
    drop_stale_top();
    arm();
    a->resume();
  }

  // The timer of an earlier engine went with it (SimGrid 3.32 EngineImpl::shutdown frees timers).
  void reset() {
    // Actors change the heap from their own context (sleep.hpp): they must run one at a time.
    if (simgrid::config::get_value<int>("contexts/nthreads") != 1)
      throw InputError("command line", "--cfg=contexts/nthreads",
                       "1 (SimGrid's default: numasim runs its actors one at a time)");
    heap_.clear();
    tickets_.clear();
    timer_ = nullptr;
    advances_ = 0;
    started_ = 0;
  }

private:
  std::vector<Sleeper> heap_;
  std::vector<uint64_t> tickets_; // per actor (by pid): its current sleep
  uint64_t advances_ = 0;         // time advances so far
  uint64_t started_ = 0;          // sleeps begun since the last advance
  simgrid::kernel::timer::Timer* timer_ = nullptr;
  double timer_date_ = 0;
  double precision_ = 1e-9;
  bool connected_ = false;

  void connect() {
    if (connected_)
      return;
    connected_ = true;
    precision_ = simgrid::config::get_value<double>("surf/precision");
    sg4::Engine::on_time_advance_cb([this](double) { wake(); });
    sg4::Actor::on_termination_cb([this](const sg4::Actor& a) { forget(&a); });
  }

  static size_t slot(const sg4::Actor* a) { return static_cast<size_t>(a->get_pid()); }

  uint64_t ticket(const sg4::Actor* a) {
    const size_t k = slot(a);
    if (k >= tickets_.size())
      tickets_.resize(k + 1, 0);
    return tickets_[k];
  }

  bool stale(const Sleeper& s) const { return s.ticket != tickets_[slot(s.actor)]; }

  void drop_stale_top() {
    while (!heap_.empty() && stale(heap_.front())) {
      std::pop_heap(heap_.begin(), heap_.end(), later);
      heap_.pop_back();
    }
  }

  // Called in maestro right after SimGrid advanced its clock.
  void wake() {
    advances_++;
    started_ = 0;
    const double now = sg4::Engine::get_clock();
    bool woke = false;
    while (!heap_.empty() && std::fabs(heap_.front().date - now) < precision_) {
      const bool live = !stale(heap_.front());
      sg4::Actor* a = heap_.front().actor;
      std::pop_heap(heap_.begin(), heap_.end(), later);
      heap_.pop_back();
      if (live)
        a->resume();
      woke = true;
    }
    drop_stale_top();
    if (woke)
      arm();
  }

  // A daemon killed at the end of the run while it sleeps.
  void forget(const sg4::Actor* a) {
    auto end = std::remove_if(heap_.begin(), heap_.end(),
                              [this, a](const Sleeper& s) { return s.actor == a || stale(s); });
    if (end == heap_.end())
      return;
    heap_.erase(end, heap_.end());
    std::make_heap(heap_.begin(), heap_.end(), later);
    arm();
  }

  // One SimGrid timer at the earliest date, so that the clock stops there.
  void arm() {
    if (heap_.empty()) {
      disarm();
      return;
    }
    const double date = heap_.front().date;
    if (timer_ && timer_date_ == date)
      return;
    disarm();
    // Never fires: wake() runs first at that date and re-arms (the clock cannot pass the timer).
    timer_ = simgrid::kernel::timer::Timer::set(date, [this] { timer_ = nullptr; });
    timer_date_ = date;
  }

  void disarm() {
    if (timer_)
      timer_->remove();
    timer_ = nullptr;
  }
};

Sleeps& sleeps() {
  static Sleeps s;
  return s;
}

} // namespace

void sleep_for(double seconds) {
  sleeps().sleep_for(seconds);
}

void interrupt_sleep(sg4::Actor* actor) {
  sleeps().interrupt(actor);
}

void reset_sleeps() {
  sleeps().reset();
}

} // namespace numasim
