// One registry of a hardware profile's fields, used three ways so they can never disagree
// (as cli/flag_set.h does for flags): to parse a TOML profile ([hardware] key = value), to
// validate every field of any profile (a file, a preset, a calibration) against its range,
// and to write a profile back (what --calibrate stores).
//
// Every number is finite and within its range, so that no figure can turn a prediction into
// NaN, a negative time or infinity: rates (FLOP/s, bytes/s) are at least 1, seconds are
// non-negative and bounded, fractions lie in [0, 1]. "0 or [a, b]" marks a figure whose 0
// means "not measured" (the cost model then falls back, hardware_profile.h says to what).
// Integer fields are read as 64-bit and range-checked before they are narrowed (a max_zero
// of 2^32 is an error, never 0).
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "plan/hardware_profile.h"

namespace mt::plan {

struct ProfileField {
  using Member = std::variant<double HardwareProfile::*, int HardwareProfile::*,
                              bool HardwareProfile::*, std::string HardwareProfile::*>;
  const char* key;
  Member member;
  double lo = 0, hi = 0;    // numbers: the range, both ends included
  bool zero_unset = false;  // numbers: 0 is also accepted ("not measured")
  bool software = false;    // a software-behaviour field: written for GPU profiles only
};

// Every field, in the order a profile is written. "software" (the named software profile,
// applied before the single software fields that override it) and "sources" (the lines
// --explain prints) are keys of the file too, handled by the readers below.
const std::vector<ProfileField>& profile_fields();

// The first field of `h` outside its range, as "[hardware] KEY must be ... (got V)"; empty
// when every field is valid.
std::string profile_field_error(const HardwareProfile& h);

// A number, integer or boolean field (0 / 1) by key, as the software tables set them.
void set_profile_field(HardwareProfile& h, const std::string& key, double value);
double profile_field_value(const HardwareProfile& h, const std::string& key);

// Parses TOML text (`source` names it in messages) into a profile. UsageError on an unknown
// key, a wrong type, or a value outside its range.
HardwareProfile parse_profile_toml(const std::string& text, const std::string& source);

}  // namespace mt::plan
