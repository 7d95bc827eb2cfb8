"""GPU placement rules, tested on logic here; the `gpu` test runs only on a machine with a GPU."""

from __future__ import annotations

import pytest

from hpo.config import parse_sweep
from hpo.trial.driver import placement
from hpo.trial.worker import CPU_ALLREDUCE_GROUPS, allreduce_groups, cycle_time_ms, gpu_for_rank, tf_threads
from tests.conftest import base_sweep


@pytest.mark.parametrize(
    ("local_rank", "visible", "expected"),
    [(0, 0, None), (3, 0, None), (0, 1, 0), (0, 4, 0), (3, 4, 3), (1, 2, 1)],
)
def test_each_local_rank_takes_its_own_gpu(local_rank, visible, expected):
    assert gpu_for_rank(local_rank, visible) == expected


@pytest.mark.parametrize(("local_rank", "visible"), [(1, 1), (5, 4), (2, 2)])
def test_a_rank_without_a_gpu_of_its_own_fails_its_trial_instead_of_sharing_one(local_rank, visible):
    """Two ranks on one GPU: NCCL refuses them ("Duplicate GPU detected") once the whole trial has started."""
    with pytest.raises(RuntimeError) as exc:
        gpu_for_rank(local_rank, visible)
    assert str(exc.value) == (
        f"local rank {local_rank} has no GPU of its own: this process sees {visible} GPU(s) for at least "
        f"{local_rank + 1} ranks on this node (trial.gpus_per_worker must be whole when trial.workers > 1)"
    )


def test_a_one_worker_trial_may_take_a_fraction_of_a_gpu_and_trials_share_it():
    pgf = placement(spec_for(workers=1, cpus_per_worker=2, gpus_per_worker=0.25))
    assert pgf.bundles == [{"CPU": 2.0, "GPU": 0.25}]
    assert pgf.required_resources == {"CPU": 2.0, "GPU": 0.25}  # four such trials fit one GPU
    assert gpu_for_rank(0, 1) == 0  # the one device its process sees


@pytest.mark.parametrize("gpus", [0.5, 0.25, 0.99])
def test_a_fraction_of_a_gpu_for_several_workers_is_refused_in_one_line(write_sweep, tmp_path, gpus):
    from tests.conftest import hpo_cli

    path = write_sweep(base_sweep(trial={"workers": 2, "gpus_per_worker": gpus}))
    proc = hpo_cli("validate", str(path), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout
    assert proc.stderr.strip() == (
        f"error: {path}: trial.gpus_per_worker: {gpus:g} of a GPU for each of 2 workers: two ranks of one trial "
        "could land on one GPU, which NCCL refuses; use gpus_per_worker: 1 (a GPU per rank), or workers: 1 to "
        "let trials share GPUs"
    )


@pytest.mark.parametrize(("workers", "gpus"), [(1, 0.5), (1, 0.1), (2, 1), (4, 1), (2, 2), (3, 0)])
def test_whole_gpus_per_rank_or_a_fraction_for_one_worker_are_accepted(workers, gpus):
    config = parse_sweep(base_sweep(trial={"workers": workers, "gpus_per_worker": gpus}))
    assert (config.trial.workers, config.trial.gpus_per_worker) == (workers, gpus)


@pytest.mark.parametrize(("cpus", "expected"), [(0.5, (1, 1)), (1, (1, 1)), (2, (2, 2)), (3.5, (3, 3))])
def test_worker_threads_follow_reserved_cpus(cpus, expected):
    assert tf_threads(cpus) == expected


def test_cpu_ranks_send_a_step_s_gradients_as_one_group_gpu_ranks_keep_horovods_default():
    assert CPU_ALLREDUCE_GROUPS == 1
    assert allreduce_groups(0) == 1
    assert allreduce_groups(0.5) == 0 and allreduce_groups(1) == 0


def test_cpu_ranks_cycle_rarely_when_idle_gpu_ranks_keep_a_short_cycle():
    assert cycle_time_ms(0) == 50
    assert cycle_time_ms(0.5) == cycle_time_ms(1) == 5


def spec_for(**trial):
    from hpo.data import DatasetInfo
    from hpo.trial.spec import TrialSpec

    info = DatasetInfo("file:///x", 96, (4,) * 24, 8, 3, True)
    return TrialSpec.from_config(parse_sweep(base_sweep(trial=trial)), info, info)


def test_placement_group_has_a_driver_bundle_and_one_bundle_per_worker():
    pgf = placement(spec_for(workers=4, cpus_per_worker=2, gpus_per_worker=1))
    # Ray keeps the empty driver bundle as a flag and lists the worker bundles: a whole GPU per rank.
    assert pgf.head_bundle_is_empty and pgf.bundles == [{"CPU": 2.0, "GPU": 1.0}] * 4
    assert pgf.strategy == "PACK"
    assert pgf.required_resources == {"CPU": 8.0, "GPU": 4.0}


def test_cpu_trials_ask_for_no_gpu():
    pgf = placement(spec_for(workers=2, cpus_per_worker=0.5))
    assert pgf.head_bundle_is_empty and pgf.bundles == [{"CPU": 0.5}, {"CPU": 0.5}]


@pytest.mark.gpu
def test_rank_sees_only_its_gpu_with_memory_growth():
    import tensorflow as tf

    from hpo import _env

    _env.apply()  # TF_USE_LEGACY_KERAS before TensorFlow loads
    from hpo.trial.worker import _pin_devices

    gpus = tf.config.list_physical_devices("GPU")
    assert gpus, "this test needs a GPU"
    _pin_devices(tf, local_rank=0, gpus_per_worker=1)
    assert tf.config.get_visible_devices("GPU") == [gpus[0]]
    assert tf.config.experimental.get_memory_growth(gpus[0])
