// CRC-32C (Castagnoli), the checksum of checkpoint files: iSCSI's, ext4's and gRPC's, with
// a hardware instruction on every x86-64 CPU since 2008 (SSE4.2), so verifying a file costs
// about as much as reading it. A flipped bit anywhere in a file changes it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace mt {

// Extends `crc` (0 for the first piece) by `bytes` bytes; pieces may be split anywhere.
uint32_t crc32c_update(uint32_t crc, const void* data, size_t bytes);
// The path it took on this CPU: "sse4.2" or "table".
const char* crc32c_path();
// "1a2b3c4d"
std::string crc32c_hex(uint32_t crc);

}  // namespace mt
