// AscendC CPU emulation: the device scalar types `half` (IEEE 754 binary16) and `bfloat16_t`
// (bfloat16), bit-exact, with round-to-nearest-even conversions from float.
//
// Both are trivially copyable 2-byte types. They convert implicitly from any arithmetic type and
// to float, so scalar kernel code (`half h = x; float f = h; T(0)`) behaves like bisheng's builtin
// types: arithmetic on them is done in float and rounded back on assignment.
#ifndef ASCENDC_SIM_TYPES_H_
#define ASCENDC_SIM_TYPES_H_

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace ascendc_sim {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// float -> binary16, round to nearest even; overflow -> inf; NaN -> quiet NaN (sign kept).
inline uint16_t FloatToHalfBits(float f) {
  const uint32_t x = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u));
  }
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520 -> inf
  if (ax < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    if (ax < 0x33000000u) return sign;  // < 2^-25: rounds to zero (2^-25 exactly ties to even 0)
    const uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
    const int shift = 113 - static_cast<int>(ax >> 23) + 13;  // bits to drop
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  // normal: rebias exponent 127 -> 15 and round 23 -> 10 mantissa bits
  uint32_t r = ax - 0x38000000u;  // exponent -= 112
  const uint32_t rem = r & 0x1fffu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;  // carry may bump the exponent (fine)
  return static_cast<uint16_t>(sign | r);
}

inline float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  if (e == 0x1f) return BitsFloat(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    if (m == 0) return BitsFloat(sign);
    int ee = -1;  // normalise the subnormal
    do {
      ++ee;
      m <<= 1;
    } while ((m & 0x400u) == 0);
    return BitsFloat(sign | static_cast<uint32_t>(112 - ee) << 23 | ((m & 0x3ffu) << 13));
  }
  return BitsFloat(sign | ((e + 112u) << 23) | (m << 13));
}

// float -> bfloat16, round to nearest even; NaN -> quiet NaN (sign kept).
inline uint16_t FloatToBf16Bits(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>(((x >> 16) & 0x8000u) | 0x7fc0u);
  const uint32_t lsb = (x >> 16) & 1u;
  return static_cast<uint16_t>((x + 0x7fffu + lsb) >> 16);
}
inline float Bf16BitsToFloat(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

struct HalfTag {};
struct Bf16Tag {};

}  // namespace ascendc_sim

// ---------------------------------------------------------------------------------------------- half
struct half {
  uint16_t bits_;
  half() = default;
  template <typename U, typename std::enable_if<std::is_arithmetic<U>::value, int>::type = 0>
  half(U v) : bits_(ascendc_sim::FloatToHalfBits(static_cast<float>(v))) {}  // NOLINT
  operator float() const { return ascendc_sim::HalfBitsToFloat(bits_); }  // NOLINT
  static half FromBits(uint16_t b) {
    half h;
    h.bits_ = b;
    return h;
  }
  uint16_t ToBits() const { return bits_; }
};
static_assert(sizeof(half) == 2 && std::is_trivially_copyable<half>::value, "half layout");

// ---------------------------------------------------------------------------------------------- bf16
struct bfloat16_t {
  uint16_t bits_;
  bfloat16_t() = default;
  template <typename U, typename std::enable_if<std::is_arithmetic<U>::value, int>::type = 0>
  bfloat16_t(U v) : bits_(ascendc_sim::FloatToBf16Bits(static_cast<float>(v))) {}  // NOLINT
  operator float() const { return ascendc_sim::Bf16BitsToFloat(bits_); }  // NOLINT
  static bfloat16_t FromBits(uint16_t b) {
    bfloat16_t h;
    h.bits_ = b;
    return h;
  }
  uint16_t ToBits() const { return bits_; }
};
static_assert(sizeof(bfloat16_t) == 2 && std::is_trivially_copyable<bfloat16_t>::value, "bf16 layout");

namespace ascendc_sim {

// Element type ids shared by the kernel headers and the runtime.
enum class DT : uint8_t { B8, U8, I8, U16, I16, F16, BF16, U32, I32, F32, U64, I64, F64, UNKNOWN };

template <typename T> struct DTOf { static constexpr DT value = DT::UNKNOWN; };
template <> struct DTOf<bool> { static constexpr DT value = DT::B8; };
template <> struct DTOf<uint8_t> { static constexpr DT value = DT::U8; };
template <> struct DTOf<int8_t> { static constexpr DT value = DT::I8; };
template <> struct DTOf<uint16_t> { static constexpr DT value = DT::U16; };
template <> struct DTOf<int16_t> { static constexpr DT value = DT::I16; };
template <> struct DTOf<half> { static constexpr DT value = DT::F16; };
template <> struct DTOf<bfloat16_t> { static constexpr DT value = DT::BF16; };
template <> struct DTOf<uint32_t> { static constexpr DT value = DT::U32; };
template <> struct DTOf<int32_t> { static constexpr DT value = DT::I32; };
template <> struct DTOf<float> { static constexpr DT value = DT::F32; };
template <> struct DTOf<uint64_t> { static constexpr DT value = DT::U64; };
template <> struct DTOf<int64_t> { static constexpr DT value = DT::I64; };
template <> struct DTOf<double> { static constexpr DT value = DT::F64; };

}  // namespace ascendc_sim

#endif  // ASCENDC_SIM_TYPES_H_
