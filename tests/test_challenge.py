"""The design challenge (explorer.challenge): its rules, its score on real runs, and the papers' reference answer."""

import math

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
