"""hpo repeat: the repeat sweep's settings, and the errors before anything runs."""

from __future__ import annotations

import pytest

from hpo.config import SweepConfig
from hpo.errors import ConfigError
from hpo.repeats import SEED_OFFSET, load_config, repeat_config, save_config
from hpo.storage import Storage
from tests.conftest import base_sweep, hpo_cli


def _first(**search):
    return SweepConfig.model_validate(base_sweep(
        name="first", search={"algorithm": "optuna-tpe", "num_samples": 20, "seed": 3, "time_budget_s": 60,
                              **search},
        scheduler={"type": "asha"}, objective={"metric": "val_accuracy", "goal": 0.9}))


def test_repeat_sweep_runs_the_top_configurations_to_their_end_with_a_new_seed():
    config = repeat_config(_first(), top=3, repeats=4)
    assert config.name == "first-repeat" and config.search.repeat_of == "first"
    assert (config.search.num_samples, config.search.repeats) == (3, 4)
    assert config.search.seed == 3 + SEED_OFFSET and config.search.time_budget_s is None
    assert config.scheduler.type == "fifo" and config.objective.goal is None
    assert config.space == _first().space and repeat_config(_first(), 1, 2, name="again").name == "again"


def test_a_grid_sweep_is_repeated_from_a_queue_of_its_values():
    first = SweepConfig.model_validate(base_sweep(
        name="g", search={"algorithm": "grid"}, space={"units": {"type": "grid", "values": [8, 16]}}))
    config = repeat_config(first, top=2, repeats=2)
    assert config.search.algorithm == "random" and config.space["units"].choices == [8, 16]


@pytest.mark.parametrize(("top", "repeats", "line"), [
    (0, 3, "--top: 0 is not a positive whole number; use e.g. 3"),
    (2, 1, "--repeats: 1 gives no spread to compare; use 3 or more"),
])
def test_bad_top_or_repeats_is_one_line(top, repeats, line):
    with pytest.raises(ConfigError) as err:
        repeat_config(_first(), top, repeats)
    assert str(err.value) == line


def test_settings_round_trip_through_the_state_directory(tmp_path):
    storage = Storage.parse(tmp_path / "runs")
    save_config(storage.state_dir("first"), _first())
    assert load_config(storage, "first") == _first()


def test_unknown_sweep_is_one_line_exit_2(tmp_path):
    proc = hpo_cli("repeat", "nosuch", "--storage", str(tmp_path / "runs"), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "no summary for sweep 'nosuch'" in proc.stderr
