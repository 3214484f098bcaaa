// The tiling data fields of a row scatter, shared by ReshapeAndCacheTilingData and
// ReshapeAndCacheMergedTilingData (op_host/<op>_tiling.h; SetScatterTiling in kv_copy_tiling_common.h fills
// them). All sizes are element counts of the cache dtype unless named *Bytes.
#ifndef MS_KVCACHE_OP_HOST_RESHAPE_AND_CACHE_TILING_FIELDS_H_
#define MS_KVCACHE_OP_HOST_RESHAPE_AND_CACHE_TILING_FIELDS_H_

#include "mskv_tiling_fields.h"

#define MSKV_SCATTER_TILING_FIELDS                                                                           \
  MSKV_SLOT_TILING_FIELDS                                                                                 \
  TILING_DATA_FIELD_DEF(int64_t, rowElems);      /* num_kv_heads * head_size (source row stride) */           \
  TILING_DATA_FIELD_DEF(int64_t, numSeg);        /* segments per row: 1 (BSND) or num_kv_heads (BNSD) */      \
  TILING_DATA_FIELD_DEF(int64_t, segElems);      /* elements per segment */                                   \
  TILING_DATA_FIELD_DEF(int64_t, segStride);     /* cache elements between segments of one row */             \
  TILING_DATA_FIELD_DEF(int64_t, blockStride);   /* cache elements per block */                               \
  TILING_DATA_FIELD_DEF(int64_t, slotStride);    /* cache elements between consecutive slots of a block */    \
  TILING_DATA_FIELD_DEF(int64_t, rowsPerChunk);  /* > 0: whole rows per UB buffer */                          \
  TILING_DATA_FIELD_DEF(int64_t, segsPerChunk);  /* rowsPerChunk == 0: segments per UB buffer */              \
  TILING_DATA_FIELD_DEF(int64_t, pieceElems);    /* both 0: a segment is moved in pieces of this size */      \
  TILING_DATA_FIELD_DEF(int64_t, bufferBytes);   /* bytes of each of the two UB buffers */

#endif  // MS_KVCACHE_OP_HOST_RESHAPE_AND_CACHE_TILING_FIELDS_H_
