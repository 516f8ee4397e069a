#include "comm/hybrid/direct_all_to_all.h"

#include <cstring>
#include <memory>
#include <utility>

#include "comm/hybrid/slot_tag.h"
#include "core/error.h"

namespace mt::hybrid {

namespace {

// Complete once every one of its works is.
class AllOf final : public Work::Impl {
 public:
  explicit AllOf(std::vector<Work> works) : works_(std::move(works)) {}
  bool test() override {
    while (next_ < works_.size() && works_[next_].test()) ++next_;
    return next_ == works_.size();
  }
  void wait() override { wait_after(0); }
  void wait_after(double waited_s) override {
    for (; next_ < works_.size(); ++next_) works_[next_].wait_after(waited_s);
  }

 private:
  std::vector<Work> works_;
  size_t next_ = 0;  // works before it are complete
};

std::vector<size_t> starts(const size_t* counts, size_t n) {
  std::vector<size_t> at(n + 1, 0);
  for (size_t g = 0; g < n; ++g) at[g + 1] = at[g] + counts[g];
  return at;
}

bool overlap(const char* a, size_t na, const char* b, size_t nb) {
  return na > 0 && nb > 0 && a < b + nb && b < a + na;
}

}  // namespace

void direct_all_to_all_v(const HierarchicalParts& q, const void* send, const size_t* sc, void* recv,
                         const size_t* rc, DType t, std::vector<char>& scratch,
                         const SleepingWait& pacing) {
  const int L = q.per_process, j = q.local_index, here = q.process_index;
  const size_t N = q.members.size(), es = dtype_size(t);
  const std::vector<size_t> sd = starts(sc, N), rd = starts(rc, N);
  // In place (the suite's, not the experts'): the rows to send are copied away first.
  const char* from = static_cast<const char*>(send);
  char* to = static_cast<char*>(recv);
  if (overlap(from, sd[N] * es, to, rd[N] * es)) {
    if (scratch.size() < sd[N] * es) scratch.resize(sd[N] * es);
    std::memcpy(scratch.data(), from, sd[N] * es);
    from = scratch.data();
  }
  std::vector<Work> works;
  // Between processes: sends first, so this member's rows leave at once.
  for (size_t g = 0; g < N; ++g) {
    const int p = int(g) / L, k = int(g) % L;
    if (p != here && sc[g] > 0)
      works.push_back(q.p2p[size_t(k)]->send(from + sd[g] * es, sc[g], t, p,
                                             slot_tag(j, kAllToAllTag, q.name)));
  }
  for (size_t g = 0; g < N; ++g) {
    const int p = int(g) / L, k = int(g) % L;
    if (p != here && rc[g] > 0)
      works.push_back(
          q.p2p[size_t(j)]->recv(to + rd[g] * es, rc[g], t, p, slot_tag(k, kAllToAllTag, q.name)));
  }
  // Inside the process: the other members' rows by the local backend, this member's own
  // by a copy.
  for (int k = 0; k < L; ++k) {
    const size_t g = size_t(here * L + k);
    if (k == j) {
      MT_CHECK(sc[g] == rc[g], "all_to_all_v on group ", q.name, ": sends ", sc[g],
               " to itself but receives ", rc[g]);
      if (sc[g] > 0) std::memcpy(to + rd[g] * es, from + sd[g] * es, sc[g] * es);
      continue;
    }
    if (sc[g] > 0) works.push_back(q.intra->send(from + sd[g] * es, sc[g], t, k, kAllToAllTag));
    if (rc[g] > 0) works.push_back(q.intra->recv(to + rd[g] * es, rc[g], t, k, kAllToAllTag));
  }
  wait_sleeping(Work(std::make_shared<AllOf>(std::move(works))), pacing);
}

}  // namespace mt::hybrid
