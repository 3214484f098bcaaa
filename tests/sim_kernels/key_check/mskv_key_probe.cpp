// Test op MskvKeyProbe (tests/test_tiling_keys.py; not under tests/sim_kernels/host/, whose sources the
// sim host-test module builds without op_host/ on its include path): its tiling ends with the shared
// mskv_tiling::FinishTiling of op_host/kv_copy_tiling_common.h for the op type and the tiling key of its
// attributes, so that the host-side refusal of a key the kernels do not declare for the SoC
// (op_host/mskv_tiling_key_check.h) can be called with any key.
#include "register/tilingdata_base.h"
#include "kv_copy_tiling_common.h"

namespace optiling {
BEGIN_TILING_DATA_DEF(MskvKeyProbeTilingData)
  TILING_DATA_FIELD_DEF(int64_t, unused);
END_TILING_DATA_DEF;
REGISTER_TILING_DATA_CLASS(MskvKeyProbe, MskvKeyProbeTilingData)

static ge::graphStatus KeyProbeTiling(gert::TilingContext* context) {
  mskv_tiling::Hardware hw;
  if (mskv_tiling::GetHardware(context, "MskvKeyProbe", &hw) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  const gert::RuntimeAttrs* attrs = context->GetAttrs();
  const char* op = attrs->GetStr(0);
  const int64_t key = *attrs->GetAttrPointer<int64_t>(1);
  MskvKeyProbeTilingData td;
  td.set_unused(0);
  return mskv_tiling::FinishTiling(context, op, hw, td, 1, static_cast<uint64_t>(key));
}
}  // namespace optiling

namespace ops {
class MskvKeyProbe : public OpDef {
 public:
  explicit MskvKeyProbe(const char* name) : OpDef(name) {
    this->Input("x").ParamType(REQUIRED).DataType({ge::DT_FLOAT16}).Format({ge::FORMAT_ND});
    this->Output("y").ParamType(REQUIRED).DataType({ge::DT_FLOAT16}).Format({ge::FORMAT_ND});
    this->Attr("op").AttrType(REQUIRED).String();
    this->Attr("key").AttrType(REQUIRED).Int();
    this->AICore().SetTiling(optiling::KeyProbeTiling);
    this->AICore().AddConfig("ascend910b");
    this->AICore().AddConfig("ascend310p");
  }
};
OP_ADD(MskvKeyProbe);
}  // namespace ops
