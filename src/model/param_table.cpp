#include "model/param_table.h"

#include <algorithm>

#include "core/error.h"
#include "core/rng.h"

namespace mt {

int64_t ParamInfo::global_numel() const {
  int64_t n = 1;
  for (int64_t d : global_shape) n *= d;
  return n;
}

void ParamInfo::for_each_element(const std::function<void(size_t, int64_t)>& fn) const {
  if (shard.replicated()) {
    for (size_t i = 0; i < numel; ++i) fn(i, int64_t(i));
    return;
  }
  // View both shapes as (outer, dim, inner) around the sharded dimension.
  const int d = shard.dim;
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= global_shape[i];
  for (size_t i = d + 1; i < global_shape.size(); ++i) inner *= global_shape[i];
  const int64_t gdim = global_shape[d], ldim = local_shape[d];
  for (int64_t o = 0; o < outer; ++o) {
    int64_t lrow = 0;
    for (const auto& b : shard.blocks) {
      for (int64_t r = 0; r < b.len; ++r, ++lrow) {
        int64_t grow = b.start + r;
        if (grow >= gdim) continue;  // padding
        size_t lbase = size_t((o * ldim + lrow) * inner);
        int64_t gbase = (o * gdim + grow) * inner;
        for (int64_t i = 0; i < inner; ++i) fn(lbase + i, gbase + i);
      }
    }
  }
}

size_t ParamTable::NameHash::operator()(const std::string& name) const {
  if (work) ++work->hashes;
  return std::hash<std::string>{}(name);
}

bool ParamTable::NameEqual::operator()(const std::string& a, const std::string& b) const {
  if (work) ++work->comparisons;
  return a == b;
}

ParamInfo& ParamTable::add(std::string name, std::vector<int64_t> global_shape, InitKind init,
                           float init_std, ShardSpec shard, Placement place) {
  MT_CHECK(!index_.contains(name), "duplicate parameter ", name);
  ParamInfo p;
  p.name = std::move(name);
  p.global_shape = global_shape;
  p.local_shape = global_shape;
  if (!shard.replicated()) {
    int64_t len = 0;
    for (const auto& b : shard.blocks) len += b.len;
    p.local_shape[shard.dim] = len;
  }
  p.shard = std::move(shard);
  p.numel = 1;
  for (int64_t d : p.local_shape) p.numel *= size_t(d);
  const bool packed = place == Placement::after_previous && !entries_.empty();
  p.offset = packed ? entries_.back().offset + entries_.back().numel : total_;
  p.init = init;
  p.init_std = init_std;
  total_ = (p.offset + p.numel + 15) / 16 * 16;
  entries_.push_back(std::move(p));
  index_.emplace(entries_.back().name, entries_.size() - 1);
  return entries_.back();
}

const ParamInfo* ParamTable::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

const ParamInfo& ParamTable::at(const std::string& name) const {
  const ParamInfo* p = find(name);
  MT_CHECK(p != nullptr, "no parameter named ", name);
  return *p;
}

const ParamInfo& ParamTable::at_offset(size_t offset) const {
  auto it = std::upper_bound(entries_.begin(), entries_.end(), offset,
                             [](size_t off, const ParamInfo& p) { return off < p.offset; });
  MT_CHECK(it != entries_.begin() && offset < std::prev(it)->offset + std::prev(it)->numel,
           "no tensor at arena offset ", offset);
  return *std::prev(it);
}

size_t ParamTable::numel() const {
  size_t n = 0;
  for (const auto& p : entries_) n += p.numel;
  return n;
}

void ParamTable::init(float* arena, uint64_t seed) const {
  for (const auto& p : entries_) {
    float* dst = arena + p.offset;
    const uint64_t stream = hash_name(p.name);
    p.for_each_element([&](size_t l, int64_t g) {
      switch (p.init) {
        case InitKind::zeros:
          dst[l] = 0.f;
          break;
        case InitKind::ones:
          dst[l] = 1.f;
          break;
        case InitKind::normal:
          dst[l] = float(p.init_std * normal01(seed, stream, uint64_t(g)));
          break;
      }
    });
  }
}

}  // namespace mt
