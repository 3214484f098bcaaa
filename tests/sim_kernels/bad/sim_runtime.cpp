// Kernels for the cross-core / runtime fidelity tests (tests/test_sim_runtime.py): GM races between
// cores (read-then-write too), SyncAll, the watchdog, fault isolation, uninitialised workspace and the
// data cache (SetValue / DataCacheCleanAndInvalid).
//
// Every kernel takes (x, y, workspace, tiling): x is an int32 input of 1024 elements, y an int32 output
// of 1024 elements; the workspace holds the system part plus at least 4096 user bytes. Tiling key 0 runs
// the correct twin, tiling key 1 the broken one. Compiled for both arch families; the kernels using the
// DcciDst forms of DataCacheCleanAndInvalid (A2/A3 only) exist in the A2/A3 build only.
#include "kernel_operator.h"

using namespace AscendC;

namespace {
constexpr uint32_t kN = 1024;
constexpr uint32_t kLine = 16;  // int32 elements per 64-byte data-cache line
inline bool Bad() { return TILING_KEY_IS(1); }

// a partial per core: y-or-workspace[core * 8 .. +8) = x[core * 8 ..] * 2, written with DataCopy
__aicore__ inline void WritePartial(TPipe& pipe, GlobalTensor<int32_t>& xg, GlobalTensor<int32_t>& dst) {
  TQue<TPosition::VECIN, 1> qin;
  TQue<TPosition::VECOUT, 1> qout;
  pipe.InitBuffer(qin, 1, 32);
  pipe.InitBuffer(qout, 1, 32);
  const uint32_t i = static_cast<uint32_t>(GetBlockIdx());
  LocalTensor<int32_t> a = qin.AllocTensor<int32_t>();
  DataCopy(a, xg[i * 8], 8);
  qin.EnQue(a);
  a = qin.DeQue<int32_t>();
  LocalTensor<int32_t> b = qout.AllocTensor<int32_t>();
  Muls(b, a, 2, 8);
  qout.EnQue(b);
  qin.FreeTensor(a);
  b = qout.DeQue<int32_t>();
  DataCopy(dst[i * 8], b, 8);
  qout.FreeTensor(b);
}

// core 0: y[1000] = sum of src[0 .. 8 * n) read with GetValue
__aicore__ inline void Reduce(GlobalTensor<int32_t>& src, GlobalTensor<int32_t>& yg) {
  if (GetBlockIdx() != 0) return;
  int32_t s = 0;
  for (uint32_t k = 0; k < 8 * static_cast<uint32_t>(GetBlockNum()); ++k) s += src.GetValue(k);
  yg.SetValue(1000, s);
}
}  // namespace

#define RT_KERNEL(name) \
  extern "C" __global__ __aicore__ void name(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling)

#define GLOBALS                                   \
  (void)tiling;                                   \
  GlobalTensor<int32_t> xg, yg, wg;               \
  xg.SetGlobalBuffer((__gm__ int32_t*)x, kN);     \
  yg.SetGlobalBuffer((__gm__ int32_t*)y, kN);     \
  wg.SetGlobalBuffer((__gm__ int32_t*)GetUserWorkspace(workspace), kN)

// 1. read-then-write race: core 0 reduces the other cores' partials (y) without SyncAll (bad) or after it
RT_KERNEL(rt_two_phase) {
  GLOBALS;
  {
    TPipe pipe;
    WritePartial(pipe, xg, yg);
  }
  if (!Bad()) SyncAll();
  Reduce(yg, yg);
}

// the same through the user workspace (zero-initialised by nobody: the writes are the initialisation)
RT_KERNEL(rt_two_phase_ws) {
  GLOBALS;
  {
    TPipe pipe;
    WritePartial(pipe, xg, wg);
  }
  if (!Bad()) SyncAll();
  Reduce(wg, yg);
}

// the software SyncAll: gmWorkspace (zeroed by the host: here the input x, all zero past 512) and a UB workspace
RT_KERNEL(rt_soft_sync) {
  GLOBALS;
  {
    TPipe pipe;
    WritePartial(pipe, xg, yg);
    TBuf<TPosition::VECCALC> tb;
    pipe.InitBuffer(tb, 32 * 8);
    LocalTensor<int32_t> ubws = tb.Get<int32_t>();
    GlobalTensor<int32_t> sync;
    sync.SetGlobalBuffer((__gm__ int32_t*)x + 512, Bad() ? 8 : 8 * static_cast<uint32_t>(GetBlockNum()));
    SyncAll(sync, ubws);
  }
  Reduce(yg, yg);
}

// a core returns without the SyncAll the others wait at (bad) / all call it (good)
RT_KERNEL(rt_sync_mismatch) {
  GLOBALS;
  (void)xg;
  (void)wg;
  if (!(Bad() && GetBlockIdx() == 1)) SyncAll();
  yg.SetValue(GetBlockIdx() * kLine, 1);
}

#if __CCE_AICORE__ >= 220
// 2. write-then-read / write-write races are order independent too (the read happens first in forward order)
RT_KERNEL(rt_read_then_write) {
  GLOBALS;
  (void)wg;
  const uint32_t i = static_cast<uint32_t>(GetBlockIdx());
  if (i == 0) {
    int32_t v = xg.GetValue(Bad() ? 1 * kLine : 0);  // core 1 writes x[16] below (bad)
    yg.SetValue(0, v);
  } else if (i == 1) {
    xg.SetValue(1 * kLine, 5);  // x is writable: the kernel may write its input
    DataCacheCleanAndInvalid<int32_t, CacheLine::SINGLE_CACHE_LINE, DcciDst::CACHELINE_OUT>(xg[1 * kLine]);
  }
}
#endif

// 3. spin on a GM flag another core sets (bad: hangs in forward order on an emulation without a watchdog),
//    or the SyncAll that replaces it (good)
RT_KERNEL(rt_spin_flag) {
  GLOBALS;
  (void)wg;
  const uint32_t i = static_cast<uint32_t>(GetBlockIdx());
  if (Bad()) {
    if (i == 0) {
      while (yg.GetValue(1 * kLine) == 0) {
      }
      yg.SetValue(0, 1);
    } else {
      yg.SetValue(1 * kLine, 1);
      DataCacheCleanAndInvalid<int32_t, CacheLine::SINGLE_CACHE_LINE>(yg[1 * kLine]);
    }
  } else {
    if (i == 1) {
      yg.SetValue(1 * kLine, 1);
      DataCacheCleanAndInvalid<int32_t, CacheLine::SINGLE_CACHE_LINE>(yg[1 * kLine]);
    }
    SyncAll();
    if (i == 0) {
      DataCacheCleanAndInvalid<int32_t, CacheLine::SINGLE_CACHE_LINE>(yg[1 * kLine]);
      while (yg.GetValue(1 * kLine) == 0) {
      }
      yg.SetValue(0, 1);
      DataCacheCleanAndInvalid<int32_t, CacheLine::SINGLE_CACHE_LINE>(yg);
    }
  }
}

// an endless loop that calls no emulated API (only the wall-time watchdog can end it)
RT_KERNEL(rt_busy_loop) {
  GLOBALS;
  (void)wg;
  volatile int32_t stop = 0;
  int32_t n = 0;
  if (Bad()) {
    while (stop == 0) ++n;
  }
  if (GetBlockIdx() == 0) yg.SetValue(0, n);
}

// 4. faults inside kernel code
RT_KERNEL(rt_fault_fpe) {
  GLOBALS;
  (void)wg;
  // x[0] is 0 in the test: integer division by zero (bad) / by x[0] + 1 (good)
  volatile int32_t d = xg.GetValue(0) + (Bad() ? 0 : 1);
  volatile int32_t q = 100 / d;
  if (GetBlockIdx() == 0) yg.SetValue(0, q);
}

RT_KERNEL(rt_fault_segv) {
  GLOBALS;
  (void)wg;
  // a wild pointer: an address read from GM (x[0] = 0 in the test) (bad) / the real output (good)
  const uint64_t a = static_cast<uint64_t>(xg.GetValue(0)) + 64;
  volatile int32_t* p = Bad() ? reinterpret_cast<volatile int32_t*>(a) : nullptr;
  if (p != nullptr) *p = 1;
  if (GetBlockIdx() == 0) yg.SetValue(0, 1);
}

RT_KERNEL(rt_fault_abort) {
  GLOBALS;
  (void)wg;
  if (Bad() && GetBlockIdx() == 1) __builtin_abort();  // abort() / a failed assert
  yg.SetValue(GetBlockIdx() * kLine, 1);
}

// 5. workspace read before any core wrote it
RT_KERNEL(rt_ws_uninit) {
  GLOBALS;
  (void)xg;
  const uint32_t i = static_cast<uint32_t>(GetBlockIdx());
  if (!Bad()) wg.SetValue(i * kLine, 7);
  DataCacheCleanAndInvalid<int32_t, CacheLine::SINGLE_CACHE_LINE>(wg[i * kLine]);
  yg.SetValue(i * kLine, wg.GetValue(i * kLine));
}

// 6. data cache: SetValue of two cores into one 64-byte line (bad) / one line per core (good)
RT_KERNEL(rt_dcache_line) {
  GLOBALS;
  (void)xg;
  (void)wg;
  const uint32_t i = static_cast<uint32_t>(GetBlockIdx());
  yg.SetValue(Bad() ? i : i * kLine, static_cast<int32_t>(i + 1));
  DataCacheCleanAndInvalid<int32_t, CacheLine::SINGLE_CACHE_LINE>(yg[Bad() ? i : i * kLine]);
}

#if __CCE_AICORE__ >= 220
// SetValue, then SyncAll without DataCacheCleanAndInvalid (bad) / with it (good); another core then DMA-reads it
RT_KERNEL(rt_dcache_clean) {
  GLOBALS;
  (void)xg;
  (void)wg;
  const uint32_t i = static_cast<uint32_t>(GetBlockIdx());
  if (i == 1) {
    yg.SetValue(1 * kLine, 42);
    if (!Bad()) DataCacheCleanAndInvalid<int32_t, CacheLine::SINGLE_CACHE_LINE, DcciDst::CACHELINE_OUT>(yg[1 * kLine]);
  }
  SyncAll();
  if (i == 0) {
    TPipe pipe;
    TQue<TPosition::VECIN, 1> qin;
    pipe.InitBuffer(qin, 1, 32);
    LocalTensor<int32_t> a = qin.AllocTensor<int32_t>();
    DataCopy(a, yg[1 * kLine], 8);
    qin.EnQue(a);
    a = qin.DeQue<int32_t>();
    int32_t v = a.GetValue(0);
    qin.FreeTensor(a);
    yg.SetValue(0, v);
    DataCacheCleanAndInvalid<int32_t, CacheLine::ENTIRE_DATA_CACHE>(yg);
  }
}
#endif
