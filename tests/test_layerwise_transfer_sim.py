"""ms_kvcache.LayerwiseTransfer on the sim backend: the AscendC transfer kernels through the emulation, one layer
per launch (L = 1 over a per-layer staging buffer, synchronous at issue), bit-identical to the synchronous op on
the same backend and to numpy, quantized caches included; a layer the AscendC tiling refuses is reported at the
next wait, naming the layer."""
import pytest

import ms_kvcache as mk
from ms_kvcache import sim
from _layerwise_ref import DSA, MERGED, MLA, SEPARATE, BlockCase, QuantCase, TokenCase, run_layerwise

pytestmark = pytest.mark.skipif(not mk._backend.backend_module("sim").available()[0],  # noqa: SLF001
                                reason="the AscendC emulation module ms_kvcache._sim is not built")


@pytest.fixture(autouse=True)
def _sim(monkeypatch):
    monkeypatch.delenv("MS_KVCACHE_CHECK_LAYERWISE", raising=False)
    mk.set_backend("sim")
    yield
    mk.set_backend("cpu")


@pytest.mark.parametrize("direction", ["d2h", "h2d"])
@pytest.mark.parametrize("fmt,layout,dtype", [(SEPARATE, "BNSD", "float16"), (MERGED, "BSND", "bfloat16"),
                                              (MLA, "BSND", "float32")], ids=lambda x: getattr(x, "name", x))
def test_token_transfer_matches_the_synchronous_op(rng, fmt, layout, dtype, direction):
    case = TokenCase(rng, fmt, layout, dtype, direction, L=2, nb=4, T=5, host_buffer=(dtype == "float16"))
    case.run_sync()
    lt = case.make()
    assert type(lt._engine).__module__ == "ms_kvcache._backends.sim"  # noqa: SLF001 - the emulated kernels run
    run_layerwise(lt, direction, 2)
    case.check()


@pytest.mark.parametrize("direction", ["d2h", "h2d"])
def test_block_transfer_with_staging_matches_the_synchronous_op(rng, direction):
    case = BlockCase(rng, SEPARATE, "BNSD", "float16", direction, L=2, nb=5, ids=(3, 0), staging=True)
    case.run_sync()
    run_layerwise(case.make(), direction, 2, wait_order=[1, 0])
    case.check()


@pytest.mark.parametrize("kind,fmt,layout", [("token", DSA, "BSND"), ("block", SEPARATE, "BSND")],
                         ids=["token-dsa", "block-separate"])
@pytest.mark.parametrize("direction", ["d2h", "h2d"])
def test_quantized_caches_with_scales(rng, kind, fmt, layout, direction):
    case = QuantCase(rng, kind, fmt, layout, direction, L=2, nb=4, T=4, ids=(2, 0))
    case.run_sync()
    run_layerwise(case.make(), direction, 2)
    case.check()


def test_a_layer_the_tiling_refuses_is_reported_at_the_wait(rng):
    """bfloat16 on Ascend310P3: the tiling refuses the layer's launch; the wait names layer 0, the later layer is
    not run and no cache changes."""
    prev = sim.get_soc()
    sim.set_soc("Ascend310P3")
    try:
        case = TokenCase(rng, SEPARATE, "BSND", "bfloat16", "h2d", L=2, nb=4, T=4)
        lt = case.make().start()
        with pytest.raises(RuntimeError, match=r"layer 0: .*(310P|bfloat16)"):
            lt.wait_layer(0)
        with pytest.raises(RuntimeError, match=r"layer 1: not run: layer 0 failed first"):
            lt.wait_layer(1)
        case.check(layers=[])
    finally:
        sim.set_soc(prev)
