"""Train: set up an experiment, train it live, and watch its loss, shortcut heatmap and one probe.

The form (sidebar) is generated from the registries and mirrored in the URL. Training runs as a job
in a worker process (explorer_app.jobs); a fragment redraws the live view (buttons, status, loss) five times a
second while the job is active, reading only the rows logged since its last call, so the page and its buttons
stay responsive. Every run is saved in the run store. The buttons stay in that fragment: in a fragment of their
own, a click could land while the timer's rerun of another fragment cut theirs short, and the page kept
showing Resume (or Pause) for a run in the other state.
"""

import csv
import dataclasses
import io
import json
import urllib.parse

import streamlit as st

import explorer
from explorer import plots
from explorer.registry import SpecError
from explorer_app import figures, limits, messages, spec_form, state, uploads

REFRESH_S = 0.2  # the live view's refresh period while a job is active (five redraws per second)
PROBE_REFRESH_S = 1.0  # the heatmap's and the live probe's refresh period (results come every `probe every` steps)
LIVE_PROBE = "coefficients"  # always probed: the heatmap
# The probe shown beside it until the user picks another: norms per block apply to every model and cost
# about one forward pass. The Jacobian spectrum (a backward pass per output) cut a ViT's training 7x.
DEFAULT_PROBE = "norms"
probe_names = [name for name in explorer.registry("probes") if name != LIVE_PROBE]
caps = limits.limits()

st.title("Train")
st.caption("Pick data, an architecture, a residual topology and an initialisation in the sidebar, then press "
           "**Train**. The loss, the shortcut-coefficient heatmap and the probe you choose update while it trains. "
           "The address bar holds the whole experiment: copy it to share the set-up.")


# ---- the experiment, from the URL or the form --------------------------------------------------
def load_from_url() -> None:
    """Open the experiment a link names (a spec in the query, or ?preset=NAME); keep the form otherwise."""
    query = {key: st.query_params[key] for key in st.query_params}
    if not query or query == st.session_state.get("url_written"):
        return
    try:
        spec = explorer.preset(query["preset"]) if "preset" in query else explorer.ExperimentSpec.from_query(query)
    except SpecError as error:
        st.error(f"This link's experiment is not valid: {messages.spec_error(error)}. "
                 "The form shows the last valid set-up instead.", icon=":material/link_off:")
        st.session_state["url_written"] = query
        return
    spec_form.load_into_widgets(spec)
    st.session_state["url_written"] = None


def write_to_url(spec) -> None:
    params = state.train_page_params(spec)
    if {key: st.query_params[key] for key in st.query_params} != params:
        st.query_params.from_dict(params)
    st.session_state["url_written"] = params


KEEP_FORM = "(keep the form)"


def load_preset() -> None:
    """Button callback: it runs before the widgets are drawn, the only time their state may be set
    (setting it after the preset select was drawn raised StreamlitWidgetAlreadyInstantiatedError)."""
    spec_form.load_into_widgets(explorer.preset(st.session_state["train-preset"]))
    st.session_state["train-preset"] = KEEP_FORM


load_from_url()
with st.sidebar:
    st.subheader("Experiment")
    presets = explorer.registry("presets")
    chosen = st.selectbox("Start from a preset", [KEEP_FORM, *presets], key="train-preset",
                          help="A paper's set-up, scaled to run on a CPU. Loading it replaces the form.")
    if chosen != KEEP_FORM:
        st.button("Load preset", key="train-load-preset", on_click=load_preset)
    uploaded_spec = uploads.spec_uploader(caps, key="train-upload-spec")
    if uploaded_spec is not None:
        spec_form.load_into_widgets(uploaded_spec)
        st.rerun()
    form = spec_form.render(check=lambda spec: limits.check_spec(spec, caps))
    uploads.text_corpus_uploader(form.raw, caps, key="train-upload-text")
spec = form.spec
if form.error is not None:  # also here, beside Train, not only under its field in a collapsed section
    st.error(f"Train is off until this is fixed: {messages.spec_error(form.error)}", icon=":material/block:")
if spec is not None:
    write_to_url(spec)
    state.remember_train_spec(spec)

# ---- what to watch -----------------------------------------------------------------------------
left, middle, right = st.columns([2, 1, 1])
probe_name = left.selectbox("Live probe", probe_names, key="train-probe", index=probe_names.index(DEFAULT_PROBE),
                            help="Computed on a fixed validation batch while the run trains.")
left.caption(explorer.registry("probes").describe()[probe_name])  # in full: the select cut it off
probe_every = middle.number_input("probe every (steps)", min_value=1, max_value=100_000, value=50, key="train-probe-every")
heatmap_basis = right.selectbox("Heatmap basis", ["default", *plots.COEFFICIENT_BASES], key="train-basis",
                                help="default: the learned coefficients (own) of a learnable topology such as "
                                     "ANCRe, unrolled otherwise; unrolled: weight of each earlier branch output in "
                                     "each block's input (comparable across topologies); own: the topology's own "
                                     "coefficients; log_ratio: ANCRe's log(c_ij / max_j c) view.")


def start(spec) -> None:
    """Submit the run. Nothing is built here: the job builds the data and model in its turn, and leaves out
    a live probe that does not apply to this model, with a note saying why."""
    st.session_state.pop("train-message", None)
    label = f"{spec.model.name} {spec.topology.name} #{len(state.session_jobs()) + 1}"
    try:
        job = state.submit(spec, label, probes={LIVE_PROBE: {}, probe_name: {}}, probe_every=int(probe_every),
                           optional_probes=(probe_name,))
    except state.SessionLimit as refused:
        st.session_state["train-message"] = f"Not started: {messages.escape(refused)}"
        return
    st.session_state["train-job"] = job


def reset() -> None:
    job = st.session_state.pop("train-job", None)
    if job is not None:
        job.stop()
    st.session_state.pop("train-message", None)


# ---- live view ---------------------------------------------------------------------------------
def current_job():
    return st.session_state.get("train-job")


def read_view(job):
    """The job's view with its whole history, asking the job only for the rows logged since the last call."""
    job_id, rows = st.session_state.get("train-rows", (None, []))
    if job_id != job.id:
        rows = []
    view = job.view(since=len(rows))
    rows.extend(view.history)
    st.session_state["train-rows"] = (job.id, rows)
    return dataclasses.replace(view, history=list(rows), history_from=0)


def live_view() -> None:
    """Controls, status and the loss chart; button callbacks run before this, so the state read here is current."""
    job = current_job()
    view = read_view(job) if job else None
    active = bool(view and view.active)
    paused = bool(view and view.status == "paused")

    buttons = st.columns(5)
    buttons[0].button("Train", type="primary", key="train-start", icon=":material/play_arrow:",
                      disabled=spec is None or active, on_click=start, args=(spec,),
                      help="Fix the field marked in the sidebar first." if spec is None else None)
    if paused:
        buttons[1].button("Resume", key="train-resume", icon=":material/resume:", on_click=job.resume)
    else:
        buttons[1].button("Pause", key="train-pause", icon=":material/pause:", disabled=not active,
                          on_click=job.pause if job else None)
    buttons[2].button("Step", key="train-step", icon=":material/skip_next:", disabled=not paused,
                      on_click=job.step if job else None,
                      help="While paused: train to the next logged step (train.log_every steps).")
    buttons[3].button("Stop", key="train-stop", icon=":material/stop:", disabled=not active,
                      on_click=job.stop if job else None)
    buttons[4].button("Reset", key="train-reset", icon=":material/restart_alt:", disabled=view is None,
                      on_click=reset, help="Stop this run (it stays in the store) and clear the view.")

    if "train-message" in st.session_state:
        st.warning(st.session_state["train-message"], icon=":material/warning:")
    if view is not None and view.note:
        st.warning(view.note, icon=":material/warning:")
    if view is None:
        st.info("No run yet: press **Train**.", icon=":material/info:")
        empty_loss_chart()
        return
    show_status(view)
    show_loss(view)
    if view.active != active_at_last_run():
        st.rerun(scope="app")  # switch the refresh timer on or off


def active_at_last_run() -> bool:
    return st.session_state.get("train-active", False)


def show_status(view) -> None:
    fraction = min(view.steps_done / max(view.total_steps, 1), 1.0)
    speed = f"{view.steps_per_second:.1f} steps/s" if view.steps_per_second else "starting"
    if view.status == "diverged":  # the run ended there: "step 10 of 300" would read as progress
        st.progress(fraction, text=f"{view.label}: diverged at step {view.diverged_at} (of {view.total_steps})")
    else:
        st.progress(fraction, text=f"{view.label}: step {view.steps_done} of {view.total_steps} · {speed} · {view.status}")
    if view.status == "queued":
        running, waiting = state.job_queue().counts()
        st.info(f"Queued: {running} run(s) are training on this server (limit {caps.max_jobs}, EXPLORER_MAX_JOBS); "
                f"this one is number {view.queue_position} in line.", icon=":material/hourglass_top:")
    elif view.status == "diverged":
        st.warning(f"**Diverged at step {view.diverged_at}**: the loss became non-finite or grew past "
                   f"train.diverge_factor times its first value. That is a result, not an error: the charts show "
                   f"the run up to there. Try a smaller learning rate, a smaller tau, or another init.",
                   icon=":material/trending_up:")
    elif view.status == "error":
        st.error(f"The run failed: {messages.escape(view.error)}", icon=":material/error:")
    elif view.status == "finished":
        final = view.history[-1] if view.history else {}
        shown = " · ".join(f"{k} {v:.4g}" for k, v in final.items() if k not in ("step", "time"))
        st.success(f"Finished {view.steps_done} steps: {shown}", icon=":material/check_circle:")


def empty_loss_chart() -> None:
    """Empty axes where the loss will be: they also make the browser load plotly.js before the first run."""
    fig = plots.loss_curves([{"label": "no run yet", "history": []}], title="Loss (press Train)")
    figures.show(fig, key="train-loss", downloads=False, live=True)


def show_loss(view) -> None:
    if not view.history:
        st.caption("Waiting for the first logged step...")
        empty_loss_chart()
        return
    figures.show(plots.loss_curves([view.as_run()], title=f"{view.label}: loss"), key="train-loss",
                 name="train-loss", live=True)


def probe_view() -> None:
    """The shortcut heatmap and the live probe's figures, in a fragment of their own that refreshes every
    PROBE_REFRESH_S while the run trains: a result comes every `probe every` steps, and redrawing two more
    charts at the loss chart's rate cost the browser (on the same small machine as the server and the
    training) more than the loss chart itself."""
    job = current_job()
    if job is None:
        return
    view = job.view(since=10**12)  # the probes only: no history rows
    heatmap, probe_figs = probe_charts(view)
    heat, probe_col = st.columns(2)
    with heat:
        if heatmap is not None:
            figures.show(heatmap, key="train-heatmap", name="shortcut-coefficients", live=True)
    with probe_col:
        for i, fig in enumerate(probe_figs):
            figures.show(fig, key=f"train-probe-{i}", name=f"{probe_name}-{i}", live=True)


def probe_charts(view) -> tuple:
    """(heatmap or None, [probe figures]) for the latest probe results. They change only when a result comes
    (every `probe every` steps), so they are built once per result and reused by the refreshes between."""
    key = (view.id, view.probe_step, heatmap_basis, probe_name)
    cached = st.session_state.get("train-probe-charts")
    if cached is not None and cached[0] == key:
        return cached[1]
    heatmap, probe_figs = None, []
    coefficients = view.probes.get(LIVE_PROBE)
    if coefficients is not None:
        basis = plots.coefficient_basis(coefficients, heatmap_basis)
        heatmap = plots.coefficient_heatmap(coefficients[basis],
                                            f"Shortcut coefficients ({basis}) at step {view.probe_step}",
                                            log_ratio=basis == "log_ratio", blocks=coefficients.get("blocks"))
    result = view.probes.get(probe_name)
    if result is not None:
        probe_figs = plots.probe_figures(probe_name, result, f"step {view.probe_step}")
    st.session_state["train-probe-charts"] = (key, (heatmap, probe_figs))
    return heatmap, probe_figs


active = bool(current_job() and current_job().active)
st.session_state["train-active"] = active
st.fragment(run_every=REFRESH_S if active else None)(live_view)()
st.fragment(run_every=PROBE_REFRESH_S if active else None)(probe_view)()

# ---- downloads (the run's files are read from the store only when clicked) -----------------------
def history_csv(rows: list[dict]) -> str:
    table = io.StringIO()
    writer = csv.DictWriter(table, fieldnames=sorted({key for row in rows for key in row}, key=lambda k: (k != "step", k)))
    writer.writeheader()
    writer.writerows(rows)
    return table.getvalue()


st.divider()
cols = st.columns(3)
if spec is not None:
    cols[0].download_button("Spec (JSON)", spec.to_json(), file_name="spec.json", mime="application/json",
                            key="train-download-spec", on_click="ignore", icon=":material/download:")
job = current_job()
run_id = job.run_id if job else None
if run_id and not job.active:
    cols[1].download_button("Run (JSON)", lambda: json.dumps(state.store().get(run_id, arrays=False), indent=2, default=str),
                            file_name=f"run-{run_id[:8]}.json", mime="application/json", key="train-download-run-json",
                            on_click="ignore", icon=":material/download:")
    cols[2].download_button("History (CSV)", lambda: history_csv(state.store().get(run_id, arrays=False)["history"]),
                            file_name=f"run-{run_id[:8]}.csv", mime="text/csv", key="train-download-run-csv",
                            on_click="ignore", icon=":material/download:")
    st.caption(f"Saved in the run store as **{run_id[:8]}** (open it on the Inside page, or "
               f"`explorer runs show {run_id[:8]}`). Shareable set-up: `?{urllib.parse.unquote(spec.to_query()) if spec else ''}`")
