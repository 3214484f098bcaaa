// AscendC CPU emulation: gert::Tensor as CANN declares it (exe_graph/runtime/runtime_tensor.h): shape,
// format, dtype and an optional data address. In the emulation's tiling / infer-shape contexts input
// tensors carry shape, dtype and format only; GetData()/GetAddr() return nullptr (value-depend inputs
// are not emulated, see docs/emulation.md).
#ifndef ASCENDC_SIM_EXE_GRAPH_RUNTIME_TENSOR_H_
#define ASCENDC_SIM_EXE_GRAPH_RUNTIME_TENSOR_H_

#include <cstddef>
#include <cstdint>

#include "graph/types.h"
#include "exe_graph/runtime/shape.h"
#include "exe_graph/runtime/storage_shape.h"
#include "exe_graph/runtime/storage_format.h"

namespace gert {
enum TensorPlacement { kOnDeviceHbm, kOnHost, kFollowing, kOnDeviceP2p, kTensorPlacementEnd };

class Tensor {
 public:
  Tensor() = default;
  Tensor(const StorageShape& storage_shape, const StorageFormat& storage_format, ge::DataType data_type)
      : storage_shape_(storage_shape), storage_format_(storage_format), data_type_(data_type) {}
  int64_t GetShapeSize() const { return storage_shape_.GetStorageShape().GetShapeSize(); }
  template <class T>
  const T* GetData() const { return static_cast<const T*>(addr_); }
  template <class T>
  T* GetData() { return static_cast<T*>(addr_); }
  const void* GetAddr() const { return addr_; }
  void* GetAddr() { return addr_; }
  void SetAddr(void* addr, size_t size) { addr_ = addr; size_ = size; }
  size_t GetSize() const { return size_; }
  void SetSize(const size_t size) { size_ = size; }
  ge::DataType GetDataType() const { return data_type_; }
  void SetDataType(const ge::DataType dt) { data_type_ = dt; }
  const Shape& GetStorageShape() const { return storage_shape_.GetStorageShape(); }
  Shape& MutableStorageShape() { return storage_shape_.MutableStorageShape(); }
  const Shape& GetOriginShape() const { return storage_shape_.GetOriginShape(); }
  Shape& MutableOriginShape() { return storage_shape_.MutableOriginShape(); }
  const StorageShape& GetShape() const { return storage_shape_; }
  StorageShape& GetShape() { return storage_shape_; }
  ge::Format GetStorageFormat() const { return storage_format_.GetStorageFormat(); }
  void SetStorageFormat(const ge::Format f) { storage_format_.SetStorageFormat(f); }
  ge::Format GetOriginFormat() const { return storage_format_.GetOriginFormat(); }
  void SetOriginFormat(const ge::Format f) { storage_format_.SetOriginFormat(f); }
  const StorageFormat& GetFormat() const { return storage_format_; }
  StorageFormat& MutableFormat() { return storage_format_; }
  ExpandDimsType GetExpandDimsType() const { return storage_format_.GetExpandDimsType(); }
  void SetExpandDimsType(const ExpandDimsType& e) { storage_format_.SetExpandDimsType(e); }
  TensorPlacement GetPlacement() const { return placement_; }
  void SetPlacement(const TensorPlacement p) { placement_ = p; }

 private:
  StorageShape storage_shape_;
  StorageFormat storage_format_;
  ge::DataType data_type_ = ge::DT_UNDEFINED;
  TensorPlacement placement_ = kOnDeviceHbm;
  void* addr_ = nullptr;
  size_t size_ = 0;
};
}  // namespace gert

#endif
