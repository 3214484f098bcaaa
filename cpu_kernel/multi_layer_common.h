// Shared pieces of the multi-layer KV transfer kernels (multi_layer_kv_transfer.cpp,
// multi_layer_block_transfer.cpp): cache formats, per-plane geometry, the flattened list of per-layer
// caches, row copies and a core-capped parallel loop.
//
// How the per-layer caches reach a kernel: the op has one list (dynamic) input `kv_caches` (AscendC
// ParamType(DYNAMIC), an aclTensorList on the aclnn side); MindSpore passes its tensors as consecutive
// AOT params (where they start and how many: mskv::InputSpans, from dyn_input_sizes) in layer-major
// order: layer l, component c at l * tensors_per_layer + c, where tensors_per_layer is 1 for MERGED_KV
// ([2, nb, ...] holds both planes) and the plane count otherwise.
#pragma once

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "aot_abi.h"
#include "index_check.h"
#include "nz_copy.h"
#include "stream_copy.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace mskv {
namespace ml {

// KVCacheFormat values (ms_kvcache/_formats.py, kvcache-ops numbering).
enum Format : int64_t { kMerged = 1, kSeparate = 2, kMla = 3, kDsa = 4 };

inline int PlanesOf(int64_t fmt) { return fmt == kDsa ? 3 : 2; }
inline int TensorsPerLayer(int64_t fmt) { return fmt == kMerged ? 1 : PlanesOf(fmt); }

inline void CheckFormat(int64_t fmt) {
  if (fmt < kMerged || fmt > kDsa) throw KernelError("unknown kv_format " + std::to_string(fmt));
}


// The attributes of every multi-layer transfer (kv_format, direction, cache_layout with the op's default,
// num_layers, aiv_num), checked, with the format's planes and tensors per layer.
struct TransferAttrs {
  int64_t fmt = 0;
  bool d2h = false, bnsd = false;
  bool nz = false;  // NZ caches [nb, H*D/C0, bs, C0] (bnsd is then true: their BNSD geometry, nz_copy.h)
  int64_t L = 0, aiv = 0;
  int planes = 2, tpl = 1;
};

// The layers one call moves: [l0, l1). Every layer unless the call carries the attribute "mskv_layer" (set
// only by the layer-wise worker, cpu_kernel/layerwise.h: one layer per call); KernelError when it is not in
// [0, num_layers). A layer's call touches only that layer's cache rows and its rows of the buffer / host
// blocks, and moves them with the same row copies as the call of every layer (identical bytes).
struct LayerRange {
  int64_t l0 = 0, l1 = 0;
  int64_t count() const { return l1 - l0; }
};

inline LayerRange ReadLayerRange(const AotArgs& a, int64_t num_layers) {
  const int64_t l = a.attr_int("mskv_layer", -1);
  if (l == -1) return LayerRange{0, num_layers};
  if (l < 0 || l >= num_layers)
    throw KernelError("attribute mskv_layer = " + std::to_string(l) + " is not a layer of [0, " +
                      std::to_string(num_layers) + ")");
  return LayerRange{l, l + 1};
}

inline TransferAttrs ReadTransferAttrs(const AotArgs& a, int64_t default_layout) {
  TransferAttrs t;
  t.fmt = a.attr_int("kv_format", 0);
  t.d2h = mskv::DirectionIsD2H(a.attr_int("direction", 0));  // no default: the primitive always sets it
  const int64_t layout = a.attr_int("cache_layout", default_layout);
  t.nz = mskv::LayoutIsNz(layout);
  t.bnsd = t.nz || mskv::LayoutIsBnsd(layout);
  t.L = a.attr_int("num_layers", 0);
  t.aiv = a.attr_int("aiv_num", 0);
  CheckFormat(t.fmt);
  if (t.nz && (t.fmt == kMla || t.fmt == kDsa)) throw KernelError("MLA_KV / DSA_KV caches have no NZ form");
  t.planes = PlanesOf(t.fmt);
  t.tpl = TensorsPerLayer(t.fmt);
  return t;
}

// One KV plane of one layer's paged cache: [nb, bs, heads, head] (BSND) or [nb, heads, bs, head]
// (BNSD). MLA/DSA planes are [nb, bs, hidden] (or [nb, bs, 1, hidden]): heads = 1.
struct Plane {
  int64_t nb = 0, bs = 0, heads = 1, head = 0;
  bool bnsd = false;
  int64_t nz_c0 = 0;  // an NZ plane: heads = H*D/C0 pieces of head = C0 elements (bnsd true); 0 otherwise
  int64_t hidden() const { return heads * head; }
  int64_t slots() const { return nb * bs; }
  int64_t elems() const { return nb * bs * heads * head; }
};

// Geometry of plane p from cache tensor `idx` (the first layer's). Throws on ranks that cannot be.
inline Plane PlaneFromCache(const AotArgs& a, int idx, int64_t fmt, bool bnsd) {
  Plane pl;
  const int r = a.rank(idx);
  if (fmt == kMerged) {
    if (r != 5 || a.dim(idx, 0) != 2) throw KernelError("MERGED_KV caches must be [2, nb, bs, H, D]");
    pl.nb = a.dim(idx, 1);
    pl.bs = bnsd ? a.dim(idx, 3) : a.dim(idx, 2);
    pl.heads = bnsd ? a.dim(idx, 2) : a.dim(idx, 3);
    pl.head = a.dim(idx, 4);
    pl.bnsd = bnsd;
  } else if (fmt == kSeparate) {
    if (r != 4) throw KernelError("SEPARATE_KV caches must be rank 4");
    pl.nb = a.dim(idx, 0);
    pl.bs = bnsd ? a.dim(idx, 2) : a.dim(idx, 1);
    pl.heads = bnsd ? a.dim(idx, 1) : a.dim(idx, 2);
    pl.head = a.dim(idx, 3);
    pl.bnsd = bnsd;
  } else {
    if (r != 3 && !(r == 4 && a.dim(idx, 2) == 1)) throw KernelError("MLA/DSA caches must be [nb, bs, hidden]");
    pl.nb = a.dim(idx, 0);
    pl.bs = a.dim(idx, 1);
    pl.heads = 1;
    pl.head = a.dim(idx, r - 1);
    pl.bnsd = false;
  }
  return pl;
}

// Per-plane geometry and per-(plane, layer) base pointers of the flattened cache list that starts at
// AOT param `first`. Every layer must match layer 0 (Python checks this; re-checked here because
// graph mode has no eager checks).
struct LayerCaches {
  int64_t fmt = 0, num_layers = 0;
  int planes = 0;
  size_t elem = 0;
  DType dtype = DType::kUnknown;
  std::vector<Plane> plane;       // [planes]
  std::vector<uint8_t*> base;     // [planes * num_layers], index p * num_layers + l

  uint8_t* at(int p, int64_t l) const { return base[static_cast<size_t>(p * num_layers + l)]; }
};

inline LayerCaches ParseLayerCaches(const AotArgs& a, int first, int64_t fmt, int64_t num_layers, bool bnsd,
                                    bool nz = false) {
  CheckFormat(fmt);
  LayerCaches c;
  c.fmt = fmt;
  c.num_layers = num_layers;
  c.planes = PlanesOf(fmt);
  const int tpl = TensorsPerLayer(fmt);
  if (num_layers < 1) throw KernelError("num_layers must be >= 1");
  if (first + num_layers * tpl > a.nparam - 1) throw KernelError("fewer cache tensors than num_layers");
  c.dtype = a.dtype(first);
  c.elem = DTypeSize(c.dtype);
  if (c.elem == 0) throw KernelError("unsupported cache dtype");
  for (int p = 0; p < c.planes; ++p) {
    c.plane.push_back(PlaneFromCache(a, first + (fmt == kMerged ? 0 : p), fmt, bnsd));
    if (nz) {  // checked as NzPlaneOf does (graph mode has no Python check)
      Plane& pl = c.plane.back();
      if (pl.head * static_cast<int64_t>(c.elem) != 32) throw KernelError("an NZ cache needs C0 of 32 bytes");
      pl.nz_c0 = pl.head;
    }
  }
  for (int p = 1; p < c.planes; ++p) {
    if (c.plane[p].nb != c.plane[0].nb || c.plane[p].bs != c.plane[0].bs)
      throw KernelError("planes disagree on num_blocks/block_size");
  }
  c.base.resize(static_cast<size_t>(c.planes * num_layers));
  for (int64_t l = 0; l < num_layers; ++l) {
    for (int t = 0; t < tpl; ++t) {
      const int idx = static_cast<int>(first + l * tpl + t);
      if (a.dtype(idx) != c.dtype) throw KernelError("caches of different dtypes");
      const int ref = first + t;  // layer 0's tensor of the same component
      if (a.rank(idx) != a.rank(ref)) throw KernelError("caches of different ranks across layers");
      for (int d = 0; d < a.rank(idx); ++d)
        if (a.dim(idx, d) != a.dim(ref, d)) throw KernelError("caches of different shapes across layers");
    }
    if (fmt == kMerged) {
      uint8_t* p0 = a.ptr(static_cast<int>(first + l));
      const int64_t plane_bytes = c.plane[0].elems() * static_cast<int64_t>(c.elem);
      c.base[static_cast<size_t>(0 * num_layers + l)] = p0;
      c.base[static_cast<size_t>(1 * num_layers + l)] = p0 + plane_bytes;
    } else {
      for (int p = 0; p < c.planes; ++p)
        c.base[static_cast<size_t>(p * num_layers + l)] = a.ptr(static_cast<int>(first + l * tpl + p));
    }
  }
  return c;
}

// Scale caches of quantized (1-byte) caches as extra planes (multi_layer_kv_transfer / _block_transfer with
// scale_caches): `count` = num_layers * data planes float32 tensors from AOT param `first`, layer-major, one
// per data plane: [nb, bs, H(, 1)] (BSND), [nb, H, bs(, 1)] (BNSD), [nb, bs, 1] (MLA / DSA planes). Each
// becomes plane planes + p with heads = the data plane's heads and head = 4 elements of the 1-byte cache
// dtype (one float32 scale), so the row copies move 4 * heads bytes per token and plane. Appended after
// the data planes: c.plane / c.base then hold 2 * data planes entries.
inline void AppendScalePlanes(const AotArgs& a, int first, int64_t count, LayerCaches* c) {
  const int P = c->planes;
  const int64_t L = c->num_layers;
  if (c->elem != 1) throw KernelError("scale caches go with int8 / float8 caches (1-byte elements)");
  if (count != L * P) throw KernelError("expected num_layers * planes scale caches");
  if (first + count > a.nparam - 1) throw KernelError("fewer scale caches than num_layers * planes");
  std::vector<Plane> sp(static_cast<size_t>(P));
  for (int p = 0; p < P; ++p) {
    const int idx = first + p;
    const Plane& d = c->plane[static_cast<size_t>(p)];
    const int r = a.rank(idx);
    Plane s;
    s.nb = d.nb, s.bs = d.bs, s.heads = d.heads, s.head = 4, s.bnsd = d.bnsd;
    bool ok = (r == 3 || (r == 4 && a.dim(idx, 3) == 1)) && a.dim(idx, 0) == d.nb;
    if (ok && (c->fmt == kMla || c->fmt == kDsa)) {
      ok = r == 3 && a.dim(idx, 1) == d.bs && a.dim(idx, 2) == 1;
    } else if (ok && d.nz_c0 > 0) {  // an NZ plane's scale cache is BSND [nb, bs, H(, 1)], H the real heads
      s.heads = a.dim(idx, 2), s.bnsd = false;
      ok = a.dim(idx, 1) == d.bs && s.heads >= 1 && d.hidden() % s.heads == 0;
    } else if (ok) {
      ok = d.bnsd ? (a.dim(idx, 1) == d.heads && a.dim(idx, 2) == d.bs)
                  : (a.dim(idx, 1) == d.bs && a.dim(idx, 2) == d.heads);
    }
    if (!ok) throw KernelError("scale cache " + std::to_string(p) + " does not match its data plane");
    sp[static_cast<size_t>(p)] = s;
  }
  std::vector<uint8_t*> base(static_cast<size_t>(2 * P * L));
  for (size_t i = 0; i < c->base.size(); ++i) base[i] = c->base[i];
  for (int64_t l = 0; l < L; ++l) {
    for (int p = 0; p < P; ++p) {
      const int idx = static_cast<int>(first + l * P + p), ref = first + p;
      if (a.dtype(idx) != DType::kF32) throw KernelError("scale caches must be float32");
      if (a.rank(idx) != a.rank(ref)) throw KernelError("scale caches of different ranks across layers");
      for (int d = 0; d < a.rank(idx); ++d)
        if (a.dim(idx, d) != a.dim(ref, d)) throw KernelError("scale caches of different shapes across layers");
      base[static_cast<size_t>((P + p) * L + l)] = a.ptr(idx);
    }
  }
  for (int p = 0; p < P; ++p) c->plane.push_back(sp[static_cast<size_t>(p)]);
  c->base = std::move(base);
  c->planes = 2 * P;
}

// memcpy with the common small row sizes inlined (a BNSD head row is often 64..512 bytes; scale rows 4..32).
inline void CopyBytes(uint8_t* dst, const uint8_t* src, int64_t n) {
  switch (n) {
    case 4: __builtin_memcpy(dst, src, 4); return;  // one float32 scale (a BNSD scale plane's head piece)
    case 8: __builtin_memcpy(dst, src, 8); return;
    case 16: __builtin_memcpy(dst, src, 16); return;
    case 32: __builtin_memcpy(dst, src, 32); return;  // a scale row of 8 heads
    case 64: __builtin_memcpy(dst, src, 64); return;
    case 128: __builtin_memcpy(dst, src, 128); return;
    case 256: __builtin_memcpy(dst, src, 256); return;
    case 512: __builtin_memcpy(dst, src, 512); return;
    default: std::memcpy(dst, src, static_cast<size_t>(n));
  }
}

// Transfers larger than this write their destination with non-temporal (streaming) stores: the rows
// are not read again soon, and ordinary stores of row-sized pieces first read every destination line
// (read-for-ownership), which costs a third of the bandwidth; glibc only streams single copies larger
// than a fraction of the L3. Measured on this project's 2-core VM (token d2h, 2 KiB rows, one thread):
// 0.62 of memcpy with plain copies, 0.75 streaming, 0.80 streaming + source prefetch.
constexpr int64_t kStreamBytes = int64_t{4} << 20;

// dst[0, n) = src[0, n); `stream`: non-temporal stores (mskv::StreamCopy, stream_copy.h). Call
// StreamFence() before the data is handed to another thread.
inline void Copy(uint8_t* dst, const uint8_t* src, int64_t n, bool stream) {
  if (stream) {
    StreamCopy(dst, src, n, true);
  } else {
    CopyBytes(dst, src, n);
  }
}

using ::mskv::StreamFence;

// One token row of a plane, cache side, at `slot`: BSND rows are contiguous, BNSD rows are `heads`
// pieces of `head` elements, block_size rows apart. to_cache: row -> cache, else cache -> row.
inline void CopyTokenRow(uint8_t* cache, uint8_t* row, const Plane& pl, int64_t slot, size_t elem, bool to_cache,
                         bool stream) {
  const int64_t head_bytes = pl.head * static_cast<int64_t>(elem);
  if (!pl.bnsd) {
    uint8_t* c = cache + slot * pl.hidden() * static_cast<int64_t>(elem);
    if (to_cache) Copy(c, row, pl.heads * head_bytes, stream);
    else Copy(row, c, pl.heads * head_bytes, stream);
    return;
  }
  const int64_t block = slot / pl.bs, off = slot % pl.bs;
  uint8_t* c = cache + ((block * pl.heads) * pl.bs + off) * head_bytes;
  const int64_t stride = pl.bs * head_bytes;
  for (int64_t h = 0; h < pl.heads; ++h) {
    if (to_cache) Copy(c + h * stride, row + h * head_bytes, head_bytes, stream);
    else Copy(row + h * head_bytes, c + h * stride, head_bytes, stream);
  }
}

// The NZ view (nz_copy.h) of NZ plane p of layer l.
inline NzPlane NzOf(const LayerCaches& c, int p, int64_t l) {
  const Plane& pl = c.plane[static_cast<size_t>(p)];
  NzPlane z;
  z.cache = c.at(p, l);
  z.num_blocks = pl.nb;
  z.fractals = pl.heads;
  z.block_size = pl.bs;
  z.chunk = pl.head * static_cast<int64_t>(c.elem);
  return z;
}

// ParallelFor with an optional cap on threads (the op's aiv_num attribute: 0 = all, 1 = inline): at
// most `cap` parts run concurrently. Built on mskv::ParallelFor only (whatever its thread machinery).
template <typename F>
void ParallelForCapped(int64_t n, int64_t total_bytes, int64_t cap, F&& body) {
  if (n <= 0) return;
  if (cap == 1) {
    body(int64_t{0}, n);
    return;
  }
  if (cap <= 0 || cap >= NumThreads()) {
    ParallelFor(n, total_bytes, body);
    return;
  }
  const int64_t parts = std::min<int64_t>(n, cap);
  ParallelFor(parts, total_bytes, [&](int64_t pb, int64_t pe) {
    for (int64_t p = pb; p < pe; ++p) {
      const int64_t b = p * n / parts, e = (p + 1) * n / parts;
      if (b < e) body(b, e);
    }
  });
}

// Completed calls of the transfer kernels (successful or not). Read by scripts/bench_transfer.py to
// wait for a PyNative launch without MindSpore's spinning synchronize, which takes one of two cores
// away from the kernel on a small machine.
inline std::atomic<int64_t>& CompletedCalls() {
  static std::atomic<int64_t> n{0};
  return n;
}

struct CountCall {
  ~CountCall() { CompletedCalls().fetch_add(1, std::memory_order_release); }
};

// Large contiguous copy split over threads (the staging DMA of the block transfer on CPU).
inline void ParallelCopy(uint8_t* dst, const uint8_t* src, int64_t nbytes, int64_t cap) {
  constexpr int64_t kPiece = int64_t{1} << 20;
  const int64_t pieces = (nbytes + kPiece - 1) / kPiece;
  ParallelForCapped(pieces, nbytes, cap, [&](int64_t b, int64_t e) {
    const int64_t lo = b * kPiece, hi = std::min(nbytes, e * kPiece);
    if (hi > lo) std::memcpy(dst + lo, src + lo, static_cast<size_t>(hi - lo));  // glibc streams big copies
  });
}

// Strict mode (attribute "mskv_strict", set only by the PyNative fast path, whose wrappers may read the
// index tensor without waiting for pending ops): re-check the values the kernel actually sees and fail,
// writing nothing, instead of skipping invalid ones. Same messages as the Python checks.
inline bool Strict(const AotArgs& a) { return a.attr_bool("mskv_strict", false); }

inline void StrictCheckSlots(const AotArgs& a, const void* slots, DType d, int64_t n, int64_t num_slots,
                             bool allow_duplicates) {
  if (!Strict(a) || n <= 0) return;
  const IndexIssue e = CheckSlotValues(slots, DTypeSize(d), n, num_slots);
  if (e.code == 1 || (e.code == 2 && !allow_duplicates))
    throw KernelError(SlotIssueMessage("slot_mapping", e, num_slots) +
                      " (checked at launch: was slot_mapping modified after the call?)");
}

inline void StrictCheckBlockIds(const AotArgs& a, const void* ids, DType d, int64_t n, int64_t num_blocks,
                                bool distinct) {
  if (!Strict(a) || n <= 0) return;
  const IndexIssue e = CheckBlockIdValues(ids, DTypeSize(d), n, num_blocks, distinct);
  if (e.code != 0)
    throw KernelError(BlockIdIssueMessage("block_ids", e, num_blocks) +
                      " (checked at launch: was block_ids modified after the call?)");
}

}  // namespace ml
}  // namespace mskv
