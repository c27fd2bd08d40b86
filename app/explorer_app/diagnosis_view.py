"""The run's diagnosis, the same on Train, Inside and Compare: `explorer.diagnose` on the run's spec (the papers'
quantities measured on its model at initialisation, built with the run's seed, against each theory's prediction),
its explanation of a diverged or stalled run, and the table behind it."""

from __future__ import annotations

import streamlit as st

import explorer
from explorer.registries import SpecError

from . import messages

COLUMNS = {  # widths that keep the table's five columns readable at 1280 px
    "quantity": st.column_config.TextColumn(width="medium"),
    "measured": st.column_config.TextColumn(width="small"),
    "predicted / threshold": st.column_config.TextColumn(width="large"),
    "paper": st.column_config.TextColumn(width="medium"),
    "verdict": st.column_config.TextColumn(width="small"),
}


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
    """Why `run` diverged or stalled, in the papers' terms (escaped markdown), or the line saying why not."""
    return messages.escape(diagnosis.explain(run)) if isinstance(diagnosis, explorer.Diagnosis) else diagnosis


def show_table(table: list | explorer.Diagnosis | str | None, expanded: bool = False) -> None:
    """The measured quantities against their predictions (a diagnosis, or its table's rows), folded (open when
    the run failed); nothing for a line saying why there is no diagnosis."""
    if isinstance(table, explorer.Diagnosis):
        table = table.table()
    if not table or isinstance(table, str):
        return
    with st.expander("Diagnosis: the papers' quantities on this model", icon=":material/troubleshoot:",
                     expanded=expanded):
        st.caption("Measured on the model at initialisation (built with the run's seed), against each paper's "
                   "prediction or bound; the verdict says how it stands.")
        st.dataframe(table, hide_index=True, column_config=COLUMNS)
