// Tiling-data fields that several ops' TilingData structs (op_host/<op>_tiling.h) begin or go on with, as
// macros to stand inside BEGIN_TILING_DATA_DEF ... END_TILING_DATA_DEF; the fields keep the order written here
// (the layout the host writes and GET_TILING_DATA reads).
#ifndef MS_KVCACHE_OP_HOST_MSKV_TILING_FIELDS_H_
#define MS_KVCACHE_OP_HOST_MSKV_TILING_FIELDS_H_

// The work split over the vector cores (mskv_tiling::SetCoreSplit fills them).
#define MSKV_CORE_SPLIT_TILING_FIELDS                                                              \
  TILING_DATA_FIELD_DEF(int64_t, usedCoreNum); /* block dim */                                      \
  TILING_DATA_FIELD_DEF(int64_t, formerNum);   /* cores [0, formerNum) take formerLen tokens / rows */ \
  TILING_DATA_FIELD_DEF(int64_t, formerLen);                                                        \
  TILING_DATA_FIELD_DEF(int64_t, tailLen);     /* the other cores take tailLen */

// The start of a slot write's tiling data (reshape_and_cache(_merged), concat_and_cache_mla, the quantizing
// writes): the tokens, the cache's slots, then the work split.
#define MSKV_SLOT_TILING_FIELDS                                                                              \
  TILING_DATA_FIELD_DEF(int64_t, numTokens); /* len(slot_mapping); 0 (quantizing writes): nothing to write */ \
  TILING_DATA_FIELD_DEF(int64_t, numSlots);  /* num_blocks * block_size; slots outside [0, numSlots) are    \
                                                skipped */                                                  \
  TILING_DATA_FIELD_DEF(int64_t, blockSize);                                                                \
  MSKV_CORE_SPLIT_TILING_FIELDS

// The work split and the index dtypes of the rotary writes.
#define MSKV_ROPE_SPLIT_TILING_FIELDS                                            \
  MSKV_CORE_SPLIT_TILING_FIELDS                                                  \
  TILING_DATA_FIELD_DEF(int64_t, posIs64);  /* positions dtype: 0 int32, 1 int64 */ \
  TILING_DATA_FIELD_DEF(int64_t, slotIs64); /* slot_mapping dtype: 0 int32, 1 int64 */

// The scales of a GQA quantizing write (reshape_and_cache_quant, rope_reshape_and_cache_quant: the K and V
// planes; mskv_quant_tiling::SetGqaQuantTiling fills them).
#define MSKV_GQA_QUANT_TILING_FIELDS                                                                           \
  TILING_DATA_FIELD_DEF(int64_t, scBlockStride); /* dynamic: scale-cache elements per block */                 \
  TILING_DATA_FIELD_DEF(int64_t, scSlotStride);  /* dynamic: between consecutive slots of a block */           \
  TILING_DATA_FIELD_DEF(int64_t, treeElems);     /* dynamic: power of two >= max(pitch, 8), the max-reduction  \
                                                    buffer */                                                  \
  TILING_DATA_FIELD_DEF(int64_t, kScaleKind);    /* static, K plane: 0 per tensor, 1 per head, 2 per channel */ \
  TILING_DATA_FIELD_DEF(int64_t, vScaleKind);    /* static, V plane */                                         \
  TILING_DATA_FIELD_DEF(int64_t, hasOffset);     /* static: 1 when k_offset / v_offset are given (both or      \
                                                    neither) */

#endif  // MS_KVCACHE_OP_HOST_MSKV_TILING_FIELDS_H_
