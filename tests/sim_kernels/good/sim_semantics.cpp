// Correct kernels that exercise the semantics of the emulated AscendC APIs; tests/test_sim_semantics.py
// compares their outputs bit for bit with independent numpy references.
#include "kernel_operator.h"

using namespace AscendC;

struct SemTiling {
  uint32_t n;
  float scalarF;
  int32_t scalarI;
  uint32_t pad;
};

// -------------------------------------------------------------------------------------------------
// Scalar conversions of the device types: yh[i] = half(x[i]), yb[i] = bfloat16_t(x[i]),
// back[i] = float(half(x[i])), back[n + i] = float(bfloat16_t(x[i])).
extern "C" __global__ __aicore__ void sem_scalar_convert(GM_ADDR x, GM_ADDR yh, GM_ADDR yb, GM_ADDR back,
                                                         GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA_WITH_STRUCT(SemTiling, t, tiling);
  GlobalTensor<float> xg, bg;
  GlobalTensor<half> hg;
  GlobalTensor<bfloat16_t> fg;
  xg.SetGlobalBuffer((__gm__ float*)x, t.n);
  hg.SetGlobalBuffer((__gm__ half*)yh, t.n);
  fg.SetGlobalBuffer((__gm__ bfloat16_t*)yb, t.n);
  bg.SetGlobalBuffer((__gm__ float*)back, 2 * t.n);
  for (uint32_t i = 0; i < t.n; ++i) {
    const float v = xg.GetValue(i);
    const half h = v;
    const bfloat16_t b = v;
    hg.SetValue(i, h);
    fg.SetValue(i, b);
    bg.SetValue(i, static_cast<float>(h));
    bg.SetValue(t.n + i, static_cast<float>(b));
  }
}

// -------------------------------------------------------------------------------------------------
// Vector arithmetic: y = op(a, b) or op(a, scalar) over n elements of T (n * sizeof(T) % 32 == 0).
// tiling key = 10 * op + type; op: 0 Add, 1 Sub, 2 Mul, 3 Adds, 4 Muls, 5 Max, 6 Min, 7 Maxs, 8 Mins,
// 9 Abs, 10 Relu; type: 0 half, 1 float, 2 int16_t, 3 int32_t.
template <typename T>
__aicore__ inline T ScalarOf(const SemTiling& t) {
  return static_cast<T>(t.scalarF);
}
template <>
__aicore__ inline int16_t ScalarOf<int16_t>(const SemTiling& t) {
  return static_cast<int16_t>(t.scalarI);
}
template <>
__aicore__ inline int32_t ScalarOf<int32_t>(const SemTiling& t) {
  return t.scalarI;
}

// Abs exists for half / float, Relu for half / int32_t / float: other types never call them
template <typename T>
__aicore__ inline void VecUnary(const LocalTensor<T>& d, const LocalTensor<T>& a, int32_t n, bool abs) {
  if (abs) Abs(d, a, n);
  else Relu(d, a, n);
}
template <>
__aicore__ inline void VecUnary<int16_t>(const LocalTensor<int16_t>&, const LocalTensor<int16_t>&, int32_t, bool) {}
template <>
__aicore__ inline void VecUnary<int32_t>(const LocalTensor<int32_t>& d, const LocalTensor<int32_t>& a, int32_t n,
                                         bool abs) {
  if (!abs) Relu(d, a, n);
}

template <typename T>
__aicore__ inline void VecRun(GM_ADDR a, GM_ADDR b, GM_ADDR y, const SemTiling& t, int op) {
  GlobalTensor<T> ag, bg, yg;
  ag.SetGlobalBuffer((__gm__ T*)a, t.n);
  bg.SetGlobalBuffer((__gm__ T*)b, t.n);
  yg.SetGlobalBuffer((__gm__ T*)y, t.n);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> qa, qb;
  TQue<TPosition::VECOUT, 1> qy;
  pipe.InitBuffer(qa, 1, t.n * sizeof(T));
  pipe.InitBuffer(qb, 1, t.n * sizeof(T));
  pipe.InitBuffer(qy, 1, t.n * sizeof(T));
  LocalTensor<T> la = qa.AllocTensor<T>();
  LocalTensor<T> lb = qb.AllocTensor<T>();
  DataCopy(la, ag, t.n);
  DataCopy(lb, bg, t.n);
  qa.EnQue(la);
  qb.EnQue(lb);
  la = qa.DeQue<T>();
  lb = qb.DeQue<T>();
  LocalTensor<T> ly = qy.AllocTensor<T>();
  const T s = ScalarOf<T>(t);
  const int32_t n = static_cast<int32_t>(t.n);
  switch (op) {
    case 0: Add(ly, la, lb, n); break;
    case 1: Sub(ly, la, lb, n); break;
    case 2: Mul(ly, la, lb, n); break;
    case 3: Adds(ly, la, s, n); break;
    case 4: Muls(ly, la, s, n); break;
    case 5: Max(ly, la, lb, n); break;
    case 6: Min(ly, la, lb, n); break;
    case 7: Maxs(ly, la, s, n); break;
    case 8: Mins(ly, la, s, n); break;
    case 9: VecUnary<T>(ly, la, n, true); break;
    default: VecUnary<T>(ly, la, n, false); break;
  }
  qy.EnQue(ly);
  qa.FreeTensor(la);
  qb.FreeTensor(lb);
  ly = qy.DeQue<T>();
  DataCopy(yg, ly, t.n);
  qy.FreeTensor(ly);
}

extern "C" __global__ __aicore__ void sem_vec(GM_ADDR a, GM_ADDR b, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA_WITH_STRUCT(SemTiling, t, tiling);
  for (int op = 0; op < 11; ++op) {
    if (TILING_KEY_IS(10 * op + 0)) VecRun<half>(a, b, y, t, op);
    if (TILING_KEY_IS(10 * op + 1)) VecRun<float>(a, b, y, t, op);
    if (TILING_KEY_IS(10 * op + 2)) VecRun<int16_t>(a, b, y, t, op);
    if (TILING_KEY_IS(10 * op + 3)) VecRun<int32_t>(a, b, y, t, op);
  }
}

// -------------------------------------------------------------------------------------------------
// Cast with every round mode: tiling scalarI = 1000 * src + 10 * dst + mode (RoundMode value);
// type codes 0 float, 1 half, 2 bfloat16_t, 3 int32_t, 4 int8_t, 5 int16_t.
template <typename D, typename S>
__aicore__ inline void CastRun(GM_ADDR x, GM_ADDR y, uint32_t n, RoundMode mode) {
  GlobalTensor<S> xg;
  GlobalTensor<D> yg;
  xg.SetGlobalBuffer((__gm__ S*)x, n);
  yg.SetGlobalBuffer((__gm__ D*)y, n);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> qi;
  TQue<TPosition::VECOUT, 1> qo;
  pipe.InitBuffer(qi, 1, n * sizeof(S));
  pipe.InitBuffer(qo, 1, n * sizeof(D));
  LocalTensor<S> li = qi.AllocTensor<S>();
  DataCopy(li, xg, n);
  qi.EnQue(li);
  li = qi.DeQue<S>();
  LocalTensor<D> lo = qo.AllocTensor<D>();
  Cast(lo, li, mode, n);
  qo.EnQue(lo);
  qi.FreeTensor(li);
  lo = qo.DeQue<D>();
  DataCopy(yg, lo, n);
  qo.FreeTensor(lo);
}

extern "C" __global__ __aicore__ void sem_cast(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA_WITH_STRUCT(SemTiling, t, tiling);
  const uint32_t key = static_cast<uint32_t>(t.scalarI);
  const RoundMode mode = static_cast<RoundMode>(key % 10);
  const uint32_t pair = key / 10;
  switch (pair) {
    case 1: CastRun<half, float>(x, y, t.n, mode); break;           // 0 -> 1
#if __CCE_AICORE__ >= 220  // Cast from / to bfloat16_t: A2/A3 only (does not compile for 310P)
    case 2: CastRun<bfloat16_t, float>(x, y, t.n, mode); break;     // 0 -> 2
#endif
    case 3: CastRun<int32_t, float>(x, y, t.n, mode); break;        // 0 -> 3
    case 0: CastRun<float, float>(x, y, t.n, mode); break;          // 0 -> 0
    case 100: CastRun<float, half>(x, y, t.n, mode); break;         // 1 -> 0
    case 103: CastRun<int32_t, half>(x, y, t.n, mode); break;       // 1 -> 3
    case 104: CastRun<int8_t, half>(x, y, t.n, mode); break;        // 1 -> 4
#if __CCE_AICORE__ >= 220
    case 200: CastRun<float, bfloat16_t>(x, y, t.n, mode); break;   // 2 -> 0
#endif
    case 300: CastRun<float, int32_t>(x, y, t.n, mode); break;      // 3 -> 0
    case 305: CastRun<int16_t, int32_t>(x, y, t.n, mode); break;    // 3 -> 5
    case 501: CastRun<half, int16_t>(x, y, t.n, mode); break;       // 5 -> 1
    default: break;
  }
}

#if __CCE_AICORE__ >= 220  // DataCopyPad exists on A2/A3 only (310P build: no sem_pad)
// -------------------------------------------------------------------------------------------------
// DataCopyPad / DataCopyParams layouts. x: float32 source rows; y: the UB image after the copies;
// z: rows written back with DataCopyPad(UB -> GM) strides.
extern "C" __global__ __aicore__ void sem_pad(GM_ADDR x, GM_ADDR y, GM_ADDR z, GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  (void)tiling;
  GlobalTensor<float> xg, yg, zg;
  xg.SetGlobalBuffer((__gm__ float*)x, 256);
  yg.SetGlobalBuffer((__gm__ float*)y, 256);
  zg.SetGlobalBuffer((__gm__ float*)z, 256);
  TPipe pipe;
  TBuf<TPosition::VECCALC> ub;
  pipe.InitBuffer(ub, 256 * sizeof(float));
  LocalTensor<float> t = ub.Get<float>();
  Duplicate(t, -1.0f, 256);
  SetFlag<HardEvent::V_MTE2>(EVENT_ID0);
  WaitFlag<HardEvent::V_MTE2>(EVENT_ID0);
  // (a) 3 rows of 5 floats, GM gap 8 bytes, 1 left + 2 right pads of -7, UB row gap 1 block:
  //     UB rows of 8 floats at t[0], t[16], t[32]
  DataCopyExtParams pa{3, 5 * sizeof(float), 8, 1, 0};
  DataCopyPadExtParams<float> pada{true, 1, 2, -7.0f};
  DataCopyPad(t, xg, pa, pada);
  // (b) 2 rows of 5 floats without pads: the dummy tail of each 32-byte row repeats its first element
  DataCopyExtParams pb{2, 5 * sizeof(float), 0, 0, 0};
  DataCopyPadExtParams<float> padb{false, 0, 0, 0.0f};
  DataCopyPad(t[64], xg[100], pb, padb);
  // (c) DataCopyParams: 2 blocks of 32 B, GM gap 1 block, UB gap 2 blocks -> t[96], t[120]
  DataCopyParams pc{2, 1, 1, 2};
  DataCopy(t[96], xg[200], pc);
  SetFlag<HardEvent::MTE2_MTE3>(EVENT_ID0);
  WaitFlag<HardEvent::MTE2_MTE3>(EVENT_ID0);
  DataCopy(yg, t, 256);
  // (d) UB -> GM: rows of 6 floats from UB rows t[0], t[16] (UB gap 1 block) to GM with a 4-byte gap
  DataCopyExtParams pd{2, 6 * sizeof(float), 1, 4, 0};
  DataCopyPad(zg, t, pd);
}
#endif  // __CCE_AICORE__ >= 220

// -------------------------------------------------------------------------------------------------
// Repeat / mask forms of Add, Muls, Cast with strides.
extern "C" __global__ __aicore__ void sem_repeat(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  (void)tiling;
  constexpr uint32_t kN = 1024;
  GlobalTensor<float> xg, yg;
  xg.SetGlobalBuffer((__gm__ float*)x, kN);
  yg.SetGlobalBuffer((__gm__ float*)y, kN);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> qin;
  TQue<TPosition::VECOUT, 1> qout;
  TBuf<TPosition::VECCALC> tmp;
  pipe.InitBuffer(qin, 1, kN * sizeof(float));
  pipe.InitBuffer(qout, 1, kN * sizeof(float));
  pipe.InitBuffer(tmp, kN * sizeof(half));
  LocalTensor<float> a = qin.AllocTensor<float>();
  DataCopy(a, xg, kN);
  qin.EnQue(a);
  a = qin.DeQue<float>();
  LocalTensor<float> o = qout.AllocTensor<float>();
  Duplicate(o, -1.0f, kN);
  Add(o, a, a[512], 64, 8, {1, 1, 1, 8, 8, 8});        // o[0:512) = a[0:512) + a[512:1024)
  Muls(o[512], a, 3.0f, 40, 4, {1, 2, 8, 16});          // first 40 of every repeat, source block stride 2
  LocalTensor<half> h = tmp.Get<half>();
  Duplicate(h, half(0), kN);
  uint64_t odd[2] = {0xAAAAAAAAAAAAAAAAull, 0};
  Cast(h, a, RoundMode::CAST_RINT, odd, 4, {1, 1, 4, 8});  // odd elements of a[0:256) -> half
  Cast(o[768], h, RoundMode::CAST_NONE, 64, 4, {1, 1, 8, 4});
  // counter mode with the mask register: the next 40 elements after o[0] get +100 (isSetMask = false)
  SetMaskCount();
  SetVectorMask<float, MaskMode::COUNTER>(0, 40);
  Adds<float, false>(o, o, 100.0f, MASK_PLACEHOLDER, 1, {1, 1, 8, 8});
  SetMaskNorm();
  ResetMask();
  qout.EnQue(o);
  qin.FreeTensor(a);
  o = qout.DeQue<float>();
  DataCopy(yg, o, kN);
  qout.FreeTensor(o);
}

// -------------------------------------------------------------------------------------------------
// Div / Sqrt (front-n form): y = a / b (tiling key 0 half, 1 float) or y = sqrt(a) (key 10 half, 11 float).
template <typename T>
__aicore__ inline void DivSqrtRun(GM_ADDR a, GM_ADDR b, GM_ADDR y, uint32_t n, bool sqrt) {
  GlobalTensor<T> ag, bg, yg;
  ag.SetGlobalBuffer((__gm__ T*)a, n);
  bg.SetGlobalBuffer((__gm__ T*)b, n);
  yg.SetGlobalBuffer((__gm__ T*)y, n);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> qa, qb;
  TQue<TPosition::VECOUT, 1> qy;
  pipe.InitBuffer(qa, 1, n * sizeof(T));
  pipe.InitBuffer(qb, 1, n * sizeof(T));
  pipe.InitBuffer(qy, 1, n * sizeof(T));
  LocalTensor<T> la = qa.AllocTensor<T>();
  LocalTensor<T> lb = qb.AllocTensor<T>();
  DataCopy(la, ag, n);
  DataCopy(lb, bg, n);
  qa.EnQue(la);
  qb.EnQue(lb);
  la = qa.DeQue<T>();
  lb = qb.DeQue<T>();
  LocalTensor<T> ly = qy.AllocTensor<T>();
  if (sqrt) Sqrt(ly, la, static_cast<int32_t>(n));
  else Div(ly, la, lb, static_cast<int32_t>(n));
  qy.EnQue(ly);
  qa.FreeTensor(la);
  qb.FreeTensor(lb);
  ly = qy.DeQue<T>();
  DataCopy(yg, ly, n);
  qy.FreeTensor(ly);
}

extern "C" __global__ __aicore__ void sem_divsqrt(GM_ADDR a, GM_ADDR b, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA_WITH_STRUCT(SemTiling, t, tiling);
  if (TILING_KEY_IS(0)) DivSqrtRun<half>(a, b, y, t.n, false);
  if (TILING_KEY_IS(1)) DivSqrtRun<float>(a, b, y, t.n, false);
  if (TILING_KEY_IS(10)) DivSqrtRun<half>(a, b, y, t.n, true);
  if (TILING_KEY_IS(11)) DivSqrtRun<float>(a, b, y, t.n, true);
}

// -------------------------------------------------------------------------------------------------
// Gather (front-n form): y[i] = src element at byte srcBaseAddr + off[i], i < n; src has 512 elements of T,
// srcBaseAddr = tiling scalarI. Key: 0 half, 1 float, 2 int32_t, 3 bfloat16_t, 4 int16_t, 5 uint32_t.
template <typename T>
__aicore__ inline void GatherRun(GM_ADDR src, GM_ADDR off, GM_ADDR y, uint32_t n, uint32_t base) {
  constexpr uint32_t kSrc = 512;
  GlobalTensor<T> sg, yg;
  GlobalTensor<uint32_t> og;
  sg.SetGlobalBuffer((__gm__ T*)src, kSrc);
  og.SetGlobalBuffer((__gm__ uint32_t*)off, n);
  yg.SetGlobalBuffer((__gm__ T*)y, n);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> qs, qo;
  TQue<TPosition::VECOUT, 1> qy;
  pipe.InitBuffer(qs, 1, kSrc * sizeof(T));
  pipe.InitBuffer(qo, 1, n * sizeof(uint32_t));
  pipe.InitBuffer(qy, 1, n * sizeof(T));
  LocalTensor<T> ls = qs.AllocTensor<T>();
  LocalTensor<uint32_t> lo = qo.AllocTensor<uint32_t>();
  DataCopy(ls, sg, kSrc);
  DataCopy(lo, og, n);
  qs.EnQue(ls);
  qo.EnQue(lo);
  ls = qs.DeQue<T>();
  lo = qo.DeQue<uint32_t>();
  LocalTensor<T> ly = qy.AllocTensor<T>();
  Gather(ly, ls, lo, base, n);
  qy.EnQue(ly);
  qs.FreeTensor(ls);
  qo.FreeTensor(lo);
  ly = qy.DeQue<T>();
  DataCopy(yg, ly, n);
  qy.FreeTensor(ly);
}

extern "C" __global__ __aicore__ void sem_gather(GM_ADDR src, GM_ADDR off, GM_ADDR y, GM_ADDR workspace,
                                                 GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA_WITH_STRUCT(SemTiling, t, tiling);
  const uint32_t base = static_cast<uint32_t>(t.scalarI);
  if (TILING_KEY_IS(0)) GatherRun<half>(src, off, y, t.n, base);
  if (TILING_KEY_IS(1)) GatherRun<float>(src, off, y, t.n, base);
  if (TILING_KEY_IS(2)) GatherRun<int32_t>(src, off, y, t.n, base);
  if (TILING_KEY_IS(3)) GatherRun<bfloat16_t>(src, off, y, t.n, base);
  if (TILING_KEY_IS(4)) GatherRun<int16_t>(src, off, y, t.n, base);
  if (TILING_KEY_IS(5)) GatherRun<uint32_t>(src, off, y, t.n, base);
}
