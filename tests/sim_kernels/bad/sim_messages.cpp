// Kernels for the emulation message and queue-limit tests (tests/test_sim_messages.py, issue 13 items
// 7 and 8). Every kernel takes (src, dst, workspace, tiling): src a float32 input of 1024 elements, dst a
// float32 output of 1024 elements. Tiling key 0 runs a correct variant, 1 the broken one, 2 a second
// variant where a test needs it. Lines the tests look for carry a `// MARK:<name>` comment.
//
// The file also proves the lint accepts an unqualified printf under `using namespace AscendC;` (it is
// AscendC::printf): ms_kvcache.sim.build lints it before compiling.
#include "kernel_operator.h"

using namespace AscendC;

namespace {
constexpr uint32_t kN = 1024;
inline uint64_t Key() { return TILING_KEY_IS(1) ? 1 : TILING_KEY_IS(2) ? 2 : 0; }
}  // namespace

#define MSG_KERNEL(name) \
  extern "C" __global__ __aicore__ void name(GM_ADDR src, GM_ADDR dst, GM_ADDR workspace, GM_ADDR tiling)

#define MSG_GLOBALS                                  \
  (void)workspace;                                   \
  (void)tiling;                                      \
  GlobalTensor<float> xg, yg;                        \
  xg.SetGlobalBuffer((__gm__ float*)src, kN);        \
  yg.SetGlobalBuffer((__gm__ float*)dst, kN)

// Item 7, the TQue Buffer limit: every queue buffer that FreeTensor released holds one freeBufEvt event id
// (V_MTE2 for VECIN) until it is allocated again, and there are 8 per event type. Nine VECIN queues used one
// after the other: the 9th FreeTensor finds no id (key 1); FreeAllEvent after each use returns them (key 0,
// the TQue overview's pattern); eight queues fit (key 2).
MSG_KERNEL(msg_que_buffer_limit) {
  MSG_GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q[9];
  const int nq = Key() == 2 ? 8 : 9;
  for (int i = 0; i < nq; ++i) pipe.InitBuffer(q[i], 1, 64 * sizeof(float));
  for (int i = 0; i < nq; ++i) {
    LocalTensor<float> a = q[i].AllocTensor<float>();
    DataCopy(a, xg[64 * i], 64);
    q[i].EnQue(a);
    a = q[i].DeQue<float>();
    q[i].FreeTensor(a);  // MARK:que_free
    if (Key() == 0) q[i].FreeAllEvent();
  }
}

// Item 8, AllocEventID: an id allocated per iteration and never released runs out at the 9th (key 1, the
// message says AllocEventID and where each id was allocated); released (key 0); one id never released by
// the end of the kernel (key 2: EVENT_ID_LEAK at the AllocEventID line).
MSG_KERNEL(msg_event_id_leak) {
  MSG_GLOBALS;
  TPipe pipe;
  const int n = Key() == 2 ? 1 : 9;
  for (int i = 0; i < n; ++i) {
    TEventID id = pipe.AllocEventID<HardEvent::V_MTE2>();  // MARK:alloc_event
    SetFlag<HardEvent::V_MTE2>(id);
    WaitFlag<HardEvent::V_MTE2>(id);
    if (Key() == 0) pipe.ReleaseEventID<HardEvent::V_MTE2>(id);
  }
}

// Item 8, the hazard hint: one TBuf block is written by MTE2, changed in place by V, read by MTE3, then
// written by MTE2 again. Without syncs (key 1) the second MTE2 copy misses V_MTE2 and MTE3_MTE2; with
// V_MTE2 only (key 2) it misses MTE3_MTE2; with both (key 0) it is clean.
MSG_KERNEL(msg_hazard_pairs) {
  MSG_GLOBALS;
  TPipe pipe;
  TBuf<TPosition::VECCALC> buf;
  pipe.InitBuffer(buf, 64 * sizeof(float));
  LocalTensor<float> t = buf.Get<float>();
  DataCopy(t, xg, 64);
  SetFlag<HardEvent::MTE2_V>(0);
  WaitFlag<HardEvent::MTE2_V>(0);
  Adds(t, t, 1.0f, 64);
  SetFlag<HardEvent::V_MTE3>(0);
  WaitFlag<HardEvent::V_MTE3>(0);
  DataCopy(yg, t, 64);
  if (Key() != 1) {
    SetFlag<HardEvent::V_MTE2>(0);
    WaitFlag<HardEvent::V_MTE2>(0);
  }
  if (Key() == 0) {
    SetFlag<HardEvent::MTE3_MTE2>(0);
    WaitFlag<HardEvent::MTE3_MTE2>(0);
  }
  DataCopy(t, xg[64], 64);  // MARK:hazard_copy
  PipeBarrier<PIPE_ALL>();
}

// Item 8, names and lines: the kernel's own parameter names name the GM tensors, the message ends with the
// kernel line of the failing call (key 1 copies past the end of dst).
MSG_KERNEL(msg_gm_oob) {
  MSG_GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECOUT, 1> q;
  pipe.InitBuffer(q, 1, 64 * sizeof(float));
  LocalTensor<float> b = q.AllocTensor<float>();
  Duplicate(b, 2.0f, 64);
  q.EnQue(b);
  b = q.DeQue<float>();
  DataCopy(yg[kN - (Key() == 1 ? 32 : 64)], b, 64);  // MARK:gm_oob
  q.FreeTensor(b);
  if (TILING_KEY_IS(9)) printf("never printed: core %d\n", static_cast<int>(GetBlockIdx()));
}

// Item 8, end-of-kernel checks: a SetFlag never waited on names the SetFlag's line (key 1); a tensor
// never freed (key 2, QUE_LEAK) names no line, since no API call failed.
MSG_KERNEL(msg_end_checks) {
  MSG_GLOBALS;
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 64 * sizeof(float));
  LocalTensor<float> a = q.AllocTensor<float>();
  DataCopy(a, xg, 64);
  if (Key() == 1) SetFlag<HardEvent::MTE2_V>(1);  // MARK:set_flag
  if (Key() != 2) q.FreeTensor(a);
}
