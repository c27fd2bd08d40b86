"""The run's diagnosis, the same on Train, Inside and Compare: `explorer.diagnose` on the run's spec (the papers'
quantities measured on its model at initialisation, built with the run's seed, against each theory's prediction),
in two levels: three short lines a projector can show (`explanation`), then, folded, the full paragraph and the
table behind it (`show_table`)."""

from __future__ import annotations

import streamlit as st

import explorer
from explorer.registries import SpecError

from . import messages


def compute(spec) -> explorer.Diagnosis | str:
    """The diagnosis of `spec`, or one line saying why there is none here (the memory caps explorer.diagnose
    checks, a spec this server cannot build, anything else): the page goes on without it."""
    try:
        return explorer.diagnose(spec)
    except SpecError as refused:
        return f"No diagnosis here: {messages.spec_error(refused)}"
    except Exception as error:  # noqa: BLE001  (the run's own result matters more than its diagnosis)
        return f"No diagnosis: it could not be computed ({messages.failure(error)})."


def explanation(diagnosis: explorer.Diagnosis | str, run) -> str:
    """Why `run` diverged or stalled in three short lines (`Diagnosis.summary_lines`: what grew, the bound it
    broke, what to try) as escaped markdown: a list after a paragraph break, so that the lines stand apart from
    the page's own words before them. Or the line saying why there is no diagnosis."""
    if not isinstance(diagnosis, explorer.Diagnosis):
        return diagnosis
    return "\n\n" + "\n".join(f"- {messages.escape(line)}" for line in diagnosis.summary_lines(run))


def show_table(table: list | explorer.Diagnosis | str | None, expanded: bool = False, run=None,
               detail: str | None = None) -> None:
    """The detail, folded (open when `expanded`): for a diagnosis and the `run` that failed, the full paragraph
    (`Diagnosis.explain`, or `detail` given with a table's rows) above the table of the measured quantities against
    their predictions (a diagnosis, or its table's rows); the verdict comes first and every cell wraps, so all of
    it reads at 1280 px. Nothing for a line saying why there is no diagnosis."""
    if isinstance(table, explorer.Diagnosis):
        if run is not None and explorer.diagnosis.outcome(run).failed:
            detail = table.explain(run)
        table = table.table()
    if not table or isinstance(table, str):
        return
    label = "Diagnosis: why, in detail" if detail else "Diagnosis: the papers' quantities on this model"
    with st.expander(label, icon=":material/troubleshoot:", expanded=expanded):
        if detail:
            st.markdown(messages.escape(detail))
        st.caption("Measured on the model at initialisation (built with the run's seed), against each paper's "
                   "prediction or bound; the verdict says how it stands.")
        st.table(table, hide_index=True)
