#include "train/checkpoint/manifest.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/file_checks.h"

namespace mt {

namespace {

using json = nlohmann::json;

constexpr const char* kFormatName = "meshtrain-sharded";

// Integer field with a range check: nlohmann's get<int>() would wrap silently.
int64_t get_int(const json& j, const char* key, int64_t lo, int64_t hi, const std::string& where) {
  MT_REQUIRE(j.is_object() && j.contains(key), where, ": no \"", key, "\"");
  const json& v = j.at(key);
  MT_REQUIRE(v.is_number_integer(), where, ": \"", key, "\" is ", v.dump(), ", not an integer");
  const bool ok = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(hi)
                                         : v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  MT_REQUIRE(ok, where, ": \"", key, "\" is ", v.dump(), ", outside ", lo, "..", hi);
  return v.is_number_unsigned() ? int64_t(v.get<uint64_t>()) : v.get<int64_t>();
}

int64_t as_int(const json& v, int64_t lo, int64_t hi, const std::string& where) {
  MT_REQUIRE(v.is_number_integer(), where, ": ", v.dump(), " is not an integer");
  const bool ok = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(hi)
                                         : v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  MT_REQUIRE(ok, where, ": ", v.dump(), " is outside ", lo, "..", hi);
  return v.is_number_unsigned() ? int64_t(v.get<uint64_t>()) : v.get<int64_t>();
}

double get_number(const json& j, const char* key, const std::string& where) {
  MT_REQUIRE(j.contains(key) && j.at(key).is_number(), where, ": \"", key,
             "\" is missing or not a number");
  return j.at(key).get<double>();
}

uint32_t parse_crc(const json& v, const std::string& where) {
  MT_REQUIRE(v.is_string() && v.get<std::string>().size() == 8, where, ": checksum ", v.dump(),
             " is not 8 hex digits");
  const std::string s = v.get<std::string>();
  uint32_t x = 0;
  for (char c : s) {
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    MT_REQUIRE(d >= 0, where, ": checksum ", v.dump(), " is not 8 hex digits");
    x = x << 4 | uint32_t(d);
  }
  return x;
}

}  // namespace

int64_t ManifestTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t ManifestSegment::elements() const {
  int64_t n = 0;
  for (const StridedRun& r : runs) n += r.elements();
  return n;
}

const ManifestTensor* Manifest::find_tensor(const std::string& name) const {
  for (const ManifestTensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

json model_json(const ModelConfig& c) {
  return {{"layers", c.layers},
          {"dim", c.dim},
          {"heads", c.heads},
          {"seq", c.seq},
          {"positions", c.position_rows()},
          {"vocab", c.vocab},
          {"experts", c.experts},
          {"topk", c.topk},
          {"moe_every", c.moe_every},
          {"capacity_factor", c.capacity_factor},
          {"aux_loss_coef", c.aux_loss_coef},
          {"router_bias_update", c.router_bias_update}};
}

namespace {

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
  return c;
}

}  // namespace

void require_same_model(const Manifest& m, const ModelConfig& run, const std::string& where) {
  const json a = model_json(m.model), b = model_json(run);
  // The shape decides the tensors; the MoE coefficients are training settings a resumed
  // run may change, like the learning rate.
  for (const char* k : {"layers", "dim", "heads", "vocab", "experts", "moe_every", "positions"}) {
    MT_REQUIRE(a[k] == b[k], where, ": the checkpoint holds a model with ", k, " ", a[k].dump(),
               ", this run's has ", b[k].dump(), " (a checkpoint of another model shape)");
  }
}

json manifest_json(const Manifest& m) {
  json tensors = json::array(), files = json::array(), segments = json::array();
  for (const ManifestTensor& t : m.tensors)
    tensors.push_back({{"name", t.name}, {"shape", t.shape}});
  for (const ManifestFile& f : m.files) {
    json crcs = json::array();
    for (uint32_t c : f.block_crc32c) crcs.push_back(crc32c_hex(c));
    files.push_back({{"name", f.name}, {"bytes", f.bytes}, {"crc32c", crcs}});
  }
  for (const ManifestSegment& s : m.segments) {
    json runs = json::array();
    for (const StridedRun& r : s.runs) runs.push_back({r.start, r.len, r.count, r.stride});
    segments.push_back(
        {{"tensor", s.tensor}, {"file", s.file}, {"offset", s.offset}, {"runs", runs}});
  }
  return {{"format", kFormatName}, {"format_version", kShardedFormatVersion},
          {"step", m.step},        {"data_position", m.data_position},
          {"seed", m.seed},        {"model", model_json(m.model)},
          {"layout", m.layout},    {"block_bytes", kShardBlockBytes},
          {"tensors", tensors},    {"files", files},
          {"segments", segments},  {"metadata", m.metadata}};
}

void check_manifest_coverage(const Manifest& m, const std::string& where) {
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    MT_REQUIRE(index.emplace(m.tensors[i].name, i).second, where, ": tensor ", m.tensors[i].name,
               " is listed twice");
  }
  // Every element of every tensor exactly once: the intervals of each tensor, sorted, must
  // tile 0..numel without a gap or an overlap.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> spans(m.tensors.size());
  for (const ManifestSegment& s : m.segments) {
    const auto it = index.find(s.tensor);
    MT_REQUIRE(it != index.end(), where, ": a segment in ", m.files[size_t(s.file)].name,
               " holds tensor ", s.tensor, ", which the manifest does not list");
    const int64_t numel = m.tensors[it->second].numel();
    for (const StridedRun& r : s.runs) {
      const int64_t last = r.start + (r.count - 1) * r.stride + r.len;
      MT_REQUIRE(r.start >= 0 && r.len > 0 && r.count >= 1 && (r.count == 1 || r.stride >= r.len) &&
                     last <= numel,
                 where, ": a segment of tensor ", s.tensor, " in ", m.files[size_t(s.file)].name,
                 " lies outside the tensor's ", numel, " elements");
    }
    for_each_interval(s.runs, [&](int64_t a, int64_t n) { spans[it->second].push_back({a, n}); });
  }
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    auto& v = spans[i];
    std::sort(v.begin(), v.end());
    int64_t next = 0;
    for (const auto& [a, n] : v) {
      MT_REQUIRE(a <= next, where, ": the manifest does not cover tensor ", m.tensors[i].name,
                 " (elements ", next, "..", a - 1, " are in no shard)");
      MT_REQUIRE(a >= next, where, ": tensor ", m.tensors[i].name, " has element ", a,
                 " stored twice");
      next = a + n;
    }
    MT_REQUIRE(next == m.tensors[i].numel(), where, ": the manifest does not cover tensor ",
               m.tensors[i].name, " (elements ", next, "..", m.tensors[i].numel() - 1,
               " are in no shard)");
  }
}

Manifest read_manifest(const std::string& dir) {
  const std::string path = dir + "/" + kManifestFile;
  const std::string where = path;
  MT_REQUIRE(file_id(path).has_value(), dir, ": no ", kManifestFile,
             " (not a sharded checkpoint, or a save that never finished)");
  require_input_file("checkpoint", path);
  std::ifstream in(path);
  MT_REQUIRE(in.good(), where, ": cannot read");
  json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    throw UsageError(str(where, ": not valid JSON (", e.what(), ")"));
  }
  MT_REQUIRE(j.is_object() && j.value("format", "") == kFormatName, where,
             ": not a meshtrain sharded checkpoint manifest");
  const int64_t version = get_int(j, "format_version", 0, INT_MAX, where);
  MT_REQUIRE(version == kShardedFormatVersion, where, ": unsupported format_version ", version,
             " (this meshtrain reads ", kShardedFormatVersion, ")");
  MT_REQUIRE(get_int(j, "block_bytes", 1, INT64_MAX, where) == int64_t(kShardBlockBytes), where,
             ": block_bytes must be ", kShardBlockBytes);
  Manifest m;
  m.step = int(get_int(j, "step", 0, INT_MAX, where));
  m.data_position = get_int(j, "data_position", 0, INT64_MAX, where);
  MT_REQUIRE(j.contains("seed") && j["seed"].is_number_unsigned(), where,
             ": \"seed\" is missing or not a non-negative integer");
  m.seed = j["seed"].get<uint64_t>();
  MT_REQUIRE(j.contains("model"), where, ": no \"model\"");
  m.model = parse_model(j["model"], where + " \"model\"");
  m.layout = j.value("layout", "");
  if (j.contains("metadata")) {
    MT_REQUIRE(j["metadata"].is_object(), where, ": \"metadata\" is not an object");
    for (const auto& [key, value] : j["metadata"].items()) {
      MT_REQUIRE(value.is_string(), where, ": metadata entry \"", key, "\" is not a string");
      m.metadata[key] = value.get<std::string>();
    }
  }
  for (const char* k : {"tensors", "files", "segments"})
    MT_REQUIRE(j.contains(k) && j[k].is_array(), where, ": \"", k, "\" is missing or not a list");
  for (const json& t : j["tensors"]) {
    MT_REQUIRE(t.is_object() && t.contains("name") && t["name"].is_string() &&
                   t.contains("shape") && t["shape"].is_array(),
               where, ": a tensor entry needs \"name\" and \"shape\"");
    ManifestTensor mt{t["name"].get<std::string>(), {}};
    for (const json& d : t["shape"])
      mt.shape.push_back(as_int(d, 1, INT64_MAX, where + " " + mt.name));
    m.tensors.push_back(std::move(mt));
  }
  for (const json& f : j["files"]) {
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
    for (const json& c : f["crc32c"])
      mf.block_crc32c.push_back(parse_crc(c, where + " " + mf.name));
    const uint64_t blocks = (mf.bytes + kShardBlockBytes - 1) / kShardBlockBytes;
    MT_REQUIRE(mf.block_crc32c.size() == blocks, where, ": ", mf.name, " records ",
               mf.block_crc32c.size(), " block checksums for ", mf.bytes, " bytes (", blocks,
               " blocks)");
    m.files.push_back(std::move(mf));
  }
  for (const json& s : j["segments"]) {
    MT_REQUIRE(s.is_object() && s.contains("tensor") && s["tensor"].is_string() &&
                   s.contains("runs") && s["runs"].is_array(),
               where, ": a segment needs \"tensor\", \"file\", \"offset\" and \"runs\"");
    ManifestSegment seg;
    seg.tensor = s["tensor"].get<std::string>();
    const std::string w = where + " segment of " + seg.tensor;
    seg.file = int(get_int(s, "file", 0, int64_t(m.files.size()) - 1, w));
    seg.offset = uint64_t(get_int(s, "offset", 0, INT64_MAX, w));
    for (const json& r : s["runs"]) {
      MT_REQUIRE(r.is_array() && r.size() == 4, w, ": a run is [start, len, count, stride]");
      seg.runs.push_back({as_int(r[0], 0, INT64_MAX, w), as_int(r[1], 1, INT64_MAX, w),
                          as_int(r[2], 1, INT64_MAX, w), as_int(r[3], 0, INT64_MAX, w)});
    }
    const ManifestFile& f = m.files[size_t(seg.file)];
    MT_REQUIRE(seg.offset % sizeof(float) == 0 &&
                   seg.offset + uint64_t(seg.elements()) * sizeof(float) <= f.bytes,
               where, ": the segment of tensor ", seg.tensor, " at byte ", seg.offset, " of ",
               f.name, " lies outside its ", f.bytes, " bytes");
    m.segments.push_back(std::move(seg));
  }
  check_manifest_coverage(m, where);
  return m;
}

}  // namespace mt
