// AscendC CPU emulation: alias of graph/ge_error_codes.h (CANN ships both include paths).
#ifndef ASCENDC_SIM_GRAPH_ERROR_CODES_H_
#define ASCENDC_SIM_GRAPH_ERROR_CODES_H_
#include "graph/ge_error_codes.h"
#endif
