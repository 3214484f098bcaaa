// Shared building blocks of the copy operators' CPU kernels (reshape_and_cache, *_merged,
// concat_and_cache_mla, copy_blocks, swap_blocks). All offsets are int64_t: caches with more than
// 2^31 elements (or bytes) work.
#pragma once

#include <cstdint>
#include <cstring>

#include "aot_abi.h"

namespace mskv {

// One cache plane written by slot: token t's row (heads x head_bytes, contiguous in the source at
// src + t * src_row_bytes) goes to slot s of `cache`, a [num_blocks, block_size, heads, head] (BSND)
// or [num_blocks, heads, block_size, head] (BNSD) tensor.
struct SlotPlane {
  const uint8_t* src;
  int64_t src_row_bytes;
  uint8_t* cache;
  int64_t heads;
  int64_t head_bytes;
  bool bnsd;
};

// Write the rows of the first num_tokens tokens of every plane into its cache at slot_mapping[t].
// Tokens with slot < 0 or slot >= num_blocks * block_size are skipped (never written); a slot given
// twice ends with the later token's row (sequential-loop semantics, also when threaded). Work is split
// over the CPU threads when large enough (mskv::ParallelFor): by token ranges when no slot repeats
// (`slots_distinct`: the caller already knows, e.g. from StrictCheckSlots; else it is looked up),
// else by slot ownership. Calls writing >= CopyStreamThresholdBytes() (256 KiB) use non-temporal
// stores (stream_copy.h).
void ScatterSlots(const SlotPlane* planes, int num_planes, const void* slots, DType slot_dtype,
                  int64_t num_tokens, int64_t num_blocks, int64_t block_size, bool slots_distinct = false);

// Shared by reshape_and_cache and reshape_and_cache_merged: write key and value rows of the first T
// tokens into (key_cache, value_cache), both of shape [nb, bs, H, D] or [nb, H, bs, D].
void ReshapeAndCacheImpl(const uint8_t* key, const uint8_t* value, uint8_t* key_cache,
                         uint8_t* value_cache, const void* slots, DType slot_dtype, int64_t num_tokens,
                         int64_t num_blocks, int64_t block_size, int64_t heads, int64_t head_size,
                         size_t elem, bool bnsd, bool slots_distinct = false);

// One (source, destination) cache pair of a block copy.
struct BlockPlane {
  const uint8_t* src;
  uint8_t* dst;
};

// For every plane, copy block block_mapping[i][0] of src to block block_mapping[i][1] of dst, for
// i = 0..num_pairs-1 IN ORDER (the result equals a sequential loop over the pairs, also when a dst
// block is the src of a later pair or appears twice). Pairs with a block id outside [0, src_blocks)
// or [0, dst_blocks) are skipped. Work is split over threads by byte range within a block, so every
// thread applies all pairs in order to its own byte range and the in-order result is exact. Calls
// copying >= CopyStreamThresholdBytes() (256 KiB) use non-temporal stores.
void CopyBlockPairs(const BlockPlane* planes, int num_planes, int64_t block_bytes, const void* block_mapping,
                    DType mapping_dtype, int64_t num_pairs, int64_t src_blocks, int64_t dst_blocks);

// Read a cache_layout attribute ("BSND" | "BNSD"); throws KernelError otherwise.
bool ReadLayoutIsBnsd(const AotArgs& a);

// Throw KernelError unless dtype d is int32 or int64.
void RequireIndexDType(DType d, const char* what);

// Strict mode (attribute "mskv_strict", set only by the PyNative fast path): the kernel re-checks
// the index values it actually sees at launch and, if one is invalid, throws (writing nothing)
// instead of skipping it. Graph mode and ops.Custom never set it: there invalid entries are skipped.
// StrictCheckSlots returns true when it checked (strict mode): then no slot >= 0 repeats.
bool StrictIndices(const AotArgs& a);
bool StrictCheckSlots(const AotArgs& a, const void* slots, DType d, int64_t num_tokens, int64_t num_slots);
void StrictCheckBlockMapping(const AotArgs& a, const void* mapping, DType d, int64_t num_pairs,
                             int64_t src_blocks, int64_t dst_blocks);

}  // namespace mskv
