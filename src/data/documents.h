// The corpus of `meshtrain prepare` as a stream of documents: files, directories (every
// regular file below, in path order, hidden names skipped) and stdin ("-"), read line by
// line so a corpus larger than memory streams through. Bytes are kept exactly as they are
// (invalid UTF-8 included); a NUL byte means the input is not text and is refused.
//
// Where a document ends is the user's rule:
//   file       one document per input (an empty file is an empty document);
//   separator  a line holding only the separator (default "%", the fortune-file format;
//              a trailing '\r' is allowed) ends a document and belongs to none, so two
//              separators in a row make an empty document;
//   blank      documents are the runs of non-blank lines; blank lines (only spaces, tabs,
//              '\r') belong to none.
// A document never spans two inputs.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace mt {

enum class DocumentRule { file, separator, blank };

// "file" | "separator" | "blank"; throws UsageError otherwise.
DocumentRule parse_document_rule(const std::string& name);
const char* document_rule_name(DocumentRule r);

struct CorpusSource {
  std::string path;    // "-" for stdin
  uint64_t bytes = 0;  // size of a file; 0 for stdin (unknown)
};

struct CorpusListing {
  std::vector<CorpusSource> sources;
  int skipped_binary = 0;                    // binary files left out (skip_binary)
  std::vector<std::string> skipped_outputs;  // directories left out as prepare's own output
};

// Says whether a directory found inside an input directory is an output of prepare (a
// dataset, or the directory being written), and so is left out, not read as text.
using OwnOutputTest = std::function<bool(const std::string& dir)>;

// Expands and checks the inputs before anything is written: every path exists and can be
// read, no file begins with binary content (a NUL in its first 64 KiB), stdin at most once.
// Inside a directory: hidden names and symbolic links are left out (Debian's fortunes has
// a *.u8 link beside every file), and so is every directory `own_output` recognises (each
// listed in skipped_outputs); a subdirectory that cannot be read, or an entry that is
// neither a file, a directory nor a link (a FIFO, a socket, a device), is an error naming
// it, never skipped in silence. skip_binary: binary files found inside directories are left
// out and counted instead of refused. Throws UsageError naming the path.
CorpusListing list_corpus_sources(const std::vector<std::string>& inputs, bool skip_binary = false,
                                  const OwnOutputTest& own_output = {});

class DocumentReader {
 public:
  DocumentReader(std::vector<CorpusSource> sources, DocumentRule rule, std::string separator = "%");
  ~DocumentReader();
  DocumentReader(const DocumentReader&) = delete;
  DocumentReader& operator=(const DocumentReader&) = delete;

  // The next document's bytes; false when every input is read. Throws UsageError for a
  // NUL byte (naming the input and offset) and RuntimeError for a read error.
  bool next(std::string& doc);

  uint64_t bytes_read() const { return bytes_read_; }
  uint64_t total_bytes() const { return total_bytes_; }  // 0 when stdin is among the inputs

 private:
  bool open_next_source();
  void close_source();
  // One line including its '\n' (the last line of an input may lack it); false at the end.
  bool read_line();

  std::vector<CorpusSource> sources_;
  DocumentRule rule_;
  std::string separator_;
  size_t next_source_ = 0;
  std::FILE* in_ = nullptr;
  bool in_is_stdin_ = false;
  uint64_t offset_ = 0;  // in the current input
  char* line_ = nullptr;
  size_t line_cap_ = 0;
  size_t line_len_ = 0;
  uint64_t bytes_read_ = 0, total_bytes_ = 0;
};

}  // namespace mt
