// One registry of the flags of a command, used three ways so they can never disagree:
// as command-line options (CLI11), as keys of a TOML config file ([section] name = value,
// the flag name without its dashes), and to print the resolved configuration.
// A flag given on the command line overrides the config file, which overrides the default.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace mt {

class FlagSet {
 public:
  // name without dashes, e.g. "lr-schedule"; the TOML key is the same (or with '_').
  template <typename T>
  void add(const char* section, const char* name, T* target, std::string help);
  void add_bool(const char* section, const char* name, bool* target, std::string help);

  // Adds every flag to `app`, grouped by section, defaults shown in --help.
  void register_cli(CLI::App& app);
  // Applies a TOML file; unknown sections/keys and wrong types are UsageErrors.
  void load_toml(const std::string& path);
  // The current values as a TOML document (for --print-config).
  std::string to_toml() const;
  // True when the flag was set on the command line (after parsing) or in the config file.
  bool given(const std::string& name) const;
  // Throws UsageError for a floating-point flag holding inf or nan (CLI11 and TOML both
  // parse them as numbers): no range check downstream can be trusted with them.
  void require_finite() const;

 private:
  struct Flag {
    std::string section, name, help;
    std::function<CLI::Option*(CLI::App&)> add_cli;
    std::function<void(const void* toml_node, const std::string& where)> set_from_toml;
    std::function<std::string()> toml_value;
    std::function<bool()> finite;  // floating-point flags only
    CLI::Option* option = nullptr;
    bool in_file = false;
  };
  std::vector<Flag> flags_;
};

}  // namespace mt
