"""One sweep's MLflow tracking, start to end: the parent run, the per-trial nesting callback, the final close.

:class:`MlflowTracker` is the MLflow :class:`~hpo.tracking.tracker.Tracker`, registered as ``mlflow`` in
:data:`hpo.tracking.kinds.TRACKERS`.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from hpo.config import SweepConfig
from hpo.config.tracking_uri import masked
from hpo.objective import configuration_key
from hpo.sweep_summary import Goal, Statistics, SweepSummary
from hpo.tracking import best_model
from hpo.tracking.nesting import MlflowNesting
from hpo.tracking.outbox import SPOOL_NAME, update_summary
from hpo.tracking.runs import (
    SweepRun,
    close_lost_runs,
    finite,
    git_tags,
    log_sweep_file,
    resume_sweep_run,
    start_sweep_run,
    trial_run_ids,
)
from hpo.tracking.tracker import TrackerStart
from hpo.tracking.uri import is_local, normalize_uri
from hpo.trial.protocol import TrialRow

logger = logging.getLogger(__name__)

#: Driver-side state of a sweep (its parent run), in ``STORAGE/NAME``; a resume reads it back.
STATE_FILE = "hpo_state.json"

#: Sweeps of at least this many trials send their MLflow writes from a process of their own
#: (:mod:`hpo.tracking.writer`): its start (~2.5 CPU seconds) pays off after about a hundred trials.
WRITER_PROCESS_FROM_TRIALS = 100


class MlflowTracker:
    """A parent MLflow run per sweep and a nested run per trial, all written through one outbox.

    Args:
        start: The sweep, its file, directories, resume flag, model sample and storage.
    """

    def __init__(self, start: TrackerStart) -> None:
        config, sweep_dir = start.config, start.sweep_dir
        self.config = config
        self.storage = start.storage
        self.sweep_dir = sweep_dir
        self.uri = normalize_uri(config.tracking.mlflow_uri)
        self.sample = start.sample
        state = sweep_dir / STATE_FILE
        if start.resume:
            self.run = resume_sweep_run(SweepRun(**json.loads(state.read_text())["mlflow"]))
        else:
            self.run = self._start(start.source, start.artifact_root)
            sweep_dir.mkdir(parents=True, exist_ok=True)
            state.write_text(json.dumps({"mlflow": self.run.__dict__}))
        self.resumed = start.resume
        self.callback = MlflowNesting(
            self.run, config.objective.metric, config.objective.mode, config.name, sweep_dir / SPOOL_NAME,
            resume=start.resume, writer_process=config.search.num_samples >= WRITER_PROCESS_FROM_TRIALS,
        )
        self.outbox = self.callback.outbox
        start_writer = getattr(self.outbox, "start", None)
        if start_writer is not None:  # the writer process imports MLflow while Ray and Tune start
            start_writer()

    @staticmethod
    def resumable(sweep_dir: Path) -> bool:
        """True if ``sweep_dir`` holds the state of a sweep started before."""
        return (sweep_dir / STATE_FILE).is_file()

    def _start(self, source: str, artifact_root: Path) -> SweepRun:
        config = self.config
        run = start_sweep_run(
            self.uri,
            config.tracking.experiment or config.name,
            config.name,
            params=flat_params(config),
            tags={
                "hpo.sweep_file": source,
                "hpo.searcher": config.search.algorithm,
                "hpo.scheduler": config.scheduler.type,
                "hpo.objective": f"{config.objective.metric} ({config.objective.mode})",
                **git_tags(Path.cwd()),
                **({"hpo.repeat_of": config.search.repeat_of} if config.search.repeat_of else {}),
            },
            artifact_location=artifact_root.as_uri() if is_local(self.uri) else None,
        )
        sweep_file = Path(source) if not source.startswith("<") else None
        log_sweep_file(run, sweep_file, config_yaml(config))
        return run

    def summary_section(self) -> dict[str, Any]:
        """``{uri, experiment_id, parent_run_id}`` for ``summary.json``."""
        return {"uri": self.uri, "experiment_id": self.run.experiment_id, "parent_run_id": self.run.parent_run_id}

    def run_ids(self) -> dict[str, str]:
        """Trial id → nested run id, including runs of an earlier attempt of a resumed sweep.

        A new sweep knows every run it created (no store query); a resumed one reads its runs once more.
        """
        if not self.resumed:
            return self.callback.run_ids
        return {} if self.outbox.down else trial_run_ids(self.run)

    def finish(
        self, rows: list[TrialRow], best: TrialRow | None, goal: Goal | None, summary: SweepSummary,
        report: Path | None = None,
    ) -> int:
        """Closes lost runs, logs and registers the best model, logs the final figures and report, closes the parent.

        Returns:
            MLflow writes still waiting in the spool (the server was unreachable).
        """
        self.callback.flush()
        if self.resumed and not self.outbox.down:  # close the runs of trials the crash took away
            close_lost_runs(self.run, set(self.run_ids()) - {r.trial_id for r in rows})
        self._close_parent(rows, best, goal, summary.statistics)
        pending = self.outbox.flush() if self.outbox.down else 0  # sends what was spooled, if the server is back
        if report is not None and not self.outbox.down:
            self._log_report(report)
        update_summary(summary, self.outbox, pending)
        self._close_writer()
        return pending

    def _log_report(self, report: Path) -> None:
        """Logs the HTML report on the parent run when the server is up; never spooled, never fatal.

        It is a copy of ``STATE/NAME/report.html``, and ``hpo report -o`` draws it again.
        """
        try:
            self.outbox.client.log_artifact(self.outbox.run_ids["sweep"], str(report))
        except Exception as exc:  # noqa: BLE001 - the results are logged; the page is a convenience
            logger.warning("report not logged to MLflow (%s: %s); it is in %s", type(exc).__name__, exc, report)

    def log_progress(self, metrics: dict[str, float], step: int) -> None:
        """Logs progress figures on the parent run at ``step`` (the forecast: seconds since the start)."""
        now = int(time.time() * 1000)
        self.callback.queue("sweep", metrics=[(k, float(v), now, step) for k, v in metrics.items() if finite(v)])

    def mark_interrupted(self) -> None:
        """Ctrl-C or SIGTERM is stopping the sweep: trials Tune stops now stay open for :meth:`interrupt`."""
        self.callback.mark_interrupted()

    def open_trials(self) -> list[str]:
        """Trials whose nested run was started (or reopened) and not closed."""
        return self.callback.open_trials()

    def unsent_note(self, pending: int) -> str:
        """Where ``pending`` unsent writes are kept and the command that sends them."""
        return (
            f"mlflow: {pending} writes could not be sent to {masked(self.uri)}; kept in "
            f"{self.outbox.spool_path}; run 'hpo sync {self.config.name}' when the server is back"
        )

    def fail(self) -> None:
        """Tags the parent run failed and closes it."""
        self.callback.flush()
        self.outbox.log("sweep", tags={"hpo.status": "failed"})
        self.outbox.terminate("sweep", "FAILED")
        self._close_writer()

    def _close_writer(self) -> None:
        """Waits for the writer process (where there is one) to send what it holds and end."""
        close = getattr(self.outbox, "close", None)
        if close is not None:
            close()

    def interrupt(self, summary: SweepSummary | None) -> int:
        """Ctrl-C or SIGTERM: the running trials' and the parent's runs are tagged interrupted and KILLED.

        No model is registered; ``--resume`` reopens the same runs and logs each epoch once.

        Args:
            summary: The interrupted sweep's summary (its ``mlflow`` section is filled in), or None when
                the sweep stopped at once.

        Returns:
            MLflow writes still waiting in the spool.
        """
        self.callback.flush()
        for trial_id in self.callback.open_trials():
            key = f"trial:{trial_id}"
            self.outbox.log(key, tags={"hpo.status": "interrupted", "hpo.stop_reason": "sweep interrupted"})
            self.outbox.terminate(key, "KILLED")
        self.outbox.log("sweep", tags={"hpo.status": "interrupted"})
        self.outbox.terminate("sweep", "KILLED")
        pending = self.outbox.flush() if self.outbox.down else 0
        if summary is not None:
            update_summary(summary, self.outbox, pending)
        self._close_writer()
        return pending

    def _close_parent(
        self, rows: list[TrialRow], best: TrialRow | None, goal: Goal | None, statistics: Statistics | None,
    ) -> None:
        """Logs the best model (registered under the sweep name), the final best, the goal and the verdict.

        With repeats, the model is the winning configuration's best repeat.
        """
        config, outbox = self.config, self.outbox
        if best is not None and config.search.repeats > 1:
            winner = configuration_key(best.params)
            rows = [r for r in rows if configuration_key(r.params) == winner]
        picked = best_model.pick_model_trial(rows, config.objective.mode, self.storage, self.sweep_dir / "best_model")
        if picked is not None:
            row, path = picked
            outbox.log_model(str(path), self.sample[0], self.sample[1], config.name, row.trial_id)
        final = {f"best_{config.objective.metric}": best.metric} if best else {}
        final.update(
            trials=len(rows),
            trials_stopped_early=sum(r.stopped_early for r in rows),
            trials_failed=sum(r.status == "failed" for r in rows),
            trials_diverged=sum(r.status == "diverged" for r in rows),
        )
        now = int(time.time() * 1000)
        tags = {"hpo.best_trial_id": best.trial_id if best else "", "hpo.status": "finished"}
        if best:
            tags["hpo.best_params"] = json.dumps(best.params, default=str)
        if statistics is not None:
            tags["hpo.verdict"] = statistics.verdict
            tags["hpo.significant"] = "true" if statistics.significant else "false"
            top = statistics.configurations[0]
            if top.n > 1:
                final.update({f"best_{config.objective.metric}_mean": top.mean,
                              f"best_{config.objective.metric}_ci_low": top.ci_low,
                              f"best_{config.objective.metric}_ci_high": top.ci_high})
                tags["hpo.best_repeats"] = str(top.n)
        if goal is not None:
            tags["hpo.goal_reached"] = "true" if goal.reached else "false"
            tags["hpo.goal_trial_id"] = goal.trial_id or ""
        metrics = [(k, float(v), now, 0) for k, v in final.items() if finite(v)]
        outbox.log("sweep", metrics=metrics, tags=tags)
        outbox.terminate("sweep", "FAILED" if best is None else "FINISHED")


def flat_params(config: SweepConfig) -> dict[str, Any]:
    """The sweep's settings as flat ``section.key`` MLflow params (the space is logged as one JSON).

    The search keys a sweep file may leave to its searcher are logged as they run
    (:meth:`hpo.config.sections.SearchConfig.resolved`).
    """
    out: dict[str, Any] = {"model": config.model, "space": json.dumps(config.model_dump()["space"])}
    for section in ("data", "objective", "search", "scheduler", "trial"):
        for key, value in getattr(config, section).model_dump().items():
            out[f"{section}.{key}"] = value
    # What the searcher runs where the file leaves a key to it (TPE with random_fraction unset logs 0.5, not None).
    out.update({f"search.{key}": value for key, value in config.search.resolved().items()})
    return out


def config_yaml(config: SweepConfig) -> str:
    """The sweep as YAML (logged when it did not come from a file)."""
    import yaml

    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
