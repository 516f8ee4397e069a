// Reading a sharded checkpoint (manifest.h) piecewise: a rank asks for the global
// elements it needs, tensor by tensor, and the reader preads only the 1 MiB blocks that
// hold them, checking each block's CRC-32C before using a byte of it. So a resharding load
// never reads the whole model on one rank, and never trusts a damaged block.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "train/checkpoint/manifest.h"

namespace mt {

class ShardReader {
 public:
  // m: read_manifest(dir). Files are opened on first use.
  ShardReader(std::string dir, const Manifest& m);
  ~ShardReader();
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  // The manifest's entry of `name`, or null.
  const ManifestTensor* tensor(const std::string& name) const;
  // Copies global elements [start, start + len) of `tensor` into dst. Throws UsageError
  // naming the file and tensor for a missing or short file or a block failing its checksum.
  void read(const std::string& tensor, int64_t start, int64_t len, float* dst);
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  struct Interval {
    int64_t gstart, len;
    int file;
    uint64_t byte;
  };
  struct Block {
    int file = -1;
    uint64_t index = 0;
    uint64_t last_use = 0;
    std::vector<char> data;
  };
  const std::vector<Interval>& index_of(const std::string& tensor);
  const Block& block(int file, uint64_t index, const std::string& tensor);
  int fd(int file, const std::string& tensor);

  std::string dir_;
  const Manifest& m_;
  std::unordered_map<std::string, size_t> tensor_index_;
  std::unordered_map<std::string, std::vector<size_t>> segments_of_;
  std::unordered_map<std::string, std::vector<Interval>> intervals_;
  std::vector<int> fds_;
  std::vector<Block> cache_;  // a few recent blocks: reads walk files mostly in order
  uint64_t tick_ = 0, bytes_read_ = 0;
};

// Reads every block of every file of the checkpoint and checks it against the manifest
// (`meshtrain checkpoint verify`, and --load before any rank starts). Returns the bytes
// checked. Throws UsageError naming the file and a tensor stored in the damaged block.
uint64_t verify_shards(const std::string& dir, const Manifest& m);

}  // namespace mt
