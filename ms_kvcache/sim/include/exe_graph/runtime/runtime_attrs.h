// AscendC CPU emulation: gert::RuntimeAttrs (CANN exe_graph/runtime/runtime_attrs.h). Attributes are
// indexed in OpDef declaration order; an optional attribute the caller did not set holds its OpDef
// default. Storage per type follows CANN: Int -> int64_t, Float -> float, Bool -> bool, String -> char
// array, ListInt -> TypedContinuousVector<int64_t>, ListFloat -> TypedContinuousVector<float>.
// An index out of range (or a list-of-list attribute) yields nullptr, as on CANN.
#ifndef ASCENDC_SIM_EXE_GRAPH_RUNTIME_ATTRS_H_
#define ASCENDC_SIM_EXE_GRAPH_RUNTIME_ATTRS_H_

#include <cstddef>
#include <cstdint>

#include "exe_graph/runtime/continuous_vector.h"

namespace simhost { namespace detail { struct AttrStore; } }

namespace gert {
class Tensor;
class ContinuousVectorVector;

class RuntimeAttrs {
 public:
  template <typename T>
  const T* GetAttrPointer(size_t index) const { return reinterpret_cast<const T*>(GetPointerByIndex(index)); }
  const int64_t* GetInt(const size_t index) const { return GetAttrPointer<int64_t>(index); }
  const TypedContinuousVector<int64_t>* GetListInt(const size_t index) const {
    return GetAttrPointer<TypedContinuousVector<int64_t>>(index);
  }
  const ContinuousVectorVector* GetListListInt(const size_t index) const {
    return GetAttrPointer<ContinuousVectorVector>(index);
  }
  const char* GetStr(const size_t index) const { return GetAttrPointer<char>(index); }
  const Tensor* GetTensor(const size_t index) const { return GetAttrPointer<Tensor>(index); }
  const float* GetFloat(const size_t index) const { return GetAttrPointer<float>(index); }
  const bool* GetBool(const size_t index) const { return GetAttrPointer<bool>(index); }
  const TypedContinuousVector<float>* GetListFloat(const size_t index) const {
    return GetAttrPointer<TypedContinuousVector<float>>(index);
  }
  const ContinuousVectorVector* GetListListFloat(const size_t index) const {
    return GetAttrPointer<ContinuousVectorVector>(index);
  }
  size_t GetAttrNum() const;

  explicit RuntimeAttrs(const simhost::detail::AttrStore* store) : store_(store) {}
  RuntimeAttrs(const RuntimeAttrs&) = delete;
  RuntimeAttrs& operator=(const RuntimeAttrs&) = delete;

 private:
  const void* GetPointerByIndex(size_t index) const;
  const simhost::detail::AttrStore* store_;
};
}  // namespace gert

#endif
