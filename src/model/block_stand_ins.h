// The blocks of a dry run (model/dry_model.h). Blocks of one kind hold the same sizes
// (block_kind, block.h), and a large model has many: a dry chunk builds the first block
// of each kind, with a parameter table and a slot layout of its own, and lets it stand for
// every block of that kind. The chunk then counts it once per layer: its unit, its slot
// reservations, its own arenas and bf16 copies, and it folds the workspaces it shares over
// it as over real blocks. So a dry run builds a few blocks, not the model, and the planner
// can afford one per candidate layout. One BlockStandIns serves every chunk of a dry run:
// they are built with the same options.
#pragma once

#include <map>
#include <memory>

#include "model/activation_pool.h"
#include "model/block.h"
#include "model/kernel_target.h"
#include "model/param_table.h"
#include "model/unit_size.h"

namespace mt {

class BlockStandIns {
 public:
  // target: whose kernels the dry run counts (model/kernel_target.h), profile what the
  // profile says of them (KernelTarget::profile); every chunk built with these stand-ins
  // counts the same.
  explicit BlockStandIns(KernelTarget target = KernelTarget::this_host,
                         const ProfileKernels& profile = {})
      : target_(target), profile_(profile) {}
  KernelTarget target() const { return target_; }
  const ProfileKernels& profile() const { return profile_; }

  struct StandIn {
    std::unique_ptr<ParamTable> table;  // the block's entries (it points into them)
    std::unique_ptr<Block> block;
    UnitSize unit;
    size_t slot_floats = 0;  // what it reserved in its slot layout
  };

  // The stand-in for blocks of `kind`, made by build(table, layout) -> unique_ptr<Block>
  // the first time a block of that kind is asked for.
  template <class Build>
  const StandIn& get(int kind, Build&& build) {
    auto it = stand_ins_.find(kind);
    if (it == stand_ins_.end()) {
      StandIn s;
      s.table = std::make_unique<ParamTable>();
      SlotLayout layout;
      s.block = build(*s.table, layout);
      s.unit = unit_size_since(*s.table, 0);
      s.slot_floats = layout.total();
      it = stand_ins_.emplace(kind, std::move(s)).first;
    }
    return it->second;
  }

 private:
  KernelTarget target_;
  ProfileKernels profile_;
  std::map<int, StandIn> stand_ins_;
};

}  // namespace mt
