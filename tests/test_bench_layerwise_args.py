"""ms_kvcache.bench.layerwise's command line: counts that cannot describe a run are refused before anything runs."""
import pytest

from ms_kvcache.bench import layerwise


@pytest.mark.parametrize("argv", [["--layers", "0"], ["--layers", "-3"], ["--tokens", "0"], ["--tokens", "-16"],
                                  ["--tokens", "1"], ["--layers", "100000"], ["--tokens", "x"]])
def test_bad_counts_are_refused_before_any_measurement(argv, monkeypatch, capsys):
    def no_run(*a, **k):
        raise AssertionError("a measurement started")

    monkeypatch.setattr(layerwise, "run", no_run)
    monkeypatch.setattr(layerwise, "measure", no_run)
    with pytest.raises(SystemExit) as exc:
        layerwise.main(argv + ["--quick"])
    assert exc.value.code == 2
    assert "expected an int in" in capsys.readouterr().err
