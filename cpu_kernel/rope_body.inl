// Body of the rope kernels, compiled four times by rope_common.cpp: for the baseline target
// (namespace isa_generic: portable C++ the compiler vectorises), under `#pragma GCC
// target("avx2,f16c")` (isa_avx2, MSKV_ROPE_AVX2 = 1: 8-lane intrinsics), under
// target("avx512f,avx512bw,avx512vl,avx2,f16c") (isa_avx512, also MSKV_ROPE_AVX512 = 1: 16 lanes
// first) and with avx512bf16,avx512dq added (isa_avx512bf16, also MSKV_ROPE_AVX512BF16 = 1: the
// fp32 -> bf16 store in one instruction). No FMA is enabled in any target and the file is compiled
// with -ffp-contract=off, so every path rounds every product and sum the same way and gives the
// same bits.
// (Included inside a namespace; no #include here.)

using ::mskv::DType;
using ::mskv::ReadIndex;
using ::mskv::rope::Bf16ToF32;
using ::mskv::rope::CachePlane;
using ::mskv::rope::F16ToF32;
using ::mskv::rope::F32ToBf16;
using ::mskv::rope::F32ToF16;
using ::mskv::rope::ReropeArgs;
using ::mskv::rope::RopeCacheArgs;
using ::mskv::rope::RopeTable;

// ------------------------------------------------------------------ row conversions

template <DType DT>
struct Elem;
template <>
struct Elem<DType::kF32> { using T = float; };
template <>
struct Elem<DType::kF16> { using T = uint16_t; };
template <>
struct Elem<DType::kBF16> { using T = uint16_t; };

template <DType DT>
inline void LoadRow(const void* src, float* dst, int64_t n) {
  if constexpr (DT == DType::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * 4);
  } else {
    const uint16_t* s = static_cast<const uint16_t*>(src);
    int64_t i = 0;
#if MSKV_ROPE_AVX2
    if constexpr (DT == DType::kF16) {
      for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
      }
    } else {
      for (; i + 8 <= n; i += 8) {
        const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
      }
    }
#endif
    for (; i < n; ++i) dst[i] = DT == DType::kF16 ? F16ToF32(s[i]) : Bf16ToF32(s[i]);
  }
}

template <DType DT>
inline void StoreRow(const float* src, void* dst, int64_t n) {
  if constexpr (DT == DType::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * 4);
  } else {
    uint16_t* d = static_cast<uint16_t*>(dst);
    int64_t i = 0;
#if MSKV_ROPE_AVX2
    if constexpr (DT == DType::kF16) {
      for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), h);
      }
    } else {
      const __m256i bias = _mm256_set1_epi32(0x7fff);
      const __m256i one = _mm256_set1_epi32(1);
      const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
      const __m256i inf = _mm256_set1_epi32(0x7f800000);
      const __m256i quiet = _mm256_set1_epi32(0x40);
      for (; i + 8 <= n; i += 8) {
        const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(src + i));
        const __m256i hi = _mm256_srli_epi32(u, 16);
        const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(hi, one))), 16);
        const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
        const __m256i r = _mm256_blendv_epi8(rounded, _mm256_or_si256(hi, quiet), is_nan);
        // 8 x u32 (each <= 0xffff) -> 8 x u16 in order
        const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), _mm256_castsi256_si128(packed));
      }
    }
#endif
    for (; i < n; ++i) d[i] = DT == DType::kF16 ? F32ToF16(src[i]) : F32ToBf16(src[i]);
  }
}

// Load cos/sin row `pos` of the table into fp32 buffers c[half], s[half].
inline void LoadCosSin(const RopeTable& t, int64_t pos, float* c, float* s) {
  const int64_t half = t.rotary_dim / 2;
  const int64_t esz = t.dtype == DType::kF32 ? 4 : 2;
  const uint8_t* row = static_cast<const uint8_t*>(t.data) + pos * t.rotary_dim * esz;
  switch (t.dtype) {
    case DType::kF16:
      LoadRow<DType::kF16>(row, c, half);
      LoadRow<DType::kF16>(row + half * 2, s, half);
      break;
    case DType::kBF16:
      LoadRow<DType::kBF16>(row, c, half);
      LoadRow<DType::kBF16>(row + half * 2, s, half);
      break;
    default:
      LoadRow<DType::kF32>(row, c, half);
      LoadRow<DType::kF32>(row + half * 4, s, half);
      break;
  }
}

// ------------------------------------------------------------------ rotation (fp32)

// out[0:rd] = rotate(x[0:rd]) with per-pair cos c[i], sin s[i], i < rd/2.
inline void Rotate(const float* __restrict x, float* __restrict out, const float* __restrict c,
                   const float* __restrict s, const float* __restrict ss, int64_t rd, bool neox) {
  // second output of a pair: y*c - x*(-s) with -s read from ss (PrepareCosSin), see RotateRow
  const int64_t half = rd / 2;
  if (neox) {
    const float* __restrict x0 = x;
    const float* __restrict x1 = x + half;
    float* __restrict o0 = out;
    float* __restrict o1 = out + half;
    for (int64_t i = 0; i < half; ++i) {
      const float a = x0[i], b = x1[i];
      o0[i] = a * c[i] - b * s[i];
      o1[i] = b * c[i] - a * ss[i];
    }
  } else {
    for (int64_t i = 0; i < half; ++i) {
      const float a = x[2 * i], b = x[2 * i + 1];
      out[2 * i] = a * c[i] - b * s[i];
      out[2 * i + 1] = b * c[i] - a * ss[2 * i + 1];
    }
  }
}

// ------------------------------------------------------------------ one head

template <DType DT>
inline float LoadOne(const uint8_t* p, int64_t i) {
  if constexpr (DT == DType::kF32) {
    float f;
    std::memcpy(&f, p + 4 * i, 4);
    return f;
  } else {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return DT == DType::kF16 ? F16ToF32(h) : Bf16ToF32(h);
  }
}

template <DType DT>
inline void StoreOne(uint8_t* p, int64_t i, float f) {
  if constexpr (DT == DType::kF32) {
    std::memcpy(p + 4 * i, &f, 4);
  } else {
    const uint16_t h = DT == DType::kF16 ? F32ToF16(f) : F32ToBf16(f);
    std::memcpy(p + 2 * i, &h, 2);
  }
}

#if MSKV_ROPE_AVX2
template <DType DT>
inline __m256 Load8(const uint8_t* p) {
  if constexpr (DT == DType::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  } else if constexpr (DT == DType::kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
}

template <DType DT>
inline void Store8(uint8_t* p, __m256 v) {
  if constexpr (DT == DType::kF32) {
    _mm256_storeu_ps(reinterpret_cast<float*>(p), v);
  } else if constexpr (DT == DType::kF16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  } else {
    // same rounding as F32ToBf16: RNE via the carry trick, NaN -> quiet NaN
    const __m256i u = _mm256_castps_si256(v);
    const __m256i hi = _mm256_srli_epi32(u, 16);
    const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                              _mm256_set1_epi32(0x7f800000));
    const __m256i r = _mm256_blendv_epi8(rounded, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), is_nan);
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
  }
}
#endif

#if MSKV_ROPE_AVX512
template <DType DT>
inline __m512 Load16(const uint8_t* p) {
  if constexpr (DT == DType::kF32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(p));
  } else if constexpr (DT == DType::kF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  } else {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
}

template <DType DT>
inline void Store16(uint8_t* p, __m512 v) {
  if constexpr (DT == DType::kF32) {
    _mm512_storeu_ps(reinterpret_cast<float*>(p), v);
  } else if constexpr (DT == DType::kF16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  } else {
#if MSKV_ROPE_AVX512BF16
    // VCVTNEPS2BF16 rounds as F32ToBf16 but flushes subnormal inputs (fpclass 0x20) to zero
    if (_mm512_fpclass_ps_mask(v, 0x20) == 0) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)));
      return;
    }
#endif
    // F32ToBf16 on 16 lanes: RNE carry trick; NaN lanes: (u | 0x400000) >> 16 = quiet NaN
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    const __mmask16 is_nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, is_nan, _mm512_or_si512(u, _mm512_set1_epi32(0x400000)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
  }
}
#endif

#include "quant_body.inl"  // row quantizers of the quantized cache writes (kv_quant.h)

// Rotate the first rd elements of src into dst (may be the same row). c, s: [rd/2] per-pair cos
// and sin; cc, ss (PrepareCosSin): GPT-J: [rd], cc[2i] = cc[2i+1] = c[i], ss[2i] = s[i],
// ss[2i+1] = -s[i]; NeoX: ss[i] = -s[i], i < rd/2. buf: 2 * rd floats of scratch. Every output is
// fl(fl(x*c) - fl(y*s)) or fl(fl(y*c) + fl(x*s)); every path (Rotate too) computes the latter as
// fl(fl(y*c) - fl(x*(-s))) with -s read from ss, the same bits (x*(-s) == -(x*s) exactly,
// u - (-v) == u + v), because a subtraction keeps its operand order: when both products are NaN, x86
// returns the first one, and a compiler may swap the operands of a commutative add (it did: the NaN's
// sign then differed between the portable and the vector paths).
template <DType DT>
inline void RotateRow(const uint8_t* src, uint8_t* dst, int64_t rd, bool neox, const float* c, const float* s,
                      const float* cc, const float* ss, float* buf) {
#if MSKV_ROPE_AVX2
  constexpr int64_t esz = DT == DType::kF32 ? 4 : 2;
  const int64_t half = rd / 2;
  if (neox) {
    const float* ns = ss;
    const uint8_t* x0 = src;
    const uint8_t* x1 = src + half * esz;
    uint8_t* o0 = dst;
    uint8_t* o1 = dst + half * esz;
    int64_t i = 0;
#if MSKV_ROPE_AVX512
    for (; i + 16 <= half; i += 16) {
      const __m512 a = Load16<DT>(x0 + i * esz), b = Load16<DT>(x1 + i * esz);
      const __m512 vc = _mm512_loadu_ps(c + i), vs = _mm512_loadu_ps(s + i);
      Store16<DT>(o0 + i * esz, _mm512_sub_ps(_mm512_mul_ps(a, vc), _mm512_mul_ps(b, vs)));
      Store16<DT>(o1 + i * esz, _mm512_sub_ps(_mm512_mul_ps(b, vc), _mm512_mul_ps(a, _mm512_loadu_ps(ns + i))));
    }
#endif
    for (; i + 8 <= half; i += 8) {
      const __m256 a = Load8<DT>(x0 + i * esz), b = Load8<DT>(x1 + i * esz);
      const __m256 vc = _mm256_loadu_ps(c + i), vs = _mm256_loadu_ps(s + i);
      const __m256 ra = _mm256_sub_ps(_mm256_mul_ps(a, vc), _mm256_mul_ps(b, vs));
      const __m256 rb = _mm256_sub_ps(_mm256_mul_ps(b, vc), _mm256_mul_ps(a, _mm256_loadu_ps(ns + i)));
      Store8<DT>(o0 + i * esz, ra);
      Store8<DT>(o1 + i * esz, rb);
    }
    for (; i < half; ++i) {
      const float a = LoadOne<DT>(x0, i), b = LoadOne<DT>(x1, i);
      StoreOne<DT>(o0, i, a * c[i] - b * s[i]);
      StoreOne<DT>(o1, i, b * c[i] - a * ns[i]);
    }
  } else {
    int64_t j = 0;
    // even lanes: x*c - y*s; odd lanes: y*c - x*(-s), equal to y*c + x*s in every bit (see RotateRow)
#if MSKV_ROPE_AVX512
    for (; j + 16 <= rd; j += 16) {
      const __m512 x = Load16<DT>(src + j * esz);
      const __m512 xs = _mm512_permute_ps(x, 0xB1);
      Store16<DT>(dst + j * esz, _mm512_sub_ps(_mm512_mul_ps(x, _mm512_loadu_ps(cc + j)),
                                               _mm512_mul_ps(xs, _mm512_loadu_ps(ss + j))));
    }
#endif
    for (; j + 8 <= rd; j += 8) {
      const __m256 x = Load8<DT>(src + j * esz);
      const __m256 xs = _mm256_permute_ps(x, 0xB1);  // swap each (2i, 2i+1)
      const __m256 r = _mm256_sub_ps(_mm256_mul_ps(x, _mm256_loadu_ps(cc + j)), _mm256_mul_ps(xs, _mm256_loadu_ps(ss + j)));
      Store8<DT>(dst + j * esz, r);
    }
    for (int64_t i = j / 2; i < half; ++i) {
      const float a = LoadOne<DT>(src, 2 * i), b = LoadOne<DT>(src, 2 * i + 1);
      StoreOne<DT>(dst, 2 * i, a * c[i] - b * s[i]);
      StoreOne<DT>(dst, 2 * i + 1, b * c[i] - a * ss[2 * i + 1]);
    }
  }
  (void)buf;
#else
  (void)cc;
  float* xin = buf;
  float* xout = buf + rd;
  LoadRow<DT>(src, xin, rd);
  Rotate(xin, xout, c, s, ss, rd, neox);
  StoreRow<DT>(xout, dst, rd);
#endif
}

// GPT-J expansion of a cos/sin row (see RotateRow).
inline void ExpandPairs(const float* c, const float* s, float* cc, float* ss, int64_t half) {
  for (int64_t i = 0; i < half; ++i) {
    cc[2 * i] = c[i];
    cc[2 * i + 1] = c[i];
    ss[2 * i] = s[i];
    ss[2 * i + 1] = -s[i];
  }
}

// NeoX: ns[i] = -s[i] (see RotateRow).
inline void NegateSin(const float* s, float* ns, int64_t half) {
  for (int64_t i = 0; i < half; ++i) ns[i] = -s[i];
}

// The cos/sin arrays a token's RotateRow calls need: cc, ss for GPT-J, ns (in ss) for NeoX.
inline void PrepareCosSin(bool neox, const float* c, const float* s, float* cc, float* ss, int64_t half) {
  if (neox) {
    NegateSin(s, ss, half);
  } else {
    ExpandPairs(c, s, cc, ss, half);
  }
}

// One head: rotate the first rd elements of src into dst (dtype DT), copy the rest.
template <DType DT>
inline void RopeHead(const uint8_t* src, uint8_t* dst, int64_t head_size, int64_t rd, bool neox,
                     const float* c, const float* s, const float* cc, const float* ss, float* buf) {
  using T = typename Elem<DT>::T;
  RotateRow<DT>(src, dst, rd, neox, c, s, cc, ss, buf);
  if (head_size > rd) {
    std::memcpy(dst + rd * sizeof(T), src + rd * sizeof(T), static_cast<size_t>(head_size - rd) * sizeof(T));
  }
}

// RMSNorm of one row: out = x / sqrt(mean(x^2) + eps) * w, fp32 except the sum of squares, which is
// accumulated in fp64 over 8 fixed lanes (exact squares, deterministic order on every path).
template <DType DT>
inline void RmsNormRow(const uint8_t* src, uint8_t* dst, int64_t n, const float* w, float eps,
                       float* buf) {
  LoadRow<DT>(src, buf, n);
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int l = 0; l < 8; ++l) {
      const double v = buf[j + l];
      acc[l] += v * v;
    }
  }
  for (int l = 0; j + l < n; ++l) {
    const double v = buf[j + l];
    acc[l] += v * v;
  }
  const double sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  const float inv = static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(n) + static_cast<double>(eps)));
  for (int64_t i = 0; i < n; ++i) buf[i] = (buf[i] * inv) * w[i];
  StoreRow<DT>(buf, dst, n);
}

// ------------------------------------------------------------------ fused rope + cache write

// Source rows of token t into the L1 ahead of use (streaming path: the per-head loads of a row are
// short, so the hardware prefetcher lags the rotation loop). Hints only: never fault.
constexpr int64_t kPrefetchTokens = 2;
inline void PrefetchRow(const uint8_t* p, int64_t n) {
  for (int64_t i = 0; i < n; i += 64) __builtin_prefetch(p + i, 0, 3);
}
inline void PrefetchToken(const RopeCacheArgs& a, int64_t t, int64_t q_row, int64_t k_row, int64_t v_row) {
  PrefetchRow(a.q + t * q_row, q_row);
  PrefetchRow(a.k + t * k_row, k_row);
  if (a.v != nullptr) PrefetchRow(a.v + t * v_row, v_row);
  if (a.kv_c != nullptr) PrefetchRow(a.kv_c + t * v_row, v_row);
}

// Scratch sizes of the quantized cache writes (1 when the caches are not quantized).
inline int64_t QuantScratchElems(const RopeCacheArgs& a) {
  return a.k_quant == nullptr ? 1 : std::max(a.k_cache.heads * a.k_cache.head_size, a.v_cache.heads * a.v_cache.head_size);
}
inline int64_t QuantScratchHeads(const RopeCacheArgs& a) {
  return a.k_quant == nullptr ? 1 : std::max(a.k_cache.heads, a.v_cache.heads);
}

// Write token rows into the caches at slot: copied as they are, or (a.k_quant / a.v_quant set: the
// quantized variants) quantized from the rows returned to the caller (key_out, value / kv_c_out).
template <DType DT>
inline void CacheWrite(const RopeCacheArgs& a, int64_t slot, const uint8_t* k_row, const uint8_t* v_row, bool stream,
                       QuantScratch& qs) {
  if (a.k_quant == nullptr) {
    a.k_cache.WriteRow(slot, k_row, stream);
    if (v_row != nullptr) a.v_cache.WriteRow(slot, v_row, stream);
    return;
  }
  QuantRow<DT>(a.k_cache, *a.k_quant, slot, k_row, qs.codes.data(), qs.scales.data(), stream);
  if (v_row != nullptr) QuantRow<DT>(a.v_cache, *a.v_quant, slot, v_row, qs.codes.data(), qs.scales.data(), stream);
}

template <DType DT>
void RopeAndCacheT(const RopeCacheArgs& a) {
  using T = typename Elem<DT>::T;
  const int64_t esz = sizeof(T);
  const int64_t hd = a.head_size;
  const int64_t rd = a.table.rotary_dim;
  const int64_t half = rd / 2;
  const int64_t q_row = a.q_heads * hd * esz;
  const int64_t k_row = a.k_heads * hd * esz;
  const bool mla = a.kv_c != nullptr;
  const int64_t v_row = mla ? a.kv_c_dim * esz : k_row;
  const int64_t bytes = a.rows * 2 * (q_row + k_row + (mla ? v_row : 0)) + a.num_write * 2 * v_row;

  // Large calls (outputs and cache rows far beyond the CPU caches) rotate each token into an
  // L1-resident row buffer and stream it out (stream_copy.h): no read-for-ownership of the
  // destination lines, ~1/3 less memory traffic. Small calls write in place.
  const bool stream = bytes >= ::mskv::StreamThresholdBytes();
  // A slot given twice (graph mode only: PyNative rejects it) must end with the LATER token's rows, as
  // a sequential loop and reshape_and_cache do, never a mix of two tokens' heads: then the cache rows
  // are written after the parallel pass, in token order.
  const int64_t num_cache_slots = std::min(a.k_cache.num_slots(), a.v_cache.num_slots());
  const bool defer_cache = a.num_write > 1 && !a.slots_distinct && !::mskv::SlotsDistinct(a.slots, ::mskv::DTypeSize(a.slot_dtype),
                                                                     a.num_write, num_cache_slots);

  ::mskv::ParallelFor(a.rows, bytes, [&](int64_t begin, int64_t end) {
    // scratch: cos, sin, 2*rd rotation buffer, norm row + fp32 norm weight
    const int64_t norm_n = (mla && a.norm_weight) ? a.kv_c_dim : 0;
    std::vector<float> scratch(static_cast<size_t>(2 * half + 4 * rd + 2 * norm_n + 8));
    float* c = scratch.data();
    float* s = c + half;
    float* cc = s + half;
    float* ss = cc + rd;
    float* buf = ss + rd;
    float* nbuf = buf + 2 * rd;
    float* wbuf = nbuf + norm_n;
    if (norm_n) {
      switch (a.norm_dtype) {
        case DType::kF16: LoadRow<DType::kF16>(a.norm_weight, wbuf, norm_n); break;
        case DType::kBF16: LoadRow<DType::kBF16>(a.norm_weight, wbuf, norm_n); break;
        default: LoadRow<DType::kF32>(a.norm_weight, wbuf, norm_n); break;
      }
    }
    // streaming: one token's q_out, k_out (and MLA kv_c_out) rows, built here then streamed out
    std::vector<uint8_t> rows(stream ? static_cast<size_t>(q_row + k_row + (mla ? v_row : 0)) : 0);
    QuantScratch qs(QuantScratchElems(a), QuantScratchHeads(a));  // quantized caches only (a.k_quant)
    const int64_t num_k_slots = a.k_cache.num_slots();
    const int64_t num_v_slots = a.v_cache.num_slots();
    for (int64_t t = begin; t < end; ++t) {
      uint8_t* qo = a.q_out + t * q_row;
      uint8_t* ko = a.k_out + t * k_row;
      uint8_t* qw = stream ? rows.data() : qo;            // where the rotated rows are built
      uint8_t* kw = stream ? rows.data() + q_row : ko;
      const uint8_t* v_src = nullptr;  // the row that goes to v_cache
      if (mla) {
        uint8_t* kvo = a.kv_c_out + t * v_row;
        uint8_t* kvw = stream ? rows.data() + q_row + k_row : kvo;
        const uint8_t* kvi = a.kv_c + t * v_row;
        if (norm_n) {
          RmsNormRow<DT>(kvi, kvw, norm_n, wbuf, a.epsilon, nbuf);
          if (stream) ::mskv::StreamCopy(kvo, kvw, v_row, true);
          v_src = kvw;
        } else {
          ::mskv::StreamCopy(kvo, kvi, v_row, stream);
          v_src = kvi;
        }
      } else if (a.v != nullptr) {
        v_src = a.v + t * v_row;
      }
      if (stream && t + kPrefetchTokens < end) PrefetchToken(a, t + kPrefetchTokens, q_row, k_row, v_row);
      const int64_t pos = ReadIndex(a.positions, a.pos_dtype, t);
      if (pos < 0 || pos >= a.table.max_position) {
        // never read the table out of bounds: zero rows, no cache write for this token
        std::memset(qo, 0, static_cast<size_t>(q_row));
        std::memset(ko, 0, static_cast<size_t>(k_row));
        continue;
      }
      LoadCosSin(a.table, pos, c, s);
      PrepareCosSin(a.neox, c, s, cc, ss, half);
      const uint8_t* qi = a.q + t * q_row;
      for (int64_t h = 0; h < a.q_heads; ++h) {
        RopeHead<DT>(qi + h * hd * esz, qw + h * hd * esz, hd, rd, a.neox, c, s, cc, ss, buf);
      }
      const uint8_t* ki = a.k + t * k_row;
      for (int64_t h = 0; h < a.k_heads; ++h) {
        RopeHead<DT>(ki + h * hd * esz, kw + h * hd * esz, hd, rd, a.neox, c, s, cc, ss, buf);
      }
      if (stream) {
        ::mskv::StreamCopy(qo, qw, q_row, true);
        ::mskv::StreamCopy(ko, kw, k_row, true);
      }
      if (t >= a.num_write || defer_cache) continue;
      const int64_t slot = ReadIndex(a.slots, a.slot_dtype, t);
      if (slot < 0 || slot >= num_k_slots || slot >= num_v_slots) continue;
      CacheWrite<DT>(a, slot, kw, v_src, stream, qs);
    }
    if (stream) ::mskv::StreamFence();
  });
  if (!defer_cache) return;
  QuantScratch qs(QuantScratchElems(a), QuantScratchHeads(a));
  for (int64_t t = 0; t < a.num_write; ++t) {
    const int64_t pos = ReadIndex(a.positions, a.pos_dtype, t);
    const int64_t slot = ReadIndex(a.slots, a.slot_dtype, t);
    if (pos < 0 || pos >= a.table.max_position || slot < 0 || slot >= num_cache_slots) continue;
    const uint8_t* v_src = mla ? a.kv_c_out + t * v_row : (a.v != nullptr ? a.v + t * v_row : nullptr);
    CacheWrite<DT>(a, slot, a.k_out + t * k_row, v_src, false, qs);
  }
}

void RopeAndCacheImpl(const RopeCacheArgs& a) {
  switch (a.dtype) {
    case DType::kF16: RopeAndCacheT<DType::kF16>(a); break;
    case DType::kBF16: RopeAndCacheT<DType::kBF16>(a); break;
    case DType::kF32: RopeAndCacheT<DType::kF32>(a); break;
    default: throw ::mskv::KernelError("unsupported dtype");
  }
}

// ------------------------------------------------------------------ rerope

// Rotation by (new - old) from the two table rows, in fp64 from the fp32 values:
//   R(new) R(old)^-1 = R(new) R(old)^T / (cos_o^2 + sin_o^2)
//   cd = (cn*co + sn*so) / n,  sd = (sn*co - cn*so) / n,  n = co^2 + so^2
// then rounded to fp32. Products of fp32 values are exact in fp64, so old == new gives cd = 1,
// sd = 0 exactly (identity). Returns false if some n == 0 (table row not invertible).
inline bool DeltaCosSin(const float* co, const float* so, const float* cn, const float* sn, float* cd,
                        float* sd, int64_t half) {
  bool ok = true;
  for (int64_t i = 0; i < half; ++i) {
    const double c0 = co[i], s0 = so[i], c1 = cn[i], s1 = sn[i];
    const double n = c0 * c0 + s0 * s0;
    ok = ok && n > 0.0;
    cd[i] = static_cast<float>((c1 * c0 + s1 * s0) / n);
    sd[i] = static_cast<float>((s1 * c0 - c1 * s0) / n);
  }
  return ok;
}

template <DType DT>
void ReropeT(const ReropeArgs& a) {
  using T = typename Elem<DT>::T;
  const int64_t esz = sizeof(T);
  const CachePlane& cp = a.cache;
  const int64_t hd = cp.head_size;
  const int64_t rd = a.table.rotary_dim;
  const int64_t half = rd / 2;
  const int64_t num_slots = cp.num_slots();
  const int64_t bytes = a.count * 2 * cp.heads * hd * esz;
  ::mskv::ParallelFor(a.count, bytes, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(static_cast<size_t>(6 * half + 4 * rd + 8));
    float* co = scratch.data();
    float* so = co + half;
    float* cn = so + half;
    float* sn = cn + half;
    float* cd = sn + half;
    float* sd = cd + half;
    float* cc = sd + half;
    float* ss = cc + rd;
    float* buf = ss + rd;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t slot = ReadIndex(a.slots, a.slot_dtype, i);
      if (slot < 0 || slot >= num_slots) continue;
      const int64_t po = ReadIndex(a.old_positions, a.pos_dtype, i);
      const int64_t pn = ReadIndex(a.new_positions, a.pos_dtype, i);
      if (po < 0 || po >= a.table.max_position || pn < 0 || pn >= a.table.max_position) continue;
      LoadCosSin(a.table, po, co, so);
      LoadCosSin(a.table, pn, cn, sn);
      if (!DeltaCosSin(co, so, cn, sn, cd, sd, half)) continue;
      PrepareCosSin(a.neox, cd, sd, cc, ss, half);
      for (int64_t h = 0; h < cp.heads; ++h) {
        uint8_t* p = cp.base + cp.HeadOffset(slot, h);
        RotateRow<DT>(p, p, rd, a.neox, cd, sd, cc, ss, buf);  // in place; the tail is untouched
      }
    }
  });
}

void ReropeImpl(const ReropeArgs& a) {
  switch (a.dtype) {
    case DType::kF16: ReropeT<DType::kF16>(a); break;
    case DType::kBF16: ReropeT<DType::kBF16>(a); break;
    case DType::kF32: ReropeT<DType::kF32>(a); break;
    default: throw ::mskv::KernelError("unsupported dtype");
  }
}

// Conversion entry for the tests (exhaustive fp16 / bf16 conversions on every path): the row
// converters, and on the AVX-512 path the 16-lane converters of RotateRow for the bulk.
void ConvertImpl(int kind, const void* src, void* dst, int64_t n) {
  float* f = static_cast<float*>(kind < 2 ? dst : const_cast<void*>(src));
  int64_t i = 0;
#if MSKV_ROPE_AVX512
  const uint8_t* s8 = static_cast<const uint8_t*>(src);
  uint8_t* d8 = static_cast<uint8_t*>(dst);
  for (; i + 16 <= n; i += 16) {
    switch (kind) {
      case 0: _mm512_storeu_ps(f + i, Load16<DType::kF16>(s8 + 2 * i)); break;
      case 1: _mm512_storeu_ps(f + i, Load16<DType::kBF16>(s8 + 2 * i)); break;
      case 2: Store16<DType::kF16>(d8 + 2 * i, _mm512_loadu_ps(f + i)); break;
      case 3: Store16<DType::kBF16>(d8 + 2 * i, _mm512_loadu_ps(f + i)); break;
      default: break;
    }
  }
#endif
  const uint16_t* h = static_cast<const uint16_t*>(src) + i;
  uint16_t* hd = static_cast<uint16_t*>(dst) + i;
  switch (kind) {
    case 0: LoadRow<DType::kF16>(h, f + i, n - i); break;    // f16 -> f32
    case 1: LoadRow<DType::kBF16>(h, f + i, n - i); break;   // bf16 -> f32
    case 2: StoreRow<DType::kF16>(f + i, hd, n - i); break;  // f32 -> f16
    case 3: StoreRow<DType::kBF16>(f + i, hd, n - i); break; // f32 -> bf16
    default: break;
  }
}
