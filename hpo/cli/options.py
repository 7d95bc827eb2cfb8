"""Options several ``hpo`` commands share, and the environment variables that set them.

Every ``--storage`` reads ``HPO_STORAGE`` when the flag is not given (the cluster image sets it), every
``--mlflow-uri`` reads ``HPO_MLFLOW_URI`` and every ``--address`` reads ``HPO_ADDRESS``; a flag on the
command line wins. ``docs/cli.md`` lists them (one place).
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

#: Environment variable → the option it sets (documented in docs/cli.md, checked by its test).
ENVVARS = {"HPO_STORAGE": "--storage", "HPO_MLFLOW_URI": "--mlflow-uri", "HPO_ADDRESS": "--address"}

StorageOption = Annotated[
    str,
    typer.Option(
        "--storage",
        envvar="HPO_STORAGE",
        help="Where sweeps live: a directory, file:///shared/mount, s3://bucket/prefix, gs://….",
    ),
]
MlflowUriOption = Annotated[
    Optional[str], typer.Option("--mlflow-uri", envvar="HPO_MLFLOW_URI", help="Override tracking.mlflow_uri.")
]
AddressOption = Annotated[
    Optional[str],
    typer.Option("--address", envvar="HPO_ADDRESS", help="Ray address (auto, ray://host:10001); default: a local Ray."),
]
SetOption = Annotated[
    Optional[list[str]],
    typer.Option("--set", help="Replace a sweep-file key: KEY=VALUE, the value read as YAML (trial.max_epochs=3)."),
]
DeadlineOption = Annotated[
    Optional[str],
    typer.Option(help="When the sweep should end: a duration from now (6h, 90m) or a time (2026-11-30T06:00); "
                 "shows p_meet, warns once below 0.5, never stops a trial."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object (schema: docs/cli.md).")]


QuietOption = Annotated[
    bool, typer.Option("--quiet", help="No progress lines; only the final table and where results are.")
]
