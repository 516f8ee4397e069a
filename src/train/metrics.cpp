#include "train/metrics.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace mt {

MetricsWriter::MetricsWriter(const std::string& path) : path_(path) {
  if (path.empty()) return;
  file_ = std::fopen(path.c_str(), "w");
  MT_REQUIRE(file_ != nullptr, "--metrics ", path, ": cannot open for writing (",
             std::strerror(errno), ")");
}

MetricsWriter::~MetricsWriter() {
  if (file_) std::fclose(file_);
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (!file_) return;
  const std::string line = record.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0)
    throw RuntimeError(str("--metrics ", path_, ": write failed (", std::strerror(errno), ")"));
}

bool MetricsWriter::is_regular_file() const {
  struct stat st {};
  return file_ && ::fstat(::fileno(file_), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace mt
