"""A notebook widget to draw a shortcut design for the design challenge (explorer.challenge) and train it.

One toggle button per shortcut i:j of the challenge's K-block linear net (rows: the state x_j, block j's output,
that the shortcut adds to; columns: the source state x_i; each toggle's tooltip is `describe_shortcut`'s sentence),
the chain x_0 -> W_1 -> ... -> W_K shown above it (the net itself,
not a shortcut), a weight for the drawn shortcuts, and a Train button that trains the design with a progress bar,
draws its loss curve beside the best other design so far and keeps the session's table of designs tried:

    from explorer.design_widget import DesignWidget
    board = DesignWidget()
    board            # displays the widget
    board.table      # the designs tried, best first (explorer.challenge.ranked)
"""

from __future__ import annotations

import html
from typing import Any

from explorer import plots
from explorer.challenge import CHALLENGE, PATH, entry, ranked, train_design
from explorer.registries import SpecError
from explorer.topology import SHORTCUT_NOTATION, describe_shortcut, parse_shortcuts, shortcuts_text, state_label


class DesignWidget:
    """The challenge's design board: toggles, a weight, Train, an Output for the progress bar and the figures."""

    def __init__(self) -> None:
        import ipywidgets as widgets  # the notebooks' extra (pip install .[notebooks])

        k = CHALLENGE.depth
        self.toggles: dict[tuple[int, int], Any] = {}
        cell = widgets.Layout(width="58px")
        head = widgets.Layout(width="190px")
        rows = [widgets.HBox([widgets.Label("into x_j  \\  from x_i", layout=head)]
                             + [widgets.Label(f"x_{i}", layout=cell) for i in range(k)])]
        for j in range(1, k + 1):
            buttons = []
            for i in range(k):
                if i < j:
                    button = widgets.ToggleButton(description=f"{i}:{j}", layout=cell,
                                                  tooltip=describe_shortcut(i, j, k))
                    button.observe(self._on_change, names="value")
                    self.toggles[(i, j)] = button
                    buttons.append(button)
                else:
                    buttons.append(widgets.Label("", layout=cell))
            rows.append(widgets.HBox([widgets.Label(state_label(j), layout=head)] + buttons))
        chain = " → ".join(["x_0"] + [f"W_{j} → x_{j}" for j in range(1, k + 1)])
        self.weight = widgets.BoundedFloatText(value=1.0, min=-10.0, max=10.0, step=0.1, description="weight",
                                               tooltip="the weight w of every drawn shortcut (x_j gets + w x_i)")
        self.weight.observe(self._on_change, names="value")
        self.label = widgets.HTML()
        self.button = widgets.Button(description="Train", button_style="primary",
                                     tooltip="train the drawn design until it reaches the target or the step cap")
        self.button.on_click(self.train)
        self.out = widgets.Output()
        self.entries: list[dict[str, Any]] = []
        self._curves: dict[str, dict[str, Any]] = {}
        self.box = widgets.VBox([
            widgets.HTML(f"<b>{CHALLENGE.text}</b><br>the chain (always there): {chain}<br>a shortcut "
                         f"{html.escape(SHORTCUT_NOTATION)}"),
            *rows, widgets.HBox([self.weight, self.button]), self.label, self.out])
        self._on_change()

    # ---- the design -------------------------------------------------------------------------
    @property
    def design(self) -> str:
        """The drawn design as challenge text, e.g. "0:4" or "0:2*0.5,0:4*0.5"; "none" when nothing is drawn."""
        w = float(self.weight.value)
        return shortcuts_text({pair: w for pair, button in self.toggles.items() if button.value}) or "none"

    def draw(self, design: str) -> None:
        """Set the toggles and the weight to `design` ("0:4", "1:2,3:4", "0:4*0.5"; one weight for all)."""
        weights = {} if design.strip().lower() in ("", "none") else parse_shortcuts(design, CHALLENGE.depth, PATH)
        if len(set(weights.values())) > 1:
            raise SpecError(PATH, f"{design!r} has different weights; the board draws one weight for all its "
                                  "shortcuts: give them the same weight")
        self.weight.value = next(iter(weights.values()), 1.0)
        for pair, button in self.toggles.items():
            button.value = pair in weights

    def _on_change(self, _: Any = None) -> None:
        count = sum(button.value for button in self.toggles.values())
        over = count > CHALLENGE.max_shortcuts
        self.button.disabled = over  # a design the rules refuse is not trained (`train` refuses it too)
        self.label.value = (f"design: <code>{self.design}</code> ({count} of at most {CHALLENGE.max_shortcuts} "
                            "shortcuts)" + (" <b>: too many, untoggle one</b>" if over else ""))

    # ---- training -----------------------------------------------------------------------------
    def train(self, _: Any = None) -> dict[str, Any] | None:
        """Train the drawn design with a progress bar, draw its loss curve and record it; returns its table row
        (None, with the reason in the Output, when the design breaks the rules)."""
        design = self.design
        try:
            run = train_design(design, callbacks=[plots.training_progress(self.out, design,
                                                                          CHALLENGE.base.train.steps)])
        except SpecError as error:
            plots.show_in(self.out, f"not trained: {error}")
            return None
        row = entry(design, run)
        self.entries.append(row)
        # a run stopped at the target has finished the challenge: its curve is drawn as finished
        status = "finished" if row["steps"] is not None else run.status
        self._curves[row["design"]] = {**run.summary(), "status": status, "label": row["design"]}
        others = [other["design"] for other in self.table if other["design"] != row["design"]]
        shown = [self._curves[row["design"]]] + [self._curves[d] for d in others[:1]]  # beside the best other one
        result = (f"reached {CHALLENGE.target_loss:g} at step {row['steps']}" if row["steps"] is not None else
                  f"did not reach {CHALLENGE.target_loss:g} within {CHALLENGE.base.train.steps} steps")
        fig = plots.loss_curves(shown, show_val=False, title=f"{row['design']}: {result}")
        plots.show_in(self.out, fig, self.table_text())
        return row

    @property
    def table(self) -> list[dict[str, Any]]:
        """The session's designs tried, best first, each once (explorer.challenge.ranked)."""
        return ranked(self.entries)

    def table_text(self) -> str:
        """The table as text: rank, design, steps to the target (or the last loss)."""
        lines = ["designs tried, best first:"]
        for n, row in enumerate(self.table, start=1):
            reached = (f"{row['steps']} steps" if row["steps"] is not None else
                       f"not reached (last loss {row['final_loss']:.3g})" if row["final_loss"] is not None
                       else "not reached")
            lines.append(f"{n:2d}. {row['design']:<22s} {reached}")
        return "\n".join(lines)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.box)

