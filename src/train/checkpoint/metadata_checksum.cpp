#include "train/checkpoint/metadata_checksum.h"

#include <nlohmann/json.hpp>

#include "core/crc32c.h"
#include "core/error.h"

namespace mt {

namespace {

std::string canonical_checksum(nlohmann::json j) {
  j.erase(kChecksumKey);
  const std::string text = j.dump();
  return crc32c_hex(crc32c_update(0, text.data(), text.size()));
}

}  // namespace

void seal_json(nlohmann::json& j) {
  MT_CHECK(j.is_object(), "only an object carries a checksum");
  j[kChecksumKey] = canonical_checksum(j);
}

bool check_json_seal(const nlohmann::json& j, const std::string& file) {
  if (!j.is_object() || !j.contains(kChecksumKey)) return false;
  const nlohmann::json& recorded = j.at(kChecksumKey);
  MT_REQUIRE(recorded.is_string(), file, ": \"", kChecksumKey, "\" is ", recorded.dump(),
             ", not a checksum: the file is damaged");
  const std::string actual = canonical_checksum(j);
  MT_REQUIRE(recorded.get<std::string>() == actual, file, " fails its checksum (crc32c ", actual,
             ", recorded ", recorded.get<std::string>(),
             "): its metadata is damaged or was edited; load another checkpoint");
  return true;
}

}  // namespace mt
