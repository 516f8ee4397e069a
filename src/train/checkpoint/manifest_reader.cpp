// read_manifest (manifest.h): DIR/manifest.json, read as untrusted input. Every integer is
// range-checked as it is read and every sum or product of them is overflow-checked, before
// anything is allocated from it: a crafted run count of 2^62 once wrapped past the checks and
// allocated until memory ran out. The phases: the sealed object (checksum), its header
// fields, the tensors, the files (each present at its recorded size), the segments (inside
// their file and tensor, not overlapping within a file), then the coverage of every tensor.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/error.h"
#include "core/file_checks.h"
#include "core/input_file.h"
#include "train/checkpoint/checkpoint_dir.h"
#include "train/checkpoint/manifest.h"
#include "train/checkpoint/metadata_checksum.h"

namespace mt {

namespace {

using json = nlohmann::json;

// Elements of one tensor at most: its bytes (x4) and sums of two such counts stay in int64.
constexpr int64_t kMaxTensorElements = INT64_MAX / 16;
constexpr size_t kMaxTensorDims = 8;

int64_t as_int(const json& v, int64_t lo, int64_t hi, const std::string& where) {
  MT_REQUIRE(v.is_number_integer(), where, ": ", v.dump(), " is not an integer");
  const bool ok = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(hi)
                                         : v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  MT_REQUIRE(ok, where, ": ", v.dump(), " is outside ", lo, "..", hi);
  return v.is_number_unsigned() ? int64_t(v.get<uint64_t>()) : v.get<int64_t>();
}

// Integer field with a range check: nlohmann's get<int>() would wrap silently.
int64_t get_int(const json& j, const char* key, int64_t lo, int64_t hi, const std::string& where) {
  MT_REQUIRE(j.is_object() && j.contains(key), where, ": no \"", key, "\"");
  return as_int(j.at(key), lo, hi, where + " \"" + key + "\"");
}

double get_number(const json& j, const char* key, const std::string& where) {
  MT_REQUIRE(j.contains(key) && j.at(key).is_number(), where, ": \"", key,
             "\" is missing or not a number");
  return j.at(key).get<double>();
}

uint32_t parse_crc(const json& v, const std::string& where) {
  MT_REQUIRE(v.is_string() && v.get<std::string>().size() == 8, where, ": checksum ", v.dump(),
             " is not 8 hex digits");
  uint32_t x = 0;
  for (char c : v.get<std::string>()) {
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    MT_REQUIRE(d >= 0, where, ": checksum ", v.dump(), " is not 8 hex digits");
    x = x << 4 | uint32_t(d);
  }
  return x;
}

ModelConfig parse_model(const json& j, const std::string& where) {
  MT_REQUIRE(j.is_object(), where, ": \"model\" is not an object");
  ModelConfig c;
  c.layers = int(get_int(j, "layers", 1, INT_MAX, where));
  c.dim = int(get_int(j, "dim", 1, INT_MAX, where));
  c.heads = int(get_int(j, "heads", 1, INT_MAX, where));
  c.seq = int(get_int(j, "seq", 1, INT_MAX, where));
  c.positions = int(get_int(j, "positions", 1, INT_MAX, where));
  c.vocab = int(get_int(j, "vocab", 1, INT_MAX, where));
  c.experts = int(get_int(j, "experts", 0, INT_MAX, where));
  c.topk = int(get_int(j, "topk", 0, INT_MAX, where));
  c.moe_every = int(get_int(j, "moe_every", 1, INT_MAX, where));
  c.capacity_factor = float(get_number(j, "capacity_factor", where));
  c.aux_loss_coef = float(get_number(j, "aux_loss_coef", where));
  c.router_bias_update = float(get_number(j, "router_bias_update", where));
  if (j.contains("arch")) {  // a llama model (section 9); gpt2 manifests have no such keys
    MT_REQUIRE(j["arch"].is_string() && parse_arch(j["arch"].get<std::string>(), &c.arch), where,
               ": \"arch\" is not gpt2 or llama");
    c.kv_heads = int(get_int(j, "kv_heads", 1, INT_MAX, where));
    c.head_size = int(get_int(j, "head_dim", 1, INT_MAX, where));
    c.ffn_dim = int(get_int(j, "ffn_dim", 1, INT_MAX, where));
    c.rope_theta = get_number(j, "rope_theta", where);
    c.norm_eps = float(get_number(j, "norm_eps", where));
    MT_REQUIRE(j.contains("tie_embeddings") && j["tie_embeddings"].is_boolean(), where,
               ": \"tie_embeddings\" is not true or false");
    c.tie_embeddings = j["tie_embeddings"].get<bool>();
    if (j.contains("rope_scaling")) {  // absent: none (and every manifest before it)
      const json& s = j["rope_scaling"];
      const std::string at = where + " \"rope_scaling\"";
      MT_REQUIRE(s.is_object(), at, " is not an object");
      c.rope_scaling.factor = get_number(s, "factor", at);
      c.rope_scaling.low_freq_factor = get_number(s, "low_freq_factor", at);
      c.rope_scaling.high_freq_factor = get_number(s, "high_freq_factor", at);
      c.rope_scaling.original_max_position =
          int(get_int(s, "original_max_position", 1, INT_MAX, at));
      MT_REQUIRE(c.rope_scaling.factor > 0 &&
                     c.rope_scaling.high_freq_factor > c.rope_scaling.low_freq_factor,
                 at, " is not a llama3 scaling (factor > 0, high_freq_factor > low_freq_factor)");
    }
  }
  return c;
}

json read_sealed(const std::string& dir, const std::string& path) {
  MT_REQUIRE(file_id(path).has_value(), dir, ": no ", kManifestFile,
             " (not a sharded checkpoint, or a save that never finished)");
  const std::string text = read_input_file("checkpoint", path, kMaxJsonInputBytes);
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    throw UsageError(str(path, ": not valid JSON (", e.what(), ")"));
  }
  MT_REQUIRE(j.is_object() && j.value("format", "") == kShardedFormatName, path,
             ": not a meshtrain sharded checkpoint manifest");
  MT_REQUIRE(check_json_seal(j, path), path,
             " has no checksum: it was written by a meshtrain from before checkpoint metadata "
             "was checksummed, so its step, data position and tensor layout cannot be verified "
             "and it is not loaded (docs/checkpoints.md)");
  return j;
}

void parse_header(const json& j, const std::string& dir, const std::string& where, Manifest& m) {
  const int64_t version = get_int(j, "format_version", 0, INT_MAX, where);
  MT_REQUIRE(version == kShardedFormatVersion, where, ": unsupported format_version ", version,
             " (this meshtrain reads ", kShardedFormatVersion, ")");
  MT_REQUIRE(get_int(j, "block_bytes", 1, INT64_MAX, where) == int64_t(kShardBlockBytes), where,
             ": block_bytes must be ", kShardBlockBytes);
  m.step = int(get_int(j, "step", 0, INT_MAX, where));
  // The folder's name says the step too: a second witness for the field a resume trusts.
  bool tmp = false;
  const int named = parse_step_dir_name(
      std::filesystem::path(strip_trailing_slashes(dir)).filename().string(), &tmp);
  MT_REQUIRE(named < 0 || named == m.step, where, ": records step ", m.step, " but the folder is ",
             step_dir_name(named), "; load another checkpoint");
  m.data_position = get_int(j, "data_position", 0, INT64_MAX, where);
  MT_REQUIRE(j.contains("seed") && j["seed"].is_number_unsigned(), where,
             ": \"seed\" is missing or not a non-negative integer");
  m.seed = j["seed"].get<uint64_t>();
  MT_REQUIRE(j.contains("model"), where, ": no \"model\"");
  m.model = parse_model(j["model"], where + " \"model\"");
  MT_REQUIRE(!j.contains("layout") || j["layout"].is_string(), where, ": \"layout\" is not text");
  m.layout = j.value("layout", "");
  if (j.contains("metadata")) {
    MT_REQUIRE(j["metadata"].is_object(), where, ": \"metadata\" is not an object");
    for (const auto& [key, value] : j["metadata"].items()) {
      MT_REQUIRE(value.is_string(), where, ": metadata entry \"", key, "\" is not a string");
      m.metadata[key] = value.get<std::string>();
    }
  }
  if (j.contains("run")) {
    MT_REQUIRE(j["run"].is_object(), where, ": \"run\" is not an object");
    m.run = j["run"];
  }
  for (const char* k : {"tensors", "files", "segments"})
    MT_REQUIRE(j.contains(k) && j[k].is_array(), where, ": \"", k, "\" is missing or not a list");
}

void parse_tensors(const json& list, const std::string& where, Manifest& m) {
  for (const json& t : list) {
    MT_REQUIRE(t.is_object() && t.contains("name") && t["name"].is_string() &&
                   t.contains("shape") && t["shape"].is_array(),
               where, ": a tensor entry needs \"name\" and \"shape\"");
    ManifestTensor mt{t["name"].get<std::string>(), {}};
    MT_REQUIRE(t["shape"].size() <= kMaxTensorDims, where, ": tensor ", mt.name, " has ",
               t["shape"].size(), " dimensions (at most ", kMaxTensorDims, ")");
    int64_t numel = 1;
    for (const json& d : t["shape"]) {
      mt.shape.push_back(as_int(d, 1, kMaxTensorElements, where + " " + mt.name));
      MT_REQUIRE(
          !__builtin_mul_overflow(numel, mt.shape.back(), &numel) && numel <= kMaxTensorElements,
          where, ": tensor ", mt.name, " has more than ", kMaxTensorElements, " elements");
    }
    m.tensors.push_back(std::move(mt));
  }
}

void parse_files(const json& list, const std::string& where, Manifest& m) {
  for (const json& f : list) {
    MT_REQUIRE(f.is_object() && f.contains("name") && f["name"].is_string(), where,
               ": a file entry needs \"name\"");
    ManifestFile mf;
    mf.name = f["name"].get<std::string>();
    // Files live in the checkpoint directory itself: a name leading elsewhere is not ours.
    MT_REQUIRE(!mf.name.empty() && mf.name.find('/') == std::string::npos && mf.name != "." &&
                   mf.name != "..",
               where, ": file name \"", mf.name, "\" is not a plain name");
    mf.bytes = uint64_t(get_int(f, "bytes", 0, INT64_MAX, where + " " + mf.name));
    MT_REQUIRE(f.contains("crc32c") && f["crc32c"].is_array(), where, ": ", mf.name,
               " has no block checksums");
    const uint64_t blocks = (mf.bytes + kShardBlockBytes - 1) / kShardBlockBytes;
    MT_REQUIRE(f["crc32c"].size() == blocks, where, ": ", mf.name, " records ", f["crc32c"].size(),
               " block checksums for ", mf.bytes, " bytes (", blocks, " blocks)");
    for (const json& c : f["crc32c"])
      mf.block_crc32c.push_back(parse_crc(c, where + " " + mf.name));
    m.files.push_back(std::move(mf));
  }
}

ManifestSegment parse_segment(const json& s, const std::string& where, const Manifest& m,
                              const std::unordered_map<std::string, int64_t>& numel) {
  MT_REQUIRE(s.is_object() && s.contains("tensor") && s["tensor"].is_string() &&
                 s.contains("runs") && s["runs"].is_array(),
             where, ": a segment needs \"tensor\", \"file\", \"offset\" and \"runs\"");
  ManifestSegment seg;
  seg.tensor = s["tensor"].get<std::string>();
  const std::string w = where + " segment of " + seg.tensor;
  const auto t = numel.find(seg.tensor);
  MT_REQUIRE(t != numel.end(), w, ": the manifest does not list this tensor");
  MT_REQUIRE(!m.files.empty(), w, ": the manifest lists no files");
  seg.file = int(get_int(s, "file", 0, int64_t(m.files.size()) - 1, w));
  seg.offset = uint64_t(get_int(s, "offset", 0, INT64_MAX, w));
  int64_t elements = 0;
  for (const json& r : s["runs"]) {
    MT_REQUIRE(r.is_array() && r.size() == 4, w, ": a run is [start, len, count, stride]");
    const StridedRun run{as_int(r[0], 0, t->second, w), as_int(r[1], 1, t->second, w),
                         as_int(r[2], 1, t->second, w), as_int(r[3], 0, t->second, w)};
    MT_REQUIRE(run_within(run, t->second), w, ": run ", r.dump(), " lies outside the tensor's ",
               t->second, " elements");
    MT_REQUIRE(
        !__builtin_add_overflow(elements, run.len * run.count, &elements) && elements <= t->second,
        w, ": holds more elements than the tensor's ", t->second);
    seg.runs.push_back(run);
  }
  const ManifestFile& f = m.files[size_t(seg.file)];
  const uint64_t bytes = uint64_t(elements) * sizeof(float);  // < 2^63: elements <= INT64_MAX/16
  MT_REQUIRE(
      seg.offset % sizeof(float) == 0 && seg.offset <= f.bytes && bytes <= f.bytes - seg.offset,
      where, ": the segment of tensor ", seg.tensor, " at byte ", seg.offset, " of ", f.name,
      " lies outside its ", f.bytes, " bytes");
  return seg;
}

// Within one file the segments are disjoint (the writer lays them end to end): so the
// elements they claim are bounded by the bytes on disk.
void check_segments_disjoint(const Manifest& m, const std::string& where) {
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> by_file(m.files.size());
  for (const ManifestSegment& s : m.segments)
    by_file[size_t(s.file)].push_back(
        {s.offset, s.offset + uint64_t(s.elements()) * sizeof(float)});
  for (size_t f = 0; f < by_file.size(); ++f) {
    auto& v = by_file[f];
    std::sort(v.begin(), v.end());
    for (size_t i = 1; i < v.size(); ++i)
      MT_REQUIRE(v[i].first >= v[i - 1].second, where, ": two segments of ", m.files[f].name,
                 " overlap at byte ", v[i].first, "; the manifest is damaged");
  }
}

// Every file the manifest lists is there, regular, at its recorded size: what the checks
// above bounded by the recorded sizes is then bounded by real bytes.
void check_files_present(const Manifest& m, const std::string& dir) {
  for (size_t fi = 0; fi < m.files.size(); ++fi) {
    const ManifestFile& f = m.files[fi];
    const std::string path = dir + "/" + f.name;
    struct stat st {};
    MT_REQUIRE(::stat(path.c_str(), &st) == 0, path, ": missing shard (", std::strerror(errno),
               "), which holds ", tensors_in(m, int(fi), 0, UINT64_MAX),
               "; load another checkpoint");
    const bool regular = S_ISREG(st.st_mode);
    MT_REQUIRE(regular && uint64_t(st.st_size) == f.bytes, path, ": ",
               regular ? "" : "not a regular file; ", "size ", st.st_size,
               " bytes, the manifest records ", f.bytes, " (truncated or replaced), it holds ",
               tensors_in(m, int(fi), regular ? uint64_t(st.st_size) : 0, UINT64_MAX),
               "; load another checkpoint");
  }
}

}  // namespace

Manifest read_manifest(const std::string& dir) {
  const std::string path = dir + "/" + kManifestFile;
  const json j = read_sealed(dir, path);
  Manifest m;
  parse_header(j, dir, path, m);
  parse_tensors(j["tensors"], path, m);
  parse_files(j["files"], path, m);
  std::unordered_map<std::string, int64_t> numel;
  for (const ManifestTensor& t : m.tensors) numel.emplace(t.name, t.numel());
  for (const json& s : j["segments"]) m.segments.push_back(parse_segment(s, path, m, numel));
  check_segments_disjoint(m, path);
  check_files_present(m, dir);
  check_manifest_coverage(m, path);
  return m;
}

}  // namespace mt
