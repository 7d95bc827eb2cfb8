"""``hpo sync``: the MLflow writes a sweep spooled while its tracking server was unreachable, sent now."""

from __future__ import annotations

from pathlib import Path

from hpo.config.tracking_uri import masked
from hpo.errors import ConfigError
from hpo.sweep_summary import SweepSummary
from hpo.tracking.outbox import SPOOL_NAME, Outbox, update_summary
from hpo.tracking.server import health
from hpo.tracking.uri import is_server


def send_spool(summary: SweepSummary, summary_file: Path) -> tuple[int, int]:
    """Sends a sweep's spooled MLflow writes and puts the run ids and what is left into its summary.

    Args:
        summary: The sweep's ``summary.json`` (updated in place; the caller writes it back).
        summary_file: Where that summary lies (the spool is beside it).

    Returns:
        (writes sent, writes still waiting).

    Raises:
        ConfigError: The tracking server is unreachable.
    """
    info = summary.mlflow
    spool = summary_file.parent / SPOOL_NAME
    if not spool.is_file():
        return 0, 0
    uri = info.uri or ""
    problem = health(uri) if is_server(uri) else None
    if problem is not None:
        raise ConfigError(
            f"{summary_file}: mlflow.uri: MLflow server {masked(uri)} is unreachable ({problem}); "
            "start it again, then rerun 'hpo sync'"
        )
    outbox = Outbox(uri, spool, info.parent_run_id, info.experiment_id)
    known = {f"trial:{t.trial_id}": t.mlflow_run_id for t in summary.trials if t.mlflow_run_id}
    outbox.run_ids.update(known)
    if info.model is not None:
        outbox.model = info.model.model_dump()
    total = sum(1 for line in spool.read_text().splitlines() if line.strip())
    left = outbox.flush()
    update_summary(summary, outbox, left)
    return total - left, left
