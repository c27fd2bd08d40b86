"""Inside: pick a run (a stored one or the live one) and probe it.

Probes (explorer.probe) run as a job in a worker process (explorer_app.jobs.ProbeJob), never in the
server: the worker builds the run's model and data and loads its weights, from its checkpoint in the run
store, or, for a run still training, from a copy the training worker takes at its next logged step. The job
is refused before it is queued when its memory estimate (explorer.budget.check_probes) passes the server's
cap; each probe may run EXPLORER_PROBE_SECONDS. While it runs, a progress bar follows it (a live feed, or
without one a fragment on a timer) beside a Cancel button; its results are drawn with the same figures as
the notebooks (explorer.plots.probe_figures). Probe results recorded while the run trained can be scrubbed
step by step.

Above the probes, the run's diagnosis (explorer.diagnose, as on Train and Compare): the papers' quantities
measured on its model at initialisation against their predictions, and why it diverged or stalled. It is
computed here in the server on the model at initialisation only (no weights loaded, no training), within the
memory caps explorer.diagnose checks (explorer.budget), once per run and status.
"""

import json

import numpy as np
import streamlit as st

import explorer
from explorer import plots
from explorer.nn import reference
from explorer.registries import SpecError
from explorer.runs import StoreError
from explorer_app import diagnosis_view, figures, live_feed, messages, spec_form, state

PROBES = explorer.registry("probes")
REFRESH_S = 0.5  # without a feed: how often the probe job's progress redraws while it is active

st.title("Inside")
st.caption("Look inside a trained (or training) network: Jacobian and weight spectra, ranks, norms by block, "
           "dead units, attention maps, PCA feature maps with a dense probe's score, shortcut coefficients.")

# ---- which run -----------------------------------------------------------------------------------
# the choices, kept in the session: Streamlit drops them while another page shows
state.keep_choices("inside-choices", ("inside-all", "inside-run", "inside-probes", "inside-inputs"),
                   prefixes=("inside-opt:",))
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
with st.expander("Its experiment"):
    st.code(json.dumps(record["spec"], indent=2), language="json")
try:  # its form only: a run trained on a GPU, or on a data folder gone since, still opens here
    spec = store.spec(run_id)
except SpecError as unknown:  # it names a model, topology or dataset this server does not have
    st.warning(f"This run cannot be rebuilt on this server: {messages.spec_error(unknown)}", icon=":material/warning:")
    st.stop()
with st.expander("The code this model runs"):
    st.caption("The same forward pass as the model's, written out with plain torch ops (explorer/nn/reference.py): "
               "the model, then how its topology mixes the blocks' outputs.")
    try:
        for text in reference.sources(spec.model.name, spec.topology.name):
            st.code(text, language="python")
    except LookupError as missing:
        st.info(str(missing), icon=":material/info:")


@st.cache_data(show_spinner="Measuring the papers' quantities on this model...", max_entries=64)
def run_diagnosis(root: str, run_id: str, status: str) -> dict:
    """The stored run's diagnosis as {"table": rows, "explanation": three lines or None, "detail": the paragraph or
    None} (None while it trains, and when it ended neither diverged nor stalled), or {"error": text} where it cannot be computed here. Cached per
    store, run and status (an ended run's outcome does not change; one still training is explained when it ends)."""
    store = state.store()
    record = store.get(run_id, arrays=False)
    diagnosis = diagnosis_view.compute(store.spec(run_id))
    if not isinstance(diagnosis, explorer.Diagnosis):
        return {"error": diagnosis}
    failed = status in ("finished", "diverged") and explorer.diagnosis.outcome(record).failed
    return {"table": diagnosis.table(), "explanation": diagnosis_view.explanation(diagnosis, record) if failed else None,
            "detail": diagnosis.explain(record) if failed else None}


def show_diagnosis(found: dict, status: str) -> None:
    """The run's diagnosis: why it diverged or stalled (a warning, with the numbers and the papers' sections),
    and the table of measured against predicted quantities."""
    if "error" in found:
        st.caption(found["error"])
        return
    if found["explanation"]:  # three lines, already escaped; the paragraph is folded with the table
        st.warning(f"**{'Diverged' if status == 'diverged' else 'Stalled'}**: {found['explanation']}",
                   icon=":material/troubleshoot:")
    diagnosis_view.show_table(found["table"], detail=found["detail"])


show_diagnosis(run_diagnosis(str(store.root), run_id, record["status"]), record["status"])


def live_weights(run_id: str) -> tuple[int, dict] | None | bool:
    """(step, state_dict) of the run when it is training in this session (a copy its worker takes at its next
    logged step; None when none came), else False: the job loads the stored checkpoint itself."""
    job = live.get(run_id)
    if job is not None and job.view().active:
        return job.model_state()
    return False


# ---- probe it now --------------------------------------------------------------------------------
st.subheader("Probe the weights")
left, right = st.columns([2, 1])
st.session_state.setdefault("inside-probes", ["jacobian", "weights", "norms"])
st.session_state.setdefault("inside-inputs", 8)
chosen = left.multiselect("Probes", list(PROBES), key="inside-probes",
                          help="\n".join(f"- **{name}**: {text}" for name, text in PROBES.describe().items()))
inputs = right.slider("validation inputs", 1, 64, key="inside-inputs",
                      help="How many validation examples the probes look at.")
options = {}
for name in chosen:
    params = [p for p in PROBES[name].params if p.name != "max_inputs"]
    if params:
        with st.expander(f"{name} options"):
            options[name] = {p.name: spec_form.param_widget(p, f"inside-opt:{name}.{p.name}") for p in params}

NO_WEIGHTS = "this run has no saved weights yet (it is queued, or was recorded without a checkpoint); train it first"


def start_probes(run_id: str) -> None:
    """Queue the chosen probes of the run as a job of this session; a refusal (no weights, the memory estimate,
    the session's share of jobs) is shown in their place, with nothing queued."""
    st.session_state.pop("inside-results", None)
    weights = live_weights(run_id)
    if weights is None or (weights is False and not store.checkpoint_path(run_id).exists()):
        st.session_state["inside-results"] = {"run": run_id, "error": NO_WEIGHTS}
        return
    step, state_dict = weights if weights else (record.get("steps_done"), None)
    try:
        spec.check_runnable(device="cpu")  # probes run on this server's CPU, wherever the run was trained
    except SpecError as refused:  # its data folder is gone, or this server may not read it
        st.session_state["inside-results"] = {"run": run_id, "error": f"Not probed here: {messages.spec_error(refused)}"}
        return
    try:
        job = state.submit_probes(spec, {name: options.get(name, {}) for name in chosen}, inputs, run_id,
                                  state=state_dict, step=step)
    except SpecError as refused:  # the memory estimate: which probe, how many inputs fit
        st.session_state["inside-results"] = {"run": run_id,
                                              "error": f"Not probed: {messages.escape(refused.message)}"}
        return
    except state.SessionLimit as refused:
        st.session_state["inside-results"] = {"run": run_id, "error": f"Not probed: {messages.escape(refused)}"}
        return
    st.session_state["inside-job"] = job


def results_of(job) -> dict:
    """What a probe job that ended shows: {"run", "step", "results", "errors", "message"} ("message": why it
    ended early, None when all ran), or {"run", "error"} when it probed nothing."""
    view = job.view()
    message = None
    if view.status == "error":
        message = messages.escape(view.error)
    elif view.status in ("stopped", "cancelled"):
        message = "Cancelled" + (f" after {view.steps_done} of {view.total_steps} probes." if view.steps_done else ".")
    if message is not None and not view.results and not view.skipped:
        return {"run": job.run_id, "error": message}
    errors = {name: messages.spec_error(SpecError(*problem)) for name, problem in view.skipped.items()}
    return {"run": job.run_id, "step": view.probe_step, "results": view.results, "errors": errors, "message": message}


def stamp(view) -> str:
    """What the page shows of the probe job: when the feed's stamp differs, the page reruns."""
    return json.dumps([view.status])


def progress_of(view) -> tuple[float, str]:
    if view.status == "queued":
        return 0.0, f"waiting for a worker: number {view.queue_position} in line (EXPLORER_MAX_JOBS)"
    if view.current is None:
        return view.steps_done / max(view.total_steps, 1), "starting: loading the weights, the model and the data"
    return (view.steps_done / max(view.total_steps, 1),
            f"probing: {view.current} ({view.steps_done + 1} of {view.total_steps})")


def publish_feed(job) -> str | None:
    """Serve the probe job's progress to the browser (explorer_app.live_feed); None where no feed is served."""
    if not live_feed.served:
        return None

    def source() -> live_feed.State:
        view = job.view()
        return live_feed.State(stamp(view), view.active, progress_of(view))

    token = live_feed.publish(source, st.session_state.get("inside-feed"), key=job.id)
    st.session_state["inside-feed"] = token
    return token


def probe_progress() -> None:
    """The running probe job's progress and its Cancel button, in a fragment: it follows the feed, or without
    one redraws every REFRESH_S; the page reruns whole when the job ends."""
    if live_feed.stale():
        st.rerun(scope="app")
    job = st.session_state.get("inside-job")
    if job is None:
        return
    view = job.view()
    if not view.active:
        st.rerun(scope="app")
    token = publish_feed(job)
    fraction, text = progress_of(view)
    figures.progress(fraction, text, key="inside", feed=live_feed.link(token, "progress", "", stamp(view)))
    st.button("Cancel", key="inside-cancel", icon=":material/cancel:", on_click=job.stop,
              args=("Cancelled from the Inside page.",))


running = st.session_state.get("inside-job")
if running is not None and not running.active:  # it ended since the last run: its results take its place
    st.session_state["inside-results"] = results_of(running)
    del st.session_state["inside-job"]
if st.button("Probe", type="primary", key="inside-run-probes", icon=":material/biotech:",
             disabled=not chosen or "inside-job" in st.session_state,
             help="Runs in a worker process; one probe at a time per page."):
    start_probes(run_id)
if "inside-job" in st.session_state:
    st.fragment(run_every=None if live_feed.served else REFRESH_S)(probe_progress)()

shown = st.session_state.get("inside-results")
if shown and shown["run"] == run_id:
    if "error" in shown:
        st.warning(shown["error"], icon=":material/warning:")
    else:
        if shown["message"]:
            st.warning(shown["message"], icon=":material/warning:")
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
