"""The ascend backend's layer-wise engine (ms_kvcache/_backends/ascend_layerwise.py) without an NPU: the stand-in
libascendcl.so of tests/fake_acl (aclrtMemcpyAsync / aclrtMemcpy2dAsync are memmoves, logged), a stand-in of
``mindspore.runtime`` (Stream, Event, StreamCtx, current_stream: logged in the same log) and the cpu backend's
kernel as the layer's kernel. It checks what can be checked here: the staging layout and the host copies give
exactly the synchronous op's bytes (every format, both directions, quantized caches, token and block transfers), the
order of copies, kernels, events and stream waits per layer, that wait_layer does not block the host, and that a
refused copy fails its layer. Nothing here says anything about CANN or an NPU."""
import ctypes
import json

import numpy as np
import pytest

import ms_kvcache as mk
from ms_kvcache._backends import _acl, ascend, ascend_layerwise
from ms_kvcache._backends import cpu as cpu_backend_mod
from ms_kvcache.ops import layerwise_transfer as LT
from _layerwise_ref import DSA, MERGED, MLA, SEPARATE, BlockCase, QuantCase, TokenCase, run_layerwise
from test_ascend_backend import _build_fake


@pytest.fixture(scope="module")
def fake_lib(tmp_path_factory):
    return _build_fake(tmp_path_factory, batch=False)


@pytest.fixture
def acl(fake_lib, monkeypatch):
    monkeypatch.setenv("MS_KVCACHE_LIBASCENDCL", str(fake_lib))
    _acl.reset()
    rt = _acl.load()
    rt.lib.fake_log_get.restype = ctypes.c_char_p
    rt.lib.fake_log_append.argtypes = [ctypes.c_char_p]
    rt.lib.fake_log_clear()
    yield rt
    _acl.reset()


def log(acl, **entry):
    acl.lib.fake_log_append(json.dumps(entry).encode())


def events(acl):
    return [json.loads(x) for x in acl.lib.fake_log_get().decode().splitlines() if x.strip()]


class FakeEvent:
    n = 0

    def __init__(self, acl):
        FakeEvent.n += 1
        self.id, self.acl = FakeEvent.n, acl

    def record(self, stream):
        log(self.acl, ev="record", stream=stream.name, event=self.id)

    def query(self):
        return True

    def synchronize(self):
        log(self.acl, ev="event_sync", event=self.id)


class FakeStream:
    def __init__(self, acl, name, ptr):
        self.acl, self.name, self.ptr = acl, name, ptr

    def stream_ptr(self):
        return self.ptr

    def record_event(self, event=None):
        ev = event or FakeEvent(self.acl)
        ev.record(self)
        return ev

    def wait_event(self, ev):
        log(self.acl, ev="wait_event", stream=self.name, event=ev.id)

    def synchronize(self):
        log(self.acl, ev="stream_sync", stream=self.name)


class FakeRuntime:
    """The part of mindspore.runtime the engine uses."""

    SIDE = 0x5100

    def __init__(self, acl):
        self.acl = acl
        self.cur = self.main = FakeStream(acl, "main", 0x77)

    def Stream(self):  # noqa: N802 - mindspore.runtime.Stream
        return FakeStream(self.acl, "side", self.SIDE)

    def current_stream(self):
        return self.cur

    def StreamCtx(self, stream):  # noqa: N802
        rt = self

        class Ctx:
            def __enter__(self):
                self.prev, rt.cur = rt.cur, stream

            def __exit__(self, *exc):
                rt.cur = self.prev

        return Ctx()


@pytest.fixture
def engine_on_fakes(acl, monkeypatch):
    """LayerwiseTransfer objects built now get the ascend engine over the stand-ins (the kernel of a layer is the
    cpu backend's, launched by the StagedPlan as on an NPU)."""
    rt = FakeRuntime(acl)
    made = []

    def wait_launched():
        cpu_backend_mod.settle_pipeline()
        log(acl, ev="wait_launched")

    def factory(call):
        kind = "token" if call.spec.name.startswith("multi_layer_kv") else "block"
        staging = call.args[1] if kind == "block" and int(np.prod(call.args[1].shape)) > 0 else None
        plan = LT.StagedPlan(kind, call, staging)
        real = plan.launch

        def launch(layer, stg):
            log(acl, ev="kernel", layer=layer, stream=rt.current_stream().name)
            real(layer, stg)

        plan.launch = launch
        eng = ascend_layerwise.LayerwiseEngine(
            plan, runtime=rt, acl=acl, wait_launched=wait_launched,
            alloc=lambda shape, dtype: mk.alloc_host_buffer(shape, dtype, pinned=False))
        made.append(eng)
        return eng

    monkeypatch.setattr(cpu_backend_mod, "layerwise_engine", factory)
    mk.set_backend("cpu")
    return made


def _ids(x):
    return getattr(x, "name", x)


@pytest.mark.parametrize("direction", ["d2h", "h2d"])
@pytest.mark.parametrize("fmt,layout,dtype", [(SEPARATE, "BNSD", "float16"), (MERGED, "BSND", "bfloat16"),
                                              (MLA, "BSND", "float32"), (DSA, "BSND", "int8")], ids=_ids)
def test_token_layers_match_the_synchronous_op(rng, engine_on_fakes, acl, fmt, layout, dtype, direction):
    case = TokenCase(rng, fmt, layout, dtype, direction, L=3)
    case.run_sync()
    run_layerwise(case.make(), direction, 3)
    case.check()
    copies = [e for e in events(acl) if e["ev"] == "memcpy_async"]
    planes = 3 if fmt == DSA else 2
    assert len(copies) == 3 * planes  # one aclrtMemcpyAsync per plane and layer
    assert {c["stream"] for c in copies} == {FakeRuntime.SIDE}
    assert {c["kind"] for c in copies} == {_acl.MEMCPY_DEVICE_TO_HOST if direction == "d2h" else
                                           _acl.MEMCPY_HOST_TO_DEVICE}


@pytest.mark.parametrize("direction", ["d2h", "h2d"])
@pytest.mark.parametrize("fmt,layout", [(SEPARATE, "BNSD"), (MLA, "BSND")], ids=_ids)
def test_block_layers_use_2d_copies_and_match(rng, engine_on_fakes, acl, fmt, layout, direction):
    case = BlockCase(rng, fmt, layout, "float16", direction, L=3, staging=(fmt == SEPARATE))
    case.run_sync()
    run_layerwise(case.make(), direction, 3)
    case.check()
    copies = [e for e in events(acl) if e["ev"] == "memcpy2d_async"]
    assert len(copies) == 3 * 2 and not [e for e in events(acl) if e["ev"] == "memcpy_async"]
    row = case.geo.hidden[0] * 2
    first = copies[0]
    host_pitch = 3 * row  # L rows of a token apart on the host, consecutive in the staging tensor
    assert first["width"] == row and first["height"] == 4 * case.geo.bs
    assert (first["spitch"], first["dpitch"]) == ((host_pitch, row) if direction == "h2d" else (row, host_pitch))


def test_without_2d_copies_rows_go_one_by_one(rng, engine_on_fakes, acl, monkeypatch):
    case = BlockCase(rng, SEPARATE, "BSND", "float16", "h2d", L=2)
    case.run_sync()
    lt = case.make()
    lt._engine._memcpy2d = None  # noqa: SLF001 - a runtime without aclrtMemcpy2dAsync
    run_layerwise(lt, "h2d", 2)
    case.check()
    assert len([e for e in events(acl) if e["ev"] == "memcpy_async"]) == 2 * 2 * 4 * case.geo.bs


@pytest.mark.parametrize("kind,fmt", [("token", SEPARATE), ("block", MLA)])
@pytest.mark.parametrize("direction", ["d2h", "h2d"])
def test_quantized_layers_match(rng, engine_on_fakes, kind, fmt, direction):
    case = QuantCase(rng, kind, fmt, "BSND", direction, L=3)
    case.run_sync()
    run_layerwise(case.make(), direction, 3)
    case.check()


def _order(acl):
    keep = ("memcpy_async", "kernel", "record", "wait_event", "event_sync", "stream_sync", "wait_launched")
    out = []
    for e in events(acl):
        if e["ev"] not in keep:
            continue
        if e["ev"] == "memcpy_async":
            out.append(("copy", e["kind"]))
        elif e["ev"] == "kernel":
            out.append(("kernel", e["layer"], e["stream"]))
        elif e["ev"] in ("record", "wait_event"):
            out.append((e["ev"], e["stream"]))
        else:
            out.append((e["ev"],))
    return out


def test_h2d_order_copies_kernel_event_then_the_compute_stream_waits(rng, engine_on_fakes, acl):
    case = TokenCase(rng, MLA, "BSND", "float16", "h2d", L=2)
    lt = case.make().start()
    h2d = ("copy", _acl.MEMCPY_HOST_TO_DEVICE)
    per_layer = [("wait_launched",), h2d, h2d, ("kernel", 0, "side"), ("wait_launched",), ("record", "side")]
    assert _order(acl) == per_layer + [x if x[0] != "kernel" else ("kernel", 1, "side") for x in per_layer]
    acl.lib.fake_log_clear()
    lt.wait_layer(1)  # the compute stream waits for layer 1's event: the host does not block
    assert _order(acl) == [("wait_event", "main")]
    acl.lib.fake_log_clear()
    lt.close()
    assert _order(acl) == [("stream_sync",)]  # the drop waits for the side stream


def test_h2d_wait_waits_on_the_host_for_the_copies_out_of_the_host_buffer(rng, engine_on_fakes, acl):
    """wait() ends the round, after which the host buffer may be rewritten (e.g. the next request's KV read into it)
    and the object run again: the side stream's copies out of that buffer must have run, so the host waits for the
    last layer's event as for d2h (the old code only made the compute stream wait: a numpy write after wait() could
    race the aclrtMemcpyAsync still queued)."""
    case = TokenCase(rng, SEPARATE, "BSND", "float16", "h2d", L=2)
    lt = case.make().start()
    acl.lib.fake_log_clear()
    lt.wait()
    assert _order(acl) == [("wait_event", "main"), ("wait_event", "main"), ("event_sync",)]
    lt.close()


def test_d2h_order_waits_for_the_forward_then_copies_out(rng, engine_on_fakes, acl):
    case = TokenCase(rng, SEPARATE, "BSND", "float16", "d2h", L=2)
    case.run_sync()
    lt = case.make()
    lt.save_layer(1)
    d2h = ("copy", _acl.MEMCPY_DEVICE_TO_HOST)
    assert _order(acl) == [("wait_launched",), ("record", "main"), ("wait_event", "side"), ("kernel", 1, "side"),
                           ("wait_launched",), d2h, d2h, ("record", "side")]
    lt.save_layer(0)
    acl.lib.fake_log_clear()
    lt.wait()  # every event on the compute stream, and the host waits for the last one (the host side is complete)
    assert _order(acl) == [("wait_event", "main"), ("wait_event", "main"), ("event_sync",)]
    case.check()


def test_a_refused_copy_fails_its_layer(rng, engine_on_fakes, acl, monkeypatch):
    case = TokenCase(rng, SEPARATE, "BSND", "float16", "h2d", L=3)
    case.run_sync()
    lt = case.make()
    real = acl.memcpy_async
    calls = []

    def refuse_layer_1(*a):
        calls.append(a)
        if len(calls) == 3:  # layer 1's first copy
            raise _acl.AclError("aclrtMemcpyAsync", 107000, "stand-in refusal")
        return real(*a)

    monkeypatch.setattr(acl, "memcpy_async", refuse_layer_1)
    lt.start()
    lt.wait_layer(0)
    with pytest.raises(RuntimeError, match=r"layer 1: aclrtMemcpyAsync failed with aclError 107000"):
        lt.wait_layer(1)
    with pytest.raises(RuntimeError, match=r"layer 2: not run: layer 1 failed first"):
        lt.wait_layer(2)
    case.check(layers=[0])


def test_the_ascend_backend_module_builds_this_engine(monkeypatch):
    got = []
    monkeypatch.setattr(ascend_layerwise, "LayerwiseEngine", lambda plan: got.append(plan) or "engine")
    assert ascend.layerwise_engine("plan") == "engine" and got == ["plan"]
