#include "train/trace.h"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "comm/communicator.h"
#include "core/atomic_file.h"
#include "core/timer.h"

namespace mt {

namespace {

// Rank r's own spans on track r; what a communicator's worker thread did for it (category
// "comm worker") on a second track, since those overlap the rank's own spans in time.
constexpr int kWorkerTrackOffset = 100000;
int track(int rank, bool worker) {
  return worker ? kWorkerTrackOffset + rank : rank;
}

}  // namespace

void Trace::add(const std::string& name, const char* cat, double begin, double end) {
  if (!enabled_) return;
  nlohmann::json e = {{"name", name},
                      {"cat", cat},
                      {"ph", "X"},
                      {"pid", 0},
                      {"tid", track(rank_, std::string_view(cat) == "comm worker")},
                      {"ts", (begin - t0_) * 1e6},
                      {"dur", (end - begin) * 1e6}};
  if (!events_.empty()) events_ += ",\n";
  events_ += e.dump();
}

Trace::Span::Span(Trace& t, std::string name, const char* cat)
    : t_(t), name_(std::move(name)), cat_(cat), begin_(t.enabled() ? now_seconds() : 0) {}

Trace::Span::~Span() {
  if (t_.enabled()) t_.add(name_, cat_, begin_, now_seconds());
}

void Trace::write(Communicator& world, const std::string& path) const {
  // Gather every rank's event text to rank 0: sizes first, then the bytes point-to-point.
  const int n = world.size(), me = world.rank();
  // Each process has its own t0: the rank's origin on the steady clock (shared by the
  // processes of one host) lets a reader put every rank on one time axis, e.g. to tell a
  // peer's late arrival at an all-to-all from the exchange's own time
  // (bench/moe_overlap_trace.py).
  const nlohmann::json origin = {{"name", "clock_origin"},
                                 {"ph", "M"},
                                 {"pid", 0},
                                 {"tid", track(me, false)},
                                 {"args", {{"steady_s", t0_}}}};
  const std::string mine = events_.empty() ? origin.dump() : events_ + ",\n" + origin.dump();
  std::vector<int64_t> sizes(n, 0);
  sizes[me] = int64_t(mine.size());
  world.all_reduce(sizes.data(), sizes.data(), n, DType::i64, ReduceOp::sum).wait();
  const int tag = make_p2p_tag(P2PKind::user, 0, 0);
  if (me != 0) {
    world.send(mine.data(), mine.size(), DType::u8, 0, tag).wait();
    return;
  }
  std::string all = "{\"traceEvents\": [\n";
  bool first = true;
  for (int r = 0; r < n; ++r) {
    std::string text = r == 0 ? mine : std::string(size_t(sizes[r]), '\0');
    if (r != 0) world.recv(text.data(), text.size(), DType::u8, r, tag).wait();
    // Name each rank's track so Perfetto shows "rank 3" instead of a thread id.
    for (const bool worker : {false, true}) {
      const std::string label = "rank " + std::to_string(r) + (worker ? " comm worker" : "");
      nlohmann::json meta = {{"name", "thread_name"},
                             {"ph", "M"},
                             {"pid", 0},
                             {"tid", track(r, worker)},
                             {"args", {{"name", label}}}};
      if (!first) all += ",\n";
      all += meta.dump();
      first = false;
    }
    if (!text.empty()) all += ",\n" + text;
  }
  all += "\n], \"displayTimeUnit\": \"ms\"}\n";
  write_file_atomic(path, all);
}

}  // namespace mt
