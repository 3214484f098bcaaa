// Double-float ("float-float") arithmetic with AscendC vector instructions, for the two places where the
// cpu backend evaluates in fp64 and rounds once to fp32: the rerope delta rotation and the RMSNorm scale
// of fp32 data (cpu_kernel/rope_body.inl). A value is an unevaluated sum hi + lo of two fp32 numbers
// (|lo| <= ulp(hi) / 2), about 48 significant bits; every primitive below is a fixed sequence of fp32
// vector instructions (one IEEE rounding each, no FMA), so the result does not depend on the device's
// Div / Sqrt accuracy either: each quotient / root is corrected with an exactly computed residual.
//
//   Split       Veltkamp: c = a * 4097, hi = c - (c - a), lo = a - hi (hi, lo: 12-bit halves)
//   Prod        Dekker: p = a * b, e = ((ah*bh - p) + ah*bl + al*bh) + al*bl, so p + e == a * b exactly
//   Add2        (ah, al) + (bh, bl): TwoSum of the high parts, the low parts added to its error, FastTwoSum
//   Quotient    fl32((nh + nl) / (dh + dl)): q1 = nh / dh, r = ((nh - q1*dh) + nl) - q1*dl with q1*dh exact
//               (Prod), q = q1 + r / dh rounded once
//
// All operate on the first n elements of 32-byte aligned fp32 tensors (tensor front-n form); an output
// may be one of its own inputs only where noted. Device subset only.
#ifndef MS_KVCACHE_OP_KERNEL_ROPE_DD_H_
#define MS_KVCACHE_OP_KERNEL_ROPE_DD_H_

#include "kernel_operator.h"

namespace mskv {
namespace dd {

using Vec = AscendC::LocalTensor<float>;

// hi + lo == a, hi and lo with at most 12 significant bits each. t: scratch.
__aicore__ inline void Split(const Vec& a, const Vec& hi, const Vec& lo, const Vec& t, int32_t n) {
  AscendC::Muls(t, a, 4097.0f, n);
  AscendC::Sub(hi, t, a, n);
  AscendC::Sub(hi, t, hi, n);
  AscendC::Sub(lo, a, hi, n);
}

// p + e == a * b exactly (no overflow / underflow), given the splits of a and b. t: scratch.
__aicore__ inline void Prod(const Vec& a, const Vec& ah, const Vec& al, const Vec& b, const Vec& bh, const Vec& bl,
                            const Vec& p, const Vec& e, const Vec& t, int32_t n) {
  AscendC::Mul(p, a, b, n);
  AscendC::Mul(e, ah, bh, n);
  AscendC::Sub(e, e, p, n);
  AscendC::Mul(t, ah, bl, n);
  AscendC::Add(e, e, t, n);
  AscendC::Mul(t, al, bh, n);
  AscendC::Add(e, e, t, n);
  AscendC::Mul(t, al, bl, n);
  AscendC::Add(e, e, t, n);
}

// (rh, rl) = (ah, al) + (bh, bl). s, e, t: scratch, distinct from everything else; rh / rl may be ah / al.
__aicore__ inline void Add2(const Vec& ah, const Vec& al, const Vec& bh, const Vec& bl, const Vec& rh, const Vec& rl,
                            const Vec& s, const Vec& e, const Vec& t, int32_t n) {
  AscendC::Add(s, ah, bh, n);   // TwoSum(ah, bh) -> s + e
  AscendC::Sub(t, s, ah, n);
  AscendC::Sub(e, s, t, n);
  AscendC::Sub(e, ah, e, n);
  AscendC::Sub(t, bh, t, n);
  AscendC::Add(e, e, t, n);
  AscendC::Add(e, e, al, n);    // + the low parts
  AscendC::Add(e, e, bl, n);
  AscendC::Add(rh, s, e, n);    // FastTwoSum(s, e)
  AscendC::Sub(rl, rh, s, n);
  AscendC::Sub(rl, e, rl, n);
}

// out = fl32((nh + nl) / (dh + dl)); dhh / dhl: the split of dh. q1, qh, ql, p, pe, t: scratch (distinct);
// out may be nh.
__aicore__ inline void Quotient(const Vec& nh, const Vec& nl, const Vec& dh, const Vec& dl, const Vec& dhh,
                                const Vec& dhl, const Vec& out, const Vec& q1, const Vec& qh, const Vec& ql,
                                const Vec& p, const Vec& pe, const Vec& t, int32_t n) {
  AscendC::Div(q1, nh, dh, n);
  Split(q1, qh, ql, t, n);
  Prod(q1, qh, ql, dh, dhh, dhl, p, pe, t, n);
  AscendC::Sub(t, nh, p, n);  // exact (Sterbenz: p is within a factor 2 of nh)
  AscendC::Sub(t, t, pe, n);
  AscendC::Add(t, t, nl, n);
  AscendC::Mul(p, q1, dl, n);
  AscendC::Sub(t, t, p, n);
  AscendC::Div(t, t, dh, n);
  AscendC::Add(out, q1, t, n);
}

}  // namespace dd
}  // namespace mskv

#endif  // MS_KVCACHE_OP_KERNEL_ROPE_DD_H_
