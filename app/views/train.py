"""Train: set up an experiment, train it live, and watch its loss, shortcut heatmap and one probe.

At a projector's 1280x720 one screen holds the design (left: the network view, explorer_app.network_panel, above the
shortcut matrix) and the controls with the live loss chart under them (right); the explanation of a run that diverged
or stalled, an ended run's replay, then the heatmap and the probe's figures, follow below at the page's full width.

The form (sidebar) is generated from the registries and mirrored in the URL; the session keeps it (and the
live-probe choices), so it is the same when the user comes back from another page. Training runs as a job
in a worker process (explorer_app.jobs). While it trains, the progress bar and the charts follow it without
rerunning the page: the page publishes a feed of them (explorer_app.live_feed) that the browser polls five
times a second, and the page reruns only when the run's state changes (queued, running, paused, ended, its
first probe result), so the buttons and messages follow. Where no feed is served (Streamlit's AppTest,
`streamlit run app/streamlit_app.py`) fragments redraw the live view, the network view and the probe charts on
timers instead, reading only the rows logged since their last call. Every run is saved in the run store. The buttons stay in the live view's
fragment: in a fragment of their own, a click could land while a rerun of another fragment cut theirs short,
and the page kept showing Resume (or Pause) for a run in the other state.
"""

import csv
import io
import json
import time
import urllib.parse

import streamlit as st

import explorer
from explorer import plots
from explorer.registries import SpecError
from explorer_app import (design_editor, diagnosis_view, figures, jobs, limits, live_feed, messages, network_panel,
                          spec_form, state, uploads)

REFRESH_S = 0.2  # without a feed: the live view's refresh period while a job is active (five redraws per second)
# The heatmap's and the live probe's refresh period (results come every `probe every` steps, up to ten a
# second): redrawing them at the loss chart's rate cost the browser more than the loss chart itself.
PROBE_REFRESH_S = 1.0
LOSS_HEIGHT = 340  # px: the loss chart under the controls, within a 1280x720 screen
PAUSE_WIDTH = 100  # px: Pause and Resume take one width (Resume's label is the wider), so the buttons after them
# never move under a click (a press on Stop while they move would be released on Reset, and do nothing)
REWIRE_WAIT_S = 5.0  # the longest a rerun that rewired a paused run waits for the worker's answer
LIVE_PROBE = "coefficients"  # always probed: the heatmap
# The probe shown beside it until the user picks another: norms per block apply to every model and cost
# about one forward pass. The Jacobian spectrum (a backward pass per output) cut a ViT's training 7x.
DEFAULT_PROBE = "norms"
probe_names = [name for name in explorer.registry("probes") if name != LIVE_PROBE]
caps = limits.limits()

st.title("Train")


# ---- the experiment, from the URL or the form --------------------------------------------------
def load_from_url() -> None:
    """Open the experiment a link names (a spec in the query, or ?preset=NAME with any field changed on top,
    e.g. ?preset=NAME&train.steps=500); keep the form otherwise."""
    query = {key: st.query_params[key] for key in st.query_params}
    if not query or query == st.session_state.get("url_written"):
        return
    fields = {key: value for key, value in query.items() if key != "preset"}
    try:
        base = explorer.preset(query["preset"]) if "preset" in query else None
        spec = explorer.ExperimentSpec.from_query(fields, base=base)
    except SpecError as error:
        st.error(f"This link's experiment is not valid: {messages.spec_error(error)}. "
                 "The form shows the last valid set-up instead.", icon=":material/link_off:")
        st.session_state["url_written"] = query
        return
    spec_form.load_into_widgets(spec)
    if "preset" in query:  # the sidebar says which preset the form started from, and whether it was changed
        st.session_state["train-loaded-preset"] = query["preset"]
    st.session_state["url_written"] = None


def restore_form() -> None:
    """Back on Train in this session: Streamlit dropped the form's widgets while another page showed, and the
    page link carries no query. Put the experiment the session last held back into the form (write_to_url then
    puts it back in the address bar); a link that set up the form this run wins."""
    kept = None if spec_form.in_session() else state.train_spec()
    if kept is not None:
        spec_form.load_into_widgets(kept)


def write_to_url(spec) -> None:
    params = state.train_page_params(spec)
    if {key: st.query_params[key] for key in st.query_params} != params:
        st.query_params.from_dict(params)
    st.session_state["url_written"] = params


KEEP_FORM = "(keep the form)"


def load_preset() -> None:
    """The preset select's callback: it runs before the widgets are drawn, the only time their state may be set,
    so a chosen preset is in the form, and in what Train trains, as soon as it is chosen."""
    name = st.session_state["train-preset"]
    if name != KEEP_FORM:
        spec_form.load_into_widgets(explorer.preset(name))
        st.session_state["train-loaded-preset"] = name
        st.session_state["train-preset"] = KEEP_FORM


load_from_url()
restore_form()
with st.sidebar:  # the page's how-to sits with the form it explains: the screen under the title is the run's
    st.subheader("Experiment")
    st.caption("Set up data, model, topology and initialisation here, press **Train**, and watch it learn. "
               "The address bar holds the whole experiment: copy it to share the set-up.")
    presets = explorer.registry("presets")
    st.selectbox("Start from a preset", [KEEP_FORM, *presets], key="train-preset", on_change=load_preset,
                 help="A paper's set-up, scaled to run on a CPU. Choosing one replaces the form.")
    preset_note = st.empty()  # which preset the form holds, once the form is drawn below
    uploaded_spec = uploads.spec_uploader(caps, key="train-upload-spec")
    if uploaded_spec is not None:
        spec_form.load_into_widgets(uploaded_spec)
        st.rerun()
    form = spec_form.render(check=lambda spec: limits.check_spec(spec, caps))
    uploads.text_corpus_uploader(form.raw, caps, key="train-upload-text")
spec = form.spec
loaded = st.session_state.get("train-loaded-preset")
if loaded is not None:
    edited = spec is None or spec.to_dict() != explorer.preset(loaded).to_dict()
    preset_note.caption(f"Started from the preset {messages.escape(loaded)}" + (", then edited." if edited else "."))
if form.error is not None:  # also here, beside Train, not only under its field in a collapsed section
    st.error(f"Train is off until this is fixed: {messages.spec_error(form.error)}", icon=":material/block:")
if spec is not None:
    write_to_url(spec)
    state.remember_train_spec(spec)



# ---- the layout: one 1280x720 screen shows the design (left), the controls and the live loss (right); what
# explains an ended run, and the heatmap and probe charts, follow below, full width ----------------------------
design_column, run_column = st.columns([5, 6], gap="medium")
outcome_area, probe_area = st.container(), st.container()


# ---- the shortcut editor -----------------------------------------------------------------------
def shortcut_editor() -> None:
    """Draw the form's shortcuts on a matrix of the model's layers (explorer_app.design_editor)."""
    design_editor.render(form.raw)
    with st.expander("Design challenge", icon=":material/emoji_events:"):
        design_editor.challenge_panel(state.session_jobs(), spec)


with design_column:
    network_area = st.container()  # the network view, drawn once the live view has published the run's feed
    shortcut_editor()


def rewire_if_edited(job, spec) -> None:
    """While the session's run is paused, a design edited in the form (the same experiment, another topology)
    rewires the running model at the step it holds (the job queue's `rewire`); an edit made while it ran waits
    for the next run. The worker's answer shows in the live view (`show_rewires`)."""
    edited = None if spec is None else json.dumps(spec.topology.to_dict(), sort_keys=True)
    seen = (getattr(job, "id", None), edited)
    before = st.session_state.get("design-seen")
    st.session_state["design-seen"] = seen
    if job is None or spec is None or before is None or before[0] != job.id:
        return
    view = job.view(since=10**12)  # the status and the rewires only, no history rows
    if view.status != "paused" or before[1] == edited or any(
            getattr(spec, s) != getattr(job.spec, s) for s in ("data", "model", "init", "optim", "train")):
        return
    rewires = view.rewires
    running = rewires[-1]["topology"] if rewires else job.spec.topology.to_dict()
    if json.dumps(running, sort_keys=True) != edited:
        state.job_queue().rewire(job.id, spec.topology.to_dict())
        # a paused worker answers within a poll of its controls: wait for it, so this very run shows the result
        deadline = time.monotonic() + REWIRE_WAIT_S
        while time.monotonic() < deadline:
            answered = job.view(since=10**12)
            if len(answered.rewires) > len(rewires) or answered.rewire_error:
                break
            time.sleep(0.05)


rewire_if_edited(st.session_state.get("train-job"), spec)

# ---- what to watch -----------------------------------------------------------------------------
state.keep_choices("train-choices", ("train-probe", "train-probe-every", "train-basis"))
st.session_state.setdefault("train-probe", DEFAULT_PROBE)
st.session_state.setdefault("train-probe-every", 50)
with design_column:
    probe_name = st.selectbox("Live probe", probe_names, key="train-probe",
                              help="Computed on a fixed validation batch while the run trains; drawn below the loss.")
    st.caption(explorer.registry("probes").describe()[probe_name])  # in full: the select cut it off
    every_column, basis_column = st.columns(2)
probe_every = every_column.number_input("probe every (steps)", min_value=1, max_value=100_000, key="train-probe-every")
heatmap_basis = basis_column.selectbox("Heatmap basis", ["default", *plots.COEFFICIENT_BASES], key="train-basis",
                                help="default: the learned coefficients (own) of a learnable topology such as "
                                     "ANCRe, unrolled otherwise; unrolled: weight of each earlier branch output in "
                                     "each block's input (comparable across topologies); own: the topology's own "
                                     "coefficients; log_ratio: ANCRe's log(c_ij / max_j c) view.")
run_probe_every = network_panel.probe_every(spec, int(probe_every)) if spec is not None else int(probe_every)
if run_probe_every < probe_every:
    design_column.caption(f"This small net learns its coefficients: a run of it probes every {run_probe_every} "
                          f"steps (at most {network_panel.MAX_SNAPSHOTS} times), so the network view and its replay "
                          "follow them step by step.")


def start(spec) -> None:
    """Submit the run. Nothing is built here: the job builds the data and model in its turn, and leaves out
    a live probe that does not apply to this model, with a note saying why."""
    st.session_state.pop("train-message", None)
    refused = design_editor.challenge_refusal(spec)  # the challenge's set-up with a design its rules refuse
    if refused is not None:
        st.session_state["train-message"] = f"Not started: {messages.spec_error(refused)}"
        return
    label = f"{spec.model.name} {spec.topology.name} #{len(state.session_jobs()) + 1}"
    try:
        job = state.submit(spec, label, probes={LIVE_PROBE: {}, probe_name: {}},
                           probe_every=network_panel.probe_every(spec, int(probe_every)), optional_probes=(probe_name,))
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
    """The job's view with its whole history (this session's reader asks only for the new rows)."""
    reader = st.session_state.get("train-reader")
    if reader is None or reader.job is not job:
        reader = st.session_state["train-reader"] = jobs.HistoryReader(job)
    return reader.view()


def stamp(view) -> str:
    """What the page's widgets show of a run: when the feed's stamp differs, the page reruns."""
    return json.dumps([view.status, view.queue_position, view.note, sorted(view.probes), len(view.rewires),
                       view.rewire_error])


def progress_text(view) -> str:
    if view.status == "diverged":  # the run ended there: "step 10 of 300" would read as progress
        return f"{view.label}: {messages.steps_text(view.status, view.steps_done, view.total_steps, view.diverged_at)}"
    speed = f"{view.steps_per_second:.1f} steps/s" if view.steps_per_second else "starting"
    return f"{view.label}: step {view.steps_done} of {view.total_steps} · {speed} · {view.status}"


def progress_fraction(view) -> float:
    return min(view.steps_done / max(view.total_steps, 1), 1.0)


def loss_figure(view):
    return plots.loss_curves([view.as_run()], title=f"{view.label}: loss").update_layout(height=LOSS_HEIGHT)


def loss_version(view) -> str:
    return f"{view.history_length}:{view.status}:{len(view.rewires)}"


def publish_feed(job) -> str | None:
    """Serve the run's progress, loss, network view, heatmap and probe charts to the browser
    (explorer_app.live_feed), under this session's token (kept, with what it built, while the run and the chart
    options stay); None where no feed is served. The feed reads only the rows logged since its last read, and
    builds the network, heatmap and probe figures at most once per PROBE_REFRESH_S."""
    if not live_feed.served:
        return None
    basis, probe = heatmap_basis, probe_name  # the widgets' values now (a change reruns the page)
    network_px = network_panel.height(form.raw)  # under it, the matrix of a shortcuts design or nothing
    reader = jobs.HistoryReader(job)
    probes: dict = {"at": float("-inf"), "step": None, "charts": (None, []), "network": None}

    def source() -> live_feed.State:
        view = reader.view()
        charts = {"loss": live_feed.Chart(loss_version(view), lambda: loss_figure(view))}
        now = time.monotonic()
        if view.probe_step != probes["step"] and (now - probes["at"] >= PROBE_REFRESH_S or not view.active):
            probes.update(at=now, step=view.probe_step, charts=build_probe_charts(view, basis, probe),
                          network=network_panel.run_figure(view, network_px))
        (heatmap, probe_figs), network = probes["charts"], probes["network"]
        version = str(probes["step"])
        if heatmap is not None:
            charts["heatmap"] = live_feed.Chart(version, lambda: heatmap)
        if network is not None:
            charts["network"] = live_feed.Chart(version, lambda: network)
        for i, fig in enumerate(probe_figs):
            charts[f"probe-{i}"] = live_feed.Chart(version, lambda fig=fig: fig)
        return live_feed.State(stamp(view), view.active, (progress_fraction(view), progress_text(view)), charts)

    token = live_feed.publish(source, st.session_state.get("train-feed"), key=(job.id, basis, probe, network_px))
    st.session_state["train-feed"] = token
    return token


def live_view() -> None:
    """Controls, progress, the loss chart and the run's state under it, in the run column; button callbacks run
    before this, so the state read here is current."""
    if live_feed.stale():
        st.rerun(scope="app")
    job = current_job()
    view = read_view(job) if job else None
    links = {}
    if view is not None and view.active:
        token, page_stamp = publish_feed(job), stamp(view)
        links = {part: live_feed.link(token, part, version, page_stamp)
                 for part, version in (("progress", ""), ("loss", loss_version(view)))}
    active = bool(view and view.active)
    paused = bool(view and view.status == "paused")

    row = st.container(horizontal=True, gap="xsmall")  # each button as wide as its label: one line
    row.button("Train", type="primary", key="train-start", icon=":material/play_arrow:",
               disabled=spec is None or active, on_click=start, args=(spec,),
               help="Fix the field marked in the sidebar first." if spec is None else None)
    # Pause and Resume are one button (one key), updated in place: under two keys the browser would draw the new one
    # beside the old until the rerun ends, and the buttons after them would move
    row.button("Resume" if paused else "Pause", key="train-pause", icon=f":material/{'resume' if paused else 'pause'}:",
               disabled=not active, width=PAUSE_WIDTH, on_click=(job.resume if paused else job.pause) if job else None)
    # a paused run holds at a logged step, so Step trains one logging interval, not one optimiser step
    shown_spec = job.spec if job else spec
    interval = shown_spec.train.log_every if shown_spec is not None else None
    row.button(f"Step +{interval}" if interval else "Step", key="train-step", icon=":material/skip_next:",
               disabled=not paused, on_click=job.step if job else None,
               help=f"While paused: train one logging interval, {interval or 'train.log_every'} optimiser "
                    "step(s) (train.log_every), to the next logged step, then pause again. Pause and Step act "
                    "at logged steps only: lower train.log_every for finer steps.")
    row.button("Stop", key="train-stop", icon=":material/stop:", disabled=not active,
               on_click=job.stop if job else None)
    row.button("Reset", key="train-reset", icon=":material/restart_alt:", disabled=view is None,
               on_click=reset, help="Stop this run (it stays in the store) and clear the view.")

    if "train-message" in st.session_state:
        st.warning(st.session_state["train-message"], icon=":material/warning:")
    if view is not None and view.note:
        st.warning(view.note, icon=":material/warning:")
    if view is None:
        st.info("No run yet: press **Train**.", icon=":material/info:")
        empty_loss_chart()
        return
    figures.progress(progress_fraction(view), progress_text(view), key="train", feed=links.get("progress"))
    show_loss(job, view, links.get("loss"))
    show_status(view)
    if form_differs(job, view):
        st.info(f"This result is of {messages.escape(view.label)}; the form has changed since: Train to run the "
                "form's set-up.", icon=":material/difference:")
    show_rewires(view)
    if view.active != active_at_last_run():
        st.rerun(scope="app")  # switch the live parts (feed or timers) on or off


def form_differs(job, view) -> bool:
    """Whether the form holds another experiment than the run shown (with the design it was last rewired to)."""
    if spec is None:
        return True
    ran = job.spec.to_dict()
    if view.rewires:
        ran["topology"] = view.rewires[-1]["topology"]
    return spec.to_dict() != ran


def active_at_last_run() -> bool:
    return st.session_state.get("train-active", False)


def show_status(view) -> None:
    """The run's state in a line under its loss chart (the progress bar above it says where it is)."""
    if view.status == "queued":
        running, waiting = state.job_queue().counts()
        st.info(f"Queued: {running} run(s) are training on this server (limit {caps.max_jobs}, EXPLORER_MAX_JOBS); "
                f"this one is number {view.queue_position} in line.", icon=":material/hourglass_top:")
    elif view.status == "error":
        st.error(f"The run failed: {messages.escape(view.error)}", icon=":material/error:")
    elif view.status == "finished":
        final = view.history[-1] if view.history else {}
        shown = " · ".join(f"{k} {v:.4g}" for k, v in final.items() if k not in ("step", "time"))
        st.success(f"Finished {view.steps_done} steps: {shown}", icon=":material/check_circle:")


def show_outcome() -> None:
    """Why an ended run diverged or stalled: the three lines, then the detail folded, full width below the columns
    (its table needs the page's width). Drawn by the page's full rerun when a run ends."""
    job = current_job()
    if job is None or job.active:
        return
    view = read_view(job)
    if view.status == "diverged":
        diagnosis = run_diagnosis(view)
        st.warning(f"**Diverged at step {view.diverged_at}**: the loss became non-finite or grew past "
                   f"train.diverge_factor times its first value. That is a result, not an error: the charts show "
                   f"the run up to there. {diagnosis_view.explanation(diagnosis, view)}", icon=":material/trending_up:")
        diagnosis_view.show_table(diagnosis, run=view)
    elif view.status == "finished" and explorer.diagnosis.outcome(view).stalled:
        diagnosis = run_diagnosis(view)
        st.warning(f"**Stalled**: the loss ended within {1 - explorer.diagnosis.STALL_FRACTION:.0%} of its first "
                   f"value. {diagnosis_view.explanation(diagnosis, view)}", icon=":material/trending_flat:")
        diagnosis_view.show_table(diagnosis, run=view)


def show_rewires(view) -> None:
    """Where the run's design was changed while it trained (the loss chart marks the same steps), and why the
    last change was refused, if it was."""
    for rewire in view.rewires:
        st.info(f"Rewired at step {rewire['step']}: {messages.escape(rewire['change'])}", icon=":material/cable:")
    if view.rewire_error:
        st.error(f"Not rewired: {messages.escape(view.rewire_error)}", icon=":material/block:")
    elif view.status == "paused" and form.raw["topology"]["name"] == design_editor.TOPOLOGY:
        st.caption("Paused: a change of the shortcut design rewires this run at this step (its block weights "
                   "kept); resume to train on.")


def run_diagnosis(view):
    """The ended run's diagnosis (explorer.diagnose at initialisation), computed once per run and kept in the
    session; a text saying why where it cannot be computed."""
    job = current_job()
    key = (getattr(job, "id", None), view.run_id)
    cached = st.session_state.get("train-diagnosis")
    if cached is None or cached[0] != key:
        cached = st.session_state["train-diagnosis"] = (key, diagnosis_view.compute(job.spec))
    return cached[1]


def empty_loss_chart() -> None:
    """Empty axes where the loss will be: they also make the browser load plotly.js before the first run."""
    fig = plots.loss_curves([{"label": "no run yet", "history": []}], title="Loss (press Train)")
    fig.update_layout(height=LOSS_HEIGHT)
    figures.show(fig, key="train-loss", downloads=False, live=True)


def show_loss(job, view, feed: live_feed.Link | None) -> None:
    if not view.history and feed is None:
        st.caption("Waiting for the first logged step...")
        empty_loss_chart()
        return
    figures.show(loss_figure(view), key="train-loss", name="train-loss", live=True, feed=feed,
                 current=lambda: loss_figure(job.view()))


def probe_view() -> None:
    """The shortcut heatmap and the live probe's figures, in a fragment of their own: while the run trains
    they follow the feed, or without one the fragment refreshes every PROBE_REFRESH_S."""
    if live_feed.stale():
        st.rerun(scope="app")
    job = current_job()
    if job is None:
        return
    view = job.view(since=10**12)  # the probes only: no history rows
    heatmap, probe_figs = probe_charts(view)
    token = st.session_state.get("train-feed") if view.active else None
    version, page_stamp = str(view.probe_step), stamp(view)

    def latest():  # a download's figures: the latest result when clicked
        return build_probe_charts(job.view(since=10**12), heatmap_basis, probe_name)

    heat, probe_col = st.columns(2)
    with heat:
        if heatmap is not None:
            figures.show(heatmap, key="train-heatmap", name="shortcut-coefficients", live=True,
                         feed=live_feed.link(token, "heatmap", version, page_stamp), current=lambda: latest()[0])
            mass = plots.mass_summary(view.probes.get(LIVE_PROBE) or {})
            if mass:
                st.caption(f"Where the mass went (step {view.probe_step}):")
                st.text(mass)
    with probe_col:
        for i, fig in enumerate(probe_figs):
            figures.show(fig, key=f"train-probe-{i}", name=f"{probe_name}-{i}", live=True,
                         feed=live_feed.link(token, f"probe-{i}", version, page_stamp),
                         current=lambda i=i: latest()[1][i])


def probe_charts(view) -> tuple:
    """build_probe_charts for this page's widgets, built once per result and reused by the refreshes between
    (a result comes every `probe every` steps)."""
    key = (view.id, view.probe_step, heatmap_basis, probe_name)
    cached = st.session_state.get("train-probe-charts")
    if cached is None or cached[0] != key:
        cached = (key, build_probe_charts(view, heatmap_basis, probe_name))
        st.session_state["train-probe-charts"] = cached
    return cached[1]


def build_probe_charts(view, basis_choice: str, probe: str) -> tuple:
    """(heatmap or None, [probe figures]) for the view's latest probe results."""
    heatmap, probe_figs = None, []
    coefficients = view.probes.get(LIVE_PROBE)
    if coefficients is not None:
        basis = plots.coefficient_basis(coefficients, basis_choice)
        heatmap = plots.coefficient_heatmap(coefficients[basis],
                                            f"Shortcut coefficients ({basis}) at step {view.probe_step}",
                                            log_ratio=basis == "log_ratio", blocks=coefficients.get("blocks"),
                                            result=coefficients, basis=basis)
    result = view.probes.get(probe)
    if result is not None:
        probe_figs = plots.probe_figures(probe, result, f"step {view.probe_step}")
    return heatmap, probe_figs


active = bool(current_job() and current_job().active)
st.session_state["train-active"] = active
timers = active and not live_feed.served  # a feed needs no timer: the browser polls it
with run_column:
    st.fragment(run_every=REFRESH_S if timers else None)(live_view)()


def network_view() -> None:
    """The network view above the design matrix (explorer_app.network_panel): the run's network while it trains,
    following the feed, or without one refreshed every PROBE_REFRESH_S by this fragment; otherwise the form's
    design, which a click edits."""
    if live_feed.stale():
        st.rerun(scope="app")
    job = current_job()
    view = job.view(since=10**12) if job else None  # the probes only: no history rows
    feed = None
    if network_panel.following(view):
        feed = live_feed.link(st.session_state.get("train-feed"), "network", str(view.probe_step), stamp(view))
    network_panel.show(form.raw, spec, job, view, feed)


with network_area:
    if network_panel.following(current_job().view(since=10**12) if current_job() else None):
        st.fragment(run_every=PROBE_REFRESH_S if timers else None)(network_view)()
    else:  # the form's design: a click is a widget event, which reruns the page (the form and the URL follow)
        network_view()
with outcome_area:
    show_outcome()
    network_panel.replay(current_job(), current_job().view(since=10**12) if current_job() else None)
with probe_area:
    st.fragment(run_every=PROBE_REFRESH_S if timers else None)(probe_view)()

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
