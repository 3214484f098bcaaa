"""The arch families the AscendC emulation compiles every kernel for (shared by the build and the lint).

``ARCHS[npu_arch]`` is the tuple of macros bisheng predefines for that target (Atlas A2/A3 vector
cores: ``__NPU_ARCH__`` 2201; Ascend310P AI cores: 2002). cmake/sim.cmake (``MSKV_SIM_ARCHS``) holds the
same table.
"""
ARCHS = {
    2201: ("__NPU_ARCH__=2201", "__CCE_AICORE__=220", "__DAV_C220__", "__DAV_C220_VEC__"),
    2002: ("__NPU_ARCH__=2002", "__CCE_AICORE__=200", "__DAV_M200__"),
}

#: SoC -> __NPU_ARCH__ (the platform table's NpuArch).
SOC_ARCH = {"Ascend910B1": 2201, "Ascend910B3": 2201, "Ascend910_9391": 2201, "Ascend310P3": 2002}
