// AscendC CPU emulation: gert::ContinuousVector / TypedContinuousVector (CANN
// exe_graph/runtime/continuous_vector.h): a header (capacity, size) followed by the elements in one
// allocation. Used for list attributes (RuntimeAttrs::GetListInt) and workspace sizes.
#ifndef ASCENDC_SIM_EXE_GRAPH_CONTINUOUS_VECTOR_H_
#define ASCENDC_SIM_EXE_GRAPH_CONTINUOUS_VECTOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

#include "graph/ge_error_codes.h"

namespace gert {
class ContinuousVector {
 public:
  template <typename T>
  static std::unique_ptr<uint8_t[]> Create(size_t capacity, size_t& total_size) {
    total_size = sizeof(ContinuousVector) + capacity * sizeof(T);
    std::unique_ptr<uint8_t[]> holder(new (std::nothrow) uint8_t[total_size]());
    if (holder != nullptr) reinterpret_cast<ContinuousVector*>(holder.get())->Init(capacity);
    return holder;
  }
  template <typename T>
  static std::unique_ptr<uint8_t[]> Create(const size_t capacity) {
    size_t total_size = 0;
    return Create<T>(capacity, total_size);
  }
  void Init(const size_t capacity) {
    capacity_ = capacity;
    size_ = 0;
  }
  size_t GetSize() const { return size_; }
  ge::graphStatus SetSize(const size_t size) {
    if (size > capacity_) return ge::GRAPH_PARAM_OUT_OF_RANGE;
    size_ = size;
    return ge::GRAPH_SUCCESS;
  }
  size_t GetCapacity() const { return capacity_; }
  const void* GetData() const { return reinterpret_cast<const uint8_t*>(this) + sizeof(ContinuousVector); }
  void* MutableData() { return reinterpret_cast<uint8_t*>(this) + sizeof(ContinuousVector); }

 private:
  size_t capacity_;
  size_t size_;
  uint8_t reserved_[48];  // keeps the element area 64-byte offset from the header (alignment of any T)
};

template <typename T>
class TypedContinuousVector : private ContinuousVector {
 public:
  using ContinuousVector::GetCapacity;
  using ContinuousVector::GetSize;
  using ContinuousVector::SetSize;
  T* MutableData() { return static_cast<T*>(ContinuousVector::MutableData()); }
  const T* GetData() const { return static_cast<const T*>(ContinuousVector::GetData()); }
};
}  // namespace gert

#endif
