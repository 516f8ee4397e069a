#include "train/safetensors.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include "test_util/temp_dir.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "kernels/bf16.h"
#include "test_util/usage_error.h"

namespace fs = std::filesystem;

namespace mt {
namespace {

using test_util::TempDir;

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// A file with a hand-written header, for the corrupt cases.
void write_raw(const std::string& path, const std::string& header, size_t data_bytes,
               uint64_t declared_len = UINT64_MAX) {
  uint64_t n = declared_len == UINT64_MAX ? header.size() : declared_len;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << std::string(data_bytes, '\0');
}

using test_util::refusal_of;

std::string open_error(const std::string& path) {
  return refusal_of([&] { SafetensorsFile f(path); });
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

struct Sample {
  std::vector<float> w{1.5f, -2.f, 3.25f, 0.f, 1e-3f, -7.f};  // [2, 3]
  std::vector<float> b{0.5f, 42.f, -1.f};                     // [3]
  float s = 3.f;                                              // []
  std::vector<SafetensorsTensor> tensors() const {
    return {{"transformer.h.0.attn.c_attn.weight", {2, 3}, w.data()},
            {"transformer.h.0.attn.c_attn.bias", {3}, b.data()},
            {"scalar", {}, &s},
            {"empty", {0, 4}, nullptr}};
  }
};

TEST(Safetensors, RoundTrip) {
  TempDir tmp;
  Sample s;
  write_safetensors(tmp / "m.safetensors", s.tensors(), {{"format", "pt"}, {"step", "7"}});
  SafetensorsFile f(tmp / "m.safetensors");
  EXPECT_EQ(f.names(),
            (std::vector<std::string>{"transformer.h.0.attn.c_attn.weight",
                                      "transformer.h.0.attn.c_attn.bias", "scalar", "empty"}));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("step"), "7");
  EXPECT_EQ(f.read("transformer.h.0.attn.c_attn.weight"), s.w);
  EXPECT_EQ(f.read("transformer.h.0.attn.c_attn.bias"), s.b);
  EXPECT_EQ(f.read("scalar"), std::vector<float>{3.f});
  EXPECT_TRUE(f.read("empty").empty());
  EXPECT_EQ(f.tensor("empty").shape, (TensorShape{0, 4}));
  EXPECT_NO_THROW(f.expect_shape("transformer.h.0.attn.c_attn.weight", {2, 3}));
  // Rows 1..1 of the weight: a tensor-parallel rank's slice.
  std::vector<float> row(3);
  f.read_range("transformer.h.0.attn.c_attn.weight", 3, 3, row.data());
  EXPECT_EQ(row, (std::vector<float>{0.f, 1e-3f, -7.f}));
  EXPECT_THROW(f.read_range("scalar", 0, 2, row.data()), RuntimeError);
  SafetensorsFile moved = std::move(f);
  EXPECT_EQ(moved.read("scalar"), std::vector<float>{3.f});
}

TEST(Safetensors, ByteLayoutFollowsTheSpec) {
  TempDir tmp;
  Sample s;
  write_safetensors(tmp / "m.safetensors", s.tensors());
  std::string bytes = slurp(tmp / "m.safetensors");
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(bytes[8], '{');
  std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.find("__metadata__"), std::string::npos);  // omitted when empty
  EXPECT_CONTAINS(
      header,
      R"("transformer.h.0.attn.c_attn.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})");
  EXPECT_CONTAINS(
      header,
      R"("transformer.h.0.attn.c_attn.bias":{"dtype":"F32","shape":[3],"data_offsets":[24,36]})");
  EXPECT_CONTAINS(header, R"("scalar":{"dtype":"F32","shape":[],"data_offsets":[36,40]})");
  EXPECT_CONTAINS(header, R"("empty":{"dtype":"F32","shape":[0,4],"data_offsets":[40,40]})");
  ASSERT_EQ(bytes.size(), 8 + n + 40);
  float x;
  std::memcpy(&x, bytes.data() + 8 + n + 24 + 4, 4);  // bias[1]
  EXPECT_EQ(x, 42.f);
}

TEST(Safetensors, WriterRejectsDuplicateNames) {
  TempDir tmp;
  float v = 1;
  std::vector<SafetensorsTensor> t = {{"a", {1}, &v}, {"a", {1}, &v}};
  EXPECT_CONTAINS(refusal_of([&] { write_safetensors(tmp / "d.safetensors", t); }),
                  "tensor name a is duplicated");
  EXPECT_FALSE(fs::exists(tmp / "d.safetensors"));
}

// Writing and reading used to be quadratic in the number of tensors (an ordered_json
// header looked each key up linearly; the duplicate-key parse callback rescanned the
// header after each entry): 36k tensors took about 50 s to open. Now both are linear.
TEST(Safetensors, ManyTensorsWriteAndReadInLinearTime) {
  TempDir tmp;
  const int n = 30000;
  std::vector<float> values(n);
  std::vector<SafetensorsTensor> t;
  for (int i = 0; i < n; ++i) {
    values[i] = float(i);
    t.push_back({"transformer.h." + std::to_string(i) + ".ln_1.bias", {1}, &values[i]});
  }
  const auto t0 = std::chrono::steady_clock::now();
  write_safetensors(tmp / "many.safetensors", t, {{"format", "meshtrain"}});
  SafetensorsFile f(tmp / "many.safetensors");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(f.names().size(), size_t(n));
  EXPECT_EQ(f.read("transformer.h.29999.ln_1.bias"), std::vector<float>{29999.f});
  EXPECT_EQ(f.metadata().at("format"), "meshtrain");
  EXPECT_LT(s, 3.0) << "writing and opening " << n << " tensors took " << s << " s";
}

// The reference format as Python sees it: parsed with json + struct only (the
// `safetensors` package is used too when installed), in both directions.
TEST(Safetensors, InteroperatesWithPython) {
  if (std::system("/usr/bin/python3 -c 'import json, struct' 2>/dev/null") != 0)
    GTEST_SKIP() << "no python3";
  TempDir tmp;
  Sample s;
  write_safetensors(tmp / "cpp.safetensors", s.tensors(), {{"format", "pt"}});
  std::ofstream(tmp / "check.py") << R"PY(
import json, struct, sys
src, dst = sys.argv[1], sys.argv[2]
raw = open(src, 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
data = raw[8 + n:]
assert hdr['__metadata__'] == {'format': 'pt'}, hdr
w = hdr['transformer.h.0.attn.c_attn.weight']
assert w['dtype'] == 'F32' and w['shape'] == [2, 3], w
b0, b1 = w['data_offsets']
assert list(struct.unpack('<6f', data[b0:b1])) == [1.5, -2.0, 3.25, 0.0, struct.unpack('<f', struct.pack('<f', 1e-3))[0], -7.0]
try:
    import safetensors.numpy
    t = safetensors.numpy.load_file(src)
    assert t['transformer.h.0.attn.c_attn.bias'].tolist() == [0.5, 42.0, -1.0]
except ImportError:
    pass
# Python writes one back: keys sorted as the reference library does, tensors in
# a different data order, no padding.
vals = {'z.first': [1.0, 2.0], 'a.second': [3.0, 4.0, 5.0, 6.0]}
hdr = {'a.second': {'dtype': 'F32', 'shape': [2, 2], 'data_offsets': [8, 24]},
       'z.first': {'dtype': 'F32', 'shape': [2], 'data_offsets': [0, 8]}}
h = json.dumps(hdr, sort_keys=True).encode()
body = struct.pack('<2f', *vals['z.first']) + struct.pack('<4f', *vals['a.second'])
open(dst, 'wb').write(struct.pack('<Q', len(h)) + h + body)
)PY";
  std::string cmd = "/usr/bin/python3 " + (tmp / "check.py") + " " + (tmp / "cpp.safetensors") +
                    " " + (tmp / "py.safetensors");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  SafetensorsFile f(tmp / "py.safetensors");
  EXPECT_EQ(f.names(), (std::vector<std::string>{"z.first", "a.second"}));
  EXPECT_EQ(f.read("a.second"), (std::vector<float>{3, 4, 5, 6}));
  EXPECT_EQ(f.read("z.first"), (std::vector<float>{1, 2}));
  EXPECT_TRUE(f.metadata().empty());
}

TEST(Safetensors, ShapeAndNameErrorsNameFileAndTensor) {
  TempDir tmp;
  std::vector<float> v(128, 1.f);
  std::string path = tmp / "model.safetensors";
  write_safetensors(
      path, std::vector<SafetensorsTensor>{{"transformer.h.0.ln_1.weight", {128}, v.data()}});
  SafetensorsFile f(path);
  EXPECT_EQ(
      refusal_of([&] { f.expect_shape("transformer.h.0.ln_1.weight", {256}); }),
      path + ": tensor transformer.h.0.ln_1.weight has shape [128] but the model needs [256]");
  EXPECT_EQ(refusal_of([&] { f.expect_shape("transformer.h.0.ln_1.bias", {128}); }),
            path + ": tensor transformer.h.0.ln_1.bias is missing");
  EXPECT_FALSE(f.contains("transformer.h.0.ln_1.bias"));
  EXPECT_TRUE(f.contains("transformer.h.0.ln_1.weight"));
  EXPECT_THROW(f.read("transformer.h.0.ln_1.weight", v.data(), 127), RuntimeError);
}

TEST(Safetensors, Bf16FilesRoundToNearestEvenAndReadBackWidened) {
  // --export-dtype bf16: every tensor BF16, half the bytes; reading widens exactly.
  TempDir tmp;
  const std::string path = tmp / "bf16.safetensors";
  const std::vector<float> a = {1.0f, 1.00390625f, -3.14159f, 1e-40f, 65504.0f};
  const std::vector<float> b = {0.1f, 0.2f, 0.3f};
  const std::vector<SafetensorsTensor> tensors = {{"a", {5}, a.data()}, {"b", {3}, b.data()}};
  write_safetensors(path, tensors, {}, /*as_bf16=*/true);
  SafetensorsFile f(path);
  EXPECT_EQ(f.tensor("a").dtype, "BF16");
  EXPECT_EQ(f.tensor("a").end - f.tensor("a").begin, 10u);
  std::vector<float> ra = a;
  round_to_bf16(ra.data(), ra.size());
  EXPECT_EQ(f.read("a"), ra);
  std::vector<float> part(2);
  f.read_range("a", 2, 2, part.data());  // a tensor-parallel rank's range
  EXPECT_EQ(part, std::vector<float>(ra.begin() + 2, ra.begin() + 4));
  EXPECT_EQ(f.read("b")[0], bf16_to_float(float_to_bf16(0.1f)));
}

TEST(Safetensors, WrongDtypeNamesTensor) {
  TempDir tmp;
  std::string path = tmp / "i32.safetensors";
  write_raw(path,
            R"({"ok":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
            R"("w":{"dtype":"I32","shape":[2],"data_offsets":[4,12]}})",
            12);
  SafetensorsFile f(path);  // opening is fine: only the I32 tensor is unusable
  EXPECT_EQ(f.read("ok").size(), 1u);
  EXPECT_EQ(refusal_of([&] { f.read("w"); }),
            path +
                ": tensor w has dtype I32 but meshtrain reads F32, BF16 and F16 only (convert it "
                "with torch: tensor.float())");
  EXPECT_THROW(f.expect_shape("w", {2}), UsageError);
  write_raw(path, R"({"w":{"dtype":"F31","shape":[2],"data_offsets":[0,8]}})", 8);
  EXPECT_CONTAINS(open_error(path), "tensor w has unknown dtype F31");
}

// Hugging Face directories come in F16 too: every half widens exactly, subnormals, signed
// zero and the largest finite value included.
TEST(Safetensors, ReadsF16Exactly) {
  TempDir tmp;
  const std::string path = tmp / "f16.safetensors";
  const std::vector<uint16_t> halves = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x8000, 0x3555, 0x03FF};
  const std::vector<float> want = {1.0f,  -2.0f,           65504.0f,       0x1p-24f,
                                   -0.0f, 0.333251953125f, 1023 * 0x1p-24f};
  const std::string header = R"({"h":{"dtype":"F16","shape":[7],"data_offsets":[0,14]}})";
  const uint64_t n = header.size();
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << header;
    out.write(reinterpret_cast<const char*>(halves.data()), 14);
  }
  SafetensorsFile f(path);
  f.expect_shape("h", {7});
  const std::vector<float> got = f.read("h");
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &want[i], 4);
    EXPECT_EQ(a, b) << "half 0x" << std::hex << halves[i];
  }
  std::vector<float> part(2);
  f.read_range("h", 3, 2, part.data());
  EXPECT_EQ(part[0], 0x1p-24f);
  EXPECT_TRUE(std::signbit(part[1]));
}

TEST(Safetensors, CorruptFilesAreUsageErrors) {
  TempDir tmp;
  std::string p = tmp / "bad.safetensors";
  EXPECT_EQ(open_error(p), "safetensors file " + p + " does not exist");

  std::ofstream(p) << "abc";
  EXPECT_CONTAINS(open_error(p), "is 3 bytes, too small for a safetensors file");

  const std::string good = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  write_raw(p, good, 8, good.size() + 100);
  EXPECT_CONTAINS(open_error(p), "header length " + std::to_string(good.size() + 100) +
                                     " does not fit in the file");
  write_raw(p, good, 8, 0xffffffffffffull);
  EXPECT_CONTAINS(open_error(p), "does not fit in the file");

  write_raw(p, R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", 8);  // missing }
  EXPECT_CONTAINS(open_error(p), "corrupt header (not valid JSON)");
  write_raw(p, "[1, 2]", 0);
  EXPECT_CONTAINS(open_error(p), "corrupt header: not a JSON object");

  write_raw(p, good, 6);  // data section truncated
  EXPECT_CONTAINS(open_error(p),
                  "tensor w has data_offsets [0, 8] outside the 6-byte data section");
  write_raw(p, R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8);
  EXPECT_CONTAINS(open_error(p), "tensor w has 8 bytes but shape [3] of F32 needs 12");
  write_raw(p, R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8);
  EXPECT_CONTAINS(open_error(p), "tensor w has a shape entry that is not a size");
  write_raw(p, R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8);
  EXPECT_CONTAINS(open_error(p), "outside the 8-byte data section");
  write_raw(p, R"({"w":{"dtype":"F32","shape":[2]}})", 8);
  EXPECT_CONTAINS(open_error(p), "tensor w needs \"dtype\", \"shape\" and \"data_offsets\"");

  write_raw(p,
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
            R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
            12);
  EXPECT_CONTAINS(open_error(p), "tensors a and b overlap (bytes [0, 8) and [4, 12))");
  write_raw(p,
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
            R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
            16);
  EXPECT_CONTAINS(open_error(p), "corrupt header: tensor a appears twice");
  write_raw(p, R"({"__metadata__":{"k":1}})", 0);
  EXPECT_CONTAINS(open_error(p), "__metadata__ value k is not a string");

  // Every message starts with the file name.
  EXPECT_EQ(open_error(p).rfind(p + ": ", 0), 0u);
}

}  // namespace
}  // namespace mt
