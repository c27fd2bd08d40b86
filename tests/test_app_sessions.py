"""Jobs belong to sessions. A session has at most EXPLORER_MAX_JOBS_PER_SESSION active jobs,
its jobs stop a grace period after it ends, and an operator (EXPLORER_ADMIN_TOKEN) can list and stop any."""

import time

import pytest

import explorer
from conftest import plain
from explorer_app import jobs
from test_app_jobs import wait_for

LONG = explorer.preset("tau-fig1-1/sqrt(L)").with_values({"model.depth": 4, "train.steps": 20000, "train.log_every": 5})


def test_a_session_has_at_most_its_share_of_active_jobs(worker_pool):
    queue = jobs.JobQueue(1, max_per_session=2, pool=worker_pool)
    mine = [queue.submit(LONG, f"a{i}", record=False, session="a") for i in range(2)]
    with pytest.raises(jobs.SessionLimit, match="EXPLORER_MAX_JOBS_PER_SESSION"):
        queue.submit(LONG, "a2", record=False, session="a")
    theirs = queue.submit(LONG, "b0", record=False, session="b")  # another session still may
    mine[0].stop()
    jobs.wait(mine[0])
    again = queue.submit(LONG, "a3", record=False, session="a")  # a slot of its share came free
    for job in (mine[1], theirs, again):
        job.stop()
        jobs.wait(job)


def test_the_tabs_of_one_browser_share_one_share(worker_pool):
    """Six tabs of one browser are six sessions of one browser (the queue is told so): together they have one
    share of the queue; a tab of another browser still may start a job."""
    queue = jobs.JobQueue(1, max_per_session=2, pool=worker_pool)
    for tab in ("tab1", "tab2", "tab3"):
        queue.same_browser(tab, "browser-a")
    queue.same_browser("other", "browser-b")
    mine = [queue.submit(LONG, "t1", record=False, session="tab1"), queue.submit(LONG, "t2", record=False, session="tab2")]
    with pytest.raises(jobs.SessionLimit, match="across its tabs"):
        queue.submit(LONG, "t3", record=False, session="tab3")
    theirs = queue.submit(LONG, "b0", record=False, session="other")
    for job in (*mine, theirs):
        job.stop()
        jobs.wait(job)


def test_the_jobs_of_a_session_that_ended_stop_after_the_grace_period(worker_pool):
    connected = {"gone": True, "here": True}
    queue = jobs.JobQueue(1, alive=lambda session: connected[session], grace_s=1000, reap_every=None, pool=worker_pool)  # reaped by hand below
    orphan = queue.submit(LONG, "orphan", record=False, session="gone")
    waiting = queue.submit(LONG.with_values({"train.steps": 20}), "waiting", record=False, session="here")
    wait_for(lambda: orphan.view().status == "running")
    assert waiting.view().status == "queued"
    connected["gone"] = False
    now = time.monotonic()
    assert queue.reap(now) == [] and queue.reap(now + 999) == []  # within the grace period: goes on
    assert queue.reap(now + 1001) == [orphan]  # not now + 1000: (now + 1000) - now can round below 1000
    assert jobs.wait(orphan).status == "stopped" and "session" in orphan.view().note
    assert jobs.wait(waiting).status == "finished"  # the slot it held came free
    assert orphan in queue.jobs() and queue.active_jobs() == []


def test_a_session_that_comes_back_within_the_grace_period_keeps_its_job(worker_pool):
    connected = {"tab": False}
    queue = jobs.JobQueue(1, alive=lambda session: connected[session], grace_s=1000, reap_every=None, pool=worker_pool)
    job = queue.submit(LONG, "flaky", record=False, session="tab")
    now = time.monotonic()
    queue.reap(now)
    connected["tab"] = True  # reconnected
    queue.reap(now + 500)
    connected["tab"] = False
    assert queue.reap(now + 1200) == []  # the clock started again when it left the second time
    assert job.view().active
    job.stop()
    jobs.wait(job)


def test_the_admin_page_lists_every_job_and_stops_one(open_page, monkeypatch):
    monkeypatch.setenv("EXPLORER_ADMIN_TOKEN", "s3cret")
    at = open_page("train")
    at.number_input(key="spec:train.-.steps").set_value(20000).run()
    at.button(key="train-start").click().run()
    job = at.session_state["train-job"]
    assert job.session is not None
    nosy = open_page("admin", query={"token": "guess"})
    assert not nosy.exception and not [b for b in nosy.button if str(b.key).startswith("admin-stop")]
    admin = open_page("admin", query={"token": "s3cret"})
    assert not admin.exception
    assert any(job.id in plain(m.value) for m in admin.markdown)
    admin.button(key=f"admin-stop-{job.id}").click().run()
    assert jobs.wait(job).status in ("stopped", "cancelled")
    assert "operator" in job.view().note


def test_without_a_token_the_admin_page_lists_nothing(open_page, monkeypatch):
    """No EXPLORER_ADMIN_TOKEN: an empty token (or none) must not match the unset one."""
    monkeypatch.delenv("EXPLORER_ADMIN_TOKEN", raising=False)
    at = open_page("train")
    at.number_input(key="spec:train.-.steps").set_value(20000).run()
    at.button(key="train-start").click().run()
    job = at.session_state["train-job"]
    for query in ({}, {"token": ""}):
        page = open_page("admin", query=query)
        assert not page.exception
        assert not [b for b in page.button if str(b.key).startswith("admin-stop")]
        assert not any(job.id in plain(m.value) for m in page.markdown)
    job.stop()
    jobs.wait(job)


def test_a_compare_grid_larger_than_a_sessions_share_is_refused(open_page, monkeypatch):
    monkeypatch.setenv("EXPLORER_MAX_JOBS_PER_SESSION", "2")
    at = open_page("compare")
    at.multiselect(key="compare-topologies").set_value(["cascaded", "none", "tau"]).run()
    assert not at.exception
    assert any("EXPLORER_MAX_JOBS_PER_SESSION" in plain(e.value) for e in at.error)
    assert at.button(key="compare-launch").disabled
