// Host side of register/tilingdata_base.h: field layout, buffers, SaveToBuffer, the class registry.
#include <cstring>
#include <string>

#include "register/tilingdata_base.h"
#include "sim_host_internal.h"

namespace optiling {
TilingDef::~TilingDef() {
  if (owns_data_) delete[] data_ptr_;
  data_ptr_ = nullptr;
}

void TilingDef::CheckAlignAndGenPlaceHolder(const char* name, size_t typeSize) {
  if (typeSize == 0 || data_size_ % typeSize == 0) return;
  const size_t pad = typeSize - data_size_ % typeSize;
  FieldInfo ph("uint8_t", name, pad);
  ph.offset_ = data_size_;
  ph.elemSize_ = 1;
  ph.placeholder_ = true;
  field_info_.push_back(ph);
  data_size_ += pad;
}

size_t TilingDef::AddPlainField(const char* dtype, const char* name, size_t elem_size, size_t count, const char* ph) {
  CheckAlignAndGenPlaceHolder(ph, elem_size);
  FieldInfo f = count == 0 ? FieldInfo(dtype, name) : FieldInfo(dtype, name, count);
  f.offset_ = data_size_;
  f.elemSize_ = elem_size;
  field_info_.push_back(f);
  data_size_ += elem_size * (count == 0 ? 1 : count);
  return f.offset_;
}

size_t TilingDef::SimAddStruct(const char* struct_type, const char* name, TilingDef* sub, const char* ph) {
  CheckAlignAndGenPlaceHolder(ph, 8);
  FieldInfo f("struct", name, struct_type, sub->GetDataSize());
  f.offset_ = data_size_;
  f.elemSize_ = sub->GetDataSize();
  f.struct_ = sub;
  field_info_.push_back(f);
  sub_structs_.emplace_back(sub, data_size_);
  data_size_ += sub->GetDataSize();
  return f.offset_;
}

void TilingDef::SimFinish(const char* class_name) {
  class_name_ = class_name;
  std::string ph = std::string(class_name) + "PH";
  // the placeholder name must outlive the object: keep it in a process-wide pool
  static std::mutex mu;
  static std::vector<std::unique_ptr<std::string>> pool;
  const char* stable = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& s : pool)
      if (*s == ph) stable = s->c_str();
    if (stable == nullptr) {
      pool.emplace_back(new std::string(ph));
      stable = pool.back()->c_str();
    }
  }
  CheckAlignAndGenPlaceHolder(stable, 8);
}

void TilingDef::InitData() {
  if (owns_data_) delete[] data_ptr_;
  data_ptr_ = new uint8_t[data_size_ == 0 ? 1 : data_size_]();
  owns_data_ = true;
  for (auto& s : sub_structs_) s.first->SetDataPtr(data_ptr_ + s.second);
}

void TilingDef::SetDataPtr(void* dataPtr) {
  if (owns_data_) delete[] data_ptr_;
  owns_data_ = false;
  data_ptr_ = static_cast<uint8_t*>(dataPtr);
  for (auto& s : sub_structs_) s.first->SetDataPtr(data_ptr_ == nullptr ? nullptr : data_ptr_ + s.second);
}

uint8_t* TilingDef::SimPtr(size_t offset, size_t bytes) const {
  if (data_ptr_ == nullptr)
    simhost::detail::Fail("tilingdata.no_buffer", "",
                          std::string("tiling data class ") + class_name_ +
                              " has no buffer (constructed with nullptr and never attached with SetDataPtr)");
  if (offset + bytes > data_size_)
    simhost::detail::Fail("tilingdata.range", "", std::string("access outside tiling data class ") + class_name_);
  return data_ptr_ + offset;
}

void TilingDef::SaveToBuffer(void* pdata, size_t capacity) {
  if (!owns_data_) return;  // a view of an external buffer already holds the data (CANN semantics)
  if (pdata == nullptr)
    simhost::detail::Fail("tiling.data_overflow", "",
                          std::string("SaveToBuffer of ") + class_name_ + " into a null buffer");
  if (capacity < data_size_)
    simhost::detail::Fail("tiling.data_overflow", "",
                          std::string("SaveToBuffer: tiling data class ") + class_name_ + " needs " +
                              std::to_string(data_size_) + " bytes but the buffer capacity is " +
                              std::to_string(capacity) + " bytes (CANN refuses the copy)");
  if (data_size_ != 0) std::memcpy(pdata, data_ptr_, data_size_);
}

CTilingDataClassFactory& CTilingDataClassFactory::GetInstance() {
  static CTilingDataClassFactory instance;
  return instance;
}
void CTilingDataClassFactory::RegisterTilingData(const char* op_type, const TilingDataConstructor constructor) {
  std::lock_guard<std::recursive_mutex> lock(simhost::detail::RegistryMutex());
  instance_[op_type == nullptr ? "" : op_type] = constructor;
}
std::shared_ptr<TilingDef> CTilingDataClassFactory::CreateTilingDataInstance(const char* op_type) {
  TilingDataConstructor ctor = nullptr;
  {
    std::lock_guard<std::recursive_mutex> lock(simhost::detail::RegistryMutex());
    auto it = instance_.find(op_type == nullptr ? "" : op_type);
    if (it != instance_.end()) ctor = it->second;
  }
  return ctor == nullptr ? nullptr : ctor();
}
std::vector<std::string> CTilingDataClassFactory::SimRegisteredOps() const {
  std::lock_guard<std::recursive_mutex> lock(simhost::detail::RegistryMutex());
  std::vector<std::string> v;
  for (const auto& kv : instance_) v.push_back(kv.first);
  return v;
}
}  // namespace optiling
