// multi_layer_block_transfer, native CPU kernel ("cpu" backend): whole blocks of every layer between
// per-layer paged caches and token-major host blocks (HeteroFusedKernels "pcieThrough" style).
//
// AOT params (OpSpec order): block_ids [n] int32/int64, staging (optional), host_blocks... (dynamic,
// one tensor per plane), kv_caches... (dynamic, num_layers * tensors_per_layer, layer-major), then the
// int32 [1] status output. Attrs: kv_format, direction, cache_layout, num_layers, aiv_num.
// Host plane p: [n, block_size, L, H, D] (MLA/DSA: [n, block_size, L, hidden_p]), i.e. block i,
// token s, layer l is the row at ((i * bs + s) * L + l) * hidden_p elements: one contiguous piece per
// block. Device plane p of layer l: [nb, bs, H, D] (BSND) or [nb, H, bs, D] (BNSD).
// h2d: host block i -> device block block_ids[i]; d2h: device block block_ids[i] -> host block i.
// Ids outside [0, nb) are skipped by h2d and give zero host blocks in d2h (Python rejects them before
// launch; this only matters in graph mode). Work is split by (block, layer).
// staging present: the host blocks go through the staging buffer in chunks of whole blocks (one bulk
// copy per plane and chunk, then the scatter/gather from/to staging), as the Ascend "fused memcpy"
// path does with its device staging buffer. Results are identical to the direct path.
#include "multi_layer_common.h"

namespace {

using mskv::AotArgs;
using mskv::KernelError;
namespace ml = mskv::ml;

// Copies blocks [0, n) of `host[p]` (planes laid out [n, bs, L, hidden_p]) to/from the device blocks
// ids[0..n).
void BlockCopy(const ml::LayerCaches& c, uint8_t* const* host, const void* ids, mskv::DType id_dtype,
               int64_t id_offset, int64_t n, bool d2h, int64_t aiv) {
  const int64_t L = c.num_layers;
  const int64_t elem = static_cast<int64_t>(c.elem);
  int64_t bytes_per_block_layer = 0;
  for (int p = 0; p < c.planes; ++p) bytes_per_block_layer += c.plane[p].bs * c.plane[p].hidden() * elem;
  const bool stream = n * L * bytes_per_block_layer >= ml::kStreamBytes;
  ml::ParallelForCapped(n * L, n * L * bytes_per_block_layer, aiv, [&](int64_t begin, int64_t end) {
    for (int64_t it = begin; it < end; ++it) {
      const int64_t i = it / L, l = it % L;
      const int64_t blk = mskv::ReadIndex(ids, id_dtype, id_offset + i);
      for (int p = 0; p < c.planes; ++p) {
        const ml::Plane& pl = c.plane[p];
        const int64_t row = pl.hidden() * elem;          // one token of one layer
        const int64_t host_stride = L * row;              // next token of the same layer
        uint8_t* h = host[p] + (i * pl.bs * L + l) * row;
        if (blk < 0 || blk >= pl.nb) {
          if (d2h)
            for (int64_t s = 0; s < pl.bs; ++s) std::memset(h + s * host_stride, 0, static_cast<size_t>(row));
          continue;
        }
        uint8_t* dev = c.at(p, l) + blk * pl.bs * row;  // the device block (bs * hidden elements)
        if (!pl.bnsd) {
          for (int64_t s = 0; s < pl.bs; ++s) {
            if (d2h) ml::Copy(h + s * host_stride, dev + s * row, row, stream);
            else ml::Copy(dev + s * row, h + s * host_stride, row, stream);
          }
        } else {
          // BNSD block [H, bs, D] <-> host [bs, (L,) H, D]: the loop runs along the destination, so the
          // (streaming) stores go to one contiguous range at a time (writes scattered over H ranges ran
          // at a fifth of the speed on this machine), and the strided side is read.
          const int64_t hb = pl.head * elem;
          if (d2h) {
            for (int64_t s = 0; s < pl.bs; ++s)
              for (int64_t hh = 0; hh < pl.heads; ++hh)
                ml::Copy(h + s * host_stride + hh * hb, dev + (hh * pl.bs + s) * hb, hb, stream);
          } else {
            for (int64_t hh = 0; hh < pl.heads; ++hh)
              for (int64_t s = 0; s < pl.bs; ++s)
                ml::Copy(dev + (hh * pl.bs + s) * hb, h + s * host_stride + hh * hb, hb, stream);
          }
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
    const int64_t fixed = nparam - 1 - planes - L * tpl;  // block_ids [+ staging]
    if (fixed != 1 && fixed != 2)
      throw KernelError("expected block_ids, [staging], " + std::to_string(planes) + " host planes and " +
                        std::to_string(L * tpl) + " caches, got " + std::to_string(nparam - 1) + " inputs");
    const bool staged = fixed == 2;
    const int host0 = static_cast<int>(fixed);
    const ml::LayerCaches c = ml::ParseLayerCaches(a, host0 + planes, fmt, L, layout == "BNSD");
    const mskv::DType id_dtype = a.dtype(0);
    if (id_dtype != mskv::DType::kI32 && id_dtype != mskv::DType::kI64) throw KernelError("block_ids must be int32/int64");
    if (a.rank(0) != 1) throw KernelError("block_ids must be rank 1");
    const int64_t n = a.dim(0, 0);
    const int64_t elem = static_cast<int64_t>(c.elem);
    std::vector<uint8_t*> host(planes);
    std::vector<int64_t> block_bytes(planes);  // one host block of plane p
    int64_t all_block_bytes = 0;
    for (int p = 0; p < planes; ++p) {
      const int idx = host0 + p;
      if (a.dtype(idx) != c.dtype) throw KernelError("host block dtype differs from the caches");
      if (a.rank(idx) < 1 || a.dim(idx, 0) != n) throw KernelError("host blocks must have len(block_ids) blocks");
      block_bytes[p] = c.plane[p].bs * L * c.plane[p].hidden() * elem;
      if (a.numel(idx) * elem != n * block_bytes[p]) throw KernelError("host block shape does not match the caches");
      host[p] = a.ptr(idx);
      all_block_bytes += block_bytes[p];
    }
    if (n == 0) return 0;
    const void* ids = a.ptr<void>(0);
    if (!staged) {
      BlockCopy(c, host.data(), ids, id_dtype, 0, n, d2h, aiv);
      return 0;
    }
    if (a.dtype(1) != c.dtype) throw KernelError("staging dtype differs from the caches");
    const int64_t staging_bytes = a.numel(1) * elem;
    const int64_t chunk = staging_bytes / all_block_bytes;
    if (chunk < 1) throw KernelError("staging holds less than one block of every plane");
    uint8_t* staging = a.ptr(1);
    std::vector<uint8_t*> staged_planes(planes);
    for (int64_t i0 = 0; i0 < n; i0 += chunk) {
      const int64_t m = std::min(chunk, n - i0);
      int64_t off = 0;
      for (int p = 0; p < planes; ++p) {
        staged_planes[p] = staging + off;
        off += m * block_bytes[p];
      }
      if (!d2h)
        for (int p = 0; p < planes; ++p)
          ml::ParallelCopy(staged_planes[p], host[p] + i0 * block_bytes[p], m * block_bytes[p], aiv);
      BlockCopy(c, staged_planes.data(), ids, id_dtype, i0, m, d2h, aiv);
      if (d2h)
        for (int p = 0; p < planes; ++p)
          ml::ParallelCopy(host[p] + i0 * block_bytes[p], staged_planes[p], m * block_bytes[p], aiv);
    }
  })
}
