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

// The runs write whole 64-byte lines. On the NZ side, the pieces of a run of consecutive slots of one fractal are
// one contiguous range of the cache (32 bytes per slot); on the row side, the pieces of a row's consecutive
// fractals are contiguous. Each line of the written side is assembled from the pieces that cover it - two whole
// pieces when that side's ranges start on a 32-byte boundary of the line grid, else the upper half of one piece,
// a whole piece and the lower half of the next (MindSpore's host tensors are 16-byte aligned) - and stored whole:
// with `stream`, as non-temporal stores of complete lines (no read for ownership, no partial write-combining
// flush). Only the partial lines at the two ends of a range are stored 16 bytes at a time, non-temporal too: a
// scattered slot's pieces (runs of one) are all partial lines, and there streaming stores measured 2x plain
// ones (a plain store first reads the line: 128 bytes of traffic for 32).
//
// The loop order keeps the read side sequential, the side the hardware prefetchers must follow, and scatters
// the whole lines written (non-temporal stores of whole lines need no locality):
//   ToCache (rows -> NZ): steps of kToCacheLinesPerStep lines of the slot ranges (two slots' rows per line)
//     outside, fractals inside: the rows are read front to back (the next step's rows prefetched), each step
//     writes that many consecutive lines into each of the F fractal ranges. One line per step measured 10-30%
//     slower than two when the rows are in the CPU caches (reshape_and_cache's key / value at T <= 4096),
//     four the same as two for those and slower for rows in memory (the transfers' host rows).
//   FromCache (NZ -> rows): tiles of kFromTileTokens slots; in a tile, steps of kFromLinesPerStep lines of the
//     row (two fractals per line) outside, slots inside: the fractal ranges are read front to back, each slot's
//     row gets that many consecutive lines per step. Each slot prefetches its pieces of the next step (the next
//     2 * kFromLinesPerStep fractal ranges, a jump the hardware prefetchers do not follow): on one thread
//     0.94-1.01 of a one-thread memcpy against 0.82-0.90 when each tile prefetched the next tile's part of its
//     ranges (for the second tile of a block, the next fractal's pieces just read). On one thread 64-slot
//     tiles measured 3-8% faster than 32-slot ones, 128-slot ones 10% slower; two lines per step 5% faster
//     than one, four the same.
// Measured on this project's 2-core VM (Llama-3-8B NZ rows of 2 KiB, 32 layers, T = 1024, caches 16 bytes past a
// line, against a 2-thread memcpy of the same bytes in the same run): multi_layer_kv_transfer h2d 0.66-0.77 ->
// 1.02-1.06 and d2h 0.63-0.73 -> 1.01-1.04, the whole-block transfers likewise (0.57-0.81 -> 1.0-1.15); the
// former tiles moved pieces one at a time (16-token tiles, 16-byte stores, for h2d a staging copy of the rows).
// Lines assembled in 64-byte registers (AVX-512) measured the same as with 32-byte ones.
constexpr int64_t kFromTileTokens = 64;
constexpr int64_t kToCacheLinesPerStep = 2;
constexpr int64_t kFromLinesPerStep = 2;

// The whole lines of a range of `bytes` bytes whose first byte is `e` bytes past a line boundary (e a multiple
// of 16): they start at x0 and there are `lines` of them. Bytes [0, x0) and [x1(), bytes) are the partial lines
// at the ends.
struct LineSpan {
  int64_t x0, lines;
  LineSpan(int64_t e, int64_t bytes) {
    x0 = std::min<int64_t>((64 - e) % 64, bytes);
    lines = (bytes - x0) / 64;
  }
  int64_t x1() const { return x0 + 64 * lines; }
};

// Byte y of a range made of 32-byte pieces `step` bytes apart from `base` (piece y / 32, byte y % 32 of it).
inline const uint8_t* RangeByte(const uint8_t* base, int64_t step, int64_t y) {
  return base + (y >> 5) * step + (y & 31);
}

}  // namespace

// The line code once per instruction set (nz_lines.inl): the build's baseline, and AVX2 (x86-64).
namespace {
namespace nz_base {
#define MSKV_NZ_AVX2 0
#include "nz_lines.inl"
#undef MSKV_NZ_AVX2
}  // namespace nz_base
}  // namespace

#if defined(MSKV_STREAM_AVX2)
#pragma GCC push_options
#pragma GCC target("avx2")
namespace {
namespace nz_avx2 {
#define MSKV_NZ_AVX2 1
#include "nz_lines.inl"
#undef MSKV_NZ_AVX2
}  // namespace nz_avx2
}  // namespace
#pragma GCC pop_options
#endif

namespace {

inline bool Aligned(const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

// A written side the line code cannot take (not 16-byte aligned; graph mode's unchecked odd block_size or chunk):
// piece by piece, plain copies.
void PiecesToCache(const NzPlane& p, int64_t s, int64_t n, const uint8_t* rows, int64_t stride) {
  for (int64_t f = 0; f < p.fractals; ++f) {
    uint8_t* d = p.At(s, f);
    for (int64_t i = 0; i < n; ++i) std::memcpy(d + i * p.chunk, rows + i * stride + f * p.chunk, p.chunk);
  }
}

// (rows 16-byte aligned at a stride of 16-byte multiples but not of whole lines - an odd fractal count - stream
// their 32-byte pieces)
void PiecesFromCache(const NzPlane& p, int64_t s, int64_t n, uint8_t* rows, int64_t stride, bool stream) {
  const bool nt = stream && p.chunk == 32 && Aligned(rows, 16) && stride % 16 == 0;
  for (int64_t f = 0; f < p.fractals; ++f) {
    const uint8_t* c = p.At(s, f);
    for (int64_t i = 0; i < n; ++i) {
      if (nt) nz_base::StorePiece<true>(rows + i * stride + f * 32, c + i * 32);
      else std::memcpy(rows + i * stride + f * p.chunk, c + i * p.chunk, p.chunk);
    }
  }
}

}  // namespace

void NzRunToCache(const NzPlane& p, int64_t s, int64_t n, const uint8_t* rows, int64_t stride, bool stream) {
  if (n <= 0) return;
  if (p.chunk != 32 || p.block_size % 2 != 0 || !Aligned(p.cache, 16)) {
    PiecesToCache(p, s, n, rows, stride);
    return;
  }
#if defined(MSKV_STREAM_AVX2)
  if (StreamHasAvx2()) {
    if (stream) nz_avx2::RunToCache<true>(p, s, n, rows, stride);
    else nz_avx2::RunToCache<false>(p, s, n, rows, stride);
    return;
  }
#endif
  if (stream) nz_base::RunToCache<true>(p, s, n, rows, stride);
  else nz_base::RunToCache<false>(p, s, n, rows, stride);
}

void NzRunFromCache(const NzPlane& p, int64_t s, int64_t n, uint8_t* rows, int64_t stride, bool stream) {
  if (n <= 0) return;
  // every row as far past a line boundary as the first: a stride of whole lines
  if (p.chunk != 32 || !Aligned(rows, 16) || stride % 64 != 0) {
    PiecesFromCache(p, s, n, rows, stride, stream);
    return;
  }
#if defined(MSKV_STREAM_AVX2)
  if (StreamHasAvx2()) {
    if (stream) nz_avx2::RunFromCache<true>(p, s, n, rows, stride);
    else nz_avx2::RunFromCache<false>(p, s, n, rows, stride);
    return;
  }
#endif
  if (stream) nz_base::RunFromCache<true>(p, s, n, rows, stride);
  else nz_base::RunFromCache<false>(p, s, n, rows, stride);
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
  // One thread, or distinct slots: token ranges; a range moves its runs of consecutive slots, one plane after
  // the other (a scattered token's pieces are F lines in F pages per plane: the planes one at a time keep half
  // as many pages in use, measured 1.1-1.2x faster for scattered slots here). One thread with a repeated slot:
  // each plane in token order, so the later token's row is written last.
  ParallelFor(num_tokens, total, [&](int64_t begin, int64_t end) {
    for (int i = 0; i < num_planes; ++i) {
      const NzSrcPlane& pl = planes[i];
      for (int64_t t = begin; t < end;) {
        const int64_t s = slot_at(t);
        if (s < 0 || s >= num_slots) {
          ++t;
          continue;
        }
        const int64_t n = NzRunLength(slot_at, t, end, p0.block_size, p0.block_size);
        NzRunToCache(pl.plane, s, n, pl.src + t * pl.src_row_bytes, pl.src_row_bytes, stream);
        t += n;
      }
    }
    if (stream) StreamFence();
  });
}

}  // namespace mskv
