// AscendC CPU emulation runtime: vector instructions (Add, Sub, Mul, Adds, Muls, Duplicate, Cast).
//
// Addressing follows the documented model ("SIMD计算说明": 高维切分 / 连续计算 / 掩码): one repeat
// reads 8 data blocks of 32 B (256 B) per operand, element e of repeat r of an operand lives at
//   base + (r * repStride + (e / elemsPerBlock) * blkStride) * 32 + (e % elemsPerBlock) * sizeof(T),
// a repeat handles 256 / max(sizeof(src), sizeof(dst)) elements, the mask selects elements of every
// repeat (normal mode) or the total element count (counter mode / tensor front-n API).
// Arithmetic: float in fp32 with one IEEE round-to-nearest-even per op; half computed exactly and
// rounded once to nearest even; int16/int32 wrap around. A2/A3 follow the IEEE inf/NaN mode (their
// default), 310P the saturation mode (overflow -> +-max, NaN -> 0).
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <unordered_map>

#include "runtime_internal.h"

namespace ascendc_sim {
namespace {

enum RM { kNone = 0, kRint, kFloor, kCeil, kRound, kTrunc, kOdd, kHybrid };
const char* RMName(int m) {
  static const char* n[] = {"CAST_NONE", "CAST_RINT", "CAST_FLOOR", "CAST_CEIL", "CAST_ROUND", "CAST_TRUNC",
                            "CAST_ODD", "CAST_HYBRID"};
  return (m >= 0 && m < 8) ? n[m] : "?";
}

struct FFmt {
  int mant;   // fraction bits
  int emin;   // smallest normal exponent
  int emax;   // largest exponent
  int bits;   // total width
};
constexpr FFmt kF16{10, -14, 15, 16};
constexpr FFmt kBF16{7, -126, 127, 16};
constexpr FFmt kF32{23, -126, 127, 32};

uint64_t MaxFinite(const FFmt& f) {
  const uint64_t ebits = static_cast<uint64_t>(f.emax + f.emax) << f.mant;  // biased emax = 2*emax
  return ebits | ((uint64_t{1} << f.mant) - 1);
}
uint64_t InfBits(const FFmt& f) { return static_cast<uint64_t>(2 * f.emax + 1) << f.mant; }
uint64_t SignBit(const FFmt& f) { return uint64_t{1} << (f.bits - 1); }

// Round the magnitude n (in units of the target quantum) to an integer under mode m.
uint64_t RoundUnits(long double n, int m, bool neg) {
  const long double fl = std::floor(n);
  const long double fr = n - fl;
  uint64_t q = static_cast<uint64_t>(fl);
  switch (m) {
    case kNone:
    case kRint:
      if (fr > 0.5L || (fr == 0.5L && (q & 1))) ++q;
      break;
    case kRound:
      if (fr >= 0.5L) ++q;
      break;
    case kTrunc:
      break;
    case kFloor:
      if (neg && fr > 0) ++q;
      break;
    case kCeil:
      if (!neg && fr > 0) ++q;
      break;
    case kOdd:
      if (fr > 0 && !(q & 1)) ++q;
      break;
    default:
      if (fr > 0.5L || (fr == 0.5L && (q & 1))) ++q;
  }
  return q;
}

// Exact value -> bits of a binary floating format, rounding mode m; sat: saturation mode.
uint64_t EncodeFloat(long double x, const FFmt& f, int m, bool sat) {
  const bool neg = std::signbit(x);
  const uint64_t sgn = neg ? SignBit(f) : 0;
  if (std::isnan(x)) return sat ? 0 : (sgn | InfBits(f) | (uint64_t{1} << (f.mant - 1)));
  if (std::isinf(x)) return sgn | (sat ? MaxFinite(f) : InfBits(f));
  const long double ax = std::fabs(x);
  if (ax == 0) return sgn;
  int e2 = 0;
  (void)std::frexp(ax, &e2);
  const int E = e2 - 1;  // ax in [2^E, 2^(E+1))
  int qexp = (E < f.emin ? f.emin : E) - f.mant;
  const long double n = std::ldexp(ax, -qexp);
  uint64_t r = RoundUnits(n, m, neg);
  const uint64_t one = uint64_t{1} << f.mant;
  if (r >= 2 * one) {  // carried into the next binade
    r >>= 1;
    ++qexp;
  }
  const bool overflow = (r != 0) && (qexp + f.mant > f.emax);
  if (overflow) {
    bool to_inf;
    switch (m) {
      case kTrunc: case kOdd: to_inf = false; break;
      case kFloor: to_inf = neg; break;
      case kCeil: to_inf = !neg; break;
      default: to_inf = true;
    }
    return sgn | ((to_inf && !sat) ? InfBits(f) : MaxFinite(f));
  }
  if (r == 0) return sgn;
  if (r < one) return sgn | r;  // subnormal (qexp == emin - mant)
  const uint64_t biased = static_cast<uint64_t>(qexp + f.mant + f.emax);
  return sgn | (biased << f.mant) | (r - one);
}

int64_t EncodeInt(long double x, int m, int64_t lo, int64_t hi) {
  if (std::isnan(x)) return 0;
  if (std::isinf(x)) return x > 0 ? hi : lo;
  const bool neg = x < 0;
  const long double ax = std::fabs(x);
  long double q = static_cast<long double>(RoundUnits(ax, m == kNone ? kRint : m, neg));
  if (ax >= 9.3e18L) q = ax;  // beyond uint64 range: saturates below
  const long double v = neg ? -q : q;
  if (v <= static_cast<long double>(lo)) return lo;
  if (v >= static_cast<long double>(hi)) return hi;
  return static_cast<int64_t>(v);
}

long double Load(DT dt, const uint8_t* p) {
  switch (dt) {
    case DT::F16: { uint16_t b; std::memcpy(&b, p, 2); return HalfBitsToFloat(b); }
    case DT::BF16: { uint16_t b; std::memcpy(&b, p, 2); return Bf16BitsToFloat(b); }
    case DT::F32: { float v; std::memcpy(&v, p, 4); return v; }
    case DT::F64: { double v; std::memcpy(&v, p, 8); return v; }
    case DT::I8: return static_cast<int8_t>(*p);
    case DT::U8: case DT::B8: return *p;
    case DT::I16: { int16_t v; std::memcpy(&v, p, 2); return v; }
    case DT::U16: { uint16_t v; std::memcpy(&v, p, 2); return v; }
    case DT::I32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case DT::U32: { uint32_t v; std::memcpy(&v, p, 4); return v; }
    case DT::I64: { int64_t v; std::memcpy(&v, p, 8); return static_cast<long double>(v); }
    case DT::U64: { uint64_t v; std::memcpy(&v, p, 8); return static_cast<long double>(v); }
    default: return 0;
  }
}

void Store(DT dt, uint8_t* p, long double v, int m, bool sat) {
  switch (dt) {
    case DT::F16: { uint16_t b = static_cast<uint16_t>(EncodeFloat(v, kF16, m, sat)); std::memcpy(p, &b, 2); return; }
    case DT::BF16: { uint16_t b = static_cast<uint16_t>(EncodeFloat(v, kBF16, m, sat)); std::memcpy(p, &b, 2); return; }
    case DT::F32: { uint32_t b = static_cast<uint32_t>(EncodeFloat(v, kF32, m, sat)); std::memcpy(p, &b, 4); return; }
    case DT::I8: { int8_t x = static_cast<int8_t>(EncodeInt(v, m, INT8_MIN, INT8_MAX)); std::memcpy(p, &x, 1); return; }
    case DT::U8: { uint8_t x = static_cast<uint8_t>(EncodeInt(v, m, 0, UINT8_MAX)); std::memcpy(p, &x, 1); return; }
    case DT::I16: { int16_t x = static_cast<int16_t>(EncodeInt(v, m, INT16_MIN, INT16_MAX)); std::memcpy(p, &x, 2); return; }
    case DT::U16: { uint16_t x = static_cast<uint16_t>(EncodeInt(v, m, 0, UINT16_MAX)); std::memcpy(p, &x, 2); return; }
    case DT::I32: { int32_t x = static_cast<int32_t>(EncodeInt(v, m, INT32_MIN, INT32_MAX)); std::memcpy(p, &x, 4); return; }
    case DT::U32: { uint32_t x = static_cast<uint32_t>(EncodeInt(v, m, 0, UINT32_MAX)); std::memcpy(p, &x, 4); return; }
    case DT::I64: { int64_t x = EncodeInt(v, m, INT64_MIN, INT64_MAX); std::memcpy(p, &x, 8); return; }
    default: return;
  }
}

// ------------------------------------------------------------------------------------- whitelists
bool ArithDtypeOk(DT dt) { return dt == DT::I16 || dt == DT::F16 || dt == DT::I32 || dt == DT::F32; }
bool DupDtypeOk(DT dt) {
  return dt == DT::I16 || dt == DT::U16 || dt == DT::F16 || dt == DT::BF16 || dt == DT::I32 || dt == DT::U32 ||
         dt == DT::F32;
}

// Cast (asc-devkit "Cast" data type tables): bit i of the mask = RoundMode i allowed.
constexpr uint32_t M(int m) { return 1u << m; }
constexpr uint32_t kRFCRT = M(kRint) | M(kFloor) | M(kCeil) | M(kRound) | M(kTrunc);
struct CastRule {
  DT src, dst;
  uint32_t modes;
};
// Atlas A2 / A3 training & inference series (identical tables).
const CastRule kCastA2[] = {
    {DT::I8, DT::F16, M(kNone)},
    {DT::U8, DT::F16, M(kNone)},
    {DT::I16, DT::F16, kRFCRT | M(kNone)},
    {DT::I16, DT::F32, M(kNone)},
    {DT::F16, DT::I8, kRFCRT | M(kNone)},
    {DT::F16, DT::U8, kRFCRT | M(kNone)},
    {DT::F16, DT::I16, kRFCRT},
    {DT::F16, DT::I32, kRFCRT},
    {DT::F16, DT::F32, M(kNone)},
    {DT::BF16, DT::I32, kRFCRT},
    {DT::BF16, DT::F32, M(kNone)},
    {DT::I32, DT::I16, M(kNone)},
    {DT::I32, DT::F32, kRFCRT | M(kNone)},
    {DT::I32, DT::I64, M(kNone)},
    {DT::F32, DT::I16, kRFCRT},
    {DT::F32, DT::F16, kRFCRT | M(kOdd) | M(kNone)},
    {DT::F32, DT::BF16, kRFCRT},
    {DT::F32, DT::I32, kRFCRT},
    {DT::F32, DT::F32, kRFCRT},
    {DT::F32, DT::I64, kRFCRT},
    {DT::I64, DT::I32, M(kNone)},
    {DT::I64, DT::F32, kRFCRT},
};
// Atlas inference series AI Core (310P).
const CastRule kCast310P[] = {
    {DT::I8, DT::F16, M(kNone)},
    {DT::U8, DT::F16, M(kNone)},
    {DT::I16, DT::F16, M(kNone)},
    {DT::F16, DT::I8, M(kFloor) | M(kCeil) | M(kRound) | M(kTrunc) | M(kNone)},
    {DT::F16, DT::U8, M(kFloor) | M(kCeil) | M(kRound) | M(kTrunc) | M(kNone)},
    {DT::F16, DT::I16, M(kRint)},
    {DT::F16, DT::I32, kRFCRT},
    {DT::F16, DT::F32, M(kNone)},
    {DT::I32, DT::I16, M(kNone)},
    {DT::I32, DT::F32, M(kNone)},
    {DT::F32, DT::F16, M(kOdd) | M(kNone)},
    {DT::F32, DT::I64, kRFCRT},
};

std::string ModesText(uint32_t modes) {
  std::string s;
  for (int m = 0; m < 8; ++m) {
    if (modes & M(m)) {
      if (!s.empty()) s += "/";
      s += RMName(m);
    }
  }
  return s;
}

void CheckCast(Core& c, DT src, DT dst, int mode) {
  const bool p310 = c.L->caps.family == "310P";
  const CastRule* tab = p310 ? kCast310P : kCastA2;
  const size_t n = p310 ? sizeof(kCast310P) / sizeof(kCast310P[0]) : sizeof(kCastA2) / sizeof(kCastA2[0]);
  if (src == DT::I32 && dst == DT::F16)
    rt::UnsupportedApi("Cast int32_t->half", "it needs SetDeqScale, which is not emulated");
  for (size_t i = 0; i < n; ++i) {
    if (tab[i].src == src && tab[i].dst == dst) {
      if (!(tab[i].modes & M(mode)))
        rt::Fail("CAST_MODE", "Cast %s -> %s with %s: %s allows only %s", rt::DTName(src), rt::DTName(dst),
                 RMName(mode), c.L->caps.soc.c_str(), ModesText(tab[i].modes).c_str());
      return;
    }
  }
  std::string from;
  for (size_t i = 0; i < n; ++i)
    if (tab[i].src == src) from += std::string(from.empty() ? "" : ", ") + rt::DTName(tab[i].dst);
  rt::Fail("CAST_UNSUPPORTED", "Cast %s -> %s does not exist on %s (%s); from %s it can cast to: %s", rt::DTName(src),
           rt::DTName(dst), c.L->caps.soc.c_str(), c.L->caps.family.c_str(), rt::DTName(src),
           from.empty() ? "nothing" : from.c_str());
}

// ------------------------------------------------------------------------------------- addressing
struct Plan {
  bool contiguous = false;   // count mode: element i at base + i * size
  uint64_t total = 0;        // contiguous: elements
  uint32_t E = 0;            // elements per repeat
  uint32_t repeats = 0;
  uint64_t mask[2] = {0, 0};  // normal mode per-repeat mask
  uint64_t last = 0;          // counter mode: elements in the last repeat (0 = full)
  bool counter = false;
};

inline bool Active(const Plan& p, uint32_t r, uint32_t e) {
  if (p.counter) {
    if (r + 1 == p.repeats && p.last != 0) return e < p.last;
    return true;
  }
  return (p.mask[e >> 6] >> (e & 63)) & 1;
}

inline uint32_t Addr(const VecOperand& o, uint32_t sz, uint32_t r, uint32_t e) {
  const uint32_t epb = 32 / sz;
  return o.ub.addr + (r * o.rep_stride + (e / epb) * o.blk_stride) * 32 + (e % epb) * sz;
}

struct Span {
  uint64_t lo = UINT64_MAX, hi = 0;  // [lo, hi)
};

Span OperandSpan(const Plan& p, const VecOperand& o, uint32_t sz) {
  Span s;
  if (p.contiguous) {
    s.lo = o.ub.addr;
    s.hi = o.ub.addr + p.total * sz;
    return s;
  }
  for (uint32_t r = 0; r < p.repeats; ++r) {
    for (uint32_t e = 0; e < p.E; ++e) {
      if (!Active(p, r, e)) continue;
      const uint64_t a = Addr(o, sz, r, e);
      s.lo = std::min(s.lo, a);
      s.hi = std::max(s.hi, a + sz);
    }
  }
  return s;
}

}  // namespace

namespace rt {

void Vec(VecOp op, const char* api, const VecShape& shape, bool use_mask_reg, const VecOperand& dst,
         const VecOperand* src0, const VecOperand* src1, const void* scalar, int round_mode) {
  Core& c = Cur();
  const Caps& caps = c.L->caps;
  if (src0) CheckHandle(c, src0->ub, api, "operand src0");
  if (src1) CheckHandle(c, src1->ub, api, "operand src1");
  CheckHandle(c, dst.ub, api, "operand dst");
  ++c.st.vec_ops;
  // ---- data types
  RequireDtype(dst.dt, api);
  if (src0) RequireDtype(src0->dt, api);
  if (src1) RequireDtype(src1->dt, api);
  switch (op) {
    case VecOp::Add: case VecOp::Sub: case VecOp::Mul: case VecOp::Adds: case VecOp::Muls:
    case VecOp::Max: case VecOp::Min: case VecOp::Maxs: case VecOp::Mins:
      if (!ArithDtypeOk(dst.dt))
        Fail("VEC_DTYPE", "%s on %s: %s supports only int16_t, half, int32_t and float (cast bfloat16_t to float first)",
             api, DTName(dst.dt), caps.soc.c_str());
      break;
    case VecOp::Abs:
      if (dst.dt != DT::F16 && dst.dt != DT::F32)
        Fail("VEC_DTYPE", "Abs on %s: supported types are half and float", DTName(dst.dt));
      break;
    case VecOp::Div:
    case VecOp::Sqrt:
      if (dst.dt != DT::F16 && dst.dt != DT::F32)
        Fail("VEC_DTYPE", "%s on %s: supported types are half and float", api, DTName(dst.dt));
      break;
    case VecOp::Relu:
      if (dst.dt != DT::F16 && dst.dt != DT::F32 && dst.dt != DT::I32)
        Fail("VEC_DTYPE", "Relu on %s: supported types are half, int32_t and float", DTName(dst.dt));
      break;
    case VecOp::Duplicate:
      if (!DupDtypeOk(dst.dt))
        Fail("VEC_DTYPE", "Duplicate on %s: supported types are int16_t, uint16_t, half, bfloat16_t, int32_t, "
             "uint32_t, float", DTName(dst.dt));
      break;
    case VecOp::Cast:
      if (round_mode < 0 || round_mode > kHybrid) Fail("CAST_MODE", "Cast: invalid RoundMode %d", round_mode);
      if (round_mode == kHybrid) Fail("CAST_MODE", "Cast: CAST_HYBRID exists only for hifloat8_t outputs (Ascend 950)");
      CheckCast(c, src0->dt, dst.dt, round_mode);
      break;
    default:
      break;
  }
  const uint32_t dsz = DTSize(dst.dt);
  const uint32_t ssz = src0 ? DTSize(src0->dt) : dsz;
  const uint32_t wide = std::max(dsz, ssz);
  // ---- plan
  Plan p;
  p.E = 256 / wide;
  if (shape.mode == kVecCount) {
    uint64_t n = shape.count;
    if (use_mask_reg) {
      if (!c.counter_mode)
        UnsupportedApi(api, "the tensor front-n form with isSetMask=false in Normal mask mode");
      n = c.mask[0];
    }
    p.contiguous = true;
    p.total = n;
    if (n == 0) return;  // documented NOP on A2/A3
  } else if (c.counter_mode) {
    const uint64_t n = use_mask_reg ? c.mask[0] : shape.mask[0];
    if (n == 0) return;
    p.counter = true;
    if (n > static_cast<uint64_t>(p.E) * 255 * 64) Fail("VEC_PARAMS", "%s: counter-mode element count %" PRIu64 " is too large", api, n);
    p.repeats = static_cast<uint32_t>((n + p.E - 1) / p.E);
    p.last = n % p.E;
  } else {
    p.repeats = shape.repeat;
    if (use_mask_reg) {
      p.mask[0] = c.mask[0];
      p.mask[1] = c.mask[1];
    } else if (shape.mode == kVecMaskBits) {
      p.mask[0] = shape.mask[0];
      p.mask[1] = shape.mask[1];
      if (p.E <= 64 && p.mask[1] != 0)
        Fail("VEC_PARAMS", "%s: mask[1] = 0x%" PRIx64 " must be 0 for %u-bit operands (%u elements per repeat)", api,
             p.mask[1], wide * 8, p.E);
    } else {
      const uint64_t len = std::min<uint64_t>(shape.mask[0], p.E);  // documented: larger masks act as the maximum
      p.mask[0] = len >= 64 ? ~uint64_t{0} : ((uint64_t{1} << len) - 1);
      p.mask[1] = len <= 64 ? 0 : (len >= 128 ? ~uint64_t{0} : ((uint64_t{1} << (len - 64)) - 1));
    }
    if (p.E < 128) p.mask[1] = 0;
    if (p.E < 64) p.mask[0] &= (uint64_t{1} << p.E) - 1;
    if (p.repeats == 0 || (p.mask[0] == 0 && p.mask[1] == 0)) return;  // documented NOP
    if (dst.blk_stride == 0)
      Fail("VEC_PARAMS", "%s: dstBlkStride = 0 is undefined behaviour (the destination blocks would collide)", api);
  }
  // ---- operands: alignment, bounds
  struct Opnd {
    const VecOperand* o;
    uint32_t sz;
    bool write;
    const char* name;
    Span span;
  };
  Opnd ops[3];
  int nops = 0;
  ops[nops++] = Opnd{&dst, dsz, true, "dst", Span()};
  if (src0) ops[nops++] = Opnd{src0, ssz, false, src1 ? "src0" : "src", Span()};
  if (src1) ops[nops++] = Opnd{src1, DTSize(src1->dt), false, "src1", Span()};
  for (int i = 0; i < nops; ++i) {
    Opnd& o = ops[i];
    if (o.o->ub.addr % 32 != 0)
      Fail("VEC_ALIGN", "%s: operand %s starts at UB address %u, not 32-byte aligned", api, o.name, o.o->ub.addr);
    o.span = OperandSpan(p, *o.o, o.sz);
    CheckUb(c, o.o->ub, o.span.lo - o.o->ub.addr, o.span.hi - o.span.lo, api, Format("operand %s", o.name).c_str());
  }
  // ---- overlap rules ("通用地址重叠约束")
  for (int i = 1; i < nops; ++i) {
    const Opnd& s = ops[i];
    const Opnd& d = ops[0];
    if (s.span.hi <= d.span.lo || d.span.hi <= s.span.lo) continue;
    if (p.contiguous) {
      if (s.o->ub.addr != d.o->ub.addr || s.sz != d.sz)
        Fail("VEC_OVERLAP",
             "%s: %s [%" PRIu64 ", %" PRIu64 ") and dst [%" PRIu64 ", %" PRIu64 ") overlap partially; source and "
             "destination may only overlap completely",
             api, s.name, s.span.lo, s.span.hi, d.span.lo, d.span.hi);
      continue;
    }
    if (s.sz != d.sz)
      Fail("VEC_OVERLAP", "%s: %s and dst overlap although their element sizes differ (%u vs %u bytes)", api, s.name,
           s.sz, d.sz);
    // per 32-byte block: which repeat / block slot reads it
    std::unordered_map<uint32_t, std::pair<uint32_t, uint32_t>> rd;  // block -> (max repeat, slot at that repeat)
    const uint32_t epb = 32 / s.sz;
    for (uint32_t r = 0; r < p.repeats; ++r)
      for (uint32_t e = 0; e < p.E; ++e)
        if (Active(p, r, e)) {
          const uint32_t b = Addr(*s.o, s.sz, r, e) / 32;
          auto it = rd.find(b);
          if (it == rd.end() || it->second.first <= r) rd[b] = {r, e / epb};
        }
    const bool special = (op == VecOp::Add || op == VecOp::Sub || op == VecOp::Mul) && i == 2 &&
                         (dst.dt == DT::F16 || dst.dt == DT::I32 || dst.dt == DT::F32) &&
                         (src1->rep_stride == 0 || dst.rep_stride == 0);
    for (uint32_t r = 0; r < p.repeats; ++r)
      for (uint32_t e = 0; e < p.E; ++e)
        if (Active(p, r, e)) {
          const uint32_t b = Addr(*d.o, d.sz, r, e) / 32;
          auto it = rd.find(b);
          if (it == rd.end()) continue;
          if (it->second.first > r && !special)
            Fail("VEC_OVERLAP",
                 "%s: repeat %u writes UB block %u that %s reads in a later repeat %u: a destination of one repeat "
                 "may not be a source of a later one",
                 api, r, b, s.name, it->second.first);
          if (it->second.first == r && it->second.second != e / epb)
            Fail("VEC_OVERLAP", "%s: in repeat %u %s and dst overlap partially (UB block %u); they may only overlap "
                 "completely", api, r, s.name, b);
        }
  }
  // ---- hazards: one V instruction reading the sources and writing the destination
  HzIssue(c, kV);
  CostVec(c, static_cast<uint64_t>(p.repeats) * p.E * ops[0].sz);
  if (c.L->hazards) {
    for (int pass = 0; pass < 2; ++pass) {  // reads first, then the write
      for (int i = 0; i < nops; ++i) {
        const Opnd& o = ops[i];
        if (o.write != (pass == 1)) continue;
        if (p.contiguous) {
          HzUb(c, kV, static_cast<uint32_t>(o.span.lo), static_cast<uint32_t>(o.span.hi - o.span.lo), o.write, api);
        } else {
          const uint32_t epb = 32 / o.sz;
          for (uint32_t r = 0; r < p.repeats; ++r)
            for (uint32_t blk = 0; blk * epb < p.E; ++blk) {
              bool any = false;
              for (uint32_t e = blk * epb; e < (blk + 1) * epb && e < p.E; ++e) any = any || Active(p, r, e);
              if (any) HzUb(c, kV, Addr(*o.o, o.sz, r, blk * epb), 32, o.write, api);
            }
        }
      }
    }
  }
  // ---- compute, element by element in instruction order. The overlap rules above guarantee that
  // this equals the hardware's "read a repeat, then write it" for every accepted operand layout.
  const bool sat = caps.saturation;
  uint8_t* ub = c.ub.data();
  uint8_t* valid = c.valid.data();
  auto visit = [&](auto&& f) {
    if (p.contiguous) {
      for (uint64_t i = 0; i < p.total; ++i)
        f(static_cast<uint32_t>(dst.ub.addr + i * dsz), src0 ? static_cast<uint32_t>(src0->ub.addr + i * ssz) : 0u,
          src1 ? static_cast<uint32_t>(src1->ub.addr + i * ssz) : 0u);
      return;
    }
    for (uint32_t r = 0; r < p.repeats; ++r)
      for (uint32_t e = 0; e < p.E; ++e)
        if (Active(p, r, e))
          f(Addr(dst, dsz, r, e), src0 ? Addr(*src0, ssz, r, e) : 0u, src1 ? Addr(*src1, ssz, r, e) : 0u);
  };
  auto ok = [&](uint32_t a, uint32_t n) {
    for (uint32_t k = 0; k < n; ++k)
      if (!valid[a + k]) return false;
    return true;
  };
  auto mark = [&](uint32_t d, bool v) { std::memset(valid + d, v ? 1 : 0, dsz); };
  auto satf = [&](float r) -> float {
    if (!sat) return r;
    if (std::isnan(r)) return 0.0f;
    if (std::isinf(r)) return r > 0 ? 3.4028234663852886e38f : -3.4028234663852886e38f;
    return r;
  };
  auto sath = [&](uint16_t h) -> uint16_t {
    if (!sat) return h;
    if ((h & 0x7fffu) > 0x7c00u) return 0;                                        // NaN -> 0
    if ((h & 0x7fffu) == 0x7c00u) return static_cast<uint16_t>((h & 0x8000u) | 0x7bffu);  // inf -> +-max
    return h;
  };
  auto ld16 = [&](uint32_t a) {
    uint16_t v;
    std::memcpy(&v, ub + a, 2);
    return v;
  };
  // Max / Min / Abs / Relu are exact; NaN operands propagate and equal operands (+0 / -0) give the first
  // one (our reading: the documentation is silent on both)
  auto arith = [&](float a, float b) -> float {
    switch (op) {
      case VecOp::Add: case VecOp::Adds: return a + b;
      case VecOp::Sub: return a - b;
      case VecOp::Max: case VecOp::Maxs: return (std::isnan(a) || std::isnan(b)) ? a + b : (a >= b ? a : b);
      case VecOp::Min: case VecOp::Mins: return (std::isnan(a) || std::isnan(b)) ? a + b : (a <= b ? a : b);
      case VecOp::Abs: return std::fabs(a);
      case VecOp::Relu: return std::isnan(a) ? a : (a > 0 ? a : 0.0f);
      case VecOp::Div: return a / b;           // IEEE fp32 division, one rounding
      case VecOp::Sqrt: return std::sqrt(a);   // correctly rounded (a > 0 here, see `undefined`)
      default: return a * b;
    }
  };
  auto iarith = [&](int64_t a, int64_t b) -> int64_t {
    switch (op) {
      case VecOp::Add: case VecOp::Adds: return a + b;
      case VecOp::Sub: return a - b;
      case VecOp::Max: case VecOp::Maxs: return a > b ? a : b;
      case VecOp::Min: case VecOp::Mins: return a < b ? a : b;
      case VecOp::Relu: return a > 0 ? a : 0;
      default: return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
    }
  };
  const bool arith_op = op == VecOp::Add || op == VecOp::Sub || op == VecOp::Mul || op == VecOp::Adds ||
                        op == VecOp::Muls || op == VecOp::Max || op == VecOp::Min || op == VecOp::Maxs ||
                        op == VecOp::Mins || op == VecOp::Abs || op == VecOp::Relu || op == VecOp::Div ||
                        op == VecOp::Sqrt;
  // Sqrt.md: "如果src中的数值为非正数，可能会产生未知结果" - the result of a non-positive element is
  // unknown: the emulation writes a NaN and leaves the element marked unwritten (garbage), so it raises
  // UB_UNINIT_TO_GM / UB_UNINIT_READ if it ever reaches GM or a scalar read.
  auto undefined = [&](float a) { return op == VecOp::Sqrt && !std::isnan(a) && a <= 0.0f; };
  if (op == VecOp::Duplicate) {
    visit([&](uint32_t d, uint32_t, uint32_t) {
      std::memcpy(ub + d, scalar, dsz);  // bit copy of the scalar
      mark(d, true);
    });
  } else if (arith_op && dst.dt == DT::F32) {
    float sc = 0;
    if (scalar) std::memcpy(&sc, scalar, 4);
    visit([&](uint32_t d, uint32_t a0, uint32_t a1) {
      float x, y = sc;
      std::memcpy(&x, ub + a0, 4);
      if (src1) std::memcpy(&y, ub + a1, 4);
      const bool bad = undefined(x);
      const float r = bad ? std::numeric_limits<float>::quiet_NaN() : satf(arith(x, y));  // one IEEE fp32 rounding
      const bool v = !bad && ok(a0, 4) && (!src1 || ok(a1, 4));
      std::memcpy(ub + d, &r, 4);
      mark(d, v);
    });
  } else if (arith_op && dst.dt == DT::F16) {
    // exact half inputs: a float sum / difference rounded once more to half equals the exactly rounded
    // result (|b| << |a| whenever the float sum is inexact), products of halves are exact in float
    float sc = 0;
    if (scalar) {
      uint16_t h;
      std::memcpy(&h, scalar, 2);
      sc = HalfBitsToFloat(h);
    }
    // Div / Sqrt: the exact quotient / root is computed in double (53 bits: no half midpoint can be
    // hit by that first rounding) and rounded once to half
    visit([&](uint32_t d, uint32_t a0, uint32_t a1) {
      const float x = HalfBitsToFloat(ld16(a0));
      const float y = src1 ? HalfBitsToFloat(ld16(a1)) : sc;
      const bool bad = undefined(x);
      uint16_t h;
      if (bad) {
        h = 0x7e00u;
      } else if (op == VecOp::Div || op == VecOp::Sqrt) {
        const double q = op == VecOp::Div ? static_cast<double>(x) / static_cast<double>(y) : std::sqrt(static_cast<double>(x));
        h = sath(static_cast<uint16_t>(EncodeFloat(q, kF16, kRint, false)));
      } else {
        h = sath(FloatToHalfBits(arith(x, y)));
      }
      const bool v = !bad && ok(a0, 2) && (!src1 || ok(a1, 2));
      std::memcpy(ub + d, &h, 2);
      mark(d, v);
    });
  } else if (arith_op && (dst.dt == DT::I16 || dst.dt == DT::I32)) {
    const bool i16 = dst.dt == DT::I16;
    int64_t sc = 0;
    if (scalar) {
      if (i16) {
        int16_t v;
        std::memcpy(&v, scalar, 2);
        sc = v;
      } else {
        int32_t v;
        std::memcpy(&v, scalar, 4);
        sc = v;
      }
    }
    visit([&](uint32_t d, uint32_t a0, uint32_t a1) {
      int64_t x, y = sc;
      if (i16) {
        int16_t t0, t1 = 0;
        std::memcpy(&t0, ub + a0, 2);
        if (src1) std::memcpy(&t1, ub + a1, 2);
        x = t0;
        if (src1) y = t1;
      } else {
        int32_t t0, t1 = 0;
        std::memcpy(&t0, ub + a0, 4);
        if (src1) std::memcpy(&t1, ub + a1, 4);
        x = t0;
        if (src1) y = t1;
      }
      const uint64_t w = static_cast<uint64_t>(iarith(x, y));  // wraps around
      const bool v = ok(a0, dsz) && (!src1 || ok(a1, dsz));
      if (i16) {
        const uint16_t o = static_cast<uint16_t>(w);
        std::memcpy(ub + d, &o, 2);
      } else {
        const uint32_t o = static_cast<uint32_t>(w);
        std::memcpy(ub + d, &o, 4);
      }
      mark(d, v);
    });
  } else if (op == VecOp::Cast && (src0->dt == DT::F16 || src0->dt == DT::BF16) && dst.dt == DT::F32) {
    const bool bf = src0->dt == DT::BF16;
    visit([&](uint32_t d, uint32_t a0, uint32_t) {
      const float f = bf ? Bf16BitsToFloat(ld16(a0)) : HalfBitsToFloat(ld16(a0));  // exact
      std::memcpy(ub + d, &f, 4);
      mark(d, ok(a0, 2));
    });
  } else if (op == VecOp::Cast && src0->dt == DT::F32 && (dst.dt == DT::F16 || dst.dt == DT::BF16) &&
             (round_mode == kRint || round_mode == kNone)) {
    const bool bf = dst.dt == DT::BF16;
    visit([&](uint32_t d, uint32_t a0, uint32_t) {
      float f;
      std::memcpy(&f, ub + a0, 4);
      uint16_t h;
      if (bf) {
        h = FloatToBf16Bits(f);
        if (sat) {
          if ((h & 0x7fffu) > 0x7f80u) h = 0;
          else if ((h & 0x7fffu) == 0x7f80u) h = static_cast<uint16_t>((h & 0x8000u) | 0x7f7fu);
        }
      } else {
        h = sath(FloatToHalfBits(f));
      }
      std::memcpy(ub + d, &h, 2);
      mark(d, ok(a0, 4));
    });
  } else if (op == VecOp::Cast) {
    const bool integral = src0->dt == DT::F32 && dst.dt == DT::F32;  // float -> float: round to integral
    visit([&](uint32_t d, uint32_t a0, uint32_t) {
      long double a = Load(src0->dt, ub + a0);
      if (integral && std::isfinite(a) && std::fabs(a) < 8388608.0L)
        a = std::copysign(static_cast<long double>(RoundUnits(std::fabs(a), round_mode, a < 0)), a);
      Store(dst.dt, ub + d, a, round_mode, sat);
      mark(d, ok(a0, ssz));
    });
  } else {
    Fail("VEC_DTYPE", "%s: no implementation for %s", api, DTName(dst.dt));
  }
}


// Gather, tensor front-n form (离散与聚合/Gather.md): dst[i] = src element at byte srcBaseAddr + srcOffset[i].
// Rules: T in the SoC's list (VEC_DTYPE); dst, src, srcOffset 32-byte aligned (VEC_ALIGN); srcBaseAddr and
// every offset a multiple of sizeof(T) (GATHER_OFFSET: "应保证src元素类型位宽对齐"); every element read lies
// inside src's buffer (UB_OUT_OF_BUFFER; the documented limit is the UB, the emulation's LocalTensor policy is
// the buffer); an offset nothing has written is a garbage address (UB_UNINIT_READ); dst may not share memory
// with src ("不支持源操作数与目的操作数使用同一块内存地址") nor partially with srcOffset (VEC_OVERLAP);
// count 0 is a NOP.
void Gather(const VecOperand& dst, const VecOperand& src, const VecOperand& off, uint32_t base, uint64_t count) {
  Core& c = Cur();
  const char* api = "Gather";
  ++c.st.vec_ops;
  RequireDtype(dst.dt, api);
  RequireDtype(src.dt, api);
  const bool p310 = c.L->caps.family == "310P";
  const DT t = dst.dt;
  const bool ok_dt = t == DT::I16 || t == DT::U16 || t == DT::F16 || t == DT::I32 || t == DT::U32 || t == DT::F32 ||
                     (t == DT::BF16 && !p310);
  if (!ok_dt || src.dt != dst.dt)
    Fail("VEC_DTYPE", "Gather on %s: %s supports only int16_t, uint16_t, half, %sint32_t, uint32_t, float (dst and src "
         "of one type)", DTName(t), c.L->caps.soc.c_str(), p310 ? "" : "bfloat16_t, ");
  if (off.dt != DT::U32) Fail("VEC_DTYPE", "Gather: srcOffset must be LocalTensor<uint32_t>, got %s", DTName(off.dt));
  if (count == 0) return;  // documented NOP on A2/A3
  const uint32_t sz = DTSize(t);
  const struct { const VecOperand* o; const char* name; } ops[3] = {{&dst, "dst"}, {&src, "src"}, {&off, "srcOffset"}};
  for (const auto& o : ops)
    if (o.o->ub.addr % 32 != 0)
      Fail("VEC_ALIGN", "Gather: operand %s starts at UB address %u, not 32-byte aligned", o.name, o.o->ub.addr);
  if (base % sz != 0)
    Fail("GATHER_OFFSET", "Gather: srcBaseAddr = %u is not a multiple of sizeof(%s) = %u", base, DTName(t), sz);
  CheckUb(c, dst.ub, 0, count * sz, api, "operand dst");
  CheckUb(c, off.ub, 0, count * 4, api, "operand srcOffset");
  uint8_t* ub = c.ub.data();
  const uint64_t d0 = dst.ub.addr, d1 = d0 + count * sz;
  const uint64_t o0 = off.ub.addr, o1 = o0 + count * 4;
  if (d0 < o1 && o0 < d1 && !(d0 == o0 && sz == 4))
    Fail("VEC_OVERLAP", "Gather: dst [%" PRIu64 ", %" PRIu64 ") and srcOffset [%" PRIu64 ", %" PRIu64
         ") overlap partially", d0, d1, o0, o1);
  std::vector<uint32_t> addr(count);
  for (uint64_t i = 0; i < count; ++i) {
    const uint32_t oa = static_cast<uint32_t>(o0 + 4 * i);
    uint32_t bad = 0;
    if (c.L->uninit_checks && !UbValid(c, oa, 4, &bad))
      Fail("UB_UNINIT_READ", "Gather: srcOffset[%" PRIu64 "] (UB byte %u) was never written: it holds a garbage "
           "address", i, bad);
    uint32_t o;
    std::memcpy(&o, ub + oa, 4);
    if (o % sz != 0)
      Fail("GATHER_OFFSET", "Gather: srcOffset[%" PRIu64 "] = %u is not a multiple of sizeof(%s) = %u", i, o, DTName(t),
           sz);
    const uint64_t rel = static_cast<uint64_t>(base) + o;
    CheckUb(c, src.ub, rel, sz, api, Format("src element srcBaseAddr + srcOffset[%" PRIu64 "] = %" PRIu64, i, rel).c_str());
    const uint64_t a = src.ub.addr + rel;
    if (a < d1 && d0 < a + sz)
      Fail("VEC_OVERLAP", "Gather: srcOffset[%" PRIu64 "] reads UB byte %" PRIu64 " inside dst [%" PRIu64 ", %" PRIu64
           "): source and destination may not share memory", i, a, d0, d1);
    addr[i] = static_cast<uint32_t>(a);
  }
  HzIssue(c, kV);
  CostVec(c, count * sz);
  if (c.L->hazards) {
    HzUb(c, kV, static_cast<uint32_t>(o0), static_cast<uint32_t>(count * 4), false, api);
    std::set<uint32_t> blocks;
    for (uint32_t a : addr) blocks.insert(a / 32);
    for (uint32_t b : blocks) HzUb(c, kV, b * 32, 32, false, api);
    HzUb(c, kV, static_cast<uint32_t>(d0), static_cast<uint32_t>(count * sz), true, api);
  }
  std::vector<uint8_t> vals(count * sz), valid(count);
  for (uint64_t i = 0; i < count; ++i) {
    std::memcpy(vals.data() + i * sz, ub + addr[i], sz);
    uint32_t bad = 0;
    valid[i] = UbValid(c, addr[i], sz, &bad) ? 1 : 0;
  }
  std::memcpy(ub + d0, vals.data(), count * sz);
  for (uint64_t i = 0; i < count; ++i) UbMarkValid(c, static_cast<uint32_t>(d0 + i * sz), sz, valid[i] != 0);
}

}  // namespace rt
}  // namespace ascendc_sim
