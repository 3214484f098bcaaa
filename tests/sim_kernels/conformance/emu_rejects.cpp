// Uses of the AscendC API that the official headers reject (CPU-debug configuration, asc-devkit), each
// in its own kernel and marked `REJECT(<id>)` on the offending line. tests/test_sim_conformance.py
// builds this file with ms_kvcache.sim.build for both arch families and requires, for every id, a
// compiler error at that line naming the API, in the arch builds the id lists (A2 = __NPU_ARCH__ 2201,
// 310P = 2002) and no error at that line in the others. The corrected twins are in emu_accepts.cpp.
//
// Deliberately NOT included: kernel_operator_list_tensor_intf.h (probe listdesc).
#include "kernel_operator.h"

using namespace AscendC;

#define PROBE(name) extern "C" __global__ __aicore__ void name(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling)

// ListTensorDesc is declared by kernel_operator_list_tensor_intf.h, not by kernel_operator.h.
PROBE(rej_listdesc) {
  AscendC::ListTensorDesc list(x);  // REJECT(listdesc, A2, 310P)
  (void)list;
}

// TQue::FreeTensor takes a non-const LocalTensor<T>&.
PROBE(rej_freetensor_const) {
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 1024);
  const LocalTensor<float> t = q.AllocTensor<float>();
  q.FreeTensor(t);  // REJECT(freetensor_const, A2, 310P)
}

// VECCALC has no queue: GetBufferLogicPos asserts it.
PROBE(rej_tque_veccalc) {
  TPipe pipe;
  TQue<TPosition::VECCALC, 1> q;  // REJECT(tque_veccalc, A2, 310P)
  pipe.InitBuffer(q, 1, 1024);
}

// TQue<VECIN> is a TQueBind<GM, VECIN>, not a TQueBind<VECIN, VECIN>.
PROBE(rej_tque_vecin_bind) {
  TQue<TPosition::VECIN, 1> q;
  TQueBind<TPosition::VECIN, TPosition::VECIN, 1>& b = q;  // REJECT(tque_vecin_bind, A2, 310P)
  (void)b;
}

// GlobalTensor::SetValue is not const.
PROBE(rej_gm_setvalue_const) {
  GlobalTensor<float> g;
  g.SetGlobalBuffer((__gm__ float*)y, 16);
  const GlobalTensor<float> c = g;
  c.SetValue(0, 1.0f);  // REJECT(gm_setvalue_const, A2, 310P)
}

// GlobalTensor::ReinterpretCast exists for __NPU_ARCH__ 3510 only.
PROBE(rej_gm_reinterpret) {
  GlobalTensor<float> g;
  g.SetGlobalBuffer((__gm__ float*)y, 16);
  GlobalTensor<int32_t> i = g.ReinterpretCast<int32_t>();  // REJECT(gm_reinterpret, A2, 310P)
  (void)i;
}

// RoundMode::CAST_HYBRID exists for __NPU_ARCH__ 3510 only.
PROBE(rej_cast_hybrid) {
  RoundMode m = RoundMode::CAST_HYBRID;  // REJECT(cast_hybrid, A2, 310P)
  (void)m;
}

// DataCopyPad is an unsupported API on the Atlas inference series (310P); it exists on A2/A3.
PROBE(rej_datacopypad_310p) {
  GlobalTensor<float> g;
  g.SetGlobalBuffer((__gm__ float*)x, 16);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 1024);
  LocalTensor<float> t = q.AllocTensor<float>();
  DataCopyExtParams p{1, 20, 0, 0, 0};
  DataCopyPadExtParams<float> pad{false, 0, 0, 0.0f};
  DataCopyPad(t, g, p, pad);  // REJECT(datacopypad, 310P)
  q.FreeTensor(t);
}

// DataCopyPad has no PaddingMode template parameter on these archs (3510 / 5102 only).
PROBE(rej_datacopypad_mode) {
  GlobalTensor<float> g;
  g.SetGlobalBuffer((__gm__ float*)x, 16);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 1024);
  LocalTensor<float> t = q.AllocTensor<float>();
  DataCopyExtParams p{1, 32, 0, 0, 0};
  DataCopyPadExtParams<float> pad{false, 0, 0, 0.0f};
  DataCopyPad<float, PaddingMode::Normal>(t, g, p, pad);  // REJECT(datacopypad_mode, A2, 310P)
  q.FreeTensor(t);
}

// LocalTensor::GetPosition returns int32_t, not a TPosition.
PROBE(rej_getposition) {
  TPipe pipe;
  TBuf<TPosition::VECCALC> b;
  pipe.InitBuffer(b, 1024);
  LocalTensor<float> t = b.Get<float>();
  TPosition p = t.GetPosition();  // REJECT(getposition, A2, 310P)
  (void)p;
}

// GetTPipePtr is declared at global scope, not in namespace AscendC.
PROBE(rej_gettpipeptr) {
  TPipe pipe;
  TPipe* p = AscendC::GetTPipePtr();  // REJECT(gettpipeptr, A2, 310P)
  (void)p;
}

// SetL2CacheHint takes the CacheMode as an argument (template parameter: CacheRwMode).
PROBE(rej_l2cache_template) {
  GlobalTensor<float> g;
  g.SetGlobalBuffer((__gm__ float*)y, 16);
  g.SetL2CacheHint<CacheMode::CACHE_MODE_DISABLE>();  // REJECT(l2cache_template, A2, 310P)
}

// The TQue depth decides the AllocTensor / DeQue form (static_asserts in CANN's kernel_tquebind_impl.h).
PROBE(rej_alloc_depth0) {
  TPipe pipe;
  TQue<TPosition::VECIN, 0> q;
  pipe.InitBuffer(q, 1, 1024);
  LocalTensor<float> t = q.AllocTensor<float>();  // REJECT(alloc_depth0, A2, 310P)
  (void)t;
}

PROBE(rej_alloc_inplace_depth1) {
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 1024);
  LocalTensor<float> t;
  q.AllocTensor<float>(t);  // REJECT(alloc_inplace_depth1, A2, 310P)
}

PROBE(rej_deque_inplace_depth1) {
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 1024);
  LocalTensor<float> t = q.AllocTensor<float>();
  q.EnQue(t);
  q.DeQue(t);  // REJECT(deque_inplace_depth1, A2, 310P)
  q.FreeTensor(t);
}

PROBE(rej_vacant_depth0) {
  TPipe pipe;
  TQue<TPosition::VECIN, 0> q;
  pipe.InitBuffer(q, 1, 1024);
  bool v = q.VacantInQue();  // REJECT(vacant_depth0, A2, 310P)
  (void)v;
}

// Cast from / to bfloat16_t: the 310P implementation has no bfloat16 conversion (no matching overload).
PROBE(rej_bf16_cast) {
  TPipe pipe;
  TBuf<TPosition::VECCALC> a, b;
  pipe.InitBuffer(a, 256);
  pipe.InitBuffer(b, 256);
  Cast(b.Get<float>(), a.Get<bfloat16_t>(), RoundMode::CAST_NONE, 64);  // REJECT(bf16_cast, 310P)
}

// DataCacheCleanAndInvalid<T, entireType, dcciDst> is defined for __NPU_ARCH__ 2201 (and 3002 / 3510 /
// 5102 / 3003 / 3113) only: on Atlas inference series only the <T, entireType> form exists. Officially
// the 310P call compiles against the bare declaration and the kernel fails to link (probe
// tests/cann_probes/dcci_dst_per_target.cpp); the emulation reports it at compile time.
PROBE(rej_dcci_dst) {
  GlobalTensor<float> g;
  g.SetGlobalBuffer((__gm__ float*)y, 64);
  DataCacheCleanAndInvalid<float, CacheLine::SINGLE_CACHE_LINE, DcciDst::CACHELINE_OUT>(g);  // REJECT(dcci_dst, 310P)
}
