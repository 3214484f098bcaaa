// multi_layer_block_transfer, native CPU kernel ("cpu" backend): whole blocks of every layer between
// per-layer paged caches and token-major host blocks (HeteroFusedKernels "pcieThrough" style).
//
// AOT params (OpSpec order): block_ids [n] int32/int64, staging (optional: an empty [0] tensor when
// absent), host_blocks... (list, one tensor per plane), kv_caches... (list, num_layers *
// tensors_per_layer, layer-major), then the int32 [1] status output; the list lengths come from
// dyn_input_sizes (mskv::InputSpans). Attrs: kv_format, direction, cache_layout, num_layers, aiv_num; mskv_layer
// (optional, the layer-wise worker's: move that layer's rows only, ml::ReadLayerRange).
// Host plane p: [n, block_size, L, H, D] (MLA/DSA: [n, block_size, L, hidden_p]), i.e. block i,
// token s, layer l is the row at ((i * bs + s) * L + l) * hidden_p elements: one contiguous piece per
// block. Device plane p of layer l: [nb, bs, H, D] (BSND), [nb, H, bs, D] (BNSD) or [nb, H*D/C0, bs, C0] (NZ,
// nz_copy.h: host planes [n, bs, L, H, D] with any H * D = hidden; scale caches BSND).
// h2d: host block i -> device block block_ids[i]; d2h: device block block_ids[i] -> host block i.
// Ids outside [0, nb) are skipped by h2d and give zero host blocks in d2h (Python rejects them before
// launch; this only matters in graph mode). Work is split by (block, token rows, layers) tiles.
// staging present: checked (dtype, at least one block of every plane), then used as scratch: the cpu
// backend runs the zero-copy path (host memory is device memory here; see the end of this file and
// docs/ops-transfer.md). The staging buffer's contents after the call are unspecified.
#include "multi_layer_common.h"

#include <climits>

namespace {

using mskv::AotArgs;
using mskv::KernelError;
namespace ml = mskv::ml;

// d2h of rows [s0, s1) of device block `blk` of plane p, layer l -> host rows starting at `h` (row s0),
// `host_stride` bytes apart. The loops run along the destination so that (streaming) stores go to
// one contiguous range at a time; stores scattered over many ranges ran up to 5x slower here.
inline void LayerRowsToHost(const ml::LayerCaches& c, int p, int64_t l, int64_t blk, int64_t s0, int64_t s1, uint8_t* h,
                            int64_t host_stride, bool stream) {
  const ml::Plane& pl = c.plane[p];
  const int64_t elem = static_cast<int64_t>(c.elem);
  const int64_t row = pl.hidden() * elem;
  const uint8_t* dev = c.at(p, l) + blk * pl.bs * row;  // the device block (bs * hidden elements)
  if (pl.nz_c0 > 0) {  // NZ block [H*D/C0, bs, C0] -> host rows: tiles (nz_copy.h)
    mskv::NzRunFromCache(ml::NzOf(c, p, l), blk * pl.bs + s0, s1 - s0, h, host_stride, stream);
    return;
  }
  // pieces shorter than a cache line (scale planes: 4 * H bytes, BNSD 4) go with plain stores
  stream = stream && (pl.bnsd ? pl.head * elem : row) >= 64;
  if (!pl.bnsd) {
    for (int64_t s = s0; s < s1; ++s) ml::Copy(h + (s - s0) * host_stride, dev + s * row, row, stream);
    return;
  }
  const int64_t hb = pl.head * elem;  // BNSD block [H, bs, D] -> host row [H, D]
  for (int64_t s = s0; s < s1; ++s)
    for (int64_t hh = 0; hh < pl.heads; ++hh)
      ml::Copy(h + (s - s0) * host_stride + hh * hb, dev + (hh * pl.bs + s) * hb, hb, stream);
}

// d2h of token rows [s0, s1) of device block `blk` (the layers of `lr`, all planes) -> host rows (`rows[p]`
// points at token s0, layer 0 of plane p, laid out [s1 - s0, L, hidden_p]), token by token, layers
// inside (the host rows of one token are the contiguous side). Ids outside [0, nb) give zeros.
void BlockRowsToHost(const ml::LayerCaches& c, uint8_t* const* host_rows, int64_t blk, int64_t s0, int64_t s1,
                     bool stream, ml::LayerRange lr) {
  const int64_t L = c.num_layers;
  const bool all = lr.l0 == 0 && lr.l1 == L;
  for (int p = 0; p < c.planes; ++p) {
    const ml::Plane& pl = c.plane[p];
    const int64_t row = pl.hidden() * static_cast<int64_t>(c.elem);
    uint8_t* rows = host_rows[p];
    if (blk < 0 || blk >= pl.nb) {
      if (all) {
        std::memset(rows, 0, static_cast<size_t>((s1 - s0) * L * row));
      } else {
        for (int64_t s = s0; s < s1; ++s)
          for (int64_t l = lr.l0; l < lr.l1; ++l)
            std::memset(rows + ((s - s0) * L + l) * row, 0, static_cast<size_t>(row));
      }
      continue;
    }
    for (int64_t s = s0; s < s1; ++s)
      for (int64_t l = lr.l0; l < lr.l1; ++l)
        LayerRowsToHost(c, p, l, blk, s, s + 1, rows + ((s - s0) * L + l) * row, 0, stream);
  }
}

// Token rows per work item: ~256 KiB of data (`nl` layers, all planes), so n blocks give enough items.
int64_t RowsPerItem(const ml::LayerCaches& c, int64_t nl) {
  int64_t token_bytes = 0;
  for (int p = 0; p < c.planes; ++p) token_bytes += nl * c.plane[p].hidden() * static_cast<int64_t>(c.elem);
  return std::max<int64_t>(1, std::min(c.plane[0].bs, (int64_t{256} << 10) / token_bytes));
}

// h2d of a tile of plane p: token rows [s0, s1) x layers [l0, l1) of host block `h` (plane p:
// [bs, L, hidden_p]) -> device block `blk` of those layers. The device side is, per layer (and head,
// BNSD), one contiguous range of s1 - s0 rows, written in order with streaming stores (stream) or plain
// copies for small transfers; the host side is s1 - s0 runs of (l1 - l0) rows each (L rows apart).
// Tiles of 16 token rows x 8 layers keep both sides in runs of >= 4 KiB for Llama BNSD (device: 16 x
// 256-byte head rows; host: 8 x 2 KiB) and the tile (256 KiB) L2-resident between the head passes; the
// hardware prefetchers follow runs that long. Measured on this project's 2-core VM (Llama-3-8B, 8192
// tokens, BNSD): 0.59-0.74 of memcpy with whole-block tiles (128 rows x 1 layer: host runs of one
// 2 KiB row, read in 256-byte pieces), 0.77-0.83 with 16 x 8; MLA (BSND, 1 KiB + 128 B rows)
// 0.78 -> 0.89. Software prefetch of the next tile did not help (0.74-0.79 vs 0.78-0.80).
constexpr int64_t kTileRows = 16, kTileLayers = 8;

inline void TileToCache(const ml::LayerCaches& c, int p, int64_t blk, const uint8_t* h, int64_t s0, int64_t s1,
                        int64_t l0, int64_t l1, bool stream) {
  const ml::Plane& pl = c.plane[p];
  const int64_t elem = static_cast<int64_t>(c.elem);
  const int64_t row = pl.hidden() * elem, stride = c.num_layers * row;
  const int64_t piece = pl.bnsd ? pl.head * elem : row;  // BNSD: [H, bs, D] block, host row [H, D]
  const int64_t pieces = pl.bnsd ? pl.heads : 1;
  if (pl.nz_c0 > 0) {  // NZ block [H*D/C0, bs, C0]: per layer the tile's rows as NZ pieces (nz_copy.h)
    for (int64_t l = l0; l < l1; ++l) {
      mskv::NzRunToCache(ml::NzOf(c, p, l), blk * pl.bs + s0, s1 - s0, h + (s0 * c.num_layers + l) * row, stride,
                         stream);
    }
    return;
  }
  stream = stream && piece >= 64;  // pieces shorter than a cache line (scale planes): plain stores
  for (int64_t l = l0; l < l1; ++l) {
    uint8_t* block = c.at(p, l) + blk * pl.bs * row;
    for (int64_t hh = 0; hh < pieces; ++hh) {
      uint8_t* dev = block + (hh * pl.bs + s0) * piece;
      const uint8_t* src = h + (s0 * c.num_layers + l) * row + hh * piece;
      for (int64_t s = s0; s < s1; ++s, dev += piece, src += stride) ml::Copy(dev, src, piece, stream);
    }
  }
}

// Zero-copy path, over the threads. h2d: items (block, token-row group, layer group), TileToCache.
// d2h: items (block, layer) too when every plane's row is >= 2 KiB; d2h with shorter rows (MLA: 1 KiB
// kv_c, 128 B k_pe) writes host rows that short scattered over the block; there items are (block, chunk
// of token rows) instead, whose host side is one contiguous range (measured here: MLA d2h 3 -> 8 GB/s;
// Llama BNSD d2h is better per layer).
void BlockCopy(const ml::LayerCaches& c, uint8_t* const* host, const void* ids, mskv::DType id_dtype, int64_t n,
               bool d2h, int64_t aiv, ml::LayerRange lr) {
  const int64_t bs = c.plane[0].bs, L = c.num_layers, elem = static_cast<int64_t>(c.elem), nl = lr.count();
  int64_t total = 0, min_row = INT64_MAX;  // total: bytes of the layers this call moves
  for (int p = 0; p < c.planes; ++p) {
    total += n * bs * nl * c.plane[p].hidden() * elem;
    min_row = std::min(min_row, c.plane[p].hidden() * elem);
  }
  const bool stream = total >= ml::kStreamBytes;
  if (!d2h) {
    // items (block, group of kTileRows token rows, group of kTileLayers layers), layer groups innermost; NZ
    // caches: (block, layer), each layer's block one run of block_size slots (whole lines on the cache side
    // but at the ends of each fractal's range, nz_copy.cpp; 16-row runs measured 0.5-0.8 of memcpy here with
    // caches 16 bytes past a line, whole blocks 0.8-1.1)
    const bool nz = c.plane[0].nz_c0 > 0;
    const int64_t rows = nz ? bs : std::min(bs, kTileRows), layers = nz ? 1 : std::min(nl, kTileLayers);
    const int64_t row_groups = (bs + rows - 1) / rows, layer_groups = (nl + layers - 1) / layers;
    const int64_t per_block = row_groups * layer_groups;
    ml::ParallelForCapped(n * per_block, total, aiv, [&](int64_t begin, int64_t end) {
      for (int64_t it = begin; it < end; ++it) {
        const int64_t i = it / per_block, s0 = (it % per_block) / layer_groups * rows;
        const int64_t l0 = lr.l0 + (it % layer_groups) * layers;
        const int64_t blk = mskv::ReadIndex(ids, id_dtype, i);
        for (int p = 0; p < c.planes; ++p) {
          if (blk < 0 || blk >= c.plane[p].nb) continue;
          const uint8_t* h = host[p] + i * bs * L * c.plane[p].hidden() * elem;
          TileToCache(c, p, blk, h, s0, std::min(bs, s0 + rows), l0, std::min(lr.l1, l0 + layers), stream);
        }
      }
      if (stream) ml::StreamFence();
    });
    return;
  }
  if (min_row >= 2048) {
    ml::ParallelForCapped(n * nl, total, aiv, [&](int64_t begin, int64_t end) {
      for (int64_t it = begin; it < end; ++it) {
        const int64_t i = it / nl, l = lr.l0 + it % nl;
        const int64_t blk = mskv::ReadIndex(ids, id_dtype, i);
        for (int p = 0; p < c.planes; ++p) {
          const int64_t row = c.plane[p].hidden() * elem;
          uint8_t* h = host[p] + (i * bs * L + l) * row;
          if (blk < 0 || blk >= c.plane[p].nb) {
            for (int64_t s = 0; s < bs; ++s) std::memset(h + s * L * row, 0, static_cast<size_t>(row));
            continue;
          }
          LayerRowsToHost(c, p, l, blk, 0, bs, h, L * row, stream);
        }
      }
      if (stream) ml::StreamFence();
    });
    return;
  }
  const int64_t rows = RowsPerItem(c, nl), chunks = (bs + rows - 1) / rows;
  ml::ParallelForCapped(n * chunks, total, aiv, [&](int64_t begin, int64_t end) {
    std::vector<uint8_t*> at(c.planes);
    for (int64_t it = begin; it < end; ++it) {
      const int64_t i = it / chunks, s0 = (it % chunks) * rows;
      for (int p = 0; p < c.planes; ++p) at[p] = host[p] + (i * bs + s0) * L * c.plane[p].hidden() * elem;
      BlockRowsToHost(c, at.data(), mskv::ReadIndex(ids, id_dtype, i), s0, std::min(bs, s0 + rows), stream, lr);
    }
    if (stream) ml::StreamFence();
  });
}


// The transfer of every plane of `c` (data planes, then the scale planes of a quantized transfer):
// `host[p]` the host blocks of plane p (`host_params[p]` its AOT param), block_ids at AOT param 0,
// staging at `st` (an empty tensor when absent).
int Run(const AotArgs& a, const ml::LayerCaches& c, const std::vector<int>& host_params, int data_planes, int st,
        bool d2h, int64_t aiv, ml::LayerRange lr) {
  const int64_t L = c.num_layers;
  const mskv::DType id_dtype = a.dtype(0);
  if (id_dtype != mskv::DType::kI32 && id_dtype != mskv::DType::kI64) throw KernelError("block_ids must be int32/int64");
  if (a.rank(0) != 1) throw KernelError("block_ids must be rank 1");
  const int64_t n = a.dim(0, 0);
  const int64_t elem = static_cast<int64_t>(c.elem);
  if (static_cast<int>(host_params.size()) != c.planes) throw KernelError("host planes do not match the caches");
  std::vector<uint8_t*> host(c.planes);
  for (int p = 0; p < c.planes; ++p) {
    const int idx = host_params[static_cast<size_t>(p)];
    const bool scale = p >= data_planes;  // float32 host blocks of a scale plane
    if (a.dtype(idx) != (scale ? mskv::DType::kF32 : c.dtype))
      throw KernelError(scale ? "scale host blocks must be float32" : "host block dtype differs from the caches");
    if (a.rank(idx) < 1 || a.dim(idx, 0) != n) throw KernelError("host blocks must have len(block_ids) blocks");
    const int64_t block_bytes = c.plane[p].bs * L * c.plane[p].hidden() * elem;  // one host block, all layers
    if (a.numel(idx) * static_cast<int64_t>(DTypeSize(a.dtype(idx))) != n * block_bytes)
      throw KernelError("host block shape does not match the caches");
    host[p] = a.ptr(idx);
  }
  if (n == 0) return 0;
  const void* ids = a.ptr<void>(0);
  ml::StrictCheckBlockIds(a, ids, id_dtype, n, c.plane[0].nb, /*distinct=*/!d2h);
  if (a.numel(st) > 0) {
    // Staged mode on the cpu backend: host memory is this device's memory, so copying host blocks into the
    // staging buffer first buys nothing; the buffer is checked (as on every backend) and then treated as
    // the scratch space it is - its contents after the call are unspecified - and the zero-copy path
    // runs. Results are identical by construction. (A two-copy path through L2-sized pieces measured
    // 0.45-0.59 of memcpy here for h2d and MLA d2h: on one core the fill and the scatter cannot overlap.)
    if (a.dtype(st) != c.dtype) throw KernelError("staging dtype differs from the caches");
    int64_t block_bytes = 0;  // one block of every plane (scale planes included), all layers
    for (int p = 0; p < c.planes; ++p) block_bytes += c.plane[p].bs * L * c.plane[p].hidden() * elem;
    if (a.numel(st) * elem < block_bytes) throw KernelError("staging holds less than one block of every plane");
  }
  BlockCopy(c, host.data(), ids, id_dtype, n, d2h, aiv, lr);
  return 0;
}

// Both entries: AOT params block_ids, staging, host_blocks (planes), kv_caches (L * tpl)[, scale_host_blocks
// (planes, float32 [n, bs, L, H] / MLA, DSA [n, bs, L, 1]), scale_caches (L * planes float32)]. The scale
// planes follow the data planes (ml::AppendScalePlanes: rows of 4 * heads bytes), so the same tiles move them.
int Call(const AotArgs& a, bool scales) {
  const ml::TransferAttrs t = ml::ReadTransferAttrs(a, mskv_attr::kLayoutBNSD);
  const std::vector<mskv::InputSpan> in = mskv::InputSpans(a, scales ? 6 : 4);
  if (in[2].count != t.planes || in[3].count != t.L * t.tpl || (scales && in[4].count != t.planes))
    throw KernelError("expected " + std::to_string(t.planes) + " host planes, " + std::to_string(t.L * t.tpl) +
                      " caches" + (scales ? " and " + std::to_string(t.planes) + " scale host planes" : std::string()));
  ml::LayerCaches c = ml::ParseLayerCaches(a, in[3].first, t.fmt, t.L, t.bnsd, t.nz);
  if (scales) ml::AppendScalePlanes(a, in[5].first, in[5].count, &c);
  std::vector<int> host_params;
  for (int p = 0; p < t.planes; ++p) host_params.push_back(in[2].first + p);
  for (int p = 0; scales && p < t.planes; ++p) host_params.push_back(in[4].first + p);
  return Run(a, c, host_params, t.planes, in[1].first, t.d2h, t.aiv, ml::ReadLayerRange(a, t.L));
}

}  // namespace

MSKV_AOT_EXPORT int MskvMultiLayerBlockTransfer(int nparam, void** params, int* ndims, int64_t** shapes,
                                            const char** dtypes, void* /*stream*/, void* extra) {
  MSKV_AOT_GUARD("multi_layer_block_transfer", {
    const ml::CountCall count_call;
    return Call(AotArgs{nparam, params, ndims, shapes, dtypes, static_cast<mindspore::AotExtra*>(extra)}, false);
  })
}

MSKV_AOT_EXPORT int MskvMultiLayerBlockTransferQuant(int nparam, void** params, int* ndims, int64_t** shapes,
                                                 const char** dtypes, void* /*stream*/, void* extra) {
  MSKV_AOT_GUARD("multi_layer_block_transfer_quant", {
    const ml::CountCall count_call;
    return Call(AotArgs{nparam, params, ndims, shapes, dtypes, static_cast<mindspore::AotExtra*>(extra)}, true);
  })
}
