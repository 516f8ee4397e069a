// Why a JSON file a user names does not parse, said in the terms of its keys, for one clean
// error line: nlohmann's own message repeats the file's text ("last read: '"rms_norm_eps":
// N'") and a number beyond a double comes without a position at all.
#pragma once

#include <string>

namespace mt {

// For `text` that nlohmann::json::parse refused: where and why, e.g.
//   the value of "rms_norm_eps" (line 4, column 19) is NaN or Infinity, which JSON does not have
//   the value of "rope_scaling.factor" (line 9, column 15) is a number beyond a double
//   line 12, column 1: the text ends before its JSON does
// "" if the text parses (nothing to explain).
std::string json_syntax_error(const std::string& text);

}  // namespace mt
