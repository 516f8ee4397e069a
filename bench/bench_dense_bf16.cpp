// The dense linear layers' bf16 GEMMs at the model's shapes, on the two kernels a bf16
// linear can run (kernels/dense_gemm_bf16.h): oneDNN's matmul (matmul_bf16.h) and the AMX
// tile kernel with the weight packed once (one group of the grouped GEMM). Forward,
// backward-input and backward-weight per linear, alternated A/B in every round (which
// side goes first swaps each round), medians over the rounds, and the ratio.
//
//   bench_dense_bf16 [--quick] [--rounds 5] [--threads 1] [--shapes small,d256,d512,head]
//     small  d128, B16 T128 (the quick start's shape per rank: 2048 rows)
//     d256   4L d256 T128 B8 (1024 rows)
//     d512   6L d512 T256 B8 (2048 rows)
//     head   the lm head at d256 / d512 for vocab 256, 8192 and 32000 (1024 rows)
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/timer.h"
#include "kernels/bf16.h"
#include "kernels/dense_gemm_bf16.h"

namespace {

struct Options {
  bool quick = false;
  int rounds = 5, threads = 1;
  std::vector<std::string> shapes = {"small", "d256", "d512", "head"};
};

struct Shape {
  std::string name;
  int N, in, out;  // rows, the linear's in and out features
};

std::vector<Shape> shapes_of(const std::string& set) {
  auto block = [](const std::string& tag, int N, int C) {
    return std::vector<Shape>{{tag + " qkv", N, C, 3 * C},
                              {tag + " attn_proj", N, C, C},
                              {tag + " fc", N, C, 4 * C},
                              {tag + " mlp_proj", N, 4 * C, C}};
  };
  if (set == "small") return block("d128", 2048, 128);
  if (set == "d256") return block("d256", 1024, 256);
  if (set == "d512") return block("d512", 2048, 512);
  std::vector<Shape> head;
  for (int C : {256, 512})
    for (int V : {256, 8192, 32000})
      head.push_back({"head d" + std::to_string(C) + " V" + std::to_string(V), 1024, C, V});
  return head;
}

// One linear's three products on one path.
struct Linear {
  Shape s;
  std::vector<mt::bf16> x, dy;
  std::vector<float> w, y, dx, dw, b, db;
  uint64_t version = 1;
  mt::DenseBf16Weight w16;

  explicit Linear(const Shape& shape)
      : s(shape),
        x(size_t(s.N) * s.in),
        dy(size_t(s.N) * s.out),
        w(mt::bench::filled(size_t(s.out) * s.in, 0.04f)),
        y(size_t(s.N) * s.out),
        dx(size_t(s.N) * s.in),
        dw(size_t(s.out) * s.in),
        b(mt::bench::filled(size_t(s.out), 0.1f)),
        db(size_t(s.out)),
        w16(s.in, s.out, &version) {
    mt::to_bf16(x.data(), mt::bench::filled(x.size(), 1.0f, 7).data(), x.size());
    mt::to_bf16(dy.data(), mt::bench::filled(dy.size(), 1.0f, 9).data(), dy.size());
  }
  void forward() { mt::dense_bf16_forward(y.data(), x.data(), w16, w.data(), b.data(), s.N); }
  void backward_input() {
    mt::dense_bf16_backward_input(dx.data(), dy.data(), w16, w.data(), s.N, false);
  }
  void backward_weight() {
    mt::dense_bf16_backward_weight(dw.data(), db.data(), dy.data(), x.data(), s.N, s.in, s.out);
  }
};

// Median ms of a product on each path, alternated round by round.
struct Pair {
  std::vector<double> onednn, amx;
};

void run_shape(const Shape& s, const Options& o) {
  Linear l(s);
  const double batch = o.quick ? 0.002 : 0.04;
  const std::function<void()> products[3] = {[&] { l.forward(); }, [&] { l.backward_input(); },
                                             [&] { l.backward_weight(); }};
  const char* names[3] = {"fwd", "bwd_input", "bwd_weight"};
  Pair pairs[3];
  for (int r = 0; r < o.rounds; ++r)
    for (int side = 0; side < 2; ++side) {
      const bool amx = (side + r) % 2 == 0;  // which path goes first swaps each round
      mt::ScopedDenseBf16Path path(amx ? mt::DenseBf16Path::amx : mt::DenseBf16Path::onednn);
      for (int p = 0; p < 3; ++p) {
        products[p]();  // warm-up: primitive creation, the pack of this version
        (amx ? pairs[p].amx : pairs[p].onednn)
            .push_back(mt::bench::batch_seconds(products[p], batch, false));
      }
    }
  const double flops = 2.0 * s.N * s.in * s.out;
  for (int p = 0; p < 3; ++p) {
    const double a = mt::bench::median(pairs[p].onednn), b = mt::bench::median(pairs[p].amx);
    std::printf(
        "  %-22s %-10s M %5d K/N %5d/%5d  onednn %7.3f ms %6.0f GF/s  amx %7.3f ms %6.0f "
        "GF/s  amx/onednn %.2f\n",
        s.name.c_str(), names[p], s.N, s.in, s.out, a * 1e3, flops / a * 1e-9, b * 1e3,
        flops / b * 1e-9, b / a);
  }
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      o.quick = true, o.rounds = 1;
    } else if (a == "--rounds" && i + 1 < argc) {
      o.rounds = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--threads" && i + 1 < argc) {
      o.threads = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--shapes" && i + 1 < argc) {
      o.shapes = mt::bench::parse_names(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: bench_dense_bf16 [--quick] [--rounds N] [--threads T] "
                   "[--shapes small,d256,d512,head]\n");
      std::exit(2);
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (!mt::dense_bf16_path_available(mt::DenseBf16Path::amx)) {
    std::printf("no AMX on this CPU: only oneDNN's path runs here, nothing to compare\n");
    return 0;
  }
  omp_set_num_threads(o.threads);
  std::printf("bf16 dense GEMMs, %d thread(s), %d alternated round(s); onednn = %s, amx = %s\n",
              o.threads, o.rounds, mt::dense_bf16_isa(mt::DenseBf16Path::onednn).c_str(),
              mt::dense_bf16_isa(mt::DenseBf16Path::amx).c_str());
  for (const std::string& set : o.shapes)
    for (const Shape& s : shapes_of(set)) run_shape(s, o);
  return 0;
}
