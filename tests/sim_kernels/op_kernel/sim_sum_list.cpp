// Kernel of the emulation test op SimSumList: out = bias + sum of the DYNAMIC input list `srcs`,
// read through ListTensorDesc; each core handles one slice of blockLength elements.
#include "kernel_operator.h"
#include "kernel_operator_list_tensor_intf.h"

using namespace AscendC;

extern "C" __global__ __aicore__ void sim_sum_list(GM_ADDR srcs, GM_ADDR bias, GM_ADDR out, GM_ADDR workspace,
                                                   GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA(t, tiling);
  const uint32_t off = t.blockLength * static_cast<uint32_t>(GetBlockIdx());
  if (off >= t.n) return;
  const uint32_t len = t.n - off < t.blockLength ? t.n - off : t.blockLength;
  ListTensorDesc list(srcs);
  GlobalTensor<float> biasGm, outGm;
  biasGm.SetGlobalBuffer((__gm__ float*)bias + off, len);
  outGm.SetGlobalBuffer((__gm__ float*)out + off, len);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> qin;
  TQue<TPosition::VECOUT, 1> qout;
  pipe.InitBuffer(qin, 1, len * sizeof(float));
  pipe.InitBuffer(qout, 1, len * sizeof(float));
  LocalTensor<float> o = qout.AllocTensor<float>();
  LocalTensor<float> a = qin.AllocTensor<float>();
  DataCopy(a, biasGm, len);
  qin.EnQue(a);
  a = qin.DeQue<float>();
  Adds(o, a, 0.0f, len);
  qin.FreeTensor(a);
  for (uint32_t k = 0; k < list.GetSize(); ++k) {
    GlobalTensor<float> src;
    src.SetGlobalBuffer(list.GetDataPtr<__gm__ float>(k) + off, len);
    a = qin.AllocTensor<float>();
    DataCopy(a, src, len);
    qin.EnQue(a);
    a = qin.DeQue<float>();
    Add(o, o, a, len);
    qin.FreeTensor(a);
  }
  qout.EnQue(o);
  o = qout.DeQue<float>();
  DataCopy(outGm, o, len);
  qout.FreeTensor(o);
}
