// AscendC CPU emulation: gert::CompileTimeTensorDesc / AnchorInstanceInfo / ComputeNodeInfo
// (CANN exe_graph/runtime/compute_node_info.h). IR index = position in the OpDef; instance index =
// position among the inputs actually present (an absent OPTIONAL input has no instance).
#ifndef ASCENDC_SIM_EXE_GRAPH_COMPUTE_NODE_INFO_H_
#define ASCENDC_SIM_EXE_GRAPH_COMPUTE_NODE_INFO_H_

#include <cstddef>
#include <cstdint>

#include "graph/types.h"
#include "exe_graph/runtime/storage_format.h"
#include "exe_graph/runtime/runtime_attrs.h"

namespace simhost { namespace detail { struct ContextData; } }

namespace gert {
class AnchorInstanceInfo {
 public:
  AnchorInstanceInfo() = default;
  AnchorInstanceInfo(const uint32_t instance_start, const uint32_t instantiation_num)
      : instance_start_(instance_start), instantiation_num_(instantiation_num) {}
  size_t GetInstanceNum() const { return instantiation_num_; }
  size_t GetInstanceStart() const { return instance_start_; }
  void SetInstanceStart(const uint32_t v) { instance_start_ = v; }
  void SetInstantiationNum(const uint32_t v) { instantiation_num_ = v; }

 private:
  uint32_t instance_start_ = 0;
  uint32_t instantiation_num_ = 0;
};

class CompileTimeTensorDesc {
 public:
  ge::DataType GetDataType() const { return data_type_; }
  const StorageFormat& GetFormat() const { return storage_format_; }
  ge::Format GetOriginFormat() const { return storage_format_.GetOriginFormat(); }
  ge::Format GetStorageFormat() const { return storage_format_.GetStorageFormat(); }
  ExpandDimsType GetExpandDimsType() const { return storage_format_.GetExpandDimsType(); }
  void SetDataType(const ge::DataType dt) { data_type_ = dt; }
  void SetStorageFormat(const ge::Format f) { storage_format_.SetStorageFormat(f); }
  void SetOriginFormat(const ge::Format f) { storage_format_.SetOriginFormat(f); }
  void SetExpandDimsType(const ExpandDimsType& e) { storage_format_.SetExpandDimsType(e); }
  void SetExist(bool is_exist) { exist_ = is_exist; }
  bool IsExist() const { return exist_; }

 private:
  ge::DataType data_type_ = ge::DT_UNDEFINED;
  StorageFormat storage_format_;
  bool exist_ = true;
};

class ComputeNodeInfo {
 public:
  explicit ComputeNodeInfo(const simhost::detail::ContextData* d) : d_(d) {}
  const ge::char_t* GetNodeType() const;
  const ge::char_t* GetNodeName() const;
  size_t GetIrInputsNum() const;
  size_t GetIrOutputsNum() const;
  size_t GetInputsNum() const;
  size_t GetOutputsNum() const;
  const AnchorInstanceInfo* GetInputInstanceInfo(const size_t ir_index) const;
  const AnchorInstanceInfo* GetOutputInstanceInfo(const size_t ir_index) const;
  const CompileTimeTensorDesc* GetInputTdInfo(const size_t index) const;
  const CompileTimeTensorDesc* GetOutputTdInfo(const size_t index) const;
  const RuntimeAttrs* GetAttrs() const;

 private:
  const simhost::detail::ContextData* d_;
};
}  // namespace gert

#endif
