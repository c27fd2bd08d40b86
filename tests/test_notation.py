"""One notation for a shortcut i:j: the library's `describe_shortcut` says what it does, and every surface that
explains a shortcut (the Train page's design editor, the coefficient heatmap, the challenge's answer, the notebooks'
design board and explanation cells, the Papers page's summary) names the same source state and the same block."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import explorer
from explorer import challenge, plots
from explorer.papers import PAPERS
from explorer.topology import SOURCE_STATE, TARGET_STATE, Shortcuts, describe_shortcut, state_label, target_label

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = 5
# (i, j, weight) on a net of BLOCKS blocks
CASES = [(0, 1, 1.0), (0, 4, 1.0), (1, 3, 1.0), (2, 5, 0.5)]


def text_of(html: str) -> str:
    """Hover or label text as read: tags dropped, line breaks as spaces."""
    return re.sub(r"<[^>]+>", "", html.replace("<br>", " "))


def from_markdown(source: str) -> str:
    """A markdown cell's text with its LaTeX written plainly: "$x_{j}$" and "$i{:}j$" read "x_j" and "i:j"."""
    return re.sub(r"\s+", " ", source.replace("$", "").replace("{", "").replace("}", ""))


def test_describe_shortcut_says_what_the_topology_computes():
    """The sentence for 0:2 on 3 blocks, checked against a run: x_2 = f_2(x_1) + x_0 is what block 3 reads (ANCRe's
    W_3 (W_2 W_1 + I) X), and the block after a weighted shortcut reads w x_i on top of its predecessor's output."""
    assert describe_shortcut(0, 2, 3) == "0:2 adds x_0 (the input) to block 2's output, x_2, which block 3 reads"
    assert describe_shortcut(2, 5, 5, 0.5) == ("2:5*0.5 adds 0.5 times x_2 (block 2's output) to block 5's output, "
                                               "x_5, the network's output")
    assert state_label(0) == "x_0 (the input)" and state_label(3) == "x_3 (block 3's output)"
    assert explorer.describe_shortcut is describe_shortcut and explorer.state_label is state_label
    assert explorer.SHORTCUT_NOTATION.startswith("i:j adds the state " + SOURCE_STATE + " to " + TARGET_STATE)
    with pytest.raises(ValueError):
        describe_shortcut(2, 2, 3)
    with pytest.raises(ValueError):
        target_label(4, 3)

    torch.manual_seed(0)
    weights = [torch.randn(2, 2) for _ in range(BLOCKS)]
    for i, j, w in CASES + [(0, 2, 1.0)]:
        seen = []  # what each block reads

        def block(k):
            def f(x):
                seen.append(x)
                return x @ weights[k].T
            return f

        x0 = torch.randn(4, 2)
        out = Shortcuts(BLOCKS, {(i, j): w}).run(x0, [block(k) for k in range(BLOCKS)], [lambda y: y] * BLOCKS)
        states = [x0]
        for k in range(BLOCKS):  # the chain alone, then the shortcut where the sentence puts it
            y = states[-1] @ weights[k].T
            states.append(y + w * states[i] if k + 1 == j else y)
        read = seen[j] if j < BLOCKS else out  # "which block j+1 reads", or the network's output
        torch.testing.assert_close(read, states[j])
        torch.testing.assert_close(seen[j - 1], states[j - 1])  # block j itself reads x_{j-1}, without it


def test_design_editor_hovers_and_axes_use_the_sentence():
    from explorer_app import design_editor

    design = {(i, j): w for i, j, w in CASES}
    figure = design_editor.design_figure(BLOCKS, design).to_plotly_json()
    marks = next(t for t in figure["data"] if t["type"] == "scatter")
    hovers = {(int(c[0]), int(c[1])): text_of(c[3]) for c in marks["customdata"]}
    for i, j, w in CASES:
        assert hovers[(i, j)] == describe_shortcut(i, j, BLOCKS, w)
    chain = next(t for t in figure["data"] if t["name"] == "chain")
    skip = text_of(chain["customdata"][3 - 1][2])  # rows x_1.., columns x_0..: 2:3, the skip around block 3
    assert skip.startswith(describe_shortcut(2, 3, BLOCKS)) and "around block 3" in skip
    layout = figure["layout"]
    assert state_label(0) in layout["xaxis"]["title"]["text"]
    assert "x_j (block j's output)" in layout["yaxis"]["title"]["text"]


def _coefficients():
    spec = explorer.preset("ancre-fig2a-K4").with_values({
        "model.depth": BLOCKS, "topology.name": "shortcuts",
        "topology.shortcuts": explorer.shortcuts_text({(i, j): w for i, j, w in CASES})})
    model, data = explorer.build(spec)
    return explorer.probe(model, data.x_val[:4], "coefficients")


def test_coefficient_heatmap_hovers_and_axis_titles_use_the_sentence():
    result = _coefficients()
    figure = plots.coefficient_heatmap(result["own"], "own", result=result, basis="own").to_plotly_json()
    hover = figure["data"][0]["customdata"]
    for i, j, w in CASES:
        cell = text_of(hover[j][i])
        assert cell.startswith(describe_shortcut(i, j, BLOCKS)), cell  # cell (j, i): the shortcut i:j
        assert f"= {w:g}" in cell  # and its weight, the cell's value
        np.testing.assert_allclose(result["own"][j][i], w)
    assert SOURCE_STATE in figure["layout"]["xaxis"]["title"]["text"]
    assert TARGET_STATE in figure["layout"]["yaxis"]["title"]["text"]
    # the unrolled view's cells name the same destination state
    unrolled = plots.coefficient_heatmap(result["unrolled"], "u", result=result).to_plotly_json()
    for i, j, _ in CASES:
        assert target_label(j, BLOCKS) in text_of(unrolled["data"][0]["customdata"][j][i])


def test_challenge_answer_uses_the_sentence_cites_the_paper_by_title_and_explains_two_shortcuts():
    why = challenge.reference(measure=False)["why"]
    assert describe_shortcut(0, 4, BLOCKS) in why and describe_shortcut(0, 1, BLOCKS) in why
    assert PAPERS["ancre"].title in why and "Sec. 3.2" in why
    assert not re.search(r"[0-9]{3}_[0-9a-f]{16}\.txt", why + (challenge.__doc__ or ""))
    assert "0:2" in why and str(challenge.CHALLENGE.max_shortcuts) in why  # why 0:2 with 0:4 beats the answer
    assert challenge.REFERENCE_DESIGN == "0:4" and challenge.CHALLENGE.depth == BLOCKS


def test_design_board_labels_and_tooltips_use_the_sentence():
    pytest.importorskip("ipywidgets")
    from explorer.design_widget import DesignWidget

    board = DesignWidget()
    for i, j, _ in CASES:
        assert board.toggles[(i, j)].tooltip == describe_shortcut(i, j, BLOCKS)
    rows = board.box.children[1:1 + BLOCKS + 1]  # the header row, then one row per x_j
    labels = [row.children[0].value for row in rows]
    assert labels[1:] == [state_label(j) for j in range(1, BLOCKS + 1)]
    assert [c.value for c in rows[0].children[1:]] == [f"x_{i}" for i in range(BLOCKS)]
    assert board.toggles[(0, 4)] in rows[4].children  # 0:4 sits in the row of x_4, block 4's output


@pytest.mark.parametrize("name, example", [("00_quickstart", (0, 4, 5)), ("01_ancre", (0, 2, 3))])
def test_notebooks_define_i_j_as_the_library_does(name, example):
    notebook = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())
    cells = [from_markdown("".join(c["source"])) for c in notebook["cells"] if c["cell_type"] == "markdown"]
    defining = [c for c in cells if "adds the state x_i" in c]
    assert defining, f"{name} has no cell that defines i:j"
    assert all(explorer.SHORTCUT_NOTATION in c for c in defining)
    assert any(describe_shortcut(*example) in c for c in defining)


def test_papers_page_summary_quotes_the_notation():
    assert explorer.SHORTCUT_NOTATION in PAPERS["ancre"].summary
