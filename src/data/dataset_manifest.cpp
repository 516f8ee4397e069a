#include "data/dataset_manifest.h"

#include <sys/stat.h>

#include <cerrno>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/input_file.h"
#include "core/json_depth.h"
#include "data/token_shard.h"

namespace fs = std::filesystem;

namespace mt {

namespace {

using nlohmann::json;

// What a value is, in a message: a number as written, anything else by its kind.
std::string describe(const json& v) {
  if (v.is_number()) return v.dump();
  if (v.is_null()) return "null";
  const std::string t = v.type_name();
  return (t == "object" || t == "array" ? "an " : "a ") + t;
}

json parse_manifest(const std::string& path, bool* not_json = nullptr) {
  const std::string text = read_input_file("dataset manifest", path, kMaxJsonInputBytes);
  if (json_nesting_depth(text) > kMaxJsonDepth) {  // not ours, whatever it is
    if (!not_json)
      throw UsageError(str(path, " nests deeper than ", kMaxJsonDepth,
                           " levels; it is not a dataset manifest of meshtrain prepare"));
    *not_json = true;
    return json();
  }
  try {
    return json::parse(text);
  } catch (const json::exception&) {
    if (not_json) {
      *not_json = true;
      return json();
    }
    throw UsageError(str(path,
                         " is not valid JSON: a dataset manifest of meshtrain prepare "
                         "is JSON (remake the dataset with meshtrain prepare)"));
  }
}

const json& field(const json& j, const char* key, const std::string& where) {
  const auto it = j.find(key);
  MT_REQUIRE(it != j.end(), where, " has no \"", key, "\"");
  return *it;
}

int64_t count_field(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  const bool ok = v.is_number_unsigned()
                      ? v.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max())
                      : v.is_number_integer() && v.get<int64_t>() >= 0;
  MT_REQUIRE(ok, where, ": \"", key, "\" is ", describe(v), ", not an integer >= 0");
  return v.get<int64_t>();
}

std::string string_field(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  MT_REQUIRE(v.is_string(), where, ": \"", key, "\" is ", describe(v), ", not a string");
  return v.get<std::string>();
}

// A file the manifest names: a plain name inside the dataset, so that a crafted manifest
// cannot point the run at /dev/zero or another dataset's files.
std::string file_in(const json& v, const fs::path& dir, const std::string& where,
                    const std::string& what) {
  MT_REQUIRE(v.is_string(), where, ": ", what, " is ", describe(v), ", not a file name");
  const std::string name = v.get<std::string>();
  MT_REQUIRE(!name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos,
             where, ": ", what, " '", name, "' is not the name of a file inside the dataset");
  return (dir / name).string();
}

DatasetSplit split_from_json(const json& j, const fs::path& dir, const std::string& where) {
  MT_REQUIRE(j.is_object(), where, " is ", describe(j), ", not an object");
  DatasetSplit s;
  const json& shards = field(j, "shards", where);
  MT_REQUIRE(shards.is_array() && !shards.empty(), where,
             ": \"shards\" must be a non-empty array of file names");
  for (const json& name : shards) s.shards.push_back(file_in(name, dir, where, "a shard"));
  s.docs = file_in(field(j, "docs", where), dir, where, "\"docs\"");
  s.tokens = count_field(j, "tokens", where);
  s.documents = count_field(j, "documents", where);
  s.bytes = uint64_t(count_field(j, "bytes", where));
  return s;
}

TokenizerRecord tokenizer_of(const json& j, const fs::path& dir, const std::string& where) {
  json tok = field(j, "tokenizer", where);
  MT_REQUIRE(tok.is_object(), where, ": \"tokenizer\" is ", describe(tok), ", not an object");
  if (tok.contains("file"))
    tok["file"] = file_in(tok["file"], dir, where + ": tokenizer", "\"file\"");
  return tokenizer_record_from_json(tok, where);
}

}  // namespace

bool is_dataset_dir(const std::string& dir) {
  const std::string path = (fs::path(dir) / kDatasetManifest).string();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 && (errno == ENOENT || errno == ENOTDIR)) return false;
  bool not_json = false;
  const json j = parse_manifest(path, &not_json);
  if (not_json || !j.is_object()) return false;  // a file of that name, not ours
  const auto format = j.find("meshtrain_dataset");
  return format != j.end() && format->is_number_integer() && format->get<int64_t>() > 0;
}

Dataset read_dataset(const std::string& dir_in) {
  const fs::path dir = fs::absolute(dir_in).lexically_normal();
  const std::string where = (fs::path(dir_in) / kDatasetManifest).string();
  const json j = parse_manifest(where);
  const auto format = j.is_object() ? j.find("meshtrain_dataset") : j.end();
  MT_REQUIRE(j.is_object() && format != j.end() && *format == kDatasetFormat, where,
             " is not a dataset manifest of format ", kDatasetFormat,
             " (remake the dataset with meshtrain prepare)");
  Dataset d;
  d.dir = dir.string();
  d.tokenizer = tokenizer_of(j, dir, where);
  d.rule = string_field(j, "documents", where);
  MT_REQUIRE(d.rule == "file" || d.rule == "separator" || d.rule == "blank", where,
             ": \"documents\" is '", d.rule, "', not file, separator or blank");
  if (j.contains("separator")) d.separator = string_field(j, "separator", where);
  d.train = split_from_json(field(j, "train", where), dir, where + ": train");
  if (j.contains("val")) d.val = split_from_json(j["val"], dir, where + ": val");
  for (const DatasetSplit* s : {&d.train, &d.val}) {
    int64_t sum = 0;
    for (const std::string& p : s->shards) sum += read_token_shard_header(p);
    MT_REQUIRE(sum == s->tokens, "dataset ", dir_in, ": its shards hold ", sum,
               " tokens but the manifest records ", s->tokens, " (a shard was replaced?)");
  }
  return d;
}

}  // namespace mt
