// JSONL metrics (CONTRACTS.md §6): one object per line, flushed per record so a crashed
// run still leaves every completed step on disk. Written by global rank 0 only.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace mt {

class MetricsWriter {
 public:
  MetricsWriter() = default;
  // Empty path: a writer that drops everything.
  explicit MetricsWriter(const std::string& path);
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
