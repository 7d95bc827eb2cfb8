"""docs/cli.md against the CLI itself: every flag both ways, the env vars, exit codes, the command lines it and
README.md show, and its JSON schemas against real output."""

from __future__ import annotations

import json
import re
import shlex

import pytest
import typer

from hpo.cli.main import app
from tests.conftest import ROOT, hpo_cli

DOC = (ROOT / "docs" / "cli.md").read_text()
HELP = {"-h", "--help"}


def commands() -> dict[str, object]:
    """``"hpo tune"`` → its click command, for the root and every command (groups without options left out)."""
    found: dict[str, object] = {}

    def walk(cmd, path):
        if not hasattr(cmd, "commands") or not path:
            found[" ".join(["hpo", *path])] = cmd
        for name in getattr(cmd, "commands", {}):
            walk(cmd.commands[name], [*path, name])

    walk(typer.main.get_command(app), [])
    return found


def cli_flags(cmd) -> set[str]:
    flags = set()
    for param in cmd.params:
        if param.param_type_name == "option":
            flags |= set(param.opts) | set(param.secondary_opts)
    return flags - HELP


def sections() -> dict[str, str]:
    """``"hpo tune"`` → the text of its ``### `hpo tune` `` section."""
    parts = re.split(r"^### `(hpo[^`]*)`\s*$", DOC, flags=re.M)
    return {parts[i].strip(): parts[i + 1].split("\n## ")[0] for i in range(1, len(parts), 2)}


def doc_flags(section: str) -> set[str]:
    """The flags in the first cell of the section's option table."""
    flags = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            cell = line.split("|")[1]
            flags |= set(re.findall(r"`(--?[A-Za-z][\w-]*)", cell))
    return flags


def test_every_command_has_a_section_and_every_section_a_command():
    assert set(sections()) == set(commands())


@pytest.mark.parametrize("name", sorted(commands()))
def test_every_flag_is_documented_and_every_documented_flag_exists(tmp_path, name):
    cmd = commands()[name]
    flags = cli_flags(cmd)
    documented = doc_flags(sections()[name])
    assert flags - documented == set(), f"{name}: in --help, missing from docs/cli.md"
    assert documented - flags == set(), f"{name}: in docs/cli.md, not in --help"
    shown = hpo_cli(*name.split()[1:], "--help", cwd=tmp_path)
    assert shown.returncode == 0
    assert all(re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", shown.stdout) for flag in flags), shown.stdout


def doc_command_lines() -> list[str]:
    """Every ``hpo …`` line of the page's bash blocks (comments dropped)."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", DOC, flags=re.S):
        lines += [line.split("  #")[0].strip() for line in block.splitlines() if line.startswith("hpo ")]
    return lines


def readme_command_lines() -> list[str]:
    """Every ``hpo …`` line of README.md's bash blocks (comments dropped)."""
    readme = (ROOT / "README.md").read_text()
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", readme, flags=re.S):
        lines += [line.split("  #")[0].strip() for line in block.splitlines() if line.startswith("hpo ")]
    return lines


def test_the_readme_shows_command_lines():
    assert len(readme_command_lines()) >= 10  # what the test below checks is there to check


@pytest.mark.parametrize("line", doc_command_lines() + readme_command_lines())
def test_each_command_line_shown_parses(tmp_path, line):
    proc = hpo_cli(*shlex.split(line)[1:], "--help", cwd=tmp_path)
    assert proc.returncode == 0, (line, proc.stdout, proc.stderr)


def test_a_command_line_with_an_unknown_flag_does_not_parse(tmp_path):
    """What makes the test above able to fail: click refuses an unknown flag even before --help."""
    assert hpo_cli("tune", "x.yaml", "--num-sample", "3", "--help", cwd=tmp_path).returncode == 2


def test_environment_variables_are_listed_in_one_place():
    table = DOC.split("## Environment variables")[1].split("\n## ")[0]
    listed = set(re.findall(r"^\| `(HPO_\w+)`", table, flags=re.M))
    used = {p.envvar for cmd in commands().values() for p in cmd.params if getattr(p, "envvar", None)}
    # Read by hpo itself, not as a flag: HPO_DEBUG (errors), HPO_STORAGE_RETRY_S (hpo.object_store),
    # HPO_PLACEMENT_STUCK_S (hpo.progress.placement_watch).
    assert used and used <= listed and listed - used == {"HPO_DEBUG", "HPO_STORAGE_RETRY_S", "HPO_PLACEMENT_STUCK_S"}
    for var, flag in (("HPO_STORAGE", "--storage"), ("HPO_MLFLOW_URI", "--mlflow-uri"), ("HPO_ADDRESS", "--address")):
        owners = [p for cmd in commands().values() for p in cmd.params if flag in getattr(p, "opts", [])]
        assert owners and all(p.envvar == var for p in owners), flag


def test_exit_codes_are_documented():
    table = DOC.split("## Exit codes")[1].split("\n## ")[0]
    assert set(re.findall(r"^\| (\d+) \|", table, flags=re.M)) == {"0", "1", "2", "130", "143"}


def json_example(name: str) -> dict:
    return json.loads(re.findall(r"```json\n(.*?)```", sections()[name], flags=re.S)[0])


def same_keys(documented: dict, real: dict, list_key: str | None) -> None:
    assert set(documented) == set(real)
    if list_key:
        assert set(documented[list_key][0]) == set(real[list_key][0])


def test_json_schemas_match_real_output(tmp_path):
    mlp = ROOT / "search_spaces" / "digits_mlp.yaml"
    real = json.loads(hpo_cli("validate", str(mlp), "--offline", "--json", cwd=tmp_path).stdout)
    same_keys(json_example("hpo validate"), real, "sweeps")
    cluster = json.loads(hpo_cli("cluster", "validate", str(ROOT / "cluster" / "aws-gpu.yaml"), "--json",
                                 "--template", cwd=tmp_path).stdout)
    same_keys(json_example("hpo cluster validate"), cluster, "gpu_types")
    runs = tmp_path / "runs"
    (runs / "s").mkdir(parents=True)
    summary = {"name": "s", "status": "finished", "objective": {"metric": "m", "mode": "max"},
               "best": {"trial_id": "t", "params": {}, "metric": 1.0}, "trials": [], "repeat_of": "r",
               "statistics": {"winner": "{}", "significant": False, "test": "t", "alpha": 0.05, "verdict": "v",
                              "configurations": [{"rank": 1, "params": {}, "n": 1, "mean": 1.0, "std": None,
                                                  "ci_low": None, "ci_high": None, "p_value": None}]}}
    (runs / "s" / "summary.json").write_text(json.dumps(summary))
    listed = json.loads(hpo_cli("list", "--storage", str(runs), "--json", cwd=tmp_path).stdout)
    same_keys(json_example("hpo list"), listed, "sweeps")
    from hpo.cli.main import repeat_json
    from hpo.sweep_summary import SweepSummary

    same_keys(json_example("hpo repeat"), repeat_json(SweepSummary.model_validate(summary), "x"), None)
