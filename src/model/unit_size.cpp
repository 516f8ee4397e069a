#include "model/unit_size.h"

#include "model/moe_layer.h"

namespace mt {

UnitSize unit_size_since(const ParamTable& table, size_t first) {
  const auto& entries = table.entries();
  UnitSize u;
  if (first < entries.size()) u.floats = table.total() - entries[first].offset;
  for (size_t i = first; i < entries.size(); ++i) {
    u.real += entries[i].numel;
    if (is_expert_param(entries[i].name)) u.expert_real += entries[i].numel;
  }
  return u;
}

}  // namespace mt
