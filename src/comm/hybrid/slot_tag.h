// The tags of a hierarchical group's messages between processes
// (hierarchical_communicator.h): a member sends on the receiver slot's point-to-point
// communicator, so two members of one process sending to the same receiver with the same
// tag are told apart by the sender's local index, folded in above the caller's tag. The
// last tag below the stride belongs to the group's own all-to-all-v (direct_all_to_all.h),
// so a caller's message never matches its rows.
#pragma once

#include <climits>
#include <cstdint>
#include <string>

#include "core/error.h"

namespace mt::hybrid {

// make_p2p_tag stays below 2^27 and Open MPI's tags reach 2^31-1: 16 slots fit.
constexpr int64_t kSlotTagStride = int64_t(1) << 27;
constexpr int kAllToAllTag = int(kSlotTagStride - 1);

// The tag a member of local index `slot` sends `tag` with (tag: the caller's, or
// kAllToAllTag).
inline int slot_tag(int slot, int tag, const std::string& group) {
  MT_CHECK(tag >= 0 && tag < kSlotTagStride, "point-to-point tag ", tag, " on group ", group,
           " is outside 0..", kSlotTagStride - 1);
  const int64_t t = slot * kSlotTagStride + tag;
  MT_CHECK(t <= INT_MAX, "point-to-point between processes on group ", group, " from local rank ",
           slot, ": at most 16 members per process can be told apart by tag");
  return static_cast<int>(t);
}

// A caller's tag: any but the all-to-all's.
inline int caller_slot_tag(int slot, int tag, const std::string& group) {
  MT_CHECK(tag != kAllToAllTag, "point-to-point tag ", tag, " on group ", group,
           " is reserved for the group's all-to-all");
  return slot_tag(slot, tag, group);
}

}  // namespace mt::hybrid
