// kernels/quant/ggml_type.h — ggml tensor type ids and block geometry (header-only, no deps).
//
// Source: ggml-org/ggml include/ggml.h (enum ggml_type) and src/ggml.c (type_traits: blck_size,
// type_size), checked against ../shared/reference/quant-formats.md §1.5. This is the one table of
// ids and geometry; gguf/ uses it for size validation and kernels/ for dispatch. Decode, quantize
// and dot functions live in the type-traits table kernels/quant/type_traits.h.
#pragma once

#include <cstdint>
#include <string_view>

namespace ds4 {

/// ggml_type ids as stored in GGUF tensor infos (u32). Retired ids (4, 5, 31-33, 36-38) are absent.
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39, NVFP4 = 40, Q1_0 = 41,
  // ds4-internal encodings (ids >= 1000): produced in memory when binding official safetensors
  // checkpoints, never read from or written to a GGUF file (kernels/quant/blocks.h has the layouts).
  F8_E4M3_R128 = 1000,  ///< DeepSeek FP8: E8M0 scale byte + 128 E4M3 bytes of one row
  NVFP4_S2 = 1001,      ///< NVIDIA ModelOpt NVFP4: f32 weight_scale_2 + a ggml NVFP4 block (64)
};

/// First id of the ds4-internal encodings (not ggml types; refused in GGUF files).
inline constexpr uint32_t kFirstInternalTypeId = 1000;


/// Geometry of one ggml type: `block_elems` consecutive elements along ne[0] are stored in
/// `block_bytes` bytes. A tensor row of ne0 elements needs ne0 % block_elems == 0.
struct GgmlTypeGeometry {
  uint32_t id;
  std::string_view name;  // ggml's name, upper case as in gguf-py (e.g. "IQ2_XXS")
  int64_t block_elems;
  int64_t block_bytes;
  bool internal = false;  // a ds4-internal encoding (id >= kFirstInternalTypeId), not in GGUF files
};

namespace detail {
inline constexpr GgmlTypeGeometry kGgmlGeometry[] = {
    {0, "F32", 1, 4},        {1, "F16", 1, 2},       {2, "Q4_0", 32, 18},    {3, "Q4_1", 32, 20},
    {6, "Q5_0", 32, 22},     {7, "Q5_1", 32, 24},    {8, "Q8_0", 32, 34},    {9, "Q8_1", 32, 36},
    {10, "Q2_K", 256, 84},   {11, "Q3_K", 256, 110}, {12, "Q4_K", 256, 144}, {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},  {15, "Q8_K", 256, 292}, {16, "IQ2_XXS", 256, 66},
    {17, "IQ2_XS", 256, 74}, {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},
    {20, "IQ4_NL", 32, 18},  {21, "IQ3_S", 256, 110}, {22, "IQ2_S", 256, 82},
    {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},      {25, "I16", 1, 2},      {26, "I32", 1, 4},
    {27, "I64", 1, 8},       {28, "F64", 1, 8},      {29, "IQ1_M", 256, 56}, {30, "BF16", 1, 2},
    {34, "TQ1_0", 256, 54},  {35, "TQ2_0", 256, 66}, {39, "MXFP4", 32, 17},  {40, "NVFP4", 64, 36},
    {41, "Q1_0", 128, 18},
    {1000, "F8_E4M3_R128", 128, 129, true}, {1001, "NVFP4_S2", 64, 40, true},
};
}  // namespace detail

/// Geometry of ggml type `id`, or nullptr when the id is retired or unknown to upstream ggml.
/// Also answers for the ds4-internal ids (geometry `internal` = true); a GGUF reader must refuse those.
constexpr const GgmlTypeGeometry* ggml_type_geometry(uint32_t id) {
  for (const auto& g : detail::kGgmlGeometry)
    if (g.id == id) return &g;
  return nullptr;
}

/// Name of ggml type `id` ("IQ2_XXS"), or "unknown" for retired/unknown ids.
constexpr std::string_view ggml_type_name(uint32_t id) {
  const auto* g = ggml_type_geometry(id);
  return g ? g->name : std::string_view("unknown");
}

/// Looks a type up by name, case-insensitively ("iq2_xxs" or "IQ2_XXS"); nullptr if none.
inline const GgmlTypeGeometry* ggml_type_by_name(std::string_view name) {
  for (const auto& g : detail::kGgmlGeometry) {
    if (g.name.size() != name.size()) continue;
    bool eq = true;
    for (size_t i = 0; i < name.size() && eq; ++i) {
      char a = name[i], b = g.name[i];
      if (a >= 'a' && a <= 'z') a = char(a - 32);
      eq = (a == b);
    }
    if (eq) return &g;
  }
  return nullptr;
}

/// Known fork reuses of ids, for error messages: e.g. the nisparks DeepSeek-V4 fork uses 42 for
/// F8_E4M3_B128 (upstream: Q2_0). Returns an empty view when no fork use is known.
constexpr std::string_view ggml_type_fork_note(uint32_t id) {
  switch (id) {
    case 42: return "id 42 is F8_E4M3_B128 in the nisparks/nsparks DeepSeek-V4 fork and Q2_0 in the newest upstream; neither is supported";
    case 31: case 32: case 33: return "ids 31-33 are retired upstream (Q4_0_4_4/4_8/8_8 repacks)";
    case 36: case 37: case 38: return "ids 36-38 are retired upstream (IQ4_NL repacks)";
    case 4: case 5: return "ids 4-5 are retired upstream (Q4_2/Q4_3)";
    default: return {};
  }
}

}  // namespace ds4
