"""Inside: pick a run (a stored one or the live one) and probe it.

Probes (explorer.probe) run on the run's weights, from its checkpoint in the run store, or, for a
run still training, from a copy the training thread takes at its next logged step. Their results
are drawn with the same figures as the notebooks (explorer.plots.probe_figures). Probe results
recorded while the run trained can be scrubbed step by step.
"""

import numpy as np
import streamlit as st

import explorer
from explorer import plots
from explorer.nn import reference
from explorer.probes import validation_tensors
from explorer.registries import SpecError
from explorer.runs import StoreError
from explorer_app import figures, messages, spec_form, state

PROBES = explorer.registry("probes")

st.title("Inside")
st.caption("Look inside a trained (or training) network: Jacobian and weight spectra, ranks, norms by block, "
           "dead units, attention maps, PCA feature maps with a dense probe's score, shortcut coefficients.")

# ---- which run -----------------------------------------------------------------------------------
store = state.store()
live = {job.view().run_id: job for job in state.session_jobs() if job.view().run_id}
show_all = st.toggle("Show all runs in the store", key="inside-all",
                     help="Off: the runs this browser session started. On: every run saved on this server.")
listing = store.list(limit=200 if show_all else 500)
if listing.notice():  # damaged rows are skipped, and said so
    st.warning(messages.escape(listing.notice()), icon=":material/warning:")
records = listing if show_all else [r for r in listing if r["id"] in live]
if not records:
    st.info("No runs yet. Train one on the **Train** page (or turn on *Show all runs in the store*).",
            icon=":material/info:")
    st.stop()


def describe(record: dict) -> str:
    status = record["status"] + (f" at step {record['diverged_at']}" if record.get("diverged_at") is not None else "")
    live_mark = " · live" if record["id"] in live and live[record["id"]].view().active else ""
    return f"{record['id'][:8]} · {record.get('label') or 'unlabelled'} · {status}{live_mark}"


by_id = {record["id"]: record for record in records}
run_id = st.selectbox("Run", list(by_id), format_func=lambda i: describe(by_id[i]), key="inside-run")
try:
    record = store.get(run_id)
except StoreError as damaged:  # its history or probe rows do not decode
    st.warning(messages.escape(damaged), icon=":material/warning:")
    st.stop()
spec = explorer.ExperimentSpec.from_dict(record["spec"])
with st.expander("Its experiment"):
    st.code(spec.to_json(), language="json")
with st.expander("The code this model runs"):
    st.caption("The same forward pass as the model's, written out with plain torch ops (explorer/nn/reference.py): "
               "the model, then how its topology mixes the blocks' outputs.")
    try:
        for text in reference.sources(spec.model.name, spec.topology.name):
            st.code(text, language="python")
    except LookupError as missing:
        st.info(str(missing), icon=":material/info:")


def load_weights(run_id: str) -> tuple[int, dict] | None:
    """(step, state_dict) of the run: a live copy when it is training in this session, else its checkpoint."""
    job = live.get(run_id)
    if job is not None and job.view().active:
        return job.model_state()
    checkpoint = store.load_checkpoint(run_id)
    if checkpoint is None:
        return None
    return int(checkpoint.get("step", record.get("steps_done") or 0)), checkpoint["model"]


# ---- probe it now --------------------------------------------------------------------------------
st.subheader("Probe the weights")
left, right = st.columns([2, 1])
chosen = left.multiselect("Probes", list(PROBES), default=["jacobian", "weights", "norms"], key="inside-probes",
                          help="\n".join(f"- **{name}**: {text}" for name, text in PROBES.describe().items()))
inputs = right.slider("validation inputs", 1, 64, 8, key="inside-inputs",
                      help="How many validation examples the probes look at.")
options = {}
for name in chosen:
    params = [p for p in PROBES[name].params if p.name != "max_inputs"]
    if params:
        with st.expander(f"{name} options"):
            options[name] = {p.name: spec_form.param_widget(p, f"inside-opt:{name}.{p.name}") for p in params}

def probe_now(run_id: str) -> dict:
    """Probe the run's weights with the chosen probes: {"run", "step", "results", "errors"}, or {"run", "error"}."""
    try:
        weights = load_weights(run_id)
    except StoreError as damaged:  # a damaged checkpoint file: which one and what to do, on one line
        return {"run": run_id, "error": messages.escape(damaged)}
    if weights is None:
        return {"run": run_id, "error": "this run has no saved weights yet (it is queued, or was recorded without "
                                        "a checkpoint); train it first"}
    step, state_dict = weights
    model, data = explorer.build(spec, device="cpu")
    try:
        model.load_state_dict(state_dict)
    except (RuntimeError, KeyError, TypeError) as error:
        return {"run": run_id, "error": f"the saved weights do not fit this run's model ({messages.failure(error)})"}
    model.eval()
    results, errors = {}, {}
    progress = st.progress(0.0, text="probing...")
    for i, name in enumerate(chosen):
        progress.progress(i / len(chosen), text=f"probing: {name}")
        extra = validation_tensors(name, data, inputs)
        if any(p.name == "max_inputs" for p in PROBES[name].params):
            extra["max_inputs"] = inputs
        try:
            results[name] = explorer.probe(model, data.x_val[:inputs], name, **extra, **options.get(name, {}))
        except SpecError as error:
            errors[name] = messages.spec_error(error)
    progress.progress(1.0, text=f"probed at step {step}")
    return {"run": run_id, "step": step, "results": results, "errors": errors}


if st.button("Probe", type="primary", key="inside-run-probes", icon=":material/biotech:", disabled=not chosen):
    st.session_state["inside-results"] = probe_now(run_id)

shown = st.session_state.get("inside-results")
if shown and shown["run"] == run_id:
    if "error" in shown:
        st.warning(shown["error"], icon=":material/warning:")
    else:
        for name, message in shown["errors"].items():
            st.warning(f"{name} does not apply here: {message}", icon=":material/warning:")
        for name, result in shown["results"].items():
            st.markdown(f"#### {name} (step {shown['step']})")
            numbers = {key: float(np.mean(value)) for key, value in result.items()
                       if np.asarray(value).dtype.kind in "fiu" and np.asarray(value).ndim <= 1
                       and key in ("chi", "rank", "miou", "kappa", "param_kappa", "input_kappa", "param_rank")}
            if numbers:
                st.caption(" · ".join(f"mean {key} {value:.4g}" for key, value in numbers.items()))
            for i, fig in enumerate(plots.probe_figures(name, result, f"{run_id[:8]} step {shown['step']}")):
                figures.show(fig, key=f"inside-{name}-{i}", name=f"{run_id[:8]}-{name}-{i}")

# ---- what was recorded while it trained ----------------------------------------------------------
recorded = record["probes"]
if recorded:
    st.subheader("Recorded while it trained")
    names = sorted({row["name"] for row in recorded})
    name = st.selectbox("Recorded probe", names, key="inside-recorded-name")
    rows = [row for row in recorded if row["name"] == name]
    steps = [row["step"] for row in rows]
    step = st.select_slider("step", steps, value=steps[-1], key="inside-recorded-step") if len(steps) > 1 else steps[0]
    result = next(row["result"] for row in rows if row["step"] == step)
    for i, fig in enumerate(plots.probe_figures(name, result, f"{run_id[:8]} step {step}")):
        figures.show(fig, key=f"inside-recorded-{i}", name=f"{run_id[:8]}-{name}-step{step}-{i}")
