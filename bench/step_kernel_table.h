// bench_step's per-kernel table: one block's kernel calls as block.cpp issues them, plus the
// embedding, head and optimizer, with the model's shapes and their per-step multiplicity, on
// buffers separate from the model's, so that a measured step can be attributed to kernels.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "step_config.h"

namespace mt::bench {

struct KernelCall {
  std::string name;
  int count;     // calls per step
  double flops;  // per call; 0 for memory-bound kernels
  std::function<void()> fn;
};

class KernelTable {
 public:
  // bf16: the linear layers' GEMMs as --precision bf16 runs them (bf16 operands, and the
  // conversions the layers add), the rest as in fp32.
  KernelTable(const StepConfig& bc, bool bf16);
  // Every row, in the table's order; each call reads and writes this table's buffers.
  std::vector<KernelCall> calls();

 private:
  std::vector<KernelCall> linear(const char* name, int in, int out, bool bias);
  std::vector<KernelCall> attention();
  std::vector<KernelCall> norms_and_activations();
  std::vector<KernelCall> bf16_conversions();
  std::vector<KernelCall> head_embedding_and_optimizer();

  StepConfig bc_;
  bool bf16_ = false;
  std::vector<bf16> x16, dy16, w16;
  std::vector<float> x, y, dy, dx, qkv, dqkv, w, dw, bias, dbias, att, scratch, mean, rstd, losses,
      logits, p, g, m, v, wpe, dwpe, zeroed;
  std::vector<int> idx;
  size_t P = 0;
};

}  // namespace mt::bench
