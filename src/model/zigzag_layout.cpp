#include "model/zigzag_layout.h"

#include <cstddef>

#include "core/error.h"

namespace mt {

std::vector<int> zigzag_positions(int T, int cp, int rank) {
  MT_CHECK(cp >= 1 && rank >= 0 && rank < cp, "zigzag rank ", rank, " of ", cp);
  MT_CHECK(T > 0 && T % (2 * cp) == 0, "zigzag: seq ", T, " is not divisible by 2 x cp = ", 2 * cp);
  const int chunk = T / (2 * cp);
  std::vector<int> pos;
  pos.reserve(size_t(2) * chunk);
  for (int c : {rank, 2 * cp - 1 - rank})
    for (int i = 0; i < chunk; ++i) pos.push_back(c * chunk + i);
  return pos;
}

ModelConfig cp_rank_model(const ModelConfig& cfg, int cp) {
  ModelConfig m = cfg;
  m.positions = cfg.position_rows();
  m.seq = cfg.seq / cp;
  return m;
}

}  // namespace mt
