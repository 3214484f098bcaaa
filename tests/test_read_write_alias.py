"""The alias rule for READ inputs (ms_kvcache/_custom.py ``_alias_sets``): a tensor an op only reads (key,
value, kv_c, k_pe, slot_mapping, positions, cos_sin_cache, scales, a transfer's slot_mapping, ...) may not
share a byte with a tensor the op writes: the kernel would read rows it has already overwritten, a silent
wrong answer (was: accepted on every path). Refused with a ValueError naming both arguments in PyNative (the
Python checks and the replayed calls' C++ Plan, which returns to the Python path), a RuntimeError at launch in
GRAPH_MODE on cpu and sim, and nothing is written. Read inputs may still overlap each other (key and value two
slices of one qkv tensor), and swap_blocks' src_cache may be its dst_cache (``OpSpec.read_may_alias``)."""
import numpy as np
import pytest
import mindspore as ms
from mindspore import Parameter, Tensor, nn

import ms_kvcache as mk
from ms_kvcache import _custom

from _replay import direct_launch_context, hits as _hits
from conftest import assert_bits_equal, ms_mode, to_np

READ_WRITE = "expected a tensor sharing no memory with the tensors the op reads"


@pytest.fixture
def fast():
    """PyNative on the cpu fast path with direct launch (replayed calls need both)."""
    yield from direct_launch_context("Plan")


def _refused(fast, call, written, args, op, pattern, replay_module=None):
    """``call(*args)`` raises the read/write alias ValueError matching ``pattern``, launches nothing (neither
    directly nor queued, the plan of ``replay_module`` has no new hit) and every tensor of ``written`` keeps
    its bytes."""
    fast.wait_idle()
    before = [to_np(w).copy() for w in written]
    counts = fast.launch_counts()
    hits = _hits(replay_module) if replay_module else None
    with pytest.raises(ValueError, match=rf"^{op}: argument {pattern}"):
        call(*args)
    fast.wait_idle()
    assert fast.launch_counts() == counts, "something was launched"
    if replay_module:
        assert _hits(replay_module) == hits, "the plan launched the aliasing call"
    for w, b in zip(written, before):
        assert_bits_equal(to_np(w), b, "written before the refusal")


def _replayed(fast, call, args, replay_module, times=2):
    """Good calls: the plan records the signature, then replays it (hits grow)."""
    fast.wait_idle()
    h0 = _hits(replay_module)
    for _ in range(times):
        call(*args)
        fast.wait_idle()
    assert _hits(replay_module) > h0, "the good signature was not replayed"


def _slots_as(cache, n):
    """An int32 view of the first ``n`` elements of float32 ``cache`` whose bits are set to the slots 0..n-1."""
    flat = cache.reshape(-1)
    bits = np.arange(n, dtype=np.int32).view(np.float32)
    flat[0:n] = Tensor(bits)
    return flat[0:n].view(ms.int32)


# ------------------------------------------------------------------------------------- reshape_and_cache
def test_reshape_and_cache_key_value_or_slots_inside_a_cache(fast, rng):
    nb, bs, h, d, t = 4, 8, 2, 16, 3
    kc = Tensor(rng.standard_normal((nb, bs, h, d)).astype(np.float32))
    vc = Tensor(rng.standard_normal((nb, bs, h, d)).astype(np.float32))
    k = Tensor(rng.standard_normal((t, h, d)).astype(np.float32))
    v = Tensor(rng.standard_normal((t, h, d)).astype(np.float32))
    slots = Tensor(np.array([5, 9, 31], np.int32))
    _replayed(fast, mk.reshape_and_cache, (k, v, kc, vc, slots), "reshape_and_cache")
    key_in_kc = kc.reshape(-1, h, d)[8:8 + t]  # rows 8..10 of key_cache; slot 9 overwrites one of them
    _refused(fast, mk.reshape_and_cache, (kc, vc), (key_in_kc, v, kc, vc, slots), "reshape_and_cache",
             rf"'key_cache': {READ_WRITE}, got memory shared with 'key'", "reshape_and_cache")
    value_in_kc = kc.reshape(-1, h, d)[1:1 + t]
    _refused(fast, mk.reshape_and_cache, (kc, vc), (k, value_in_kc, kc, vc, slots), "reshape_and_cache",
             rf"'key_cache': {READ_WRITE}, got memory shared with 'value'", "reshape_and_cache")
    value_in_vc = vc.reshape(-1, h, d)[29:29 + t]
    _refused(fast, mk.reshape_and_cache, (kc, vc), (k, value_in_vc, kc, vc, slots), "reshape_and_cache",
             rf"'value_cache': {READ_WRITE}, got memory shared with 'value'", "reshape_and_cache")
    fast.wait_idle()
    slots_in_vc = _slots_as(vc, t)  # the slots 0, 1, 2 as bits of value_cache's first elements
    _refused(fast, mk.reshape_and_cache, (kc, vc), (k, v, kc, vc, slots_in_vc), "reshape_and_cache",
             rf"'value_cache': {READ_WRITE}, got memory shared with 'slot_mapping'", "reshape_and_cache")
    # after the refusals the good signature still replays and writes the reference rows
    _replayed(fast, mk.reshape_and_cache, (k, v, kc, vc, slots), "reshape_and_cache", times=1)
    assert_bits_equal(to_np(kc).reshape(-1, h, d)[[5, 9, 31]], to_np(k), "key rows")
    assert_bits_equal(to_np(vc).reshape(-1, h, d)[[5, 9, 31]], to_np(v), "value rows")


def test_reshape_and_cache_python_path_refuses_too(fast, rng):
    """The Python checks alone (no plan: direct launch off, every call queued) refuse the same call."""
    nb, bs, h, d, t = 2, 4, 2, 16, 2
    kc = Tensor(rng.standard_normal((nb, bs, h, d)).astype(np.float32))
    vc = Tensor(rng.standard_normal((nb, bs, h, d)).astype(np.float32))
    v = Tensor(rng.standard_normal((t, h, d)).astype(np.float32))
    old = fast.set_direct_launch(False)
    try:
        _refused(fast, mk.reshape_and_cache, (kc, vc), (kc.reshape(-1, h, d)[0:t], v, kc, vc,
                                                         Tensor(np.array([0, 3], np.int64))),
                 "reshape_and_cache", rf"'key_cache': {READ_WRITE}, got memory shared with 'key'")
    finally:
        fast.set_direct_launch(old)


def test_key_and_value_may_overlap_each_other(fast, rng):
    """Legit: key and value two slices of one qkv tensor, or the same tensor (read inputs may overlap)."""
    nb, bs, h, d, t = 2, 4, 2, 16, 3
    kc = Tensor(np.zeros((nb, bs, h, d), np.float32))
    vc = Tensor(np.zeros((nb, bs, h, d), np.float32))
    qkv = rng.standard_normal((t, 3, h, d)).astype(np.float32)
    q = Tensor(qkv)
    slots = np.array([6, 0, 3], np.int32)
    mk.reshape_and_cache(q[:, 1], q[:, 2], kc, vc, Tensor(slots))
    assert_bits_equal(to_np(kc).reshape(-1, h, d)[slots], qkv[:, 1], "key rows")
    assert_bits_equal(to_np(vc).reshape(-1, h, d)[slots], qkv[:, 2], "value rows")
    k = Tensor(qkv[:, 0].copy())
    for _ in range(3):  # the same tensor as key and value, replayed
        mk.reshape_and_cache(k, k, kc, vc, Tensor(slots))
    assert_bits_equal(to_np(vc).reshape(-1, h, d)[slots], qkv[:, 0], "value rows = key")


def test_reshape_and_cache_merged_key_inside_the_cache(fast, rng):
    nb, bs, h, d, t = 2, 4, 2, 16, 2
    c = Tensor(rng.standard_normal((2, nb, bs, h, d)).astype(np.float32))
    k = Tensor(rng.standard_normal((t, h, d)).astype(np.float32))
    slots = Tensor(np.array([1, 6], np.int32))
    _replayed(fast, mk.reshape_and_cache_merged, (k, k, c, slots), "reshape_and_cache_merged")
    value_in_v_plane = c[1].reshape(-1, h, d)[6:6 + t]
    _refused(fast, mk.reshape_and_cache_merged, (c,), (k, value_in_v_plane, c, slots), "reshape_and_cache_merged",
             rf"'kv_cache': {READ_WRITE}, got memory shared with 'value'", "reshape_and_cache_merged")


def test_concat_and_cache_mla_k_pe_inside_kv_c_cache(fast, rng):
    nb, bs, r, p, t = 3, 4, 32, 8, 4
    cc = Tensor(rng.standard_normal((nb, bs, r)).astype(np.float32))
    pc = Tensor(rng.standard_normal((nb, bs, p)).astype(np.float32))
    kv_c = Tensor(rng.standard_normal((t, r)).astype(np.float32))
    k_pe = Tensor(rng.standard_normal((t, p)).astype(np.float32))
    slots = Tensor(np.array([0, 5, 7, 11], np.int64))
    _replayed(fast, mk.concat_and_cache_mla, (kv_c, k_pe, cc, pc, slots), "concat_and_cache_mla")
    k_pe_in_cc = cc.reshape(-1)[0:t * p].reshape(t, p)
    _refused(fast, mk.concat_and_cache_mla, (cc, pc), (kv_c, k_pe_in_cc, cc, pc, slots), "concat_and_cache_mla",
             rf"'kv_c_cache': {READ_WRITE}, got memory shared with 'k_pe'", "concat_and_cache_mla")
    kv_c_in_pc = pc.reshape(-1)[0:r].reshape(1, r)
    _refused(fast, mk.concat_and_cache_mla, (cc, pc), (kv_c_in_pc, k_pe[0:1], cc, pc, Tensor(np.array([2], np.int64))),
             "concat_and_cache_mla", rf"'k_pe_cache': {READ_WRITE}, got memory shared with 'kv_c'")


def test_quantizing_write_scale_inside_a_cache(fast, rng):
    """A static k_scale whose float32 bytes are the int8 key_cache's own first bytes."""
    nb, bs, h, d, t = 2, 4, 2, 16, 3
    kc = Tensor(np.full((nb, bs, h, d), 16, np.int8))  # float32 bits 0x10101010: a finite scale > 0
    vc = Tensor(np.zeros((nb, bs, h, d), np.int8))
    key = Tensor(rng.standard_normal((t, h, d)).astype(np.float32))
    good = Tensor(np.full((h, d), 0.03, np.float32))
    slots = Tensor(np.array([1, 6, 3], np.int64))

    def call(k_scale, v_scale):
        mk.reshape_and_cache(key, key, kc, vc, slots, k_scale=k_scale, v_scale=v_scale)

    _replayed(fast, call, (good, good), "reshape_and_cache_quant")
    fast.wait_idle()
    scale_in_kc = kc.reshape(-1)[0:4 * h * d].view(ms.float32).reshape(h, d)
    _refused(fast, call, (kc, vc), (scale_in_kc, good), "reshape_and_cache",
             rf"'key_cache': {READ_WRITE}, got memory shared with 'k_scale'", "reshape_and_cache_quant")


def test_dtype_view_spans_its_true_bytes():
    """MindSpore 2.10's ``Tensor.view(dtype)`` keeps the base's itemsize (an int8 -> float32 view reports a
    quarter of its bytes in ``nbytes``); the alias checks use ``_spec.tensor_nbytes`` (size x dtype bytes)."""
    from ms_kvcache._spec import tensor_nbytes

    buf = Tensor(np.zeros(64, np.int8))
    assert tensor_nbytes(buf.view(ms.float32)) == 64
    assert tensor_nbytes(Tensor(np.zeros(16, np.float32)).view(ms.int8)) == 64
    assert tensor_nbytes(Tensor(np.zeros((3, 5), np.float16))) == 30
    assert tensor_nbytes(Tensor(np.zeros(7, np.int8)).view(ms.uint8)) == 7


def _overlapping_float_view(nb, bs, h, d, n_float):
    """One int8 buffer holding a float32 view of ``n_float`` elements at byte 0 and, from the middle of that
    view's bytes on (past what its ``nbytes`` reports on MindSpore 2.10), an int8 cache [nb, bs, h, d]."""
    nfb = 4 * n_float
    buf = Tensor(np.full(nfb + nb * bs * h * d, 0x3C, np.int8))  # float32 bits 0x3c3c3c3c: 0.0115, finite > 0
    view = buf[0:nfb].view(ms.float32)
    cache = buf[nfb // 2:nfb // 2 + nb * bs * h * d].reshape(nb, bs, h, d)
    return buf, view, cache


def test_scale_cache_dtype_view_overlapping_a_cache_is_refused_in_python(fast, rng):
    """A dynamic k_scale_cache that is a float32 view of bytes whose second half is key_cache: refused by
    the Python check with a ValueError naming both (was: missed there, caught only at launch as a
    RuntimeError naming the internal op reshape_and_cache_quant)."""
    nb, bs, h, d, t = 2, 4, 2, 8, 3
    buf, k_scale_cache, kc = _overlapping_float_view(nb, bs, h, d, nb * bs * h)
    k_scale_cache = k_scale_cache.reshape(nb, bs, h, 1)
    vc = Tensor(np.zeros((nb, bs, h, d), np.int8))
    vs = Tensor(np.zeros((nb, bs, h, 1), np.float32))
    key = Tensor(rng.standard_normal((t, h, d)).astype(np.float32))
    slots = Tensor(np.array([0, 5, 2], np.int32))

    def call(ksc):
        mk.reshape_and_cache(key, key, kc, vc, slots, k_scale_cache=ksc, v_scale_cache=vs)

    _refused(fast, call, (buf, vc, vs), (k_scale_cache,), "reshape_and_cache",
             r"'k_scale_cache': expected a distinct cache tensor .*'key_cache'")


def test_static_scale_dtype_view_overlapping_a_cache_is_refused_in_python(fast, rng):
    """A static k_scale [h, d] viewed as float32 over bytes whose second half is key_cache."""
    nb, bs, h, d, t = 2, 4, 2, 8, 3
    buf, k_scale, kc = _overlapping_float_view(nb, bs, h, d, h * d)
    k_scale = k_scale.reshape(h, d)
    vc = Tensor(np.zeros((nb, bs, h, d), np.int8))
    key = Tensor(rng.standard_normal((t, h, d)).astype(np.float32))
    slots = Tensor(np.array([0, 5, 2], np.int32))

    def call(ks):
        mk.reshape_and_cache(key, key, kc, vc, slots, k_scale=ks, v_scale=Tensor(np.float32(0.02)))

    _refused(fast, call, (buf, vc), (k_scale,), "reshape_and_cache",
             rf"'key_cache': {READ_WRITE}, got memory shared with 'k_scale'")


def test_rope_writer_positions_and_key_inside_a_cache(fast, rng):
    """rope_reshape_and_cache (an op with outputs: Python path only)."""
    nb, bs, h, d, t = 2, 4, 2, 16, 3
    kc = Tensor(rng.standard_normal((nb, bs, h, d)).astype(np.float32))
    vc = Tensor(rng.standard_normal((nb, bs, h, d)).astype(np.float32))
    q = Tensor(rng.standard_normal((t, 4, d)).astype(np.float32))
    k = Tensor(rng.standard_normal((t, h, d)).astype(np.float32))
    inv = 1.0 / (10000 ** (np.arange(0, d, 2) / d))
    f = np.outer(np.arange(16), inv)
    cs = Tensor(np.concatenate([np.cos(f), np.sin(f)], axis=1).astype(np.float32))
    pos = Tensor(np.array([0, 1, 2], np.int32))
    slots = Tensor(np.array([0, 5, 7], np.int32))
    mk.rope_reshape_and_cache(pos, q, k, k, cs, kc, vc, slots)  # good call first
    key_in_vc = vc.reshape(-1, h, d)[4:4 + t]
    _refused(fast, mk.rope_reshape_and_cache, (kc, vc), (pos, q, key_in_vc, k, cs, kc, vc, slots),
             "rope_reshape_and_cache", rf"'value_cache': {READ_WRITE}, got memory shared with 'key'")
    fast.wait_idle()
    pos_in_kc = _slots_as(kc, t)
    _refused(fast, mk.rope_reshape_and_cache, (kc, vc), (pos_in_kc, q, k, k, cs, kc, vc, slots),
             "rope_reshape_and_cache", rf"'key_cache': {READ_WRITE}, got memory shared with 'positions'")


def test_multi_layer_transfer_slot_mapping_inside_a_cache(fast, rng):
    """multi_layer_kv_transfer h2d writes the caches: its slot_mapping may not be one of their bytes."""
    c = [(Tensor(rng.standard_normal((4, 8, 2, 16)).astype(np.float32)),
          Tensor(rng.standard_normal((4, 8, 2, 16)).astype(np.float32))) for _ in range(2)]
    buf = Tensor(rng.standard_normal((2, 2, 3, 32)).astype(np.float32))
    mk.multi_layer_kv_transfer(buf, c, Tensor(np.array([0, 9, 17], np.int32)), kv_format="SEPARATE_KV",
                               direction="h2d")
    fast.wait_idle()
    slots = _slots_as(c[1][0], 3)
    _refused(fast, lambda s: mk.multi_layer_kv_transfer(buf, c, s, kv_format="SEPARATE_KV", direction="h2d"),
             [x for kv in c for x in kv], (slots,), "multi_layer_kv_transfer",
             rf"'kv_caches \(tensor 2 in layer-major order\)': {READ_WRITE}, got memory shared with 'slot_mapping'")


def test_swap_blocks_src_is_dst_still_allowed_but_not_the_mapping(fast, rng):
    """The exception (OpSpec.read_may_alias): src_cache may be dst_cache; block_mapping inside dst_cache is
    refused."""
    c0 = rng.standard_normal((4, 8)).astype(np.float32)
    c = Tensor(c0.copy())
    mk.swap_blocks(c, c, Tensor(np.array([[0, 1], [1, 2]], np.int64)))
    exp = c0.copy()
    exp[1] = exp[0]
    exp[2] = exp[1]
    assert_bits_equal(to_np(c), exp, "rows in order")
    fast.wait_idle()
    flat = c.reshape(-1)
    flat[0:2] = Tensor(np.array([2, 3], np.int32).view(np.float32))
    mapping = flat[0:2].view(ms.int32).reshape(1, 2)  # the row (2, 3) as bits of dst_cache's first block
    src = Tensor(rng.standard_normal((4, 8)).astype(np.float32))
    _refused(fast, mk.swap_blocks, (c,), (src, c, mapping), "swap_blocks",
             rf"'dst_cache': {READ_WRITE}, got memory shared with 'block_mapping'")


# --------------------------------------------------------------------------------------------- GRAPH_MODE
class MlaNet(nn.Cell):
    """concat_and_cache_mla whose k_pe is a Parameter over k_pe_cache's memory (set_data keeps the address)."""

    def __init__(self, rng, tag):
        super().__init__()
        t, r, p = 4, 16, 8
        self.cc = Parameter(Tensor(rng.standard_normal((t, 1, r)).astype(np.float32)), name=f"rw_cc_{tag}")
        self.pc = Parameter(Tensor(rng.standard_normal((t, 1, p)).astype(np.float32)), name=f"rw_pc_{tag}")
        self.k_pe = Parameter(Tensor(np.zeros(1, np.float32)), name=f"rw_kpe_{tag}")
        self.k_pe.set_data(self.pc)

    def construct(self, kv_c, slots):
        return mk.concat_and_cache_mla(kv_c, self.k_pe, self.cc, self.pc, slots)


@pytest.mark.parametrize("be", ["cpu", "sim"])
def test_graph_mode_read_input_over_a_written_cache_is_refused_at_launch(be, rng):
    if be == "sim":
        from ms_kvcache._backends import sim

        if not sim.available()[0]:
            pytest.skip("sim backend not built")
    old = mk.get_backend()
    mk.set_backend(be)
    try:
        with ms_mode("graph"):
            net = MlaNet(rng, be)
            assert net.k_pe.data_ptr() == net.pc.data_ptr()
            before = [to_np(net.cc).copy(), to_np(net.pc).copy()]
            kv_c = Tensor(rng.standard_normal((4, 16)).astype(np.float32))
            with pytest.raises(RuntimeError, match=rf"concat_and_cache_mla: argument 'k_pe_cache': {READ_WRITE}, got "
                                                   r"the same memory as 'k_pe'.*nothing was written"):
                net(kv_c, Tensor(np.array([3, 2, 1, 0], np.int32)))
                to_np(net.pc)
            assert_bits_equal(to_np(net.cc), before[0], "kv_c_cache untouched")
            assert_bits_equal(to_np(net.pc), before[1], "k_pe_cache untouched")
    finally:
        mk.set_backend(old)


def test_graph_mode_key_and_value_one_tensor_still_run(rng):
    """Legit in a graph: key and value the same tensor (read inputs may overlap)."""
    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.kc = Parameter(Tensor(np.zeros((2, 4, 2, 16), np.float32)), name="rw_g_kc")
            self.vc = Parameter(Tensor(np.zeros((2, 4, 2, 16), np.float32)), name="rw_g_vc")

        def construct(self, k, s):
            return mk.reshape_and_cache(k, k, self.kc, self.vc, s)

    old = mk.get_backend()
    mk.set_backend("cpu")
    try:
        with ms_mode("graph"):
            net = Net()
            k = rng.standard_normal((3, 2, 16)).astype(np.float32)
            slots = np.array([7, 0, 2], np.int32)
            net(Tensor(k), Tensor(slots))
            assert_bits_equal(to_np(net.kc).reshape(-1, 2, 16)[slots], k, "key rows")
            assert_bits_equal(to_np(net.vc).reshape(-1, 2, 16)[slots], k, "value rows")
    finally:
        mk.set_backend(old)


def test_alias_sets_cover_every_read_input():
    """The rule is declared once: every input an op only reads is constrained, except read_may_alias."""
    from ms_kvcache._spec import all_specs, get_spec

    for spec in all_specs():
        counts = 1 if spec.has_dynamic else None
        attrs = spec.attr_values(())
        written, read = _custom._alias_sets(spec, counts, attrs)
        names = _custom._display_names(spec, counts)
        free = [names[i] for i in range(len(names)) if i not in written and i not in read]
        assert free == list(spec.read_may_alias), (spec.name, free)
    assert _custom._alias_sets(get_spec("swap_blocks"), None, {}) == ([1], [2])  # block_mapping only


def test_pending_read_input_is_refused_at_launch(fast, rng):
    """A read input still being produced by a pending op while the pipeline is busy (a whole-tensor reshape of
    the cache, queued behind a slow matmul) is not compared in Python (its address would wait for the
    pipeline): the fast-path kernel refuses the launch before writing (it gets the rule's attributes,
    _custom.alias_attrs) and MindSpore raises the message at the next sync."""
    from mindspore import ops

    nb, bs, h, d = 2, 4, 2, 16
    kc0 = rng.standard_normal((nb, bs, h, d)).astype(np.float32)
    kc = Tensor(kc0.copy())
    vc = Tensor(np.zeros((nb, bs, h, d), np.float32))
    v = Tensor(rng.standard_normal((nb * bs, h, d)).astype(np.float32))
    slots = Tensor(rng.permutation(nb * bs).astype(np.int32))
    big = Tensor(rng.standard_normal((1024, 1024)).astype(np.float32))
    fast.wait_idle()
    launched = False
    for _ in range(8):
        slow = ops.matmul(ops.matmul(big, big), big)  # keeps the pipeline busy
        key = kc.reshape(nb * bs, h, d)               # queued behind it: a pending op's output
        if not (fast.data_address_nosync(key) is None and not fast.pipeline_idle()):
            continue
        try:
            mk.reshape_and_cache(key, v, kc, vc, slots)
        except ValueError as exc:  # the pipeline drained between the probe and the call (a loaded machine):
            # the Python check saw the address and refused it; also a refusal, but not the path under test
            assert "argument 'key_cache'" in str(exc) and "'key'" in str(exc), exc
            fast.wait_idle()
            continue
        with pytest.raises(RuntimeError, match=rf"argument 'key_cache': {READ_WRITE}, got the same memory as 'key'.*"
                                               r"nothing was written"):
            kc.asnumpy()
        launched = True
        break
    del slow
    fast.wait_idle()
    assert_bits_equal(to_np(kc), kc0, "key_cache untouched")
    assert not to_np(vc).any(), "value_cache untouched"
    if not launched:
        pytest.skip("could not catch the pipeline busy at the call (8 tries): the launch-time check not reached")
