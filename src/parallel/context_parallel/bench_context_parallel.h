// `meshtrain bench cp`: the context-parallel attention core alone (ring or all-gather,
// context_parallel_attention.h), forward + backward of one layer, on the local backend's
// ranks as threads, against one worker's flash attention over the whole sequence. A table
// in the style of `bench comm`: per sequence length and K/V mode, the time per forward +
// backward (median repeat, slowest rank), the ideal (one worker's time / cp), their ratio,
// the time blocked on the cp group (the transfers not hidden), its share of the step, and
// the bytes of one K/V block. Timings mean something only on a quiet machine.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace mt {

struct CpBenchOptions {
  int ranks = 2;                         // the cp size (local backend)
  std::vector<int> seqs = {1024, 4096};  // whole-sequence lengths T
  int batch = 1;
  int heads = 16, kv_heads = 2, head_dim = 64;
  std::string comm = "both";  // ring | allgather | both
  int threads = 1;            // compute threads per rank
  int iters = 2, repeats = 3;
  double timeout_s = 300;
};

// Prints the table to out (rank 0). Bad options throw UsageError. Returns the exit code.
int run_cp_bench(const CpBenchOptions& opts, std::ostream& out);

}  // namespace mt
