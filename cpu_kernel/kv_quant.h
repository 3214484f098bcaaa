// Quantized KV-cache writes on the "cpu" backend: shared declarations of the quantizing ops
// (reshape_and_cache_quant, concat_and_cache_mla_quant, rope_reshape_and_cache_quant,
// rope_concat_and_cache_mla_quant). The formulas are docs/quantization.md's; the row quantizers live
// in quant_body.inl, compiled once per instruction-set path next to the rope kernels (rope_common.cpp),
// so both families share the dtype conversions and the ISA dispatch.
//
// Codes (element type of a quantized cache), for a float row x (fp32 after loading), per element i:
//   int8, static:   q = sat_int8(rne(x / s[i] - o[i]))     (o = 0 without offsets; NaN -> 0)
//   fp8,  static:   q = fp8_rne(clamp(x / s[i], -max, max)) (NaN stays NaN; max 448 e4m3fn, 57344 e5m2)
//   dynamic (one scale per token and head, written to the scale cache):
//     s = max_i |x_i| / max_code  (NaN elements ignored; max_code 127 int8, 448 / 57344 fp8)
//     q as static with that s and no offset; s == 0 (an all-zero row) and s == inf (a row with an
//     infinite element) give q = 0 everywhere.
// Every step is one IEEE fp32 operation (division, subtraction), then round-half-to-even; the portable
// and AVX2 paths give the same bits.
#pragma once

#include <cstdint>
#include <string>

#include "aot_abi.h"

namespace mskv {
namespace quant {

enum class Code : int { kInt8 = 0, kF8E4M3 = 1, kF8E5M2 = 2 };

// The code type of a cache dtype; false for a dtype without a quantization rule.
inline bool CodeOf(DType d, Code* c) {
  switch (d) {
    case DType::kI8: *c = Code::kInt8; return true;
    case DType::kF8E4M3: *c = Code::kF8E4M3; return true;
    case DType::kF8E5M2: *c = Code::kF8E5M2; return true;
    default: return false;
  }
}

// Largest finite code value: the dynamic scale is max|x| / CodeMax.
inline float CodeMax(Code c) {
  return c == Code::kInt8 ? 127.0f : (c == Code::kF8E4M3 ? 448.0f : 57344.0f);
}

// How the rows written into one cache plane are quantized.
struct PlaneQuant {
  Code code = Code::kInt8;
  bool dynamic = false;
  // static: scale (and offset, int8 only; nullptr = none) with 1 value (per tensor), heads values
  // (per head, [heads]) or heads * head_size values (per channel, [heads, head_size] row-major)
  const float* scale = nullptr;
  const float* offset = nullptr;
  bool per_channel = false;
  bool per_head = false;
  // dynamic: the plane's scale cache, one float per (slot, head): [nb, bs, heads(, 1)] (BSND, MLA
  // [nb, bs, 1]) or [nb, heads, bs(, 1)] (BNSD), i.e. the cache plane with head_size 1 (or dropped)
  float* scale_cache = nullptr;
};

// One plane of a quantizing scatter: token t's source row (heads x head_size elements of `src_dtype`,
// contiguous at src + t * src_row_bytes) is quantized into its slot of `cache` (a rope::CachePlane
// described by base/geometry; elem = 1).
struct ScatterPlane {
  const uint8_t* src = nullptr;
  int64_t src_row_bytes = 0;
  uint8_t* cache = nullptr;
  int64_t num_blocks = 0, block_size = 0, heads = 1, head_size = 0;
  bool bnsd = false;
  int64_t nz_c0 = 0;  // an NZ cache (rope::CachePlane::nz_c0); its scale cache is BSND
  PlaneQuant q;
};

// reshape_and_cache_quant (2 planes, K and V) and concat_and_cache_mla_quant (kv_c, k_pe).
struct ScatterArgs {
  DType dtype = DType::kUnknown;  // of every source row: float16, bfloat16 or float32
  int num_planes = 0;
  ScatterPlane plane[2];
  const void* slots = nullptr;
  DType slot_dtype = DType::kI64;
  int64_t num_tokens = 0;
  bool slots_distinct = false;  // known: no slot repeats (strict mode checked it)
};

// Quantize and write every plane's rows of the first num_tokens tokens at slot_mapping[t]; slots < 0
// or >= num_blocks * block_size are skipped (their scale cache rows untouched). A slot given twice
// (graph mode only) ends with the later token's row and scale.
void QuantScatter(const ScatterArgs& a);

// Element index of the scale of (slot, head h) in a scale cache laid out like the data plane.
inline int64_t ScaleIndex(int64_t slot, int64_t h, int64_t heads, int64_t block_size, bool bnsd) {
  if (!bnsd) return slot * heads + h;
  const int64_t block = slot / block_size, off = slot % block_size;
  return (block * heads + h) * block_size + off;
}

// The values of a static scale (`positive`: finite and > 0) or offset (finite) input, checked at every
// launch before anything is written (PyNative checks them in Python too; graph mode and ops.Custom only
// here): throws a KernelError "argument '<arg>': expected ..., got <value> at flat index <i>" otherwise
// (MSKV_AOT_GUARD prefixes the public op). `strict` (the PyNative fast path): the message asks whether
// the tensor was modified after the call.
void CheckScaleValues(const std::string& arg, const float* v, int64_t n, bool positive, bool strict);
// The rule of CheckScaleValues without the throw: "" if every value passes, else "argument '<arg>': expected
// ..., got <value> at flat index <i>" for the first that does not (also the cause MskvQuantTrapCause gives).
std::string ScaleValuesProblem(const std::string& arg, const float* v, int64_t n, bool positive);

}  // namespace quant
}  // namespace mskv
