// Row quantizers of the quantized KV-cache writes (formulas: kv_quant.h, docs/quantization.md).
// Included by rope_body.inl inside each instruction-set namespace (isa_generic, isa_avx2, isa_avx512,
// isa_avx512bf16), after its dtype conversions (LoadOne, Load8), so the rope family's fused quantized
// writes and the plain quantizing scatters share them. The AVX2 lanes compute exactly the scalar
// formulas: the same IEEE fp32 division / subtraction per element, then round-half-to-even, so every
// path gives the same codes. AVX-512 builds use the AVX2 code, except for int8 codes: 16 lanes with
// AVX-512's masked min, rounding convert and saturating narrow (StoreInt8x16): the same division, a
// third of the instructions. (Multiplying by 1 / s with an exactness check and a division fallback was
// tried: slower than the division here, AMD EPYC Zen 4.)
// (Included inside a namespace; no #include here.)

using ::mskv::quant::Code;
using ::mskv::quant::PlaneQuant;

// ------------------------------------------------------------------ scalar encoders (reference)

// int8: NaN -> 0, saturate to [-128, 127], round half to even. (v + 1.5*2^23) - 1.5*2^23 rounds v to
// an integer with the FPU's round-to-nearest-even for |v| <= 2^22 (the clamp comes first).
inline uint8_t EncodeInt8(float v) {
  if (!(v == v)) v = 0.0f;
  v = v < -128.0f ? -128.0f : v;
  v = v > 127.0f ? 127.0f : v;
  const float r = (v + 12582912.0f) - 12582912.0f;
  return static_cast<uint8_t>(static_cast<int8_t>(static_cast<int32_t>(r)));
}

// Constants of the fp8 formats: largest finite value, mantissa bits dropped from fp32, exponent
// rebias (127 - bias) << 23, smallest normal as fp32 bits, the subnormal step's reciprocal, NaN code.
template <Code C>
struct F8 {
  static constexpr bool kE4 = C == Code::kF8E4M3;
  static constexpr float kMax = kE4 ? 448.0f : 57344.0f;
  static constexpr int kShift = kE4 ? 20 : 21;
  static constexpr uint32_t kRebias = (kE4 ? 120u : 112u) << 23;
  static constexpr uint32_t kMinNormal = kE4 ? 0x3c800000u : 0x38800000u;  // 2^-6 / 2^-14
  static constexpr float kSubScale = kE4 ? 512.0f : 65536.0f;               // 1 / 2^-9, 1 / 2^-16
  static constexpr uint32_t kNaN = kE4 ? 0x7fu : 0x7eu;
};

// fp8 (float8_e4m3fn / float8_e5m2): saturate to +-max (vLLM's __NV_SATFINITE: +-inf -> +-max), round
// half to even, NaN -> NaN (sign kept). Normal range: integer rounding of the fp32 mantissa at the fp8
// mantissa's last bit, then rebias the exponent; below the smallest normal: v / step rounded to an
// integer (0 .. 2^mantissa bits, the last being the smallest normal's code).
template <Code C>
inline uint8_t EncodeF8(float v) {
  using K = F8<C>;
  const uint32_t sign = (::mskv::rope::FloatBits(v) >> 24) & 0x80u;
  if (!(v == v)) return static_cast<uint8_t>(sign | K::kNaN);
  v = v < -K::kMax ? -K::kMax : v;
  v = v > K::kMax ? K::kMax : v;
  const uint32_t a = ::mskv::rope::FloatBits(v) & 0x7fffffffu;
  if (a >= K::kMinNormal) {
    const uint32_t r = a + ((1u << (K::kShift - 1)) - 1u) + ((a >> K::kShift) & 1u);
    return static_cast<uint8_t>(sign | ((r - K::kRebias) >> K::kShift));
  }
  const float t = ::mskv::rope::BitsFloat(a) * K::kSubScale;
  const float r = (t + 8388608.0f) - 8388608.0f;
  return static_cast<uint8_t>(sign | static_cast<uint32_t>(r));
}

template <Code C>
inline uint8_t Encode(float v) {
  if constexpr (C == Code::kInt8) {
    return EncodeInt8(v);
  } else {
    return EncodeF8<C>(v);
  }
}

#if MSKV_ROPE_AVX2
// 8 lanes of EncodeInt8; the codes in the low 8 bytes.
inline __m128i EncodeInt8x8(__m256 v) {
  v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));  // NaN -> 0
  v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-128.0f)), _mm256_set1_ps(127.0f));
  const __m256i i = _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
  return _mm_packs_epi16(w, w);
}

// 8 lanes of EncodeF8<C>.
template <Code C>
inline __m128i EncodeF8x8(__m256 v) {
  using K = F8<C>;
  const __m256i u = _mm256_castps_si256(v);
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));
  const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  const __m256 c = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-K::kMax)), _mm256_set1_ps(K::kMax));
  const __m256i a = _mm256_and_si256(_mm256_castps_si256(c), _mm256_set1_epi32(0x7fffffff));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(a, K::kShift), _mm256_set1_epi32(1));
  const __m256i r = _mm256_add_epi32(a, _mm256_add_epi32(_mm256_set1_epi32((1 << (K::kShift - 1)) - 1), lsb));
  const __m256i normal = _mm256_srli_epi32(_mm256_sub_epi32(r, _mm256_set1_epi32(static_cast<int>(K::kRebias))),
                                           K::kShift);
  const __m256 t = _mm256_mul_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(K::kSubScale));
  const __m256i sub = _mm256_cvtps_epi32(_mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  const __m256i is_normal = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(static_cast<int>(K::kMinNormal - 1)));
  __m256i code = _mm256_or_si256(_mm256_blendv_epi8(sub, normal, is_normal), sign);
  code = _mm256_blendv_epi8(code, _mm256_or_si256(sign, _mm256_set1_epi32(static_cast<int>(K::kNaN))),
                            _mm256_castps_si256(nan));
  const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(code), _mm256_extracti128_si256(code, 1));
  return _mm_packus_epi16(w, w);
}

template <Code C>
inline __m128i Encode8(__m256 v) {
  if constexpr (C == Code::kInt8) {
    return EncodeInt8x8(v);
  } else {
    return EncodeF8x8<C>(v);
  }
}
#endif

// ------------------------------------------------------------------ one head

#if MSKV_ROPE_AVX512
// The int8 codes of 16 lanes v (= x / s - o, fp32): NaN -> 0, saturate to [-128, 127], round half to
// even: EncodeInt8 lane by lane. min(v, 127) first (a value >= 2^31 would convert to INT_MIN); values
// below -128 (-inf included: INT_MIN) saturate in VPMOVSDB. Rounding is the instruction's (RNE), not
// MXCSR's.
inline void StoreInt8x16(__m512 v, uint8_t* dst) {
  const __mmask16 ord = _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
  const __m512 c = _mm512_maskz_min_ps(ord, v, _mm512_set1_ps(127.0f));
  const __m512i i = _mm512_cvt_roundps_epi32(c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm512_cvtsepi32_epi8(i));
}

#endif

// dst[i] = Encode(x[i] / s[i] - o[i]) for the n elements of src (dtype DT). kVec: s (and o) hold n
// values; else s[0] (o[0]) for every element. kOff: subtract o (int8 only).
template <DType DT, Code C, bool kVec, bool kOff>
inline void EncodeRow(const uint8_t* src, uint8_t* dst, int64_t n, const float* s, const float* o) {
  int64_t i = 0;
#if MSKV_ROPE_AVX2
  constexpr int64_t esz = DT == DType::kF32 ? 4 : 2;
#if MSKV_ROPE_AVX512
  if constexpr (C == Code::kInt8) {  // 16 lanes, 5 instructions a group after the division (AVX2: ~24)
    const __m512 s16 = _mm512_set1_ps(s[0]);
    const __m512 o16 = _mm512_set1_ps(kOff ? o[0] : 0.0f);
    for (; i + 16 <= n; i += 16) {
      __m512 v = _mm512_div_ps(Load16<DT>(src + i * esz), kVec ? _mm512_loadu_ps(s + i) : s16);
      if constexpr (kOff) v = _mm512_sub_ps(v, kVec ? _mm512_loadu_ps(o + i) : o16);
      StoreInt8x16(v, dst + i);
    }
  }
#endif
  const __m256 s1 = _mm256_set1_ps(s[0]);
  const __m256 o1 = _mm256_set1_ps(kOff ? o[0] : 0.0f);
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_div_ps(Load8<DT>(src + i * esz), kVec ? _mm256_loadu_ps(s + i) : s1);
    if constexpr (kOff) v = _mm256_sub_ps(v, kVec ? _mm256_loadu_ps(o + i) : o1);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + i), Encode8<C>(v));
  }
#endif
  for (; i < n; ++i) {
    float v = LoadOne<DT>(src, i) / (kVec ? s[i] : s[0]);
    if constexpr (kOff) v = v - (kVec ? o[i] : o[0]);
    dst[i] = Encode<C>(v);
  }
}

// max_i |x_i| over the n elements of src; NaN elements are ignored (a comparison with NaN is false,
// and MAXPS returns its second operand, the running maximum, when either is NaN).
template <DType DT>
inline float AbsMax(const uint8_t* src, int64_t n) {
  float m = 0.0f;
  int64_t i = 0;
#if MSKV_ROPE_AVX2
  constexpr int64_t esz = DT == DType::kF32 ? 4 : 2;
#if MSKV_ROPE_AVX512
  if (n >= 16) {  // (max is exact and order-free on non-NaN values: the same maximum as 8 lanes)
    __m512 acc = _mm512_setzero_ps();
    for (; i + 16 <= n; i += 16) acc = _mm512_max_ps(_mm512_abs_ps(Load16<DT>(src + i * esz)), acc);
    m = _mm512_reduce_max_ps(acc);
  }
#endif
  if (n - i >= 8) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 acc = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) acc = _mm256_max_ps(_mm256_and_ps(Load8<DT>(src + i * esz), abs_mask), acc);
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc);
    for (int l = 0; l < 8; ++l) m = lanes[l] > m ? lanes[l] : m;
  }
#endif
  for (; i < n; ++i) {
    const float a = std::fabs(LoadOne<DT>(src, i));
    m = a > m ? a : m;
  }
  return m;
}

#if MSKV_ROPE_AVX512
// Dynamic int8 scale and codes of one head of G * 16 elements in one pass over src: the lanes stay in
// registers between the abs-max and the division (AbsMax + EncodeRow read and convert the row twice).
// The same operations in the same order as AbsMax<DT> (n >= 16, a multiple of 16) and EncodeRow: the
// same scale and codes.
template <DType DT, int G>
inline void DynamicInt8Head(const uint8_t* src, uint8_t* dst, float* scale_out) {
  constexpr int64_t esz = DT == DType::kF32 ? 4 : 2;
  __m512 v[G];
  __m512 acc = _mm512_setzero_ps();
  for (int g = 0; g < G; ++g) {
    v[g] = Load16<DT>(src + g * 16 * esz);
    acc = _mm512_max_ps(_mm512_abs_ps(v[g]), acc);
  }
  const float s = _mm512_reduce_max_ps(acc) / ::mskv::quant::CodeMax(Code::kInt8);
  *scale_out = s;
  if (s == 0.0f) {
    std::memset(dst, 0, static_cast<size_t>(G * 16));
    return;
  }
  const __m512 s16 = _mm512_set1_ps(s);
  for (int g = 0; g < G; ++g) StoreInt8x16(_mm512_div_ps(v[g], s16), dst + g * 16);
}
#endif

// Quantize head h (n elements) of a row into dst; dynamic: its scale goes to *scale_out.
template <DType DT, Code C>
inline void QuantHead(const uint8_t* src, uint8_t* dst, int64_t n, const PlaneQuant& q, int64_t h, float* scale_out) {
  if (q.dynamic) {
#if MSKV_ROPE_AVX512
    if constexpr (C == Code::kInt8) {  // the usual head sizes in one pass
      if (n == 128) return DynamicInt8Head<DT, 8>(src, dst, scale_out);
      if (n == 64) return DynamicInt8Head<DT, 4>(src, dst, scale_out);
    }
#endif
    const float s = AbsMax<DT>(src, n) / ::mskv::quant::CodeMax(C);
    *scale_out = s;
    // an all-zero (or vanishing) row: codes 0, never 0 / 0; a row with an infinite element (s = inf):
    // codes 0 too, not inf / inf = NaN for that element (it reads back NaN either way: 0 * inf)
    if (s == 0.0f || std::isinf(s)) {
      std::memset(dst, 0, static_cast<size_t>(n));
      return;
    }
    EncodeRow<DT, C, false, false>(src, dst, n, &s, nullptr);
    return;
  }
  const int64_t at = q.per_channel ? h * n : (q.per_head ? h : 0);  // per head: one value for the n elements
  const float* s = q.scale + at;
  const float* o = q.offset == nullptr ? nullptr : q.offset + at;
  if constexpr (C == Code::kInt8) {
    if (o != nullptr) {
      if (q.per_channel) EncodeRow<DT, C, true, true>(src, dst, n, s, o);
      else EncodeRow<DT, C, false, true>(src, dst, n, s, o);
      return;
    }
  }
  if (q.per_channel) EncodeRow<DT, C, true, false>(src, dst, n, s, nullptr);
  else EncodeRow<DT, C, false, false>(src, dst, n, s, nullptr);
}

// Quantize one token's row [heads, head_size] (dtype DT, contiguous at src) into its slot of cache
// plane `cp` (elem 1) and, dynamic, its scales into the scale cache. codes: heads * head_size bytes of
// scratch, scales: heads floats.
template <DType DT, Code C>
inline void QuantRowT(const CachePlane& cp, const PlaneQuant& q, int64_t slot, const uint8_t* src, uint8_t* codes,
                      float* scales, bool stream) {
  constexpr int64_t esz = DT == DType::kF32 ? 4 : 2;
  const int64_t hd = cp.head_size;
  for (int64_t h = 0; h < cp.heads; ++h) QuantHead<DT, C>(src + h * hd * esz, codes + h * hd, hd, q, h, scales + h);
  cp.WriteRow(slot, codes, stream);
  if (q.dynamic) {
    for (int64_t h = 0; h < cp.heads; ++h) {
      q.scale_cache[::mskv::quant::ScaleIndex(slot, h, cp.heads, cp.block_size, cp.bnsd)] = scales[h];
    }
  }
}

template <DType DT>
inline void QuantRow(const CachePlane& cp, const PlaneQuant& q, int64_t slot, const uint8_t* src, uint8_t* codes,
                     float* scales, bool stream) {
  switch (q.code) {
    case Code::kInt8: QuantRowT<DT, Code::kInt8>(cp, q, slot, src, codes, scales, stream); break;
    case Code::kF8E4M3: QuantRowT<DT, Code::kF8E4M3>(cp, q, slot, src, codes, scales, stream); break;
    case Code::kF8E5M2: QuantRowT<DT, Code::kF8E5M2>(cp, q, slot, src, codes, scales, stream); break;
  }
}

// Scratch of one thread for QuantRow calls on planes of up to `elems` elements and `heads` heads.
struct QuantScratch {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  QuantScratch(int64_t elems, int64_t heads)
      : codes(static_cast<size_t>(elems > 0 ? elems : 1)), scales(static_cast<size_t>(heads > 0 ? heads : 1)) {}
};

// ------------------------------------------------------------------ quantizing scatter

inline CachePlane ScatterCachePlane(const ::mskv::quant::ScatterPlane& p) {
  CachePlane cp;
  cp.base = p.cache;
  cp.num_blocks = p.num_blocks;
  cp.block_size = p.block_size;
  cp.heads = p.heads;
  cp.head_size = p.head_size;
  cp.elem = 1;
  cp.bnsd = p.bnsd;
  cp.nz_c0 = p.nz_c0;
  return cp;
}

template <DType DT>
void QuantScatterT(const ::mskv::quant::ScatterArgs& a) {
  const int64_t T = a.num_tokens;
  if (T <= 0 || a.num_planes <= 0) return;
  CachePlane cp[2];
  int64_t num_slots = -1, elems = 0, heads = 0, bytes = 0;
  for (int p = 0; p < a.num_planes; ++p) {
    cp[p] = ScatterCachePlane(a.plane[p]);
    num_slots = num_slots < 0 ? cp[p].num_slots() : std::min(num_slots, cp[p].num_slots());
    elems = std::max(elems, cp[p].heads * cp[p].head_size);
    heads = std::max(heads, cp[p].heads);
    bytes += T * (a.plane[p].src_row_bytes + cp[p].heads * cp[p].head_size);
  }
  // The destinations are cache rows at scattered slots, cold when written and not read back by the op:
  // streamed from the copy ops' (lower) threshold (stream_copy.h, CopyStreamThresholdBytes).
  const bool stream = bytes >= ::mskv::CopyStreamThresholdBytes();
  // A slot given twice (graph mode only: PyNative rejects it) must end with the LATER token's row and
  // scale, as in a sequential loop: then the tokens are written in order on one thread.
  const bool distinct = a.slots_distinct || T == 1 ||
                        ::mskv::SlotsDistinct(a.slots, ::mskv::DTypeSize(a.slot_dtype), T, num_slots);
  auto body = [&](int64_t begin, int64_t end) {
    QuantScratch scratch(elems, heads);
    constexpr int64_t kAhead = 4;  // tokens: the destination's page walk overlaps the rows before it
    for (int64_t t = begin; t < end; ++t) {
      if (t + kAhead < end) {
        const int64_t ahead = ReadIndex(a.slots, a.slot_dtype, t + kAhead);
        if (ahead >= 0 && ahead < num_slots) {
          for (int p = 0; p < a.num_planes; ++p) {
            ::mskv::PrefetchLine(cp[p].base + cp[p].HeadOffset(ahead, 0));
            const ::mskv::quant::PlaneQuant& pq = a.plane[p].q;
            if (pq.dynamic) {  // the scale row is written with plain stores: fetch its line for writing
              __builtin_prefetch(pq.scale_cache + ::mskv::quant::ScaleIndex(ahead, 0, cp[p].heads, cp[p].block_size,
                                                                            cp[p].bnsd), 1, 3);
            }
          }
        }
      }
      const int64_t slot = ReadIndex(a.slots, a.slot_dtype, t);
      if (slot < 0 || slot >= num_slots) continue;
      for (int p = 0; p < a.num_planes; ++p) {
        const ::mskv::quant::ScatterPlane& sp = a.plane[p];
        QuantRow<DT>(cp[p], sp.q, slot, sp.src + t * sp.src_row_bytes, scratch.codes.data(), scratch.scales.data(),
                     stream);
      }
    }
    if (stream) ::mskv::StreamFence();
  };
  if (distinct) {
    ::mskv::ParallelFor(T, bytes, body);
  } else {
    body(0, T);
  }
}

void QuantScatterImpl(const ::mskv::quant::ScatterArgs& a) {
  switch (a.dtype) {
    case DType::kF16: QuantScatterT<DType::kF16>(a); break;
    case DType::kBF16: QuantScatterT<DType::kBF16>(a); break;
    case DType::kF32: QuantScatterT<DType::kF32>(a); break;
    default: throw ::mskv::KernelError("unsupported source dtype (float16, bfloat16 or float32)");
  }
}
