// multi_layer_kv_transfer, native CPU kernel ("cpu" backend): all layers' K/V rows of T tokens
// between paged caches and one contiguous buffer (LMCache "KV_2LTD" style), in one call.
//
// AOT params (OpSpec order): buffer, slot_mapping [T] int32/int64, kv_caches... (list input:
// num_layers * tensors_per_layer tensors, layer-major; dyn_input_sizes), then the int32 [1] status output.
// Attrs: kv_format (1..4), direction (int code: 1 h2d, 2 d2h), cache_layout (int code: 0 BSND, 1 BNSD, 2 NZ;
// op_host/mskv_attr_codes.h), num_layers, aiv_num (thread cap, 0 = all); mskv_layer (optional, the layer-wise
// worker's: move that layer only, ml::ReadLayerRange). NZ caches ([nb, H*D/C0, bs, C0], nz_copy.h; their scale
// caches BSND) keep the ND buffer rows.
// Buffer: plane p, layer l, token t is the row at byte offset
//   plane_off[p] + (l * T + t) * hidden_p * elem,  plane_off[p] = sum_{q<p} L * T * hidden_q * elem,
// i.e. [2, L, T, H*D] for MERGED/SEPARATE and the planes [L, T, hidden_p] one after another for MLA/DSA.
// d2h: buffer rows of tokens with slot < 0 or slot >= num_slots become zeros. h2d: such tokens are
// skipped. Work is split by (plane, layer, token chunk) over the threads; all offsets are 64-bit.
// MskvMultiLayerKvTransferQuant (multi_layer_kv_transfer with scale_caches): a fourth input, the list of
// L * planes float32 scale caches, whose planes follow the data planes in the same loop (AppendScalePlanes,
// multi_layer_common.h: rows of 4 * heads bytes), so the buffer holds the data planes, then the scale planes.
#include "multi_layer_common.h"

namespace {

using mskv::AotArgs;
using mskv::KernelError;
namespace ml = mskv::ml;

// Tokens per work item: about 64 KiB of rows, so L * chunks items keep both cores busy even for one
// layer, and one item's rows stay in L2. NZ planes: at least block_size tokens, so that a prefill's runs of
// consecutive slots are whole blocks: a run's range of each fractal then has partial lines only at its two
// ends, which matter when the cache is not on a 64-byte line (nz_copy.cpp; measured here with caches 16 bytes
// past a line, h2d: 0.6-0.75 of memcpy with 32-token items, 0.85-1.1 with whole blocks).
constexpr int64_t kChunkBytes = int64_t{64} << 10;

// The transfer of every plane of `c` (data planes, then scale planes if any) of the layers `lr` between the
// caches and the buffer (AOT param 0), with slot_mapping at AOT param 1.
int Transfer(const AotArgs& a, const ml::LayerCaches& c, bool d2h, int64_t L, int64_t aiv, ml::LayerRange lr) {
  if (a.dtype(0) != c.dtype) throw KernelError("buffer dtype differs from the caches");
  const mskv::DType sd = a.dtype(1);
  if (sd != mskv::DType::kI32 && sd != mskv::DType::kI64) throw KernelError("slot_mapping must be int32/int64");
  if (a.rank(1) != 1) throw KernelError("slot_mapping must be rank 1");
  const int64_t T = a.dim(1, 0);
  const int64_t elem = static_cast<int64_t>(c.elem);
  // Buffer plane offsets and size check (the kernel never trusts Python here: graph mode).
  std::vector<int64_t> plane_off(c.planes + 1, 0), row_bytes(c.planes), chunk(c.planes), items(c.planes + 1, 0);
  int64_t moved = 0;  // bytes of the layers this call moves
  for (int p = 0; p < c.planes; ++p) {
    row_bytes[p] = c.plane[p].hidden() * elem;
    plane_off[p + 1] = plane_off[p] + L * T * row_bytes[p];
    chunk[p] = std::max<int64_t>(1, kChunkBytes / std::max<int64_t>(1, row_bytes[p]));
    if (c.plane[p].nz_c0 > 0) chunk[p] = std::max(chunk[p], c.plane[p].bs);  // NZ: whole blocks (kChunkBytes)
    items[p + 1] = items[p] + lr.count() * ((T + chunk[p] - 1) / chunk[p]);
    moved += lr.count() * T * row_bytes[p];
  }
  if (a.numel(0) * elem != plane_off[c.planes]) throw KernelError("buffer size does not match the caches");
  if (T == 0) return 0;

  uint8_t* buffer = a.ptr(0);
  const void* slots = a.ptr<void>(1);
  const int64_t num_slots = c.plane[0].slots();
  ml::StrictCheckSlots(a, slots, sd, T, num_slots, /*allow_duplicates=*/d2h);
  const bool stream = moved >= ml::kStreamBytes;
  ml::ParallelForCapped(items[c.planes], moved, aiv, [&](int64_t begin, int64_t end) {
    int p = 0;
    for (int64_t it = begin; it < end; ++it) {
      while (it >= items[p + 1]) ++p;
      const int64_t local = it - items[p];
      const int64_t per_layer = (T + chunk[p] - 1) / chunk[p];
      const int64_t l = lr.l0 + local / per_layer;
      const int64_t t0 = (local % per_layer) * chunk[p];
      const int64_t t1 = std::min(T, t0 + chunk[p]);
      const ml::Plane& pl = c.plane[p];
      // pieces shorter than a cache line (the 4 * H-byte rows of a scale plane) go with plain stores:
      // scattered partial-line streaming stores ran 1.6-2.7x slower here (h2d with scale caches)
      const bool stream_p = stream && (pl.bnsd ? pl.head * elem : row_bytes[p]) >= 64;
      uint8_t* cache = c.at(p, l);
      uint8_t* row = buffer + plane_off[p] + (l * T + t0) * row_bytes[p];
      if (pl.nz_c0 > 0) {  // NZ: runs of consecutive slots of one block move as tiles (nz_copy.h)
        const mskv::NzPlane np = ml::NzOf(c, p, l);
        auto slot_at = [&](int64_t t) { return mskv::ReadIndex(slots, sd, t); };
        for (int64_t t = t0; t < t1;) {
          const int64_t slot = slot_at(t);
          if (slot < 0 || slot >= num_slots) {
            if (d2h) std::memset(row, 0, static_cast<size_t>(row_bytes[p]));
            ++t, row += row_bytes[p];
            continue;
          }
          const int64_t n = mskv::NzRunLength(slot_at, t, t1, pl.bs, pl.bs);
          if (d2h) mskv::NzRunFromCache(np, slot, n, row, row_bytes[p], stream);
          else mskv::NzRunToCache(np, slot, n, row, row_bytes[p], stream);
          t += n, row += n * row_bytes[p];
        }
        continue;
      }
      if (pl.bnsd && !d2h) {
        // BNSD h2d: one head at a time, so the stores run along one contiguous cache range (the block's
        // [bs, D] piece of that head) instead of being scattered over H ranges (5x slower here).
        const int64_t hb = pl.head * static_cast<int64_t>(c.elem);
        for (int64_t h = 0; h < pl.heads; ++h) {
          for (int64_t t = t0; t < t1; ++t) {
            const int64_t slot = mskv::ReadIndex(slots, sd, t);
            if (slot < 0 || slot >= num_slots) continue;
            const int64_t blk = slot / pl.bs, off = slot % pl.bs;
            ml::Copy(cache + ((blk * pl.heads + h) * pl.bs + off) * hb, row + (t - t0) * row_bytes[p] + h * hb, hb,
                     stream_p);
          }
        }
        continue;
      }
      for (int64_t t = t0; t < t1;) {
        const int64_t slot = mskv::ReadIndex(slots, sd, t);
        if (slot < 0 || slot >= num_slots) {
          if (d2h) std::memset(row, 0, static_cast<size_t>(row_bytes[p]));
          ++t, row += row_bytes[p];
          continue;
        }
        if (!pl.bnsd) {
          // tokens with consecutive slots are one contiguous piece on both sides (a block's tokens)
          int64_t run = 1;
          while (t + run < t1 && slot + run < num_slots && mskv::ReadIndex(slots, sd, t + run) == slot + run) ++run;
          uint8_t* cs = cache + slot * row_bytes[p];
          if (d2h) ml::Copy(row, cs, run * row_bytes[p], stream_p);
          else ml::Copy(cs, row, run * row_bytes[p], stream_p);
          t += run, row += run * row_bytes[p];
          continue;
        }
        ml::CopyTokenRow(cache, row, pl, slot, c.elem, !d2h, stream_p);
        ++t, row += row_bytes[p];
      }
    }
    if (stream) ml::StreamFence();
  });
  return 0;
}

// Both entries: AOT params buffer, slot_mapping, kv_caches (L * tpl)[, scale_caches (L * planes)].
int Call(const AotArgs& a, bool scales) {
  const ml::TransferAttrs t = ml::ReadTransferAttrs(a, mskv_attr::kLayoutBSND);
  const std::vector<mskv::InputSpan> in = mskv::InputSpans(a, scales ? 4 : 3);
  if (in[2].count != t.L * t.tpl)
    throw KernelError("expected num_layers*" + std::to_string(t.tpl) + " = " + std::to_string(t.L * t.tpl) +
                      " caches, got " + std::to_string(in[2].count));
  ml::LayerCaches c = ml::ParseLayerCaches(a, in[2].first, t.fmt, t.L, t.bnsd, t.nz);
  if (scales) ml::AppendScalePlanes(a, in[3].first, in[3].count, &c);
  return Transfer(a, c, t.d2h, t.L, t.aiv, ml::ReadLayerRange(a, t.L));
}

}  // namespace

MSKV_AOT_EXPORT int MskvMultiLayerKvTransfer(int nparam, void** params, int* ndims, int64_t** shapes,
                                         const char** dtypes, void* /*stream*/, void* extra) {
  MSKV_AOT_GUARD("multi_layer_kv_transfer", {
    const ml::CountCall count_call;
    return Call(AotArgs{nparam, params, ndims, shapes, dtypes, static_cast<mindspore::AotExtra*>(extra)}, false);
  })
}

MSKV_AOT_EXPORT int MskvMultiLayerKvTransferQuant(int nparam, void** params, int* ndims, int64_t** shapes,
                                         const char** dtypes, void* /*stream*/, void* extra) {
  MSKV_AOT_GUARD("multi_layer_kv_transfer_quant", {
    const ml::CountCall count_call;
    return Call(AotArgs{nparam, params, ndims, shapes, dtypes, static_cast<mindspore::AotExtra*>(extra)}, true);
  })
}
