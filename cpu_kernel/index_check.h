// Value checks of index tensors (slot_mapping, block_mapping), header-only so that every module can
// use them: ms_kvcache._cpu (numpy arrays read by the PyNative wrappers), ms_kvcache._cpu_pyboost
// (host tensors read without a pipeline sync) and the kernels themselves (strict mode of the PyNative
// fast path, which re-checks the values the kernel actually sees at launch).
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

namespace mskv {

// code 0: fine. Slots: 1 = slot[i] (= value) >= num_slots; 2 = slot[i] == slot[j] (= value) >= 0,
// i < j, j the earliest such token. Block mappings: 1 = mapping[i][j] (= value) out of range.
// Positions: 1 = position[i] (= value) outside [0, max_position).
struct IndexIssue {
  int code = 0;
  int64_t i = -1;
  int64_t j = -1;
  int64_t value = 0;
};

template <typename I>
IndexIssue CheckSlotValues(const I* s, int64_t n, int64_t num_slots) {
  for (int64_t t = 0; t < n; ++t) {
    if (static_cast<int64_t>(s[t]) >= num_slots) return {1, t, -1, static_cast<int64_t>(s[t])};
  }
  if (n <= 32) {  // small calls (decode): quadratic scan, no allocation
    for (int64_t j = 1; j < n; ++j) {
      if (s[j] < 0) continue;
      for (int64_t i = 0; i < j; ++i) {
        if (s[i] == s[j]) return {2, i, j, static_cast<int64_t>(s[j])};
      }
    }
    return {};
  }
  if (num_slots / 8 <= std::max<int64_t>(int64_t{1} << 16, 16 * n)) {  // bitmap over the slots
    std::vector<uint8_t> seen(static_cast<size_t>((num_slots + 7) / 8), 0);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t v = s[j];
      if (v < 0) continue;
      uint8_t& byte = seen[static_cast<size_t>(v >> 3)];
      const uint8_t bit = static_cast<uint8_t>(1u << (v & 7));
      if (byte & bit) {
        for (int64_t i = 0; i < j; ++i) {
          if (s[i] == s[j]) return {2, i, j, v};
        }
      }
      byte = static_cast<uint8_t>(byte | bit);
    }
    return {};
  }
  // Large slot space: open-addressing hash set of the slots seen so far (power-of-two size >= 2n).
  size_t cap = 2;
  int bits = 1;
  while (cap < static_cast<size_t>(2 * n)) {
    cap <<= 1;
    ++bits;
  }
  std::vector<int64_t> table(cap, -1);
  for (int64_t j = 0; j < n; ++j) {
    const int64_t v = s[j];
    if (v < 0) continue;
    size_t h = static_cast<size_t>((static_cast<uint64_t>(v) * 0x9E3779B97F4A7C15ull) >> (64 - bits));  // Fibonacci
    for (;; h = (h + 1) & (cap - 1)) {
      if (table[h] == v) {
        for (int64_t i = 0; i < j; ++i) {
          if (s[i] == s[j]) return {2, i, j, v};
        }
      }
      if (table[h] < 0) {
        table[h] = v;
        break;
      }
    }
  }
  return {};
}

// True if no slot in [0, num_slots) occurs twice (negative and out-of-range slots are ignored: the
// kernels skip them). Same strategies as CheckSlotValues.
template <typename I>
bool SlotsDistinct(const I* s, int64_t n, int64_t num_slots) {
  if (n <= 32) {
    for (int64_t j = 1; j < n; ++j) {
      if (s[j] < 0 || s[j] >= num_slots) continue;
      for (int64_t i = 0; i < j; ++i) {
        if (s[i] == s[j]) return false;
      }
    }
    return true;
  }
  if (num_slots / 8 <= std::max<int64_t>(int64_t{1} << 16, 16 * n)) {
    std::vector<uint8_t> seen(static_cast<size_t>((num_slots + 7) / 8), 0);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t v = s[j];
      if (v < 0 || v >= num_slots) continue;
      uint8_t& byte = seen[static_cast<size_t>(v >> 3)];
      const uint8_t bit = static_cast<uint8_t>(1u << (v & 7));
      if (byte & bit) return false;
      byte = static_cast<uint8_t>(byte | bit);
    }
    return true;
  }
  const IndexIssue e = CheckSlotValues(s, n, INT64_MAX);  // hash strategy; no range check
  return e.code == 0;
}

inline bool SlotsDistinct(const void* p, size_t elem, int64_t n, int64_t num_slots) {
  return elem == 4 ? SlotsDistinct(static_cast<const int32_t*>(p), n, num_slots)
                   : SlotsDistinct(static_cast<const int64_t*>(p), n, num_slots);
}

template <typename I>
IndexIssue CheckBlockPairValues(const I* m, int64_t n, int64_t src_blocks, int64_t dst_blocks) {
  for (int64_t r = 0; r < n; ++r) {
    for (int c = 0; c < 2; ++c) {
      const int64_t v = m[2 * r + c];
      if (v < 0 || v >= (c == 0 ? src_blocks : dst_blocks)) return {1, r, c, v};
    }
  }
  return {};
}

// Block ids [n] (multi_layer_block_transfer): 1 = ids[i] (= value) outside [0, num_blocks); with
// `distinct`, 2 = ids[i] == ids[j] (= value), i < j, j the earliest such position.
template <typename I>
IndexIssue CheckBlockIdValues(const I* ids, int64_t n, int64_t num_blocks, bool distinct) {
  for (int64_t t = 0; t < n; ++t) {
    const int64_t v = ids[t];
    if (v < 0 || v >= num_blocks) return {1, t, -1, v};
  }
  if (!distinct) return {};
  return CheckSlotValues(ids, n, num_blocks);  // all in range now: only the duplicate search remains
}

// Positions (rows of a cos_sin_cache): code 1 = position[i] (= value) outside [0, max_position).
template <typename I>
IndexIssue CheckPositionValues(const I* p, int64_t n, int64_t max_position) {
  for (int64_t t = 0; t < n; ++t) {
    const int64_t v = static_cast<int64_t>(p[t]);
    if (v < 0 || v >= max_position) return {1, t, -1, v};
  }
  return {};
}

// Dispatch on the element size (4: int32, 8: int64).
inline IndexIssue CheckSlotValues(const void* p, size_t elem, int64_t n, int64_t num_slots) {
  return elem == 4 ? CheckSlotValues(static_cast<const int32_t*>(p), n, num_slots)
                   : CheckSlotValues(static_cast<const int64_t*>(p), n, num_slots);
}
inline IndexIssue CheckPositionValues(const void* p, size_t elem, int64_t n, int64_t max_position) {
  return elem == 4 ? CheckPositionValues(static_cast<const int32_t*>(p), n, max_position)
                   : CheckPositionValues(static_cast<const int64_t*>(p), n, max_position);
}
inline IndexIssue CheckBlockPairValues(const void* p, size_t elem, int64_t n, int64_t src_blocks,
                                       int64_t dst_blocks) {
  return elem == 4 ? CheckBlockPairValues(static_cast<const int32_t*>(p), n, src_blocks, dst_blocks)
                   : CheckBlockPairValues(static_cast<const int64_t*>(p), n, src_blocks, dst_blocks);
}

inline IndexIssue CheckBlockIdValues(const void* p, size_t elem, int64_t n, int64_t num_blocks, bool distinct) {
  return elem == 4 ? CheckBlockIdValues(static_cast<const int32_t*>(p), n, num_blocks, distinct)
                   : CheckBlockIdValues(static_cast<const int64_t*>(p), n, num_blocks, distinct);
}

// The messages of the Python wrappers (ms_kvcache/_validate.py), for the kernels' strict mode.
inline std::string SlotIssueMessage(const std::string& arg, const IndexIssue& e, int64_t num_slots) {
  if (e.code == 1) {
    return "argument '" + arg + "': expected every slot < num_blocks*block_size = " + std::to_string(num_slots) +
           ", got " + std::to_string(e.value) + " at index " + std::to_string(e.i);
  }
  return "argument '" + arg + "': expected distinct non-negative slots, got slot " + std::to_string(e.value) +
         " at indices [" + std::to_string(e.i) + ", " + std::to_string(e.j) + "]";
}
inline std::string PositionIssueMessage(const std::string& arg, const IndexIssue& e, int64_t max_position) {
  return "argument '" + arg + "': expected positions in [0, " + std::to_string(max_position) +
         ") (rows of cos_sin_cache), got " + std::to_string(e.value) + " at index " + std::to_string(e.i);
}
inline std::string BlockIssueMessage(const std::string& arg, const IndexIssue& e, int64_t src_blocks,
                                     int64_t dst_blocks) {
  return "argument '" + arg + "': expected " + (e.j == 0 ? "src" : "dst") + " block ids in [0, " +
         std::to_string(e.j == 0 ? src_blocks : dst_blocks) + "), got " + std::to_string(e.value) + " at row " +
         std::to_string(e.i) + " (column " + std::to_string(e.j) + ")";
}

inline std::string BlockIdIssueMessage(const std::string& arg, const IndexIssue& e, int64_t num_blocks) {
  if (e.code == 1) {
    return "argument '" + arg + "': expected block ids in [0, " + std::to_string(num_blocks) + "), got " +
           std::to_string(e.value) + " at index " + std::to_string(e.i);
  }
  return "argument '" + arg + "': expected distinct ids for h2d (two host blocks cannot load into one device "
         "block), got " + std::to_string(e.value) + " at indices [" + std::to_string(e.i) + ", " + std::to_string(e.j) +
         "]";
}

}  // namespace mskv
