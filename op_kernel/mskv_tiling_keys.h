// The tiling keys of every kernel entry, declared once per op, per target core; each kernel entry's
// branch ladder is generated from its op's declaration (no hand-written ladders).
//
// A tiling key is a decimal number whose digits are the op's dimensions, most significant first, as the
// op's host tiling computes it (op_host/<op>.cpp: the key of FinishTiling). Each dimension is a list
// macro of the values compiled for the target (MSKV_HAS_BF16_AND_PAD, mskv_arch.h): bfloat16 and
// DataCopyPad exist on Atlas A2/A3 only, so on Ascend310P the lists leave them out and those keys have no
// branch there (the host tiling refuses bfloat16 and unaligned rows on 310P before it computes a key).
//
//   #define MSKV_DIM_<NAME>(F, ...) F(__VA_ARGS__, <digit>, <value>) F(__VA_ARGS__, <digit>, <value>) ...
//
// (<value>: one token, a type or a constant). An op's key set is a product of dimensions (or a union of
// products, when a dimension depends on another), MSKV_KEYSn(EMIT, DIM_1, ..., DIM_n) with DIM_1 the most
// significant digit; it calls EMIT(<key literal>, <value of DIM_1>, ..., <value of DIM_n>) once per key.
// A kernel entry defines EMIT as its branch (`if (TILING_KEY_IS(K)) return Run<...>(...);`), expands
// MSKV_KEYS_<OP>(EMIT) and ends with MSKV_UNKNOWN_TILING_KEY() (AscendC::Trap: a key without a branch
// stops the core, the emulation raises rule TRAP, instead of a kernel that silently does nothing).
//
// Why literals: CANN's kernel build finds a kernel's tiling keys by preprocessing it (-E) and matching
// `g_tilingKey == (<decimal literal>` in the .i (asc-devkit tools/build/asc_op_compile_base/asc_op_compiler/
// kernel_info_infer.py, find_tilingkey; TILING_KEY_IS(k) is `(g_tilingKey == (k))`, impl/basic_api/utils/
// kernel_utils_macros.h). So the key must reach TILING_KEY_IS as one decimal literal, never an expression:
// MSKV_KEYn pastes the digits into one pp-number and drops leading zeros (a leading 0 would be octal).
// scripts/check_cann_headers.py checks the official .i of every kernel for exactly the declared keys.
//
// The host side reads the same declaration (op_host/mskv_tiling_key_check.h includes this file): an op's
// key function below (mskv_keys::CopyKey, ...: the digits in the order of its MSKV_KEYS_<OP>) computes the
// key from the digits the tiling chose, and FinishTiling refuses a key that MSKV_OP_KEY_SETS does not
// declare for the SoC (a tiling error naming the op, the key and the target).
//
// Adding a dimension (e.g. a cache dtype for the quantized writes) is a change here: a new MSKV_DIM_*
// list, one more DIM in the op's MSKV_KEYS_<OP> and one more parameter of its key function; the kernel's
// EMIT takes one more value and the host's call of the key function one more digit (neither compiles
// before). tests/test_tiling_keys.py checks that the host's keys are the kernel's, per SoC.
//
// Device subset only: preprocessor definitions and constexpr functions (no std::, no includes but
// mskv_arch.h), C++11 for the host compile.
#ifndef MS_KVCACHE_OP_KERNEL_MSKV_TILING_KEYS_H_
#define MS_KVCACHE_OP_KERNEL_MSKV_TILING_KEYS_H_

#include "mskv_arch.h"

// ------------------------------------------------------------------------- digits -> one key literal
#define MSKV_PP_CAT(a, b) MSKV_PP_CAT_I(a, b)
#define MSKV_PP_CAT_I(a, b) a##b
#define MSKV_PP_SECOND(...) MSKV_PP_SECOND_I(__VA_ARGS__, ~)
#define MSKV_PP_SECOND_I(a, b, ...) b
#define MSKV_PP_ZERO_0 ~, 1
// 1 if d is the digit 0, else 0
#define MSKV_PP_IS_ZERO(d) MSKV_PP_SECOND(MSKV_PP_CAT(MSKV_PP_ZERO_, d), 0)

// MSKV_KEYn(d_1, ..., d_n): the decimal literal d_1 d_2 ... d_n without leading zeros (a digit may be a
// fragment of several digits, e.g. 10, as long as only the fragment 0 starts with 0).
#define MSKV_KEY1(a) a
#define MSKV_KEY2(a, b) MSKV_PP_CAT(MSKV_KEY2_, MSKV_PP_IS_ZERO(a))(a, b)
#define MSKV_KEY2_0(a, b) a##b
#define MSKV_KEY2_1(a, b) MSKV_KEY1(b)
#define MSKV_KEY3(a, b, c) MSKV_PP_CAT(MSKV_KEY3_, MSKV_PP_IS_ZERO(a))(a, b, c)
#define MSKV_KEY3_0(a, b, c) a##b##c
#define MSKV_KEY3_1(a, b, c) MSKV_KEY2(b, c)
#define MSKV_KEY4(a, b, c, d) MSKV_PP_CAT(MSKV_KEY4_, MSKV_PP_IS_ZERO(a))(a, b, c, d)
#define MSKV_KEY4_0(a, b, c, d) a##b##c##d
#define MSKV_KEY4_1(a, b, c, d) MSKV_KEY3(b, c, d)
#define MSKV_KEY5(a, b, c, d, e) MSKV_PP_CAT(MSKV_KEY5_, MSKV_PP_IS_ZERO(a))(a, b, c, d, e)
#define MSKV_KEY5_0(a, b, c, d, e) a##b##c##d##e
#define MSKV_KEY5_1(a, b, c, d, e) MSKV_KEY4(b, c, d, e)
#define MSKV_KEY6(a, b, c, d, e, f) MSKV_PP_CAT(MSKV_KEY6_, MSKV_PP_IS_ZERO(a))(a, b, c, d, e, f)
#define MSKV_KEY6_0(a, b, c, d, e, f) a##b##c##d##e##f
#define MSKV_KEY6_1(a, b, c, d, e, f) MSKV_KEY5(b, c, d, e, f)

// ------------------------------------------------------------------------- products of dimensions
// MSKV_KEYSn(EMIT, A, B, ...): EMIT(key, a, b, ...) for every combination of the lists' values. Each level
// is its own macro (the preprocessor does not re-enter a macro inside its own expansion), so the lists of
// one product must be different macros.
#define MSKV_KEYS3(E, A, B, C) A(MSKV_K3_A, E, B, C)
#define MSKV_K3_A(E, B, C, a, va) B(MSKV_K3_B, E, C, a, va)
#define MSKV_K3_B(E, C, a, va, b, vb) C(MSKV_K3_C, E, a, va, b, vb)
#define MSKV_K3_C(E, a, va, b, vb, c, vc) E(MSKV_KEY3(a, b, c), va, vb, vc)

#define MSKV_KEYS4(E, A, B, C, D) A(MSKV_K4_A, E, B, C, D)
#define MSKV_K4_A(E, B, C, D, a, va) B(MSKV_K4_B, E, C, D, a, va)
#define MSKV_K4_B(E, C, D, a, va, b, vb) C(MSKV_K4_C, E, D, a, va, b, vb)
#define MSKV_K4_C(E, D, a, va, b, vb, c, vc) D(MSKV_K4_D, E, a, va, b, vb, c, vc)
#define MSKV_K4_D(E, a, va, b, vb, c, vc, d, vd) E(MSKV_KEY4(a, b, c, d), va, vb, vc, vd)

#define MSKV_KEYS5(E, A, B, C, D, G) A(MSKV_K5_A, E, B, C, D, G)
#define MSKV_K5_A(E, B, C, D, G, a, va) B(MSKV_K5_B, E, C, D, G, a, va)
#define MSKV_K5_B(E, C, D, G, a, va, b, vb) C(MSKV_K5_C, E, D, G, a, va, b, vb)
#define MSKV_K5_C(E, D, G, a, va, b, vb, c, vc) D(MSKV_K5_D, E, G, a, va, b, vb, c, vc)
#define MSKV_K5_D(E, G, a, va, b, vb, c, vc, d, vd) G(MSKV_K5_G, E, a, va, b, vb, c, vc, d, vd)
#define MSKV_K5_G(E, a, va, b, vb, c, vc, d, vd, g, vg) E(MSKV_KEY5(a, b, c, d, g), va, vb, vc, vd, vg)

#define MSKV_KEYS6(E, A, B, C, D, G, H) A(MSKV_K6_A, E, B, C, D, G, H)
#define MSKV_K6_A(E, B, C, D, G, H, a, va) B(MSKV_K6_B, E, C, D, G, H, a, va)
#define MSKV_K6_B(E, C, D, G, H, a, va, b, vb) C(MSKV_K6_C, E, D, G, H, a, va, b, vb)
#define MSKV_K6_C(E, D, G, H, a, va, b, vb, c, vc) D(MSKV_K6_D, E, G, H, a, va, b, vb, c, vc)
#define MSKV_K6_D(E, G, H, a, va, b, vb, c, vc, d, vd) G(MSKV_K6_G, E, H, a, va, b, vb, c, vc, d, vd)
#define MSKV_K6_G(E, H, a, va, b, vb, c, vc, d, vd, g, vg) H(MSKV_K6_H, E, a, va, b, vb, c, vc, d, vd, g, vg)
#define MSKV_K6_H(E, a, va, b, vb, c, vc, d, vd, g, vg, h, vh) \
  E(MSKV_KEY6(a, b, c, d, g, h), va, vb, vc, vd, vg, vh)

// The failure branch after a generated ladder: a key the kernel has no branch for.
#define MSKV_UNKNOWN_TILING_KEY() AscendC::Trap()

// The kernel entry parameters every op has and does not read (the in-place ops' dummy status output and the
// workspace CANN passes), at the start of each entry before GET_TILING_DATA.
#define MSKV_UNUSED(a, b) \
  (void)(a);              \
  (void)(b)

// ------------------------------------------------------------------------- dimensions (per target)
// Digits: op_host/kv_copy_tiling_common.h (DTypeCode, IndexDTypeCode); the key functions below.
//
// An entry that exists on Atlas A2/A3 only (bfloat16, DataCopyPad) is written MSKV_A2_ONLY(F)(...): the
// entry where MSKV_KEYS_TARGET_A2 is 1, nothing where it is 0. MSKV_KEYS_TARGET_A2 is the kernel's target
// (MSKV_HAS_BF16_AND_PAD, mskv_arch.h) unless defined before; it is read where a key set is expanded, so
// the host tiling expands the same declaration for both targets (MSKV_HOST_KEY_TABLES below).
#ifndef MSKV_KEYS_TARGET_A2
#define MSKV_KEYS_TARGET_A2 MSKV_HAS_BF16_AND_PAD
#endif
#define MSKV_A2_ONLY(F) MSKV_PP_CAT(MSKV_A2_ONLY_, MSKV_KEYS_TARGET_A2)(F)
#define MSKV_A2_ONLY_1(F) F
#define MSKV_A2_ONLY_0(F) MSKV_PP_EAT
#define MSKV_PP_EAT(...)
// cache / data dtype: float16 1, bfloat16 2 (A2/A3), float32 3, int8 4
#define MSKV_DIM_KV_DTYPE(F, ...) F(__VA_ARGS__, 1, half) MSKV_A2_ONLY(F)(__VA_ARGS__, 2, bfloat16_t) \
  F(__VA_ARGS__, 3, float) F(__VA_ARGS__, 4, int8_t)
// rotary data dtype with a table of its own dtype possible (float16, bfloat16), and float32 alone
#define MSKV_DIM_ROPE_DTYPE(F, ...) F(__VA_ARGS__, 1, half) MSKV_A2_ONLY(F)(__VA_ARGS__, 2, bfloat16_t)
// DataCopyPad (A2/A3): rows not a multiple of 32 bytes
#define MSKV_DIM_PAD(F, ...) F(__VA_ARGS__, 0, false) MSKV_A2_ONLY(F)(__VA_ARGS__, 1, true)
// float data of the quantizing writes (the KV dtype digits without int8)
#define MSKV_DIM_QUANT_DTYPE(F, ...) F(__VA_ARGS__, 1, half) MSKV_A2_ONLY(F)(__VA_ARGS__, 2, bfloat16_t) \
  F(__VA_ARGS__, 3, float)
// quant_mode of the quantizing writes, value = dynamic: static 0, dynamic 1 (mskv_attr::kQuantSTATIC / DYNAMIC)
#define MSKV_DIM_QUANT_STATIC(F, ...) F(__VA_ARGS__, 0, false)
#define MSKV_DIM_QUANT_DYNAMIC(F, ...) F(__VA_ARGS__, 1, true)
// quant_mode where dynamic scales need DataCopyPad (one 4-byte write per scale): static, dynamic (A2/A3)
#define MSKV_DIM_QUANT_MODE_PAD_DYN(F, ...) F(__VA_ARGS__, 0, false) MSKV_A2_ONLY(F)(__VA_ARGS__, 1, true)
// cache_layout of a dynamic scale cache: BSND, BNSD (A2/A3: one 4-byte write per head needs DataCopyPad)
#define MSKV_DIM_LAYOUT_PAD_BNSD(F, ...) F(__VA_ARGS__, 0, false) MSKV_A2_ONLY(F)(__VA_ARGS__, 1, true)
#define MSKV_DIM_ROPE_F32(F, ...) F(__VA_ARGS__, 3, float)
// slot_mapping / block_mapping / block_ids dtype: int32 0, int64 1
// the layouts of the transfers with scale caches: BSND; BNSD (A2/A3), only with DataCopyPad (MSKV_DIM_PAD_ONLY)
#define MSKV_DIM_LAYOUT_BSND(F, ...) F(__VA_ARGS__, 0, false)
#define MSKV_DIM_LAYOUT_BNSD_PAD(F, ...) MSKV_A2_ONLY(F)(__VA_ARGS__, 1, true)
#define MSKV_DIM_PAD_ONLY(F, ...) F(__VA_ARGS__, 1, true)
// the byte view of a quantized (int8) cache and its float32 scale caches: the multi-layer transfers' dtype digit 4
#define MSKV_DIM_INT8_BYTES(F, ...) F(__VA_ARGS__, 4, int8_t)
#define MSKV_DIM_INDEX_DTYPE(F, ...) F(__VA_ARGS__, 0, int32_t) F(__VA_ARGS__, 1, int64_t)
// cache_layout, value = BNSD: BSND 0, BNSD 1 (a template parameter of the copy kernels)
#define MSKV_DIM_LAYOUT(F, ...) F(__VA_ARGS__, 0, false) F(__VA_ARGS__, 1, true)
// cache_layout NZ (digit 2): FRACTAL_NZ [nb, H*D/C0, bs, C0], C0 = 32 bytes. The row copies address it as BNSD
// (value true: H*D/C0 "heads" of C0 elements, each one 32-byte unit, so never DataCopyPad); the per-head writes
// (quantizing, rotary) take the value false (their scale cache is BSND) and split each head into C0 pieces
// (rope::CacheGeom::segElems). Its dtypes: float16, bfloat16 (A2/A3), int8 - no float32.
#define MSKV_DIM_LAYOUT_NZ(F, ...) F(__VA_ARGS__, 2, true)
#define MSKV_DIM_LAYOUT_NZ_HEADS(F, ...) F(__VA_ARGS__, 2, false)
#define MSKV_DIM_NZ_DTYPE(F, ...) F(__VA_ARGS__, 1, half) MSKV_A2_ONLY(F)(__VA_ARGS__, 2, bfloat16_t) \
  F(__VA_ARGS__, 4, int8_t)
#define MSKV_DIM_NO_PAD(F, ...) F(__VA_ARGS__, 0, false)
// cache_layout of the rotary kernels: the digit is set but both layouts run the same template
#define MSKV_DIM_ROPE_LAYOUT(F, ...) F(__VA_ARGS__, 0, 0) F(__VA_ARGS__, 1, 1)
// cos_sin_cache dtype, value = the table has the data dtype (digit 1), else float32 (digit 0)
#define MSKV_DIM_TABLE(F, ...) F(__VA_ARGS__, 0, false) F(__VA_ARGS__, 1, true)
#define MSKV_DIM_TABLE_F32(F, ...) F(__VA_ARGS__, 0, false)
// rotary style, value = NeoX (rotate halves) rather than GPT-J (interleaved pairs)
#define MSKV_DIM_NEOX(F, ...) F(__VA_ARGS__, 0, false) F(__VA_ARGS__, 1, true)
// kv_c_norm_weight of rope_concat_and_cache_mla, value = the weight has the data dtype:
// absent 0, float32 1, the data dtype 2 (float32 data: its weight is float32)
#define MSKV_DIM_NORM_WEIGHT(F, ...) F(__VA_ARGS__, 0, false) F(__VA_ARGS__, 1, false) F(__VA_ARGS__, 2, true)
#define MSKV_DIM_NORM_WEIGHT_F32(F, ...) F(__VA_ARGS__, 0, false) F(__VA_ARGS__, 1, false)

// ------------------------------------------------------------------------- the key of one combination
namespace mskv_keys {
// The key of the digits d_1, ..., d_n (most significant first, one decimal digit each), the value of the
// literal MSKV_KEYn pastes from them.
constexpr unsigned long long Digits(unsigned long long d) { return d; }
template <typename... Rest>
constexpr unsigned long long Digits(unsigned long long a, unsigned long long b, Rest... rest) {
  return Digits(a * 10 + b, rest...);
}
}  // namespace mskv_keys

// ------------------------------------------------------------------------- the key set of every op
// key = dtype * 100 + index dtype * 10 + DataCopyPad
#define MSKV_KEYS_CONCAT_AND_CACHE_MLA(E) MSKV_KEYS3(E, MSKV_DIM_KV_DTYPE, MSKV_DIM_INDEX_DTYPE, MSKV_DIM_PAD)
#define MSKV_KEYS_COPY_BLOCKS(E) MSKV_KEYS3(E, MSKV_DIM_KV_DTYPE, MSKV_DIM_INDEX_DTYPE, MSKV_DIM_PAD)
namespace mskv_keys {
constexpr unsigned long long CopyKey(unsigned long long dtype, unsigned long long index, bool pad) {
  return Digits(dtype, index, pad);
}
}  // namespace mskv_keys

// key = layout * 1000 + dtype * 100 + index dtype * 10 + DataCopyPad
#define MSKV_KEYS_LAYOUT_COPY(E) \
  MSKV_KEYS4(E, MSKV_DIM_LAYOUT, MSKV_DIM_KV_DTYPE, MSKV_DIM_INDEX_DTYPE, MSKV_DIM_PAD)
// the same with NZ caches (layout 2: float16, bfloat16 on A2/A3, int8; 32-byte units, no DataCopyPad)
#define MSKV_KEYS_LAYOUT_COPY_NZ(E) \
  MSKV_KEYS_LAYOUT_COPY(E) MSKV_KEYS4(E, MSKV_DIM_LAYOUT_NZ, MSKV_DIM_NZ_DTYPE, MSKV_DIM_INDEX_DTYPE, MSKV_DIM_NO_PAD)
#define MSKV_KEYS_RESHAPE_AND_CACHE(E) MSKV_KEYS_LAYOUT_COPY_NZ(E)
#define MSKV_KEYS_RESHAPE_AND_CACHE_MERGED(E) MSKV_KEYS_LAYOUT_COPY_NZ(E)
#define MSKV_KEYS_MULTI_LAYER_KV_TRANSFER(E) MSKV_KEYS_LAYOUT_COPY_NZ(E)
#define MSKV_KEYS_MULTI_LAYER_BLOCK_TRANSFER(E) MSKV_KEYS_LAYOUT_COPY_NZ(E)
// with scale caches: int8 caches only, moved as bytes (LayoutCopyKey with dtype 4). A BNSD scale cache has
// 4-byte heads, which need DataCopyPad: BNSD keys with DataCopyPad only, on A2/A3 only (Ascend310P: BSND rows of
// 32-byte multiples only). NZ caches (32-byte units) have BSND scale caches: DataCopyPad only for scale rows of
// 4 * H bytes not a multiple of 32 (A2/A3).
#define MSKV_KEYS_MULTI_LAYER_QUANT(E)                                                                      \
  MSKV_KEYS4(E, MSKV_DIM_LAYOUT_BSND, MSKV_DIM_INT8_BYTES, MSKV_DIM_INDEX_DTYPE, MSKV_DIM_PAD)              \
  MSKV_KEYS4(E, MSKV_DIM_LAYOUT_BNSD_PAD, MSKV_DIM_INT8_BYTES, MSKV_DIM_INDEX_DTYPE, MSKV_DIM_PAD_ONLY)     \
  MSKV_KEYS4(E, MSKV_DIM_LAYOUT_NZ, MSKV_DIM_INT8_BYTES, MSKV_DIM_INDEX_DTYPE, MSKV_DIM_PAD)
#define MSKV_KEYS_MULTI_LAYER_KV_TRANSFER_QUANT(E) MSKV_KEYS_MULTI_LAYER_QUANT(E)
#define MSKV_KEYS_MULTI_LAYER_BLOCK_TRANSFER_QUANT(E) MSKV_KEYS_MULTI_LAYER_QUANT(E)
namespace mskv_keys {
// layout: the cache_layout code (0 BSND, 1 BNSD, 2 NZ; mskv_attr::kLayout*)
constexpr unsigned long long LayoutCopyKey(unsigned long long layout, unsigned long long dtype, unsigned long long index,
                                           bool pad) {
  return Digits(layout, dtype, index, pad);
}
}  // namespace mskv_keys

// The rotary ops: DataCopyPad, a second dimension X (its float32 variant X_F32), dtype, table, style; the
// dtype decides which tables exist (float16 / bfloat16 data: a table of the data dtype or float32; float32
// data: a float32 table), a union of two products.
#define MSKV_KEYS_ROPE(E, X, X_F32)                                                                  \
  MSKV_KEYS5(E, MSKV_DIM_PAD, X, MSKV_DIM_ROPE_DTYPE, MSKV_DIM_TABLE, MSKV_DIM_NEOX)                 \
  MSKV_KEYS5(E, MSKV_DIM_PAD, X_F32, MSKV_DIM_ROPE_F32, MSKV_DIM_TABLE_F32, MSKV_DIM_NEOX)
namespace mskv_keys {
constexpr unsigned long long RopeKey(bool pad, unsigned long long x, unsigned long long dtype, bool tableIsData,
                                     bool neox) {
  return Digits(pad, x, dtype, tableIsData, neox);
}
}  // namespace mskv_keys

// key = DataCopyPad * 10000 + layout * 1000 + dtype * 100 + table is data * 10 + NeoX (RopeKey)
#define MSKV_KEYS_ROPE_CACHE(E) MSKV_KEYS_ROPE(E, MSKV_DIM_ROPE_LAYOUT, MSKV_DIM_ROPE_LAYOUT)
#define MSKV_KEYS_REROPE_CACHED_KEYS(E) MSKV_KEYS_ROPE_CACHE(E)
// the GQA writes: NZ caches too (layout 2, float16 / bfloat16 data: float32 has no NZ cache)
#define MSKV_DIM_ROPE_LAYOUT_NZ(F, ...) F(__VA_ARGS__, 0, 0) F(__VA_ARGS__, 1, 1) F(__VA_ARGS__, 2, 2)
#define MSKV_KEYS_ROPE_CACHE_NZ(E) MSKV_KEYS_ROPE(E, MSKV_DIM_ROPE_LAYOUT_NZ, MSKV_DIM_ROPE_LAYOUT)
#define MSKV_KEYS_ROPE_RESHAPE_AND_CACHE(E) MSKV_KEYS_ROPE_CACHE_NZ(E)
#define MSKV_KEYS_ROPE_RESHAPE_AND_CACHE_MERGED(E) MSKV_KEYS_ROPE_CACHE_NZ(E)

// key = DataCopyPad * 10000 + norm weight * 1000 + dtype * 100 + table is data * 10 + NeoX (RopeKey)
#define MSKV_KEYS_ROPE_CONCAT_AND_CACHE_MLA(E) MSKV_KEYS_ROPE(E, MSKV_DIM_NORM_WEIGHT, MSKV_DIM_NORM_WEIGHT_F32)

// ------------------------------------------------------------------------- the ops, for the host
// X(<OpType>, <key set>) for every op: the host tiling checks each key it sets against its op's set for
// the SoC (op_host/mskv_tiling_key_check.h); an op without an entry has no key the host accepts.
#define MSKV_OP_KEY_SETS(X)                                                \
  X(MskvConcatAndCacheMla, MSKV_KEYS_CONCAT_AND_CACHE_MLA)                 \
  X(MskvCopyBlocks, MSKV_KEYS_COPY_BLOCKS)                                 \
  X(MskvReshapeAndCache, MSKV_KEYS_RESHAPE_AND_CACHE)                      \
  X(MskvReshapeAndCacheMerged, MSKV_KEYS_RESHAPE_AND_CACHE_MERGED)         \
  X(MskvMultiLayerKvTransfer, MSKV_KEYS_MULTI_LAYER_KV_TRANSFER)           \
  X(MskvMultiLayerBlockTransfer, MSKV_KEYS_MULTI_LAYER_BLOCK_TRANSFER)     \
  X(MskvMultiLayerKvTransferQuant, MSKV_KEYS_MULTI_LAYER_KV_TRANSFER_QUANT)     \
  X(MskvMultiLayerBlockTransferQuant, MSKV_KEYS_MULTI_LAYER_BLOCK_TRANSFER_QUANT) \
  X(MskvReropeCachedKeys, MSKV_KEYS_REROPE_CACHED_KEYS)                    \
  X(MskvRopeReshapeAndCache, MSKV_KEYS_ROPE_RESHAPE_AND_CACHE)             \
  X(MskvRopeReshapeAndCacheMerged, MSKV_KEYS_ROPE_RESHAPE_AND_CACHE_MERGED) \
  X(MskvRopeConcatAndCacheMla, MSKV_KEYS_ROPE_CONCAT_AND_CACHE_MLA)            \
  X(MskvReshapeAndCacheQuant, MSKV_KEYS_RESHAPE_AND_CACHE_QUANT)               \
  X(MskvConcatAndCacheMlaQuant, MSKV_KEYS_CONCAT_AND_CACHE_MLA_QUANT)         \
  X(MskvRopeReshapeAndCacheQuant, MSKV_KEYS_ROPE_RESHAPE_AND_CACHE_QUANT)     \
  X(MskvRopeConcatAndCacheMlaQuant, MSKV_KEYS_ROPE_CONCAT_AND_CACHE_MLA_QUANT)

// key = quant_mode * 10000 + layout * 1000 + data dtype * 100 + index dtype * 10 + DataCopyPad (int8 caches;
// float8 caches are a tiling error on these SoCs). Ascend310P: dynamic scales in BSND caches only (a BNSD
// scale cache takes one 4-byte write per head, which needs DataCopyPad). NZ caches (layout 2, both modes; the
// scale cache is BSND): head_size a multiple of 32 codes, so no DataCopyPad.
#define MSKV_DIM_QUANT_MODE(F, ...) F(__VA_ARGS__, 0, false) F(__VA_ARGS__, 1, true)
#define MSKV_KEYS_RESHAPE_AND_CACHE_QUANT(E)                                                                      \
  MSKV_KEYS5(E, MSKV_DIM_QUANT_STATIC, MSKV_DIM_LAYOUT, MSKV_DIM_QUANT_DTYPE, MSKV_DIM_INDEX_DTYPE, MSKV_DIM_PAD) \
  MSKV_KEYS5(E, MSKV_DIM_QUANT_DYNAMIC, MSKV_DIM_LAYOUT_PAD_BNSD, MSKV_DIM_QUANT_DTYPE, MSKV_DIM_INDEX_DTYPE,      \
             MSKV_DIM_PAD)                                                                                        \
  MSKV_KEYS5(E, MSKV_DIM_QUANT_MODE, MSKV_DIM_LAYOUT_NZ_HEADS, MSKV_DIM_QUANT_DTYPE, MSKV_DIM_INDEX_DTYPE,         \
             MSKV_DIM_NO_PAD)
namespace mskv_keys {
// layout: the cache_layout code (0 BSND, 1 BNSD, 2 NZ)
constexpr unsigned long long QuantLayoutCopyKey(bool dynamic, unsigned long long layout, unsigned long long dtype,
                                                unsigned long long index, bool pad) {
  return Digits(dynamic, layout, dtype, index, pad);
}
}  // namespace mskv_keys

// key = quant_mode * 1000 + data dtype * 100 + index dtype * 10 + DataCopyPad (int8 caches). Ascend310P: static
// scales only (a dynamic MLA scale is one 4-byte write per token and plane, which needs DataCopyPad).
#define MSKV_KEYS_CONCAT_AND_CACHE_MLA_QUANT(E) \
  MSKV_KEYS4(E, MSKV_DIM_QUANT_MODE_PAD_DYN, MSKV_DIM_QUANT_DTYPE, MSKV_DIM_INDEX_DTYPE, MSKV_DIM_PAD)
namespace mskv_keys {
constexpr unsigned long long QuantCopyKey(bool dynamic, unsigned long long dtype, unsigned long long index,
                                          bool pad) {
  return Digits(dynamic, dtype, index, pad);
}
}  // namespace mskv_keys

// The fused RoPE writes into int8 caches: quant_mode, then the rotary key of the op (DataCopyPad, layout,
// dtype, table, style; MSKV_KEYS_ROPE). key = quant_mode * 100000 + RopeKey. Static: every layout digit runs
// the template of BSND (value false: the layout only changes strides). Dynamic: the BNSD scale cache takes one
// 4-byte write per head, which needs DataCopyPad (A2/A3 only); an NZ cache (digit 2) has a BSND scale cache.
#define MSKV_DIM_LAYOUT_STATIC(F, ...) F(__VA_ARGS__, 0, false) F(__VA_ARGS__, 1, false) F(__VA_ARGS__, 2, false)
#define MSKV_DIM_LAYOUT_PAD_BNSD_NZ(F, ...) F(__VA_ARGS__, 0, false) MSKV_A2_ONLY(F)(__VA_ARGS__, 1, true) \
  F(__VA_ARGS__, 2, false)
#define MSKV_KEYS_ROPE_RESHAPE_AND_CACHE_QUANT(E)                                                                \
  MSKV_KEYS6(E, MSKV_DIM_QUANT_STATIC, MSKV_DIM_PAD, MSKV_DIM_LAYOUT_STATIC, MSKV_DIM_ROPE_DTYPE, MSKV_DIM_TABLE,   \
             MSKV_DIM_NEOX)                                                                                       \
  MSKV_KEYS6(E, MSKV_DIM_QUANT_STATIC, MSKV_DIM_PAD, MSKV_DIM_LAYOUT_STATIC, MSKV_DIM_ROPE_F32,                \
             MSKV_DIM_TABLE_F32, MSKV_DIM_NEOX)                                                                   \
  MSKV_KEYS6(E, MSKV_DIM_QUANT_DYNAMIC, MSKV_DIM_PAD, MSKV_DIM_LAYOUT_PAD_BNSD_NZ, MSKV_DIM_ROPE_DTYPE,           \
             MSKV_DIM_TABLE, MSKV_DIM_NEOX)                                                                       \
  MSKV_KEYS6(E, MSKV_DIM_QUANT_DYNAMIC, MSKV_DIM_PAD, MSKV_DIM_LAYOUT_PAD_BNSD_NZ, MSKV_DIM_ROPE_F32,          \
             MSKV_DIM_TABLE_F32, MSKV_DIM_NEOX)
namespace mskv_keys {
// x: the rotary key's second digit (the layout of the GQA writes, the norm weight of the MLA write)
constexpr unsigned long long RopeQuantKey(bool dynamic, bool pad, unsigned long long x, unsigned long long dtype,
                                          bool tableIsData, bool neox) {
  return Digits(dynamic, pad, x, dtype, tableIsData, neox);
}
}  // namespace mskv_keys

// The MLA RoPE write into int8 caches: key = quant_mode * 100000 + the key of rope_concat_and_cache_mla
// (DataCopyPad, norm weight, dtype, table, style), RopeQuantKey. Ascend310P: static scales only (a dynamic MLA
// scale is one 4-byte write per token and plane, which needs DataCopyPad).
#define MSKV_KEYS_ROPE_CONCAT_AND_CACHE_MLA_QUANT(E)                                                              \
  MSKV_KEYS6(E, MSKV_DIM_QUANT_MODE_PAD_DYN, MSKV_DIM_PAD, MSKV_DIM_NORM_WEIGHT, MSKV_DIM_ROPE_DTYPE,            \
             MSKV_DIM_TABLE, MSKV_DIM_NEOX)                                                                       \
  MSKV_KEYS6(E, MSKV_DIM_QUANT_MODE_PAD_DYN, MSKV_DIM_PAD, MSKV_DIM_NORM_WEIGHT_F32, MSKV_DIM_ROPE_F32,          \
             MSKV_DIM_TABLE_F32, MSKV_DIM_NEOX)

#endif  // MS_KVCACHE_OP_KERNEL_MSKV_TILING_KEYS_H_
