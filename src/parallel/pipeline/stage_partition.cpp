#include "parallel/pipeline/stage_partition.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "core/error.h"

namespace mt {

PartitionCost partition_cost_model(int dim, int seq, int vocab) {
  MT_REQUIRE(dim > 0 && seq > 0 && vocab > 0,
             "partition cost model needs --dim, --seq and "
             "--vocab > 0");
  PartitionCost c;
  c.head = double(vocab) / (12.0 * dim + 2.0 * seq);
  return c;
}

namespace {

double chunk_extra(int k, int chunks, const PartitionCost& c) {
  return (k == 0 ? c.embedding : 0) + (k == chunks - 1 ? c.head : 0);
}

// Most blocks chunk k can take without exceeding cost x; -1 if even zero exceeds it.
long capacity(double x, int k, int chunks, const PartitionCost& c) {
  const double room = x - chunk_extra(k, chunks, c);
  if (room < -1e-9) return -1;
  return static_cast<long>(std::floor(room / c.block + 1e-9));
}

}  // namespace

std::vector<int> partition_layers(int layers, int chunks, const PartitionCost& cost) {
  MT_REQUIRE(layers >= 0, "--layers must be >= 0 (got ", layers, ")");
  MT_REQUIRE(chunks >= 1, "need at least one pipeline chunk (got ", chunks, ")");
  MT_CHECK(cost.block > 0 && cost.embedding >= 0 && cost.head >= 0);
  // The optimal bottleneck is some chunk's extra plus a whole number of blocks.
  std::vector<double> candidates;
  for (int k = 0; k < chunks; ++k)
    for (int a = 0; a <= layers; ++a)
      candidates.push_back(chunk_extra(k, chunks, cost) + a * cost.block);
  std::sort(candidates.begin(), candidates.end());
  std::vector<int> counts(chunks, 0);
  for (double x : candidates) {
    long total = 0;
    bool fits = true;
    for (int k = 0; k < chunks && fits; ++k) {
      const long cap = capacity(x, k, chunks, cost);
      fits = cap >= 0;
      counts[k] = static_cast<int>(std::min<long>(std::max<long>(cap, 0), layers));
      total += counts[k];
    }
    if (fits && total >= layers) break;
  }
  // Take the surplus off the most expensive chunks (earliest on ties).
  auto chunk_cost = [&](int k) { return counts[k] * cost.block + chunk_extra(k, chunks, cost); };
  for (long surplus = std::accumulate(counts.begin(), counts.end(), 0L) - layers; surplus > 0;
       --surplus) {
    int worst = -1;
    for (int k = 0; k < chunks; ++k)
      if (counts[k] > 0 && (worst < 0 || chunk_cost(k) > chunk_cost(worst) + 1e-9)) worst = k;
    --counts[worst];
  }
  return counts;
}

std::vector<int> parse_stage_layers(const std::string& spec, int layers, int chunks) {
  std::vector<int> counts;
  size_t begin = 0;
  while (true) {
    const size_t comma = spec.find(',', begin);
    const std::string item = spec.substr(begin, comma == std::string::npos ? comma : comma - begin);
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(item.c_str(), &end, 10);
    MT_REQUIRE(!item.empty() && end == item.c_str() + item.size() && errno == 0, "--stage-layers '",
               spec, "': '", item, "' is not an integer");
    MT_REQUIRE(v >= 0 && v <= layers, "--stage-layers '", spec, "': ", v,
               " is not a layer count between 0 and --layers (", layers, ")");
    counts.push_back(static_cast<int>(v));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  MT_REQUIRE(static_cast<int>(counts.size()) == chunks, "--stage-layers '", spec, "' has ",
             counts.size(),
             " entries; it needs one per pipeline chunk: --pp x chunks per stage = ", chunks);
  const long sum = std::accumulate(counts.begin(), counts.end(), 0L);
  MT_REQUIRE(sum == layers, "--stage-layers '", spec, "' sums to ", sum, ", not --layers (", layers,
             ")");
  return counts;
}

std::vector<int> chunk_layer_offsets(const std::vector<int>& layers_per_chunk) {
  std::vector<int> offsets(1, 0);
  for (int n : layers_per_chunk) offsets.push_back(offsets.back() + n);
  return offsets;
}

}  // namespace mt
