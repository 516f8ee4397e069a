#include "train/json_error.h"

#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"

namespace mt {

namespace {

using json = nlohmann::json;

// Follows the keys and indices down to where the parser stopped (json_sax: no tree is built).
struct KeyPath : nlohmann::json_sax<json> {
  struct Level {
    bool object;
    std::string key;   // object: the key whose value is being read
    size_t index = 0;  // array: the element being read
  };
  std::vector<Level> levels;
  bool failed = false;
  size_t position = 0;  // byte offset of the failure
  std::string token;    // what the lexer had read there
  bool overflow = false;

  // A value ended: an object waits for its next key, an array reads its next element.
  bool value() {
    if (levels.empty()) return true;
    if (levels.back().object)
      levels.back().key.clear();
    else
      ++levels.back().index;
    return true;
  }
  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override { return levels.push_back({true, ""}), true; }
  bool start_array(std::size_t) override { return levels.push_back({false, ""}), true; }
  bool end_object() override { return levels.pop_back(), value(); }
  bool end_array() override { return levels.pop_back(), value(); }
  bool key(string_t& k) override { return levels.back().key = k, true; }
  bool parse_error(std::size_t at, const std::string& last,
                   const nlohmann::detail::exception& e) override {
    failed = true;
    position = at;
    token = last;
    overflow = e.id == 406;
    return false;
  }

  // "rope_scaling.factor", "architectures[1]"; "" outside any value.
  std::string path() const {
    std::string out;
    for (const Level& l : levels) {
      if (l.object && l.key.empty()) break;  // between keys: no value is being read
      out += l.object ? (out.empty() ? "" : ".") + l.key : str("[", l.index, "]");
    }
    return out;
  }
};

std::string line_and_column(const std::string& text, size_t position) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < position && i < text.size(); ++i) {
    column = text[i] == '\n' ? 1 : column + 1;
    line += text[i] == '\n';
  }
  return str("line ", line, ", column ", column);
}

std::string reason(const KeyPath& k) {
  if (k.overflow) return "is a number beyond a double";
  // The lexer's token runs from the end of the previous one ("\"a\": N"): its last word.
  const size_t cut = k.token.find_last_of(" \t\r\n,:[{");
  std::string word = cut == std::string::npos ? k.token : k.token.substr(cut + 1);
  if (!word.empty() && (word[0] == '-' || word[0] == '+')) word.erase(0, 1);
  const char first = word.empty() ? ' ' : word[0];
  if (first == 'N' || first == 'n' || first == 'I' || first == 'i')
    return "is NaN or Infinity, which JSON does not have";
  return "is not a JSON value";
}

}  // namespace

std::string json_syntax_error(const std::string& text) {
  KeyPath k;
  json::sax_parse(text, &k);
  if (!k.failed) return "";
  // The parser's position counts the character it stopped at.
  const std::string where = line_and_column(text, k.position > 0 ? k.position - 1 : 0);
  if (k.position > text.size()) return str(where, ": the text ends before its JSON does");
  const std::string path = k.path();
  if (path.empty()) return str(where, ": not JSON");
  return str("the value of \"", path, "\" (", where, ") ", reason(k));
}

}  // namespace mt
