// AscendC CPU emulation: gert::TilingData, the raw tiling buffer of a TilingContext (CANN
// exe_graph/runtime/tiling_data.h): capacity, data size and data pointer; Append/Expand fail when the
// capacity would be exceeded, SetDataSize does not check (the emulation checks the final data size
// against the capacity after the tiling function returns).
#ifndef ASCENDC_SIM_EXE_GRAPH_TILING_DATA_H_
#define ASCENDC_SIM_EXE_GRAPH_TILING_DATA_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>

#include "graph/ge_error_codes.h"
#include "exe_graph/runtime/continuous_vector.h"
#include "exe_graph/runtime/runtime_attrs.h"

namespace gert {
class TilingData {
 public:
  size_t GetCapacity() const { return capacity_; }
  size_t GetDataSize() const { return data_size_; }
  void SetDataSize(const size_t size) { data_size_ = size; }
  void* GetData() { return data_; }
  const void* GetData() const { return data_; }

  template <typename T, typename std::enable_if<std::is_standard_layout<T>::value, int>::type = 0>
  ge::graphStatus Append(const T& data) {
    void* p = Expand(sizeof(T));
    if (p == nullptr) return ge::GRAPH_FAILED;
    std::memcpy(p, &data, sizeof(T));
    return ge::GRAPH_SUCCESS;
  }
  template <typename T, typename std::enable_if<std::is_standard_layout<T>::value, int>::type = 0>
  ge::graphStatus Append(const T* data, size_t append_num) {
    size_t bytes = 0;
    if (__builtin_mul_overflow(sizeof(T), append_num, &bytes)) return ge::GRAPH_MUL_OVERFLOW;
    void* p = Expand(bytes);
    if (p == nullptr) return ge::GRAPH_ADD_OVERFLOW;
    if (bytes != 0) std::memcpy(p, data, bytes);
    return ge::GRAPH_SUCCESS;
  }
  void* Expand(size_t size) {
    size_t after = 0;
    if (__builtin_add_overflow(data_size_, size, &after) || after > capacity_) return nullptr;
    void* ret = static_cast<uint8_t*>(data_) + data_size_;
    data_size_ = after;
    return ret;
  }
  static std::unique_ptr<uint8_t[]> CreateCap(const size_t cap_size) {
    std::unique_ptr<uint8_t[]> buf(new (std::nothrow) uint8_t[sizeof(TilingData) + cap_size]());
    if (buf == nullptr) return nullptr;
    auto* td = new (buf.get()) TilingData();
    td->Init(cap_size, buf.get() + sizeof(TilingData));
    return buf;
  }
  static ge::graphStatus CalcTotalSize(const size_t cap_size, size_t& total_size) {
    return __builtin_add_overflow(sizeof(TilingData), cap_size, &total_size) ? ge::GRAPH_FAILED : ge::GRAPH_SUCCESS;
  }
  void Init(const size_t cap_size, void* const data) {
    capacity_ = cap_size;
    data_size_ = 0;
    data_ = data;
  }
  TilingData(const TilingData&) = delete;
  TilingData& operator=(const TilingData&) = delete;

 private:
  TilingData() = default;
  size_t capacity_ = 0;
  size_t data_size_ = 0;
  void* data_ = nullptr;
  uint8_t reserved_[40] = {0};
};

template <typename T>
TilingData& operator<<(TilingData& out, const T& data) {
  (void)out.Append(data);
  return out;
}
}  // namespace gert

#endif
