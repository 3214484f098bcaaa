// Device-side building blocks of the KV-cache copy kernels (reshape_and_cache,
// reshape_and_cache_merged, concat_and_cache_mla): scatter token rows into a paged cache by slot; and
// the written-memory alias check of the kernels that write several tensors (TrapOnAliasedWrites).
//
// Data path per chunk: GM --DataCopy(Pad)--> UB buffer of a TQueBind<VECIN, VECOUT> --DataCopy(Pad)-->
// GM. Two UB buffers (double buffering): the copy-in (MTE2) of the next chunk overlaps the copy-out
// (MTE3) of the current one; EnQue/DeQue order the two sides of one buffer.
//
// Device subset only: no std::, no exceptions, no heap, no printf.
#ifndef MS_KVCACHE_OP_KERNEL_KV_COPY_COMMON_H_
#define MS_KVCACHE_OP_KERNEL_KV_COPY_COMMON_H_

#include "kernel_operator.h"

#include "mskv_arch.h"  // MSKV_HAS_BF16_AND_PAD: bfloat16 and DataCopyPad exist (A2/A3), not on 310P

namespace mskv {

constexpr int32_t kBufferNum = 2;
constexpr int64_t kMaxRunRows = 128;  // = mskv_tiling::kMaxRunRows (op_host/kv_copy_tiling_common.h)
constexpr int64_t kBlockBytes = 32;
constexpr int64_t kMaxStrideBlocks = 65535;

__aicore__ inline int64_t MinI64(int64_t a, int64_t b) { return a < b ? a : b; }
__aicore__ inline int64_t MaxI64(int64_t a, int64_t b) { return a > b ? a : b; }

// Select<C, A, B>::type: A if C, else B (a template argument chosen by a tiling-key digit).
template <bool C, typename A, typename B>
struct Select {
  using type = A;
};
template <typename A, typename B>
struct Select<false, A, B> {
  using type = B;
};
// T if DATA (a tensor that has the data dtype), else float (e.g. a float32 cos/sin table)
template <bool DATA, typename T>
using DataOrFloat = typename Select<DATA, T, float>::type;

// Tokens (or work units) [begin, end) of this core under the main/tail split of the tiling.
__aicore__ inline void CoreRange(int64_t formerNum, int64_t formerLen, int64_t tailLen, int64_t* begin,
                                 int64_t* end) {
  const int64_t i = static_cast<int64_t>(AscendC::GetBlockIdx());
  if (i < formerNum) {
    *begin = i * formerLen;
    *end = *begin + formerLen;
  } else {
    *begin = formerNum * formerLen + (i - formerNum) * tailLen;
    *end = *begin + tailLen;
  }
}

// This core's work items [*begin, *end) of `items`: its share of the main / tail split of TD (formerNum cores
// of formerLen items, then tailLen items each), cut at `items`.
template <typename TD>
__aicore__ inline void RowRange(const TD& td, int64_t items, int64_t* begin, int64_t* end) {
  CoreRange(td.formerNum, td.formerLen, td.tailLen, begin, end);
  *end = MinI64(*end, items);
}

// One token row of one cache (see mskv_tiling::ScatterGeom): numSeg segments of segElems elements,
// contiguous in the source, segStride apart in the cache; slot s starts at
// (s / blockSize) * blockStride + (s % blockSize) * slotStride. segsPerChunk / pieceElems: how a row
// that does not fit a UB buffer is moved (by groups of segments, or in pieces of one segment).
struct PlaneDesc {
  int64_t rowElems;
  int64_t numSeg;
  int64_t segElems;
  int64_t segStride;
  int64_t blockStride;
  int64_t slotStride;
  int64_t segsPerChunk;
  int64_t pieceElems;
};

// Scatter of token rows by slot_mapping. T: cache element type; S: slot index type (int32_t or
// int64_t); PAD: move with DataCopyPad (a segment is not a multiple of 32 bytes; A2/A3 only);
// SEG: rows have several segments (BNSD caches), else one contiguous segment per row.
template <typename T, typename S, bool PAD, bool SEG>
class SlotScatter {
 public:
  __aicore__ inline SlotScatter() {}

  __aicore__ inline void Init(AscendC::TPipe* pipe, GM_ADDR slotMapping, int64_t bufferBytes, int64_t numSlots,
                              int64_t blockSize) {
    slotGm_.SetGlobalBuffer(reinterpret_cast<__gm__ S*>(slotMapping));
    pipe->InitBuffer(que_, kBufferNum, static_cast<uint32_t>(bufferBytes));
    numSlots_ = numSlots;
    blockSize_ = blockSize;
  }

  // Moves tokens [begin, end) of every plane: token t's row of planes[i] goes from src[i] row t to
  // dst[i] at its slot. Tokens whose slot is negative or >= numSlots are skipped (never written).
  // rowsPerChunk > 0: runs of up to that many consecutive valid tokens share one copy-in per plane.
  __aicore__ inline void Process(int64_t begin, int64_t end, int64_t rowsPerChunk, const PlaneDesc* planes,
                                 AscendC::GlobalTensor<T>* src, AscendC::GlobalTensor<T>* dst, int32_t numPlanes) {
    int64_t slots[kMaxRunRows];
    const int64_t maxRun = MinI64(rowsPerChunk, kMaxRunRows);
    int64_t t = begin;
    while (t < end) {
      const int64_t s = ReadSlot(t);
      if (!Valid(s)) {
        ++t;
        continue;
      }
      if (maxRun <= 0) {  // a row does not fit a buffer: token by token, plane by plane
        for (int32_t i = 0; i < numPlanes; ++i) CopyBigRow(planes[i], src[i], dst[i], t, s);
        ++t;
        continue;
      }
      slots[0] = s;
      int64_t n = 1;
      bool stoppedOnInvalid = false;
      while (n < maxRun && t + n < end) {
        const int64_t sn = ReadSlot(t + n);
        if (!Valid(sn)) {
          stoppedOnInvalid = true;
          break;
        }
        slots[n++] = sn;
      }
      for (int32_t i = 0; i < numPlanes; ++i) CopyRun(planes[i], src[i], dst[i], t, n, slots);
      t += n + (stoppedOnInvalid ? 1 : 0);  // the invalid token that ended the run was already read
    }
  }

 private:
  __aicore__ inline int64_t ReadSlot(int64_t t) { return static_cast<int64_t>(slotGm_.GetValue(static_cast<uint64_t>(t))); }
  __aicore__ inline bool Valid(int64_t s) const { return s >= 0 && s < numSlots_; }

  __aicore__ inline int64_t NumSeg(const PlaneDesc& p) const { return SEG ? p.numSeg : 1; }

  // Elements one segment occupies in UB (DataCopyPad puts every burst at a 32-byte boundary).
  __aicore__ inline int64_t SegPitch(const PlaneDesc& p) const {
    if (!PAD) return p.segElems;
    const int64_t bytes = p.segElems * static_cast<int64_t>(sizeof(T));
    return ((bytes + kBlockBytes - 1) / kBlockBytes) * kBlockBytes / static_cast<int64_t>(sizeof(T));
  }

  __aicore__ inline uint64_t DstOffset(const PlaneDesc& p, int64_t slot) const {
    const int64_t block = slot / blockSize_;
    const int64_t inBlock = slot - block * blockSize_;
    return static_cast<uint64_t>(block * p.blockStride + inBlock * p.slotStride);
  }

  // GM -> UB: `count` consecutive segments starting at source element srcOff.
  __aicore__ inline void CopyInSegs(const AscendC::LocalTensor<T>& ub, AscendC::GlobalTensor<T>& src, uint64_t srcOff,
                                    const PlaneDesc& p, int64_t count) {
#if MSKV_HAS_BF16_AND_PAD
    if constexpr (PAD) {
      AscendC::DataCopyExtParams in(static_cast<uint16_t>(count), static_cast<uint32_t>(p.segElems * sizeof(T)), 0, 0, 0);
      AscendC::DataCopyPadExtParams<T> noPad(false, 0, 0, 0);
      AscendC::DataCopyPad(ub, src[srcOff], in, noPad);
      return;
    }
#endif
    AscendC::DataCopy(ub, src[srcOff], static_cast<uint32_t>(count * p.segElems));
  }

  // UB -> GM: `count` segments of one row to cache element dstOff, segStride apart.
  __aicore__ inline void CopyOutSegs(AscendC::GlobalTensor<T>& dst, uint64_t dstOff, const AscendC::LocalTensor<T>& ub,
                                     const PlaneDesc& p, int64_t count) {
    const int64_t segBytes = p.segElems * static_cast<int64_t>(sizeof(T));
#if MSKV_HAS_BF16_AND_PAD
    if constexpr (PAD) {
      const int64_t gapBytes = SEG ? (p.segStride - p.segElems) * static_cast<int64_t>(sizeof(T)) : 0;
      AscendC::DataCopyExtParams out(static_cast<uint16_t>(count), static_cast<uint32_t>(segBytes), 0,
                                     static_cast<uint32_t>(gapBytes), 0);
      AscendC::DataCopyPad(dst[dstOff], ub, out);
      return;
    }
#endif
    if (!SEG || count == 1) {
      AscendC::DataCopy(dst[dstOff], ub, static_cast<uint32_t>(count * p.segElems));
      return;
    }
    const int64_t gapBlocks = (p.segStride - p.segElems) * static_cast<int64_t>(sizeof(T)) / kBlockBytes;
    if (gapBlocks <= kMaxStrideBlocks) {
      AscendC::DataCopyParams out(static_cast<uint16_t>(count), static_cast<uint16_t>(segBytes / kBlockBytes), 0,
                                  static_cast<uint16_t>(gapBlocks));
      AscendC::DataCopy(dst[dstOff], ub, out);
      return;
    }
    for (int64_t k = 0; k < count; ++k) {
      AscendC::DataCopy(dst[dstOff + static_cast<uint64_t>(k * p.segStride)], ub[static_cast<uint32_t>(k * p.segElems)],
                        static_cast<uint32_t>(p.segElems));
    }
  }

  // n consecutive valid tokens starting at t: one copy-in, one copy-out per token.
  __aicore__ inline void CopyRun(const PlaneDesc& p, AscendC::GlobalTensor<T>& src, AscendC::GlobalTensor<T>& dst,
                                 int64_t t, int64_t n, const int64_t* slots) {
    const int64_t segs = NumSeg(p);
    AscendC::LocalTensor<T> buf = que_.template AllocTensor<T>();
    CopyInSegs(buf, src, static_cast<uint64_t>(t * p.rowElems), p, n * segs);
    que_.EnQue(buf);
    AscendC::LocalTensor<T> ready = que_.template DeQue<T>();
    const int64_t rowPitch = segs * SegPitch(p);
    for (int64_t j = 0; j < n; ++j) {
      CopyOutSegs(dst, DstOffset(p, slots[j]), ready[static_cast<uint32_t>(j * rowPitch)], p, segs);
    }
    que_.FreeTensor(ready);
  }

  // One token whose row does not fit a buffer: groups of segsPerChunk segments, or pieces of one
  // segment of at most pieceElems elements.
  __aicore__ inline void CopyBigRow(const PlaneDesc& p, AscendC::GlobalTensor<T>& src, AscendC::GlobalTensor<T>& dst,
                                    int64_t t, int64_t slot) {
    const int64_t segs = NumSeg(p);
    const uint64_t srcBase = static_cast<uint64_t>(t * p.rowElems);
    const uint64_t dstBase = DstOffset(p, slot);
    if (p.segsPerChunk > 0) {
      for (int64_t s0 = 0; s0 < segs; s0 += p.segsPerChunk) {
        const int64_t cnt = MinI64(p.segsPerChunk, segs - s0);
        AscendC::LocalTensor<T> buf = que_.template AllocTensor<T>();
        CopyInSegs(buf, src, srcBase + static_cast<uint64_t>(s0 * p.segElems), p, cnt);
        que_.EnQue(buf);
        AscendC::LocalTensor<T> ready = que_.template DeQue<T>();
        CopyOutSegs(dst, dstBase + static_cast<uint64_t>(s0 * p.segStride), ready, p, cnt);
        que_.FreeTensor(ready);
      }
      return;
    }
    for (int64_t k = 0; k < segs; ++k) {
      for (int64_t off = 0; off < p.segElems; off += p.pieceElems) {
        const int64_t len = MinI64(p.pieceElems, p.segElems - off);
        const uint64_t from = srcBase + static_cast<uint64_t>(k * p.segElems + off);
        const uint64_t to = dstBase + static_cast<uint64_t>(k * p.segStride + off);
        AscendC::LocalTensor<T> buf = que_.template AllocTensor<T>();
        CopyPieceIn(buf, src[from], len);
        que_.EnQue(buf);
        AscendC::LocalTensor<T> ready = que_.template DeQue<T>();
        CopyPieceOut(dst[to], ready, len);
        que_.FreeTensor(ready);
      }
    }
  }

  // One contiguous piece of len elements (a multiple of 32 bytes unless PAD).
  __aicore__ inline void CopyPieceIn(const AscendC::LocalTensor<T>& ub, const AscendC::GlobalTensor<T>& from,
                                     int64_t len) {
#if MSKV_HAS_BF16_AND_PAD
    if constexpr (PAD) {
      AscendC::DataCopyExtParams in(1, static_cast<uint32_t>(len * sizeof(T)), 0, 0, 0);
      AscendC::DataCopyPadExtParams<T> noPad(false, 0, 0, 0);
      AscendC::DataCopyPad(ub, from, in, noPad);
      return;
    }
#endif
    AscendC::DataCopy(ub, from, static_cast<uint32_t>(len));
  }

  __aicore__ inline void CopyPieceOut(const AscendC::GlobalTensor<T>& to, const AscendC::LocalTensor<T>& ub, int64_t len) {
#if MSKV_HAS_BF16_AND_PAD
    if constexpr (PAD) {
      AscendC::DataCopyExtParams out(1, static_cast<uint32_t>(len * sizeof(T)), 0, 0, 0);
      AscendC::DataCopyPad(to, ub, out);
      return;
    }
#endif
    AscendC::DataCopy(to, ub, static_cast<uint32_t>(len));
  }

  AscendC::TQueBind<AscendC::TPosition::VECIN, AscendC::TPosition::VECOUT, kBufferNum> que_;
  AscendC::GlobalTensor<S> slotGm_;
  int64_t numSlots_ = 0;
  int64_t blockSize_ = 1;
};

// MskvReshapeAndCache / MskvReshapeAndCacheMerged: scatters this core's rows of key and value (its share of
// td.numTokens) through slot_mapping into the cache planes starting at keyCache / valueCache, both planes
// laid out as the scatter fields of TD say (rowElems, numSeg, segElems, segStride, blockStride, slotStride,
// segsPerChunk, pieceElems; rowsPerChunk and bufferBytes for the UB plan).
template <typename T, typename S, bool PAD, bool SEG, typename TD>
__aicore__ inline void ScatterKeyValue(GM_ADDR key, GM_ADDR value, __gm__ T* keyCache, __gm__ T* valueCache,
                                       GM_ADDR slot_mapping, const TD& td) {
  AscendC::TPipe pipe;
  SlotScatter<T, S, PAD, SEG> scatter;
  scatter.Init(&pipe, slot_mapping, td.bufferBytes, td.numSlots, td.blockSize);
  // one layout for the key and the value plane (PlaneDesc's fields, in its order)
  const PlaneDesc plane = {td.rowElems,    td.numSeg,     td.segElems,     td.segStride,
                           td.blockStride, td.slotStride, td.segsPerChunk, td.pieceElems};
  PlaneDesc planes[2] = {plane, plane};
  AscendC::GlobalTensor<T> src[2];
  AscendC::GlobalTensor<T> dst[2];
  src[0].SetGlobalBuffer(reinterpret_cast<__gm__ T*>(key));
  src[1].SetGlobalBuffer(reinterpret_cast<__gm__ T*>(value));
  dst[0].SetGlobalBuffer(keyCache);
  dst[1].SetGlobalBuffer(valueCache);
  int64_t begin = 0;
  int64_t end = 0;
  RowRange(td, td.numTokens, &begin, &end);
  scatter.Process(begin, end, td.rowsPerChunk, planes, src, dst, 2);
}

// ------------------------------------------------------------------------------- written-memory aliases
// MindSpore graph code sees no Parameter identity, so on the ascend backend in GRAPH_MODE the same
// Parameter (or two Parameters over one buffer) can reach a kernel as two tensors: copy_blocks with one
// cache as key and value cache, a multi-layer transfer with one cache in two layers, reshape_and_cache,
// concat_and_cache_mla or a fused RoPE writer with one Parameter as both caches. Writes through
// both would race between cores (the result would depend on their order) or change data still to be
// read. The kernels whose written tensors can alias check their GM byte ranges at kernel start, on
// every core before its first write, and stop the launch with AscendC::Trap() (on the NPU an AI Core
// exception: the launch fails and MindSpore raises at the stream sync; in the emulation rule TRAP).
// The rule is the one the cpu / sim AOT entries apply at launch (cpu_kernel/aot_abi.h
// CheckDisjointArgs): a written range shares no byte with another written range nor with a range the
// kernel reads; read ranges may overlap each other.
//
// Src: a class with  __aicore__ inline void Span(int32_t i, uint64_t* lo, uint64_t* hi, bool* written)
// giving tensor i's byte range [lo, hi) (empty when hi <= lo) and whether the kernel writes it.
constexpr int32_t kMaxAliasSpans = 128;  // spans sorted on the stack at a time (3.2 KiB)

// The non-empty spans [first, last) of src sorted by start (insertion sort: caches are usually allocated in
// order) into lo / hi / wr; returns their count.
template <typename Src>
__aicore__ inline int32_t SortedSpans(Src& src, int32_t first, int32_t last, uint64_t* lo, uint64_t* hi, bool* wr) {
  int32_t m = 0;
  for (int32_t i = first; i < last; ++i) {
    uint64_t a = 0;
    uint64_t b = 0;
    bool w = false;
    src.Span(i, &a, &b, &w);
    if (b <= a) continue;
    int32_t j = m;
    while (j > 0 && lo[j - 1] > a) {
      lo[j] = lo[j - 1];
      hi[j] = hi[j - 1];
      wr[j] = wr[j - 1];
      --j;
    }
    lo[j] = a;
    hi[j] = b;
    wr[j] = w;
    ++m;
  }
  return m;
}

// Whether two spans of src conflict (a written one overlaps any other). The spans are taken kMaxAliasSpans at
// a time: sorted and swept (each span read once), then every later span is checked against them by a binary
// search over their starts with the running maxima of their ends - about n * ceil(n / kMaxAliasSpans) Span
// calls (each may read GM: a ListTensorDesc pointer), not n * n.
template <typename Src>
__aicore__ inline bool GmSpansConflict(Src& src, int32_t n) {
  if (n < 2) return false;
  uint64_t lo[kMaxAliasSpans];
  uint64_t reach[kMaxAliasSpans];         // span ends, then the maximum end of the spans up to i
  uint64_t reachWritten[kMaxAliasSpans];  // the maximum end of the written spans up to i
  bool wr[kMaxAliasSpans];
  for (int32_t first = 0; first < n; first += kMaxAliasSpans) {
    const int32_t last = first + kMaxAliasSpans < n ? first + kMaxAliasSpans : n;
    const int32_t m = SortedSpans(src, first, last, lo, reach, wr);
    uint64_t anyEnd = 0;      // furthest end of the spans so far
    uint64_t writtenEnd = 0;  // furthest end of the written spans so far
    for (int32_t i = 0; i < m; ++i) {
      if (lo[i] < (wr[i] ? anyEnd : writtenEnd)) return true;
      if (reach[i] > anyEnd) anyEnd = reach[i];
      if (wr[i] && reach[i] > writtenEnd) writtenEnd = reach[i];
      reach[i] = anyEnd;
      reachWritten[i] = writtenEnd;
    }
    for (int32_t j = last; j < n && m > 0; ++j) {
      uint64_t c = 0;
      uint64_t d = 0;
      bool v = false;
      src.Span(j, &c, &d, &v);
      if (d <= c) continue;
      int32_t k0 = 0;  // spans [0, k) of the batch start before d
      int32_t k1 = m;
      while (k0 < k1) {
        const int32_t mid = (k0 + k1) / 2;
        if (lo[mid] < d) k0 = mid + 1;
        else k1 = mid;
      }
      if (k0 > 0 && (v ? reach[k0 - 1] : reachWritten[k0 - 1]) > c) return true;
    }
  }
  return false;
}

// Stops the launch (AscendC::Trap) if written ranges of `src` alias (see GmSpansConflict).
template <typename Src>
__aicore__ inline void TrapOnAliasedWrites(Src& src, int32_t n) {
  if (GmSpansConflict(src, n)) AscendC::Trap();
}

// Byte range of `elems` elements of T at p.
template <typename T>
__aicore__ inline void GmRange(__gm__ T* p, int64_t elems, uint64_t* lo, uint64_t* hi) {
  *lo = reinterpret_cast<uint64_t>(p);
  *hi = *lo + static_cast<uint64_t>(elems > 0 ? elems : 0) * static_cast<uint64_t>(sizeof(T));
}

// Span source of TrapOnAliasedWrites for a kernel with a fixed set of tensors (reshape_and_cache,
// concat_and_cache_mla, the fused RoPE writers): up to N byte ranges, listed with Add in any order.
// Add beyond N is a programming error of the kernel and traps (never a silently shorter list).
template <int32_t N>
struct GmSpans {
  uint64_t lo[N];
  uint64_t hi[N];
  bool wr[N];
  int32_t n = 0;

  // `elems` elements of T at p (an empty range when elems <= 0); `written`: the kernel writes them.
  template <typename T>
  __aicore__ inline void Add(__gm__ T* p, int64_t elems, bool written) {
    if (n >= N) {
      AscendC::Trap();
      return;
    }
    GmRange(p, elems, &lo[n], &hi[n]);
    wr[n] = written;
    ++n;
  }
  __aicore__ inline void Span(int32_t i, uint64_t* a, uint64_t* b, bool* written) {
    *a = lo[i];
    *b = hi[i];
    *written = wr[i];
  }
};

// Stops the launch (AscendC::Trap) if the listed ranges alias (see GmSpansConflict).
template <int32_t N>
__aicore__ inline void TrapOnAliasedWrites(GmSpans<N>& spans) {
  TrapOnAliasedWrites(spans, spans.n);
}

}  // namespace mskv

#endif  // MS_KVCACHE_OP_KERNEL_KV_COPY_COMMON_H_
