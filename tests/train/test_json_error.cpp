// json_syntax_error (train/json_error.h): a JSON file that does not parse is explained by the
// key whose value broke it and its line and column, never by the library's text or the file's.
#include "train/json_error.h"

#include <gtest/gtest.h>

#include <string>

namespace mt {
namespace {

TEST(JsonSyntaxError, NamesTheKeyLineAndColumn) {
  EXPECT_EQ(json_syntax_error("{\n  \"a\": 1,\n  \"rms_norm_eps\": NaN\n}"),
            "the value of \"rms_norm_eps\" (line 3, column 19) is NaN or Infinity, which JSON "
            "does not have");
  EXPECT_EQ(json_syntax_error("{\"rope_scaling\": {\"factor\": -Infinity}}"),
            "the value of \"rope_scaling.factor\" (line 1, column 30) is NaN or Infinity, which "
            "JSON does not have");
  EXPECT_EQ(json_syntax_error("{\"architectures\": [\"A\", nan]}"),
            "the value of \"architectures[1]\" (line 1, column 26) is NaN or Infinity, which JSON "
            "does not have");
  // nlohmann reports a number beyond a double without a position of its own.
  EXPECT_EQ(json_syntax_error("{\"rope_theta\": 1e999}"),
            "the value of \"rope_theta\" (line 1, column 20) is a number beyond a double");
  EXPECT_EQ(json_syntax_error("{\"a\": 1, \"b\": -}"),
            "the value of \"b\" (line 1, column 16) is not a JSON value");
}

TEST(JsonSyntaxError, TextOutsideAnyValue) {
  // Column 9 of 8 characters: just past the end.
  EXPECT_EQ(json_syntax_error("{\"a\": 1,"),
            "line 1, column 9: the text ends before its JSON does");
  EXPECT_EQ(json_syntax_error("{\"a\": [1, 2"),
            "line 1, column 12: the text ends before its JSON does");
  // A second key without the comma: the parser stops after reading "b" (column 11).
  EXPECT_EQ(json_syntax_error("{\"a\": 1 \"b\": 2}"), "line 1, column 11: not JSON");
  EXPECT_EQ(json_syntax_error("{\"a\": 1}"), "");
}

}  // namespace
}  // namespace mt
