// Shared row writer (slot scatter) and block copier of the copy operators. See kv_copy.h.
#include "kv_copy.h"

#include <algorithm>
#include <cstdlib>

#include "index_check.h"
#include "stream_copy.h"

namespace mskv {

namespace {

// MS_KVCACHE_STREAM_BYTES if set to a positive number, else `dflt`.
int64_t StreamBytesFromEnv(int64_t dflt) {
  const char* env = std::getenv("MS_KVCACHE_STREAM_BYTES");
  const long long v = env ? std::atoll(env) : 0;
  return v > 0 ? static_cast<int64_t>(v) : dflt;
}

}  // namespace

// See stream_copy.h.
int64_t StreamThresholdBytes() {
  static const int64_t n = StreamBytesFromEnv(int64_t{8} << 20);  // 8 MiB
  return n;
}

int64_t CopyStreamThresholdBytes() {
  static const int64_t n = StreamBytesFromEnv(int64_t{256} << 10);  // 256 KiB
  return n;
}

namespace {

// Where row `slot` of a plane lies in its cache: `pieces` pieces of `piece_bytes`, `stride` bytes
// apart from `base`. BSND rows are one contiguous piece (heads * head_bytes); BNSD rows are `heads`
// pieces of head_bytes, block_size rows apart.
struct RowPlace {
  uint8_t* base;
  int64_t pieces;
  int64_t piece_bytes;
  int64_t stride;
};

inline RowPlace PlaceRow(const SlotPlane& p, int64_t slot, int64_t block_size) {
  if (!p.bnsd || p.heads == 1) {
    const int64_t row_bytes = p.heads * p.head_bytes;
    return {p.cache + slot * row_bytes, 1, row_bytes, 0};
  }
  const int64_t block = slot / block_size, off = slot % block_size;
  return {p.cache + (block * p.heads * block_size + off) * p.head_bytes, p.heads, p.head_bytes,
          block_size * p.head_bytes};
}

// Copy one token's row of a plane (contiguous at src) into its cache at `slot`.
inline void WriteRow(const SlotPlane& p, const uint8_t* src, int64_t slot, int64_t block_size, bool stream) {
  const RowPlace r = PlaceRow(p, slot, block_size);
  for (int64_t h = 0; h < r.pieces; ++h) {
    StreamCopy(r.base + h * r.stride, src + h * r.piece_bytes, r.piece_bytes, stream);
  }
}

// Prefetch the first line of every piece of row `slot` (see PrefetchLine).
inline void PrefetchRow(const SlotPlane& p, int64_t slot, int64_t block_size) {
  const RowPlace r = PlaceRow(p, slot, block_size);
  for (int64_t h = 0; h < r.pieces; ++h) PrefetchLine(r.base + h * r.stride);
}

// How many tokens ahead the streaming scatter prefetches its destination rows (4-32 measured alike).
constexpr int64_t kPrefetchTokens = 16;

}  // namespace

void ScatterSlots(const SlotPlane* planes, int num_planes, const void* slots, DType slot_dtype,
                  int64_t num_tokens, int64_t num_blocks, int64_t block_size, bool slots_distinct) {
  if (num_tokens <= 0 || num_planes <= 0) return;
  const int64_t num_slots = num_blocks * block_size;
  int64_t token_bytes = 0;
  for (int i = 0; i < num_planes; ++i) token_bytes += planes[i].heads * planes[i].head_bytes;
  const int64_t total = num_tokens * token_bytes;
  const bool stream = total >= CopyStreamThresholdBytes();
  auto write = [&](int64_t t, int64_t slot) {
    for (int i = 0; i < num_planes; ++i) {
      WriteRow(planes[i], planes[i].src + t * planes[i].src_row_bytes, slot, block_size, stream);
    }
  };
  if (slots_distinct || total < ParallelThresholdBytes() || NumThreads() <= 1 ||
      SlotsDistinct(slots, DTypeSize(slot_dtype), num_tokens, num_slots)) {
    // No slot repeats (always so in PyNative, where repeats are rejected): split tokens into ranges,
    // which reads the source rows sequentially.
    auto prefetch = [&](int64_t t) {
      const int64_t slot = ReadIndex(slots, slot_dtype, t);
      if (slot < 0 || slot >= num_slots) return;
      for (int i = 0; i < num_planes; ++i) PrefetchRow(planes[i], slot, block_size);
    };
    ParallelFor(num_tokens, total, [&](int64_t begin, int64_t end) {
      if (stream) {
        for (int64_t t = begin; t < std::min(end, begin + kPrefetchTokens); ++t) prefetch(t);
      }
      for (int64_t t = begin; t < end; ++t) {
        if (stream && t + kPrefetchTokens < end) prefetch(t + kPrefetchTokens);
        const int64_t slot = ReadIndex(slots, slot_dtype, t);
        if (slot >= 0 && slot < num_slots) write(t, slot);
      }
      if (stream) StreamFence();
    });
    return;
  }
  // A slot repeats (possible in graph mode): chunks own slots, not tokens. Chunk `o` writes the tokens
  // whose slot falls in a granule g with g % owners == o, scanning the whole (small) slot array in
  // token order, so a repeated slot is always written by one chunk and ends with the LAST token's row,
  // as in a sequential loop, and a row is never torn.
  const int64_t granule = std::max<int64_t>(1, 256 / std::max<int64_t>(1, token_bytes));  // >= 256 B per granule
  const int64_t owners = 4 * static_cast<int64_t>(NumThreads());  // ParallelFor balances ~4 chunks per thread
  ParallelFor(owners, total, [&](int64_t begin, int64_t end) {
    for (int64_t t = 0; t < num_tokens; ++t) {
      const int64_t slot = ReadIndex(slots, slot_dtype, t);
      if (slot < 0 || slot >= num_slots) continue;
      const int64_t o = (slot / granule) % owners;
      if (o >= begin && o < end) write(t, slot);
    }
    if (stream) StreamFence();
  });
}

void ReshapeAndCacheImpl(const uint8_t* key, const uint8_t* value, uint8_t* key_cache,
                         uint8_t* value_cache, const void* slots, DType slot_dtype, int64_t num_tokens,
                         int64_t num_blocks, int64_t block_size, int64_t heads, int64_t head_size,
                         size_t elem, bool bnsd, bool slots_distinct) {
  const int64_t head_bytes = head_size * static_cast<int64_t>(elem);
  const int64_t row_bytes = heads * head_bytes;
  const SlotPlane planes[2] = {
      {key, row_bytes, key_cache, heads, head_bytes, bnsd},
      {value, row_bytes, value_cache, heads, head_bytes, bnsd},
  };
  ScatterSlots(planes, 2, slots, slot_dtype, num_tokens, num_blocks, block_size, slots_distinct);
}

void CopyBlockPairs(const BlockPlane* planes, int num_planes, int64_t block_bytes, const void* block_mapping,
                    DType mapping_dtype, int64_t num_pairs, int64_t src_blocks, int64_t dst_blocks) {
  if (num_pairs <= 0 || num_planes <= 0 || block_bytes <= 0) return;
  const int64_t threads = NumThreads();
  // Work units = (plane, byte range of a block). Each unit applies every pair, in order, to its own
  // byte range, so units never touch the same bytes (for distinct planes) and the result is the
  // sequential one. Blocks are split into `ranges` pieces (>= 4 KiB each) when there are fewer planes
  // than the ~4 chunks per thread that ParallelFor balances over.
  int64_t ranges = 1;
  if (threads > 1 && num_planes < 4 * threads) {
    const int64_t want = (4 * threads + num_planes - 1) / num_planes;
    ranges = std::max<int64_t>(1, std::min<int64_t>(want, block_bytes / 4096));
  }
  const int64_t units = num_planes * ranges;
  const int64_t chunk = ((block_bytes / ranges) + 63) / 64 * 64;  // 64-byte aligned range size
  const bool stream = num_pairs * block_bytes * num_planes >= CopyStreamThresholdBytes();
  ParallelFor(units, num_pairs * block_bytes * num_planes, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const BlockPlane& p = planes[u / ranges];
      const int64_t lo = std::min(block_bytes, (u % ranges) * chunk);
      const int64_t hi = (u % ranges == ranges - 1) ? block_bytes : std::min(block_bytes, lo + chunk);
      if (lo >= hi) continue;
      for (int64_t i = 0; i < num_pairs; ++i) {
        const int64_t s = ReadIndex(block_mapping, mapping_dtype, 2 * i);
        const int64_t d = ReadIndex(block_mapping, mapping_dtype, 2 * i + 1);
        if (s < 0 || s >= src_blocks || d < 0 || d >= dst_blocks) continue;
        const uint8_t* from = p.src + s * block_bytes + lo;
        uint8_t* to = p.dst + d * block_bytes + lo;
        if (from == to) continue;
        StreamCopy(to, from, hi - lo, stream);  // distinct blocks never overlap
      }
    }
    if (stream) StreamFence();
  });
}

bool ReadLayoutIsBnsd(const AotArgs& a) {
  return LayoutIsBnsd(a.attr_int("cache_layout", mskv_attr::kLayoutBSND));
}

void RequireIndexDType(DType d, const char* what) {
  if (d != DType::kI32 && d != DType::kI64) {
    throw KernelError(std::string(what) + " must be int32 or int64, got " + DTypeName(d));
  }
}

bool StrictIndices(const AotArgs& a) { return a.attr_bool("mskv_strict", false); }

bool StrictCheckSlots(const AotArgs& a, const void* slots, DType d, int64_t num_tokens, int64_t num_slots) {
  if (!StrictIndices(a)) return false;
  if (num_tokens <= 0) return true;
  const IndexIssue e = CheckSlotValues(slots, DTypeSize(d), num_tokens, num_slots);
  if (e.code != 0) {
    throw KernelError(SlotIssueMessage("slot_mapping", e, num_slots) +
                      " (checked at launch: was slot_mapping modified after the call?)");
  }
  return true;
}

void StrictCheckBlockMapping(const AotArgs& a, const void* mapping, DType d, int64_t num_pairs,
                             int64_t src_blocks, int64_t dst_blocks) {
  if (!StrictIndices(a) || num_pairs <= 0) return;
  const IndexIssue e = CheckBlockPairValues(mapping, DTypeSize(d), num_pairs, src_blocks, dst_blocks);
  if (e.code != 0) {
    throw KernelError(BlockIssueMessage("block_mapping", e, src_blocks, dst_blocks) +
                      " (checked at launch: was block_mapping modified after the call?)");
  }
}

}  // namespace mskv
