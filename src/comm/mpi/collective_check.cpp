#include "comm/mpi/collective_check.h"

#include <mpi.h>

#include <algorithm>
#include <vector>

#include "comm/mpi/mpi_check.h"
#include "comm/mpi/mpi_work.h"

namespace mt {

namespace {

const char* kind_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::all_reduce:
      return "all_reduce";
    case CollectiveKind::reduce_scatter:
      return "reduce_scatter";
    case CollectiveKind::all_gather:
      return "all_gather";
    case CollectiveKind::broadcast:
      return "broadcast";
    case CollectiveKind::all_to_all_v:
      return "all_to_all_v";
    case CollectiveKind::barrier:
      return "barrier";
  }
  return "unknown collective";
}

constexpr int kFields = 5;

}  // namespace

std::string describe(const CollectiveCall& c) {
  std::string s = str(kind_name(c.kind), "(");
  if (c.kind == CollectiveKind::barrier) return s + ")";
  if (c.count >= 0) s += str("count ", c.count, ", ");
  s += dtype_name(static_cast<DType>(c.dtype));
  if (c.op >= 0) s += str(", ", reduce_op_name(static_cast<ReduceOp>(c.op)));
  if (c.root >= 0) s += str(", root ", c.root);
  return s + ")";
}

void check_collective(const std::shared_ptr<MpiGroup>& group, const CollectiveCall& call,
                      uint64_t seq) {
  const std::string what = str(kind_name(call.kind), " #", seq);
  int64_t mine[kFields] = {static_cast<int64_t>(call.kind), call.count, call.dtype, call.op,
                           call.root};
  std::vector<int64_t> all(static_cast<size_t>(kFields) * group->size());
  MPI_Request req;
  MT_MPI_CHECK(MPI_Iallgather(mine, kFields, MPI_INT64_T, all.data(), kFields, MPI_INT64_T,
                              group->check_comm, &req),
               "collective check of ", what, " on group ", group->name);
  mpi_wait_with_timeout(group, &req, str("collective check of ", what));
  for (int r = 0; r < group->size(); ++r) {
    const int64_t* theirs = &all[static_cast<size_t>(r) * kFields];
    if (std::equal(theirs, theirs + kFields, mine)) continue;
    CollectiveCall other{static_cast<CollectiveKind>(theirs[0]), theirs[1], theirs[2], theirs[3],
                         theirs[4]};
    throw RuntimeError(str(what, " on group ", group->name, ": mismatched collective: rank ",
                           group->world_rank, " called ", describe(call), " but rank ",
                           group->members[r], " called ", describe(other)));
  }
}

void check_all_to_all_counts(const std::shared_ptr<MpiGroup>& group, const size_t* send_counts,
                             const size_t* recv_counts, uint64_t seq) {
  const size_t n = static_cast<size_t>(group->size());
  std::vector<uint64_t> out(send_counts, send_counts + n), in(n);
  MPI_Request req;
  MT_MPI_CHECK(MPI_Ialltoall(out.data(), 1, MPI_UINT64_T, in.data(), 1, MPI_UINT64_T,
                             group->check_comm, &req),
               "count check of all_to_all_v #", seq, " on group ", group->name);
  mpi_wait_with_timeout(group, &req, str("count check of all_to_all_v #", seq));
  for (size_t r = 0; r < n; ++r) {
    if (in[r] == recv_counts[r]) continue;
    throw RuntimeError(str("all_to_all_v #", seq, " on group ", group->name, ": rank ",
                           group->members[r], " sends ", in[r], " elements to rank ",
                           group->world_rank, ", which expects ", recv_counts[r]));
  }
}

}  // namespace mt
