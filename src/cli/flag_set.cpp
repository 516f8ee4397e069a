#include "cli/flag_set.h"

#include <toml++/toml.h>
#include <cmath>
#include <cstdint>
#include <sstream>

#include "core/error.h"

namespace mt {

namespace {

template <typename T>
std::string toml_literal(const T& v) {
  if constexpr (std::is_same_v<T, std::string>) {
    std::ostringstream os;
    os << toml::value<std::string>(v);
    return os.str();
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

template <typename T>
void assign_from_toml(const toml::node& node, T* target, const std::string& where) {
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
    *target = T(*v);
  } else {
    MT_REQUIRE(node.is_integer(), where, " must be an integer");
    int64_t v = *node.value<int64_t>();
    MT_REQUIRE(v >= int64_t(std::numeric_limits<T>::min()) &&
                   uint64_t(v) <= uint64_t(std::numeric_limits<T>::max()),
               where, " is out of range");
    *target = T(v);
  }
}

}  // namespace

template <typename T>
void FlagSet::add(const char* section, const char* name, T* target, std::string help) {
  Flag f{section, name, std::move(help), {}, {}, {}, {}, nullptr, false};
  const std::string flag = std::string("--") + name;
  const std::string h = f.help;
  f.add_cli = [flag, target, h](CLI::App& app) {
    return app.add_option(flag, *target, h)->capture_default_str();
  };
  f.set_from_toml = [target](const void* node, const std::string& where) {
    assign_from_toml(*static_cast<const toml::node*>(node), target, where);
  };
  f.toml_value = [target] { return toml_literal(*target); };
  if constexpr (std::is_floating_point_v<T>) f.finite = [target] { return std::isfinite(*target); };
  flags_.push_back(std::move(f));
}

template void FlagSet::add<int>(const char*, const char*, int*, std::string);
template void FlagSet::add<double>(const char*, const char*, double*, std::string);
template void FlagSet::add<float>(const char*, const char*, float*, std::string);
template void FlagSet::add<uint64_t>(const char*, const char*, uint64_t*, std::string);
template void FlagSet::add<std::string>(const char*, const char*, std::string*, std::string);

void FlagSet::add_bool(const char* section, const char* name, bool* target, std::string help) {
  Flag f{section, name, std::move(help), {}, {}, {}, {}, nullptr, false};
  const std::string flag = std::string("--") + name;
  const std::string h = f.help;
  f.add_cli = [flag, target, h](CLI::App& app) { return app.add_flag(flag, *target, h); };
  f.set_from_toml = [target](const void* node, const std::string& where) {
    assign_from_toml(*static_cast<const toml::node*>(node), target, where);
  };
  f.toml_value = [target] { return toml_literal(*target); };
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

void FlagSet::require_finite() const {
  for (const Flag& f : flags_)
    MT_REQUIRE(!f.finite || f.finite(), "--", f.name, " must be a finite number (got ",
               f.toml_value(), ")");
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

}  // namespace mt
