// Shared core of the fused RoPE-write family on the "cpu" backend:
//   rope_reshape_and_cache, rope_reshape_and_cache_merged, rope_concat_and_cache_mla,
//   rerope_cached_keys.
//
// Conventions (vLLM rotary_embedding): cos_sin_cache is [max_position, rotary_dim] with cos in the
// first rotary_dim/2 columns and sin in the last rotary_dim/2. NeoX style rotates the pairs
// (i, i + rotary_dim/2), GPT-J style the pairs (2i, 2i+1); elements rotary_dim..head_size-1 of every
// head pass through unchanged. For a pair (x, y) and angle index i:
//     x' = x*cos[i] - y*sin[i]        y' = y*cos[i] + x*sin[i]
// evaluated in fp32 as exactly these two products and one subtraction (y' as y*cos[i] - x*(-sin[i]),
// the same value: a subtraction keeps its operand order, so NaN results agree on every path; no FMA
// contraction: the sources are compiled with -ffp-contract=off), then rounded to the output dtype
// with round-to-nearest-even. The portable, AVX2/F16C and AVX-512 paths give bit-identical results.
//
// Index handling: a token whose position is outside [0, max_position) gets zero rows in the rotated
// outputs and is not written to any cache (graph mode cannot raise on index values; Python raises
// in PyNative). A slot < 0 or >= num_blocks*block_size is skipped. Strict mode (PyNative fast
// path): an invalid position or slot makes the op fail before it writes anything (StrictCheck).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "aot_abi.h"
#include "index_check.h"
#include "kv_quant.h"
#include "stream_copy.h"

namespace mskv {
namespace rope {

// ------------------------------------------------------------------ scalar dtype conversions
// These are the reference conversions; the AVX2/F16C path matches them bit for bit (NaN included:
// NaNs are quieted and keep their leading payload bits, as the F16C instructions do).

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float Bf16ToF32(uint16_t h) { return BitsFloat(static_cast<uint32_t>(h) << 16); }

// fp32 -> bf16, round to nearest even; NaN -> quiet NaN with the same sign and leading payload.
inline uint16_t F32ToBf16(float f) {
  uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) {  // inf / NaN (NaN quieted)
    return BitsFloat(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u));
  }
  if (exp != 0) return BitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
  // zero or subnormal: mant * 2^-24 is exact in fp32
  return BitsFloat(sign | FloatBits(static_cast<float>(mant) * 5.9604644775390625e-8f));
}

// fp32 -> fp16, round to nearest even, overflow to inf; NaN -> quiet NaN, truncated payload.
inline uint16_t F32ToF16(float f) {
  const uint32_t u = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 (or inf) -> inf
  if (a >= 0x38800000u) {                                             // normal fp16 range (>= 2^-14)
    uint32_t r = a - 0x38000000u;                                     // rebias exponent 127 -> 15
    r += 0xfffu + ((r >> 13) & 1u);
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  // below 2^-14: adding 0.5 aligns the value to multiples of 2^-24 (the fp16 subnormal step) with
  // the FPU's round-to-nearest-even; the low bits of the sum are the fp16 subnormal mantissa.
  const float sum = BitsFloat(a) + 0.5f;
  return static_cast<uint16_t>(sign | (FloatBits(sum) - 0x3f000000u));
}

// ------------------------------------------------------------------ argument blocks

// One paged-cache plane receiving [heads, head_size] rows per slot.
//   rank-4 BSND [num_blocks, block_size, heads, head_size], BNSD [num_blocks, heads, block_size,
//   head_size], or rank-3 [num_blocks, block_size, head_size] (heads = 1, MLA planes).
struct CachePlane {
  uint8_t* base = nullptr;
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  int64_t heads = 0;
  int64_t head_size = 0;
  size_t elem = 0;
  bool bnsd = false;
  // NZ cache [num_blocks, heads * head_size / nz_c0, block_size, nz_c0] (nz_copy.h); 0: BSND / BNSD. A
  // dynamic scale cache beside an NZ plane is BSND (bnsd false).
  int64_t nz_c0 = 0;

  int64_t num_slots() const { return num_blocks * block_size; }
  // Byte offset of head h of slot (NZ: of its first fractal piece; head_size a multiple of nz_c0).
  int64_t HeadOffset(int64_t slot, int64_t h) const {
    const int64_t hb = head_size * static_cast<int64_t>(elem);
    if (nz_c0 > 0) return NzOffset(slot, h * head_size / nz_c0);
    if (!bnsd) return (slot * heads + h) * hb;
    const int64_t block = slot / block_size, off = slot % block_size;
    return ((block * heads + h) * block_size + off) * hb;
  }
  // NZ: byte offset of fractal piece f of slot.
  int64_t NzOffset(int64_t slot, int64_t f) const {
    const int64_t block = slot / block_size, off = slot % block_size;
    return ((block * (heads * head_size / nz_c0) + f) * block_size + off) * nz_c0 * static_cast<int64_t>(elem);
  }
  // Copy one token's contiguous [heads, head_size] row into slot (`stream`: non-temporal stores,
  // stream_copy.h).
  void WriteRow(int64_t slot, const uint8_t* src, bool stream = false) const {
    const int64_t hb = head_size * static_cast<int64_t>(elem);
    if (nz_c0 > 0) {
      const int64_t cb = nz_c0 * static_cast<int64_t>(elem), pieces = heads * head_size / nz_c0;
      for (int64_t f = 0; f < pieces; ++f) StreamCopy(base + NzOffset(slot, f), src + f * cb, cb, stream);
      return;
    }
    if (!bnsd) {
      StreamCopy(base + slot * heads * hb, src, heads * hb, stream);
      return;
    }
    for (int64_t h = 0; h < heads; ++h) StreamCopy(base + HeadOffset(slot, h), src + h * hb, hb, stream);
  }
};

struct RopeTable {
  const void* data = nullptr;  // [max_position, rotary_dim], cos | sin
  DType dtype = DType::kF32;   // float32, or the data dtype (float16 / bfloat16)
  int64_t max_position = 0;
  int64_t rotary_dim = 0;
};

// rope_reshape_and_cache(_merged) and rope_concat_and_cache_mla.
//   q [rows, q_heads, head_size] -> q_out; k [rows, k_heads, head_size] -> k_out (rotated);
//   the "v" row written to v_cache is either v (GQA ops) or RMSNorm/copy of kv_c -> kv_c_out (MLA).
//   For the first num_write rows with a valid slot and position, k_out's row goes to k_cache and
//   the v row to v_cache.
struct RopeCacheArgs {
  DType dtype = DType::kUnknown;  // q, k, v, kv_c, caches, outputs
  int64_t rows = 0;               // T'
  int64_t num_write = 0;          // T = len(slot_mapping)
  int64_t head_size = 0;          // of q and k heads
  bool neox = true;
  RopeTable table;
  const void* positions = nullptr;
  DType pos_dtype = DType::kI64;
  const void* slots = nullptr;
  DType slot_dtype = DType::kI64;

  const uint8_t* q = nullptr;
  uint8_t* q_out = nullptr;
  int64_t q_heads = 0;
  const uint8_t* k = nullptr;
  uint8_t* k_out = nullptr;
  int64_t k_heads = 0;

  // GQA: v [rows, k_heads, head_size] copied to v_cache.
  const uint8_t* v = nullptr;
  // MLA: kv_c [rows, kv_c_dim] -> kv_c_out (RMSNorm with norm_weight when given) -> v_cache.
  const uint8_t* kv_c = nullptr;
  uint8_t* kv_c_out = nullptr;
  int64_t kv_c_dim = 0;
  const void* norm_weight = nullptr;  // nullptr = no norm
  DType norm_dtype = DType::kF32;
  float epsilon = 1e-6f;

  CachePlane k_cache;
  CachePlane v_cache;
  bool slots_distinct = false;  // known: no slot repeats (strict mode checked it)

  // Quantized variants (rope_*_quant): how the rows written to k_cache / v_cache (int8 or fp8, elem 1)
  // are quantized from key_out and value / kv_c_out; nullptr (both): the rows are copied unchanged.
  const quant::PlaneQuant* k_quant = nullptr;
  const quant::PlaneQuant* v_quant = nullptr;
};

// rerope_cached_keys: rotate the cached key heads at slots[i] by the angle new - old, in place.
struct ReropeArgs {
  DType dtype = DType::kUnknown;
  int64_t count = 0;  // len(slot_mapping)
  bool neox = true;
  RopeTable table;
  const void* slots = nullptr;
  DType slot_dtype = DType::kI64;
  const void* old_positions = nullptr;
  const void* new_positions = nullptr;
  DType pos_dtype = DType::kI64;
  CachePlane cache;
};

void RopeAndCache(const RopeCacheArgs& a);
void Rerope(const ReropeArgs& a);

// Instruction-set path of the rope kernels: 0 = portable C++, 1 = AVX2 + F16C, 2 = AVX-512 (F, BW,
// VL) + AVX2 + F16C. Default: the best the CPU supports; MS_KVCACHE_ROPE_ISA=generic|avx2 or
// MskvRopeSetIsa (tests) override.
int ActiveIsa();

}  // namespace rope
}  // namespace mskv

// ------------------------------------------------------------------ AOT argument parsing helpers
namespace mskv {
namespace rope {

inline void Require(bool ok, const std::string& msg) {
  if (!ok) throw KernelError(msg);
}

inline bool IsFloat(DType d) { return d == DType::kF16 || d == DType::kBF16 || d == DType::kF32; }
inline bool IsIndex(DType d) { return d == DType::kI32 || d == DType::kI64; }

// cos_sin_cache at argument i: [max_position, rotary_dim], fp32 or the data dtype; rotary_dim even,
// 0 < rotary_dim <= head_size.
inline RopeTable TableArg(const AotArgs& a, int i, DType data, int64_t head_size) {
  RopeTable t;
  Require(a.rank(i) == 2, "cos_sin_cache must be rank 2");
  t.data = a.ptr<void>(i);
  t.dtype = a.dtype(i);
  t.max_position = a.dim(i, 0);
  t.rotary_dim = a.dim(i, 1);
  Require(t.dtype == DType::kF32 || t.dtype == data, "cos_sin_cache dtype must be float32 or the data dtype");
  Require(t.rotary_dim > 0 && t.rotary_dim % 2 == 0 && t.rotary_dim <= head_size,
          "rotary_dim must be even and in (0, head_size]");
  return t;
}

// Rank-4 (BSND/BNSD) or rank-3 ([nb, bs, D], one head) cache plane at argument i.
inline CachePlane PlaneArg(const AotArgs& a, int i, bool bnsd) {
  CachePlane p;
  p.base = a.ptr(i);
  p.elem = DTypeSize(a.dtype(i));
  Require(p.elem > 0, "unsupported cache dtype");
  if (a.rank(i) == 3) {
    p.num_blocks = a.dim(i, 0);
    p.block_size = a.dim(i, 1);
    p.heads = 1;
    p.head_size = a.dim(i, 2);
  } else {
    Require(a.rank(i) == 4, "caches must be rank 3 or 4");
    p.num_blocks = a.dim(i, 0);
    p.block_size = bnsd ? a.dim(i, 2) : a.dim(i, 1);
    p.heads = bnsd ? a.dim(i, 1) : a.dim(i, 2);
    p.head_size = a.dim(i, 3);
    p.bnsd = bnsd;
  }
  return p;
}

// An NZ cache plane [nb, H*D/C0, bs, C0] of the cache tensor at argument i, from dim `first` on (0; 1 for a
// merged [2, ...] cache: the K plane), whose rows are the [T', H, D] tensor at argument rows_idx (the NZ cache
// has no head split; the per-head writes need it): head_size a multiple of C0, C0 * element size 32 bytes.
inline CachePlane NzPlaneArg(const AotArgs& a, int i, int first, int rows_idx) {
  CachePlane p;
  p.base = a.ptr(i);
  p.elem = DTypeSize(a.dtype(i));
  Require(p.elem > 0, "unsupported cache dtype");
  Require(a.rank(i) == first + 4, "an NZ cache must be [num_blocks, H*D/C0, block_size, C0]");
  Require(a.rank(rows_idx) == 3, "with an NZ cache the key rows must be [T', num_kv_heads, head_size]");
  p.num_blocks = a.dim(i, first);
  p.block_size = a.dim(i, first + 2);
  p.heads = a.dim(rows_idx, 1);
  p.head_size = a.dim(rows_idx, 2);
  p.nz_c0 = a.dim(i, first + 3);
  Require(p.nz_c0 * static_cast<int64_t>(p.elem) == 32 && p.head_size % p.nz_c0 == 0 &&
              a.dim(i, first + 1) * p.nz_c0 == p.heads * p.head_size,
          "an NZ cache [num_blocks, H*D/C0, block_size, C0] needs C0 of 32 bytes, head_size a multiple of C0 and "
          "H*D/C0 * C0 = num_kv_heads * head_size of the key rows");
  return p;
}

// cache_layout: the int code (op_host/mskv_attr_codes.h), BSND when absent; LayoutAttr: BSND / BNSD only.
inline int64_t LayoutCode(const AotArgs& a) { return a.attr_int("cache_layout", mskv_attr::kLayoutBSND); }

// rope_reshape_and_cache(_merged): fill the arguments shared by both ops. Inputs 0..4 are
// positions, query, key, value, cos_sin_cache; slot_mapping at slot_idx; outputs query_out, key_out
// at out_idx, out_idx + 1. Checks every size the kernel relies on (Python checked them already).
// quantized: the caches hold int8 / fp8 codes (rope_reshape_and_cache_quant), not the data dtype.
RopeCacheArgs GqaArgs(const AotArgs& a, const CachePlane& kc, const CachePlane& vc, int slot_idx, int out_idx,
                      bool quantized = false);

// rope_concat_and_cache_mla(_quant): inputs 0..8 are positions, q_pe, k_pe, kv_c, cos_sin_cache,
// kv_c_cache, k_pe_cache, slot_mapping, kv_c_norm_weight ([0] = no norm); outputs q_pe_out, k_pe_out,
// kv_c_out at out_idx.. out_idx + 2. quantized: the caches hold int8 / fp8 codes.
RopeCacheArgs MlaArgs(const AotArgs& a, int out_idx, bool quantized = false);

// cache_layout: an int code (op_host/mskv_attr_codes.h), BSND when absent.
inline bool LayoutAttr(const AotArgs& a) {
  return LayoutIsBnsd(a.attr_int("cache_layout", mskv_attr::kLayoutBSND));
}

// Strict mode (attribute "mskv_strict", set only by the PyNative fast path, whose wrappers may read
// positions/slots without waiting for pending ops): re-check the index values the kernel reads now
// and throw, writing nothing, instead of skipping invalid entries (graph mode / ops.Custom).
inline bool Strict(const AotArgs& a) { return a.attr_bool("mskv_strict", false); }

inline void StrictPositions(const char* arg, const void* p, DType d, int64_t n, int64_t max_position) {
  const IndexIssue e = CheckPositionValues(p, DTypeSize(d), n, max_position);
  if (e.code != 0) {
    throw KernelError(PositionIssueMessage(arg, e, max_position) +
                      " (checked at launch: was it modified after the call?)");
  }
}

inline void StrictSlots(const void* s, DType d, int64_t n, int64_t num_slots) {
  if (n <= 0) return;
  const IndexIssue e = CheckSlotValues(s, DTypeSize(d), n, num_slots);
  if (e.code != 0) {
    throw KernelError(SlotIssueMessage("slot_mapping", e, num_slots) +
                      " (checked at launch: was slot_mapping modified after the call?)");
  }
}

// rope_reshape_and_cache(_merged), rope_concat_and_cache_mla: positions of all rows, slots. A strict
// check rejects repeated slots, so the kernel need not look for them again (r.slots_distinct).
inline void StrictCheck(const AotArgs& a, RopeCacheArgs& r) {
  if (!Strict(a)) return;
  StrictPositions("positions", r.positions, r.pos_dtype, r.rows, r.table.max_position);
  StrictSlots(r.slots, r.slot_dtype, r.num_write, r.k_cache.num_slots());
  r.slots_distinct = true;
}

inline void StrictCheck(const AotArgs& a, const ReropeArgs& r) {
  if (!Strict(a)) return;
  StrictPositions("old_positions", r.old_positions, r.pos_dtype, r.count, r.table.max_position);
  StrictPositions("new_positions", r.new_positions, r.pos_dtype, r.count, r.table.max_position);
  StrictSlots(r.slots, r.slot_dtype, r.count, r.cache.num_slots());
}

}  // namespace rope
}  // namespace mskv
