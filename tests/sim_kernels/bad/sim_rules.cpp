// Kernels for the emulation rule tests (tests/test_sim_rules.py).
//
// Every kernel takes (x, y, workspace, tiling): x is a float32 input of 1024 elements, y a float32
// output of 1024 elements. Tiling key 0 runs a correct variant, tiling key 1 the deliberately broken
// one, so each test proves both that the rule fires and that it does not fire on the fixed code.
// The file is compiled for both arch families (A2/A3 and 310P); kernels using an API the official
// headers mark unsupported on 310P (DataCopyPad) exist in the A2/A3 build only, as in op_kernel/.
#include "kernel_operator.h"
#include "kernel_operator_list_tensor_intf.h"  // ListTensorDesc (rule_list_tensor)

using namespace AscendC;

namespace {
constexpr uint32_t kN = 1024;
inline bool Bad() { return TILING_KEY_IS(1); }

// y[0..n) = x[0..n) through a VECIN -> VECOUT queue pair (the well-synchronised reference path)
__aicore__ inline void CopyThrough(TPipe& pipe, GlobalTensor<float>& xg, GlobalTensor<float>& yg, uint32_t n) {
  TQue<TPosition::VECIN, 1> qin;
  TQue<TPosition::VECOUT, 1> qout;
  pipe.InitBuffer(qin, 1, n * sizeof(float));
  pipe.InitBuffer(qout, 1, n * sizeof(float));
  LocalTensor<float> a = qin.AllocTensor<float>();
  DataCopy(a, xg, n);
  qin.EnQue(a);
  a = qin.DeQue<float>();
  LocalTensor<float> b = qout.AllocTensor<float>();
  Adds(b, a, 0.0f, n);
  qout.EnQue(b);
  qin.FreeTensor(a);
  b = qout.DeQue<float>();
  DataCopy(yg, b, n);
  qout.FreeTensor(b);
}
}  // namespace

#define RULE_KERNEL(name) \
  extern "C" __global__ __aicore__ void name(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling)

#define GLOBALS                                 \
  (void)workspace;                              \
  (void)tiling;                                 \
  GlobalTensor<float> xg, yg;                   \
  xg.SetGlobalBuffer((__gm__ float*)x, kN);     \
  yg.SetGlobalBuffer((__gm__ float*)y, kN)

// --------------------------------------------------------------------------------------- buffers
RULE_KERNEL(rule_ub_budget) {
  GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 2, Bad() ? 100 * 1024 : 64 * 1024);  // 2 x 100 KiB > 192 KiB UB
}

RULE_KERNEL(rule_buffer_count) {
  GLOBALS;
  TPipe pipe;
  TBuf<TPosition::VECCALC> bufs[65];
  const int n = Bad() ? 65 : 64;
  for (int i = 0; i < n; ++i) pipe.InitBuffer(bufs[i], 32);
}

RULE_KERNEL(rule_ub_out_of_buffer) {
  GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  TQue<TPosition::VECIN, 1> q2;
  pipe.InitBuffer(q, 1, 256 * sizeof(float));
  pipe.InitBuffer(q2, 1, 256 * sizeof(float));
  LocalTensor<float> a = q.AllocTensor<float>();
  DataCopy(a, xg, Bad() ? 512 : 256);  // 512 floats run into the next buffer
  q.FreeTensor(a);
}

// --------------------------------------------------------------------------------------- DataCopy
RULE_KERNEL(rule_datacopy_align) {
  GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 1024);
  LocalTensor<float> a = q.AllocTensor<float>();
  DataCopy(a, xg, Bad() ? 10 : 16);  // 40 B is not a multiple of 32 B
  q.FreeTensor(a);
}

RULE_KERNEL(rule_ub_align) {
  GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 1024);
  LocalTensor<float> a = q.AllocTensor<float>();
  DataCopy(a[Bad() ? 4 : 8], xg, 8);  // UB address 16 is not 32-byte aligned
  q.FreeTensor(a);
}

RULE_KERNEL(rule_gm_align) {
  GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 1024);
  LocalTensor<float> a = q.AllocTensor<float>();
  GlobalTensor<float> g;
  g.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(x + (Bad() ? 2 : 4)));  // 2 bytes: not float aligned
  DataCopy(a, g, 8);
  q.FreeTensor(a);
}

RULE_KERNEL(rule_datacopy_params) {
  GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 4096);
  LocalTensor<float> a = q.AllocTensor<float>();
  DataCopyParams p;
  p.blockCount = Bad() ? 4096 : 4;  // blockCount must be <= 4095
  p.blockLen = 1;
  p.srcStride = 0;
  p.dstStride = 0;
  DataCopy(a, xg, p);
  q.FreeTensor(a);
}

#if __CCE_AICORE__ >= 220  // DataCopyPad: A2/A3 only
RULE_KERNEL(rule_datacopypad_params) {
  GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 4096);
  LocalTensor<float> a = q.AllocTensor<float>();
  DataCopyExtParams p{2, 20, 0, 0, 0};
  DataCopyPadExtParams<float> pad{true, 0, static_cast<uint8_t>(Bad() ? 9 : 3), 0.0f};  // 9 floats = 36 B > 32 B
  DataCopyPad(a, xg, p, pad);
  q.FreeTensor(a);
}

RULE_KERNEL(rule_datacopypad_blocklen) {
  GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 4096);
  LocalTensor<float> a = q.AllocTensor<float>();
  DataCopyExtParams p{1, static_cast<uint32_t>(Bad() ? 22 : 24), 0, 0, 0};  // 22 B is not a multiple of 4
  DataCopyPadExtParams<float> pad{false, 0, 0, 0.0f};
  DataCopyPad(a, xg, p, pad);
  q.FreeTensor(a);
}

// DataCopyPad exists on A2/A3; on 310P it does not compile, so this kernel is absent from the 310P build.
RULE_KERNEL(rule_datacopypad_soc) {
  GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 1024);
  LocalTensor<float> a = q.AllocTensor<float>();
  DataCopyExtParams p{1, 20, 0, 0, 0};
  DataCopyPadExtParams<float> pad{true, 0, 3, 0.0f};
  DataCopyPad(a, xg, p, pad);
  q.FreeTensor(a);
}
#endif  // __CCE_AICORE__ >= 220

// bfloat16 exists on A2/A3 but not on 310P.
RULE_KERNEL(rule_bf16_soc) {
  GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 1024);
  LocalTensor<bfloat16_t> a = q.AllocTensor<bfloat16_t>();
  GlobalTensor<bfloat16_t> g;
  g.SetGlobalBuffer((__gm__ bfloat16_t*)x);
  DataCopy(a, g, 16);
  q.FreeTensor(a);
}

// --------------------------------------------------------------------------------------- vector
RULE_KERNEL(rule_vec_dtype) {
  GLOBALS;
  TPipe pipe;
  TBuf<TPosition::VECCALC> b;
  pipe.InitBuffer(b, 1024);
  if (Bad()) {
    LocalTensor<bfloat16_t> t = b.Get<bfloat16_t>();
    Duplicate(t, bfloat16_t(1.0f), 128);
    Add(t, t, t, 128);  // Add has no bfloat16_t on A2/A3
  } else {
    LocalTensor<half> t = b.Get<half>();
    Duplicate(t, half(1.0f), 128);
    Add(t, t, t, 128);
  }
}

RULE_KERNEL(rule_vec_align) {
  GLOBALS;
  TPipe pipe;
  TBuf<TPosition::VECCALC> b;
  pipe.InitBuffer(b, 2048);
  LocalTensor<float> t = b.Get<float>();
  Duplicate(t, 1.0f, 512);
  LocalTensor<float> d = t[Bad() ? 260 : 264];  // byte 1040 is not 32-byte aligned
  Add(d, t, t, 64);
}

RULE_KERNEL(rule_vec_overlap) {
  GLOBALS;
  TPipe pipe;
  TBuf<TPosition::VECCALC> b;
  pipe.InitBuffer(b, 2048);
  LocalTensor<float> t = b.Get<float>();
  Duplicate(t, 1.0f, 512);
  Add(t, t[Bad() ? 8 : 0], t, 128);  // source shifted by one block: partial overlap with the destination
}

RULE_KERNEL(rule_vec_params) {
  GLOBALS;
  TPipe pipe;
  TBuf<TPosition::VECCALC> b;
  pipe.InitBuffer(b, 4096);
  LocalTensor<float> t = b.Get<float>();
  Duplicate(t, 1.0f, 1024);
  uint64_t mask[2] = {~0ull, Bad() ? 1ull : 0ull};  // float: only 64 mask bits exist
  Add(t, t, t, mask, 2, {1, 1, 1, 8, 8, 8});
}

RULE_KERNEL(rule_vec_blkstride) {
  GLOBALS;
  TPipe pipe;
  TBuf<TPosition::VECCALC> b;
  pipe.InitBuffer(b, 4096);
  LocalTensor<float> t = b.Get<float>();
  Duplicate(t, 1.0f, 1024);
  Muls(t[512], t, 2.0f, 64, 1, {static_cast<uint16_t>(Bad() ? 0 : 1), 1, 8, 8});  // dstBlkStride 0: UB
}

#if __CCE_AICORE__ >= 220  // Cast from / to bfloat16_t does not compile for 310P
RULE_KERNEL(rule_cast_mode) {
  GLOBALS;
  TPipe pipe;
  TBuf<TPosition::VECCALC> b, c;
  pipe.InitBuffer(b, 1024);
  pipe.InitBuffer(c, 1024);
  LocalTensor<float> f = b.Get<float>();
  LocalTensor<bfloat16_t> h = c.Get<bfloat16_t>();
  Duplicate(f, 1.5f, 64);
  Cast(h, f, Bad() ? RoundMode::CAST_NONE : RoundMode::CAST_RINT, 64);  // float -> bf16 needs a rounding mode
}

RULE_KERNEL(rule_cast_pair) {
  GLOBALS;
  TPipe pipe;
  TBuf<TPosition::VECCALC> b, c;
  pipe.InitBuffer(b, 1024);
  pipe.InitBuffer(c, 1024);
  LocalTensor<half> h = b.Get<half>();
  Duplicate(h, half(1.5f), 64);
  if (Bad()) {
    LocalTensor<bfloat16_t> o = c.Get<bfloat16_t>();
    Cast(o, h, RoundMode::CAST_RINT, 64);  // half -> bf16 does not exist on A2
  } else {
    LocalTensor<float> o = c.Get<float>();
    Cast(o, h, RoundMode::CAST_NONE, 64);
  }
}
#endif  // __CCE_AICORE__ >= 220

// --------------------------------------------------------------------------------------- queues
RULE_KERNEL(rule_que_alloc) {
  GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 1024);
  LocalTensor<float> a = q.AllocTensor<float>();
  if (!Bad()) q.FreeTensor(a);
  LocalTensor<float> b = q.AllocTensor<float>();  // the only buffer is still allocated
  q.FreeTensor(b);
}

RULE_KERNEL(rule_que_deque_empty) {
  GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 1024);
  LocalTensor<float> a = q.AllocTensor<float>();
  Duplicate(a, 0.0f, 8);
  if (!Bad()) q.EnQue(a);
  LocalTensor<float> b = q.DeQue<float>();
  q.FreeTensor(b);
}

RULE_KERNEL(rule_que_double_free) {
  GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 1024);
  LocalTensor<float> a = q.AllocTensor<float>();
  q.FreeTensor(a);
  if (Bad()) q.FreeTensor(a);
}

// Use after FreeTensor: the freed buffer is handed out again and refilled, then the stale tensor is
// read (on hardware it would read the new content).
RULE_KERNEL(rule_use_after_free_realloc) {
  GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECIN, 1> qin;
  TQue<TPosition::VECOUT, 1> qout;
  pipe.InitBuffer(qin, 1, kN * sizeof(float));
  pipe.InitBuffer(qout, 1, kN * sizeof(float));
  LocalTensor<float> a = qin.AllocTensor<float>();
  DataCopy(a, xg, kN);
  qin.EnQue(a);
  LocalTensor<float> b = qin.DeQue<float>();
  qin.FreeTensor(b);
  LocalTensor<float> a2 = qin.AllocTensor<float>();  // the same buffer
  Duplicate(a2, 7.0f, kN);
  LocalTensor<float> c = qout.AllocTensor<float>();
  Adds(c, Bad() ? b : a2, 1.0f, kN);
  qout.EnQue(c);
  qin.FreeTensor(a2);
  c = qout.DeQue<float>();
  DataCopy(yg, c, kN);
  qout.FreeTensor(c);
}

// FreeTensor, then copy the freed tensor out (no reallocation in between).
RULE_KERNEL(rule_use_after_free_copy_out) {
  GLOBALS;
  TPipe pipe;
  TQueBind<TPosition::VECIN, TPosition::VECOUT, 1> q;
  pipe.InitBuffer(q, 1, kN * sizeof(float));
  LocalTensor<float> a = q.AllocTensor<float>();
  DataCopy(a, xg, kN);
  q.EnQue(a);
  LocalTensor<float> b = q.DeQue<float>();
  if (Bad()) q.FreeTensor(b);
  DataCopy(yg, b, kN);
  if (!Bad()) q.FreeTensor(b);
}

// A sub-view (operator[]) of a tensor, used after FreeTensor of the tensor.
RULE_KERNEL(rule_use_after_free_view) {
  GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 1024);
  LocalTensor<float> a = q.AllocTensor<float>();
  LocalTensor<float> v = a[16];
  v.SetValue(0, 5.0f);
  if (Bad()) q.FreeTensor(a);
  yg.SetValue(0, v.GetValue(0));
  if (!Bad()) q.FreeTensor(a);
}

// FreeTensor through a stale handle after the buffer was handed out again: it would free the new tensor.
RULE_KERNEL(rule_use_after_free_stale_free) {
  GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 1024);
  LocalTensor<float> a = q.AllocTensor<float>();
  q.FreeTensor(a);
  LocalTensor<float> b = q.AllocTensor<float>();
  q.FreeTensor(Bad() ? a : b);
}

// A TBuf tensor used after TPipe::Reset (its memory may belong to a new buffer).
RULE_KERNEL(rule_tbuf_after_reset) {
  GLOBALS;
  TPipe pipe;
  TBuf<TPosition::VECCALC> tb;
  pipe.InitBuffer(tb, 1024);
  LocalTensor<float> t = tb.Get<float>();
  pipe.Reset();
  TBuf<TPosition::VECCALC> tb2;
  pipe.InitBuffer(tb2, 1024);
  if (!Bad()) t = tb2.Get<float>();
  t.SetValue(0, 1.0f);
  yg.SetValue(0, t.GetValue(0));
}

RULE_KERNEL(rule_que_leak) {
  GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 2, 1024);
  LocalTensor<float> a = q.AllocTensor<float>();
  LocalTensor<float> b = q.AllocTensor<float>();
  q.FreeTensor(a);
  if (!Bad()) q.FreeTensor(b);
}

RULE_KERNEL(rule_que_depth) {
  GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 2, 1024);
  LocalTensor<float> a = q.AllocTensor<float>();
  LocalTensor<float> b = q.AllocTensor<float>();
  q.EnQue(a);
  if (!Bad()) a = q.DeQue<float>();
  q.EnQue(b);  // depth 1: a second EnQue before DeQue
  if (Bad()) a = q.DeQue<float>();
  b = q.DeQue<float>();
  q.FreeTensor(a);
  q.FreeTensor(b);
}

RULE_KERNEL(rule_que_foreign) {
  GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q1, q2;
  pipe.InitBuffer(q1, 1, 1024);
  pipe.InitBuffer(q2, 1, 1024);
  LocalTensor<float> a = q1.AllocTensor<float>();
  if (Bad()) {
    q2.EnQue(a);  // tensor of q1 pushed into q2
    a = q2.DeQue<float>();
  } else {
    q1.EnQue(a);
    a = q1.DeQue<float>();
  }
  q1.FreeTensor(a);
}

RULE_KERNEL(rule_que_alloc_limit) {
  GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q[9];
  LocalTensor<float> t[9];
  const int n = Bad() ? 9 : 8;
  for (int i = 0; i < 9; ++i) pipe.InitBuffer(q[i], 1, 64);
  for (int i = 0; i < n; ++i) t[i] = q[i].AllocTensor<float>();  // 9 VECIN tensors at once > 8 event ids
  for (int i = 0; i < n; ++i) q[i].FreeTensor(t[i]);
}

// --------------------------------------------------------------------------------------- GM
RULE_KERNEL(rule_gm_oob) {
  GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 1024);
  LocalTensor<float> a = q.AllocTensor<float>();
  DataCopy(a, xg[kN - (Bad() ? 8 : 16)], 16);  // reads 8 floats past the end of x
  q.FreeTensor(a);
}

RULE_KERNEL(rule_gm_scalar_oob) {
  GLOBALS;
  yg.SetValue(0, xg.GetValue(Bad() ? kN : kN - 1));
}

RULE_KERNEL(rule_gm_write_conflict) {
  GLOBALS;
  TPipe pipe;
  const uint32_t slice = 64;
  GlobalTensor<float> xs, ys;
  const uint64_t off = Bad() ? 0 : slice * GetBlockIdx();  // every core writes y[0..64)
  xs.SetGlobalBuffer((__gm__ float*)x + off, slice);
  ys.SetGlobalBuffer((__gm__ float*)y + off, slice);
  CopyThrough(pipe, xs, ys, slice);
}

RULE_KERNEL(rule_gm_race) {
  GLOBALS;
  // one 64-byte data-cache line (16 floats) per core: SetValue of several cores into one line is
  // DCACHE_CONFLICT (GlobalTensor::SetValue page)
  const int64_t i = GetBlockIdx() * 16;
  yg.SetValue(static_cast<uint64_t>(i), xg.GetValue(static_cast<uint64_t>(i)));
  if (i > 0) {
    // core i reads the element core i-1 wrote (bad) or its own (good)
    float v = yg.GetValue(static_cast<uint64_t>(Bad() ? i - 16 : i));
    yg.SetValue(static_cast<uint64_t>(i), v + 1.0f);
  }
}

RULE_KERNEL(rule_gm_readonly) {
  GLOBALS;
  GlobalTensor<uint32_t> t;
  t.SetGlobalBuffer((__gm__ uint32_t*)tiling);
  if (Bad()) t.SetValue(0, 7u);  // the tiling buffer is read-only
  yg.SetValue(0, static_cast<float>(t.GetValue(0)));
}

RULE_KERNEL(rule_order_dependent) {
  // a function-static counter survives from core to core: the result depends on the core order
  // (no single access breaks a rule; only launch_*_all_orders can see it)
  static int counter = 0;
  GLOBALS;
  const int64_t i = GetBlockIdx();
  yg.SetValue(static_cast<uint64_t>(i * 16), static_cast<float>(Bad() ? counter++ : i));  // a cache line per core
}

// --------------------------------------------------------------------------------------- UB contents
RULE_KERNEL(rule_ub_uninit_read) {
  GLOBALS;
  TPipe pipe;
  TBuf<TPosition::VECCALC> b;
  pipe.InitBuffer(b, 1024);
  LocalTensor<float> t = b.Get<float>();
  if (!Bad()) Duplicate(t, 3.0f, 64);
  yg.SetValue(0, t.GetValue(5));  // garbage unless something wrote the buffer
}

RULE_KERNEL(rule_ub_uninit_to_gm) {
  GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECOUT, 1> q;
  pipe.InitBuffer(q, 1, 256 * sizeof(float));
  LocalTensor<float> t = q.AllocTensor<float>();
  Duplicate(t, 2.0f, Bad() ? 128 : 256);  // only half of what is copied out was written
  q.EnQue(t);
  t = q.DeQue<float>();
  DataCopy(yg, t, 256);
  q.FreeTensor(t);
}

// --------------------------------------------------------------------------------------- sync
RULE_KERNEL(rule_flag_wait_unset) {
  GLOBALS;
  if (!Bad()) SetFlag<HardEvent::MTE2_V>(EVENT_ID1);
  WaitFlag<HardEvent::MTE2_V>(EVENT_ID1);  // nothing set this flag: the hardware waits forever
}

RULE_KERNEL(rule_flag_never_waited) {
  GLOBALS;
  SetFlag<HardEvent::V_MTE3>(EVENT_ID2);
  if (!Bad()) WaitFlag<HardEvent::V_MTE3>(EVENT_ID2);
}

RULE_KERNEL(rule_event_id) {
  GLOBALS;
  const int32_t id = Bad() ? 8 : 7;  // ids are 0..7
  SetFlag<HardEvent::MTE3_MTE2>(id);
  WaitFlag<HardEvent::MTE3_MTE2>(id);
}

RULE_KERNEL(rule_pipe_barrier_s) {
  GLOBALS;
  if (Bad()) PipeBarrier<PIPE_S>();
  else PipeBarrier<PIPE_ALL>();
}

// TBuf memory has no queue, so MTE2 -> V -> MTE3 need SetFlag/WaitFlag.
RULE_KERNEL(rule_hazard_mte2_v) {
  GLOBALS;
  TPipe pipe;
  TBuf<TPosition::VECCALC> b;
  pipe.InitBuffer(b, 256 * sizeof(float));
  LocalTensor<float> t = b.Get<float>();
  DataCopy(t, xg, 256);
  if (!Bad()) {
    SetFlag<HardEvent::MTE2_V>(EVENT_ID0);
    WaitFlag<HardEvent::MTE2_V>(EVENT_ID0);
  }
  Muls(t, t, 2.0f, 256);  // reads what MTE2 may still be writing
  SetFlag<HardEvent::V_MTE3>(EVENT_ID0);
  WaitFlag<HardEvent::V_MTE3>(EVENT_ID0);
  DataCopy(yg, t, 256);
}

RULE_KERNEL(rule_hazard_v_mte3) {
  GLOBALS;
  TPipe pipe;
  TBuf<TPosition::VECCALC> b;
  pipe.InitBuffer(b, 256 * sizeof(float));
  LocalTensor<float> t = b.Get<float>();
  Duplicate(t, 4.0f, 256);
  if (!Bad()) {
    TQueSync<PIPE_V, PIPE_MTE3> sync;
    sync.SetFlag(EVENT_ID3);
    sync.WaitFlag(EVENT_ID3);
  }
  DataCopy(yg, t, 256);  // MTE3 reads what V may still be writing
}

RULE_KERNEL(rule_hazard_mte2_waw) {
  GLOBALS;
  TPipe pipe;
  TBuf<TPosition::VECCALC> b;
  pipe.InitBuffer(b, 256 * sizeof(float));
  LocalTensor<float> t = b.Get<float>();
  DataCopy(t, xg, 256);
  if (!Bad()) PipeBarrier<PIPE_MTE2>();
  DataCopy(t, xg[256], 256);  // two MTE2 copies into the same UB without PipeBarrier<PIPE_MTE2>
  PipeBarrier<PIPE_ALL>();
  DataCopy(yg, t, 256);
}

RULE_KERNEL(rule_hazard_queue_skipped) {
  // VECIN buffer copied straight out by MTE3: the VECIN queue only orders MTE2 -> V.
  GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECIN, 1> qin;
  pipe.InitBuffer(qin, 1, 256 * sizeof(float));
  LocalTensor<float> a = qin.AllocTensor<float>();
  DataCopy(a, xg, 256);
  qin.EnQue(a);
  a = qin.DeQue<float>();
  if (!Bad()) {
    SetFlag<HardEvent::MTE2_MTE3>(EVENT_ID0);
    WaitFlag<HardEvent::MTE2_MTE3>(EVENT_ID0);
  }
  DataCopy(yg, a, 256);
  qin.FreeTensor(a);
}

RULE_KERNEL(rule_hazard_gm_mte3_waw) {
  GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECOUT, 1> q;
  pipe.InitBuffer(q, 1, 256 * sizeof(float));
  LocalTensor<float> t = q.AllocTensor<float>();
  Duplicate(t, 1.0f, 256);
  q.EnQue(t);
  t = q.DeQue<float>();
  DataCopy(yg, t, 256);
  if (!Bad()) PipeBarrier<PIPE_MTE3>();
  DataCopy(yg[128], t, 128);  // overlapping MTE3 destinations without PipeBarrier<PIPE_MTE3>
  q.FreeTensor(t);
}

RULE_KERNEL(rule_hazard_gm_raw) {
  // copy y out (MTE3), then read the same GM bytes back in (MTE2): MTE3 -> MTE2 must be ordered
  GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECOUT, 1> qo;
  TQue<TPosition::VECIN, 1> qi;
  pipe.InitBuffer(qo, 1, 256 * sizeof(float));
  pipe.InitBuffer(qi, 1, 256 * sizeof(float));
  LocalTensor<float> t = qo.AllocTensor<float>();
  Duplicate(t, 3.0f, 256);
  qo.EnQue(t);
  t = qo.DeQue<float>();
  DataCopy(yg, t, 256);
  qo.FreeTensor(t);
  if (!Bad()) PipeBarrier<PIPE_ALL>();
  LocalTensor<float> u = qi.AllocTensor<float>();
  DataCopy(u, yg, 256);
  qi.EnQue(u);
  u = qi.DeQue<float>();
  qi.FreeTensor(u);
}

// --------------------------------------------------------------------------------------- misc
struct BigTiling {
  uint32_t a[64];
};
RULE_KERNEL(rule_tiling_size) {
  (void)workspace;
  GlobalTensor<float> yg;
  yg.SetGlobalBuffer((__gm__ float*)y, kN);
  (void)x;
  if (Bad()) {
    GET_TILING_DATA_WITH_STRUCT(BigTiling, t, tiling);  // 256 bytes, the host wrote 16
    yg.SetValue(0, static_cast<float>(t.a[0]));
  } else {
    GET_TILING_DATA_WITH_STRUCT(uint32_t, t, tiling);
    yg.SetValue(0, static_cast<float>(t));
  }
}

RULE_KERNEL(rule_unsupported_api) {
  GLOBALS;
  if (Bad()) SetAtomicAdd<float>();  // atomics are not emulated (SyncAll is: tests/test_sim_runtime.py)
}

RULE_KERNEL(rule_pipe_state) {
  GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 1024);
  if (Bad()) pipe.InitBuffer(q, 1, 1024);  // InitBuffer twice for one queue
}

RULE_KERNEL(rule_workspace) {
  (void)x;
  (void)tiling;
  GlobalTensor<float> yg, wg;
  yg.SetGlobalBuffer((__gm__ float*)y, kN);
  wg.SetGlobalBuffer((__gm__ float*)GetUserWorkspace(workspace), 16);  // bad launch: no system workspace
  wg.SetValue(0, 1.0f);
  yg.SetValue(0, wg.GetValue(0));
}

// ListTensorDesc over a DYNAMIC input is tested with the op tests; here: a list built by hand in GM
RULE_KERNEL(rule_list_tensor) {
  (void)workspace;
  (void)tiling;
  GlobalTensor<float> yg;
  yg.SetGlobalBuffer((__gm__ float*)y, kN);
  ListTensorDesc list(x);
  __gm__ float* p = list.GetDataPtr<__gm__ float>(Bad() ? list.GetSize() : list.GetSize() - 1);
  yg.SetValue(0, static_cast<float>(reinterpret_cast<uintptr_t>(p) != 0));
}

// --------------------------------------------------------------------------------------- mask forms
// Add / Muls / Cast repeat forms with strides (correct kernel; tests compare with numpy).
RULE_KERNEL(vec_repeat_forms) {
  GLOBALS;
  (void)Bad();
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
  // o[0:512) = a[0:512) + a[512:1024) via 8 repeats of 64
  Add(o, a, a[512], 64, 8, {1, 1, 1, 8, 8, 8});
  // o[512:768): every second block of a times 3 (src block stride 2), first 40 elements of each repeat
  Muls(o[512], a, 3.0f, 40, 4, {1, 2, 8, 16});
  // cast round trip through half with bit mask (odd elements only) into o[768:1024)
  LocalTensor<half> h = tmp.Get<half>();
  Duplicate(h, half(0), kN);
  uint64_t odd[2] = {0xAAAAAAAAAAAAAAAAull, 0};
  Cast(h, a, RoundMode::CAST_RINT, odd, 4, {1, 1, 4, 8});
  Cast(o[768], h, RoundMode::CAST_NONE, 64, 4, {1, 1, 8, 4});
  qout.EnQue(o);
  qin.FreeTensor(a);
  o = qout.DeQue<float>();
  DataCopy(yg, o, kN);
  qout.FreeTensor(o);
}

// --------------------------------------------------------------------------------------- Div, Sqrt, Gather
// (the APIs added for the fused RoPE-write kernels)
RULE_KERNEL(rule_div_dtype) {
  GLOBALS;
  TPipe pipe;
  TBuf<TPosition::VECCALC> b;
  pipe.InitBuffer(b, 1024);
  if (Bad()) {
    LocalTensor<int32_t> t = b.Get<int32_t>();
    Duplicate(t, 3, 64);
    Div(t, t, t, 64);  // Div exists for half and float only
  } else {
    LocalTensor<float> t = b.Get<float>();
    Duplicate(t, 3.0f, 64);
    Div(t, t, t, 64);
  }
}

RULE_KERNEL(rule_sqrt_dtype) {
  GLOBALS;
  TPipe pipe;
  TBuf<TPosition::VECCALC> b;
  pipe.InitBuffer(b, 1024);
  if (Bad()) {
    LocalTensor<int16_t> t = b.Get<int16_t>();
    Duplicate(t, static_cast<int16_t>(4), 128);
    Sqrt(t, t, 128);  // Sqrt exists for half and float only
  } else {
    LocalTensor<half> t = b.Get<half>();
    Duplicate(t, half(4.0f), 128);
    Sqrt(t, t, 128);
  }
}

// Sqrt of a non-positive element has an unknown result (Sqrt.md): copying it to GM is an error.
RULE_KERNEL(rule_sqrt_nonpositive) {
  GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECOUT, 1> q;
  pipe.InitBuffer(q, 1, 64 * sizeof(float));
  LocalTensor<float> t = q.AllocTensor<float>();
  Duplicate(t, 4.0f, 64);
  if (Bad()) Duplicate(t[8], 0.0f, 8);
  Sqrt(t, t, 64);
  q.EnQue(t);
  t = q.DeQue<float>();
  DataCopy(yg, t, 64);
  q.FreeTensor(t);
}

// Gather: x viewed as float data; offsets built in a VECCALC buffer.
__aicore__ inline void GatherSetup(TPipe& pipe, TBuf<TPosition::VECCALC>& src, TBuf<TPosition::VECCALC>& dst,
                                   TBuf<TPosition::VECCALC>& off, uint32_t n) {
  pipe.InitBuffer(src, n * sizeof(float));
  pipe.InitBuffer(dst, n * sizeof(float));
  pipe.InitBuffer(off, n * sizeof(uint32_t));
  Duplicate(src.Get<float>(), 1.0f, n);
}

RULE_KERNEL(rule_gather_dtype) {
  GLOBALS;
  TPipe pipe;
  TBuf<TPosition::VECCALC> src, dst, off;
  GatherSetup(pipe, src, dst, off, 64);
  LocalTensor<uint32_t> o = off.Get<uint32_t>();
  for (uint32_t i = 0; i < 64; ++i) o.SetValue(i, 2 * i);
  if (Bad()) {
    Gather(dst.Get<int8_t>(), src.Get<int8_t>(), o, 0, 64);  // no int8_t Gather on A2/A3
  } else {
    Gather(dst.Get<int16_t>(), src.Get<int16_t>(), o, 0, 64);  // even byte offsets: int16_t aligned
  }
}

RULE_KERNEL(rule_gather_offset) {
  GLOBALS;
  TPipe pipe;
  TBuf<TPosition::VECCALC> src, dst, off;
  GatherSetup(pipe, src, dst, off, 64);
  LocalTensor<uint32_t> o = off.Get<uint32_t>();
  for (uint32_t i = 0; i < 64; ++i) o.SetValue(i, (63 - i) * 4);
  if (Bad()) o.SetValue(5, 6);  // not a multiple of sizeof(float)
  Gather(dst.Get<float>(), src.Get<float>(), o, 0, 64);
}

RULE_KERNEL(rule_gather_base) {
  GLOBALS;
  TPipe pipe;
  TBuf<TPosition::VECCALC> src, dst, off;
  GatherSetup(pipe, src, dst, off, 64);
  LocalTensor<uint32_t> o = off.Get<uint32_t>();
  for (uint32_t i = 0; i < 32; ++i) o.SetValue(i, i * 4);
  Gather(dst.Get<float>(), src.Get<float>(), o, Bad() ? 2 : 8, 32);  // srcBaseAddr 2 is not float aligned
}

RULE_KERNEL(rule_gather_oob) {
  GLOBALS;
  TPipe pipe;
  TBuf<TPosition::VECCALC> src, dst, off;
  GatherSetup(pipe, src, dst, off, 64);
  LocalTensor<uint32_t> o = off.Get<uint32_t>();
  for (uint32_t i = 0; i < 64; ++i) o.SetValue(i, i * 4);
  if (Bad()) o.SetValue(63, 64 * 4);  // one element past the source buffer
  Gather(dst.Get<float>(), src.Get<float>(), o, 0, 64);
}

RULE_KERNEL(rule_gather_uninit) {
  GLOBALS;
  TPipe pipe;
  TBuf<TPosition::VECCALC> src, dst, off;
  GatherSetup(pipe, src, dst, off, 64);
  LocalTensor<uint32_t> o = off.Get<uint32_t>();
  for (uint32_t i = 0; i < (Bad() ? 63u : 64u); ++i) o.SetValue(i, i * 4);  // offset 63 never written
  Gather(dst.Get<float>(), src.Get<float>(), o, 0, 64);
}

RULE_KERNEL(rule_gather_overlap) {
  GLOBALS;
  TPipe pipe;
  TBuf<TPosition::VECCALC> src, dst, off;
  GatherSetup(pipe, src, dst, off, 64);
  LocalTensor<uint32_t> o = off.Get<uint32_t>();
  for (uint32_t i = 0; i < 64; ++i) o.SetValue(i, (63 - i) * 4);
  LocalTensor<float> s = src.Get<float>();
  Gather(Bad() ? s : dst.Get<float>(), s, o, 0, 64);  // source and destination may not share memory
}

RULE_KERNEL(rule_gather_align) {
  GLOBALS;
  TPipe pipe;
  TBuf<TPosition::VECCALC> src, dst, off;
  GatherSetup(pipe, src, dst, off, 64);
  LocalTensor<uint32_t> o = off.Get<uint32_t>();
  for (uint32_t i = 0; i < 32; ++i) o.SetValue(i, i * 4);
  Gather(dst.Get<float>(), src.Get<float>()[Bad() ? 4 : 8], o, 0, 32);  // src at byte 16: not 32-byte aligned
}

// TBuf::Get(len): len * sizeof(T) must be a multiple of 32 bytes (CANN's CPU-debug TBuf::Get assertion).
RULE_KERNEL(rule_tbuf_len) {
  GLOBALS;
  TPipe pipe;
  TBuf<TPosition::VECCALC> b;
  pipe.InitBuffer(b, 1024);
  LocalTensor<float> t = b.Get<float>(Bad() ? 12 : 16);  // 48 B is not a multiple of 32 B; 64 B is
  Duplicate(t, 2.0f, 8);
  yg.SetValue(0, t.GetValue(7));
}

// TBuf::GetWithOffset: bufOffset must be 32-byte aligned (the documented rule).
RULE_KERNEL(rule_tbuf_offset) {
  GLOBALS;
  TPipe pipe;
  TBuf<TPosition::VECCALC> b;
  pipe.InitBuffer(b, 1024);
  LocalTensor<float> t = b.GetWithOffset<float>(16, Bad() ? 48 : 64);  // byte offset 48 is not 32-byte aligned
  Duplicate(t, 3.0f, 16);
  yg.SetValue(0, t.GetValue(15));
}
