// The line code of the NZ runs (cpu_kernel/nz_copy.cpp has the algorithm, the loop order and the
// measurements), included by nz_copy.cpp once per instruction set, inside its own namespace:
//   MSKV_NZ_AVX2 1: 32-byte AVX2 registers (in a `#pragma GCC target("avx2")` region; run when the CPU has AVX2);
//   MSKV_NZ_AVX2 0: the build's baseline - 16-byte SSE2 registers on x86-64 (also MS_KVCACHE_STREAM_SSE2=1),
//                   16-byte copies elsewhere (no non-temporal stores there).
// Every function here is inline or a template of this inclusion, so each instruction set inlines its own helpers
// (a helper compiled for another target, a lambda included, is a call per store: measured 20% slower).
// Preconditions (NzRunToCache / NzRunFromCache check them): 32-byte pieces, the written side 16-byte aligned,
// whole-line fractal ranges (block_size even) for ToCache, a stride of whole lines for FromCache.

inline void Prefetch(const uint8_t* p) { __builtin_prefetch(p, 0, 3); }  // a hint: never faults

// 16 bytes from src to a 16-byte-aligned dst, non-temporal with kNt (SSE2).
template <bool kNt>
inline void Store16(uint8_t* dst, const uint8_t* src) {
#if defined(__SSE2__)
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  if (kNt) _mm_stream_si128(reinterpret_cast<__m128i*>(dst), x);
  else _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), x);
#else
  std::memcpy(dst, src, 16);
#endif
}

// One 32-byte piece to a 16-byte-aligned dst (a scattered slot's piece: half a line).
template <bool kNt>
inline void StorePiece(uint8_t* dst, const uint8_t* src) {
#if MSKV_NZ_AVX2
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
  if (kNt && reinterpret_cast<uintptr_t>(dst) % 32 == 0) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst), x);
  } else if (kNt) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst), _mm256_castsi256_si128(x));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 16), _mm256_extracti128_si256(x, 1));
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), x);
  }
#else
  Store16<kNt>(dst, src);
  Store16<kNt>(dst + 16, src + 16);
#endif
}

// The line at the line-aligned dst from its four 16-byte quarters q0..q3. kHalves: the quarters come from
// different pieces; else q1 = q0 + 16 and q3 = q2 + 16 (two whole pieces: 32-byte loads with AVX2).
template <bool kNt, bool kHalves>
inline void StoreLine(uint8_t* dst, const uint8_t* q0, const uint8_t* q1, const uint8_t* q2, const uint8_t* q3) {
#if MSKV_NZ_AVX2
  __m256i lo, hi;
  if (kHalves) {
    lo = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(q1), reinterpret_cast<const __m128i*>(q0));
    hi = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(q3), reinterpret_cast<const __m128i*>(q2));
  } else {
    lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q0));
    hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q2));
  }
  if (kNt) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst), lo);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + 32), hi);
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), lo);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32), hi);
  }
#else
  Store16<kNt>(dst, q0);
  Store16<kNt>(dst + 16, q1);
  Store16<kNt>(dst + 32, q2);
  Store16<kNt>(dst + 48, q3);
#endif
}

// rows -> NZ: the whole lines of the fractal ranges [c0 + f * fstep + span.x0, + 64 * span.lines).
template <bool kNt, bool kHalves>
void LinesToCache(int64_t F, int64_t fstep, uint8_t* c0, const uint8_t* rows, int64_t stride, const LineSpan& span) {
  constexpr int64_t G = kToCacheLinesPerStep;
  for (int64_t j = 0; j < span.lines; j += G) {
    const int64_t g = std::min(G, span.lines - j);
    const int64_t x = span.x0 + 64 * j;
    const bool ahead = j + g < span.lines;
    // the next step's rows not read yet: two per line, from the row of its first line's quarter 1 (quarter 0's
    // row, when it starts mid-row, is this step's last)
    const uint8_t* next = ahead ? RangeByte(rows, stride, x + 64 * g + 16) : nullptr;
    const int64_t next_rows = 2 * std::min(G, span.lines - j - g);
    uint8_t* d = c0 + x;
    for (int64_t f = 0; f < F; ++f, d += fstep) {
      if (ahead && (f & 1) == 0) {
        for (int64_t r = 0; r < next_rows; ++r) Prefetch(next + r * stride + f * 32);
      }
      const uint8_t* q = rows + f * 32;
      for (int64_t k = 0; k < g; ++k) {
        const int64_t y = x + 64 * k;
        StoreLine<kNt, kHalves>(d + 64 * k, RangeByte(q, stride, y), RangeByte(q, stride, y + 16),
                                RangeByte(q, stride, y + 32), RangeByte(q, stride, y + 48));
      }
    }
  }
}

// rows -> NZ: bytes [y0, y1) of every fractal's range (the partial lines at its ends), 16 at a time.
template <bool kNt>
inline void PartialToCache(int64_t F, int64_t fstep, uint8_t* c0, const uint8_t* rows, int64_t stride, int64_t y0,
                           int64_t y1) {
  if (y0 >= y1) return;
  for (int64_t f = 0; f < F; ++f) {
    for (int64_t y = y0; y < y1; y += 16) Store16<kNt>(c0 + f * fstep + y, RangeByte(rows + f * 32, stride, y));
  }
}

// NzRunToCache: the n rows of slots s.. into the plane.
template <bool kNt>
void RunToCache(const NzPlane& p, int64_t s, int64_t n, const uint8_t* rows, int64_t stride) {
  const int64_t F = p.fractals, fstep = p.block_size * 32, bytes = n * 32;
  uint8_t* c0 = p.At(s, 0);  // fractal f's range: [c0 + f * fstep, + bytes); fstep is a whole number of lines
  if (n == 1) {  // a scattered slot: one piece per fractal
    for (int64_t f = 0; f < F; ++f) StorePiece<kNt>(c0 + f * fstep, rows + f * 32);
    return;
  }
  const LineSpan span(static_cast<int64_t>(reinterpret_cast<uintptr_t>(c0) % 64), bytes);
  PartialToCache<kNt>(F, fstep, c0, rows, stride, 0, span.x0);
  if (span.x0 % 32 == 0) LinesToCache<kNt, false>(F, fstep, c0, rows, stride, span);
  else LinesToCache<kNt, true>(F, fstep, c0, rows, stride, span);
  PartialToCache<kNt>(F, fstep, c0, rows, stride, span.x1(), bytes);
}

// NZ -> rows: the whole lines [span.x0, + 64 * span.lines) of the m rows from r0 (slots from the tile's c0).
template <bool kNt, bool kHalves>
void LinesFromCache(int64_t fstep, const uint8_t* c0, uint8_t* r0, int64_t m, int64_t stride, const LineSpan& span) {
  constexpr int64_t G = kFromLinesPerStep;
  // the same slot's pieces of the next step: 2 * G fractals further (past the last step: the next block in
  // memory, a wasted hint)
  const int64_t ahead = 2 * G * fstep;
  for (int64_t j = 0; j < span.lines; j += G) {
    const int64_t g = std::min(G, span.lines - j);
    const int64_t x = span.x0 + 64 * j;
    uint8_t* d = r0 + x;
    const uint8_t* c = c0;
    for (int64_t i = 0; i < m; ++i, d += stride, c += 32) {
      for (int64_t k = 0; k < g; ++k) {
        const int64_t y = x + 64 * k;
        const uint8_t *q0 = RangeByte(c, fstep, y), *q1 = RangeByte(c, fstep, y + 16);
        const uint8_t *q2 = RangeByte(c, fstep, y + 32), *q3 = RangeByte(c, fstep, y + 48);
        if ((i & 1) == 0) {  // (every line of a fractal's range holds the piece of one even slot)
          Prefetch(q1 + ahead);
          Prefetch(q3 + ahead);
        }
        StoreLine<kNt, kHalves>(d + 64 * k, q0, q1, q2, q3);
      }
    }
  }
}

// NzRunFromCache: the n slots from s out of the plane into the rows.
template <bool kNt>
void RunFromCache(const NzPlane& p, int64_t s, int64_t n, uint8_t* rows, int64_t stride) {
  const int64_t fstep = p.block_size * 32, bytes = p.fractals * 32;  // a row
  const LineSpan span(static_cast<int64_t>(reinterpret_cast<uintptr_t>(rows) % 64), bytes);
  for (int64_t t0 = 0; t0 < n; t0 += kFromTileTokens) {
    const int64_t m = std::min(kFromTileTokens, n - t0);
    const uint8_t* c0 = p.At(s + t0, 0);
    uint8_t* r0 = rows + t0 * stride;
    if (span.x0 % 32 == 0) LinesFromCache<kNt, false>(fstep, c0, r0, m, stride, span);
    else LinesFromCache<kNt, true>(fstep, c0, r0, m, stride, span);
    if (span.x0 == 0 && span.x1() == bytes) continue;
    for (int64_t i = 0; i < m; ++i) {  // the partial lines at both ends of each row
      const uint8_t* c = c0 + i * 32;
      for (int64_t y = 0; y < span.x0; y += 16) Store16<kNt>(r0 + i * stride + y, RangeByte(c, fstep, y));
      for (int64_t y = span.x1(); y < bytes; y += 16) Store16<kNt>(r0 + i * stride + y, RangeByte(c, fstep, y));
    }
  }
}
