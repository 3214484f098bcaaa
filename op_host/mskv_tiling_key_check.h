// The kernels' tiling keys on the host: every op's key set as op_kernel/mskv_tiling_keys.h declares it
// (MSKV_OP_KEY_SETS), expanded for both targets, so that the host tiling refuses a key its kernel has no
// branch for on the SoC (mskv_tiling::FinishTiling) instead of launching a kernel that traps.
//
// One declaration, two expansions: the A2/A3-only entries of a dimension are MSKV_A2_ONLY(F)(...), which
// reads MSKV_KEYS_TARGET_A2 where the key set is expanded; the tables below are expanded once with 1
// (Atlas A2/A3: ascend910b, ascend910_93) and once with 0 (Ascend310P, the kernels' __NPU_ARCH__ 2002 build).
// tests/test_tiling_keys.py compares both with the kernel header preprocessed for each arch.
//
// The header is in op_kernel/ because CANN's kernel build copies op_kernel/ only; op_host sources are
// compiled from the project tree (scripts/build_opp.sh copies op_host/ and op_kernel/ side by side).
#ifndef MS_KVCACHE_OP_HOST_MSKV_TILING_KEY_CHECK_H_
#define MS_KVCACHE_OP_HOST_MSKV_TILING_KEY_CHECK_H_

#include <cstddef>
#include <cstring>

#include "../op_kernel/mskv_tiling_keys.h"

namespace mskv_keys {

// the keys of one op's set, one array per target
#define MSKV_HOST_KEY(K, ...) K,
#define MSKV_HOST_KEY_TABLE(OP, KEYS, TARGET) static const unsigned long long k##OP##TARGET[] = {KEYS(MSKV_HOST_KEY)};
#define MSKV_HOST_KEY_TABLE_A2(OP, KEYS) MSKV_HOST_KEY_TABLE(OP, KEYS, A2)
#define MSKV_HOST_KEY_TABLE_310P(OP, KEYS) MSKV_HOST_KEY_TABLE(OP, KEYS, 310P)

#undef MSKV_KEYS_TARGET_A2
#define MSKV_KEYS_TARGET_A2 1
MSKV_OP_KEY_SETS(MSKV_HOST_KEY_TABLE_A2)
#undef MSKV_KEYS_TARGET_A2
#define MSKV_KEYS_TARGET_A2 0
MSKV_OP_KEY_SETS(MSKV_HOST_KEY_TABLE_310P)
#undef MSKV_KEYS_TARGET_A2
#define MSKV_KEYS_TARGET_A2 MSKV_HAS_BF16_AND_PAD

// One op's declaration: its OpType, the name of its key set and the keys per target.
struct DeclaredKeys {
  const char* op;
  const char* keySet;
  const unsigned long long* a2;
  size_t numA2;
  const unsigned long long* p310;
  size_t num310P;
};

#define MSKV_HOST_KEY_ENTRY(OP, KEYS) \
  {#OP, #KEYS, k##OP##A2, sizeof(k##OP##A2) / sizeof(k##OP##A2[0]), k##OP##310P, \
   sizeof(k##OP##310P) / sizeof(k##OP##310P[0])},
static const DeclaredKeys kDeclaredKeys[] = {MSKV_OP_KEY_SETS(MSKV_HOST_KEY_ENTRY)};
#undef MSKV_HOST_KEY_ENTRY
#undef MSKV_HOST_KEY_TABLE_310P
#undef MSKV_HOST_KEY_TABLE_A2
#undef MSKV_HOST_KEY_TABLE
#undef MSKV_HOST_KEY

// The declaration of op type `op`, or nullptr when MSKV_OP_KEY_SETS has none.
inline const DeclaredKeys* FindDeclaredKeys(const char* op) {
  for (size_t i = 0; i < sizeof(kDeclaredKeys) / sizeof(kDeclaredKeys[0]); ++i) {
    if (std::strcmp(kDeclaredKeys[i].op, op) == 0) return &kDeclaredKeys[i];
  }
  return nullptr;
}

// Whether `key` has a kernel branch on Ascend310P (is310P) or Atlas A2/A3.
inline bool IsDeclaredKey(const DeclaredKeys& d, bool is310P, unsigned long long key) {
  const unsigned long long* keys = is310P ? d.p310 : d.a2;
  const size_t n = is310P ? d.num310P : d.numA2;
  for (size_t i = 0; i < n; ++i) {
    if (keys[i] == key) return true;
  }
  return false;
}

}  // namespace mskv_keys

#endif  // MS_KVCACHE_OP_HOST_MSKV_TILING_KEY_CHECK_H_
