#include "cli/flag_set.h"

#include <toml++/toml.h>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <sstream>

#include "core/error.h"

namespace mt {

namespace {

// An integral bound as text (FlagRange holds it exactly).
std::string integer_text(long double v) {
  if (v > static_cast<long double>(INT64_MAX)) return std::to_string(static_cast<uint64_t>(v));
  return std::to_string(static_cast<int64_t>(v));
}

std::string number_text(long double v) {
  std::ostringstream os;
  os.precision(10);
  os << v;
  return os.str();
}

template <typename T>
std::string toml_literal(const T& v) {
  if constexpr (std::is_same_v<T, std::string>) {
    // A literal string where one can hold it, else a basic string with escapes. (toml++
    // wrote "\n" as a multi-line literal whose first newline TOML trims: the default
    // --prompt read back as "", and was then refused as a --prompt without --sample-tokens.)
    const bool literal = std::none_of(v.begin(), v.end(), [](unsigned char c) {
      return c == '\'' || (c < 0x20 && c != '\t') || c == 0x7f;
    });
    if (literal) return "'" + v + "'";
    std::string out = "\"";
    for (unsigned char c : v) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += char(c);
      } else if (c == '\n') {
        out += "\\n";
      } else if (c == '\t') {
        out += "\\t";
      } else if (c < 0x20 || c == 0x7f) {
        char esc[8];
        std::snprintf(esc, sizeof esc, "\\u%04x", c);
        out += esc;
      } else {
        out += char(c);
      }
    }
    return out + "\"";
  } else if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_floating_point_v<T>) {
    std::ostringstream os;
    os.precision(10);
    os << v;
    std::string s = os.str();
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // keep it a TOML float
    return s;
  } else {
    return std::to_string(v);
  }
}

// `text` (the command line's) as an integer of type T within `range`.
template <typename T>
T parse_integer(const std::string& text, const std::string& flag, const FlagRange& range) {
  using Wide = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
  Wide v = 0;
  const char* end = text.data() + text.size();
  // from_chars takes no '+'; a user may well type one.
  const char* begin = text.data() + (text.size() > 1 && text[0] == '+' && text[1] != '-');
  const auto [p, ec] = std::from_chars(begin, end, v);
  // Too many digits for 64 bits is out of range too, not a malformed number.
  MT_REQUIRE(ec == std::errc::result_out_of_range || (ec == std::errc() && p == end), flag,
             " must be an integer in ", range.describe(true), " (got '", text, "')");
  MT_REQUIRE(ec == std::errc() && range.contains(static_cast<long double>(v)), flag, " must be in ",
             range.describe(true), " (got ", text, ")");
  return static_cast<T>(v);
}

template <typename T>
void check_number(T v, const std::string& flag, const FlagRange& range) {
  if constexpr (std::is_floating_point_v<T>) {
    MT_REQUIRE(std::isfinite(v), flag, " must be a finite number (got ", v, ")");
    MT_REQUIRE(range.contains(v), flag, " must be ", range.describe(false), " (got ", v, ")");
  } else {
    MT_REQUIRE(range.contains(static_cast<long double>(v)), flag, " must be in ",
               range.describe(true), " (got ", v, ")");
  }
}

template <typename T>
void assign_from_toml(const toml::node& node, T* target, const std::string& where,
                      const FlagRange* range) {
  if constexpr (std::is_same_v<T, std::string>) {
    auto v = node.value<std::string>();
    MT_REQUIRE(v.has_value(), where, " must be a string");
    *target = *v;
  } else if constexpr (std::is_same_v<T, bool>) {
    auto v = node.value<bool>();
    MT_REQUIRE(v.has_value(), where, " must be true or false");
    *target = *v;
  } else if constexpr (std::is_floating_point_v<T>) {
    auto v = node.value<double>();  // accepts integers too
    MT_REQUIRE(v.has_value(), where, " must be a number");
    *target = T(*v);  // checked with the command line's values, by flag (check_values)
  } else {
    MT_REQUIRE(node.is_integer(), where, " must be an integer");
    const int64_t v = *node.value<int64_t>();
    MT_REQUIRE(v >= 0 || std::is_signed_v<T>, where, " must be in ", range->describe(true),
               " (got ", v, ")");
    check_number(v, where, *range);
    *target = T(v);
  }
}

}  // namespace

std::string FlagRange::describe(bool integer) const {
  if (integer) return integer_text(min) + ".." + integer_text(max);
  if (min_exclusive) return "> " + number_text(min) + " and <= " + number_text(max);
  return "between " + number_text(min) + " and " + number_text(max);
}

template <typename T>
void FlagSet::add(const char* section, const char* name, T* target, std::string help) {
  static_assert(!std::is_integral_v<T>, "an integer flag needs its range");
  if constexpr (std::is_floating_point_v<T>) {
    add(section, name, target, std::move(help), FlagRange{-HUGE_VALL, HUGE_VALL});
  } else {
    Flag f{section, name, std::move(help), {}, {}, {}, {}, nullptr, false, {}};
    const std::string flag = std::string("--") + name;
    const std::string h = f.help;
    f.add_cli = [flag, target, h](CLI::App& app) {
      return app.add_option(flag, *target, h)->capture_default_str();
    };
    f.set_from_toml = [target](const void* node, const std::string& where) {
      assign_from_toml(*static_cast<const toml::node*>(node), target, where, nullptr);
    };
    f.toml_value = [target] { return toml_literal(*target); };
    f.json_value = [target] { return nlohmann::json(*target); };
    flags_.push_back(std::move(f));
  }
}

template <typename T>
void FlagSet::add(const char* section, const char* name, T* target, std::string help,
                  FlagRange range) {
  static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>, "a number");
  Flag f{section, name, std::move(help), {}, {}, {}, {}, nullptr, false, {}};
  const std::string flag = std::string("--") + name;
  const std::string h = f.help;
  if constexpr (std::is_integral_v<T>) {
    // Read as text (see the header); shown and typed as an integer in --help.
    auto text = std::make_shared<std::string>();
    f.add_cli = [flag, target, h, text](CLI::App& app) {
      *text = std::to_string(*target);
      return app.add_option(flag, *text, h)->capture_default_str()->type_name("INT");
    };
    f.check = [flag, target, text, range](const CLI::Option* given) {
      if (given && given->count() > 0) *target = parse_integer<T>(*text, flag, range);
      check_number(*target, flag, range);
    };
  } else {
    f.add_cli = [flag, target, h](CLI::App& app) {
      return app.add_option(flag, *target, h)->capture_default_str();
    };
    f.check = [flag, target, range](const CLI::Option*) { check_number(*target, flag, range); };
  }
  f.set_from_toml = [target, range](const void* node, const std::string& where) {
    assign_from_toml(*static_cast<const toml::node*>(node), target, where, &range);
  };
  f.toml_value = [target] { return toml_literal(*target); };
  f.json_value = [target] { return nlohmann::json(*target); };
  flags_.push_back(std::move(f));
}

template void FlagSet::add<double>(const char*, const char*, double*, std::string);
template void FlagSet::add<float>(const char*, const char*, float*, std::string);
template void FlagSet::add<std::string>(const char*, const char*, std::string*, std::string);
template void FlagSet::add<int>(const char*, const char*, int*, std::string, FlagRange);
template void FlagSet::add<uint64_t>(const char*, const char*, uint64_t*, std::string, FlagRange);
template void FlagSet::add<double>(const char*, const char*, double*, std::string, FlagRange);
template void FlagSet::add<float>(const char*, const char*, float*, std::string, FlagRange);

CLI::Option* add_checked_uint(CLI::App& app, const std::string& flag, uint64_t* target,
                              const std::string& help, FlagRange range) {
  CLI::Option* o = app.add_option_function<std::string>(
      flag,
      [flag, target, range](const std::string& text) {
        *target = parse_integer<uint64_t>(text, flag, range);
      },
      help);
  return o->default_str(std::to_string(*target))->type_name("UINT");
}

void FlagSet::add_bool(const char* section, const char* name, bool* target, std::string help) {
  Flag f{section, name, std::move(help), {}, {}, {}, {}, nullptr, false, {}};
  const std::string flag = std::string("--") + name;
  const std::string h = f.help;
  f.add_cli = [flag, target, h](CLI::App& app) { return app.add_flag(flag, *target, h); };
  f.set_from_toml = [target](const void* node, const std::string& where) {
    assign_from_toml(*static_cast<const toml::node*>(node), target, where, nullptr);
  };
  f.toml_value = [target] { return toml_literal(*target); };
  f.json_value = [target] { return nlohmann::json(*target); };
  flags_.push_back(std::move(f));
}

namespace {

std::string joined(const std::vector<std::string>& names, const char* sep) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i ? sep : "") + names[i];
  return out;
}

// "a, b or c".
std::string in_words(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return out;
}

int index_of(const std::vector<std::string>& names, const std::string& v, const std::string& where,
             ChoiceRefusal refusal) {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == v) return int(i);
  if (refusal == ChoiceRefusal::in_words)
    throw UsageError(str(where, " must be ", in_words(names), " (got '", v, "')"));
  throw UsageError(str(where, " must be one of ", joined(names, ", "), " (got \"", v, "\")"));
}

}  // namespace

void FlagSet::add_named(const char* section, const char* name, std::string help,
                        std::vector<std::string> names, std::function<int()> get,
                        std::function<void(int)> set, ChoiceRefusal refusal) {
  Flag f{section, name, std::move(help), {}, {}, {}, {}, nullptr, false, {}};
  const std::string flag = std::string("--") + name;
  const std::string h = f.help;
  auto text = std::make_shared<std::string>();
  f.add_cli = [flag, h, text, names, get](CLI::App& app) {
    *text = names[size_t(get())];
    return app.add_option(flag, *text, h)->capture_default_str()->type_name(joined(names, "|"));
  };
  f.check = [flag, text, names, set, refusal](const CLI::Option* given) {
    if (given && given->count() > 0) set(index_of(names, *text, flag, refusal));
  };
  // in_words names the flag for a config file's value too, as the validation that refused
  // these names before they were parsed here did.
  f.set_from_toml = [flag, names, set, refusal](const void* node, const std::string& where) {
    auto v = static_cast<const toml::node*>(node)->value<std::string>();
    MT_REQUIRE(v.has_value(), where, " must be a string: one of ", joined(names, ", "));
    set(index_of(names, *v, refusal == ChoiceRefusal::in_words ? flag : where, refusal));
  };
  f.toml_value = [names, get] { return toml_literal(names[size_t(get())]); };
  f.json_value = [names, get] { return nlohmann::json(names[size_t(get())]); };
  flags_.push_back(std::move(f));
}

void FlagSet::register_cli(CLI::App& app) {
  for (Flag& f : flags_) f.option = f.add_cli(app)->group(f.section);
}

bool FlagSet::given(const std::string& name) const {
  for (const Flag& f : flags_)
    if (f.name == name) return f.in_file || (f.option && f.option->count() > 0);
  return false;
}

std::vector<std::string> FlagSet::given_names() const {
  std::vector<std::string> names;
  for (const Flag& f : flags_)
    if (given(f.name)) names.push_back(f.name);
  return names;
}

void FlagSet::check_values() {
  for (const Flag& f : flags_)
    if (f.check) f.check(f.option);
}

void FlagSet::load_toml(const std::string& path) {
  toml::table doc;
  try {
    doc = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << e.description() << " at line " << e.source().begin.line;
    throw UsageError(str("--config ", path, ": ", os.str()));
  }
  for (auto&& [section_key, section_node] : doc) {
    const std::string section(section_key.str());
    const toml::table* tbl = section_node.as_table();
    MT_REQUIRE(tbl != nullptr, "--config ", path, ": top-level key '", section,
               "' must be a [section] ([model] [parallel] [train] [data] [io] [engine])");
    bool known_section = false;
    for (const Flag& f : flags_) known_section |= f.section == section;
    MT_REQUIRE(known_section, "--config ", path, ": unknown section [", section,
               "] (allowed: [model] [parallel] [train] [data] [io] [engine])");
    for (auto&& [key, node] : *tbl) {
      std::string name(key.str());
      for (char& c : name)
        if (c == '_') c = '-';
      Flag* match = nullptr;
      for (Flag& f : flags_)
        if (f.section == section && f.name == name) match = &f;
      MT_REQUIRE(match != nullptr, "--config ", path, ": unknown key '", key.str(), "' in [",
                 section, "]");
      match->set_from_toml(&node, str("--config ", path, ": [", section, "] ", key.str()));
      match->in_file = true;
    }
  }
}

std::string FlagSet::to_toml() const {
  std::string out, section;
  for (const Flag& f : flags_) {
    if (f.section != section) {
      out += (out.empty() ? "[" : "\n[") + f.section + "]\n";
      section = f.section;
    }
    out += f.name + " = " + f.toml_value() + "\n";
  }
  return out;
}

nlohmann::json FlagSet::to_json(const std::vector<std::string>& sections) const {
  nlohmann::json out = nlohmann::json::object();
  for (const Flag& f : flags_)
    if (std::find(sections.begin(), sections.end(), f.section) != sections.end())
      out[f.section][f.name] = f.json_value();
  return out;
}

nlohmann::json FlagSet::json_value(const std::string& section, const std::string& name) const {
  for (const Flag& f : flags_)
    if (f.section == section && f.name == name) return f.json_value();
  return nullptr;
}

namespace {

// A recorded value as the TOML node a config file would hold, so that it passes the same
// type and range checks (a double keeps every bit in toml::value<double>).
std::unique_ptr<toml::node> toml_node_of(const nlohmann::json& v) {
  if (v.is_boolean()) return std::make_unique<toml::value<bool>>(v.get<bool>());
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
    return std::make_unique<toml::value<double>>(v.get<double>());  // refused as out of range
  if (v.is_number_integer()) return std::make_unique<toml::value<int64_t>>(v.get<int64_t>());
  if (v.is_number_float()) return std::make_unique<toml::value<double>>(v.get<double>());
  if (v.is_string()) return std::make_unique<toml::value<std::string>>(v.get<std::string>());
  return nullptr;
}

}  // namespace

bool FlagSet::set_from_json(const std::string& section, const std::string& name,
                            const nlohmann::json& value, const std::string& where) {
  for (Flag& f : flags_) {
    if (f.section != section || f.name != name) continue;
    const std::unique_ptr<toml::node> node = toml_node_of(value);
    MT_REQUIRE(node != nullptr, where, " is ", value.dump(), ", not a value of --", name);
    f.set_from_toml(node.get(), where);
    if (f.check) f.check(nullptr);
    return true;
  }
  return false;
}

}  // namespace mt
