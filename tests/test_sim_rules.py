"""Every rule of the AscendC emulation fires on a deliberately broken kernel, with a message naming the
rule, the kernel/op, the core and the values, and stays silent on the corrected twin of that kernel.

Kernels: tests/sim_kernels/bad/sim_rules.cpp (tiling key 0 = correct variant, 1 = broken variant),
built with ms_kvcache.sim.build. These tests import only ms_kvcache.sim (they also run under ASan).
"""
from pathlib import Path

import numpy as np
import pytest

from ms_kvcache import sim

HERE = Path(__file__).resolve().parent
N = 1024


@pytest.fixture(scope="module")
def rules():
    return sim.build("sim_rules", [HERE / "sim_kernels" / "bad" / "sim_rules.cpp"])


def _args(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(N).astype(np.float32), np.zeros(N, np.float32)]


TILING = np.array([7, 0, 0, 0], np.uint32).tobytes()

# (kernel, rule, launch kwargs, core that breaks the rule)
CASES = [
    ("rule_ub_budget", "UB_BUDGET", {}, 0),
    ("rule_buffer_count", "BUFFER_COUNT", {}, 0),
    ("rule_ub_out_of_buffer", "UB_OUT_OF_BUFFER", {}, 0),
    ("rule_datacopy_align", "DATACOPY_ALIGN", {}, 0),
    ("rule_ub_align", "UB_ALIGN", {}, 0),
    ("rule_gm_align", "GM_ALIGN", {}, 0),
    ("rule_datacopy_params", "DATACOPY_PARAMS", {}, 0),
    ("rule_datacopypad_params", "DATACOPYPAD_PARAMS", {}, 0),
    ("rule_datacopypad_blocklen", "DATACOPYPAD_PARAMS", {}, 0),
    ("rule_vec_dtype", "VEC_DTYPE", {}, 0),
    ("rule_vec_align", "VEC_ALIGN", {}, 0),
    ("rule_vec_overlap", "VEC_OVERLAP", {}, 0),
    ("rule_vec_params", "VEC_PARAMS", {}, 0),
    ("rule_vec_blkstride", "VEC_PARAMS", {}, 0),
    ("rule_cast_mode", "CAST_MODE", {}, 0),
    ("rule_cast_pair", "CAST_UNSUPPORTED", {}, 0),
    ("rule_que_alloc", "QUE_ALLOC", {}, 0),
    ("rule_que_deque_empty", "QUE_DEQUE_EMPTY", {}, 0),
    ("rule_que_double_free", "QUE_FREE", {}, 0),
    ("rule_que_leak", "QUE_LEAK", {}, 0),
    ("rule_use_after_free_realloc", "UB_USE_AFTER_FREE", {}, 0),
    ("rule_use_after_free_copy_out", "UB_USE_AFTER_FREE", {}, 0),
    ("rule_use_after_free_view", "UB_USE_AFTER_FREE", {}, 0),
    ("rule_use_after_free_stale_free", "UB_USE_AFTER_FREE", {}, 0),
    ("rule_tbuf_after_reset", "PIPE_STATE", {}, 0),
    ("rule_que_depth", "QUE_DEPTH", {}, 0),
    ("rule_que_foreign", "QUE_STATE", {}, 0),
    ("rule_que_alloc_limit", "QUE_ALLOC_LIMIT", {}, 0),
    ("rule_gm_oob", "GM_OUT_OF_BOUNDS", {}, 0),
    ("rule_gm_scalar_oob", "GM_OUT_OF_BOUNDS", {}, 0),
    ("rule_gm_write_conflict", "GM_WRITE_CONFLICT", {"block_dim": 4}, 1),
    ("rule_gm_race", "GM_RACE", {"block_dim": 4}, 1),
    ("rule_gm_readonly", "GM_READONLY", {}, 0),
    ("rule_ub_uninit_read", "UB_UNINIT_READ", {}, 0),
    ("rule_ub_uninit_to_gm", "UB_UNINIT_TO_GM", {}, 0),
    ("rule_flag_wait_unset", "FLAG_UNPAIRED", {}, 0),
    ("rule_flag_never_waited", "FLAG_UNPAIRED", {}, 0),
    ("rule_event_id", "EVENT_ID", {}, 0),
    ("rule_pipe_barrier_s", "PIPE_BARRIER", {}, 0),
    ("rule_hazard_mte2_v", "PIPE_HAZARD", {}, 0),
    ("rule_hazard_v_mte3", "PIPE_HAZARD", {}, 0),
    ("rule_hazard_mte2_waw", "PIPE_HAZARD", {}, 0),
    ("rule_hazard_queue_skipped", "PIPE_HAZARD", {}, 0),
    ("rule_hazard_gm_mte3_waw", "PIPE_HAZARD", {}, 0),
    ("rule_hazard_gm_raw", "PIPE_HAZARD", {}, 0),
    ("rule_tiling_size", "TILING_SIZE", {}, 0),
    ("rule_unsupported_api", "UNSUPPORTED_API", {}, 0),
    ("rule_pipe_state", "PIPE_STATE", {}, 0),
    # Div, Sqrt, Gather (added for the fused RoPE-write kernels)
    ("rule_div_dtype", "VEC_DTYPE", {}, 0),
    ("rule_sqrt_dtype", "VEC_DTYPE", {}, 0),
    ("rule_sqrt_nonpositive", "UB_UNINIT_TO_GM", {}, 0),
    ("rule_gather_dtype", "VEC_DTYPE", {}, 0),
    ("rule_gather_offset", "GATHER_OFFSET", {}, 0),
    ("rule_gather_base", "GATHER_OFFSET", {}, 0),
    ("rule_gather_oob", "UB_OUT_OF_BUFFER", {}, 0),
    ("rule_gather_uninit", "UB_UNINIT_READ", {}, 0),
    ("rule_gather_overlap", "VEC_OVERLAP", {}, 0),
    ("rule_gather_align", "VEC_ALIGN", {}, 0),
    # TBuf::Get(len) length (CANN's CPU-debug assertion) and GetWithOffset's 32-byte offset (documented)
    ("rule_tbuf_len", "TBUF_LEN", {}, 0),
    ("rule_tbuf_offset", "TBUF_OFFSET", {}, 0),
]


@pytest.mark.parametrize("kernel,rule,kw,core", CASES, ids=[c[0] for c in CASES])
def test_rule_fires_and_twin_passes(rules, kernel, rule, kw, core):
    kw = dict(kw)
    block_dim = kw.pop("block_dim", 1)
    # the corrected variant runs cleanly
    sim.launch_kernel(kernel, _args(), block_dim, tiling=TILING, tiling_key=0, **kw)
    # the broken variant raises the rule, naming rule, kernel and core
    with pytest.raises(sim.EmulationError) as ei:
        sim.launch_kernel(kernel, _args(), block_dim, tiling=TILING, tiling_key=1, order="forward", **kw)
    e = ei.value
    assert e.rule == rule, str(e)
    assert e.op == kernel
    assert e.core == core
    msg = str(e)
    assert msg.startswith(f"{rule}: op {kernel}, core {core} of {block_dim}: "), msg
    assert e.message == msg


def test_rule_messages_carry_values(rules):
    with pytest.raises(sim.EmulationError, match=r"UB_BUDGET.*2 x|needs 204800 B.*196608 B"):
        sim.launch_kernel("rule_ub_budget", _args(), 1, tiling=TILING, tiling_key=1)
    with pytest.raises(sim.EmulationError, match=r"count \* sizeof\(float\) = 40 B.*only 32 B"):
        sim.launch_kernel("rule_datacopy_align", _args(), 1, tiling=TILING, tiling_key=1)
    with pytest.raises(sim.EmulationError, match=r"blockCount = 4096 is outside \[0, 4095\]"):
        sim.launch_kernel("rule_datacopy_params", _args(), 1, tiling=TILING, tiling_key=1)
    with pytest.raises(sim.EmulationError, match=r"reads 64 B at byte offset 4064 of argument 0.*past its end by 32 B"):
        sim.launch_kernel("rule_gm_oob", _args(), 1, tiling=TILING, tiling_key=1)
    with pytest.raises(sim.EmulationError, match=r"CAST_NONE.*allows only CAST_RINT/CAST_FLOOR/CAST_CEIL/CAST_ROUND/CAST_TRUNC"):
        sim.launch_kernel("rule_cast_mode", _args(), 1, tiling=TILING, tiling_key=1)
    with pytest.raises(sim.EmulationError, match=r"half -> bfloat16_t does not exist on Ascend910B1"):
        sim.launch_kernel("rule_cast_pair", _args(), 1, tiling=TILING, tiling_key=1)
    with pytest.raises(sim.EmulationError, match=r"core 0 already wrote"):
        sim.launch_kernel("rule_gm_write_conflict", _args(), 4, tiling=TILING, tiling_key=1)


def test_gather_div_sqrt_messages(rules):
    with pytest.raises(sim.EmulationError, match=r"Div on int32_t: supported types are half and float"):
        sim.launch_kernel("rule_div_dtype", _args(), 1, tiling=TILING, tiling_key=1)
    with pytest.raises(sim.EmulationError, match=r"srcOffset\[5\] = 6 is not a multiple of sizeof\(float\) = 4"):
        sim.launch_kernel("rule_gather_offset", _args(), 1, tiling=TILING, tiling_key=1)
    with pytest.raises(sim.EmulationError, match=r"srcBaseAddr = 2 is not a multiple"):
        sim.launch_kernel("rule_gather_base", _args(), 1, tiling=TILING, tiling_key=1)
    with pytest.raises(sim.EmulationError, match=r"srcOffset\[63\] = 256.*spans"):
        sim.launch_kernel("rule_gather_oob", _args(), 1, tiling=TILING, tiling_key=1)
    with pytest.raises(sim.EmulationError, match=r"srcOffset\[63\].*never written"):
        sim.launch_kernel("rule_gather_uninit", _args(), 1, tiling=TILING, tiling_key=1)
    with pytest.raises(sim.EmulationError, match=r"int8_t: Ascend910B1 supports only"):
        sim.launch_kernel("rule_gather_dtype", _args(), 1, tiling=TILING, tiling_key=1)


def test_gather_int16_exists_on_310p(rules):
    # the documented Atlas inference series list includes int16_t (not bfloat16_t: DTYPE_UNSUPPORTED there)
    sim.launch_kernel("rule_gather_dtype", _args(), 1, tiling=TILING, tiling_key=0, soc="Ascend310P3")


def test_use_after_free_messages(rules):
    # the breaker's case: the buffer was handed out again and refilled (y would be 8 everywhere)
    y = np.zeros(N, np.float32)
    with pytest.raises(sim.EmulationError, match=r"UB_USE_AFTER_FREE: .*Adds: operand src0 is a stale LocalTensor of "
                                                 r"TQue #0 \(VECIN, UB \[0, 4096\)\): FreeTensor released it and "
                                                 r"AllocTensor has since handed the buffer out again \(1 time"):
        sim.launch_kernel("rule_use_after_free_realloc", [_args()[0], y], 1, tiling=TILING, tiling_key=1)
    assert not y.any()
    x = _args()[0]
    sim.launch_kernel("rule_use_after_free_realloc", [x, y], 1, tiling=TILING, tiling_key=0)
    assert np.all(y == 8.0)
    with pytest.raises(sim.EmulationError, match=r"DataCopy.*the source is a LocalTensor of TQue #0 .* that FreeTensor "
                                                 r"released"):
        sim.launch_kernel("rule_use_after_free_copy_out", _args(), 1, tiling=TILING, tiling_key=1)
    with pytest.raises(sim.EmulationError, match=r"LocalTensor::GetValue: the tensor is a LocalTensor of TQue #0"):
        sim.launch_kernel("rule_use_after_free_view", _args(), 1, tiling=TILING, tiling_key=1)
    with pytest.raises(sim.EmulationError, match=r"FreeTensor: the tensor is a stale LocalTensor"):
        sim.launch_kernel("rule_use_after_free_stale_free", _args(), 1, tiling=TILING, tiling_key=1)


@pytest.mark.parametrize("kernel,rule", [("rule_datacopypad_soc", "KERNEL_NOT_FOUND"),
                                         ("rule_bf16_soc", "DTYPE_UNSUPPORTED")])
def test_soc_rules(rules, kernel, rule):
    # bfloat16 is a runtime rule; DataCopyPad does not compile for 310P (the kernel is guarded with
    # __CCE_AICORE__ >= 220 and absent from the 310P build; tests/test_sim_conformance.py checks the
    # compile-time rejection)
    for soc in ("Ascend910B1", "Ascend910B3", "Ascend910_9391"):
        sim.launch_kernel(kernel, _args(), 1, tiling=TILING, soc=soc)
    with pytest.raises(sim.EmulationError) as ei:
        sim.launch_kernel(kernel, _args(), 1, tiling=TILING, soc="Ascend310P3")
    assert ei.value.rule == rule and "Ascend310P3" in str(ei.value)


def test_tbuf_messages(rules):
    with pytest.raises(sim.EmulationError, match=r"TBuf::Get<float>\(len=12\): len \* sizeof\(float\) = 48 B must be "
                                                 r"> 0 and a multiple of 32 B"):
        sim.launch_kernel("rule_tbuf_len", _args(), 1, tiling=TILING, tiling_key=1)
    with pytest.raises(sim.EmulationError, match=r"GetWithOffset<float>\(size=16, bufOffset=48\): bufOffset must be a "
                                                 r"multiple of 32 B"):
        sim.launch_kernel("rule_tbuf_offset", _args(), 1, tiling=TILING, tiling_key=1)


def test_ub_budget_follows_the_soc(rules):
    # 2 x 100 KiB fits the 256 KiB UB of 310P but not the 192 KiB of A2
    sim.launch_kernel("rule_ub_budget", _args(), 1, tiling=TILING, tiling_key=1, soc="Ascend310P3")
    with pytest.raises(sim.EmulationError, match="UB_BUDGET"):
        sim.launch_kernel("rule_ub_budget", _args(), 1, tiling=TILING, tiling_key=1, soc="Ascend910_9391")


def test_order_dependent_result_is_caught(rules):
    sim.launch_kernel_all_orders("rule_order_dependent", _args(), 4, tiling=TILING, tiling_key=0)
    with pytest.raises(sim.EmulationError) as ei:
        sim.launch_kernel_all_orders("rule_order_dependent", _args(), 4, tiling=TILING, tiling_key=1)
    assert ei.value.rule == "ORDER_DEPENDENT"


def test_gm_race_caught_in_every_order(rules):
    # forward: core 1 reads what core 0 wrote (seen at the read); reverse: core 1 reads before core 0
    # writes (seen at the end of the launch, from the recorded reads); threads: either way
    for order in ("forward", "reverse", "threads"):
        with pytest.raises(sim.EmulationError) as ei:
            sim.launch_kernel("rule_gm_race", _args(), 4, tiling=TILING, tiling_key=1, order=order)
        assert ei.value.rule == "GM_RACE", (order, str(ei.value))


def test_workspace_must_include_system_part(rules):
    sys_ws = 16 * 1024 * 1024  # GetLibApiWorkSpaceSize() on A2
    sim.launch_kernel("rule_workspace", _args(), 1, tiling=TILING, workspace_bytes=sys_ws + 64)
    with pytest.raises(sim.EmulationError) as ei:
        sim.launch_kernel("rule_workspace", _args(), 1, tiling=TILING, workspace_bytes=64)
    assert ei.value.rule == "WORKSPACE"


def test_list_tensor_desc(rules):
    # CANN ListTensorDesc layout of 3 tensors of rank 2 (4 x 5): [ptr offset][dim|index<<32, d0, d1]x3[ptrs]
    words = np.zeros(N // 2, np.uint64)
    ptr_off = 8 + 3 * 3 * 8
    words[0] = ptr_off
    for k in range(3):
        words[1 + 3 * k: 4 + 3 * k] = [2 | (k << 32), 4, 5]
        words[ptr_off // 8 + k] = 0x1000 * (k + 1)
    y = np.zeros(N, np.float32)
    sim.launch_kernel("rule_list_tensor", [words.copy(), y], 1, tiling=TILING, tiling_key=0)
    assert y[0] == 1.0
    with pytest.raises(sim.EmulationError) as ei:
        sim.launch_kernel("rule_list_tensor", [words.copy(), y], 1, tiling=TILING, tiling_key=1)
    assert ei.value.rule == "LIST_TENSOR" and "holds 3 tensors" in str(ei.value)


def test_unknown_kernel_and_wrong_arity(rules):
    with pytest.raises(sim.EmulationError) as ei:
        sim.launch_kernel("no_such_kernel", _args(), 1)
    assert ei.value.rule == "KERNEL_NOT_FOUND" and ei.value.core is None
    with pytest.raises(sim.EmulationError) as ei:
        sim.launch_kernel("rule_ub_budget", _args()[:1], 1)
    assert ei.value.rule == "LAUNCH"


def test_no_partial_write_on_error(rules):
    x, y = _args()
    y[:] = 5.0
    with pytest.raises(sim.EmulationError):
        sim.launch_kernel("rule_gm_write_conflict", [x, y], 4, tiling=TILING, tiling_key=1)
    assert np.all(y == 5.0)  # GM is copied; nothing reaches the caller's array on error


def test_hazard_tracker_can_be_disabled(rules):
    sim.launch_kernel("rule_hazard_mte2_v", _args(), 1, tiling=TILING, tiling_key=1, hazards=False)
    with pytest.raises(sim.EmulationError):
        sim.launch_kernel("rule_hazard_mte2_v", _args(), 1, tiling=TILING, tiling_key=1, hazards=True)


def test_ub_garbage_is_seeded_and_visible(rules):
    # with the uninitialised-read check the kernel fails; the garbage itself differs per seed
    with pytest.raises(sim.EmulationError, match="UB_UNINIT_READ"):
        sim.launch_kernel("rule_ub_uninit_read", _args(), 1, tiling=TILING, tiling_key=1, seed=1)
