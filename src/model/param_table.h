// The parameter table: every tensor a rank holds, by its global name (docs/contracts.md §4),
// its global shape, how the rank's local piece maps into it, and where the piece lives in
// the rank's flat arenas (parameters, gradients and optimizer moments share the offsets).
//
// Init, checkpoints, clipping and the equivalence tests all go through the global view,
// so changing the parallel layout never changes the model.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

namespace mt {

// How a local tensor relates to the global one. The local tensor is the concatenation,
// along dimension `dim`, of global slices [start, start + len) in the order listed.
// Rows of a block that lie beyond the global extent are padding (e.g. a vocabulary padded
// to a multiple of tp): zero-initialised, never written to a file.
// dim == -1: replicated (local == global).
struct ShardSpec {
  struct Block {
    int64_t start, len;
  };
  int dim = -1;
  std::vector<Block> blocks;
  bool replicated() const { return dim < 0; }
};

enum class InitKind : uint8_t { normal, zeros, ones };

// Where a tensor's local piece goes in the arenas: at the next 16-float boundary, or right
// after the previous tensor's last element, so that tensors one fused GEMM multiplies as one
// matrix (the llama block's q/k/v projections, gate/up) are one contiguous matrix.
enum class Placement : uint8_t { aligned, after_previous };

struct ParamInfo {
  std::string name;                   // global name, e.g. "transformer.h.0.attn.c_attn.weight"
  std::vector<int64_t> global_shape;  // PyTorch (out, in) layout
  std::vector<int64_t> local_shape;
  ShardSpec shard;
  size_t offset = 0;  // in the rank's arenas (floats)
  size_t numel = 0;   // local element count
  InitKind init = InitKind::normal;
  float init_std = 0.02f;
  // Replicated over tp, but each rank's gradient covers only its rows of the sequence
  // (sequence parallelism: LayerNorm parameters): the gradients must be summed over tp.
  bool tp_partial_grad = false;
  // AdamW weight decay applies to tensors with 2 or more dims (docs/contracts.md §2).
  bool decay() const { return global_shape.size() >= 2; }
  int64_t global_numel() const;
  // Calls fn(local_index, global_index) for each local element that maps to a real
  // global element (padding is skipped), in local order.
  void for_each_element(const std::function<void(size_t, int64_t)>& fn) const;
};

// The name work a table's index did: names hashed and names compared. A table counts only
// when given somewhere to count (a test checks that each add and find costs a bounded
// number of both, whatever the table's size).
struct NameWork {
  size_t hashes = 0, comparisons = 0;
};

class ParamTable {
 public:
  explicit ParamTable(NameWork* work = nullptr) : index_(0, NameHash{work}, NameEqual{work}) {}

  // Appends a tensor; offsets are assigned in order, each aligned to 16 floats (64 bytes),
  // so entries() is sorted by offset.
  ParamInfo& add(std::string name, std::vector<int64_t> global_shape, InitKind init,
                 float init_std = 0.02f, ShardSpec shard = {},
                 Placement place = Placement::aligned);
  const ParamInfo* find(const std::string& name) const;
  const ParamInfo& at(const std::string& name) const;
  // The tensor whose local elements hold arena offset `offset` (a binary search: entries
  // are in offset order).
  const ParamInfo& at_offset(size_t offset) const;
  // A deque, so the references add() returns stay valid as the table grows.
  const std::deque<ParamInfo>& entries() const { return entries_; }
  size_t total() const { return total_; }  // arena size in floats (with alignment gaps)
  size_t numel() const;                    // sum of local element counts

  // Deterministic init: element g of tensor `name` gets a value depending only on
  // (seed, name, g) — identical on every layout.
  void init(float* arena, uint64_t seed) const;

 private:
  std::deque<ParamInfo> entries_;
  // Name -> position in entries_: a model of many layers has hundreds of thousands of
  // tensors, and a linear find() made building the table quadratic.
  // std::hash and == counted into a NameWork. Not noexcept, so that libstdc++ keeps each
  // key's hash, as it does for std::hash, and compares names only when hashes are equal.
  struct NameHash {
    NameWork* work;
    size_t operator()(const std::string& name) const;
  };
  struct NameEqual {
    NameWork* work;
    bool operator()(const std::string& a, const std::string& b) const;
  };
  std::unordered_map<std::string, size_t, NameHash, NameEqual> index_;
  size_t total_ = 0;
};

}  // namespace mt
