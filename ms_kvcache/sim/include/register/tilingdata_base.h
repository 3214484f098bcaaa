// AscendC CPU emulation (ms_kvcache.sim): the TilingData definition macros of CANN's
// register/tilingdata_base.h.
//
//   namespace optiling {
//   BEGIN_TILING_DATA_DEF(AddTilingData)
//     TILING_DATA_FIELD_DEF(uint32_t, totalLength);
//     TILING_DATA_FIELD_DEF_ARR(uint16_t, 3, shape);
//     TILING_DATA_FIELD_DEF_STRUCT(SubTiling, sub);
//   END_TILING_DATA_DEF;
//   REGISTER_TILING_DATA_CLASS(AddCustom, AddTilingData)
//   }
//
// Host side (default): a class with set_<field>() / get_<field>(), SaveToBuffer(), GetDataSize(),
// GetFieldInfo() and the CTilingDataClassFactory registry. Layout rule (CANN TilingDef
// CheckAlignAndGenPlaceHolder): each scalar/array field starts at a multiple of its element size, a
// nested struct at a multiple of 8, and the total size is padded to a multiple of 8 (a zero-field class
// has size 0). Field types are limited to int8_t..uint64_t and float, as CANN documents ("TilingData
// structure definition": TILING_DATA_FIELD_DEF supports only these types).
//
// Kernel side: with ASCENDC_SIM_KERNEL_SIDE defined before this header is included, the same macros
// define `struct alignas(8) Name { type field; type arr[n]; Sub sub; };`, whose C++ natural layout is
// byte-identical to the host class for every allowed field type (tested in
// tests/test_sim_host_tilingdata.py), so GET_TILING_DATA on the kernel side reads exactly the bytes the
// host SaveToBuffer wrote. REGISTER_TILING_DATA_CLASS(Op, Name) then defines the alias
// Op##_AscendcSimTilingData (ASCENDC_SIM_TILING_TYPE(Op)) in the enclosing namespace.
#ifndef ASCENDC_SIM_REGISTER_TILINGDATA_BASE_H_
#define ASCENDC_SIM_REGISTER_TILINGDATA_BASE_H_

#ifdef ASCENDC_SIM_KERNEL_SIDE
// ------------------------------------------------------------------------------------ kernel side
#include <cstdint>

#define BEGIN_TILING_DATA_DEF(class_name) struct alignas(8) class_name {
#define TILING_DATA_FIELD_DEF(data_type, field_name) data_type field_name;
#define TILING_DATA_FIELD_DEF_ARR(arr_type, arr_size, field_name) arr_type field_name[arr_size];
#define TILING_DATA_FIELD_DEF_STRUCT(struct_type, field_name) struct_type field_name;
#define END_TILING_DATA_DEF \
  }                         \
  ;
#define REGISTER_TILING_DATA_CLASS(op_type, class_name) using op_type##_AscendcSimTilingData = class_name;
#define ASCENDC_SIM_TILING_TYPE(op_type) op_type##_AscendcSimTilingData

#else
// ------------------------------------------------------------------------------------ host side
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "graph/ascend_string.h"

#ifndef VAR_UNUSED
#define VAR_UNUSED __attribute__((unused))
#endif

namespace optiling {
class TilingDef;

// One field of a tiling data class. The first six members are CANN's; offset_..struct_ are emulation
// additions used to print and compare tiling data. classType_: "0" scalar, "1" array, "2" struct.
class FieldInfo {
 public:
  FieldInfo(const char* dtype, const char* name) : dtype_(dtype), name_(name), classType_("0") {}
  FieldInfo(const char* dtype, const char* name, size_t arrSize)
      : dtype_(dtype), name_(name), arrSize_(arrSize), classType_("1") {}
  FieldInfo(const char* dtype, const char* name, const char* structType, size_t structSize)
      : dtype_(dtype), name_(name), structType_(structType), structSize_(structSize), classType_("2") {}

  const char* dtype_;
  const char* name_;
  size_t arrSize_ = 0;
  const char* structType_ = nullptr;
  size_t structSize_ = 0;
  const char* classType_;
  // emulation additions
  size_t offset_ = 0;
  size_t elemSize_ = 0;
  bool placeholder_ = false;        // alignment padding inserted before a field (CANN's "<field>PH")
  const TilingDef* struct_ = nullptr;
};

template <typename T>
struct IsTilingFieldType
    : std::integral_constant<bool, std::is_same<T, int8_t>::value || std::is_same<T, uint8_t>::value ||
                                       std::is_same<T, int16_t>::value || std::is_same<T, uint16_t>::value ||
                                       std::is_same<T, int32_t>::value || std::is_same<T, uint32_t>::value ||
                                       std::is_same<T, int64_t>::value || std::is_same<T, uint64_t>::value ||
                                       std::is_same<T, float>::value> {};

class TilingDef {
 public:
  virtual ~TilingDef();
  TilingDef(const TilingDef&) = delete;
  TilingDef& operator=(const TilingDef&) = delete;

  // Copies GetDataSize() bytes to pdata. capacity < GetDataSize() is an error (CANN logs it and copies
  // nothing; the emulation raises simhost::HostError "tiling.data_overflow").
  void SaveToBuffer(void* pdata, size_t capacity);
  std::vector<FieldInfo> GetFieldInfo() const { return field_info_; }
  const char* GetTilingClassName() const { return class_name_; }
  size_t GetDataSize() const { return data_size_; }
  // Makes the object a view of an external buffer (CANN semantics; SaveToBuffer is then a no-op).
  void SetDataPtr(void* dataPtr);
  void CheckAlignAndGenPlaceHolder(const char* name, size_t typeSize);
  const uint8_t* SimBytes() const { return data_ptr_; }

 protected:
  TilingDef() = default;
  void InitData();
  template <typename T>
  size_t SimAddField(const char* dtype, const char* name, size_t count, const char* ph) {
    static_assert(IsTilingFieldType<T>::value,
                  "TILING_DATA_FIELD_DEF / TILING_DATA_FIELD_DEF_ARR support only int8_t, uint8_t, int16_t, "
                  "uint16_t, int32_t, uint32_t, int64_t, uint64_t and float (CANN TilingData documentation)");
    return AddPlainField(dtype, name, sizeof(T), count, ph);
  }
  size_t AddPlainField(const char* dtype, const char* name, size_t elem_size, size_t count, const char* ph);
  size_t SimAddStruct(const char* struct_type, const char* name, TilingDef* sub, const char* ph);
  void SimFinish(const char* class_name);
  uint8_t* SimPtr(size_t offset, size_t bytes) const;
  template <typename T>
  T SimLoad(size_t offset) const {
    T v;
    std::memcpy(&v, SimPtr(offset, sizeof(T)), sizeof(T));
    return v;
  }
  template <typename T>
  void SimStore(size_t offset, T v) {
    std::memcpy(SimPtr(offset, sizeof(T)), &v, sizeof(T));
  }
  void SimStoreBytes(size_t offset, const void* src, size_t bytes) {
    uint8_t* dst = SimPtr(offset, bytes);
    if (src != nullptr && dst != src) std::memmove(dst, src, bytes);
  }

  std::vector<FieldInfo> field_info_;
  uint8_t* data_ptr_ = nullptr;
  bool owns_data_ = false;
  size_t data_size_ = 0;
  const char* class_name_ = "";
  std::vector<std::pair<TilingDef*, size_t>> sub_structs_;
};

using TilingDataConstructor = std::shared_ptr<TilingDef> (*)();

class CTilingDataClassFactory {
 public:
  static CTilingDataClassFactory& GetInstance();
  void RegisterTilingData(const char* op_type, const TilingDataConstructor constructor);
  std::shared_ptr<TilingDef> CreateTilingDataInstance(const char* op_type);
  std::vector<std::string> SimRegisteredOps() const;

 private:
  CTilingDataClassFactory() = default;
  std::map<std::string, TilingDataConstructor> instance_;
};
}  // namespace optiling

#define BEGIN_TILING_DATA_DEF(class_name)           \
  class class_name : public ::optiling::TilingDef { \
   public:                                          \
    class_name() {                                  \
      SimFinish(#class_name);                       \
      InitData();                                   \
    }                                               \
    explicit class_name(void* ptr) {                \
      SimFinish(#class_name);                       \
      if (ptr != nullptr) SetDataPtr(ptr);          \
    }

#define TILING_DATA_FIELD_DEF(data_type, field_name)                                                        \
 public:                                                                                                    \
  void set_##field_name(data_type field_name) { SimStore<data_type>(field_name##_offset_, field_name); }    \
  data_type get_##field_name() const { return SimLoad<data_type>(field_name##_offset_); }                   \
                                                                                                            \
 private:                                                                                                   \
  size_t field_name##_offset_ = SimAddField<data_type>(#data_type, #field_name, 0, #field_name "PH");

#define TILING_DATA_FIELD_DEF_ARR(arr_type, arr_size, field_name)                                            \
 public:                                                                                                     \
  void set_##field_name(const arr_type* field_name) {                                                        \
    SimStoreBytes(field_name##_offset_, field_name, static_cast<size_t>(arr_size) * sizeof(arr_type));       \
  }                                                                                                          \
  arr_type* get_##field_name() {                                                                             \
    return reinterpret_cast<arr_type*>(SimPtr(field_name##_offset_, static_cast<size_t>(arr_size) * sizeof(arr_type))); \
  }                                                                                                          \
                                                                                                             \
 private:                                                                                                    \
  size_t field_name##_offset_ = SimAddField<arr_type>(#arr_type, #field_name, (arr_size), #field_name "PH");

#define TILING_DATA_FIELD_DEF_STRUCT(struct_type, field_name) \
 public:                                                      \
  struct_type field_name{nullptr};                            \
                                                              \
 private:                                                     \
  size_t field_name##_offset_ = SimAddStruct(#struct_type, #field_name, &field_name, #field_name "PH");

#define END_TILING_DATA_DEF \
  }                         \
  ;

#define REGISTER_TILING_DATA_CLASS(op_type, class_name)                                                  \
  namespace {                                                                                            \
  const int VAR_UNUSED g_ascendc_sim_tiling_reg_##op_type##_##class_name = []() {                        \
    ::optiling::CTilingDataClassFactory::GetInstance().RegisterTilingData(                               \
        #op_type, []() -> std::shared_ptr<::optiling::TilingDef> { return std::make_shared<class_name>(); }); \
    return 0;                                                                                            \
  }();                                                                                                   \
  }

#endif  // ASCENDC_SIM_KERNEL_SIDE
#endif  // ASCENDC_SIM_REGISTER_TILINGDATA_BASE_H_
