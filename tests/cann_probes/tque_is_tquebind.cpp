// probe: TQue<VECIN, n> is a TQueBind<GM, VECIN, n> (usable wherever that queue type is expected)
// official: accepted (kernel_tpipe.h: class TQue : public TQueBind<GetBufferLogicPos(pos, true),
//           GetBufferLogicPos(pos, false), depth, mask>; for VECIN that is TQueBind<GM, VECIN>)
// expect: accept
#include "kernel_operator.h"

template <int32_t N>
__aicore__ inline void UseBind(AscendC::TQueBind<AscendC::TPosition::GM, AscendC::TPosition::VECIN, N>& q) {
  AscendC::LocalTensor<float> t = q.template AllocTensor<float>();
  q.FreeTensor(t);
}

extern "C" __global__ __aicore__ void probe_tque_is_tquebind(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling) {
  (void)x;
  (void)workspace;
  (void)tiling;
  AscendC::TPipe pipe;
  AscendC::TQue<AscendC::TPosition::VECIN, 2> que;
  pipe.InitBuffer(que, 2, 256);
  UseBind<2>(que);
}
