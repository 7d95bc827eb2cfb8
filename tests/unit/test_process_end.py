"""An hpo command ends through hpo.cli.process_end: Python's exit steps run, the interpreter's teardown does not."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hpo.cli.process_end import status_of
from tests.conftest import ROOT

#: A process that leaves work for each of Python's exit steps, then ends through ``end``.
SCRIPT = """
import atexit, concurrent.futures, sys, threading, time
from pathlib import Path
from hpo.cli.process_end import end

out = Path(sys.argv[1])
def slow(name):
    time.sleep(0.3)
    (out / name).write_text("done")
threading.Thread(target=slow, args=("thread",)).start()  # non-daemon: Python waits for it
concurrent.futures.ThreadPoolExecutor(1).submit(slow, "executor")  # waited for by threading's exit callbacks
atexit.register(lambda: (out / "atexit").write_text(str((out / "thread").exists())))
print("buffered, not yet flushed", end="")
end(CODE)
"""


@pytest.mark.parametrize(("code", "status", "stderr"), [(3, 3, ""), ("'a message'", 1, "a message\n")])
def test_every_exit_step_runs_and_the_status_is_pythons(tmp_path: Path, code, status, stderr):
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT).replace("CODE", str(code)), str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert (proc.returncode, proc.stderr) == (status, stderr)
    assert proc.stdout == "buffered, not yet flushed"
    assert (tmp_path / "thread").read_text() == (tmp_path / "executor").read_text() == "done"
    assert (tmp_path / "atexit").read_text() == "True"  # atexit handlers run after the threads ended


def test_status_of_follows_sys_exit():
    assert [status_of(c) for c in (None, 0, 2, 143, 256, -1, "text", True)] == [0, 0, 2, 143, 0, 255, 1, 1]


def test_the_cli_exits_with_its_status():
    ok = subprocess.run([sys.executable, "-m", "hpo.cli.main", "--version"], capture_output=True, text=True,
                        cwd=ROOT, timeout=120)
    bad = subprocess.run([sys.executable, "-m", "hpo.cli.main", "no-such-verb"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert ok.returncode == 0 and ok.stdout.strip()
    assert bad.returncode == 2 and "no-such-verb" in bad.stderr
