"""The live feed a page publishes and the browser polls (explorer_app.live_feed), without a browser."""

import json
import time

import plotly.graph_objects as go
import pytest
from starlette.requests import Request

from explorer_app import figures, live_feed


def figure(title: str) -> go.Figure:
    return go.Figure(layout={"title": {"text": title}})


class Source:
    """A feed source whose state the test sets; counts the figures it builds."""

    def __init__(self):
        self.step, self.active, self.builds = 0, True, 0

    def build(self, title):
        self.builds += 1
        return figure(title)

    def __call__(self) -> live_feed.State:
        version = str(self.step)
        return live_feed.State(stamp=json.dumps(["running" if self.active else "finished"]), active=self.active,
                               progress=(self.step / 10, f"step {self.step} of 10"),
                               charts={"loss": live_feed.Chart(version, lambda: self.build(f"loss {version}"))})


def title(body: dict, chart: str) -> str:
    return json.loads(body["charts"][chart]["figure"])["layout"]["title"]["text"]


def test_a_chart_is_built_once_per_version_and_sent_only_to_a_reader_without_it():
    source = Source()
    token = live_feed.publish(source)
    first = live_feed.read(token, {})
    assert title(first, "loss") == "loss 0" and first["charts"]["loss"]["version"] == "0"
    assert first["progress"] == {"fraction": 0.0, "text": "step 0 of 10"} and first["active"] is True
    again = live_feed.read(token, {"loss": "0"})  # the browser has it: not sent, not rebuilt
    assert again["charts"] == {} and source.builds == 1
    other_tab = live_feed.read(token, {})  # another reader without it: sent, still not rebuilt
    assert title(other_tab, "loss") == "loss 0" and source.builds == 1
    source.step, source.active = 3, False
    ended = live_feed.read(token, {"loss": "0"})
    assert title(ended, "loss") == "loss 3" and source.builds == 2
    assert ended["stamp"] != first["stamp"] and ended["active"] is False


def test_a_page_keeps_its_token_and_unknown_tokens_read_nothing():
    token = live_feed.publish(Source())
    replaced = Source()
    replaced.step = 7
    assert live_feed.publish(replaced, token) == token  # a rerun of the page: same URL, new source
    assert title(live_feed.read(token, {}), "loss") == "loss 7"
    assert live_feed.read("no-such-token", {}) is None
    assert live_feed.publish(Source(), "chosen-by-a-client") != "chosen-by-a-client"  # tokens are the server's
    kept = live_feed.publish(Source(), key="run 1")
    live_feed.read(kept, {})
    again = Source()
    assert live_feed.publish(again, kept, key="run 1") == kept  # the same run: the feed and its figures stay
    live_feed.read(kept, {})
    assert again.builds == 0
    live_feed.publish(again, kept, key="run 2")  # another run: the new source serves
    live_feed.read(kept, {})
    assert again.builds == 1


def test_a_table_is_sent_whole_at_every_read_with_its_numbers_as_text():
    """A grid's runs table (Compare): no version, so every read carries it; floats to 4 significant digits,
    the progress column's numbers kept for its bars, a missing value empty, user text as it is (the browser
    sets it as text)."""
    rows = [{"run": "<b>grid 1</b>", "status": "running", "progress": 42.5, "step": "5 / 10", "loss": 0.123456789,
             "diverged at": None},
            {"run": "grid 2", "status": "diverged", "progress": 30.0, "step": "3 / 10", "loss": float("inf"),
             "diverged at": 3}]
    table = figures.live_table(rows, "progress")
    assert table.columns == ("run", "status", "progress", "step", "loss", "diverged at")
    assert table.rows == (("<b>grid 1</b>", "running", 42.5, "5 / 10", "0.1235", None),
                          ("grid 2", "diverged", 30.0, "3 / 10", "inf", 3))
    token = live_feed.publish(lambda: live_feed.State("stamp", True, table=table))
    first, again = live_feed.read(token, {}), live_feed.read(token, {})
    assert first["table"] == again["table"] == {"columns": list(table.columns), "progress_column": "progress",
                                                "rows": [list(row) for row in table.rows]}
    json.dumps(first, allow_nan=False)  # what the route sends (Starlette refuses NaN and infinities)
    assert live_feed.read(live_feed.publish(Source()), {})["table"] is None


def test_the_feeds_are_bounded_least_recently_read_first(monkeypatch):
    monkeypatch.setattr(live_feed, "MAX_FEEDS", 3)
    monkeypatch.setattr(live_feed, "_feeds", type(live_feed._feeds)())
    tokens = [live_feed.publish(Source()) for _ in range(3)]
    live_feed.read(tokens[0], {})  # read: now the most recent
    newest = live_feed.publish(Source())
    assert live_feed.read(tokens[1], {}) is None  # the least recently read went
    assert all(live_feed.read(token, {}) is not None for token in (tokens[0], tokens[2], newest))


def request(token: str, have: str | None) -> Request:
    query = b"" if have is None else b"have=" + have.encode()
    return Request({"type": "http", "method": "GET", "path": f"/live/{token}", "query_string": query,
                    "headers": [], "path_params": {"token": token}})


def test_the_route_answers_json_and_refuses_bad_queries(monkeypatch):
    monkeypatch.setattr(live_feed, "served", False)
    route = live_feed.route()
    assert live_feed.served and route.path.endswith("/live/{token}")
    token = live_feed.publish(Source())
    reply = route.endpoint(request(token, json.dumps({"loss": "0"})))
    assert reply.status_code == 200 and json.loads(reply.body)["charts"] == {}
    assert reply.headers["cache-control"] == "no-store"
    assert route.endpoint(request("unknown", None)).status_code == 404
    for bad in ("not json", "[1, 2]", json.dumps({"loss": 3}), json.dumps({"x": "y" * live_feed.MAX_QUERY})):
        answer = route.endpoint(request(token, bad))
        assert answer.status_code == 400 and b"have" in answer.body, bad


@pytest.mark.parametrize("served", [False, True])
def test_a_link_exists_only_where_a_feed_is_served(monkeypatch, served):
    monkeypatch.setattr(live_feed, "served", served)
    link = live_feed.link("t0k3n", "loss", "4:running", "stamp")
    assert (link is not None) == served
    if served:
        assert link.to_data()["url"].endswith("/live/t0k3n") and link.to_data()["period_ms"] == 200


def test_a_later_link_is_drawn_later(monkeypatch):
    """The browser keeps the stamp of the newest link it was handed (a part that Streamlit hands its earlier data
    again must not wind the page's stamp back), so links made one after another are ordered, and their order
    survives a JavaScript number (below 2**53)."""
    monkeypatch.setattr(live_feed, "served", True)
    first = live_feed.link("t0k3n", "loss", "4:running", "running")
    time.sleep(0.001)
    second = live_feed.link("t0k3n", "loss", "4:paused", "paused")
    assert first.to_data()["drawn"] < second.to_data()["drawn"] < 2**53
