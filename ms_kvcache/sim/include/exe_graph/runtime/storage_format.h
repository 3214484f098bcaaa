// AscendC CPU emulation: gert::StorageFormat / ExpandDimsType (CANN exe_graph/runtime/storage_format.h).
#ifndef ASCENDC_SIM_EXE_GRAPH_STORAGE_FORMAT_H_
#define ASCENDC_SIM_EXE_GRAPH_STORAGE_FORMAT_H_

#include <cstdint>
#include "graph/types.h"

namespace gert {
class ExpandDimsType {
 public:
  ExpandDimsType() = default;
  explicit ExpandDimsType(int64_t mask) : mask_(mask) {}
  bool operator==(const ExpandDimsType& o) const { return mask_ == o.mask_; }
  int64_t GetMask() const { return mask_; }

 private:
  int64_t mask_ = 0;
};

struct StorageFormat {
 public:
  StorageFormat() = default;
  StorageFormat(const ge::Format origin_format, const ge::Format storage_format, const ExpandDimsType& expand)
      : origin_format_(origin_format), storage_format_(storage_format), expand_dims_type_(expand) {}
  ge::Format GetOriginFormat() const { return origin_format_; }
  void SetOriginFormat(const ge::Format f) { origin_format_ = f; }
  ge::Format GetStorageFormat() const { return storage_format_; }
  void SetStorageFormat(const ge::Format f) { storage_format_ = f; }
  ExpandDimsType GetExpandDimsType() const { return expand_dims_type_; }
  void SetExpandDimsType(const ExpandDimsType& e) { expand_dims_type_ = e; }
  ExpandDimsType& MutableExpandDimsType() { return expand_dims_type_; }
  bool operator==(const StorageFormat& o) const {
    return origin_format_ == o.origin_format_ && storage_format_ == o.storage_format_ &&
           expand_dims_type_ == o.expand_dims_type_;
  }
  bool operator!=(const StorageFormat& o) const { return !(*this == o); }

 private:
  ge::Format origin_format_ = ge::FORMAT_ND;
  ge::Format storage_format_ = ge::FORMAT_ND;
  ExpandDimsType expand_dims_type_;
};
}  // namespace gert

#endif
