// The shuffled order in which training draws its samples (Megatron's GPTDataset idea: a
// shuffle index over fixed-length samples of the token stream, built once, memory-mapped).
//
// Samples: the stream (every shard back to back) cut into n = floor((ntok - 1) / T) windows
// of T+1 tokens at stride T: sample k is tokens k*T .. k*T+T (inputs the first T, targets the
// last T). Draws: draw g (0-based, over the whole run) is sample perm_e[g mod n] of epoch
// e = g / n, where perm_e is a permutation of 0..n-1 that is a pure function of (seed, e, n)
// (Fisher-Yates with counter-based draws, core/rng.h). Global batch k takes draws
// k*B .. k*B+B-1 and is sliced over dp ranks and microbatches as the sequential order is
// (data/data_loader.h), so every layout, resume and restart sees the same samples.
//
// Each epoch's permutation is a file in the cache folder (data/cache_dir.h),
// sample_index/seed<S>-n<n>-epoch<e>.idx: a 64-byte header (magic "MTSAMPLE", version, seed,
// epoch, n, CRC-32C of the entries) then n little-endian uint64. It is built once (written
// atomically: racing ranks and processes write identical bytes) and mapped read-only by every
// rank. On open the header must name exactly (seed, epoch, n) and the entries must match their
// checksum; a file that does not (stale, damaged, truncated) is never used: it is rebuilt.
#pragma once

#include <cstdint>
#include <string>

namespace mt {

class SampleIndex {
 public:
  // n: samples per epoch (> 0); dir: where the epochs' files live.
  SampleIndex(uint64_t seed, int64_t n, std::string dir);
  ~SampleIndex();
  SampleIndex(const SampleIndex&) = delete;
  SampleIndex& operator=(const SampleIndex&) = delete;
  SampleIndex(SampleIndex&& o) noexcept;
  SampleIndex& operator=(SampleIndex&& o) noexcept;

  // The sample of draw g (maps the epoch's file when g enters another epoch).
  int64_t sample(int64_t draw);
  int64_t samples_per_epoch() const { return n_; }
  // The file of an epoch (built or not).
  std::string epoch_path(int64_t epoch) const;

 private:
  void map_epoch(int64_t epoch);
  void unmap();

  uint64_t seed_;
  int64_t n_;
  std::string dir_;
  int64_t epoch_ = -1;  // the epoch mapped
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint64_t* entries_ = nullptr;
};

// perm[i] for i = 0..n-1 of epoch e, computed (no file): what the index files hold.
void shuffled_epoch(uint64_t seed, int64_t epoch, int64_t n, uint64_t* perm);

}  // namespace mt
