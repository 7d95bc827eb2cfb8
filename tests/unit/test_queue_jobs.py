"""hpo's side of the job server: a head whose job agent is not up yet is waited for, other refusals are not."""

from __future__ import annotations

import pytest

from hpo.queue import jobs


class _Server:
    """Answers ``submit_job`` with the given errors first, then with the submission id."""

    def __init__(self, *errors: str) -> None:
        self.errors, self.calls = list(errors), 0

    def submit_job(self, *, entrypoint, submission_id, runtime_env, metadata):
        self.calls += 1
        if self.errors:
            raise RuntimeError(self.errors.pop(0))
        return submission_id


def _jobs(server: _Server) -> jobs.Jobs:
    found = jobs.Jobs.__new__(jobs.Jobs)
    found._client = server
    return found


NO_AGENT = ("Request failed with status code 500: No available agent to submit job, please try again later.")


def test_a_head_whose_job_agent_is_starting_is_tried_again(monkeypatch):
    monkeypatch.setattr(jobs, "AGENT_RETRY_S", 0.0)
    server = _Server(NO_AGENT, NO_AGENT)
    assert _jobs(server).submit("python -c 1", "s-1", None, {}) == "s-1"
    assert server.calls == 3


def test_other_refusals_are_not_tried_again(monkeypatch):
    monkeypatch.setattr(jobs, "AGENT_RETRY_S", 0.0)
    server = _Server("Job with submission_id s-1 already exists.")
    with pytest.raises(RuntimeError, match="already exists"):
        _jobs(server).submit("python -c 1", "s-1", None, {})
    assert server.calls == 1


def test_the_wait_for_the_agent_is_bounded(monkeypatch):
    monkeypatch.setattr(jobs, "AGENT_RETRY_S", 0.0)
    monkeypatch.setattr(jobs, "AGENT_WAIT_S", 0.0)
    server = _Server(NO_AGENT, NO_AGENT)
    with pytest.raises(RuntimeError, match="No available agent"):
        _jobs(server).submit("python -c 1", "s-1", None, {})
    assert server.calls == 1
