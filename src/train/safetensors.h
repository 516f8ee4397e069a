// Safetensors files, the format PyTorch users exchange weights in
// (https://github.com/huggingface/safetensors): an 8-byte little-endian header length N,
// N bytes of JSON {"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]},
// ..., "__metadata__": {"key": "value"}}, then the raw little-endian tensor bytes, offsets
// counted from the end of the header. Tensor names follow docs/contracts.md §4 (§9 for llama).
// meshtrain writes F32 (or BF16 with --export-dtype bf16) and reads F32, BF16 and F16 into
// fp32 (exact widenings; Hugging Face directories come in any of the three).
//
// Reading validates everything that could make us read garbage: the header length
// against the file size, the JSON, each entry's dtype, shape and offsets (in range, sized
// to match the shape, not overlapping). Problems are the user's to fix: UsageError
// naming the file and, where there is one, the tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <vector>

#include "core/atomic_file.h"

namespace mt {

using TensorShape = std::vector<int64_t>;

// "[384, 128]"
std::string shape_str(const TensorShape& shape);

// One tensor to write: `data` holds numel(shape) floats, row-major.
struct SafetensorsTensor {
  std::string name;
  TensorShape shape;
  const float* data = nullptr;
};

// Writes atomically, tensors laid out in the order given; returns the file's size and
// checksum. Throws UsageError for a duplicate or reserved name, and RuntimeError before
// creating anything when a value would not be finite on disk (train/finite_gate.h). as_bf16:
// every tensor as BF16 (rounded to nearest even; --export-dtype bf16), else F32.
FileDigest write_safetensors(const std::string& path, std::span<const SafetensorsTensor> tensors,
                             const std::map<std::string, std::string>& metadata = {},
                             bool as_bf16 = false);

class SafetensorsFile {
 public:
  struct Entry {
    std::string name;
    std::string dtype;  // as in the file: "F32", "BF16", ...
    TensorShape shape;
    int64_t numel = 0;
    uint64_t begin = 0, end = 0;  // byte offsets into the data section
  };

  // Opens and validates the header; tensor bytes are read on demand.
  explicit SafetensorsFile(std::string path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& o) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& o) noexcept;

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Tensor names in file (data offset) order.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  // Throws UsageError when the tensor is missing.
  const Entry& tensor(const std::string& name) const;

  // Throws UsageError unless the tensor exists, is F32, BF16 or F16 and has exactly `shape`:
  // "FILE: tensor NAME has shape [128] but the model needs [256]".
  void expect_shape(const std::string& name, const TensorShape& shape) const;

  // Copies all elements (count must equal numel) or elements [first, first + count) of
  // the row-major flattening (a tensor-parallel rank's rows are one such range).
  void read(const std::string& name, float* out, size_t count) const;
  std::vector<float> read(const std::string& name) const;
  void read_range(const std::string& name, size_t first, size_t count, float* out) const;

 private:
  const Entry& f32_tensor(const std::string& name) const;
  // The constructor's phases; each throws UsageError naming the file (and closes it: the
  // destructor does not run for a constructor that throws).
  [[noreturn]] void fail(const std::string& msg);
  uint64_t open_regular_file();  // returns its size in bytes
  std::string read_header(uint64_t file_bytes);
  void parse_header(const std::string& json_text, uint64_t data_bytes);
  Entry parse_entry(const std::string& name, const nlohmann::json& value, uint64_t data_bytes);
  void check_disjoint();

  std::string path_;
  int fd_ = -1;
  uint64_t data_start_ = 0;     // 8 + N
  std::vector<Entry> entries_;  // sorted by begin
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace mt
