from __future__ import annotations

import os
import subprocess

import pytest

from hpo.errors import ConfigError
from hpo.tracking import check_reachable, free_port, is_local, is_server, normalize_uri
from hpo.tracking.runs import git_tags


def test_uri_forms(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert normalize_uri("sqlite:///mlflow.db") == f"sqlite:///{tmp_path}/mlflow.db"
    assert normalize_uri("sqlite:////abs/x.db") == "sqlite:////abs/x.db"
    assert normalize_uri("runs/track.db") == f"sqlite:///{tmp_path}/runs/track.db"
    assert normalize_uri("/abs/x.sqlite") == "sqlite:////abs/x.sqlite"
    assert normalize_uri("mlruns") == f"file://{tmp_path}/mlruns"
    assert normalize_uri("http://127.0.0.1:5000/") == "http://127.0.0.1:5000"
    assert is_server("http://h:1") and is_server("https://h") and not is_server("sqlite:///x.db")
    assert is_local("sqlite:////x.db") and is_local("file:///x") and not is_local("http://h:1")


def test_unreachable_server_is_a_config_error_naming_the_key():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ConfigError, match=rf"^s\.yaml: tracking\.mlflow_uri: MLflow server {url} is unreachable \("):
        check_reachable(url, "s.yaml")
    check_reachable("sqlite:////nowhere/x.db", "s.yaml")  # local stores need no server


def test_git_tags_inside_and_outside_a_work_tree(tmp_path):
    assert git_tags(tmp_path) == {}
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    (tmp_path / "f").write_text("1")
    for args in (["init", "-q"], ["add", "f"], ["commit", "-qm", "x"]):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, env=env)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    assert git_tags(tmp_path) == {"mlflow.source.git.commit": head, "hpo.git_commit": head, "hpo.git_dirty": "false"}
    (tmp_path / "f").write_text("2")
    assert git_tags(tmp_path)["hpo.git_dirty"] == "true"
