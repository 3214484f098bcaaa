// AscendC CPU emulation runtime: DataCopy / DataCopyPad between GM and UB and within UB.
//
// Rules (asc-devkit docs, "DataCopy (GM与UB连续/高维切分数据搬运)", "DataCopyPad (GMToUB/UBToGM
// 非对齐数据搬运)", "DataCopy (UBToUB...)", "通用说明和约束"):
//  - UB addresses 32-byte aligned; GM address aligned to sizeof(T) for DataCopy, any for DataCopyPad.
//  - DataCopy count form: count * sizeof(T) must be a multiple of 32 B (hardware rounds down).
//  - DataCopyParams: blockCount in [0, 4095], blockLen / gaps uint16 in 32-B blocks; blockCount or
//    blockLen 0 is a NOP on A2/A3 (documented), rejected elsewhere.
//  - DataCopyExtParams: blockCount [0, 4095], blockLen [0, 2097151] bytes and a multiple of sizeof(T);
//    left/right padding at most 32 bytes each; 64-bit padding value must be 0.
//  - DataCopyPad does not exist on Atlas inference (310P).
#include <cinttypes>
#include <cstring>

#include "runtime_internal.h"

namespace ascendc_sim {
namespace {

struct Rows {
  uint32_t rows = 0;
  uint64_t gm_row = 0;     // bytes per row on the GM side (data only)
  uint64_t gm_pitch = 0;   // GM bytes from one row start to the next
  uint64_t ub_row = 0;     // UB bytes one row occupies (incl. padding) for GM->UB pads; data bytes otherwise
  uint64_t ub_pitch = 0;   // UB bytes from one row start to the next
  bool nop = false;
};

const char* KindName(CopyKind k) {
  switch (k) {
    case kCopyCount: return "count";
    case kCopyParams: return "DataCopyParams";
    case kCopyPadExt: return "DataCopyExtParams";
    case kCopyPadLegacy: return "DataCopyParams";
  }
  return "?";
}

bool NopAllowed(const Caps& caps) { return caps.family == "A2" || caps.family == "A3"; }

// gm_is_src: GM -> UB (true) or UB -> GM (false)
Rows Plan(Core& c, CopyKind kind, const CopyParamsRaw& p, DT dt, bool gm_is_src, const PadSpec* pad, const char* api) {
  const Caps& caps = c.L->caps;
  const uint64_t esz = DTSize(dt);
  Rows r;
  if (kind == kCopyCount) {
    if (p.block_len % 32 != 0)
      rt::Fail("DATACOPY_ALIGN",
               "%s moves count * sizeof(%s) = %" PRIu64 " B, not a multiple of 32 B: the hardware would move only %" PRIu64
               " B (use DataCopyPad or pad the length)",
               api, rt::DTName(dt), p.block_len, p.block_len / 32 * 32);
    r.rows = p.block_len ? 1 : 0;
    r.gm_row = r.ub_row = p.block_len;
    r.nop = p.block_len == 0;
    return r;
  }
  if (kind == kCopyParams) {
    if (p.block_count > 4095)
      rt::Fail("DATACOPY_PARAMS", "%s: DataCopyParams.blockCount = %u is outside [0, 4095]", api, p.block_count);
    if (p.block_count == 0 || p.block_len == 0) {
      if (!NopAllowed(caps))
        rt::Fail("DATACOPY_PARAMS",
                 "%s: DataCopyParams blockCount = %u, blockLen = %" PRIu64 ": a zero is a documented NOP only on "
                 "Atlas A2/A3, not on %s",
                 api, p.block_count, p.block_len, caps.soc.c_str());
      r.nop = true;
      return r;
    }
    r.rows = p.block_count;
    r.gm_row = r.ub_row = p.block_len * 32;
    const uint64_t gm_gap = (gm_is_src ? p.src_stride : p.dst_stride) * 32;
    const uint64_t ub_gap = (gm_is_src ? p.dst_stride : p.src_stride) * 32;
    r.gm_pitch = r.gm_row + gm_gap;
    r.ub_pitch = r.ub_row + ub_gap;
    return r;
  }
  // DataCopyPad
  const char* pname = kind == kCopyPadExt ? "DataCopyExtParams" : "DataCopyParams";
  if (!caps.has_pad)
    rt::Fail("DATACOPYPAD_UNSUPPORTED", "%s: DataCopyPad does not exist on %s (Atlas inference series); use DataCopy "
             "with 32-byte aligned lengths", api, caps.soc.c_str());
  if (p.block_count > 4095)
    rt::Fail("DATACOPYPAD_PARAMS", "%s: %s.blockCount = %u is outside [0, 4095]", api, pname, p.block_count);
  if (p.block_len > 2097151)
    rt::Fail("DATACOPYPAD_PARAMS", "%s: %s.blockLen = %" PRIu64 " B is outside [0, 2097151]", api, pname, p.block_len);
  if (p.block_len % esz != 0)
    rt::Fail("DATACOPYPAD_PARAMS", "%s: %s.blockLen = %" PRIu64 " B is not a multiple of sizeof(%s) = %" PRIu64, api,
             pname, p.block_len, rt::DTName(dt), esz);
  if (p.src_stride > 0xffffffffull || p.dst_stride > 0xffffffffull)
    rt::Fail("DATACOPYPAD_PARAMS", "%s: strides must fit uint32", api);
  uint64_t left = 0, right = 0;
  if (pad != nullptr) {
    left = pad->left * esz;
    right = pad->right * esz;
    if (left > 32 || right > 32)
      rt::Fail("DATACOPYPAD_PARAMS",
               "%s: leftPadding = %u, rightPadding = %u elements of %s = %" PRIu64 " / %" PRIu64
               " B; each may be at most 32 B",
               api, pad->left, pad->right, rt::DTName(dt), left, right);
    if (esz == 8 && pad->is_pad && pad->value != 0)
      rt::Fail("DATACOPYPAD_PARAMS", "%s: paddingValue must be 0 for 64-bit types", api);
  }
  if (p.block_count == 0 || p.block_len == 0) {
    r.nop = true;
    return r;
  }
  r.rows = p.block_count;
  r.gm_row = p.block_len;
  if (gm_is_src) {
    r.ub_row = (left + p.block_len + right + 31) / 32 * 32;
    r.gm_pitch = p.block_len + p.src_stride;
    r.ub_pitch = r.ub_row + p.dst_stride * 32;
  } else {
    r.ub_row = p.block_len;
    r.gm_pitch = p.block_len + p.dst_stride;
    r.ub_pitch = (p.block_len + 31) / 32 * 32 + p.src_stride * 32;
  }
  return r;
}

void FillPad(Core& c, uint8_t* ub, uint32_t addr, uint64_t n, const PadSpec& pad, uint32_t esz, bool first_elem,
             const uint8_t* row_data) {
  if (n == 0) return;
  uint8_t* dst = ub + addr;
  if (first_elem) {  // documented: no left/right padding -> dummy bytes repeat the row's first element
    for (uint64_t i = 0; i < n; ++i) dst[i] = row_data[i % esz];
    UbMarkValid(c, addr, static_cast<uint32_t>(n), true);
    return;
  }
  if (pad.is_pad || c.pad_set) {
    const uint64_t v = pad.is_pad ? pad.value : c.pad_bits;
    for (uint64_t i = 0; i < n; ++i) dst[i] = static_cast<uint8_t>(v >> (8 * (i % esz)));
    UbMarkValid(c, addr, static_cast<uint32_t>(n), true);
    return;
  }
  FillGarbage(c, dst, n);  // documented: random values
  UbMarkValid(c, addr, static_cast<uint32_t>(n), false);
}

}  // namespace

namespace rt {

void CopyGmToUb(const UbRef& dst, int32_t region, const uint8_t* src, DT dt, CopyKind kind, const CopyParamsRaw& p,
                const PadSpec* pad, const char* api) {
  Core& c = Cur();
  CheckHandle(c, dst, api, "the destination");
  RequireDtype(dt, api);
  const bool is_pad = kind == kCopyPadExt || kind == kCopyPadLegacy;
  if (is_pad) ++c.st.pad_in;
  else ++c.st.datacopy_in;
  const uint32_t esz = DTSize(dt);
  if (dst.addr % 32 != 0)
    Fail("UB_ALIGN", "%s: destination UB address %u is not 32-byte aligned (%u bytes past a 32 B boundary)", api,
         dst.addr, dst.addr % 32);
  if (!is_pad && reinterpret_cast<uintptr_t>(src) % esz != 0)
    Fail("GM_ALIGN", "%s: source GM address is not aligned to sizeof(%s) = %u (%s)", api, DTName(dt), esz,
         DescribeGm(*c.L, src).c_str());
  Rows r = Plan(c, kind, p, dt, true, pad, api);
  if (r.nop) return;
  HzIssue(c, kMTE2);
  const uint64_t left = pad ? static_cast<uint64_t>(pad->left) * esz : 0;
  const uint64_t right = pad ? static_cast<uint64_t>(pad->right) * esz : 0;
  const Region* first = nullptr;
  for (uint32_t i = 0; i < r.rows; ++i) {
    const uint8_t* g = src + static_cast<uint64_t>(i) * r.gm_pitch;
    const Region& reg = GmCheck(c, region, g, r.gm_row, false, api);
    if (first == nullptr) first = &reg;
    const uint64_t uoff = static_cast<uint64_t>(i) * r.ub_pitch;
    CheckUb(c, dst, uoff, r.ub_row, api, Format("row %u of the destination", i).c_str());
    const uint32_t ua = static_cast<uint32_t>(dst.addr + uoff);
    HzUb(c, kMTE2, ua, static_cast<uint32_t>(r.ub_row), true, api);
    GmNoteRead(c, reg, g, r.gm_row, kMTE2, api);
    if (is_pad) {
      std::memcpy(c.ub.data() + ua + left, g, r.gm_row);
      UbMarkValid(c, static_cast<uint32_t>(ua + left), static_cast<uint32_t>(r.gm_row), true);
      const uint64_t dummy = r.ub_row - left - r.gm_row - right;
      const bool no_lr = left == 0 && right == 0;
      FillPad(c, c.ub.data(), ua, left, *pad, esz, false, g);
      FillPad(c, c.ub.data(), static_cast<uint32_t>(ua + left + r.gm_row), right, *pad, esz, false, g);
      FillPad(c, c.ub.data(), static_cast<uint32_t>(ua + left + r.gm_row + right), dummy, *pad, esz, no_lr, g);
    } else {
      std::memcpy(c.ub.data() + ua, g, r.gm_row);
      UbMarkValid(c, ua, static_cast<uint32_t>(r.gm_row), true);
    }
  }
  CostDma(c, kMTE2, first, r.rows, r.gm_row, r.gm_pitch);
}

void CopyUbToGm(int32_t region, uint8_t* dst, const UbRef& src, DT dt, CopyKind kind, const CopyParamsRaw& p,
                const char* api) {
  Core& c = Cur();
  CheckHandle(c, src, api, "the source");
  RequireDtype(dt, api);
  const bool is_pad = kind == kCopyPadExt || kind == kCopyPadLegacy;
  if (is_pad) ++c.st.pad_out;
  else ++c.st.datacopy_out;
  const uint32_t esz = DTSize(dt);
  if (src.addr % 32 != 0)
    Fail("UB_ALIGN", "%s: source UB address %u is not 32-byte aligned (%u bytes past a 32 B boundary)", api, src.addr,
         src.addr % 32);
  if (!is_pad && reinterpret_cast<uintptr_t>(dst) % esz != 0)
    Fail("GM_ALIGN", "%s: destination GM address is not aligned to sizeof(%s) = %u (%s)", api, DTName(dt), esz,
         DescribeGm(*c.L, dst).c_str());
  Rows r = Plan(c, kind, p, dt, false, nullptr, api);
  if (r.nop) return;
  HzIssue(c, kMTE3);
  const Region* first = nullptr;
  for (uint32_t i = 0; i < r.rows; ++i) {
    uint8_t* g = dst + static_cast<uint64_t>(i) * r.gm_pitch;
    const uint64_t uoff = static_cast<uint64_t>(i) * r.ub_pitch;
    CheckUb(c, src, uoff, r.ub_row, api, Format("row %u of the source", i).c_str());
    const uint32_t ua = static_cast<uint32_t>(src.addr + uoff);
    uint32_t bad = 0;
    if (!UbValid(c, ua, static_cast<uint32_t>(r.gm_row), &bad))
      Fail("UB_UNINIT_TO_GM",
           "%s copies UB byte %u (row %u) to GM although nothing wrote it since its buffer was allocated: garbage "
           "would land in %s",
           api, bad, i, DescribeGm(*c.L, g).c_str());
    const Region& reg = GmCheck(c, region, g, r.gm_row, true, api);
    if (first == nullptr) first = &reg;
    HzUb(c, kMTE3, ua, static_cast<uint32_t>(r.gm_row), false, api);
    GmNoteWrite(c, reg, g, r.gm_row, kMTE3, api);
    std::memcpy(g, c.ub.data() + ua, r.gm_row);
  }
  CostDma(c, kMTE3, first, r.rows, r.gm_row, r.gm_pitch);
}

void CopyUbToUb(const UbRef& dst, const UbRef& src, DT dt, CopyKind kind, const CopyParamsRaw& p, const char* api) {
  Core& c = Cur();
  CheckHandle(c, src, api, "the source");
  CheckHandle(c, dst, api, "the destination");
  RequireDtype(dt, api);
  ++c.st.datacopy_ub;
  if (dst.addr % 32 != 0 || src.addr % 32 != 0)
    Fail("UB_ALIGN", "%s: UB addresses must be 32-byte aligned (destination %u, source %u)", api, dst.addr, src.addr);
  Rows r = Plan(c, kind, p, dt, true, nullptr, api);
  if (r.nop) return;
  // UB -> UB: both strides are UB strides in 32-byte blocks; Plan(gm_is_src) mapped src gap -> gm_pitch.
  HzIssue(c, kV);
  for (uint32_t i = 0; i < r.rows; ++i) {
    const uint64_t so = static_cast<uint64_t>(i) * r.gm_pitch, doff = static_cast<uint64_t>(i) * r.ub_pitch;
    CheckUb(c, src, so, r.gm_row, api, Format("row %u of the source", i).c_str());
    CheckUb(c, dst, doff, r.ub_row, api, Format("row %u of the destination", i).c_str());
    const uint32_t sa = static_cast<uint32_t>(src.addr + so), da = static_cast<uint32_t>(dst.addr + doff);
    if (sa < da + r.ub_row && da < sa + r.gm_row && sa != da)
      Fail("VEC_OVERLAP", "%s: source [%u, +%" PRIu64 ") and destination [%u, +%" PRIu64 ") overlap partially", api, sa,
           r.gm_row, da, r.ub_row);
    HzUb(c, kV, sa, static_cast<uint32_t>(r.gm_row), false, api);
    HzUb(c, kV, da, static_cast<uint32_t>(r.ub_row), true, api);
    std::memmove(c.ub.data() + da, c.ub.data() + sa, r.gm_row);
    std::memmove(c.valid.data() + da, c.valid.data() + sa, r.gm_row);
  }
  CostVec(c, static_cast<uint64_t>(r.rows) * r.gm_row);
  (void)KindName;
}

}  // namespace rt
}  // namespace ascendc_sim
