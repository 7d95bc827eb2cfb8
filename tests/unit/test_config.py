from __future__ import annotations

import pytest
from pydantic import ValidationError

from hpo.config import SweepConfig, load_sweep, parse_sweep
from hpo.errors import ConfigError
from tests.conftest import ROOT, base_sweep


def error_of(data, source="s.yaml") -> str:
    with pytest.raises(ConfigError) as info:
        parse_sweep(data, source)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_default_sweep_file_parses_with_defaults_filled_in():
    config = load_sweep(ROOT / "search_spaces" / "digits_mlp.yaml")
    assert isinstance(config, SweepConfig)
    assert config.name == "digits-mlp"
    assert config.search.algorithm == "optuna-tpe" and config.scheduler.type == "asha"
    assert config.trial.workers == 2
    assert config.trial.batch_size_per_worker == 32
    assert config.loss == "sparse_categorical_crossentropy" and config.metrics == ["accuracy"]


def test_overrides_replace_dotted_keys():
    config = load_sweep(ROOT / "search_spaces" / "digits_mlp.yaml", {"search.num_samples": 3, "name": "x"})
    assert config.search.num_samples == 3 and config.name == "x"


def test_unknown_top_level_key():
    assert error_of(base_sweep(epochs=3)) == "s.yaml: epochs: unknown key; remove it or check its spelling"


def test_unknown_nested_key():
    msg = error_of(base_sweep(trial={"wokers": 2}))
    assert msg == "s.yaml: trial.wokers: unknown key; remove it or check its spelling"


def test_wrong_type():
    msg = error_of(base_sweep(trial={"workers": "two"}))
    assert msg == "s.yaml: trial.workers: 'two' is text, not a whole number; write a whole number without quotes"
    msg = error_of(base_sweep(trial={"workers": [2]}))
    assert msg.startswith("s.yaml: trial.workers: ") and "[2]" in msg and "fix the value" in msg


def test_out_of_range():
    msg = error_of(base_sweep(trial={"workers": 0}))
    assert msg.startswith("s.yaml: trial.workers: 0 is out of range") and msg.endswith("change it")


def test_low_greater_than_high():
    msg = error_of(base_sweep(space={"lr": {"type": "float", "low": 0.1, "high": 0.01}}))
    assert msg == "s.yaml: space.lr: low (0.1) must be < high (0.01); swap them"


def test_log_with_nonpositive_low():
    msg = error_of(base_sweep(space={"lr": {"type": "float", "low": 0, "high": 1, "log": True}}))
    assert msg == "s.yaml: space.lr: log scale needs low > 0 (got 0); raise low or set log: false"


def test_unknown_algorithm():
    msg = error_of(base_sweep(search={"algorithm": "bohb"}))
    assert msg.startswith("s.yaml: search.algorithm: 'bohb' is not allowed; use one of ")
    assert "'optuna-tpe'" in msg


def test_unknown_scheduler():
    msg = error_of(base_sweep(scheduler={"type": "pbt"}))
    assert msg.startswith("s.yaml: scheduler.type: 'pbt' is not allowed; use one of ")


def test_missing_required_key():
    data = base_sweep()
    del data["model"]
    assert error_of(data) == "s.yaml: model: required key is missing; add it"


def test_bad_model_reference():
    msg = error_of(base_sweep(model="hpo.models.mlp.build"))
    assert msg == (
        "s.yaml: model: 'hpo.models.mlp.build' is not 'package.module:function'; write e.g. hpo.models.mlp:build"
    )


def test_objective_metric_must_be_logged():
    msg = error_of(base_sweep(objective={"metric": "val_auc", "mode": "max"}))
    assert msg.startswith("s.yaml: objective.metric: 'val_auc' is not logged by the trial")
    assert "val_accuracy" in msg


def test_grid_parameters_need_grid_search():
    msg = error_of(base_sweep(space={"units": {"type": "grid", "values": [8, 16]}}))
    assert msg == ("s.yaml: space.units: grid parameters need search.algorithm: grid (not optuna-tpe); "
                   "set it, or make the parameter categorical")


def test_grid_without_num_samples_runs_each_point_once():
    space = {"units": {"type": "grid", "values": [8, 16]}, "opt": {"type": "categorical", "choices": ["a", "b", "c"]}}
    def samples(search, space):
        return parse_sweep(base_sweep(search=search, space=space)).search.num_samples

    assert samples({"algorithm": "grid"}, space) == 6
    assert samples({"algorithm": "grid", "num_samples": 12}, space) == 12  # each point twice
    assert samples({"algorithm": "grid"}, {"units": space["units"]}) == 2


def test_num_samples_smaller_than_grid():
    space = {"units": {"type": "grid", "values": [8, 16, 32]}, "opt": {"type": "categorical", "choices": ["a", "b"]}}
    msg = error_of(base_sweep(search={"algorithm": "grid", "num_samples": 4}, space=space))
    assert msg == ("s.yaml: search.num_samples: 4 is not a multiple of the grid's 6 points; "
                   "use 6 (each point once) or a multiple of it")
    assert parse_sweep(base_sweep(search={"algorithm": "grid", "num_samples": 12}, space=space)).grid_size == 6


def test_conditions_must_name_a_categorical_choice():
    space = {
        "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
        "momentum": {"type": "float", "low": 0.0, "high": 0.9, "when": {"optimizer": "rmsprop"}},
    }
    msg = error_of(base_sweep(space=space))
    assert msg == (
        "s.yaml: space.momentum.when: 'rmsprop' is not a choice of 'optimizer' (['adam', 'sgd']); use one of them"
    )
    space["momentum"]["when"] = {"units": 3}
    assert "'units' is not a categorical parameter of the space" in error_of(base_sweep(space=space))


def test_categorical_needs_choices():
    msg = error_of(base_sweep(space={"opt": {"type": "categorical"}}))
    assert msg == "s.yaml: space.opt: a categorical parameter needs a non-empty list under choices; add it"


def test_empty_space():
    assert error_of(base_sweep(space={})) == "s.yaml: space: must not be empty; add at least one entry"


def test_data_url_scheme():
    msg = error_of(base_sweep(data={"train": "/data/x"}))
    assert msg.startswith("s.yaml: data.train: '/data/x' is not a dataset URL")


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=r"nope.yaml: \(file\): no such file; check the path"):
        load_sweep(tmp_path / "nope.yaml")


def test_invalid_yaml(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: line \d+: not valid YAML"):
        load_sweep(path)


def test_config_is_frozen():
    config = parse_sweep(base_sweep())
    with pytest.raises(ValidationError):
        config.name = "other"  # type: ignore[misc]


def test_a_model_module_that_fails_to_import_is_a_config_error_with_file_and_line(tmp_path, monkeypatch):
    from hpo.trial.spec import resolve_model

    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken_syntax_model.py").write_text("def build(params,\n    return 1\n")
    (tmp_path / "raising_model.py").write_text("import os\n\nVALUE = 1 / 0\n")
    with pytest.raises(ConfigError) as err:
        resolve_model("broken_syntax_model:build", "sweep.yaml")
    assert str(err.value).startswith("sweep.yaml: model: ") and "broken_syntax_model.py:1: syntax error" in str(
        err.value) and str(err.value).endswith("; fix the model module")
    with pytest.raises(ConfigError) as err:
        resolve_model("raising_model:build", "sweep.yaml")
    assert str(err.value) == (
        f"sweep.yaml: model: importing 'raising_model' raised ZeroDivisionError: division by zero at "
        f"{tmp_path / 'raising_model.py'}:3; fix the model module"
    )


def test_momentum_needs_an_optimizer_that_takes_it():
    """Searched momentum with only adam would be sampled and logged but never reach the trainer."""
    space = {"learning_rate": {"type": "float", "low": 0.001, "high": 0.1}, "momentum": {"type": "float", "low": 0.5,
                                                                                      "high": 0.99}}
    assert error_of(base_sweep(space=space)) == (
        "s.yaml: space.momentum: no trial would use it: only rmsprop and sgd take momentum and the optimizer is "
        "adam; search space.optimizer with sgd, or remove momentum"
    )
    space["optimizer"] = {"type": "categorical", "choices": ["adam", "adagrad"]}
    assert "the optimizer is adam or adagrad;" in error_of(base_sweep(space=space))
    space["optimizer"]["choices"] = ["adam", "sgd"]
    space["momentum"]["when"] = {"optimizer": "sgd"}
    assert parse_sweep(base_sweep(space=space)).space["momentum"].high == 0.99
    assert parse_sweep(base_sweep(space={"momentum": space["momentum"] | {"when": None}},
                                  trial={"optimizer": "sgd"})).trial.optimizer == "sgd"
