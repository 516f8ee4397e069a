// One registry of the flags of a command, used three ways so they can never disagree:
// as command-line options (CLI11), as keys of a TOML config file ([section] name = value,
// the flag name without its dashes), and to print the resolved configuration.
// A flag given on the command line overrides the config file, which overrides the default.
//
// Every numeric flag carries the values it accepts, checked by name wherever the value came
// from ("--batch must be an integer in 1..1048576 (got 1099511627776)"): an integer flag
// cannot be registered without its range, and a floating-point one is finite (inf and nan
// parse as numbers) and within its range where it has one. Integers are read as text and
// converted here, so that a value beyond the type (2^40 for an int) or of the wrong sign
// (-1 for the seed) is refused with the range rather than wrapped or reported as "could
// not convert".
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mt {

// The values a numeric flag accepts: min..max, the minimum excluded when min_exclusive.
// long double holds every int64 and uint64 bound exactly (64-bit mantissa on x86-64).
struct FlagRange {
  long double min, max;
  bool min_exclusive = false;
  // "1..1048576" (integers), "> 0 and <= 1000000" or "between 0 and 1" (floating point).
  std::string describe(bool integer) const;
  bool contains(long double v) const { return (min_exclusive ? v > min : v >= min) && v <= max; }
};

// The seed flags' range: a TOML integer is an int64 (train's --print-config writes it back).
inline constexpr FlagRange kSeedRange{0, static_cast<long double>(INT64_MAX)};

// An unsigned integer option of a command without a FlagSet (prepare, sample), read as text
// and checked as FlagSet's integers are: "-1" and a 21-digit number are UsageErrors naming
// the flag, where CLI11 wrapped or saturated them into a valid-looking value.
CLI::Option* add_checked_uint(CLI::App& app, const std::string& flag, uint64_t* target,
                              const std::string& help, FlagRange range);

// How add_choice refuses a name it does not know: one_of: `--progress must be one of auto,
// bar, lines, none (got "x")`, naming the config file's key for a value from the file;
// in_words: `--precision must be fp32 or bf16 (got 'x')`, from either source.
enum class ChoiceRefusal { one_of, in_words };

class FlagSet {
 public:
  // name without dashes, e.g. "lr-schedule"; the TOML key is the same (or with '_').
  // Strings, and floating-point flags that any finite value suits.
  template <typename T>
  void add(const char* section, const char* name, T* target, std::string help);
  // Numbers, with the values they accept (integers must use this one).
  template <typename T>
  void add(const char* section, const char* name, T* target, std::string help, FlagRange range);
  void add_bool(const char* section, const char* name, bool* target, std::string help);
  // A flag whose value is one of a fixed set of names, parsed into its enum here, once, from
  // the command line or the config file; anything else is refused naming the choices.
  template <typename E>
  void add_choice(const char* section, const char* name, E* target, std::string help,
                  std::vector<std::pair<std::string, E>> choices,
                  ChoiceRefusal refusal = ChoiceRefusal::one_of);

  // Adds every flag to `app`, grouped by section, defaults shown in --help.
  void register_cli(CLI::App& app);
  // Applies a TOML file; unknown sections/keys, wrong types and values out of range are
  // UsageErrors.
  void load_toml(const std::string& path);
  // After parsing, before any value is read: converts the integers given on the command
  // line and checks every number against its range; throws UsageError naming the flag.
  void check_values();
  // The current values as a TOML document (for --print-config).
  std::string to_toml() const;
  // True when the flag was set on the command line (after parsing) or in the config file.
  bool given(const std::string& name) const;
  // The names of the flags given (command line or config file).
  std::vector<std::string> given_names() const;
  // The values of the flags of `sections` as {section: {name: value}}, exactly (a float
  // keeps every bit; a choice is its name): a checkpoint's record of its run.
  nlohmann::json to_json(const std::vector<std::string>& sections) const;
  // Sets one flag from such a value, with the checks of a config file's value (`where` names
  // the source in errors). Returns false when no flag has that section and name.
  bool set_from_json(const std::string& section, const std::string& name,
                     const nlohmann::json& value, const std::string& where);
  // The current value of one flag as to_json writes it (null when there is no such flag).
  nlohmann::json json_value(const std::string& section, const std::string& name) const;

 private:
  struct Flag {
    std::string section, name, help;
    std::function<CLI::Option*(CLI::App&)> add_cli;
    std::function<void(const void* toml_node, const std::string& where)> set_from_toml;
    std::function<std::string()> toml_value;
    // Numbers: converts what the command line gave (its option), checks the value.
    std::function<void(const CLI::Option*)> check;
    CLI::Option* option = nullptr;
    bool in_file = false;
    std::function<nlohmann::json()> json_value;  // to_json's value
  };
  std::vector<Flag> flags_;
  // add_choice's untyped half: the enum as the index of its name in `names`.
  void add_named(const char* section, const char* name, std::string help,
                 std::vector<std::string> names, std::function<int()> get,
                 std::function<void(int)> set, ChoiceRefusal refusal);
};

template <typename E>
void FlagSet::add_choice(const char* section, const char* name, E* target, std::string help,
                         std::vector<std::pair<std::string, E>> choices, ChoiceRefusal refusal) {
  std::vector<std::string> names;
  for (const auto& c : choices) names.push_back(c.first);
  auto get = [target, choices] {
    for (size_t i = 0; i < choices.size(); ++i)
      if (choices[i].second == *target) return int(i);
    return 0;
  };
  auto set = [target, choices](int i) { *target = choices[size_t(i)].second; };
  add_named(section, name, std::move(help), std::move(names), get, set, refusal);
}

}  // namespace mt
