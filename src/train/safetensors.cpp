#include "train/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/input_file.h"
#include "kernels/bf16.h"
#include "train/finite_gate.h"

namespace mt {

// Tensor bytes and the header length are little-endian on disk and copied with memcpy.
static_assert(std::endian::native == std::endian::little, "meshtrain assumes a little-endian host");

namespace {

constexpr const char* kMetadataKey = "__metadata__";
// The reference implementation rejects headers above 100 MB; so do we, rather than
// trying to allocate whatever 8 garbage bytes claim.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// The first key that appears twice in the top-level object of `json` (valid JSON), or "".
// A SAX pass: nlohmann's parse callback, which could also see the keys, rescans the parent
// object after each nested object, which is quadratic in the number of tensors.
std::string first_duplicate_top_level_key(const std::string& json) {
  struct KeyScan : nlohmann::json_sax<nlohmann::json> {
    int depth = 0;
    std::unordered_set<std::string> seen;
    std::string duplicate;
    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t&) override { return true; }
    bool string(string_t&) override { return true; }
    bool binary(binary_t&) override { return true; }
    bool start_object(std::size_t) override { return ++depth, true; }
    bool end_object() override { return --depth, true; }
    bool start_array(std::size_t) override { return ++depth, true; }
    bool end_array() override { return --depth, true; }
    bool key(string_t& k) override {
      if (depth == 1 && !seen.insert(k).second && duplicate.empty()) duplicate = k;
      return true;
    }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
      return false;
    }
  } scan;
  nlohmann::json::sax_parse(json, &scan);
  return scan.duplicate;
}

// Element sizes of the dtypes the format defines; any other name is a corrupt header.
int dtype_bytes(const std::string& dtype) {
  static const std::map<std::string, int> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

// IEEE half to float, exactly (every half is a float): Hugging Face directories come in F16.
float f16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
    const float v = std::ldexp(float(mantissa), -24);
    return sign ? -v : v;
  }
  const uint32_t bits = exponent == 0x1fu ? sign | 0x7f800000u | (mantissa << 13)  // Inf, NaN
                                          : sign | ((exponent + 112) << 23) | (mantissa << 13);
  return std::bit_cast<float>(bits);
}

// Bytes per element of the dtypes read into fp32; 0 for the others.
size_t readable_bytes(const std::string& dtype) {
  if (dtype == "F32") return sizeof(float);
  if (dtype == "BF16" || dtype == "F16") return sizeof(uint16_t);
  return 0;
}

int64_t checked_numel(const TensorShape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && n > std::numeric_limits<int64_t>::max() / d)) return -1;
    n *= d;
  }
  return n;
}

}  // namespace

std::string shape_str(const TensorShape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

FileDigest write_safetensors(const std::string& path, std::span<const SafetensorsTensor> tensors,
                             const std::map<std::string, std::string>& metadata, bool as_bf16) {
  const size_t elem = as_bf16 ? sizeof(bf16) : sizeof(float);
  // The header in file order, which makes it readable with `head -c`. It is written entry
  // by entry: an ordered_json object looks keys up linearly, which made files of many
  // tensors quadratic to write.
  std::string json = "{";
  if (!metadata.empty())
    json += nlohmann::json(kMetadataKey).dump() + ":" + nlohmann::ordered_json(metadata).dump();
  std::unordered_set<std::string> names;
  uint64_t offset = 0;
  for (const SafetensorsTensor& t : tensors) {
    MT_REQUIRE(t.name != kMetadataKey && names.insert(t.name).second, "cannot write ", path,
               ": tensor name ", t.name, " is duplicated or reserved");
    int64_t numel = checked_numel(t.shape);
    MT_CHECK(numel >= 0, "tensor ", t.name, " has invalid shape ", shape_str(t.shape));
    MT_CHECK(numel == 0 || t.data != nullptr, "tensor ", t.name, " has no data");
    uint64_t bytes = static_cast<uint64_t>(numel) * elem;
    const nlohmann::ordered_json entry = {{"dtype", as_bf16 ? "BF16" : "F32"},
                                          {"shape", t.shape},
                                          {"data_offsets", {offset, offset + bytes}}};
    if (json.size() > 1) json += ',';
    json += nlohmann::json(t.name).dump() + ":" + entry.dump();
    offset += bytes;
  }
  json += '}';
  // Pad with spaces (allowed by the format) so the data section starts 8-byte aligned.
  json.append((8 - json.size() % 8) % 8, ' ');
  const uint64_t n = json.size();

  std::vector<GateTensor> gate;
  gate.reserve(tensors.size());
  for (const SafetensorsTensor& t : tensors)
    gate.push_back({t.name, t.data, static_cast<size_t>(checked_numel(t.shape))});
  require_finite_for_disk(path, gate, as_bf16 ? DiskDtype::bf16 : DiskDtype::f32);

  AtomicFile file(path);
  file.write(&n, sizeof(n));
  file.write(json.data(), json.size());
  std::vector<bf16> rounded;
  for (const SafetensorsTensor& t : tensors) {
    const size_t numel = static_cast<size_t>(checked_numel(t.shape));
    if (!as_bf16) {
      file.write(t.data, numel * sizeof(float));
      continue;
    }
    rounded.resize(numel);  // round to nearest even, as torch's .bfloat16()
    to_bf16(rounded.data(), t.data, numel);
    file.write(rounded.data(), numel * sizeof(bf16));
  }
  file.commit();
  return file.digest();
}

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  const uint64_t file_bytes = open_regular_file();
  const std::string json_text = read_header(file_bytes);
  parse_header(json_text, file_bytes - data_start_);
  check_disjoint();
  for (size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].name] = i;
}

void SafetensorsFile::fail(const std::string& msg) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  throw UsageError(str(path_, ": ", msg));
}

uint64_t SafetensorsFile::open_regular_file() {
  // The one reader of user-named files (core/input_file.h): a FIFO is refused, not waited
  // on. Tensor bytes are read in pieces, so any size is fine.
  InputFile in("safetensors file", path_, kStreamedInputBytes);
  const uint64_t bytes = in.size();
  fd_ = in.release();
  return bytes;
}

// The 8-byte little-endian header length N, then N bytes of JSON; data starts at 8 + N.
std::string SafetensorsFile::read_header(uint64_t file_bytes) {
  uint64_t n = 0;
  if (file_bytes < 8 || ::pread(fd_, &n, 8, 0) != 8)
    fail(str("is ", file_bytes, " bytes, too small for a safetensors file"));
  if (n > file_bytes - 8 || n > kMaxHeaderBytes)
    fail(str("header length ", n, " does not fit in the file (", file_bytes,
             " bytes): truncated, or not a safetensors file"));
  std::string json_text(n, '\0');
  if (::pread(fd_, json_text.data(), n, 8) != static_cast<ssize_t>(n))
    fail(str("cannot read the header: ", std::strerror(errno)));
  data_start_ = 8 + n;
  return json_text;
}

void SafetensorsFile::parse_header(const std::string& json_text, uint64_t data_bytes) {
  // nlohmann keeps the last of duplicate keys; a duplicated tensor name is corruption.
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    fail(str("corrupt header (not valid JSON): ", e.what()));
  }
  if (!header.is_object()) fail("corrupt header: not a JSON object");
  const std::string duplicate = first_duplicate_top_level_key(json_text);
  if (!duplicate.empty()) fail(str("corrupt header: tensor ", duplicate, " appears twice"));

  for (const auto& [name, value] : header.items()) {
    if (name != kMetadataKey) {
      entries_.push_back(parse_entry(name, value, data_bytes));
      continue;
    }
    if (!value.is_object()) fail("corrupt header: __metadata__ is not an object");
    for (const auto& [k, v] : value.items()) {
      if (!v.is_string()) fail(str("corrupt header: __metadata__ value ", k, " is not a string"));
      metadata_[k] = v.get<std::string>();
    }
  }
}

SafetensorsFile::Entry SafetensorsFile::parse_entry(const std::string& name,
                                                    const nlohmann::json& value,
                                                    uint64_t data_bytes) {
  const std::string where = str("tensor ", name, " ");
  if (!value.is_object() || !value.contains("dtype") || !value["dtype"].is_string() ||
      !value.contains("shape") || !value["shape"].is_array() || !value.contains("data_offsets") ||
      !value["data_offsets"].is_array())
    fail(where + "needs \"dtype\", \"shape\" and \"data_offsets\"");
  Entry e;
  e.name = name;
  e.dtype = value["dtype"].get<std::string>();
  const int elem = dtype_bytes(e.dtype);
  if (elem == 0) fail(str(where, "has unknown dtype ", e.dtype));
  for (const auto& d : value["shape"]) {
    if (!d.is_number_unsigned()) fail(where + "has a shape entry that is not a size");
    e.shape.push_back(d.get<int64_t>());
  }
  const auto& off = value["data_offsets"];
  if (off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    fail(where + "needs data_offsets [begin, end]");
  e.begin = off[0].get<uint64_t>();
  e.end = off[1].get<uint64_t>();
  e.numel = checked_numel(e.shape);
  if (e.numel < 0) fail(str(where, "has an invalid shape ", shape_str(e.shape)));
  if (e.begin > e.end || e.end > data_bytes)
    fail(str(where, "has data_offsets [", e.begin, ", ", e.end, "] outside the ", data_bytes,
             "-byte data section"));
  if (e.end - e.begin != static_cast<uint64_t>(e.numel) * elem)
    fail(str(where, "has ", e.end - e.begin, " bytes but shape ", shape_str(e.shape), " of ",
             e.dtype, " needs ", static_cast<uint64_t>(e.numel) * elem));
  return e;
}

void SafetensorsFile::check_disjoint() {
  std::sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) {
    return a.begin < b.begin || (a.begin == b.begin && a.end < b.end);
  });
  for (size_t i = 1; i < entries_.size(); ++i) {
    const Entry& a = entries_[i - 1];
    const Entry& b = entries_[i];
    if (b.begin < a.end)
      fail(str("tensors ", a.name, " and ", b.name, " overlap (bytes [", a.begin, ", ", a.end,
               ") and [", b.begin, ", ", b.end, "))"));
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : path_(std::move(o.path_)),
      fd_(std::exchange(o.fd_, -1)),
      data_start_(o.data_start_),
      entries_(std::move(o.entries_)),
      index_(std::move(o.index_)),
      metadata_(std::move(o.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
  std::swap(path_, o.path_);
  std::swap(fd_, o.fd_);
  std::swap(data_start_, o.data_start_);
  std::swap(entries_, o.entries_);
  std::swap(index_, o.index_);
  std::swap(metadata_, o.metadata_);
  return *this;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const Entry& e : entries_) out.push_back(e.name);
  return out;
}

const SafetensorsFile::Entry& SafetensorsFile::tensor(const std::string& name) const {
  auto it = index_.find(name);
  MT_REQUIRE(it != index_.end(), path_, ": tensor ", name, " is missing");
  return entries_[it->second];
}

const SafetensorsFile::Entry& SafetensorsFile::f32_tensor(const std::string& name) const {
  const Entry& e = tensor(name);
  MT_REQUIRE(readable_bytes(e.dtype) > 0, path_, ": tensor ", name, " has dtype ", e.dtype,
             " but meshtrain reads F32, BF16 and F16 only (convert it with torch: "
             "tensor.float())");
  return e;
}

void SafetensorsFile::expect_shape(const std::string& name, const TensorShape& shape) const {
  const Entry& e = f32_tensor(name);
  MT_REQUIRE(e.shape == shape, path_, ": tensor ", name, " has shape ", shape_str(e.shape),
             " but the model needs ", shape_str(shape));
}

void SafetensorsFile::read_range(const std::string& name, size_t first, size_t count,
                                 float* out) const {
  const Entry& e = f32_tensor(name);
  MT_CHECK(first <= static_cast<size_t>(e.numel) && count <= e.numel - first, "read of [", first,
           ", ", first + count, ") from tensor ", name, " of ", e.numel, " elements");
  // A BF16 tensor (--export-dtype bf16) or an F16 one (Hugging Face) is read into a staging
  // copy and widened (exactly).
  const size_t elem = readable_bytes(e.dtype);
  const bool half = elem == sizeof(uint16_t);
  std::vector<uint16_t> staged(half ? count : 0);
  char* dst = half ? reinterpret_cast<char*>(staged.data()) : reinterpret_cast<char*>(out);
  size_t bytes = count * elem;
  uint64_t at = data_start_ + e.begin + first * elem;
  while (bytes > 0) {
    ssize_t got = ::pread(fd_, dst, bytes, static_cast<off_t>(at));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      throw RuntimeError(str(path_, ": cannot read tensor ", name, ": ",
                             got == 0 ? "file shrank while reading" : std::strerror(errno)));
    dst += got;
    at += static_cast<uint64_t>(got);
    bytes -= static_cast<size_t>(got);
  }
  if (e.dtype == "BF16") from_bf16(out, staged.data(), count);
  if (e.dtype == "F16")
    for (size_t i = 0; i < count; ++i) out[i] = f16_to_float(staged[i]);
}

void SafetensorsFile::read(const std::string& name, float* out, size_t count) const {
  const Entry& e = f32_tensor(name);
  MT_CHECK(count == static_cast<size_t>(e.numel), "tensor ", name, " has ", e.numel,
           " elements, caller expected ", count);
  read_range(name, 0, count, out);
}

std::vector<float> SafetensorsFile::read(const std::string& name) const {
  std::vector<float> out(static_cast<size_t>(f32_tensor(name).numel));
  read_range(name, 0, out.size(), out.data());
  return out;
}

}  // namespace mt
