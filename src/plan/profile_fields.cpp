#include "plan/profile_fields.h"

#include <toml++/toml.h>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "core/error.h"
#include "core/input_file.h"
#include "plan/software_profiles.h"

namespace mt::plan {

namespace {

using H = HardwareProfile;

// Ranges by unit (see the header): a rate is at least 1 per second so that no time becomes
// infinite; 1e21 is far above any device (an exaFLOP/s per device).
constexpr double kRate = 1e21, kSeconds = 1e3, kPerElement = 1.0, kRatio = 1e3;

ProfileField rate(const char* key, double H::*m, bool unset = false) {
  return {key, m, 1, kRate, unset};
}
ProfileField seconds(const char* key, double H::*m) {
  return {key, m, 0, kSeconds};
}
ProfileField per_element(const char* key, double H::*m) {
  return {key, m, 0, kPerElement};
}
ProfileField ratio(const char* key, double H::*m) {
  return {key, m, 1 / kRatio, kRatio, true};
}

// The software's behaviour (hardware_profile.h), after "software" names its profile.
std::vector<ProfileField> software_fields() {
  return {{"dp_overlap", &H::dp_overlap, 0, 1},
          {"grad_reduce_bytes", &H::grad_reduce_bytes, 1e-3, 64},
          {"optimizer_bytes", &H::optimizer_bytes, 1e-3, 1e4},
          {"optimizer_kernels", &H::optimizer_kernels, 1, 64},
          {"grad_buffer_bytes", &H::grad_buffer_bytes, 0, 1e3},
          {"grad_sync_placement", &H::grad_sync_placement, 0, 2},
          {"grad_sync_pass_bytes", &H::grad_sync_pass_bytes, 0, 1e3},
          {"world_all_reduces", &H::world_all_reduces, 0, 64},
          {"zero3_overlap", &H::zero3_overlap, 0, 1},
          {"tied_embedding_reduce", &H::tied_embedding_reduce},
          {"dropout", &H::dropout},
          {"fp32_cross_entropy", &H::fp32_cross_entropy},
          {"p2p_blocking", &H::p2p_blocking},
          {"p2p_scatter_gather", &H::p2p_scatter_gather},
          {"even_chunks", &H::even_chunks},
          {"grad_accum_pass", &H::grad_accum_pass},
          {"tp_backward_overlap", &H::tp_backward_overlap},
          {"tp_comm_overlap", &H::tp_comm_overlap},
          {"max_zero", &H::max_zero, 0, 3},
          {"max_cp", &H::max_cp, 1, double(1 << 20)},
          {"cp_allgather", &H::cp_allgather},
          {"paper_memory", &H::paper_memory},
          {"flash_attention", &H::flash_attention},
          {"attention_fwd_of_peak", &H::attention_fwd_of_peak, 0, 1},
          {"attention_bwd_of_peak", &H::attention_bwd_of_peak, 0, 1},
          {"param_gather_overlap", &H::param_gather_overlap, 0, 1},
          {"param_gather_bytes", &H::param_gather_bytes, 1e-3, 64},
          {"zero3_prefetch", &H::zero3_prefetch, 0, 64},
          {"a2a_overlap_parts", &H::a2a_overlap_parts, 1, 64},
          {"fb_a2a_overlap", &H::fb_a2a_overlap},
          {"fp8_gemms", &H::fp8_gemms},
          {"fp8_activation_cache", &H::fp8_activation_cache},
          {"norm_up_proj_recompute", &H::norm_up_proj_recompute},
          {"up_proj_recompute", &H::up_proj_recompute},
          {"dense_mlp_recompute", &H::dense_mlp_recompute},
          {"a2a_max_nodes", &H::a2a_max_nodes, 0, double(1 << 20)},
          {"comm_sms", &H::comm_sms, 0, 1024},
          {"collective_sms", &H::collective_sms, 0, 1024},
          {"tp_overlap_sms", &H::tp_overlap_sms, 0, 1024}};
}

// The local MoE layer's calibrated figures: the grouped expert GEMMs' rates and the
// layer's rest (grouped_gemm_probe.cpp, kernel_probes.cpp).
std::vector<ProfileField> moe_fields() {
  return {rate("grouped_fwd_flops", &H::grouped_fwd_flops, true),
          rate("grouped_bwd_flops", &H::grouped_bwd_flops, true),
          rate("grouped_wgt_flops", &H::grouped_wgt_flops, true),
          rate("grouped_fwd_flops_bf16", &H::grouped_fwd_flops_bf16, true),
          rate("grouped_bwd_flops_bf16", &H::grouped_bwd_flops_bf16, true),
          rate("grouped_wgt_flops_bf16", &H::grouped_wgt_flops_bf16, true),
          per_element("moe_fwd_s", &H::moe_fwd_s),
          per_element("moe_bwd_s", &H::moe_bwd_s),
          per_element("moe_wgt_s", &H::moe_wgt_s),
          per_element("moe_fwd_s_bf16", &H::moe_fwd_s_bf16),
          per_element("moe_bwd_s_bf16", &H::moe_bwd_s_bf16),
          per_element("moe_wgt_s_bf16", &H::moe_wgt_s_bf16)};
}

std::vector<ProfileField> make_fields() {
  std::vector<ProfileField> f = {
      {"name", &H::name},
      {"local", &H::local},
      {"devices_per_node", &H::devices_per_node, 1, double(1 << 30)},
      {"cores", &H::cores, 0, double(1 << 20)},
      // Up to 1 PiB per device: byte counts stay far inside 64-bit arithmetic.
      {"memory_bytes", &H::memory_bytes, 1 << 20, double(int64_t(1) << 50)},
      rate("peak_fp32", &H::peak_fp32),
      rate("peak_bf16", &H::peak_bf16, true),
      rate("peak_fp8", &H::peak_fp8, true),
      {"gemm_efficiency", &H::gemm_efficiency, 1e-3, 1},
      {"gemm_half_dim", &H::gemm_half_dim, 0, 1e9},
      {"gemm_half_rows", &H::gemm_half_rows, 0, 1e9},
      {"gemm_few_rows", &H::gemm_few_rows, 0, 1e9},
      {"sms", &H::sms, 0, 1e6},
      rate("memory_bw", &H::memory_bw),
      seconds("kernel_overhead_s", &H::kernel_overhead_s),
      rate("intra_busbw", &H::intra_busbw),
      seconds("intra_latency_s", &H::intra_latency_s),
      rate("inter_busbw", &H::inter_busbw, true),
      seconds("inter_latency_s", &H::inter_latency_s),
      rate("p2p_bw_intra", &H::p2p_bw_intra),
      rate("p2p_bw_inter", &H::p2p_bw_inter, true),
      rate("attention_fwd_flops", &H::attention_fwd_flops, true),
      rate("attention_bwd_flops", &H::attention_bwd_flops, true),
      per_element("pointwise_s", &H::pointwise_s),
      rate("mpi_busbw", &H::mpi_busbw, true),
      seconds("mpi_latency_s", &H::mpi_latency_s),
      rate("mpi_p2p_bw", &H::mpi_p2p_bw, true),
      {"gemm_half_dim_bf16", &H::gemm_half_dim_bf16, 0, 1e9},
      {"gemm_half_rows_bf16", &H::gemm_half_rows_bf16, 0, 1e9},
      {"gemm_few_rows_bf16", &H::gemm_few_rows_bf16, 0, 1e9},
      seconds("bf16_overhead_s", &H::bf16_overhead_s),
      per_element("bf16_convert_s", &H::bf16_convert_s),
      rate("attention_bf16_fwd_flops", &H::attention_bf16_fwd_flops, true),
      rate("attention_bf16_bwd_flops", &H::attention_bf16_bwd_flops, true),
      {"attention_row_stats", &H::attention_row_stats, 0, 1},
      {"attention_row_stats_bf16", &H::attention_row_stats_bf16, 0, 1},
      {"attention_kernels", &H::attention_kernels, 0, 15},
      ratio("cp2_attention_factor", &H::cp2_attention_factor),
      ratio("cp4_attention_factor", &H::cp4_attention_factor),
      ratio("cp2_attention_factor_bf16", &H::cp2_attention_factor_bf16),
      ratio("cp4_attention_factor_bf16", &H::cp4_attention_factor_bf16),
      seconds("cp_hop_s", &H::cp_hop_s),
      per_element("cp_hop_byte_s", &H::cp_hop_byte_s),
      rate("tiles_fwd_flops_bf16", &H::tiles_fwd_flops_bf16, true),
      rate("tiles_bwd_flops_bf16", &H::tiles_bwd_flops_bf16, true),
      per_element("tiles_pack_s_bf16", &H::tiles_pack_s_bf16),
      ratio("gemm_input_grad_ratio", &H::gemm_input_grad_ratio),
      ratio("gemm_weight_grad_ratio", &H::gemm_weight_grad_ratio),
      ratio("gemm_input_grad_ratio_bf16", &H::gemm_input_grad_ratio_bf16),
      ratio("gemm_weight_grad_ratio_bf16", &H::gemm_weight_grad_ratio_bf16),
      seconds("oversubscribed_latency_s", &H::oversubscribed_latency_s),
      rate("oversubscribed_busbw", &H::oversubscribed_busbw, true),
      seconds("oversubscribed_wake_s", &H::oversubscribed_wake_s),
      {"parallel_efficiency", &H::parallel_efficiency, 0, 1},
      ratio("step_factor_fp32", &H::step_factor_fp32),
      ratio("step_factor_bf16", &H::step_factor_bf16),
      per_element("microbatch_weight_s", &H::microbatch_weight_s),
      per_element("microbatch_weight_s_bf16", &H::microbatch_weight_s_bf16),
      {"moe_load_cv", &H::moe_load_cv, 0, kRatio},
      seconds("reference_step_s", &H::reference_step_s),
      seconds("reference_step_s_bf16", &H::reference_step_s_bf16),
      ratio("step_low_fp32", &H::step_low_fp32),
      ratio("step_high_fp32", &H::step_high_fp32),
      ratio("step_low_bf16", &H::step_low_bf16),
      ratio("step_high_bf16", &H::step_high_bf16)};
  const std::vector<ProfileField> moe = moe_fields();
  f.insert(f.end(), moe.begin(), moe.end());
  std::vector<ProfileField> software = software_fields();
  for (ProfileField s : software) {
    s.software = true;
    f.push_back(s);
  }
  return f;
}

std::string range_text(const ProfileField& f) {
  std::ostringstream o;
  o << (f.zero_unset ? "0 (not measured) or " : "") << "a finite number in [" << f.lo << ", "
    << f.hi << "]";
  return o.str();
}

bool in_range(const ProfileField& f, double v) {
  return std::isfinite(v) && ((v >= f.lo && v <= f.hi) || (f.zero_unset && v == 0));
}

// A number from the file: an integer field must be a TOML integer; a real one may be either.
double number_of(const toml::node& n, bool integer, const std::string& where) {
  if (auto i = n.as_integer()) return double(i->get());
  if (auto d = n.as_floating_point(); d && !integer) return d->get();
  throw UsageError(str(where, " must be ", integer ? "an integer" : "a number"));
}

// Sets one field from its node; UsageError naming `where` on a wrong type or range.
void read_field(HardwareProfile& h, const ProfileField& f, const toml::node& n,
                const std::string& where) {
  if (auto* b = std::get_if<bool H::*>(&f.member)) {
    auto v = n.as_boolean();
    MT_REQUIRE(v, where, " must be true or false");
    h.*(*b) = v->get();
  } else if (auto* s = std::get_if<std::string H::*>(&f.member)) {
    auto v = n.as_string();
    MT_REQUIRE(v, where, " must be a string");
    h.*(*s) = v->get();
  } else {
    const bool integer = std::holds_alternative<int H::*>(f.member);
    const double v = number_of(n, integer, where);
    MT_REQUIRE(in_range(f, v), where, " must be ", integer ? "an integer" : range_text(f),
               integer ? str(" in ", f.lo, "..", f.hi) : std::string(), " (got ", v, ")");
    if (integer)
      h.*std::get<int H::*>(f.member) = int(v);
    else
      h.*std::get<double H::*>(f.member) = v;
  }
}

// A present, but wrongly typed, "sources" is an error too.
void read_sources(HardwareProfile& h, const toml::node& n, const std::string& where) {
  const toml::array* a = n.as_array();
  MT_REQUIRE(a, where, " must be an array of strings");
  for (auto&& s : *a) {
    auto v = s.value<std::string>();
    MT_REQUIRE(v, where, " must be an array of strings");
    h.sources.push_back(*v);
  }
}

const ProfileField& field(const std::string& key) {
  for (const ProfileField& f : profile_fields())
    if (key == f.key) return f;
  throw std::logic_error("no hardware-profile field " + key);
}

}  // namespace

void set_profile_field(HardwareProfile& h, const std::string& key, double value) {
  const ProfileField& f = field(key);
  if (auto* d = std::get_if<double H::*>(&f.member))
    h.*(*d) = value;
  else if (auto* i = std::get_if<int H::*>(&f.member))
    h.*(*i) = int(value);
  else
    h.*std::get<bool H::*>(f.member) = value != 0;
}

double profile_field_value(const HardwareProfile& h, const std::string& key) {
  const ProfileField& f = field(key);
  if (auto* d = std::get_if<double H::*>(&f.member)) return h.*(*d);
  if (auto* i = std::get_if<int H::*>(&f.member)) return h.*(*i);
  return h.*std::get<bool H::*>(f.member) ? 1 : 0;
}

const std::vector<ProfileField>& profile_fields() {
  static const std::vector<ProfileField> fields = make_fields();
  return fields;
}

std::string profile_field_error(const HardwareProfile& h) {
  for (const ProfileField& f : profile_fields()) {
    double v = 0;
    if (auto* d = std::get_if<double H::*>(&f.member))
      v = h.*(*d);
    else if (auto* i = std::get_if<int H::*>(&f.member))
      v = h.*(*i);
    else
      continue;
    if (!in_range(f, v))
      return str("[hardware] ", f.key, " must be ", range_text(f), " (got ", v, ")");
  }
  if (!h.local && h.memory_bytes <= double(kGpuReserveBytes))
    return str("[hardware] memory_bytes must exceed the ", kGpuReserveBytes,
               " bytes a GPU reserves for itself (got ", h.memory_bytes, ")");
  return "";
}

namespace {

// Figures older calibrations wrote that no model reads any more: accepted and ignored, so
// that those profiles still load. busy_tp_*: stop 39's tp collectives among two busy rank
// threads, a difference of two loops below its noise (it read a latency of 0 and 4x the idle
// busbw); priced with it, every tp2 layout of stop 39's quiet loop read 4-9% faster than
// without it and than measured (docs/planner.md).
constexpr const char* kRetiredKeys[] = {"busy_tp_latency_s", "busy_tp_busbw"};

}  // namespace

HardwareProfile parse_profile_toml(const std::string& text, const std::string& source) {
  toml::table doc;
  try {
    doc = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw UsageError(str("cannot read hardware profile ", source, ": ", e.description()));
  }
  const toml::table* t = doc["hardware"].as_table();
  MT_REQUIRE(t, source, ": no [hardware] table");
  const auto& fields = profile_fields();
  for (auto&& [k, v] : *t) {
    (void)v;
    bool known = k.str() == "software" || k.str() == "sources";
    for (const char* retired : kRetiredKeys) known = known || k.str() == retired;
    for (const ProfileField& f : fields) known = known || k.str() == f.key;
    MT_REQUIRE(known, source, ": unknown key [hardware] ", std::string(k.str()));
  }
  HardwareProfile h;
  h.name = "custom";
  if (const toml::node* local = t->get("local")) read_field(h, field("local"), *local, source);
  // The software first (a local profile's is the engine measured here): the single fields
  // below override it.
  std::string software = h.local ? kLocalSoftware : "meshtrain";
  if (const toml::node* sw = t->get("software")) {
    auto name = sw->value<std::string>();
    MT_REQUIRE(name, source, ": [hardware] software must be a string");
    software = *name;
  }
  apply_software(h, software);
  for (const ProfileField& f : fields)
    if (const toml::node* n = t->get(f.key))
      read_field(h, f, *n, str(source, ": [hardware] ", f.key));
  if (const toml::node* n = t->get("sources"))
    read_sources(h, *n, str(source, ": [hardware] sources"));
  const std::string bad = profile_field_error(h);  // a required figure left out
  MT_REQUIRE(bad.empty(), source, ": ", bad);
  if (h.inter_busbw <= 0) h.inter_busbw = h.intra_busbw;
  if (h.p2p_bw_inter <= 0) h.p2p_bw_inter = h.p2p_bw_intra;
  return h;
}

HardwareProfile load_profile(const std::string& path) {
  return parse_profile_toml(read_input_file("hardware profile", path, kMaxJsonInputBytes), path);
}

std::string profile_to_toml(const HardwareProfile& h) {
  std::ostringstream o;
  o.precision(9);
  o << "# meshtrain hardware profile (meshtrain plan --hardware-file / --hardware local)\n"
    << "[hardware]\n";
  auto quoted = [](std::string s) {
    for (char& c : s)
      if (c == '"' || c == '\\') c = '\'';
    return "\"" + s + "\"";
  };
  bool software_named = false;
  for (const ProfileField& f : profile_fields()) {
    if (f.software && h.local) continue;  // local profiles are meshtrain's own engine
    if (f.software && !software_named) {
      o << "software = " << quoted(h.software) << "\n";
      software_named = true;
    }
    o << f.key << " = ";
    if (auto* d = std::get_if<double H::*>(&f.member))
      o << std::scientific << h.*(*d) << std::defaultfloat;
    else if (auto* i = std::get_if<int H::*>(&f.member))
      o << h.*(*i);
    else if (auto* b = std::get_if<bool H::*>(&f.member))
      o << (h.*(*b) ? "true" : "false");
    else
      o << quoted(h.*std::get<std::string H::*>(f.member));
    o << "\n";
  }
  o << "sources = [";
  for (size_t i = 0; i < h.sources.size(); ++i) o << (i ? ", " : "") << quoted(h.sources[i]);
  o << "]\n";
  return o.str();
}

}  // namespace mt::plan
