// Checksums over checkpoint metadata: a checkpoint's manifest.json (sharded) or state.json
// (global), and the --save root's checkpoint_log.json. A load trusts these files for the
// step, the data position and where every tensor lies; one flipped bit in "step" resumed at
// the wrong step while the tensor files' checksums still matched.
//
// The checksum is a field of the object itself, "checksum": the CRC-32C of the object's
// canonical text without that field (nlohmann's compact dump: keys sorted, numbers in their
// shortest round-trip form). So the file stays plain JSON, reformatting it keeps it valid,
// and any change of a value, key or nesting fails it.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

namespace mt {

inline constexpr const char* kChecksumKey = "checksum";

// Sets j["checksum"] (j: an object).
void seal_json(nlohmann::json& j);

// True when j carries a checksum and it matches; false when it carries none (written before
// metadata checksums). Throws UsageError "<file>: ... fails its checksum" on a mismatch or a
// malformed checksum.
bool check_json_seal(const nlohmann::json& j, const std::string& file);

}  // namespace mt
