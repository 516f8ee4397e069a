// Base64 (RFC 4648, with padding): bytes carried inside text, e.g. a tokenizer's model file
// inside a safetensors header's metadata (train/tokenizer.h).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace mt {

std::string base64_encode(std::string_view bytes);
// nullopt for text that is not padded base64.
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace mt
