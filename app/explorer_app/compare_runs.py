"""The Compare page's stored-run comparer: the runs this session started (or the newest in the store) in a
sortable table, and the runs picked from it compared: overlaid loss curves, shortcut-coefficient heatmaps side by
side and overlaid Jacobian spectra, with one colour per run in every figure; a live probe a run did not record is
computed from its checkpoint. The grid the page launched last (`current_grid`, kept in the session) is picked for
comparison when it ends."""

from __future__ import annotations

import numpy as np
import streamlit as st

import explorer
from explorer import plots
from explorer.probes import undefined
from explorer.registries import SpecError
from explorer.runs import StoreError

from . import diagnosis_view, figures, messages, state

MAX_RUNS = 12  # most runs one grid launches, and most runs compared at once
MAX_LISTED = 200  # newest store runs offered with "all runs in the store"
PROBE_INPUTS = 8  # validation examples the probes see, as explorer.train's live probes
LIVE_PROBES = {"coefficients": {}, "jacobian": {"max_inputs": 1}}  # the Jacobian of the first input only
HEATMAPS_PER_ROW = 3


def current_grid() -> dict | None:
    """The grid this session launched last (the page keeps it in the session), or None."""
    return st.session_state.get("compare-grid")


def grid_active() -> bool:
    grid = current_grid()
    return bool(grid) and any(job.view().active for job in grid["jobs"])


def listed_runs() -> list[dict]:
    """Store records offered for comparison: this session's runs, or with the toggle the newest in the store."""
    everything = st.toggle("All runs in the store", key="compare-all-runs",
                           help=f"Off: the runs this browser session started. On: the newest {MAX_LISTED} runs "
                                "in the store, from any session, sweep or the command line.")
    listing = state.store().list(limit=MAX_LISTED if everything else None)
    if listing.notice():  # damaged rows are skipped, and said so
        st.warning(messages.escape(listing.notice()), icon=":material/warning:")
    if everything:
        return listing
    mine = set(state.session_run_ids())
    return [record for record in listing if record["id"] in mine]


def choose_runs(records: list[dict]) -> list[str]:
    """The multiselect of runs; a grid that has just finished is selected for comparison."""
    by_id = {record["id"]: record for record in records}
    grid = current_grid()
    if grid and not grid["selected"] and not grid_active():
        st.session_state["compare-runs"] = [job.view().run_id for job in grid["jobs"]]
        grid["selected"] = True
    chosen = st.session_state.get("compare-runs", [record["id"] for record in records[:4]])
    st.session_state["compare-runs"] = [run_id for run_id in chosen if run_id in by_id][:MAX_RUNS]
    return st.multiselect("Runs", list(by_id), key="compare-runs", max_selections=MAX_RUNS,
                          format_func=lambda run_id: option_label(by_id[run_id]))


def record_steps(record: dict) -> str:
    """A stored run's `messages.steps_text`: "diverged at step 3 of 10", or "10 of 10 steps"."""
    return messages.steps_text(record["status"], record["steps_done"], record["spec"]["train"]["steps"],
                               record["diverged_at"])


def option_label(record: dict) -> str:
    name = record["label"] or record["id"][:8]
    status = "" if record["status"] == "diverged" else f"{record['status']} · "  # its steps say it diverged
    return f"{name} · {status}{record_steps(record)} · {record['id'][:6]}"


def load(run_ids: list[str]) -> list[dict]:
    records = []
    for run_id in run_ids:
        try:
            records.append(state.store().get(run_id))
        except SpecError:
            st.warning(f"Run {run_id[:8]} is no longer in the store.", icon=":material/warning:")
        except StoreError as damaged:  # its history or probe rows do not decode
            st.warning(messages.escape(damaged), icon=":material/warning:")
    return records


def display_labels(records: list[dict]) -> list[str]:
    """Each run's label, made unique: a repeated or missing label gets the run id's first characters."""
    names = [record["label"] or record["id"][:8] for record in records]
    return [f"{name} ({record['id'][:6]})" if names.count(name) > 1 else name for name, record in zip(names, records)]


def summary_row(label: str, record: dict) -> dict:
    """One run in the runs table: its spec values and final metrics."""
    final, spec = record["final"] or {}, record["spec"]
    diverged = record["status"] == "diverged" and record["diverged_at"] is not None
    return {"run": label, "status": record_steps(record) if diverged else record["status"],
            "steps": record["diverged_at"] if diverged else record["steps_done"],
            "model": spec["model"]["name"], "topology": spec["topology"]["name"], "depth": spec["model"].get("depth"),
            "width": spec["model"].get("width"), "init": spec["init"]["name"], "optimizer": spec["optim"]["name"],
            "lr": spec["optim"].get("lr"), "seed": spec["train"]["seed"], "loss": final.get("loss"),
            "val loss": final.get("val_loss"), "val accuracy": final.get("val_accuracy"),
            "diverged at": record["diverged_at"], "id": record["id"][:8]}


TABLE_IDS = "compare-table-ids"  # session state: the run id of each row of the runs table, in order


def compare_selected_rows() -> None:
    """Runs table callback (runs before the widgets are drawn): the selected rows become the compared runs."""
    rows = st.session_state["compare-table"]["selection"]["rows"]
    ids = st.session_state.get(TABLE_IDS, [])
    chosen = [ids[i] for i in rows if i < len(ids)][:MAX_RUNS]
    if chosen:
        st.session_state["compare-runs"] = chosen


def runs_table(records: list[dict]) -> None:
    """Every listed run with its spec values and final metrics: sort by clicking a column header, select
    rows (the checkboxes on the left) to overlay them below."""
    st.session_state[TABLE_IDS] = [record["id"] for record in records]
    # numbers at a fixed precision (the columns size to the formatted values); a value a run does not have (no
    # validation accuracy on regression, no divergence) is "-", not "None"
    whole = st.column_config.NumberColumn(format="%d")
    st.dataframe([summary_row(label, record) for label, record in zip(display_labels(records), records)],
                 hide_index=True, key="compare-table", on_select=compare_selected_rows, selection_mode="multi-row",
                 placeholder="-",
                 column_config={"steps": whole, "depth": whole, "width": whole, "seed": whole, "diverged at": whole,
                                "lr": st.column_config.NumberColumn(format="%.3g"),
                                "loss": st.column_config.NumberColumn(format="%.4g"),
                                "val loss": st.column_config.NumberColumn(format="%.4g"),
                                "val accuracy": st.column_config.NumberColumn(format="%.3f")})


def last_probe(record: dict, name: str) -> tuple[int, dict] | None:
    """(step, result) of the run's latest recorded `name` probe, or None."""
    found = [entry for entry in record["probes"] if entry["name"] == name]
    return (found[-1]["step"], found[-1]["result"]) if found else None


@st.cache_data(show_spinner=False, max_entries=256)
def checkpoint_probes(root: str, run_id: str, updated: float) -> dict:
    """Each live probe of a stored run's last checkpoint: {name: (step, result), or why it is missing}.
    Cached per store, run and run version (`updated`)."""
    store = state.store()
    try:
        checkpoint = store.load_checkpoint(run_id)
        model, data = explorer.build(store.spec(run_id), device="cpu")
        model.load_state_dict(checkpoint["model"])
    except Exception as error:  # a checkpoint that no longer fits its spec is reported; the page goes on
        reason = f"its checkpoint could not be loaded ({type(error).__name__}: {error})"
        return dict.fromkeys(LIVE_PROBES, reason)
    inputs, step = data.x_val[:PROBE_INPUTS], int(checkpoint.get("step", 0))
    found = {}
    for name, options in LIVE_PROBES.items():
        try:
            found[name] = (step, explorer.probe(model, inputs, name, **options))
        except SpecError as error:
            found[name] = error.message
        except Exception as error:  # noqa: BLE001  (said beside the figures; the page goes on)
            found[name] = f"it could not be computed from the checkpoint ({type(error).__name__}: {error})"
    return found


def probe_results(records: list[dict], labels: list[str]) -> list[dict]:
    """Per run {probe name: (step, result), or why it is missing}: the recorded probes, else computed from
    the run's checkpoint (with a progress bar while that happens)."""
    results = [{name: last_probe(record, name) for name in LIVE_PROBES} for record in records]
    missing = [i for i, found in enumerate(results) if None in found.values()]
    bar = st.progress(0.0) if missing else None
    for k, i in enumerate(missing):
        record = records[i]
        bar.progress(k / len(missing), text=f"Probing {labels[i]} from its checkpoint ({k + 1} of {len(missing)})")
        computed = (checkpoint_probes(str(state.store().root), record["id"], record["updated"])
                    if record["checkpoint"] else dict.fromkeys(LIVE_PROBES, "not recorded, and no checkpoint saved"))
        results[i] = {name: found or computed[name] for name, found in results[i].items()}
    if bar is not None:
        bar.empty()
    return results


def show_heatmaps(records: list[dict], labels: list[str], results: list[dict], basis: str) -> None:
    for start in range(0, len(records), HEATMAPS_PER_ROW):
        columns = st.columns(HEATMAPS_PER_ROW)
        for column, record, label, found in zip(columns, records[start:], labels[start:], results[start:]):
            with column:
                coefficients = found["coefficients"]
                shown = basis if isinstance(coefficients, str) else plots.coefficient_basis(coefficients[1], basis)
                if isinstance(coefficients, str) or shown not in coefficients[1]:
                    why = coefficients if isinstance(coefficients, str) else f"no {shown} basis recorded"
                    st.caption(f"**{messages.escape(label)}**: no coefficient heatmap: {messages.escape(why)}.")
                    continue
                step, result = coefficients
                # two short lines: a narrow column cut the one-line title ("unrolled at ste")
                fig = plots.coefficient_heatmap(result[shown], f"{label}<br><sub>{shown}, step {step}</sub>",
                                                log_ratio=shown == "log_ratio", blocks=result.get("blocks"),
                                                result=result, basis=shown)
                figures.show(fig, key=f"compare-heatmap-{record['id']}", name=f"{label}-coefficients")


def show_spectra(labels: list[str], results: list[dict], colors: dict[str, str]) -> None:
    """One figure of the runs' Jacobian spectra; a run whose spectrum is missing or undefined (a diverged run's
    non-finite weights) is named below it with the reason."""
    curves, left_out = {}, []
    for label, found in zip(labels, results):
        if isinstance(found["jacobian"], str):
            left_out.append(f"{label}: {found['jacobian']}")
            continue
        result = found["jacobian"][1]
        values = np.asarray(result["singular_values"][0], dtype=float)
        if np.isfinite(values).any():
            curves[label] = values
        else:
            why = undefined(result).get("singular_values") or "no finite singular value"
            left_out.append(f"{label}: {why}")
    if curves:
        fig = plots.spectra(curves, "Input-output Jacobian spectra of the block stack (first validation example)",
                            colors=colors)
        figures.show(fig, key="compare-spectra", name="jacobian-spectra")
    if left_out:
        st.caption("No Jacobian spectrum for " + messages.escape("; ".join(left_out)) + ".")


@st.cache_data(show_spinner=False, max_entries=256)
def diverged_explanation(root: str, run_id: str, updated: float) -> str:
    """One or two sentences on why a stored run diverged (explorer.diagnose on its spec at initialisation).
    Cached per store, run and run version (`updated`)."""
    store = state.store()
    return diagnosis_view.explanation(diagnosis_view.compute(store.spec(run_id)), store.get(run_id, arrays=False))


def compare_view() -> None:
    records = listed_runs()
    if not records:
        if st.session_state.get("compare-all-runs"):
            st.info("The run store is empty. Launch a grid above, train a run on the Train page, or record runs "
                    "with `explorer train` or `explorer sweep`.", icon=":material/info:")
        else:
            st.info("This session has not started any runs yet: launch a grid above or train one on the Train "
                    "page, or switch on **All runs in the store** to compare runs saved earlier.",
                    icon=":material/info:")
        return
    st.caption("All listed runs: click a column header to sort, tick rows to overlay them below.")
    runs_table(records)
    records = load(choose_runs(records))
    if not records:
        st.caption("Pick runs to compare.")
        return
    labels = display_labels(records)
    colors = plots.run_colors(labels)
    diverged = [f"**{messages.escape(label)}** at step {record['diverged_at']} of {record['spec']['train']['steps']}"
                for label, record in zip(labels, records) if record["status"] == "diverged"]
    if diverged:
        st.info("Diverged (marked x on the curves; a result, not an error): " + ", ".join(diverged) + ".",
                icon=":material/trending_up:")
        for label, record in zip(labels, records):
            if record["status"] == "diverged":
                why = diverged_explanation(str(state.store().root), record["id"], record["updated"])
                st.caption(f"**{messages.escape(label)}**: {why}")  # escaped by diagnosis_view
    curves = [{"label": label, "history": record["history"], "status": record["status"],
               "diverged_at": record["diverged_at"]} for label, record in zip(labels, records) if record["history"]]
    if curves:
        val, smooth, y_scale, x_scale = st.columns([2, 3, 2, 2])
        show_val = val.toggle("Validation curves (dashed)", value=True, key="compare-show-val")
        smoothing = smooth.slider("Smoothing (EMA weight)", 0.0, 0.99, 0.0, 0.01, key="compare-smoothing",
                                  help="Exponential moving average of each training curve, as in TensorBoard; "
                                       "the raw curve stays faint behind it. 0 = off.")
        log_y = y_scale.radio("Loss axis", ["log", "linear"], horizontal=True, key="compare-y-scale") == "log"
        log_x = x_scale.radio("Step axis", ["log", "linear"], horizontal=True, key="compare-x-scale") == "log"
        figures.show(plots.loss_curves(curves, colors=colors, show_val=show_val, title="Compare: training loss",
                                       smoothing=smoothing, log_y=log_y, log_x=log_x),
                     key="compare-loss", name="compare-loss")
    results = probe_results(records, labels)
    st.markdown("**Shortcut coefficients**: who feeds whom, one heatmap per run.")
    basis = st.selectbox("Heatmap basis", ["default", *plots.COEFFICIENT_BASES], key="compare-basis",
                         help="default: the learned coefficients (own) of a learnable topology such as ANCRe, "
                              "unrolled otherwise; unrolled: weight of each earlier branch output in each block's "
                              "input (comparable across topologies); own: the topology's own coefficients; "
                              "log_ratio: ANCRe's log(c_ij / max_j c) view.")
    show_heatmaps(records, labels, results, basis)
    show_spectra(labels, results, colors)
