// AscendC CPU emulation (ms_kvcache.sim): ge::graphStatus and its codes, as CANN's graph/ge_error_codes.h
// declares them (metadef inc/external/graph/error_codes.h: graphStatus is uint32_t, GRAPH_SUCCESS = 0,
// GRAPH_FAILED = 0xFFFFFFFF).
#ifndef ASCENDC_SIM_GRAPH_GE_ERROR_CODES_H_
#define ASCENDC_SIM_GRAPH_GE_ERROR_CODES_H_

#include <cstdint>

namespace ge {
using graphStatus = uint32_t;
constexpr graphStatus GRAPH_SUCCESS = 0U;
constexpr graphStatus GRAPH_FAILED = 0xFFFFFFFFU;
constexpr graphStatus GRAPH_NOT_CHANGED = 1343242304U;
constexpr graphStatus GRAPH_PARAM_INVALID = 50331649U;
constexpr graphStatus GRAPH_NODE_WITHOUT_CONST_INPUT = 50331648U;
constexpr graphStatus GRAPH_NODE_NEED_REPASS = 50331647U;
constexpr graphStatus GRAPH_INVALID_IR_DEF = 50331646U;
constexpr graphStatus OP_WITHOUT_IR_DATATYPE_INFER_RULE = 50331645U;
constexpr graphStatus GRAPH_PARAM_OUT_OF_RANGE = 50331644U;
constexpr graphStatus GRAPH_MUL_OVERFLOW = 50331643U;
constexpr graphStatus GRAPH_ADD_OVERFLOW = 50331642U;
using Status = uint32_t;
constexpr Status SUCCESS = 0U;
constexpr Status FAILED = 0xFFFFFFFFU;
}  // namespace ge

#endif  // ASCENDC_SIM_GRAPH_GE_ERROR_CODES_H_
