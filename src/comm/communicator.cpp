#include "comm/communicator.h"

#include "core/error.h"

namespace mt {

thread_local bool WaitedAtOnce::active_ = false;

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::u8:
      return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u8:
      return "u8";
  }
  return "?";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
  }
  return "?";
}

// Layout: [kind:3 bits][chunk:8 bits][microbatch:16 bits] -> fits MPI's guaranteed tag
// range (MPI_TAG_UB >= 32767 is all the standard promises; Open MPI gives 2^31-1, and we
// check the bound at MPI init).
int make_p2p_tag(P2PKind kind, int chunk, int microbatch) {
  MT_CHECK(chunk >= 0 && chunk < 256, "chunk ", chunk);
  MT_CHECK(microbatch >= 0 && microbatch < 65536, "microbatch ", microbatch);
  return (static_cast<int>(kind) << 24) | (chunk << 16) | microbatch;
}

std::string group_name(const std::string& kind, const std::vector<int>& members) {
  std::string out = kind;  // appended piecewise: g++ 12 -O3 false -Wrestrict on kind + "["
  out += '[';
  for (size_t i = 0; i < members.size();) {
    size_t j = i;
    while (j + 1 < members.size() && members[j + 1] == members[j] + 1) ++j;
    if (i > 0) out += ",";
    if (j - i >= 2) {
      out += std::to_string(members[i]);
      out += "..";
      out += std::to_string(members[j]);
    } else {
      out += std::to_string(members[i]);
      if (j > i) {
        out += ',';
        out += std::to_string(members[j]);
      }
    }
    i = j + 1;
  }
  out += ']';
  return out;
}

}  // namespace mt
