// AscendC CPU emulation: ListTensorDesc / TensorDesc (kernel side of DYNAMIC inputs).
//
// The runner hands a DYNAMIC input to the kernel as one GM_ADDR pointing at CANN's ListTensorDesc
// layout: uint64 offset of the pointer table; per tensor one header word (dim | index << 32) and
// its dims; then one data pointer per tensor. Every word is read through the GM model (bounds,
// accounting); an index past the last tensor raises LIST_TENSOR.
//
// The classes live in namespace ascendc_sim_lt; "kernel_operator_list_tensor_intf.h" makes them
// AscendC::ListTensorDesc / AscendC::TensorDesc, so (as with the official headers) a kernel sees them
// only if it includes that header. Kernel wrappers include this file at global scope before the
// kernel's own namespace is opened (see kernel_operator_list_tensor_intf.h).
#ifndef ASCENDC_SIM_LIST_TENSOR_H_
#define ASCENDC_SIM_LIST_TENSOR_H_

#include "ascendc_sim/kernel_tensor.h"

namespace ascendc_sim_lt {
inline namespace ASCENDC_SIM_ARCH_NS {
using AscendC::GlobalTensor;

template <typename T>
class TensorDesc {
 public:
  __aicore__ inline TensorDesc() {}
  __aicore__ inline void SetShapeAddr(uint64_t* shapePtr) { shape_ = shapePtr; }
  __aicore__ inline uint64_t GetDim() { return dim_; }
  __aicore__ inline uint64_t GetIndex() { return index_; }
  __aicore__ inline uint64_t GetShape(uint32_t offset) {
    if (offset >= dim_ || shape_ == nullptr)
      ascendc_sim::rt::Fail("LIST_TENSOR", "TensorDesc::GetShape(%u): the tensor has %llu dims", offset,
                            static_cast<unsigned long long>(dim_));
    return shape_[offset];
  }
  __aicore__ inline __gm__ T* GetDataPtr() { return ptr_; }
  __aicore__ inline GlobalTensor<T> GetDataObj() {
    GlobalTensor<T> g;
    g.SetGlobalBuffer(ptr_);
    return g;
  }
  // emulation internals (ListTensorDesc::GetDesc)
  uint64_t* sim_shape() { return shape_; }
  void sim_set(uint32_t dim, uint32_t index, __gm__ T* ptr) {
    dim_ = dim;
    index_ = index;
    ptr_ = ptr;
  }

 private:
  uint32_t dim_ = 0;
  uint32_t index_ = 0;
  uint64_t* shape_ = nullptr;
  __gm__ T* ptr_ = nullptr;
};

class ListTensorDesc {
 public:
  __aicore__ inline ListTensorDesc() {}
  __aicore__ inline ListTensorDesc(__gm__ void* data, uint32_t length = 0xffffffff, uint32_t shapeSize = 0xffffffff) {
    Init(data, length, shapeSize);
  }
  __aicore__ inline void Init(__gm__ void* data, uint32_t length = 0xffffffff, uint32_t shapeSize = 0xffffffff) {
    base_ = static_cast<__gm__ uint8_t*>(data);
    region_ = ascendc_sim::rt::GmResolve(base_);
    const uint64_t ptr_off = Word(0);
    const uint64_t first = Word(8);
    dim_ = static_cast<uint32_t>(first & 0xffffffffull);
    words_ = dim_ == 0 ? 2 : 1 + dim_;
    const uint32_t hi = static_cast<uint32_t>(first >> 32);
    ptr_off_ = ptr_off;
    if (ptr_off < 8 + 8ull * words_ || (ptr_off - 8) % (8ull * words_) != 0)
      ascendc_sim::rt::Fail("LIST_TENSOR", "ListTensorDesc: pointer-table offset %llu does not fit %u-word descriptors",
                            static_cast<unsigned long long>(ptr_off), words_);
    count_ = hi != 0 ? hi : static_cast<uint32_t>(Word(ptr_off - 8ull * words_) >> 32) + 1;
    if (length != 0xffffffffu && length != ptr_off + 8ull * count_)
      ascendc_sim::rt::Fail("LIST_TENSOR", "ListTensorDesc: length %u != %llu bytes of the layout", length,
                            static_cast<unsigned long long>(ptr_off + 8ull * count_));
    if (shapeSize != 0xffffffffu && shapeSize != count_)
      ascendc_sim::rt::Fail("LIST_TENSOR", "ListTensorDesc: shapeSize %u != %u data pointers", shapeSize, count_);
  }
  template <class T>
  __aicore__ inline T* GetDataPtr(uint32_t index) {
    Check(index, "GetDataPtr");
    return reinterpret_cast<T*>(static_cast<uintptr_t>(Word(ptr_off_ + 8ull * index)));
  }
  template <class T>
  __aicore__ inline void GetDesc(TensorDesc<T>& desc, uint32_t index) {
    Check(index, "GetDesc");
    if (dim_ == 0) ascendc_sim::rt::Fail("LIST_TENSOR", "ListTensorDesc::GetDesc: the list holds no shape information");
    if (desc.sim_shape() == nullptr)
      ascendc_sim::rt::Fail("LIST_TENSOR", "ListTensorDesc::GetDesc: call TensorDesc::SetShapeAddr first");
    const uint64_t at = 8 + 8ull * words_ * index;
    for (uint32_t i = 0; i < dim_; ++i) desc.sim_shape()[i] = Word(at + 8ull * (1 + i));
    desc.sim_set(dim_, static_cast<uint32_t>(Word(at) >> 32),
                 reinterpret_cast<__gm__ T*>(static_cast<uintptr_t>(Word(ptr_off_ + 8ull * index))));
  }
  __aicore__ inline uint32_t GetSize() { return count_; }

 private:
  uint64_t Word(uint64_t byte_off) {
    uint64_t v = 0;
    ascendc_sim::rt::GmScalarRead(region_, base_ + byte_off, 8, &v, "ListTensorDesc");
    return v;
  }
  void Check(uint32_t index, const char* api) {
    if (base_ == nullptr) ascendc_sim::rt::Fail("LIST_TENSOR", "ListTensorDesc::%s before Init", api);
    if (index >= count_)
      ascendc_sim::rt::Fail("LIST_TENSOR", "ListTensorDesc::%s(%u): the list holds %u tensors", api, index, count_);
  }
  __gm__ uint8_t* base_ = nullptr;
  int32_t region_ = -1;
  uint64_t ptr_off_ = 0;
  uint32_t dim_ = 0, words_ = 0, count_ = 0;
};

}  // namespace ASCENDC_SIM_ARCH_NS
}  // namespace ascendc_sim_lt

#endif  // ASCENDC_SIM_LIST_TENSOR_H_
