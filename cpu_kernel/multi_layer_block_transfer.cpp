// multi_layer_block_transfer, native CPU kernel ("cpu" backend): whole blocks of every layer between
// per-layer paged caches and token-major host blocks (HeteroFusedKernels "pcieThrough" style).
//
// AOT params (OpSpec order): block_ids [n] int32/int64, staging (optional: an empty [0] tensor when
// absent), host_blocks... (list, one tensor per plane), kv_caches... (list, num_layers *
// tensors_per_layer, layer-major), then the int32 [1] status output; the list lengths come from
// dyn_input_sizes (mskv::InputSpans). Attrs: kv_format, direction, cache_layout, num_layers, aiv_num.
// Host plane p: [n, block_size, L, H, D] (MLA/DSA: [n, block_size, L, hidden_p]), i.e. block i,
// token s, layer l is the row at ((i * bs + s) * L + l) * hidden_p elements: one contiguous piece per
// block. Device plane p of layer l: [nb, bs, H, D] (BSND) or [nb, H, bs, D] (BNSD).
// h2d: host block i -> device block block_ids[i]; d2h: device block block_ids[i] -> host block i.
// Ids outside [0, nb) are skipped by h2d and give zero host blocks in d2h (Python rejects them before
// launch; this only matters in graph mode). Work is split by (block, layer).
// staging present: the host blocks go through the staging buffer in chunks of whole blocks (one bulk
// copy per plane and chunk, then the scatter/gather from/to staging), as the Ascend "fused memcpy"
// path does with its device staging buffer; each thread uses its own part of the buffer. Results are
// identical to the direct path. (On a CPU this is two passes over the data; it exists for parity.)
#include "multi_layer_common.h"

#include <climits>

namespace {

using mskv::AotArgs;
using mskv::KernelError;
namespace ml = mskv::ml;

// Rows [s0, s1) of device block `blk` of plane p, layer l <-> host rows starting at `h` (row s0),
// `host_stride` bytes apart. The loops run along the destination so that (streaming) stores go to
// one contiguous range at a time; stores scattered over many ranges ran up to 5x slower here.
inline void LayerRows(const ml::LayerCaches& c, int p, int64_t l, int64_t blk, int64_t s0, int64_t s1, uint8_t* h,
                      int64_t host_stride, bool d2h, bool stream) {
  const ml::Plane& pl = c.plane[p];
  const int64_t elem = static_cast<int64_t>(c.elem);
  const int64_t row = pl.hidden() * elem;
  uint8_t* dev = c.at(p, l) + blk * pl.bs * row;  // the device block (bs * hidden elements)
  if (!pl.bnsd) {
    for (int64_t s = s0; s < s1; ++s) {
      if (d2h) ml::Copy(h + (s - s0) * host_stride, dev + s * row, row, stream);
      else ml::Copy(dev + s * row, h + (s - s0) * host_stride, row, stream);
    }
    return;
  }
  const int64_t hb = pl.head * elem;  // BNSD block [H, bs, D] <-> host row [H, D]
  if (d2h) {
    for (int64_t s = s0; s < s1; ++s)
      for (int64_t hh = 0; hh < pl.heads; ++hh)
        ml::Copy(h + (s - s0) * host_stride + hh * hb, dev + (hh * pl.bs + s) * hb, hb, stream);
  } else {
    for (int64_t hh = 0; hh < pl.heads; ++hh)
      for (int64_t s = s0; s < s1; ++s)
        ml::Copy(dev + (hh * pl.bs + s) * hb, h + (s - s0) * host_stride + hh * hb, hb, stream);
  }
}

// Token rows [s0, s1) of a host block (all layers and planes; `rows[p]` points at token s0, layer 0 of
// plane p, laid out [s1 - s0, L, hidden_p]) <-> device block `blk`. h2d goes layer by layer (each layer's device block is the contiguous side);
// d2h goes token by token, layers inside (the host rows of one token are the contiguous side). Ids
// outside [0, nb): h2d skips, d2h writes zeros.
void BlockRows(const ml::LayerCaches& c, uint8_t* const* host_rows, int64_t blk, int64_t s0, int64_t s1, bool d2h,
               bool stream) {
  const int64_t L = c.num_layers;
  for (int p = 0; p < c.planes; ++p) {
    const ml::Plane& pl = c.plane[p];
    const int64_t row = pl.hidden() * static_cast<int64_t>(c.elem);
    uint8_t* rows = host_rows[p];
    if (blk < 0 || blk >= pl.nb) {
      if (d2h) std::memset(rows, 0, static_cast<size_t>((s1 - s0) * L * row));
      continue;
    }
    if (d2h) {
      for (int64_t s = s0; s < s1; ++s)
        for (int64_t l = 0; l < L; ++l) LayerRows(c, p, l, blk, s, s + 1, rows + ((s - s0) * L + l) * row, 0, true, stream);
    } else {
      for (int64_t l = 0; l < L; ++l) LayerRows(c, p, l, blk, s0, s1, rows + l * row, L * row, false, stream);
    }
  }
}

// Token rows per work item: ~256 KiB of data (all layers and planes), so n blocks give enough items.
int64_t RowsPerItem(const ml::LayerCaches& c) {
  int64_t token_bytes = 0;
  for (int p = 0; p < c.planes; ++p) token_bytes += c.num_layers * c.plane[p].hidden() * static_cast<int64_t>(c.elem);
  return std::max<int64_t>(1, std::min(c.plane[0].bs, (int64_t{256} << 10) / token_bytes));
}

// Zero-copy path, over the threads. Items (block, layer) - a whole device block, read or written as one
// range, with host rows of `row` bytes on the other side - for h2d, and for d2h when every plane's
// row is >= 2 KiB. d2h with shorter rows (MLA: 1 KiB kv_c, 128 B k_pe) writes host rows that short
// scattered over the block; there items are (block, chunk of token rows) instead, whose host side is
// one contiguous range (measured here: MLA d2h 3 -> 8 GB/s; Llama BNSD d2h is better per layer).
void BlockCopy(const ml::LayerCaches& c, uint8_t* const* host, const void* ids, mskv::DType id_dtype, int64_t n,
               bool d2h, int64_t aiv) {
  const int64_t bs = c.plane[0].bs, L = c.num_layers, elem = static_cast<int64_t>(c.elem);
  int64_t total = 0, min_row = INT64_MAX;
  for (int p = 0; p < c.planes; ++p) {
    total += n * bs * L * c.plane[p].hidden() * elem;
    min_row = std::min(min_row, c.plane[p].hidden() * elem);
  }
  const bool stream = total >= ml::kStreamBytes;
  if (!d2h || min_row >= 2048) {
    ml::ParallelForCapped(n * L, total, aiv, [&](int64_t begin, int64_t end) {
      for (int64_t it = begin; it < end; ++it) {
        const int64_t i = it / L, l = it % L;
        const int64_t blk = mskv::ReadIndex(ids, id_dtype, i);
        for (int p = 0; p < c.planes; ++p) {
          const int64_t row = c.plane[p].hidden() * elem;
          uint8_t* h = host[p] + (i * bs * L + l) * row;
          if (blk < 0 || blk >= c.plane[p].nb) {
            if (d2h)
              for (int64_t s = 0; s < bs; ++s) std::memset(h + s * L * row, 0, static_cast<size_t>(row));
            continue;
          }
          LayerRows(c, p, l, blk, 0, bs, h, L * row, d2h, stream);
        }
      }
      if (stream) ml::StreamFence();
    });
    return;
  }
  const int64_t rows = RowsPerItem(c), chunks = (bs + rows - 1) / rows;
  ml::ParallelForCapped(n * chunks, total, aiv, [&](int64_t begin, int64_t end) {
    std::vector<uint8_t*> at(c.planes);
    for (int64_t it = begin; it < end; ++it) {
      const int64_t i = it / chunks, s0 = (it % chunks) * rows;
      for (int p = 0; p < c.planes; ++p) at[p] = host[p] + (i * bs + s0) * L * c.plane[p].hidden() * elem;
      BlockRows(c, at.data(), mskv::ReadIndex(ids, id_dtype, i), s0, std::min(bs, s0 + rows), true, stream);
    }
    if (stream) ml::StreamFence();
  });
}

// Staged path: the staging buffer is cut into one lane per thread, and each lane moves its share of the
// blocks through its part of the buffer a few token rows (all layers, <= 1.5 MiB) at a time: bulk copy of
// those rows of the host block into staging, then the scatter from staging (h2d), or the gather into
// staging then the bulk copy out (d2h). Pieces that small stay in the core's L2, so the data crosses
// DRAM about once, as in the direct path. One parallel region per call. (On Ascend the staging copy is
// a DMA of whole blocks followed by the on-device scatter; the buffer holds at least one block.)
void StagedCopy(const ml::LayerCaches& c, uint8_t* const* host, const void* ids, mskv::DType id_dtype, int64_t n,
                uint8_t* staging, int64_t staging_bytes, bool d2h, int64_t aiv) {
  constexpr int64_t kPieceBytes = int64_t{1536} << 10;  // 3/4 of this machine's 2 MiB L2
  const int planes = c.planes;
  const int64_t L = c.num_layers, bs = c.plane[0].bs;
  std::vector<int64_t> token_bytes(planes);  // one token of one host block, all layers, plane p
  int64_t all_token_bytes = 0;
  for (int p = 0; p < planes; ++p) {
    token_bytes[p] = L * c.plane[p].hidden() * static_cast<int64_t>(c.elem);
    all_token_bytes += token_bytes[p];
  }
  const int64_t capacity = staging_bytes / (bs * all_token_bytes);  // whole blocks the buffer holds
  if (capacity < 1) throw KernelError("staging holds less than one block of every plane");
  const int64_t threads = aiv > 0 ? std::min<int64_t>(aiv, mskv::NumThreads()) : mskv::NumThreads();
  const int64_t lanes = std::max<int64_t>(1, std::min({threads, capacity, n}));
  const int64_t lane_bytes = staging_bytes / lanes;
  const int64_t rows = std::max<int64_t>(1, std::min(bs, std::min(lane_bytes, kPieceBytes) / all_token_bytes));
  const bool stream = n * bs * all_token_bytes >= ml::kStreamBytes;
  ml::ParallelForCapped(lanes, n * bs * all_token_bytes, aiv, [&](int64_t lb, int64_t le) {
    std::vector<uint8_t*> staged(planes);
    for (int64_t lane = lb; lane < le; ++lane) {
      uint8_t* area = staging + lane * lane_bytes;
      for (int64_t i = lane * n / lanes; i < (lane + 1) * n / lanes; ++i) {
        const int64_t blk = mskv::ReadIndex(ids, id_dtype, i);
        for (int64_t s0 = 0; s0 < bs; s0 += rows) {
          const int64_t s1 = std::min(bs, s0 + rows);
          int64_t off = 0;
          for (int p = 0; p < planes; ++p) {
            staged[p] = area + off;  // host rows [s1 - s0, L, hidden_p], as in the host block
            off += (s1 - s0) * token_bytes[p];
          }
          auto host_rows = [&](int p) { return host[p] + (i * bs + s0) * token_bytes[p]; };
          if (!d2h)
            for (int p = 0; p < planes; ++p) ml::CopyBytes(staged[p], host_rows(p), (s1 - s0) * token_bytes[p]);
          BlockRows(c, staged.data(), blk, s0, s1, d2h, stream && !d2h);
          if (d2h)
            for (int p = 0; p < planes; ++p) ml::Copy(host_rows(p), staged[p], (s1 - s0) * token_bytes[p], stream);
        }
      }
    }
    if (stream) ml::StreamFence();
  });
}

}  // namespace

MSKV_AOT_EXPORT int MultiLayerBlockTransfer(int nparam, void** params, int* ndims, int64_t** shapes,
                                            const char** dtypes, void* /*stream*/, void* extra) {
  MSKV_AOT_GUARD("multi_layer_block_transfer", {
    const ml::CountCall count_call;
    AotArgs a{nparam, params, ndims, shapes, dtypes, static_cast<mindspore::AotExtra*>(extra)};
    const int64_t fmt = a.attr_int("kv_format", 0);
    const std::string direction = a.attr_str("direction", "");
    const std::string layout = a.attr_str("cache_layout", "BNSD");
    const int64_t L = a.attr_int("num_layers", 0);
    const int64_t aiv = a.attr_int("aiv_num", 0);
    ml::CheckFormat(fmt);
    if (direction != "d2h" && direction != "h2d") throw KernelError("unknown direction " + direction);
    const bool d2h = direction == "d2h";
    if (layout != "BSND" && layout != "BNSD") throw KernelError("unknown cache_layout " + layout);
    const int planes = ml::PlanesOf(fmt);
    const int tpl = ml::TensorsPerLayer(fmt);
    const std::vector<mskv::InputSpan> in = mskv::InputSpans(a, 4);  // block_ids, staging, host_blocks, kv_caches
    if (in[2].count != planes || in[3].count != L * tpl)
      throw KernelError("expected " + std::to_string(planes) + " host planes and " + std::to_string(L * tpl) +
                        " caches, got " + std::to_string(in[2].count) + " and " + std::to_string(in[3].count));
    const bool staged = a.numel(in[1].first) > 0;
    const int host0 = in[2].first;
    const ml::LayerCaches c = ml::ParseLayerCaches(a, in[3].first, fmt, L, layout == "BNSD");
    const mskv::DType id_dtype = a.dtype(0);
    if (id_dtype != mskv::DType::kI32 && id_dtype != mskv::DType::kI64) throw KernelError("block_ids must be int32/int64");
    if (a.rank(0) != 1) throw KernelError("block_ids must be rank 1");
    const int64_t n = a.dim(0, 0);
    const int64_t elem = static_cast<int64_t>(c.elem);
    std::vector<uint8_t*> host(planes);
    for (int p = 0; p < planes; ++p) {
      const int idx = host0 + p;
      if (a.dtype(idx) != c.dtype) throw KernelError("host block dtype differs from the caches");
      if (a.rank(idx) < 1 || a.dim(idx, 0) != n) throw KernelError("host blocks must have len(block_ids) blocks");
      const int64_t block_bytes = c.plane[p].bs * L * c.plane[p].hidden() * elem;  // one host block, all layers
      if (a.numel(idx) * elem != n * block_bytes) throw KernelError("host block shape does not match the caches");
      host[p] = a.ptr(idx);
    }
    if (n == 0) return 0;
    const void* ids = a.ptr<void>(0);
    ml::StrictCheckBlockIds(a, ids, id_dtype, n, c.plane[0].nb, /*distinct=*/!d2h);
    if (!staged) {
      BlockCopy(c, host.data(), ids, id_dtype, n, d2h, aiv);
      return 0;
    }
    const int st = in[1].first;
    if (a.dtype(st) != c.dtype) throw KernelError("staging dtype differs from the caches");
    StagedCopy(c, host.data(), ids, id_dtype, n, a.ptr(st), a.numel(st) * elem, d2h, aiv);
  })
}
