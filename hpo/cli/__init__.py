"""The ``hpo`` command line (typer)."""
