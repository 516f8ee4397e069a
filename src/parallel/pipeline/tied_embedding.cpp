#include "parallel/pipeline/tied_embedding.h"

#include <vector>

#include "core/error.h"

namespace mt {

void sum_tied_embedding_grad(Communicator& pp, float* grad, size_t count) {
  const int p = pp.size(), me = pp.rank();
  if (p == 1) return;
  MT_CHECK(me == 0 || me == p - 1, "only the first and the last stage hold the tied embedding");
  const int peer = me == 0 ? p - 1 : 0;
  // Its own tag kind and chunk value, apart from every activation/gradient message.
  const int tag = make_p2p_tag(P2PKind::user, 255, 0);
  std::vector<float> theirs(count);
  Work sent = pp.send(grad, count, DType::f32, peer, tag);
  Work got = pp.recv(theirs.data(), count, DType::f32, peer, tag);
  got.wait();
  sent.wait();  // grad is read by the send until it completes
  for (size_t i = 0; i < count; ++i) grad[i] += theirs[i];
}

void sum_tied_embedding_grad(Communicator& pp, DataParallel& dp, const ParamTable& table,
                             const std::string& tied_name, std::vector<float>& full) {
  const ParamInfo* wte = tied_name.empty() ? nullptr : table.find(tied_name);
  full.clear();
  if (!wte) return;
  full.resize(wte->numel);
  dp.read_grad(*wte, full.data());
  sum_tied_embedding_grad(pp, full.data(), full.size());
  dp.write_grad(*wte, full.data());
}

std::span<const float> tied_embedding_copy(const Communicator& pp, const std::vector<float>& full) {
  if (pp.size() == 1 || pp.rank() != pp.size() - 1) return {};
  return full;
}

}  // namespace mt
