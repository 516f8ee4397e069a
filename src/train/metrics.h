// JSONL metrics (docs/contracts.md §6): one object per line, flushed per record so a crashed
// run still leaves every completed step on disk. Written by global rank 0 only.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace mt {

class MetricsWriter {
 public:
  MetricsWriter() = default;
  // Empty path: a writer that drops everything. A run that starts from a checkpoint taken
  // after step `resumed_after` > 0 continues the file instead of starting it over: the
  // records of steps <= resumed_after stay (the curve before the restart), the step records
  // after it go (those steps are about to be taken again), and so do the old memory
  // records (the new run writes its own); the kept lines are swapped in atomically.
  explicit MetricsWriter(const std::string& path, int resumed_after = 0);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void write(const nlohmann::json& record);
  // False for a device or pipe (--metrics /dev/null): no companion files beside those.
  bool is_regular_file() const;

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace mt
