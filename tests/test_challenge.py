"""The design challenge (explorer.challenge): its rules, its score on real runs, and the papers' reference answer."""

import math
import re

import pytest

import explorer
from explorer import challenge


@pytest.mark.parametrize("design, words", [
    ("0:1,0:2,0:4", "at most 2"),              # three shortcuts
    ("0:1*0.5,1:3*2,2:4", "at most 2"),       # weighted shortcuts count too
    ("0:9", "blocks"),                        # leaves the net
    ("4:2", "forward"),
    ("zero to four", "not a shortcut"),
    (["0:4"], "text"),
])
def test_a_design_that_breaks_the_rules_is_refused_in_one_line(design, words):
    with pytest.raises(explorer.SpecError) as error:
        challenge.challenge_spec(design)
    assert error.value.path == "topology.shortcuts"
    assert words in error.value.message and "\n" not in str(error.value)


def test_the_spec_is_the_base_wired_with_the_design():
    base = challenge.CHALLENGE.base
    assert base.model.depth == challenge.CHALLENGE.depth and base.topology.name == "none"
    assert challenge.challenge_spec("none") == base == challenge.challenge_spec("")
    spec = challenge.challenge_spec("1:2, 0:4*0.5")
    assert spec.topology.name == "shortcuts" and spec.topology.shortcuts == "0:4*0.5,1:2"
    assert spec.with_values({"topology.name": "none"}) == base  # nothing else differs


def test_score_is_the_first_logged_step_at_the_target_on_a_real_run():
    run = explorer.train(challenge.challenge_spec(challenge.reference()["design"]))  # the whole step cap
    losses = {row["step"]: row["loss"] for row in run.history}
    steps = challenge.score(run)
    assert steps is not None and losses[steps] <= challenge.CHALLENGE.target_loss
    assert all(loss > challenge.CHALLENGE.target_loss for step, loss in losses.items() if step < steps)
    assert challenge.score(run.history) == challenge.score(run.summary()) == steps
    # training stops at the target: the same score, without the steps after it
    stopped = challenge.train_design(challenge.reference()["design"])
    assert challenge.score(stopped) == steps and stopped.history[-1]["step"] == steps


def test_the_reference_beats_no_shortcut_and_the_slow_shortcut():
    reference = challenge.reference()
    assert reference["design"] == f"0:{challenge.CHALLENGE.depth - 1}" and "Theorem 3.3" in reference["why"]
    assert reference["steps"] is not None and reference["steps"] < challenge.CHALLENGE.base.train.steps
    rows = [challenge.entry(d, challenge.train_design(d)) for d in ("none", "0:1", reference["design"])]
    table = challenge.ranked(rows)
    assert table[0]["design"] == reference["design"] and table[0]["steps"] == reference["steps"]
    for row in table[1:]:  # neither reaches the target within the step cap, and both end far above it
        assert row["steps"] is None and row["final_loss"] > 100 * challenge.CHALLENGE.target_loss


def test_the_widget_draws_trains_and_keeps_the_table():
    pytest.importorskip("ipywidgets")
    from explorer.design_widget import DesignWidget

    board = DesignWidget()
    assert len(board.toggles) == challenge.CHALLENGE.depth * (challenge.CHALLENGE.depth + 1) // 2
    board.toggles[(0, 1)].value = True
    board.toggles[(1, 3)].value = True
    board.toggles[(2, 4)].value = True
    assert "too many" in board.label.value
    assert board.train() is None and "at most 2" in str(board.out.outputs)
    board.draw(challenge.reference()["design"])
    assert board.design == challenge.reference()["design"]
    row = board.train()
    assert row["steps"] == challenge.reference()["steps"]
    assert board.table[0]["design"] == row["design"] and math.isfinite(row["final_loss"])
    assert "plotly" in str(board.out.outputs) and row["design"] in board.table_text()


# ---- what is scored: the same design however it is written, and a reason for every run that is not --------

def _wired(text: str) -> explorer.ExperimentSpec:
    """The challenge's set-up with the shortcuts field holding `text` as typed."""
    return challenge.CHALLENGE.base.with_values({"topology.name": "shortcuts", "topology.shortcuts": text})


def _history(reached_at: int | None, steps: int = 20) -> list[dict]:
    """A logged history whose loss first reaches the target at `reached_at` (None: never)."""
    target = challenge.CHALLENGE.target_loss
    return [{"step": s, "loss": target / 2 if reached_at is not None and s >= reached_at else 1.0}
            for s in range(steps + 1)]


@pytest.mark.parametrize("typed, design", [("0:4 ", "0:4"), ("0:4*1", "0:4"), (" 0:4*1.0 ", "0:4"),
                                           ("1:3,0:4", "0:4,1:3"), ("0:4*0.5", "0:4*0.5")])
def test_a_design_is_scored_however_it_is_written(typed, design):
    spec = _wired(typed)
    assert spec.topology.shortcuts == typed  # the spec keeps the text as typed
    assert challenge.design_of(spec) == design
    row = challenge.judge(spec, _history(7))
    assert "why" not in row and row["design"] == design and row["steps"] == 7
    assert challenge.score({"spec": spec.to_dict(), "history": _history(7)}) == 7


def test_the_same_design_written_two_ways_is_one_row_of_the_table():
    rows = [challenge.judge(_wired(text), _history(at)) for text, at in (("0:4 ", 9), ("0:4*1", 5), ("1:3,0:4", 8))]
    table = challenge.ranked(rows)
    assert [(r["design"], r["steps"]) for r in table] == [("0:4", 5), ("0:4,1:3", 8)]


@pytest.mark.parametrize("changes, field, words", [
    ({"optim.lr": 0.02}, "optim.lr", ["0.02", str(challenge.CHALLENGE.base.optim.lr)]),
    ({"optim.lr": 0.02, "train.steps": 50}, "optim.lr", ["0.02"]),  # the first field that differs is named
    ({"train.log_every": 10}, "train.log_every", ["10", "1"]),
    ({"model.depth": 6}, "model.depth", ["6", str(challenge.CHALLENGE.depth)]),
    ({"optim.name": "sgd"}, "optim.name", ["'sgd'", f"'{challenge.CHALLENGE.base.optim.name}'"]),
    ({"topology.learnable": True}, "topology.learnable", ["True", "False"]),
    ({"topology.shortcuts": "0:1,0:2,0:4"}, "topology.shortcuts", ["at most 2"]),
])
def test_a_run_that_is_not_scored_says_why_in_one_line(changes, field, words):
    spec = _wired("0:4").with_values(changes)
    row = challenge.judge(spec, _history(3))
    assert row["design"] is None and "steps" not in row
    why = row["why"]
    assert why.startswith(f"{field}: ") and "\n" not in why, why
    assert all(word in why for word in words), why
    with pytest.raises(explorer.SpecError) as refused:  # score refuses the run's summary with the same line
        challenge.score({"spec": spec.to_dict(), "history": _history(3)})
    assert str(refused.value) == why


def test_where_it_trains_is_not_part_of_the_challenge():
    assert challenge.design_of(_wired("0:4").with_values({"train.device": "cpu"})) == "0:4"


def test_a_rewired_or_stopped_run_is_not_scored_and_says_why():
    spec = _wired("0:4")
    rewired = challenge.judge(spec, _history(3), rewires=[{"step": 2, "topology": {"name": "shortcuts"}}])
    assert "rewired at step 2" in rewired["why"]
    stopped = challenge.judge(spec, _history(None), status="stopped")
    assert stopped["design"] == "0:4" and stopped["why"].startswith("stopped at step 20") and "\n" not in stopped["why"]
    # a run stopped once it reached the target (as train_design stops) is scored; a diverged one ranks as not reached
    assert challenge.judge(spec, _history(4), status="stopped")["steps"] == 4
    assert challenge.judge(spec, _history(None), status="diverged")["steps"] is None


def test_score_refuses_a_library_run_of_another_set_up():
    spec = challenge.challenge_spec("0:4").with_values({"optim.lr": 0.02, "train.steps": 3})
    run = explorer.train(spec)
    with pytest.raises(explorer.SpecError) as refused:
        challenge.score(run)
    assert refused.value.path == "optim.lr" and "0.02" in refused.value.message


def test_the_widget_does_not_train_a_design_the_rules_refuse():
    pytest.importorskip("ipywidgets")
    from explorer.design_widget import DesignWidget

    board = DesignWidget()
    for pair in ((0, 1), (0, 2), (0, 4)):
        board.toggles[pair].value = True
    assert board.button.disabled and "too many" in board.label.value
    assert board.train() is None and board.entries == []
    board.toggles[(0, 1)].value = False
    assert not board.button.disabled


# ---- the Train page's challenge -------------------------------------------------------------------------------

def test_the_train_page_does_not_queue_a_design_the_rules_refuse(open_page):
    from conftest import plain

    too_many = "0:1,0:2,0:4"
    at = open_page("train")
    at.button(key="challenge-load").click().run()
    at.text_input(key="spec:topology.shortcuts.shortcuts").set_value(too_many).run()
    assert not at.exception
    at.button(key="train-start").click().run()
    assert not at.exception and "train-job" not in at.session_state
    with pytest.raises(explorer.SpecError) as refused:
        challenge.challenge_spec(too_many)
    shown = [plain(w.value) for w in at.warning if "Not started" in plain(w.value)]
    assert len(shown) == 1 and "topology.shortcuts" in shown[0] and refused.value.message in shown[0], shown


def test_the_train_page_says_why_a_run_at_another_learning_rate_is_not_scored(open_page):
    import time
    import urllib.parse

    from conftest import plain

    spec = challenge.challenge_spec("0:4").with_values({"optim.lr": 0.02, "train.steps": 5})
    at = open_page("train", query=dict(urllib.parse.parse_qsl(spec.to_query())))
    at.button(key="train-start").click().run()
    deadline = time.time() + 300
    while time.time() < deadline and at.session_state["train-job"].view().active:
        time.sleep(0.3)
    at.run()
    assert not at.exception
    panel = next(e for e in at.expander if e.label == "Design challenge")
    lines = [plain(m.value) for m in panel.markdown if "Not scored" in plain(m.value)]
    assert len(lines) == 1 and "optim.lr" in lines[0] and "0.02" in lines[0], lines
    assert not panel.dataframe  # nothing scored


# ---- the answer against the table, and how a table reads -------------------------------------------------------

def _row(design: str, steps: int | None, loss: float = 1e-7) -> dict:
    return {"design": design, "shortcuts": design.count(":"), "steps": steps, "final_loss": loss}


def test_equal_steps_rank_by_the_last_loss_then_keep_their_order():
    rows = [_row("0:4", 120, 9e-7), _row("0:2,0:4", 120, 4e-7), _row("0:3", 120, 4e-7), _row("0:1", 90, 9e-7)]
    assert [r["design"] for r in challenge.ranked(rows)] == ["0:1", "0:2,0:4", "0:3", "0:4"]


def test_a_design_that_beats_the_answer_in_the_table_is_said_so():
    answer = challenge.REFERENCE_DESIGN
    rows = challenge.ranked([_row(answer, 144), _row("0:2,0:4", 135), _row("0:1", None, 0.3)])
    line = challenge.against_answer(rows)
    assert line.startswith("A design in the table beat the answer: 0:2,0:4 reached 1e-06 in 135 steps against "
                           f"{answer} in 144."), line
    assert challenge.against_answer(challenge.ranked([_row(answer, 144), _row("0:3", 150)])) == \
        f"No design in the table beat the answer yet: {answer} reached 1e-06 in 144 steps."
    assert challenge.against_answer(challenge.ranked([_row("0:2,0:4", 135)])) is None  # the answer's steps unknown
    assert challenge.against_answer([]) is None


def test_losses_read_in_three_significant_digits_and_the_texts_name_no_file():
    assert challenge.loss_text(4.0e-13) == "4e-13" and challenge.loss_text(0.123456) == "0.123"
    assert challenge.loss_text(None) == challenge.loss_text(math.nan) == "not finite"
    shown = [challenge.CHALLENGE.text, challenge.reference(measure=False)["why"],
             challenge.against_answer(challenge.ranked([_row(challenge.REFERENCE_DESIGN, 144), _row("0:2,0:4", 135)]))]
    for text in shown:
        assert not re.search(r"\w+\.(py|json|ipynb|sqlite)\b|explorer/", text), text
