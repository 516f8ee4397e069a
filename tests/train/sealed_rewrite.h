// A checkpoint's file rewritten as a writer would have written it, every checksum matching:
// how the checkpoint tests make checkpoints of older writers (a key absent, a tensor left
// out) that only their contents, not their checksums, can refuse.
#pragma once

#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/crc32c.h"
#include "train/checkpoint/metadata_checksum.h"
#include "train/safetensors.h"

namespace mt::test_util {

// state.json records file `name` as it is now (size, CRC-32C) and is sealed again.
inline void reseal(const std::string& dir, const std::string& name) {
  std::ifstream in(dir + "/" + name, std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), {}};
  nlohmann::json state = nlohmann::json::parse(std::ifstream(dir + "/state.json"));
  state.erase(kChecksumKey);
  state["files"][name] = {{"bytes", bytes.size()},
                          {"crc32c", crc32c_hex(crc32c_update(0, bytes.data(), bytes.size()))}};
  seal_json(state);
  std::ofstream(dir + "/state.json") << state.dump(2) << "\n";
}

// Rewrites one of a checkpoint's safetensors files as a writer would have: `edit` may drop
// or replace tensors and change the metadata; state.json then records the new file's size
// and CRC-32C and is sealed again, so every checksum of the checkpoint matches.
inline void rewrite_sealed(const std::string& dir, const std::string& name,
                           const std::function<void(std::map<std::string, std::vector<float>>&,
                                                    std::map<std::string, TensorShape>&,
                                                    std::map<std::string, std::string>&)>& edit) {
  const std::string path = dir + "/" + name;
  std::map<std::string, std::vector<float>> data;
  std::map<std::string, TensorShape> shapes;
  std::map<std::string, std::string> meta;
  {
    const SafetensorsFile f(path);
    for (const std::string& n : f.names()) data[n] = f.read(n), shapes[n] = f.tensor(n).shape;
    meta = f.metadata();
  }
  edit(data, shapes, meta);
  std::vector<SafetensorsTensor> tensors;
  for (const auto& [n, d] : data) tensors.push_back({n, shapes[n], d.data()});
  write_safetensors(path, tensors, meta);
  reseal(dir, name);
}

}  // namespace mt::test_util
