// FRACTAL_NZ caches on the cpu backend (cache_layout "NZ"): moving token rows between ND rows and an NZ cache.
//
// An NZ cache plane is [num_blocks, F, block_size, C0] with F = hidden / C0 and C0 = 32 bytes of elements (16
// float16 / bfloat16, 32 int8): token `off` of block `b` keeps its hidden elements [f * C0, (f + 1) * C0) at
// ((b * F + f) * block_size + off) * C0 (ms_kvcache/_nz.py is the definition). Geometrically it is a BNSD
// cache with heads = F and head_size = C0, which is how the generic row code addresses it (correct, but one
// 32-byte piece per token and fractal); the functions here move runs of consecutive slots of one block as
// ranges: a run's pieces of one fractal are one contiguous range of the cache, a row's pieces of consecutive
// fractals one contiguous range of the row, so the side written gets whole 64-byte lines (nz_copy.cpp).
#pragma once

#include <cstdint>

#include "aot_abi.h"

namespace mskv {

// One NZ plane: its base and geometry (element counts), chunk = C0 * element size (32 bytes).
struct NzPlane {
  uint8_t* cache = nullptr;
  int64_t num_blocks = 0, fractals = 0, block_size = 0, chunk = 0;

  int64_t row_bytes() const { return fractals * chunk; }
  int64_t slots() const { return num_blocks * block_size; }
  // Byte address of fractal f of `slot`.
  uint8_t* At(int64_t slot, int64_t f) const {
    const int64_t b = slot / block_size, off = slot % block_size;
    return cache + ((b * fractals + f) * block_size + off) * chunk;
  }
};

// The NZ plane of a cache tensor [nb, F, bs, C0] (dims d0..d3) of `elem`-byte elements starting at `base`;
// throws KernelError unless C0 * elem == 32 (what the Python checks guarantee; graph mode re-checked here).
NzPlane NzPlaneOf(uint8_t* base, int64_t d0, int64_t d1, int64_t d2, int64_t d3, int64_t elem, const char* what);

// Rows of the n consecutive slots s, s + 1, ..., s + n - 1 of one block (s % block_size + n <= block_size),
// row i at rows + i * stride (row_bytes() each), into (ToCache) or out of (FromCache) the plane. `stream`:
// non-temporal stores on the side that is written (the cache for ToCache, the rows for FromCache); call
// StreamFence() before the data is handed over. With a 16-byte-aligned written side (for FromCache also a stride
// of whole lines) every whole line of it is assembled and stored at once (32-byte AVX2 stores when the CPU has
// them, else 16-byte ones), only the partial lines at the ends of a range 16 bytes at a time; otherwise piece by
// piece (nz_copy.cpp has the loop order and the measurements, nz_lines.inl the line code).
void NzRunToCache(const NzPlane& p, int64_t s, int64_t n, const uint8_t* rows, int64_t stride, bool stream);
void NzRunFromCache(const NzPlane& p, int64_t s, int64_t n, uint8_t* rows, int64_t stride, bool stream);

// The length of the run of consecutive valid slots from token t (at most `max_run`, at most end - t, within
// one block): slot(t + i) == slot(t) + i; slot(t) must be valid.
template <typename SlotAt>
inline int64_t NzRunLength(SlotAt slot_at, int64_t t, int64_t end, int64_t block_size, int64_t max_run) {
  const int64_t s = slot_at(t);
  const int64_t room = block_size - s % block_size;
  const int64_t cap = max_run < room ? max_run : room;
  int64_t n = 1;
  while (n < cap && t + n < end && slot_at(t + n) == s + n) ++n;
  return n;
}

// reshape_and_cache(_merged) into NZ planes: token t's row of plane i (contiguous at src + t * src_row_bytes,
// the plane's row_bytes()) goes to its slot. Slots < 0 or >= slots() are skipped; a slot given twice ends
// with the later token's row (as mskv::ScatterSlots). Threads split the tokens when no slot repeats, else
// the generic scatter runs with the BNSD view of the planes.
struct NzSrcPlane {
  const uint8_t* src = nullptr;
  int64_t src_row_bytes = 0;
  NzPlane plane;
};
void ScatterSlotsNz(const NzSrcPlane* planes, int num_planes, const void* slots, DType slot_dtype, int64_t num_tokens,
                    bool slots_distinct);

}  // namespace mskv
