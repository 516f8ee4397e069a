// --data-order: how training draws its samples (docs/contracts.md §3). shuffled (the
// default): through a per-epoch shuffled sample index (data/sample_index.h), the same in
// every layout; sequential: llm.c's loader, batch after batch along the stream (the PyTorch
// reference and llm.c comparisons use it). Validation always reads sequentially.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace mt {

enum class DataOrder { shuffled, sequential };

inline std::vector<std::pair<std::string, DataOrder>> data_order_names() {
  return {{"shuffled", DataOrder::shuffled}, {"sequential", DataOrder::sequential}};
}

}  // namespace mt
