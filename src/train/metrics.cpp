#include "train/metrics.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/input_file.h"
#include "core/json_depth.h"
#include "core/output_parents.h"

namespace mt {

namespace {

bool is_regular(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Whether a line of an earlier run's file stays when a run resumes after step `resumed_after`.
// A line that is not JSON stays as it is (nothing of the user's is dropped unread), except
// a torn last line, the record a crash cut off mid-write.
bool keep_line(const std::string& line, bool torn, int resumed_after) {
  if (line.empty()) return false;
  if (json_nesting_depth(line) > kMaxJsonDepth) return !torn;  // not a record of ours: as is
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const std::exception&) {
    return !torn;
  }
  if (!j.is_object()) return true;
  const auto event = j.find("event");
  if (event != j.end() && event->is_string() && event->get<std::string>() == "memory") return false;
  const auto step = j.find("step");
  return step == j.end() || !step->is_number() || step->get<double>() <= resumed_after;
}

// Rewrites `path` with the lines an earlier run left that stay (keep_line), through a
// temporary beside it and a rename (core/atomic_file.h), so a failure here never leaves half
// a file and no name of the user's is borrowed for the temporary.
void keep_records_up_to(const std::string& given, int resumed_after) {
  // Through a link the file it names is rewritten (as writing it would), not the link.
  std::error_code ec;
  const std::filesystem::path real = std::filesystem::canonical(given, ec);
  const std::string path = ec ? given : real.string();
  const std::string text = read_input_file("--metrics", path, kMaxTextInputBytes);
  std::string kept;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    const bool torn = end == std::string::npos;
    if (torn) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    if (keep_line(line, torn, resumed_after)) kept += line + "\n";
    begin = end + 1;
  }
  write_file_atomic(path, kept);
}

// The metrics stream, opened without ever blocking: opening a FIFO for writing would wait
// for a reader, forever; non-blocking, it fails at once (ENXIO) or opens and is refused
// below. What is there must be a regular file or a character device (/dev/null): the stream
// kind of output (core/file_checks.h, OutputUse::stream).
std::FILE* open_stream(const std::string& path, bool append) {
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK | (append ? O_APPEND : O_TRUNC);
  create_parent_directories(path);
  const int fd = ::open(path.c_str(), flags, 0666);
  MT_REQUIRE(fd >= 0, "--metrics ", path,
             errno == ENXIO ? std::string(" is a FIFO (named pipe)")
                            : str(": cannot open for writing (", std::strerror(errno), ")"),
             "; give a regular file (or a character device such as /dev/null)");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISCHR(st.st_mode))) {
    ::close(fd);
    throw UsageError(
        str("--metrics ", path, " is not a regular file or a character device such as /dev/null"));
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // writes wait as usual
  std::FILE* f = ::fdopen(fd, append ? "a" : "w");
  if (!f) {
    const int err = errno;
    ::close(fd);
    throw RuntimeError(
        str("--metrics ", path, ": cannot open for writing (", std::strerror(err), ")"));
  }
  return f;
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, int resumed_after) : path_(path) {
  if (path.empty()) return;
  const bool continues = resumed_after > 0 && is_regular(path);
  if (continues) keep_records_up_to(path, resumed_after);
  file_ = open_stream(path, continues);
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
