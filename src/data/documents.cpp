#include "data/documents.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace fs = std::filesystem;

namespace mt {

namespace {

constexpr size_t kBinaryProbeBytes = 64 << 10;

// Throws UsageError for an unreadable file; returns false for a binary one when allowed.
bool check_text_file(const std::string& path, bool binary_ok = false) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw UsageError(str("cannot read ", path, ": ", std::strerror(errno)));
  std::vector<char> head(kBinaryProbeBytes);
  const size_t n = std::fread(head.data(), 1, head.size(), f);
  const bool failed = std::ferror(f);
  std::fclose(f);
  MT_REQUIRE(!failed, "cannot read ", path, ": ", std::strerror(errno));
  const void* nul = std::memchr(head.data(), 0, n);
  if (nul && binary_ok) return false;
  MT_REQUIRE(!nul, path, " is not text: it holds a NUL byte at offset ",
             static_cast<const char*>(nul) - head.data(),
             " (prepare reads text; invalid UTF-8 is kept, binary files are refused; "
             "--skip-binary leaves them out of directories)");
  return true;
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

std::vector<CorpusSource> list_corpus_sources(const std::vector<std::string>& inputs,
                                              bool skip_binary, int* skipped) {
  MT_REQUIRE(!inputs.empty(), "give the text to prepare: files, directories or - for stdin");
  std::vector<CorpusSource> out;
  bool stdin_seen = false;
  for (const std::string& in : inputs) {
    if (in == "-") {
      MT_REQUIRE(!stdin_seen, "- (stdin) is given twice");
      stdin_seen = true;
      out.push_back({"-", 0});
      continue;
    }
    std::error_code ec;
    const fs::file_status st = fs::status(in, ec);
    MT_REQUIRE(!ec && fs::exists(st), "input ", in, " does not exist");
    if (fs::is_directory(st)) {
      std::vector<fs::path> files;
      fs::recursive_directory_iterator it(in, fs::directory_options::skip_permission_denied, ec);
      MT_REQUIRE(!ec, "cannot read directory ", in, ": ", ec.message());
      for (auto end = fs::recursive_directory_iterator(); it != end; it.increment(ec)) {
        MT_REQUIRE(!ec, "cannot read directory ", in, ": ", ec.message());
        if (hidden(it->path())) {
          if (it->is_directory()) it.disable_recursion_pending();
          continue;
        }
        if (it->is_regular_file() && !it->is_symlink()) files.push_back(it->path());
      }
      std::sort(files.begin(), files.end());
      for (const fs::path& p : files) {
        if (!check_text_file(p.string(), skip_binary)) {
          if (skipped) ++*skipped;
          continue;
        }
        out.push_back({p.string(), uint64_t(fs::file_size(p, ec))});
      }
      continue;
    }
    MT_REQUIRE(fs::is_regular_file(st), "input ", in,
               " is not a regular file or directory (give - to read stdin)");
    check_text_file(in);
    out.push_back({in, uint64_t(fs::file_size(in, ec))});
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
  in_ = in_is_stdin_ ? stdin : std::fopen(path.c_str(), "rb");
  if (!in_) throw UsageError(str("cannot read ", path, ": ", std::strerror(errno)));
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
