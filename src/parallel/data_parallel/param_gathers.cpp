#include "parallel/data_parallel/param_gathers.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace mt {

ParamGathers::ParamGathers(const FlatLayout& layout, Communicator& dp, const float* shard,
                           ExposedTime& exposed, std::vector<Overlay> overlays)
    : layout_(layout), dp_(dp), shard_(shard), exposed_(exposed), overlays_(std::move(overlays)) {
  const std::vector<size_t> floats = buffer_floats(layout_);
  edges_.resize(size_t(layout_.num_chunks()));
  for (size_t c = 0; c < edges_.size(); ++c) edges_[c].buf.resize(floats[c]);
  for (size_t i = 0; i < blocks_.size(); ++i) blocks_[i].buf.resize(floats[edges_.size() + i]);
}

std::vector<size_t> ParamGathers::buffer_floats(const FlatLayout& layout) {
  std::vector<size_t> floats;
  size_t block_max = 0;
  for (size_t u = 0; u < layout.units().size(); ++u)
    if (!layout.is_edge(int(u))) block_max = std::max(block_max, layout.units()[u].padded);
  for (int c = 0; c < layout.num_chunks(); ++c)
    floats.push_back(layout.units()[size_t(layout.first_unit(c))].padded);
  floats.insert(floats.end(), std::tuple_size_v<decltype(blocks_)>, block_max);
  return floats;
}

ParamGathers::~ParamGathers() {
  // Never leave a collective writing into freed buffers.
  try {
    drop_all();
  } catch (...) {
  }
}

float* ParamGathers::use(int unit, int next_unit) {
  Slot* s = find(unit);
  if (!s) s = issue(unit);
  exposed_.wait(std::move(s->work));
  s->work = Work();
  s->in_use = true;
  if (!s->overlaid) overlay(*s);
  float* params = s->buf.data();
  // Prefetch: start the next unit's gather now so it arrives while this one computes.
  if (next_unit >= 0 && !find(next_unit)) {
    if (layout_.is_edge(next_unit)) {
      issue(next_unit);
    } else {
      for (Slot& b : blocks_)
        if (!b.in_use) {
          issue(next_unit);
          break;
        }
    }
  }
  return params;
}

void ParamGathers::release(int unit) {
  // The buffer may be reused from now on; its contents stay valid until then, so the last
  // block's forward gather also serves its backward.
  if (!layout_.is_edge(unit))
    if (Slot* s = find(unit)) s->in_use = false;
}

void ParamGathers::drop_all() {
  auto reset = [&](Slot& s) {
    exposed_.wait(s.work);
    s.work = Work();
    s.unit = -1;
    s.in_use = false;
  };
  for (Slot& s : edges_) reset(s);
  for (Slot& s : blocks_) reset(s);
}

void ParamGathers::poll() {
  for (Slot& s : edges_) s.work.test();
  for (Slot& s : blocks_) s.work.test();
}

size_t ParamGathers::bytes() const {
  size_t n = 0;
  for (const Slot& s : edges_) n += s.buf.bytes();
  for (const Slot& s : blocks_) n += s.buf.bytes();
  return n;
}

void ParamGathers::overlay(Slot& s) const {
  s.overlaid = true;
  if (s.unit < 0) return;
  const FlatBucket& b = layout_.buckets()[size_t(layout_.units()[size_t(s.unit)].bucket)];
  for (const Overlay& o : overlays_)
    if (o.flat >= b.flat_lo && o.flat < b.flat_hi)
      std::memcpy(s.buf.data() + (o.flat - b.flat_lo), o.src, o.n * sizeof(float));
}

ParamGathers::Slot* ParamGathers::find(int unit) {
  if (layout_.is_edge(unit)) {
    Slot& e = edges_[size_t(layout_.units()[size_t(unit)].chunk)];
    return e.unit == unit ? &e : nullptr;
  }
  for (Slot& s : blocks_)
    if (s.unit == unit) return &s;
  return nullptr;
}

ParamGathers::Slot* ParamGathers::issue(int unit) {
  Slot* s = &edges_[size_t(layout_.units()[size_t(unit)].chunk)];
  if (!layout_.is_edge(unit)) {
    s = nullptr;
    for (Slot& c : blocks_)
      if (!c.in_use && (!s || c.unit < 0)) s = &c;  // prefer an empty buffer
    MT_CHECK(s != nullptr, "no free ZeRO-3 gather buffer for unit ", unit);
  }
  exposed_.wait(std::move(s->work));  // the buffer must be idle before it is overwritten
  const FlatBucket& b = layout_.buckets()[size_t(layout_.units()[size_t(unit)].bucket)];
  s->unit = unit;
  s->overlaid = false;
  if (dp_.size() > 1) {
    s->work = dp_.all_gather(shard_ + b.shard_off, s->buf.data(), b.chunk, DType::f32);
  } else {
    s->work = Work();
    std::memcpy(s->buf.data(), shard_ + b.shard_off, b.chunk * sizeof(float));
  }
  return s;
}

}  // namespace mt
