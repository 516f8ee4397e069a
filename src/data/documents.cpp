#include "data/documents.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>

#include "core/error.h"
#include "core/input_file.h"

namespace fs = std::filesystem;

namespace mt {

namespace {

constexpr size_t kBinaryProbeBytes = 64 << 10;

// The size of a text file, or nullopt for a binary one when binary_ok. Opened through
// core/input_file.h: a FIFO put in place of a listed file is refused, not waited on.
// Throws UsageError for an unreadable or binary file.
std::optional<uint64_t> check_text_file(const std::string& path, bool binary_ok = false) {
  const InputFile f("input", path, kStreamedInputBytes);
  std::vector<char> head(kBinaryProbeBytes);
  ssize_t n = 0;
  do {
    n = ::pread(f.fd(), head.data(), head.size(), 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) throw RuntimeError(str("cannot read ", path, ": ", std::strerror(errno)));
  const void* nul = std::memchr(head.data(), 0, size_t(n));
  if (nul && binary_ok) return std::nullopt;
  MT_REQUIRE(!nul, path, " is not text: it holds a NUL byte at offset ",
             static_cast<const char*>(nul) - head.data(),
             " (prepare reads text; invalid UTF-8 is kept, binary files are refused; "
             "--skip-binary leaves them out of directories)");
  return f.size();
}

std::string kind_of(fs::file_type t) {
  switch (t) {
    case fs::file_type::fifo:
      return "a FIFO (named pipe)";
    case fs::file_type::socket:
      return "a socket";
    case fs::file_type::block:
    case fs::file_type::character:
      return "a device";
    default:
      return "not a regular file";
  }
}

bool hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

bool blank_line(const char* s, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n') return false;
  return true;
}

}  // namespace

DocumentRule parse_document_rule(const std::string& name) {
  if (name == "file") return DocumentRule::file;
  if (name == "separator") return DocumentRule::separator;
  if (name == "blank") return DocumentRule::blank;
  throw UsageError(str("--documents must be file, separator or blank (got '", name, "')"));
}

const char* document_rule_name(DocumentRule r) {
  switch (r) {
    case DocumentRule::file:
      return "file";
    case DocumentRule::separator:
      return "separator";
    case DocumentRule::blank:
      return "blank";
  }
  return "?";
}

namespace {

// Every regular file below `root`, in path order (see list_corpus_sources for what is left
// out). An explicit stack: a deep tree costs memory, not the call stack.
std::vector<fs::path> files_below(const std::string& root, const OwnOutputTest& own_output,
                                  CorpusListing& listing) {
  std::vector<fs::path> files, pending{fs::path(root)};
  while (!pending.empty()) {
    const fs::path dir = pending.back();
    pending.pop_back();
    std::error_code ec;
    fs::directory_iterator it(dir, ec);
    // Readable first, so that an unreadable directory is named as such; then, below the
    // root, whether it is an output of prepare.
    if (!ec && dir != fs::path(root) && own_output && own_output(dir.string())) {
      listing.skipped_outputs.push_back(dir.string());
      continue;
    }
    for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
      const fs::path& p = it->path();
      if (hidden(p)) continue;
      const fs::file_status st = it->symlink_status(ec);
      if (ec) break;
      if (fs::is_symlink(st)) continue;
      if (fs::is_regular_file(st))
        files.push_back(p);
      else if (fs::is_directory(st))
        pending.push_back(p);
      else
        throw UsageError(str("input ", p.string(), " is ", kind_of(st.type()), " inside ", root,
                             ": prepare reads regular files; move it out, or give the files "
                             "to read"));
    }
    MT_REQUIRE(!ec, "input directory ", dir.string(), " ", open_failure_reason(ec.value()),
               ": prepare reads every file below ", root,
               "; make it readable, or give the files to read");
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

CorpusListing list_corpus_sources(const std::vector<std::string>& inputs, bool skip_binary,
                                  const OwnOutputTest& own_output) {
  MT_REQUIRE(!inputs.empty(), "give the text to prepare: files, directories or - for stdin");
  CorpusListing out;
  bool stdin_seen = false;
  for (const std::string& in : inputs) {
    if (in == "-") {
      MT_REQUIRE(!stdin_seen, "- (stdin) is given twice");
      stdin_seen = true;
      out.sources.push_back({"-", 0});
      continue;
    }
    struct stat st {};
    MT_REQUIRE(::stat(in.c_str(), &st) == 0, "input ", in, " ", open_failure_reason(errno));
    if (S_ISDIR(st.st_mode)) {
      MT_REQUIRE(!own_output || !own_output(in), "input ", in,
                 " is a dataset written by meshtrain prepare, not text; give the text it was "
                 "made from");
      for (const fs::path& p : files_below(in, own_output, out)) {
        const std::optional<uint64_t> bytes = check_text_file(p.string(), skip_binary);
        if (bytes)
          out.sources.push_back({p.string(), *bytes});
        else
          ++out.skipped_binary;
      }
      continue;
    }
    MT_REQUIRE(S_ISREG(st.st_mode), "input ", in,
               " is not a regular file or directory (give - to read stdin)");
    out.sources.push_back({in, *check_text_file(in)});
  }
  return out;
}

DocumentReader::DocumentReader(std::vector<CorpusSource> sources, DocumentRule rule,
                               std::string separator)
    : sources_(std::move(sources)), rule_(rule), separator_(std::move(separator)) {
  for (const CorpusSource& s : sources_) {
    if (s.path == "-") {
      total_bytes_ = 0;
      break;
    }
    total_bytes_ += s.bytes;
  }
}

DocumentReader::~DocumentReader() {
  close_source();
  std::free(line_);
}

bool DocumentReader::open_next_source() {
  if (next_source_ >= sources_.size()) return false;
  const std::string& path = sources_[next_source_++].path;
  in_is_stdin_ = path == "-";
  if (in_is_stdin_) {
    in_ = stdin;
  } else {
    // The one bounded reader opens it (no wait on a FIFO swapped in since the listing); the
    // stream reads a duplicate of its descriptor.
    const InputFile file("input", path, kStreamedInputBytes);
    const int fd = ::dup(file.fd());
    in_ = fd >= 0 ? ::fdopen(fd, "rb") : nullptr;
    if (!in_) {
      const int err = errno;
      if (fd >= 0) ::close(fd);
      throw RuntimeError(str("cannot read ", path, ": ", std::strerror(err)));
    }
  }
  offset_ = 0;
  return true;
}

void DocumentReader::close_source() {
  if (in_ && !in_is_stdin_) std::fclose(in_);
  in_ = nullptr;
}

bool DocumentReader::read_line() {
  errno = 0;
  const ssize_t n = ::getline(&line_, &line_cap_, in_);
  if (n < 0) {
    const std::string& path = sources_[next_source_ - 1].path;
    if (std::ferror(in_))
      throw RuntimeError(
          str("cannot read ", path == "-" ? "stdin" : path, ": ", std::strerror(errno)));
    return false;
  }
  line_len_ = size_t(n);
  if (const void* nul = std::memchr(line_, 0, line_len_)) {
    const std::string& path = sources_[next_source_ - 1].path;
    throw UsageError(str(path == "-" ? "stdin" : path,
                         " is not text: it holds a NUL byte at offset ",
                         offset_ + uint64_t(static_cast<const char*>(nul) - line_),
                         " (prepare reads text; binary input is refused)"));
  }
  offset_ += line_len_;
  bytes_read_ += line_len_;
  return true;
}

bool DocumentReader::next(std::string& doc) {
  doc.clear();
  for (;;) {
    if (!in_ && !open_next_source()) return false;
    bool pending = false;  // something of a document was read since the last one ended
    while (read_line()) {
      if (rule_ == DocumentRule::separator) {
        size_t n = line_len_;
        if (n && line_[n - 1] == '\n') --n;
        if (n && line_[n - 1] == '\r') --n;
        if (n == separator_.size() && std::memcmp(line_, separator_.data(), n) == 0) return true;
        doc.append(line_, line_len_);
        pending = true;
      } else if (rule_ == DocumentRule::blank) {
        if (blank_line(line_, line_len_)) {
          if (pending) return true;
          continue;
        }
        doc.append(line_, line_len_);
        pending = true;
      } else {
        doc.append(line_, line_len_);
      }
    }
    close_source();
    // file: every input is one document, even an empty one.
    if (rule_ == DocumentRule::file || pending) return true;
  }
}

}  // namespace mt
