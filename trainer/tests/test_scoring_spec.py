"""The spec's scoring field the experiment posts (docs/protocol/scoring.md §4, §6.4)."""

from pathlib import Path

import pytest

from tenzro_trainer import models
from tenzro_trainer.canon import content_hash
from tenzro_trainer.experiment import Experiment, scoring_field


def test_scoring_field_names_the_model_config_and_the_corpus(tmp_path: Path) -> None:
    e = Experiment(rpc="", workdir=tmp_path, scoring=True)
    corpus = b"a,b\n1.0,2.0\n"
    f = scoring_field(e, corpus)
    d = models.DEMO
    assert f["evaluator"] == "TimesFMScore"
    assert f["params"] == {
        "context_len": d.context_len,
        "horizon": d.horizon,
        "patch_len": d.patch_len,
        "d_model": d.d_model,
        "n_layers": d.n_layers,
        "n_heads": d.n_heads,
        "d_ff": d.d_ff,
    }
    assert f["corpus"] == content_hash(corpus).hex()
    assert f["rate_bps"] == 10000 and f["batch"] == 16 and "test" not in f
    e.scoring_test = "own_beats_control"
    assert scoring_field(e, corpus)["test"] == "own_beats_control"


def test_scoring_field_refuses_other_families(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        scoring_field(Experiment(rpc="", workdir=tmp_path, family="moirai"), b"")


def test_scoring_field_granite_ttm(tmp_path: Path) -> None:
    """A granite-ttm experiment is scored by GraniteTTMScore with the adapter's configuration (TINY under the
    metadata), the six parameters the evaluator's manifest takes."""
    from tenzro_trainer.models.granite_ttm import TINY

    e = Experiment(rpc="", workdir=tmp_path, family="granite-ttm", metadata={"d_model": 32, "stride": 2}, scoring=True)
    f = scoring_field(e, b"a\n1.0\n")
    assert f["evaluator"] == "GraniteTTMScore"
    assert f["params"] == {**TINY, "d_model": 32}


def test_scoring_field_chronos_bolt(tmp_path: Path) -> None:
    """A chronos-bolt experiment is scored by ChronosBoltScore with the adapter's configuration (TINY under the
    metadata), the nine parameters the evaluator's manifest takes."""
    from tenzro_trainer.models.chronos_bolt import TINY

    e = Experiment(
        rpc="", workdir=tmp_path, family="Chronos_Bolt", metadata={"d_model": 48, "num_heads": 3}, scoring=True
    )
    f = scoring_field(e, b"a\n1.0\n")
    assert f["evaluator"] == "ChronosBoltScore"
    assert f["params"] == {**TINY, "d_model": 48, "num_heads": 3}
