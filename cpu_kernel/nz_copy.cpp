// NZ cache rows on the cpu backend. See nz_copy.h.
#include "nz_copy.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "index_check.h"
#include "kv_copy.h"
#include "stream_copy.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(MSKV_STREAM_AVX2)
#include <immintrin.h>
#endif

namespace mskv {

NzPlane NzPlaneOf(uint8_t* base, int64_t d0, int64_t d1, int64_t d2, int64_t d3, int64_t elem, const char* what) {
  if (d3 * elem != 32) {
    throw KernelError(std::string(what) + ": an NZ cache [num_blocks, hidden / C0, block_size, C0] needs C0 * element "
                      "size = 32 bytes (C0 16 for float16 / bfloat16, 32 for int8), got C0 = " + std::to_string(d3) +
                      " of " + std::to_string(elem) + "-byte elements");
  }
  NzPlane p;
  p.cache = base;
  p.num_blocks = d0;
  p.fractals = d1;
  p.block_size = d2;
  p.chunk = d3 * elem;
  return p;
}

namespace {

// One 32-byte piece; `nt`: non-temporal stores (dst 16-byte aligned).
inline void Copy32(uint8_t* dst, const uint8_t* src, bool nt) {
#if defined(__SSE2__)
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
  if (nt) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 16), b);
  } else {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), a);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 16), b);
  }
#else
  (void)nt;
  std::memcpy(dst, src, 32);
#endif
}

#if defined(MSKV_STREAM_AVX2)
inline void Prefetch(const uint8_t* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0); }

// The tile loops with 32-byte registers (one load, one store per piece). ToCache reads its rows from a staging
// buffer (NzRunToCache). FromCache reads each fractal's stretch of the cache (contiguous) and writes the rows 32
// bytes at a time: it prefetches the next tile of the run (`next_n` tokens; 0: none) while it moves this one.
__attribute__((target("avx2"))) void TileToCacheAvx2(const NzPlane& p, int64_t s, int64_t n, const uint8_t* rows,
                                                     int64_t stride, bool nt, bool aligned32) {
  uint8_t* d0 = p.At(s, 0);
  const int64_t fstep = p.block_size * 32;
  for (int64_t f = 0; f < p.fractals; ++f) {
    uint8_t* d = d0 + f * fstep;
    const uint8_t* src = rows + f * 32;
    for (int64_t i = 0; i < n; ++i, d += 32, src += stride) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
      if (nt && aligned32) {
        _mm256_stream_si256(reinterpret_cast<__m256i*>(d), x);
      } else if (nt) {
        _mm_stream_si128(reinterpret_cast<__m128i*>(d), _mm256_castsi256_si128(x));
        _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), _mm256_extracti128_si256(x, 1));
      } else {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), x);
      }
    }
  }
}

__attribute__((target("avx2"))) void TileFromCacheAvx2(const NzPlane& p, int64_t s, int64_t n, uint8_t* rows,
                                                       int64_t stride, bool nt, int64_t next_n) {
  // fractal pairs: the two 32-byte pieces of one 64-byte stretch of a row are stored back to back
  const uint8_t* a0 = p.At(s, 0);
  const int64_t fstep = p.block_size * 32;
  for (int64_t f = 0; f < p.fractals; f += 2) {
    const bool pair = f + 1 < p.fractals;
    const uint8_t* a = a0 + f * fstep;
    const uint8_t* b = pair ? a + fstep : nullptr;
    for (int64_t o = 0; o < next_n * 32; o += 64) {
      Prefetch(a + n * 32 + o);
      if (pair) Prefetch(b + n * 32 + o);
    }
    uint8_t* d = rows + f * 32;
    for (int64_t i = 0; i < n; ++i, d += stride) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i * 32));
      if (nt) {
        _mm_stream_si128(reinterpret_cast<__m128i*>(d), _mm256_castsi256_si128(x));
        _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), _mm256_extracti128_si256(x, 1));
      } else {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), x);
      }
      if (!pair) continue;
      const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i * 32));
      if (nt) {
        _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), _mm256_castsi256_si128(y));
        _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), _mm256_extracti128_si256(y, 1));
      } else {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + 32), y);
      }
    }
  }
}
#endif

inline bool Aligned(const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

void TileToCache(const NzPlane& p, int64_t s, int64_t n, const uint8_t* rows, int64_t stride, bool stream) {
  if (p.chunk != 32) {  // (every NZ dtype has 32-byte pieces; kept general for other element sizes)
    for (int64_t f = 0; f < p.fractals; ++f) {
      uint8_t* d = p.At(s, f);
      for (int64_t i = 0; i < n; ++i) std::memcpy(d + i * p.chunk, rows + i * stride + f * p.chunk, p.chunk);
    }
    return;
  }
  const bool nt = stream && Aligned(p.cache, 16);
#if defined(MSKV_STREAM_AVX2)
  if (StreamHasAvx2()) {
    TileToCacheAvx2(p, s, n, rows, stride, nt, Aligned(p.cache, 32));
    return;
  }
#endif
  for (int64_t f = 0; f < p.fractals; ++f) {
    uint8_t* d = p.At(s, f);
    for (int64_t i = 0; i < n; ++i) Copy32(d + i * 32, rows + i * stride + f * 32, nt);
  }
}

void TileFromCache(const NzPlane& p, int64_t s, int64_t n, uint8_t* rows, int64_t stride, bool stream,
                   int64_t next_n) {
  if (p.chunk != 32) {
    for (int64_t f = 0; f < p.fractals; ++f) {
      const uint8_t* c = p.At(s, f);
      for (int64_t i = 0; i < n; ++i) std::memcpy(rows + i * stride + f * p.chunk, c + i * p.chunk, p.chunk);
    }
    return;
  }
  const bool nt = stream && Aligned(rows, 16) && stride % 16 == 0;
#if defined(MSKV_STREAM_AVX2)
  if (StreamHasAvx2()) {
    TileFromCacheAvx2(p, s, n, rows, stride, nt, next_n);
    return;
  }
#endif
  for (int64_t f = 0; f < p.fractals; ++f) {
    const uint8_t* c = p.At(s, f);
    for (int64_t i = 0; i < n; ++i) Copy32(rows + i * stride + f * 32, c + i * 32, nt);
  }
}

// Rows in memory not in the CPU caches (a host buffer: stage_rows) go through a per-thread staging buffer a tile
// at a time (NzRunToCache): the copy reads the rows sequentially, which the hardware prefetchers follow, and the
// transposition into the fractal columns then reads the staging buffer from the L1 / L2 cache. Measured on this
// project's 2-core VM (multi_layer_kv_transfer h2d of NZ caches, 4 layers x 2048 tokens x 2 KiB rows): 0.63-0.84
// of memcpy staged, 0.27-0.53 reading the rows directly (32-byte pieces of 16 rows at a time, even with software
// prefetch of the next tile). Rows just computed (reshape_and_cache's key / value) are read directly: staging
// them cost 0.64-0.79 of memcpy against 0.89-1.98 direct (T = 1024, 4096). A run of fewer than kNzStageMin
// tokens (scattered decode slots) is always moved directly.
constexpr int64_t kNzStageMin = 4;

uint8_t* StageBuffer(int64_t bytes) {
  thread_local std::vector<uint8_t> stage;  // at most kNzTileTokens rows per thread
  if (static_cast<int64_t>(stage.size()) < bytes + 64) stage.resize(static_cast<size_t>(bytes + 64));
  return stage.data() + (64 - reinterpret_cast<uintptr_t>(stage.data()) % 64) % 64;
}

}  // namespace

void NzRunToCache(const NzPlane& p, int64_t s, int64_t n, const uint8_t* rows, int64_t stride, bool stream,
                  bool stage_rows) {
  const int64_t rb = p.row_bytes();
  for (int64_t i = 0; i < n; i += kNzTileTokens) {
    const int64_t m = std::min(kNzTileTokens, n - i);
    if (!stage_rows || m < kNzStageMin) {
      TileToCache(p, s + i, m, rows + i * stride, stride, stream);
      continue;
    }
    uint8_t* st = StageBuffer(m * rb);
    if (stride == rb) {
      std::memcpy(st, rows + i * stride, static_cast<size_t>(m * rb));
    } else {
      for (int64_t j = 0; j < m; ++j) std::memcpy(st + j * rb, rows + (i + j) * stride, static_cast<size_t>(rb));
    }
    TileToCache(p, s + i, m, st, rb, stream);
  }
}

void NzRunFromCache(const NzPlane& p, int64_t s, int64_t n, uint8_t* rows, int64_t stride, bool stream) {
  // the first tile's fractal stretches now; each tile prefetches the next one's (TileFromCacheAvx2)
  const int64_t first = std::min(kNzTileTokens, n);
  for (int64_t f = 0; f < p.fractals; ++f) {
    for (int64_t o = 0; o < first * p.chunk; o += 64) PrefetchLine(p.At(s, f) + o);
  }
  for (int64_t i = 0; i < n; i += kNzTileTokens) {
    const int64_t m = std::min(kNzTileTokens, n - i);
    TileFromCache(p, s + i, m, rows + i * stride, stride, stream, std::min(kNzTileTokens, n - i - m));
  }
}

void ScatterSlotsNz(const NzSrcPlane* planes, int num_planes, const void* slots, DType slot_dtype, int64_t num_tokens,
                    bool slots_distinct) {
  if (num_tokens <= 0 || num_planes <= 0) return;
  const NzPlane& p0 = planes[0].plane;
  const int64_t num_slots = p0.slots();
  int64_t token_bytes = 0;
  for (int i = 0; i < num_planes; ++i) token_bytes += planes[i].plane.row_bytes();
  const int64_t total = num_tokens * token_bytes;
  if (!slots_distinct && !(total < ParallelThresholdBytes() || NumThreads() <= 1) &&
      !SlotsDistinct(slots, DTypeSize(slot_dtype), num_tokens, num_slots)) {
    // a slot repeats (graph mode): the generic scatter keeps the later token's row, threaded by slot owner
    SlotPlane bnsd[4];
    for (int i = 0; i < num_planes && i < 4; ++i) {
      const NzPlane& p = planes[i].plane;
      bnsd[i] = {planes[i].src, planes[i].src_row_bytes, p.cache, p.fractals, p.chunk, true};
    }
    ScatterSlots(bnsd, num_planes, slots, slot_dtype, num_tokens, p0.num_blocks, p0.block_size, false);
    return;
  }
  const bool stream = total >= CopyStreamThresholdBytes();
  auto slot_at = [&](int64_t t) { return ReadIndex(slots, slot_dtype, t); };
  // One thread, or distinct slots: token ranges; a range moves its runs of consecutive slots as tiles. (One
  // thread with a repeated slot: in token order, so the later token's row is written last.)
  ParallelFor(num_tokens, total, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end;) {
      const int64_t s = slot_at(t);
      if (s < 0 || s >= num_slots) {
        ++t;
        continue;
      }
      const int64_t n = NzRunLength(slot_at, t, end, p0.block_size, p0.block_size);
      for (int i = 0; i < num_planes; ++i) {
        NzRunToCache(planes[i].plane, s, n, planes[i].src + t * planes[i].src_row_bytes, planes[i].src_row_bytes,
                     stream);
      }
      t += n;
    }
    if (stream) StreamFence();
  });
}

}  // namespace mskv
