#include "data/corpus.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/rng.h"
#include "data/cache_dir.h"
#include "data/token_shard.h"

namespace fs = std::filesystem;

namespace mt {
namespace {

// Bump when the preparation steps change, so existing shards count as stale.
constexpr int kCorpusFormat = 1;
constexpr uint64_t kShuffleSeed = 0x6d65736874726169ull;  // "meshtrai"

struct Source {
  std::vector<std::string> fortunes;
  uint64_t hash = 0;  // over file names and contents
  int files = 0;
};

std::string read_whole(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw RuntimeError(str("cannot read ", path.string()));
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

uint64_t hash_bytes(uint64_t h, std::string_view s) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;  // FNV-1a
  return h;
}

Source read_source(const std::string& dir) {
  Source src;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return src;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const fs::path& p = entry.path();
    if (!entry.is_regular_file() || entry.is_symlink()) continue;
    if (p.extension() == ".dat" || p.extension() == ".u8") continue;
    files.push_back(p);
  }
  std::sort(files.begin(), files.end());
  src.hash = 1469598103934665603ull;
  for (const fs::path& p : files) {
    std::string text = read_whole(p);
    src.hash = hash_bytes(hash_bytes(src.hash, p.filename().string()), text);
    for (std::string& f : split_fortunes(text)) src.fortunes.push_back(std::move(f));
    ++src.files;
  }
  return src;
}

std::string hex(uint64_t v) {
  std::ostringstream os;
  os << std::hex << v;
  return os.str();
}

void write_bytes_shard(const std::string& path, const std::string& text) {
  std::vector<uint16_t> tokens(text.size());
  // std::string holds char: go through unsigned char so bytes >= 0x80 stay 128..255.
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  write_token_shard(path, std::span<const uint16_t>(tokens));
}

// The manifest a fresh build would write, minus the token counts.
nlohmann::json expected_manifest(const Source& src, double val_fraction) {
  return {{"format", kCorpusFormat},
          {"source_hash", hex(src.hash)},
          {"source_files", src.files},
          {"fortunes", src.fortunes.size()},
          {"val_fraction", val_fraction}};
}

// Returns the recorded manifest when it matches `want` (when want is null: any manifest of this
// format) and both shards agree with its token counts; otherwise null.
nlohmann::json up_to_date(const fs::path& out, const nlohmann::json* want) {
  nlohmann::json have;
  try {
    have = nlohmann::json::parse(read_whole(out / "manifest.json"));
    if (want) {
      for (const auto& [key, value] : want->items())
        if (!have.contains(key) || have[key] != value) return nullptr;
    } else if (have.value("format", 0) != kCorpusFormat) {
      return nullptr;
    }
    if (read_token_shard_header((out / "train.bin").string()) != have.at("train_tokens") ||
        read_token_shard_header((out / "val.bin").string()) != have.at("val_tokens"))
      return nullptr;
  } catch (const std::exception&) {
    return nullptr;  // missing or unreadable: rebuild
  }
  return have;
}

CorpusFiles files_from(const fs::path& out, const nlohmann::json& manifest, bool rebuilt) {
  CorpusFiles f;
  f.train_path = (out / "train.bin").string();
  f.val_path = (out / "val.bin").string();
  f.train_tokens = manifest.at("train_tokens");
  f.val_tokens = manifest.at("val_tokens");
  f.fortunes = manifest.at("fortunes");
  f.rebuilt = rebuilt;
  return f;
}

}  // namespace

std::string corpus_cache_dir(const char* xdg_cache_home, const char* home) {
  return (fs::path(meshtrain_cache_dir(xdg_cache_home, home)) / "fortunes").string();
}

std::string default_corpus_dir() {
  return (fs::path(meshtrain_cache_dir()) / "fortunes").string();
}
std::string default_fortunes_source_dir() {
  return "/usr/share/games/fortunes";
}

std::vector<std::string> split_fortunes(std::string_view text) {
  std::vector<std::string> out;
  std::string current;
  auto flush = [&] {
    size_t end = current.find_last_not_of(" \t\r\n");
    if (end != std::string::npos) out.push_back(current.substr(0, end + 1) + "\n");
    current.clear();
  };
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    size_t line_end = nl == std::string_view::npos ? text.size() : nl;
    std::string_view line = text.substr(pos, line_end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line == "%") {
      flush();
    } else {
      current.append(line);
      current.push_back('\n');
    }
    pos = line_end + 1;
  }
  flush();
  return out;
}

std::string join_fortunes(const std::vector<std::string>& fortunes) {
  std::string text;
  for (const std::string& f : fortunes) {
    text += f;
    text += "%\n";
  }
  return text;
}

CorpusFiles prepare_fortunes_corpus(const std::string& out_dir, double val_fraction,
                                    const std::string& source_dir) {
  MT_REQUIRE(val_fraction > 0 && val_fraction < 1, "validation fraction ", val_fraction,
             " must be between 0 and 1 (exclusive)");
  const fs::path out(out_dir);
  Source src = read_source(source_dir);
  if (src.fortunes.size() < 2) {
    // Without the package we can still use shards prepared earlier.
    nlohmann::json have = up_to_date(out, nullptr);
    if (!have.is_null()) return files_from(out, have, false);
    throw UsageError(str("the default corpus needs Debian's fortunes package, but ", source_dir,
                         " holds no fortunes; install it with: apt-get install fortunes (or run "
                         "scripts/setup.sh), or pass --data FILE"));
  }
  nlohmann::json want = expected_manifest(src, val_fraction);
  nlohmann::json have = up_to_date(out, &want);
  if (!have.is_null()) return files_from(out, have, false);

  // Fisher-Yates with counter-based draws: the order depends only on the fortunes.
  std::vector<std::string>& f = src.fortunes;
  for (size_t i = f.size() - 1; i > 0; --i) {
    size_t j = mix64(mix64(kShuffleSeed) + i) % (i + 1);
    std::swap(f[i], f[j]);
  }
  size_t n_val = static_cast<size_t>(std::llround(val_fraction * static_cast<double>(f.size())));
  n_val = std::clamp<size_t>(n_val, 1, f.size() - 1);
  std::vector<std::string> val(f.begin(), f.begin() + static_cast<ptrdiff_t>(n_val));
  std::vector<std::string> train(f.begin() + static_cast<ptrdiff_t>(n_val), f.end());
  const std::string train_text = join_fortunes(train);
  const std::string val_text = join_fortunes(val);

  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) throw RuntimeError(str("cannot create ", out_dir, ": ", ec.message()));
  write_bytes_shard((out / "train.bin").string(), train_text);
  write_bytes_shard((out / "val.bin").string(), val_text);
  want["train_tokens"] = train_text.size();
  want["val_tokens"] = val_text.size();
  want["source_dir"] = source_dir;
  // Written last: a crash before this line leaves no manifest, hence a rebuild next time.
  write_file_atomic((out / "manifest.json").string(), want.dump(2) + "\n");
  return files_from(out, want, true);
}

}  // namespace mt
