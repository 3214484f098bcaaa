"""In-place rules in GRAPH_MODE and @ms.jit (issue 15): a tensor an op writes must be a whole Parameter.

MindSpore 2.10 gives an in-place op a temporary copy of a slice / view / op result / Tensor attribute
(the write was silently lost: 0 of the rows written), and a view passed as a graph argument by its base
address (the write landed in the wrong plane before MindSpore raised). Every graph-branch primitive now
refuses, in its infer step (compile time, before anything runs), a written tensor whose abstract is not
a Parameter (``RefType``, what ``ops.IsParameter`` reads), with
``<op>: argument '<name>': expected a Parameter (a whole Parameter, not a slice or a computed tensor)``.
The ways a Parameter reaches an op whole (Cell attribute, ParameterTuple item, Parameter argument,
closure / global Parameter of a jit function, a tuple of Parameters as a jit argument, ``ops.depend``)
still write through, bit-identical to PyNative.
"""
import contextlib
import re

import numpy as np
import pytest
import mindspore as ms
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops

import ms_kvcache as mk

from _inplace_cases import CASES, get, op_name, replace_host
from conftest import assert_bits_equal, ms_mode, to_np

NOT_A_PARAM = r"expected a Parameter \(a whole Parameter, not a slice or a computed tensor\)"
BY_OP = {c.op: c for c in CASES}


@contextlib.contextmanager
def backend(name):
    if name == "sim":
        from ms_kvcache._backends import sim

        if not sim.available()[0]:
            pytest.skip("sim backend not built")
    old = mk.get_backend()
    mk.set_backend(name)
    try:
        yield
    finally:
        mk.set_backend(old)


def _snapshot(args):
    out = []
    for x in args:
        if isinstance(x, tuple):
            out.extend(_snapshot(x))
        else:
            out.append(to_np(x).copy())
    return out


def _all_tensors(args):
    out = []
    for x in args:
        out.extend(_all_tensors(x) if isinstance(x, tuple) else [x])
    return out


class WayCell(nn.Cell):
    """Calls ``case.call`` on ``args`` with the written tensor at ``path`` replaced by one made ``way``."""

    def __init__(self, case, args, path, way):
        super().__init__()
        self.call, self.args, self.path, self.way = case.call, args, path, way
        x = to_np(get(args, path))
        shape = x.shape
        self.s0 = shape[0]
        self.big = Parameter(Tensor(np.stack([x, x])), name="way_big")                  # slice
        self.big2 = Parameter(Tensor(np.concatenate([x, x])), name="way_big2")          # split
        self.flat = Parameter(Tensor(x.reshape(-1).copy()), name="way_flat")            # reshape
        self.p = Parameter(Tensor(x.copy()), name="way_p")                              # op result, depend
        self.t = Tensor(x.copy())                                                       # Tensor attribute
        self.pt = ParameterTuple([Parameter(Tensor(x.copy()), name="way_pt0")])         # ParameterTuple item
        self.shape = shape

    def construct(self, arg):
        if self.way == "attribute":  # the written Parameter itself, a Cell attribute
            return self.call(self.args)
        if self.way == "slice":
            bad = self.big[1]
        elif self.way == "split":
            bad = ops.split(self.big2, self.s0)[1]
        elif self.way == "reshape":
            bad = self.flat.reshape(self.shape)
        elif self.way == "op_result":
            bad = self.p * 1
        elif self.way == "tensor_attr":
            bad = self.t
        elif self.way == "param_tuple_item":
            bad = self.pt[0]
        elif self.way == "depend":
            bad = ops.depend(self.p, arg)
        else:  # "tensor_arg", "param_arg"
            bad = arg
        return self.call(replace_host(self.args, self.path, bad))


GRAPH_WAYS = ["slice", "split", "reshape", "op_result", "tensor_attr", "tensor_arg"]


def _refused(case, name, rng, make_cell_call):
    args = case.args(rng)
    before = _snapshot(args)
    with pytest.raises(TypeError, match=rf"^{op_name(case)}: argument '{re.escape(name)}': " + NOT_A_PARAM):
        make_cell_call(args)
    for a, b in zip(_snapshot(args), before):
        assert_bits_equal(a, b, "nothing written by a refused call")


#: ops whose calls are tried with every way (a single cache, a list of caches, a written buffer, rerope);
#: the other ops with a slice (each compile costs ~0.7 s of CI time)
_EVERY_WAY_OPS = ("reshape_and_cache", "copy_blocks", "kv_transfer_d2h", "rerope_cached_keys")
_OP_WAYS = [(c.op, "slice") for c in CASES] + [(op, way) for op in _EVERY_WAY_OPS for way in GRAPH_WAYS if way != "slice"]


@pytest.mark.parametrize("op,way", _OP_WAYS)
def test_graph_mode_refuses_non_parameter_at_compile_time(op, way, rng):
    """Every op, every way a non-Parameter tensor reaches its first written argument in a GRAPH_MODE
    Cell: refused at compile time naming the op and argument (was: ran and the write was lost)."""
    case = BY_OP[op]
    path, name = case.written[0]

    def run(args):
        net = WayCell(case, args, path, way)
        net(Tensor(to_np(get(args, path)).copy()))
        return net

    with ms_mode("graph"), backend("cpu"):
        _refused(case, name, rng, run)


@pytest.mark.parametrize("op", [c.op for c in CASES if len(c.written) > 1])
def test_graph_mode_refuses_every_written_argument(op, rng):
    """The other written arguments of ops with several (a slice of a Parameter)."""
    case = BY_OP[op]
    with ms_mode("graph"), backend("cpu"):
        for path, name in case.written[1:]:
            _refused(case, name, rng, lambda args, p=path: WayCell(case, args, p, "slice")(Tensor(np.zeros(1))))


@pytest.mark.parametrize("op", [c.op for c in CASES])
def test_graph_mode_refusal_on_sim(op, rng):
    """Same check on the sim backend (a frontend check: the emulated kernel never runs)."""
    case = BY_OP[op]
    path, name = case.written[0]
    with ms_mode("graph"), backend("sim"):
        _refused(case, name, rng, lambda args: WayCell(case, args, path, "slice")(Tensor(np.zeros(1))))


@pytest.mark.parametrize("op,way", [(c.op, "view_arg") for c in CASES] + [
    (op, way) for op in _EVERY_WAY_OPS for way in ("tensor_arg", "closure_slice")])
def test_jit_refuses_non_parameter_at_compile_time(op, way, rng):
    """@ms.jit: a Tensor argument (possibly a PyNative view, which MindSpore passes by its base address:
    the write used to land in the other plane before MindSpore raised), or a slice of a Parameter the
    function refers to."""
    case = BY_OP[op]
    path, name = case.written[0]
    with ms_mode("pynative"), backend("cpu"):
        args = case.args(rng)
        x = to_np(get(args, path))
        big = Parameter(Tensor(np.stack([x, x])), name=f"jit_big_{op}")
        base_before = to_np(big).copy()

        @ms.jit
        def f(arg):
            if way == "closure_slice":
                return case.call(replace_host(args, path, big[1]))
            return case.call(replace_host(args, path, arg))

        def run(_):
            arg = big[1] if way == "view_arg" else Tensor(x.copy())
            f(arg)

        before = _snapshot(args)
        with pytest.raises(TypeError, match=rf"^{op_name(case)}: argument '{re.escape(name)}': " + NOT_A_PARAM):
            run(None)
        for a, b in zip(_snapshot(args), before):
            assert_bits_equal(a, b, "nothing written by a refused call")
        assert_bits_equal(to_np(big), base_before, "the viewed Parameter is untouched")


# ------------------------------------------------------------------------------------- accepted ways
def _pynative_reference(case, rng_seed, path):
    """The written tensors after the same call in PyNative (tested against numpy elsewhere)."""
    args = case.args(np.random.default_rng(rng_seed), tag="_ref")
    with ms_mode("pynative"):
        case.call(args)
    return [to_np(t) for t in _all_tensors(args)], to_np(get(args, path))


_WHOLE = [(c.op, "attribute") for c in CASES] + [
    (op, way) for op in ("reshape_and_cache", "copy_blocks", "kv_transfer_d2h", "block_transfer_h2d",
                         "rope_concat_and_cache_mla") for way in ("param_tuple_item", "param_arg", "depend")]


@pytest.mark.parametrize("op,way", _WHOLE)
def test_graph_mode_whole_parameters_are_written(op, way, rng):
    """A Parameter reaching the op whole is written through in GRAPH_MODE, bit-identical to PyNative."""
    case = BY_OP[op]
    path, _ = case.written[0]
    seed = int(rng.integers(1 << 30))
    ref_all, ref_target = _pynative_reference(case, seed, path)
    with ms_mode("graph"), backend("cpu"):
        args = case.args(np.random.default_rng(seed))
        if way == "attribute":
            net = WayCell(case, args, path, "attribute")
            target = get(args, path)
            net(Tensor(np.zeros(1)))
        else:
            net = WayCell(case, args, path, way)
            if way == "param_arg":
                target = Parameter(Tensor(to_np(get(args, path)).copy()), name=f"arg_{op}")
                net(target)
            else:
                net(Tensor(np.zeros(1)))
                target = net.pt[0] if way == "param_tuple_item" else net.p
        assert_bits_equal(to_np(target), ref_target, f"{way}: the Parameter holds the write")
        if way == "attribute":
            for i, (a, b) in enumerate(zip([to_np(t) for t in _all_tensors(args)], ref_all)):
                assert_bits_equal(a, b, f"tensor {i} as in PyNative")


@pytest.mark.parametrize("way", ["param_arg", "closure", "tuple_arg"])
@pytest.mark.parametrize("op", ["reshape_and_cache", "copy_blocks", "kv_transfer_d2h", "rope_concat_and_cache_mla"])
def test_jit_whole_parameters_are_written(op, way, rng):
    """@ms.jit: a Parameter argument, a Parameter the function refers to, a tuple of Parameters given as
    an argument: all written through (MindSpore 2.10 writes elements of a tuple argument of a jit function;
    of a GRAPH_MODE Cell it fails with 'Parameter[i] has no default param')."""
    case = BY_OP[op]
    path, _ = case.written[0]
    seed = int(rng.integers(1 << 30))
    _, ref_target = _pynative_reference(case, seed, path)
    with ms_mode("pynative"), backend("cpu"):
        args = case.args(np.random.default_rng(seed), tag=f"_jit_{way}")
        target = get(args, path)
        call = case.call

        @ms.jit
        def closure(x):
            return call(args)

        @ms.jit
        def param_arg(t):
            return call(replace_host(args, path, t))

        @ms.jit
        def tuple_arg(a):
            return call(a)

        @ms.jit
        def tuple_args(*a):  # lists of caches: one flat tuple argument each
            return call(a)

        if way == "closure":
            closure(Tensor(np.zeros(1)))
        elif way == "param_arg":
            param_arg(target)
        elif tuple(int(x) for x in ms.__version__.split(".")[:2]) < (2, 8):
            # MindSpore 2.7 refuses most tuples of Parameters as a jit argument ("Parameter[i] has no default
            # param"): then an error and nothing written; otherwise the write lands (checked below)
            before = to_np(target).copy()
            try:
                if any(isinstance(x, tuple) for x in args):
                    tuple_args(*args)
                else:
                    tuple_arg(args)
            except RuntimeError as e:
                assert "has no default param" in str(e), str(e)
                assert_bits_equal(to_np(target), before, f"{way}: nothing written on MindSpore 2.7")
                return
        elif any(isinstance(x, tuple) for x in args):
            # a tuple nested in a tuple argument fails in MindSpore 2.10 ("Parameter[0] has no default
            # param", an error, not a lost write); flat tuples work
            tuple_args(*args)
        else:
            tuple_arg(args)
        assert_bits_equal(to_np(target), ref_target, f"{way}: the Parameter holds the write")


def test_mindspore_graph_mode_drops_inplace_writes_into_slices():
    """Why views are refused rather than written through: MindSpore 2.10's own in-place ops lose a write
    into a slice of a Parameter in GRAPH_MODE on CPU (its view + in-place handling does not reach the
    Parameter). If this starts failing, MindSpore learnt to write through views: revisit the refusal."""
    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.kv = Parameter(Tensor(np.zeros((2, 4, 8), np.float32)), name="ms_kv")

        def construct(self, x):
            self.kv[1].copy_(x)
            return x

    with ms_mode("graph"):
        net = Net()
        net(Tensor(np.ones((4, 8), np.float32)))
        assert not to_np(net.kv).any(), "MindSpore wrote through the slice"


def test_mindspore_graph_code_sees_no_parameter_identity():
    """Why aliasing is checked at launch (cpu, sim) and not at compile time (so not on ascend, where the
    launch runs no code of ours): in a MindSpore 2.10 graph ``p is p`` is False for a Parameter, and the
    infer step gets only shape / dtype / value (tests above: same Parameter twice reaches the kernel). If
    this starts failing, graph code can tell the same Parameter twice apart: refuse it at compile time on
    every backend."""
    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.a = Parameter(Tensor(np.zeros(4, np.float32)), name="ident_a")

        def construct(self, x):
            return self.a is self.a, x

    with ms_mode("graph"):
        same, _ = Net()(Tensor(np.zeros(1, np.float32)))
        assert not same, "graph code now sees Parameter identity"


# ------------------------------------------------------------------------------------- aliased caches
class AliasCell(nn.Cell):
    def __init__(self, call, args):
        super().__init__()
        self.call, self.args = call, args

    def construct(self):
        return self.call(self.args)


@pytest.mark.parametrize("be", ["cpu", "sim"])
def test_graph_mode_same_parameter_twice_is_refused_at_launch(be, rng):
    """Graph code cannot see tensor identity, so the same Parameter given for two written arguments
    reaches the kernel; the cpu and sim AOT entries compare the written address ranges first and refuse
    the launch, writing nothing, with a message naming both arguments in the RuntimeError (was: cpu
    silently let the second write win, sim failed with GM_RACE behind MindSpore's generic 'Return value
    from CPU AOT kernel(...) is 1')."""
    rc = BY_OP["reshape_and_cache"]
    cb = BY_OP["copy_blocks"]
    kv = BY_OP["kv_transfer_h2d"]
    with ms_mode("graph"), backend(be):
        args = rc.args(rng, tag=f"_alias_{be}")
        aliased = replace_host(args, (3,), args[2])
        before = to_np(args[2]).copy()
        with pytest.raises(RuntimeError, match=r"reshape_and_cache: argument 'value_cache': expected a distinct "
                                               r"cache tensor .*got the same memory as 'key_cache'.*nothing was "
                                               r"written"):
            AliasCell(rc.call, aliased)()
        assert_bits_equal(to_np(args[2]), before, "reshape_and_cache: untouched")

        # copy_blocks: key cache and value cache the same Parameter
        args = cb.args(rng, tag=f"_alias_{be}")
        aliased = (args[0], (args[1][0], args[0][0]), args[2])
        before = _snapshot(args)
        with pytest.raises(RuntimeError, match=r"copy_blocks: argument '(value|key)_caches\[\d\]': expected a "
                                               r"distinct cache tensor .*got the same memory as"):
            AliasCell(cb.call, aliased)()
        for a, b in zip(_snapshot(args), before):
            assert_bits_equal(a, b, "copy_blocks: untouched")

        # one Parameter repeated across layers of an h2d transfer
        args = kv.args(rng, tag=f"_alias_{be}")
        c = args[1]
        aliased = (args[0], (c[0], c[1], c[2], c[0]), args[2])
        before = _snapshot(args)
        with pytest.raises(RuntimeError, match=r"multi_layer_kv_transfer: argument 'kv_caches\[3\]': expected a "
                                               r"distinct cache tensor .*got the same memory as 'kv_caches\[0\]'"):
            AliasCell(kv.call, aliased)()
        for a, b in zip(_snapshot(args), before):
            assert_bits_equal(a, b, "transfer: untouched")


@pytest.mark.parametrize("be", ["cpu", "sim"])
def test_graph_mode_written_tensor_over_read_cache_is_refused(be, rng):
    """A d2h staging buffer whose memory is one of the caches being read (a Parameter set_data'd to the
    cache): refused at launch, nothing written (the offloaded KV would be overwritten)."""
    case = BY_OP["block_transfer_staging"]
    with ms_mode("graph"), backend(be):
        args = case.args(rng, tag=f"_over_{be}")
        cache = args[0][1]
        staging = Parameter(Tensor(np.zeros(1, np.float32)), name=f"stg_over_{be}")
        staging.set_data(cache)  # same memory, a shape the staging rule accepts
        before = _snapshot(args)
        with pytest.raises(RuntimeError, match=r"multi_layer_block_transfer: argument 'staging': expected a tensor "
                                               r"sharing no memory with the tensors the op reads, got the same "
                                               r"memory as 'kv_caches\[1\]'"):
            AliasCell(case.call, replace_host(args, (3,), staging))()
        for a, b in zip(_snapshot(args), before):
            assert_bits_equal(a, b, "untouched")


def test_graph_mode_two_parameters_over_one_buffer_are_refused(rng):
    """Two different Parameters whose data is one tensor (set_data keeps the address): the address check
    sees it where no identity check could."""
    rc = BY_OP["reshape_and_cache"]
    with ms_mode("graph"), backend("cpu"):
        args = rc.args(rng, tag="_setdata")
        other = Parameter(Tensor(np.zeros(1, np.float32)), name="rc_setdata_other")
        other.set_data(args[2])
        assert other.data_ptr() == args[2].data_ptr()
        before = to_np(args[2]).copy()
        with pytest.raises(RuntimeError, match=r"argument 'value_cache': expected a distinct cache tensor .*the "
                                               r"same memory as 'key_cache'"):
            AliasCell(rc.call, replace_host(args, (3,), other))()
        assert_bits_equal(to_np(args[2]), before, "untouched")


@pytest.mark.parametrize("be", ["cpu", "sim"])
def test_graph_mode_swap_blocks_src_is_dst_still_allowed(be, rng):
    """src_cache is read, so src_cache is dst_cache stays the documented in-order copy."""
    with ms_mode("graph"), backend(be):
        c0 = rng.standard_normal((4, 8, 2, 16)).astype(np.float32)
        c = Parameter(Tensor(c0.copy()), name=f"swap_same_{be}")
        AliasCell(BY_OP["swap_blocks"].call, (c, c, Tensor(np.array([[0, 1], [1, 2]], np.int64))))()
        exp = c0.copy()
        exp[1] = exp[0]
        exp[2] = exp[1]
        assert_bits_equal(to_np(c), exp, "rows in order")


# ------------------------------------------------------------------------------------- argument types
class TypeCell(nn.Cell):
    def __init__(self, which):
        super().__init__()
        self.which = which
        self.kc = Parameter(Tensor(np.zeros((4, 8, 2, 16), np.float32)), name="type_kc")
        self.vc = Parameter(Tensor(np.zeros((4, 8, 2, 16), np.float32)), name="type_vc")

    def construct(self, k, s):
        if self.which == "list_slots":
            mk.reshape_and_cache(k, k, self.kc, self.vc, [0, 9, 31])
        elif self.which == "int_block_mapping":
            mk.swap_blocks(self.kc, self.vc, 3)
        elif self.which == "caches_not_a_list":
            mk.copy_blocks(self.kc, self.vc, s)
        else:
            mk.reshape_and_cache(k, k, self.kc, self.vc, s)
        return s


@pytest.mark.parametrize("mode", ["graph", "jit"])
def test_graph_mode_argument_types_name_the_op(mode):
    """Was: AttributeError "'List' object has no attribute 'shape'" / "The prim is not a PrimitivePy"."""
    k = Tensor(np.ones((3, 2, 16), np.float32))
    s = Tensor(np.array([0, 9, 31], np.int32))
    with ms_mode(mode), backend("cpu"):
        def mk_net(which):
            net = TypeCell(which)
            if mode == "jit":
                net.construct = ms.jit(net.construct)
            return net

        with pytest.raises(TypeError, match=r"reshape_and_cache: argument 'slot_mapping': expected a mindspore.Tensor, "
                                            r"got a Python list"):
            mk_net("list_slots")(k, s)
        with pytest.raises(TypeError, match=r"swap_blocks: argument 'block_mapping': expected a mindspore.Tensor, "
                                            r"got Int64"):
            mk_net("int_block_mapping")(k, s)
        with pytest.raises(TypeError, match=r"copy_blocks: argument 'key_caches': expected a list or tuple of "
                                            r"Tensors"):
            mk_net("caches_not_a_list")(k, s)
        with pytest.raises(TypeError, match=r"reshape_and_cache: argument 'key': expected a mindspore.Tensor, "
                                            r"got a Python object that is not a Tensor \(e.g. a numpy array"):
            mk_net("numpy")(np.ones((3, 2, 16), np.float32), np.array([0, 9, 31], np.int32))


# ------------------------------------------------------------------------------------- kernel errors
def test_graph_mode_sim_tiling_rejection_reaches_the_exception(rng):
    """A launch the AscendC tiling rejects in graph mode (bfloat16 on Ascend310P3): the reason is in the
    RuntimeError text (was: only on stderr and in last_error(); the exception said 'Return value ... is 1')."""
    from ms_kvcache import sim

    with backend("sim"):
        old = sim.get_soc()
        sim.set_soc("Ascend310P3")
        try:
            with ms_mode("graph"):
                kc = Parameter(Tensor(np.zeros((4, 8, 2, 16), np.float32), ms.bfloat16), name="tiling_kc")
                vc = Parameter(Tensor(np.zeros((4, 8, 2, 16), np.float32), ms.bfloat16), name="tiling_vc")
                k = Tensor(np.ones((3, 2, 16), np.float32), ms.bfloat16)
                with pytest.raises(RuntimeError, match=r"Error message is .*MskvReshapeAndCache.*bfloat16"):
                    AliasCell(BY_OP["reshape_and_cache"].call, (k, k, kc, vc, Tensor(np.array([0, 1, 2], np.int32))))()
                assert "bfloat16" in sim.last_error()
        finally:
            sim.set_soc(old)


def _index_arg(args):
    """Position of the first index argument (an integer Tensor that is not a Parameter) in ``args``."""
    for i, x in enumerate(args):
        if isinstance(x, Tensor) and not isinstance(x, Parameter) and "Int" in str(x.dtype):
            return i
    raise AssertionError("no index argument")


class ListArgCell(nn.Cell):
    """``case.call`` with the argument at ``i`` given as a Python list (a constant of the graph)."""

    def __init__(self, case, args, i):
        super().__init__()
        self.call, self.args, self.i = case.call, args, i
        self.lst = to_np(args[i]).tolist()

    def construct(self):
        return self.call(self.args[:self.i] + (self.lst,) + self.args[self.i + 1:])


@pytest.mark.parametrize("op", [c.op for c in CASES])
def test_graph_mode_list_index_argument_names_the_op(op, rng):
    """Every op: a Python list where an index Tensor is expected, in a GRAPH_MODE Cell, is a TypeError at
    compile time naming the op and the argument (was, for most ops: AttributeError "'List' object has no
    attribute 'shape'" from inside the wrapper)."""
    import inspect

    case = BY_OP[op]
    with ms_mode("graph"), backend("cpu"):
        args = case.args(rng, tag="_list")
        i = _index_arg(args)
        name = list(inspect.signature(getattr(mk, op_name(case))).parameters)[i]
        before = _snapshot(args)
        with pytest.raises(TypeError, match=rf"^{op_name(case)}: argument '{name}': expected a mindspore.Tensor, "
                                            r"got a Python list"):
            ListArgCell(case, args, i)()
        for a, b in zip(_snapshot(args), before):
            assert_bits_equal(a, b, "nothing written")


class QuantSliceCell(nn.Cell):
    """A quantizing write (int8 cache, static scales) into a slice of a Parameter."""

    def __init__(self, merged):
        super().__init__()
        self.merged = merged
        self.kv = Parameter(Tensor(np.zeros((2, 2, 4, 8, 2, 16), np.int8)), name=f"quant_kv_{merged}")
        self.vc = Parameter(Tensor(np.zeros((4, 8, 2, 16), np.int8)), name=f"quant_vc_{merged}")

    def construct(self, k, s, sc):
        if self.merged:
            return mk.reshape_and_cache_merged(k, k, self.kv[0], s, k_scale=sc, v_scale=sc)
        return mk.reshape_and_cache(k, k, self.kv[0][0], self.vc, s, k_scale=sc, v_scale=sc)


@pytest.mark.parametrize("merged", [False, True])
def test_graph_mode_quantized_write_into_a_slice_names_the_public_op(merged):
    """The quantizing writes route to internal primitives (reshape_and_cache_quant): the refusal names the
    public op and its argument (kv_cache for the merged form), and nothing is written."""
    with ms_mode("graph"), backend("cpu"):
        net = QuantSliceCell(merged)
        op, arg = ("reshape_and_cache_merged", "kv_cache") if merged else ("reshape_and_cache", "key_cache")
        with pytest.raises(TypeError, match=rf"^{op}: argument '{arg}': " + NOT_A_PARAM):
            net(Tensor(np.ones((3, 2, 16), np.float16)), Tensor(np.array([0, 1, 2], np.int32)),
                Tensor(np.array([0.1], np.float32)))
        assert not to_np(net.kv).any() and not to_np(net.vc).any()


# -------------------------------------------------------- aliased caches of the quantizing writes
class QuantAliasCell(nn.Cell):
    """A quantizing write whose two written caches are one Parameter (graph mode: reaches the kernel)."""

    def __init__(self, op, tag):
        super().__init__()
        self.op = op
        i8 = lambda *s: Parameter(Tensor(np.zeros(s, np.int8)), name=f"qa_{op}_{tag}_{len(s)}")  # noqa: E731
        if op in ("concat_and_cache_mla", "rope_concat_and_cache_mla"):
            self.c = i8(4, 8, 16)
        elif op in ("reshape_and_cache_merged", "rope_reshape_and_cache_merged"):
            self.c = i8(2, 4, 8, 2, 16)
            self.sc = Parameter(Tensor(np.zeros((4, 8, 2, 1), np.float32)), name=f"qa_{op}_{tag}_sc")
        else:
            self.c = i8(4, 8, 2, 16)

    def construct(self, pos, q, k, cs, s, sc):
        c = self.c
        if self.op == "reshape_and_cache":
            return mk.reshape_and_cache(k, k, c, c, s, k_scale=sc, v_scale=sc)
        if self.op == "rope_reshape_and_cache":
            return mk.rope_reshape_and_cache(pos, q, k, k, cs, c, c, s, k_scale=sc, v_scale=sc)
        if self.op == "reshape_and_cache_merged":  # dynamic scales: one scale cache for both planes
            return mk.reshape_and_cache_merged(k, k, c, s, k_scale_cache=self.sc, v_scale_cache=self.sc)
        if self.op == "rope_reshape_and_cache_merged":
            return mk.rope_reshape_and_cache_merged(pos, q, k, k, cs, c, s, k_scale_cache=self.sc,
                                                    v_scale_cache=self.sc)
        flat = k.reshape(3, 32)[:, :16]
        if self.op == "concat_and_cache_mla":
            return mk.concat_and_cache_mla(flat, flat, c, c, s, kv_c_scale=sc, k_pe_scale=sc)
        return mk.rope_concat_and_cache_mla(pos, q, flat, flat, cs, c, c, s, kv_c_scale=sc, k_pe_scale=sc)


QUANT_ALIAS = {  # public op -> (later written argument, earlier one) in the message; one op per quantizing
    # kernel (reshape_and_cache_quant, rope_reshape_and_cache_quant with its merged name, the two MLA ones;
    # reshape_and_cache_merged and rope_reshape_and_cache are the same kernels, a graph compile each: CI time)
    "reshape_and_cache": ("value_cache", "key_cache"),
    "rope_reshape_and_cache_merged": ("v_scale_cache", "k_scale_cache"),
    "concat_and_cache_mla": ("k_pe_cache", "kv_c_cache"),
    "rope_concat_and_cache_mla": ("k_pe_cache", "kv_c_cache"),
}


@pytest.mark.parametrize("op", sorted(QUANT_ALIAS))
def test_graph_mode_quantized_write_aliased_names_the_public_op(op, rng):
    """The cpu launch-time alias refusal of a quantizing write names the public op the user called (was:
    'reshape_and_cache_quant' / '..._mla_quant', the internal kernel's name, for every quantizing op:
    MSKV_AOT_GUARD did not read the primitive's mskv_op_name), and nothing is written."""
    later, earlier = QUANT_ALIAS[op]
    with ms_mode("graph"), backend("cpu"):
        net = QuantAliasCell(op, "cpu")
        k = Tensor(rng.standard_normal((3, 2, 16)).astype(np.float16))
        q = Tensor(rng.standard_normal((3, 4, 16)).astype(np.float16))
        pos = Tensor(np.array([0, 1, 2], np.int32))
        inv = 1.0 / (10000 ** (np.arange(0, 16, 2) / 16))
        f = np.outer(np.arange(8), inv)
        cs = Tensor(np.concatenate([np.cos(f), np.sin(f)], axis=1).astype(np.float16))
        with pytest.raises(RuntimeError, match=rf"(?<![a-z_]){op}: argument '{later}': expected a distinct cache "
                                               rf"tensor .*got the same memory as '{earlier}'.*nothing was written"):
            net(pos, q, k, cs, Tensor(np.array([0, 9, 31], np.int32)), Tensor(np.array([0.1], np.float32)))
        assert not to_np(net.c).any()
