// The corrected twins of emu_rejects.cpp: the same APIs used as the official headers declare them.
// tests/test_sim_conformance.py builds this file for both arch families and launches every kernel on
// Atlas A2 and Ascend310P (the DataCopyPad one on A2/A3 only), checking what it writes to y.
//
// Every kernel takes (x, y, workspace, tiling): x is float32[64], y float32[64]; each writes y[0..k).
#include "kernel_operator.h"
#include "kernel_operator_list_tensor_intf.h"  // ListTensorDesc (acc_listdesc)

using namespace AscendC;

#define PROBE(name) extern "C" __global__ __aicore__ void name(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling)

namespace {
constexpr uint32_t kN = 64;
}  // namespace

// y[0] = the number of tensors of the list at x (a ListTensorDesc built by the test).
PROBE(acc_listdesc) {
  (void)workspace;
  (void)tiling;
  AscendC::ListTensorDesc list(x);  // ACCEPT(listdesc)
  GlobalTensor<float> yg;
  yg.SetGlobalBuffer((__gm__ float*)y, kN);
  yg.SetValue(0, static_cast<float>(list.GetSize()));
}

// y = x + 1 through a TQue<VECIN> / TQue<VECOUT> pair, FreeTensor of non-const tensors.
PROBE(acc_freetensor) {
  (void)workspace;
  (void)tiling;
  GlobalTensor<float> xg, yg;
  xg.SetGlobalBuffer((__gm__ float*)x, kN);
  yg.SetGlobalBuffer((__gm__ float*)y, kN);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> qin;
  TQue<TPosition::VECOUT, 1> qout;
  pipe.InitBuffer(qin, 1, kN * sizeof(float));
  pipe.InitBuffer(qout, 1, kN * sizeof(float));
  LocalTensor<float> a = qin.AllocTensor<float>();
  DataCopy(a, xg, kN);
  qin.EnQue(a);
  a = qin.DeQue<float>();
  LocalTensor<float> b = qout.AllocTensor<float>();
  Adds(b, a, 1.0f, kN);
  qout.EnQue(b);
  qin.FreeTensor(a);  // ACCEPT(freetensor_const)
  b = qout.DeQue<float>();
  DataCopy(yg, b, kN);
  qout.FreeTensor(b);
}

// VECCALC work memory is a TBuf; y = x * 2.
PROBE(acc_veccalc_tbuf) {
  (void)workspace;
  (void)tiling;
  GlobalTensor<float> xg, yg;
  xg.SetGlobalBuffer((__gm__ float*)x, kN);
  yg.SetGlobalBuffer((__gm__ float*)y, kN);
  TPipe pipe;
  TBuf<TPosition::VECCALC> work;  // ACCEPT(tque_veccalc)
  pipe.InitBuffer(work, kN * sizeof(float));
  LocalTensor<float> t = work.Get<float>();
  DataCopy(t, xg, kN);
  SetFlag<HardEvent::MTE2_V>(EVENT_ID0);
  WaitFlag<HardEvent::MTE2_V>(EVENT_ID0);
  Muls(t, t, 2.0f, kN);
  SetFlag<HardEvent::V_MTE3>(EVENT_ID0);
  WaitFlag<HardEvent::V_MTE3>(EVENT_ID0);
  DataCopy(yg, t, kN);
}

// TQue<VECIN> used through its TQueBind<GM, VECIN> base; y = x.
PROBE(acc_tque_vecin_bind) {
  (void)workspace;
  (void)tiling;
  GlobalTensor<float> xg, yg;
  xg.SetGlobalBuffer((__gm__ float*)x, kN);
  yg.SetGlobalBuffer((__gm__ float*)y, kN);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  TQueBind<TPosition::GM, TPosition::VECIN, 1>& b = q;  // ACCEPT(tque_vecin_bind)
  pipe.InitBuffer(q, 1, kN * sizeof(float));
  LocalTensor<float> t = b.AllocTensor<float>();
  DataCopy(t, xg, kN);
  b.EnQue(t);
  t = b.DeQue<float>();
  for (uint32_t i = 0; i < kN; ++i) yg.SetValue(i, t.GetValue(i));
  b.FreeTensor(t);
}

// SetValue through a non-const GlobalTensor; the data reinterpreted with a second GlobalTensor on the
// same address (no GlobalTensor::ReinterpretCast on these archs); RoundMode::CAST_RINT.
PROBE(acc_gm_setvalue) {
  (void)workspace;
  (void)tiling;
  GlobalTensor<float> yg;
  yg.SetGlobalBuffer((__gm__ float*)y, kN);
  yg.SetValue(0, 3.0f);  // ACCEPT(gm_setvalue_const)
  GlobalTensor<int32_t> yi;
  yi.SetGlobalBuffer((__gm__ int32_t*)y, kN);  // ACCEPT(gm_reinterpret)
  yi.SetValue(1, 0x3f800000);  // the bits of 1.0f
  RoundMode m = RoundMode::CAST_RINT;  // ACCEPT(cast_hybrid)
  yg.SetValue(2, m == RoundMode::CAST_RINT ? 5.0f : 0.0f);
  int32_t pos = LocalTensor<float>().GetPosition();  // ACCEPT(getposition)
  yg.SetValue(3, static_cast<float>(pos));
  TPipe pipe;
  yg.SetValue(4, GetTPipePtr() == &pipe ? 7.0f : 0.0f);  // ACCEPT(gettpipeptr)
  yg.SetL2CacheHint(CacheMode::CACHE_MODE_NORMAL);  // ACCEPT(l2cache_template)
}

#if __CCE_AICORE__ >= 220  // DataCopyPad: A2/A3 only
// y[0..5) = x[0..5) through DataCopyPad (a 20-byte row).
PROBE(acc_datacopypad) {
  (void)workspace;
  (void)tiling;
  GlobalTensor<float> xg, yg;
  xg.SetGlobalBuffer((__gm__ float*)x, kN);
  yg.SetGlobalBuffer((__gm__ float*)y, kN);
  TPipe pipe;
  TQueBind<TPosition::VECIN, TPosition::VECOUT, 1> q;
  pipe.InitBuffer(q, 1, 1024);
  LocalTensor<float> t = q.AllocTensor<float>();
  DataCopyExtParams p{1, 5 * sizeof(float), 0, 0, 0};
  DataCopyPadExtParams<float> pad{false, 0, 0, 0.0f};
  DataCopyPad(t, xg, p, pad);  // ACCEPT(datacopypad_mode)
  q.EnQue(t);
  t = q.DeQue<float>();
  DataCopyPad(yg, t, p);  // ACCEPT(datacopypad)
  q.FreeTensor(t);
}
#endif

// Depth-1 queue: AllocTensor() / DeQue() return tensors; depth-0 queue: the in-place forms. y = x.
PROBE(acc_depth_forms) {
  (void)workspace;
  (void)tiling;
  GlobalTensor<float> xg, yg;
  xg.SetGlobalBuffer((__gm__ float*)x, kN);
  yg.SetGlobalBuffer((__gm__ float*)y, kN);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q1;
  TQue<TPosition::VECOUT, 0> q0;
  pipe.InitBuffer(q1, 1, kN * sizeof(float));
  pipe.InitBuffer(q0, 1, kN * sizeof(float));
  LocalTensor<float> a = q1.AllocTensor<float>();  // ACCEPT(alloc_depth0)
  bool vacant = q1.VacantInQue();  // ACCEPT(vacant_depth0)
  DataCopy(a, xg, kN);
  q1.EnQue(a);
  a = q1.DeQue<float>();  // ACCEPT(deque_inplace_depth1)
  LocalTensor<float> b;
  q0.AllocTensor<float>(b);  // ACCEPT(alloc_inplace_depth1)
  Adds(b, a, vacant ? 0.0f : 100.0f, kN);
  q0.EnQue(b);
  q0.DeQue<float>(b);
  DataCopy(yg, b, kN);
  q1.FreeTensor(a);
  q0.FreeTensor(b);
}

// Cast half -> float exists on both arch families (bfloat16 only on A2/A3). y[0..64) = 1.5.
PROBE(acc_cast_half) {
  (void)x;
  (void)workspace;
  (void)tiling;
  GlobalTensor<float> yg;
  yg.SetGlobalBuffer((__gm__ float*)y, kN);
  TPipe pipe;
  TBuf<TPosition::VECCALC> a, b;
  pipe.InitBuffer(a, kN * sizeof(half));
  pipe.InitBuffer(b, kN * sizeof(float));
  LocalTensor<half> h = a.Get<half>();
  LocalTensor<float> f = b.Get<float>();
  Duplicate(h, static_cast<half>(1.5f), kN);
  PipeBarrier<PIPE_V>();
  Cast(f, h, RoundMode::CAST_NONE, kN);  // ACCEPT(bf16_cast)
  TQue<TPosition::VECOUT, 1> q;
  pipe.InitBuffer(q, 1, kN * sizeof(float));
  LocalTensor<float> o = q.AllocTensor<float>();
  PipeBarrier<PIPE_V>();
  Adds(o, f, 0.0f, kN);
  q.EnQue(o);
  o = q.DeQue<float>();
  DataCopy(yg, o, kN);
  q.FreeTensor(o);
}

// y[0] = 2 written with SetValue and written out of the data cache with the form every arch has.
PROBE(acc_dcci) {
  (void)x;
  (void)workspace;
  (void)tiling;
  GlobalTensor<float> yg;
  yg.SetGlobalBuffer((__gm__ float*)y, kN);
  yg.SetValue(0, 2.0f);
  DataCacheCleanAndInvalid<float, CacheLine::SINGLE_CACHE_LINE>(yg);  // ACCEPT(dcci_dst)
}
