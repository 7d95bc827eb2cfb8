"""``hpo report NAME -o report.html``: one self-contained HTML page of a sweep's results (plotly).

The page holds: the optimisation history with the best so far, parallel coordinates of the parameters
and the objective, Optuna's parameter importance, every trial's learning curve with the point where it
ended (and why), each top configuration's repeats with their mean and 95 % interval, and the time and
resources of each trial. plotly.js is embedded once, so the file opens without a network.

It reads the sweep's ``summary.json`` when the sweep has finished, and its live state otherwise (each
trial's ``params.json`` and ``progress.csv`` in the storage), so it also works while the sweep runs.
"""

from __future__ import annotations

import csv
import html
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpo.config import SweepConfig
from hpo.errors import ConfigError
from hpo.objective import best_value, better, configuration_key
from hpo.options import summary_path
from hpo.repeats import load_config
from hpo.results import EPOCH_KEY, FINISHED_KEY, SCORED_STATUSES, TOTAL_TIME_KEY, is_hidden_param
from hpo.storage import Storage, write_text_atomic
from hpo.sweep_summary import Statistics, SweepSummary

#: The page title's start: how an existing file is recognised as a report hpo wrote.
TITLE = "hpo sweep report"
#: The report a sweep writes into its state directory when it ends (and logs on its MLflow parent run).
REPORT_FILE = "report.html"
#: Marker of each way a trial can end, on its learning curve.
END_MARKERS = {"completed": "circle", "stopped_early": "x", "diverged": "triangle-down", "failed": "square",
               "running": "diamond-open"}


@dataclass
class TrialView:
    """One trial as the report draws it."""

    trial_id: str
    params: dict[str, Any]
    status: str
    metric: float | None
    curve: list[tuple[int, float]] = field(default_factory=list)
    seconds: float | None = None


@dataclass
class SweepView:
    """What the report draws: the sweep's settings, trials and (finished) statistics."""

    name: str
    config: SweepConfig
    trials: list[TrialView]
    statistics: Statistics | None
    finished: bool


def load_view(storage: Storage, name: str, summary: SweepSummary | None = None) -> SweepView:
    """The sweep's trials with their curves, from ``summary.json`` if it finished, else from its live state.

    Args:
        storage: Where the sweep is.
        name: The sweep.
        summary: Its summary when the caller has it (the sweep writing its own report).

    Raises:
        ConfigError: The sweep is unknown (no settings kept and no summary), or its summary is unreadable.
    """
    config = load_config(storage, name)
    path = summary_path(storage, name)
    if summary is None and path.is_file():
        summary = SweepSummary.read(path)
    curves = _trial_files(storage, name, config.objective.metric)
    if summary is not None:
        trials = [TrialView(t.trial_id, t.params, t.status, t.metric) for t in summary.trials]
    else:
        trials = [TrialView(tid, params, status, best_value([v for _, v in curve], config.objective.mode))
                  for tid, (params, status, curve, _) in sorted(curves.items())]
    for trial in trials:
        if trial.trial_id in curves:
            trial.curve, trial.seconds = curves[trial.trial_id][2], curves[trial.trial_id][3]
    return SweepView(name, config, trials, summary.statistics if summary else None, summary is not None)


def _trial_files(storage: Storage, name: str, metric: str) -> dict[str, tuple[dict, str, list, float | None]]:
    """Trial id -> (params, status, [(epoch, metric)], seconds) from each trial directory in the storage."""
    from pyarrow import fs as pafs

    filesystem, base = storage.filesystem()
    out: dict[str, tuple[dict, str, list, float | None]] = {}
    try:
        infos = filesystem.get_file_info(pafs.FileSelector(f"{base}/{name}", allow_not_found=True))
    except OSError:
        return out
    for info in infos:
        if info.type != pafs.FileType.Directory or not info.base_name.startswith("hpo_trial_"):
            continue
        trial_id = info.base_name.split("_")[2]
        params = json.loads(_read(filesystem, f"{info.path}/params.json") or "{}")
        params = {k: v for k, v in params.items() if not is_hidden_param(k)}
        rows = list(csv.DictReader(io.StringIO(_read(filesystem, f"{info.path}/progress.csv") or "")))
        curve = [(int(float(r[EPOCH_KEY])), float(r[metric])) for r in rows if r.get(metric) and r.get(EPOCH_KEY)]
        finished = bool(rows) and rows[-1].get(FINISHED_KEY) == "True"
        seconds = float(rows[-1][TOTAL_TIME_KEY]) if rows and rows[-1].get(TOTAL_TIME_KEY) else None
        out[trial_id] = (params, "completed" if finished else "running", curve, seconds)
    return out


def _read(filesystem: Any, path: str) -> str | None:
    try:
        with filesystem.open_input_stream(path) as stream:
            return stream.read().decode()
    except (FileNotFoundError, OSError):
        return None


def figures(view: SweepView, importance: dict[str, float] | None) -> list[tuple[str, Any]]:
    """The report's figures, titled, in page order (each a ``go.Figure`` or a plain figure dict)."""
    import plotly.graph_objects as go

    metric, mode = view.config.objective.metric, view.config.objective.mode
    scored = [t for t in view.trials if t.metric is not None and t.status in (*SCORED_STATUSES, "running")]
    out: list[tuple[str, Any]] = []

    history = go.Figure()
    best, best_so_far = None, []
    for trial in scored:
        best = trial.metric if better(trial.metric, best, mode) else best
        best_so_far.append(best)
    history.add_scatter(x=[t.trial_id for t in scored], y=[t.metric for t in scored], mode="markers", name=metric)
    history.add_scatter(x=[t.trial_id for t in scored], y=best_so_far, mode="lines", name="best so far",
                        line={"shape": "hv"})
    history.update_layout(xaxis_title="trial (in start order)", yaxis_title=metric)
    out.append(("Optimisation history", history))

    names = sorted({k for t in scored for k in t.params})
    if names and scored:
        dims = [_dimension(n, [t.params.get(n) for t in scored]) for n in names]
        dims.append({"label": metric, "values": [t.metric for t in scored]})
        out.append(("Parallel coordinates", go.Figure(go.Parcoords(
            dimensions=dims, line={"color": [t.metric for t in scored], "colorscale": "Viridis",
                                   "showscale": True}))))
    if importance:
        ranked = sorted(importance.items(), key=lambda kv: kv[1])
        out.append(("Parameter importance (Optuna's default evaluator)", go.Figure(go.Bar(
            x=[v for _, v in ranked], y=[k for k, _ in ranked], orientation="h"))))

    title = "Learning curves (marker: where each trial ended; x = stopped by the scheduler)"
    out.append((title, _curves(view.trials, metric)))

    if view.statistics and any(c.n > 1 for c in view.statistics.configurations):
        title = "Repeats of the top configurations (mean and 95 % interval)"
        out.append((title, _repeats(view, view.statistics, metric)))

    timed = [t for t in view.trials if t.seconds is not None]
    if timed:
        trial = view.config.trial
        cpus = trial.workers * trial.cpus_per_worker
        gpus = trial.workers * trial.gpus_per_worker
        time_fig = go.Figure(go.Bar(x=[t.trial_id for t in timed], y=[t.seconds for t in timed],
                                    text=[t.status for t in timed]))
        time_fig.update_layout(xaxis_title="trial", yaxis_title="seconds",
                               title=f"each trial: {trial.workers} workers, {cpus:g} CPUs, {gpus:g} GPUs")
        out.append(("Time and resources per trial", time_fig))
    return out


def _curves(trials: list[TrialView], metric: str) -> dict[str, Any]:
    """Every trial's learning curve and the marker where it ended, two traces a trial, as a plain figure.

    A plain figure (plotly's JSON, with its default template) draws the same page as ``go.Figure`` with the
    same traces, without a validated object per trace: at thousands of trials those objects took seconds to
    build and tens of megabytes of the driver's memory at the sweep's end.
    """
    import plotly.io as pio

    data: list[dict[str, Any]] = []
    for trial in trials:
        if not trial.curve:
            continue
        xs, ys = zip(*trial.curve, strict=True)
        data.append({"type": "scatter", "x": list(xs), "y": list(ys), "mode": "lines", "name": trial.trial_id,
                     "legendgroup": trial.trial_id})
        data.append({"type": "scatter", "x": [xs[-1]], "y": [ys[-1]], "mode": "markers",
                     "legendgroup": trial.trial_id, "showlegend": False,
                     "marker": {"symbol": END_MARKERS.get(trial.status, "circle"), "size": 11},
                     "hovertext": f"{trial.trial_id}: {trial.status} at epoch {xs[-1]}"})
    template = pio.templates[pio.templates.default].to_plotly_json()
    return {"data": data, "layout": {"template": template, "xaxis": {"title": {"text": "epoch"}},
                                     "yaxis": {"title": {"text": metric}}}}


def _dimension(name: str, values: list[Any]) -> dict[str, Any]:
    """A parallel-coordinates axis; categorical values become ticks."""
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values if v is not None):
        return {"label": name, "values": [v if v is not None else float("nan") for v in values]}
    labels = sorted({str(v) for v in values})
    return {"label": name, "values": [labels.index(str(v)) for v in values], "tickvals": list(range(len(labels))),
            "ticktext": labels}


def _repeats(view: SweepView, statistics: Statistics, metric: str) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    for row in statistics.configurations:
        key = configuration_key(row.params)
        values = [t.metric for t in view.trials if t.metric is not None and configuration_key(t.params) == key]
        label = f"#{row.rank}"
        fig.add_scatter(x=[label] * len(values), y=values, mode="markers", name=f"{label} repeats",
                        hovertext=json.dumps(row.params))
        if row.ci_low is not None and row.ci_high is not None:
            fig.add_scatter(x=[label], y=[row.mean], mode="markers", marker={"symbol": "line-ew-open", "size": 24},
                            error_y={"type": "data", "symmetric": False, "array": [row.ci_high - row.mean],
                                     "arrayminus": [row.mean - row.ci_low]}, name=f"{label} mean, 95 % CI")
    fig.update_layout(yaxis_title=metric, title=statistics.verdict)
    return fig


def param_importance(storage: Storage, view: SweepView) -> dict[str, float] | None:
    """Optuna's parameter importance from the sweep's study (None without a study or too few finished trials)."""
    db = storage.state_dir(view.name) / "optuna.db"
    if not view.config.search.kind.study or not db.is_file():
        return None
    import warnings

    import optuna

    # Only the completed trials are read (a query on their state): Optuna's importance uses no other, and a
    # study loaded whole (every pruned trial with its intermediate values, through Optuna's cache) held
    # tens of megabytes of the driver's memory per thousand trials at the sweep's end.
    storage = optuna.storages.RDBStorage(f"sqlite:///{db}")
    try:
        study_id = storage.get_study_id_from_name(view.name)
        directions = storage.get_study_directions(study_id)
        completed = storage.get_all_trials(study_id, deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    except KeyError:
        return None  # a study that is not there
    finally:
        storage.engine.dispose()
    if len({t.value for t in completed}) < 2:
        return None  # nothing to attribute: fewer than two different results
    try:
        study = optuna.create_study(directions=directions)  # in memory, with those trials only
        study.add_trials(completed)
        with warnings.catch_warnings():  # Optuna warns instead of failing on too few trials
            warnings.simplefilter("ignore")
            return optuna.importance.get_param_importances(study)
    except (KeyError, ValueError, RuntimeError):
        return None  # a single parameter value


def render(view: SweepView, importance: dict[str, float] | None) -> str:
    """The whole page: one embedded copy of plotly.js, then each figure."""
    import plotly.io as pio

    parts = []
    for i, (title, fig) in enumerate(figures(view, importance)):
        # validate=False: a plain figure (the learning curves) is drawn as built; a go.Figure is valid already
        body = pio.to_html(fig, full_html=False, include_plotlyjs="inline" if i == 0 else False, validate=False)
        parts.append(f"<h2>{html.escape(title)}</h2>\n{body}")
    state = "finished" if view.finished else "running (live state; reload for more)"
    verdict = view.statistics.verdict if view.statistics else None
    head = f"<p>{len(view.trials)} trials; {state}.</p>" + (f"<p><b>{html.escape(verdict)}</b></p>" if verdict else "")
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{TITLE} {html.escape(view.name)}</title>"
            f"</head><body><h1>Sweep {html.escape(view.name)}</h1>{head}\n" + "\n".join(parts) + "</body></html>\n")


def write_report(storage: Storage, name: str, output: Path, summary: SweepSummary | None = None) -> Path:
    """Writes sweep ``name``'s report to ``output`` (through a temporary file beside it) and returns its path.

    Raises:
        ConfigError: ``output`` is an existing file that is not an hpo report (it is never overwritten).
    """
    if output.exists() and (not output.is_file() or TITLE not in output.read_text(errors="replace")[:2000]):
        raise ConfigError(f"{output}: -o: exists and is not an hpo report; choose another path or move it away")
    view = load_view(storage, name, summary)
    return write_text_atomic(output, render(view, param_importance(storage, view)))
