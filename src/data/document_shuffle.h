// `meshtrain prepare --shuffle-seed S`: a split's documents in a seeded order. The split is
// first written in input order (so encoding streams with bounded memory); this pass then
// copies each document, with its end marker, from those shards into the final split in the
// order of a permutation that is a pure function of (seed, split name, document count), and
// the input-order files are removed. Memory: the index and the permutation (24 bytes per
// document) plus one document; the shards are read through their memory maps.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/shard_writer.h"

namespace mt {

// dir: the folder holding the input-order split (shard file names `shards`, index file
// `docs`, `bytes` of text in all); `to`: the split to fill (not finished here).
void write_shuffled_split(const std::string& dir, const std::vector<std::string>& shards,
                          const std::string& docs, uint64_t bytes, uint64_t seed,
                          const std::string& name, SplitWriter& to);

// The order write_shuffled_split uses: order[i] is the input index of output document i.
std::vector<uint64_t> document_order(uint64_t seed, const std::string& name, int64_t documents);

}  // namespace mt
