"""The job queue's ceilings: at most EXPLORER_MAX_QUEUED jobs wait across the server, one network address has at
most EXPLORER_MAX_JOBS_PER_ADDRESS active jobs whatever its cookies, and a batch (a Compare grid) is queued all or
none. A refused submit is one line naming the cap, shown on the page as text, never as an exception box."""

import pytest

import explorer
from conftest import plain
from explorer_app import jobs, limits, state

LONG = explorer.preset("tau-fig1-1/sqrt(L)").with_values({"model.depth": 4, "train.steps": 20000, "train.log_every": 5})
FAST_PRESET = "idinit-fig5-idiz"  # digits, a 4-layer MLP


def stop_all(*queued):
    for job in queued:
        job.stop()
    for job in queued:
        jobs.wait(job)


def test_the_line_refuses_the_job_past_max_queued_and_says_how_many_are_ahead(worker_pool):
    queue = jobs.JobQueue(1, max_queued=2, pool=worker_pool)
    held = [queue.submit(LONG, f"j{i}", record=False) for i in range(3)]  # one in the slot, two waiting
    with pytest.raises(jobs.SessionLimit, match=r"server is full: 3 job\(s\) ahead of yours") as refused:
        queue.submit(LONG, "j3", record=False)
    assert refused.value.setting == "EXPLORER_MAX_QUEUED" and "EXPLORER_MAX_QUEUED=2" in str(refused.value)
    assert "\n" not in str(refused.value) and len(queue.jobs()) == 3  # one line; nothing queued
    held[2].stop()  # a waiting job leaves the line: a place comes free
    jobs.wait(held[2])
    again = queue.submit(LONG, "j4", record=False)
    assert again.view().queue_position == 2
    stop_all(*held[:2], again)


def test_a_new_cookie_from_the_same_address_is_still_capped_and_addresses_are_independent(worker_pool):
    queue = jobs.JobQueue(1, max_per_session=2, max_per_address=3, pool=worker_pool)
    for session, browser, address in (("a1", "browser-a", "203.0.113.7"), ("b1", "browser-b", "203.0.113.7"),
                                      ("c1", "browser-c", "203.0.113.7"), ("d1", "browser-d", "198.51.100.9"),
                                      ("local1", "browser-l", None), ("local2", "browser-l", None)):
        queue.same_browser(session, browser)
        queue.same_address(session, address)
    mine = [queue.submit(LONG, "a", record=False, session="a1") for _ in range(2)]
    mine.append(queue.submit(LONG, "b", record=False, session="b1"))  # a second browser: its own share...
    for session in ("b1", "c1"):  # ...until the address has its share: a fresh cookie (c1) starts no new one
        with pytest.raises(jobs.SessionLimit, match=r"address already has 3 run\(s\)") as refused:
            queue.submit(LONG, "over", record=False, session=session)
        assert refused.value.setting == "EXPLORER_MAX_JOBS_PER_ADDRESS"
    theirs = [queue.submit(LONG, "d", record=False, session="d1") for _ in range(2)]  # another address
    # local tabs (no address) share their browser's share only, as before
    local = [queue.submit(LONG, "l", record=False, session=tab) for tab in ("local1", "local2")]
    with pytest.raises(jobs.SessionLimit, match="across its tabs") as refused:
        queue.submit(LONG, "l3", record=False, session="local1")
    assert refused.value.setting == "EXPLORER_MAX_JOBS_PER_SESSION"
    mine[0].stop()
    jobs.wait(mine[0])
    mine.append(queue.submit(LONG, "c", record=False, session="c1"))  # one of the address's jobs ended
    stop_all(*mine[1:], *theirs, *local)


def test_a_batch_is_queued_all_or_none(worker_pool):
    queue = jobs.JobQueue(1, max_per_session=4, max_queued=5, pool=worker_pool)
    held = [queue.submit(LONG, f"h{i}", record=False, session="s") for i in range(2)]
    grid = [{"spec": LONG, "label": f"g{i}", "record": False} for i in range(4)]
    with pytest.raises(jobs.SessionLimit, match=r"already has 2 run\(s\).*these 4 runs.*fewer runs"):
        queue.submit_many(grid, session="s")
    assert len(queue.active_jobs("s")) == 2 and len(queue.jobs()) == 2
    other = queue.submit_many(grid, session="t")  # another browser: 1 running + 5 waiting fills the line
    with pytest.raises(jobs.SessionLimit, match="EXPLORER_MAX_QUEUED=5"):
        queue.submit_many(grid[:2], session="u")
    assert len(queue.jobs()) == 6 and queue.counts()[0] + queue.counts()[1] == 6
    assert [job.label for job in other] == ["g0", "g1", "g2", "g3"] and all(job.session == "t" for job in other)
    stop_all(*held, *other)


def test_the_limits_read_the_new_caps(monkeypatch):
    caps = limits.limits()
    assert caps.max_queued == 16 and caps.max_jobs_per_address == 8
    monkeypatch.setenv("EXPLORER_MAX_QUEUED", "3")
    monkeypatch.setenv("EXPLORER_MAX_JOBS_PER_ADDRESS", "40")
    caps = limits.limits()
    assert caps.max_queued == 3 and caps.max_jobs_per_address == 40
    monkeypatch.setenv("EXPLORER_MAX_JOBS_PER_ADDRESS", "-1")
    with pytest.raises(explorer.SpecError, match="EXPLORER_MAX_JOBS_PER_ADDRESS"):
        limits.limits()


# ---- the pages ------------------------------------------------------------------------------------
@pytest.fixture
def client(monkeypatch):
    """AppTest gives every app the same session id and no cookie or address: a test says which tab (session),
    browser (cookie) and address the next run of a page comes from."""
    now = {"session": "tab-1", "browser": None, "address": None}
    monkeypatch.setattr(state, "session_id", lambda: now["session"])
    monkeypatch.setattr(state, "browser_id", lambda: now["browser"])
    monkeypatch.setattr(state, "client_address", lambda: now["address"])
    return now


def set_up_grid(at, topologies: list[str], steps: int):
    at.selectbox(key="compare-preset").set_value(FAST_PRESET).run()
    at.multiselect(key="compare-topologies").set_value(topologies)
    at.number_input(key=f"compare-steps:{FAST_PRESET}").set_value(steps)
    return at.run()


def refusals(at) -> list[str]:
    return [plain(element.value) for element in [*at.error, *at.warning] if "Not " in element.value]


def test_a_compare_grid_over_the_line_queues_nothing_and_says_so(open_page, monkeypatch, client):
    monkeypatch.setenv("EXPLORER_MAX_JOBS", "1")
    monkeypatch.setenv("EXPLORER_MAX_QUEUED", "1")
    at = set_up_grid(open_page("compare"), ["cascaded", "none", "tau"], steps=20000)
    at.button(key="compare-launch").click().run()
    assert not at.exception
    [line] = refusals(at)
    assert "none of its 3 runs queued" in line and "EXPLORER_MAX_QUEUED=1" in line and "\n" not in line
    assert "compare-grid" not in at.session_state and state.job_queue().jobs() == []


def test_compare_with_another_tab_holding_jobs_shows_the_line_not_an_exception(open_page, client):
    client.update(session="tab-1", browser="browser-one")
    first = set_up_grid(open_page("compare"), ["cascaded", "none"], steps=20000)
    first.button(key="compare-launch").click().run()
    held = first.session_state["compare-grid"]["jobs"]
    assert len(held) == 2 and not first.exception
    client.update(session="tab-2")  # another tab of the same browser
    second = set_up_grid(open_page("compare"), ["cascaded", "none", "tau", "highway"], steps=20000)
    second.button(key="compare-launch").click().run()
    assert not second.exception
    [line] = refusals(second)
    assert "none of its 4 runs queued" in line and "already has 2 run(s)" in line and "across its tabs" in line
    assert "compare-grid" not in second.session_state
    assert len(state.job_queue().active_jobs()) == 2  # the other tab's, nothing of this grid
    stop_all(*held)


def test_a_second_cookie_from_one_address_is_refused_on_the_train_page(open_page, monkeypatch, client):
    monkeypatch.setenv("EXPLORER_MAX_JOBS_PER_ADDRESS", "1")

    def train(session, browser, address):
        client.update(session=session, browser=browser, address=address)
        at = open_page("train")
        at.number_input(key="spec:train.-.steps").set_value(20000).run()
        return at.button(key="train-start").click().run()

    first = train("tab-1", "browser-a", "203.0.113.7")
    assert "train-job" in first.session_state
    second = train("tab-2", "browser-b", "203.0.113.7")  # cleared cookies: a new browser at the same address
    assert not second.exception and "train-job" not in second.session_state
    [line] = refusals(second)
    assert "address already has 1 run(s)" in line and "EXPLORER_MAX_JOBS_PER_ADDRESS=1" in line
    third = train("tab-3", "browser-c", "198.51.100.9")
    assert "train-job" in third.session_state
    stop_all(first.session_state["train-job"], third.session_state["train-job"])
