// What the target core offers, for the kernels' compile-time template selection.
//
// MSKV_HAS_BF16_AND_PAD: 1 where bfloat16 vector data and DataCopyPad exist (Atlas A2/A3, and the
// newer cores), 0 on Ascend310P (dav-m200; its official headers mark DataCopyPad "unsupported API on
// current device") and on Ascend910 (dav-c100). The tiling never selects a bf16 or DataCopyPad
// template there, and those templates are not compiled for it.
//
// Newer devkits key the target on __NPU_ARCH__ (2201 A2/A3, 2002 310P, 1001 910; asc-devkit's own
// headers test only it); older bisheng releases define __CCE_AICORE__ (220 / 200 / 100). Both are
// honoured, __NPU_ARCH__ first. With neither defined (a host-side build that names no target) the
// A2/A3 templates are compiled.
//
// Device subset only: preprocessor definitions, nothing else.
#ifndef MS_KVCACHE_OP_KERNEL_MSKV_ARCH_H_
#define MS_KVCACHE_OP_KERNEL_MSKV_ARCH_H_

#if defined(__NPU_ARCH__)
#if (__NPU_ARCH__ == 2002) || (__NPU_ARCH__ == 1001)
#define MSKV_HAS_BF16_AND_PAD 0
#else
#define MSKV_HAS_BF16_AND_PAD 1
#endif
#elif defined(__CCE_AICORE__)
#if __CCE_AICORE__ >= 220
#define MSKV_HAS_BF16_AND_PAD 1
#else
#define MSKV_HAS_BF16_AND_PAD 0
#endif
#else
#define MSKV_HAS_BF16_AND_PAD 1
#endif

#endif  // MS_KVCACHE_OP_KERNEL_MSKV_ARCH_H_
