// The dense linear layers' bf16 GEMMs at the model's shapes, on the two kernels a bf16
// linear can run (kernels/dense_gemm_bf16.h): oneDNN's matmul (matmul_bf16.h) and the AMX
// tile kernel with the weight packed once (one group of the grouped GEMM). Forward,
// backward-input and backward-weight per linear, alternated A/B in every round (which
// side goes first swaps each round), medians over the rounds, and the ratio.
//
//   bench_dense_bf16 [--quick] [--rounds 5] [--threads 1]
//                    [--shapes small,d256,d512,head,mlp,driver,packs]
//     small  d128, B16 T128 (the quick start's shape per rank: 2048 rows)
//     d256   4L d256 T128 B8 (1024 rows)
//     d512   6L d512 T256 B8 (2048 rows)
//     head   the lm head at d256 / d512 for vocab 256, 8192 and 32000 (1024 rows)
//     mlp    the GPT MLP's GELU beside its GEMMs (fc forward + GELU, the projection's input
//            gradient + GELU's gradient) at d128 / d256 / d512, three ways alternated: the
//            tiles with GELU in their stores, the tiles then GELU's pass (the unfused
//            composition on the same kernel), oneDNN then GELU's pass
//     driver the dense tile driver (dense_gemm_bf16_amx) against the grouped GEMM's AMX
//            kernel as one group on the same packs (the dense path before it), at d256's
//            layers: forward without bias and input gradient, alternated
//     packs  the two weight packs made once per change of the weights, in one pass over
//            the fp32 weight (DenseBf16Weight) against to_bf16 then grouped_bf16_pack twice
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
#include "kernels/gelu.h"
#include "kernels/grouped_gemm.h"

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

// The MLP of width C over N rows: fc (4C, C) and the projection (C, 4C).
struct Mlp {
  int N, C, H;
  std::vector<mt::bf16> x, dy, act, d_fc;
  std::vector<float> w_fc, b_fc, w_proj, pre, stage;
  uint64_t version = 1;
  mt::DenseBf16Weight fc, proj;
  Mlp(int n, int c)
      : N(n),
        C(c),
        H(4 * c),
        x(size_t(n) * c),
        dy(size_t(n) * c),
        act(size_t(n) * H),
        d_fc(size_t(n) * H),
        w_fc(mt::bench::filled(size_t(H) * c, 0.04f)),
        b_fc(mt::bench::filled(size_t(H), 0.1f)),
        w_proj(mt::bench::filled(size_t(c) * H, 0.04f, 3)),
        pre(size_t(n) * H),
        stage(size_t(n) * H),
        fc(c, H, &version),
        proj(H, c, &version) {
    mt::to_bf16(x.data(), mt::bench::filled(x.size(), 1.0f, 7).data(), x.size());
    mt::to_bf16(dy.data(), mt::bench::filled(dy.size(), 1.0f, 9).data(), dy.size());
  }
  void fused() {
    mt::dense_bf16_forward_gelu(pre.data(), act.data(), x.data(), fc, w_fc.data(), b_fc.data(), N);
    mt::dense_bf16_backward_input_dgelu(d_fc.data(), pre.data(), dy.data(), proj, w_proj.data(), N,
                                        stage.data());
  }
  void unfused() {  // the block's calls before the fusion
    mt::dense_bf16_forward(pre.data(), x.data(), fc, w_fc.data(), nullptr, N);
    mt::bias_gelu_forward_bf16(act.data(), pre.data(), b_fc.data(), N, H);
    mt::dense_bf16_backward_input(stage.data(), dy.data(), proj, w_proj.data(), N, false);
    mt::gelu_backward_bf16(d_fc.data(), pre.data(), stage.data(), size_t(N) * H);
  }
};

void run_mlp(int N, int C, const Options& o) {
  Mlp m(N, C);
  const double batch = o.quick ? 0.002 : 0.04;
  enum { kFused, kUnfused, kOneDnn, kWays };
  std::vector<double> ms[kWays];
  for (int r = 0; r < o.rounds; ++r)
    for (int k = 0; k < kWays; ++k) {
      const int way = (k + r) % kWays;  // which way goes first rotates each round
      mt::ScopedDenseBf16Path path(way == kOneDnn ? mt::DenseBf16Path::onednn
                                                  : mt::DenseBf16Path::amx);
      const std::function<void()> fn = [&] { way == kFused ? m.fused() : m.unfused(); };
      fn();  // warm-up: primitive creation, the packs of this version
      ms[way].push_back(mt::bench::batch_seconds(fn, batch, false) * 1e3);
    }
  const double f = mt::bench::median(ms[kFused]), u = mt::bench::median(ms[kUnfused]),
               d = mt::bench::median(ms[kOneDnn]);
  std::printf(
      "  mlp d%-4d M %5d fc fwd+gelu, proj bwd_input+dgelu  tiles fused %7.3f ms  tiles then "
      "gelu %7.3f ms  onednn then gelu %7.3f ms  fused/unfused %.2f  fused/onednn %.2f\n",
      C, N, f, u, d, f / u, f / d);
}

// The dense driver against the grouped kernel on the same packed weight (no bias: the
// grouped call has none).
void run_driver(const Shape& s, const Options& o) {
  Linear l(s);
  const mt::ScopedDenseBf16Path tiles(mt::DenseBf16Path::amx);
  const uint32_t* fwd = l.w16.packed(l.w.data(), mt::GroupedPack::forward);
  const uint32_t* bwd = l.w16.packed(l.w.data(), mt::GroupedPack::backward_input);
  const int32_t offset[2] = {0, s.N};
  const mt::bf16* none = nullptr;
  const std::function<void()> ways[2][2] = {
      {[&] { mt::dense_bf16_forward(l.y.data(), l.x.data(), l.w16, l.w.data(), nullptr, s.N); },
       [&] {
         mt::grouped_matmul_bf16_forward(l.y.data(), l.x.data(), &none, offset, 1, s.in, s.out,
                                         &fwd);
       }},
      {[&] { l.backward_input(); },
       [&] {
         mt::grouped_matmul_bf16_backward_input(l.dx.data(), l.dy.data(), &none, offset, 1, s.in,
                                                s.out, false, &bwd);
       }}};
  const char* names[2] = {"fwd", "bwd_input"};
  for (int p = 0; p < 2; ++p) {
    std::vector<double> ms[2];
    for (int r = 0; r < o.rounds; ++r)
      for (int k = 0; k < 2; ++k) {
        const int way = (k + r) % 2;
        ways[p][way]();
        ms[way].push_back(mt::bench::batch_seconds(ways[p][way], o.quick ? 0.002 : 0.04, false) *
                          1e3);
      }
    const double d = mt::bench::median(ms[0]), g = mt::bench::median(ms[1]);
    std::printf("  %-22s %-10s dense driver %7.3f ms  grouped kernel %7.3f ms  ratio %.2f\n",
                s.name.c_str(), names[p], d, g, d / g);
  }
}

// The packs of a (OC, C) weight after each change: one pass against the composition.
void run_packs(int C, int OC, const Options& o) {
  const std::vector<float> w = mt::bench::filled(size_t(OC) * C, 0.04f);
  uint64_t version = 1;
  mt::DenseBf16Weight w16(C, OC, &version);
  std::vector<mt::bf16> copy(w.size());
  std::vector<uint32_t> packs[2];
  const std::function<void()> ways[2] = {
      [&] {
        ++version;
        w16.packed(w.data(), mt::GroupedPack::forward);
      },
      [&] {
        mt::to_bf16(copy.data(), w.data(), copy.size());
        for (const mt::GroupedPack which :
             {mt::GroupedPack::forward, mt::GroupedPack::backward_input}) {
          packs[int(which)].resize(mt::grouped_bf16_packed_size(which, C, OC));
          mt::grouped_bf16_pack(packs[int(which)].data(), which, copy.data(), C, OC);
        }
      }};
  std::vector<double> ms[2];
  for (int r = 0; r < o.rounds; ++r)
    for (int k = 0; k < 2; ++k) {
      const int way = (k + r) % 2;
      ways[way]();
      ms[way].push_back(mt::bench::batch_seconds(ways[way], o.quick ? 0.002 : 0.04, false) * 1e3);
    }
  const double one = mt::bench::median(ms[0]), two = mt::bench::median(ms[1]);
  std::printf("  packs %5d x %5d  one pass %7.3f ms  to_bf16 then packs %7.3f ms  ratio %.2f\n", OC,
              C, one, two, one / two);
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
                   "[--shapes small,d256,d512,head,mlp,driver,packs]\n");
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
  for (const std::string& set : o.shapes) {
    if (set == "driver") {
      for (const Shape& s : shapes_of("d256")) run_driver(s, o);
      continue;
    }
    if (set == "packs") {
      for (const auto& [C, OC] :
           {std::pair{256, 768}, std::pair{256, 1024}, std::pair{1024, 256}, std::pair{512, 2048}})
        run_packs(C, OC, o);
      continue;
    }
    if (set == "mlp") {
      for (const auto& [N, C] : {std::pair{2048, 128}, std::pair{1024, 256}, std::pair{2048, 512}})
        run_mlp(N, C, o);
      continue;
    }
    for (const Shape& s : shapes_of(set)) run_shape(s, o);
  }
  return 0;
}
