"""Compare: launch a small grid and overlay runs from the store.

A grid is topologies x seeds, shortcut designs x seeds (typed, from the presets, or the Train page's design),
any spec field x any other (depth x tau is that grid with its own widgets) x seeds. Each grid reduces to a base
spec and {path: values} expanded by explorer.sweeps.trials; as its runs end, their final loss (or accuracy) fills
a heatmap over the grid's axes (plots.grid_figure on explorer.sweeps rows) and a sortable table of its cells.

The grid's runs train as background jobs in the server's queue (at most EXPLORER_MAX_JOBS at once
across all sessions, the rest wait). While any of them is active, the grid's progress bar, its table of runs
and their loss curves follow a feed the page publishes (explorer_app.live_feed), without rerunning the page:
its fragment reruns only when a run's state changes (queued, running, ended). Where no feed is served
(Streamlit's AppTest) the fragment redraws twice a second instead. Below, the runs picked from this session
(or the whole store) are compared: overlaid loss curves, shortcut-coefficient heatmaps side by side and
overlaid Jacobian spectra, with one colour per run in every figure.
"""

import json
import time

import numpy as np
import streamlit as st

import explorer
from explorer import plots
from explorer.probes import undefined
from explorer.registries import DEPTH_RULES, SpecError
from explorer.spec import SECTIONS
from explorer.runs import StoreError
from explorer.sweeps import (DESIGN_PATH, SEED_AXIS, design_grid, design_label, point, result_row, split_values,
                             trials)
from explorer_app import diagnosis_view, figures, jobs, limits, live_feed, messages, spec_form, state

REFRESH_S = 0.5  # without a feed: the grid's refresh period while a job is active
# The grid's loss chart is rebuilt at most this often while it trains (its progress and table follow the feed
# at every poll): the chart's redraws are the largest part of what the browser does beside the grid's training.
CHART_REFRESH_S = 0.5
MAX_RUNS = 12  # most runs one grid launches, and most runs compared at once
MAX_LISTED = 200  # newest store runs offered with "all runs in the store"
DEFAULT_PRESET = "tau-fig1-1/sqrt(L)"
AXES = ("topologies x seeds", "designs x seeds", "any field x any field", "depth x tau")
TOPOLOGIES, DESIGNS, FIELDS, DEPTH_TAU = AXES
TRAIN_DESIGN = "the Train page's design"  # a design picked from the Train page's spec
SHORT_NAMES = {"model.depth": "L", "topology.value": "tau"}  # how a run's label names these axes
DEPTH_CHOICES = ("2", "4", "8", "16", "32", "64")
TAU_CHOICES = (*DEPTH_RULES, "0.1", "0.5", "1")
PROBE_INPUTS = 8  # validation examples the probes see, as explorer.train's live probes
LIVE_PROBES = {"coefficients": {}, "jacobian": {"max_inputs": 1}}  # the Jacobian of the first input only
HEATMAPS_PER_ROW = 3
caps = limits.limits()

st.title("Compare")
st.caption("Launch a small grid of runs and watch it fill in, or pick runs from the store, then compare their "
           "loss curves, shortcut-coefficient heatmaps and Jacobian spectra side by side. Each run keeps one "
           "colour in every figure.")


# ---- the grid's base experiment and axes --------------------------------------------------------
def train_page_spec():
    """The experiment the Train page last held in this session (the query it wrote to its URL), or None."""
    return state.train_spec()


def choose_base() -> tuple[str, object]:
    """(name, spec) of the grid's base: the Train page's set-up (when the session has one) or a preset."""
    from_train = train_page_spec()
    sources = (["the Train page's set-up"] if from_train is not None else []) + ["a preset"]
    if st.session_state.get("compare-base") not in sources:
        st.session_state["compare-base"] = sources[0]
    left, right = st.columns(2)
    source = left.radio("Start from", sources, key="compare-base", horizontal=True,
                        help="The grid changes only its axes (and train.steps); everything else comes from here.")
    if source != "a preset":
        return "train", from_train
    presets = list(explorer.registry("presets"))
    st.session_state.setdefault("compare-preset", DEFAULT_PRESET if DEFAULT_PRESET in presets else presets[0])
    name = right.selectbox("Preset", presets, key="compare-preset",
                           help="A paper's set-up, scaled to run on a CPU.")
    return name, explorer.preset(name)


def describe(spec) -> str:
    model = spec.model.params
    size = " ".join(f"{key} {model[key]}" for key in ("depth", "width") if key in model)
    return (f"{spec.data.name} · {spec.model.name} {size} · topology {spec.topology.name} · "
            f"init {spec.init.name} · {spec.optim.name} · {spec.train.steps} steps · seed {spec.train.seed}")


def design_presets() -> dict[str, str]:
    """{preset name: its design} of the presets on the shortcuts topology."""
    found = {}
    for name in explorer.registry("presets"):
        spec = explorer.preset(name)
        if spec.topology.name == "shortcuts":
            found[name] = spec.topology.shortcuts
    return found


def choose_designs(column) -> list[str]:
    """The designs typed (one per line or separated by ";"), picked from presets and the Train page's."""
    presets = design_presets()
    from_train = train_page_spec()
    offered = {**({TRAIN_DESIGN: from_train.topology.shortcuts}
                  if from_train is not None and from_train.topology.name == "shortcuts" else {}), **presets}
    typed = column.text_area("Designs", key="compare-designs", height=96, placeholder="0:1\n0:2\n0:3,1:4",
                             help="Shortcut designs i:j (weight i:j*w), one per line or separated by ';': "
                                  "each is a grid point on the shortcuts topology of the base's model.")
    picked = column.multiselect("Designs from", list(offered), key="compare-design-presets",
                                format_func=lambda name: f"{name}: {design_text(offered[name])}",
                                help="A preset's shortcut design, or the design on the Train page.")
    return split_values(typed, "Designs") + [offered[name] for name in picked]


def design_text(text: str) -> str:
    """A design's label, or the text as typed where it does not parse (the grid's check says why)."""
    try:
        return design_label(text)
    except SpecError:
        return text


def grid_fields(base) -> dict[str, str]:
    """{path: help} of every field of the base, as the Train form lists them (each section's entry, then its
    parameters); train.seed is the seeds' axis."""
    fields = {}
    for section in SECTIONS:
        part = getattr(base, section)
        if section != "train":
            fields[f"{section}.name"] = f"the {section} entry"
        for param in spec_form.params_of(section, part.name):
            fields[f"{section}.{param.name}"] = param.help
    fields.pop("train.seed", None)
    return fields


def choose_fields(base, cols) -> dict[str, list]:
    """Two fields of the base and each one's typed values."""
    fields = grid_fields(base)
    defaults = ("model.depth" if "model.depth" in fields else next(iter(fields)), "optim.lr")
    grid = {}
    for k, (column, default) in enumerate(zip(cols, defaults)):
        offered = [path for path in fields if path not in grid]  # two different fields
        if st.session_state.get(f"compare-field-{k}") not in offered:
            st.session_state[f"compare-field-{k}"] = default if default in offered else offered[0]
        path = column.selectbox(f"Field {k + 1}", offered, key=f"compare-field-{k}",
                                help="A field of the base spec (section.parameter).")
        column.caption(messages.escape(fields.get(path) or ""))
        key = f"compare-values-{k}:{path}"
        st.session_state.setdefault(key, str(base.get(path)))
        typed = column.text_input(f"Values of {path}", key=key,
                                  help="Comma-separated (or ';' where a value holds commas), e.g. 4, 8, 16.")
        grid[path] = split_values(typed, f"Values of {path}")
    return grid


def choose_grid(base_name: str, base) -> tuple[str, dict[str, list], int, int]:
    """The axes the user picked: (kind, {path: values}, seeds, steps per run)."""
    kind = st.radio("Grid", AXES, key="compare-axes", horizontal=True)
    cols = st.columns([3, 3, 1, 1])
    if kind == TOPOLOGIES:
        topologies = explorer.registry("topologies")
        st.session_state.setdefault("compare-topologies", [base.topology.name])
        chosen = cols[0].multiselect("Topologies", list(topologies), key="compare-topologies",
                                     help="\n".join(f"- **{n}**: {d}" for n, d in topologies.describe().items()))
        grid = {"topology.name": chosen}
    elif kind == DESIGNS:
        grid = {DESIGN_PATH: choose_designs(cols[0])}
        cols[1].caption("Each design is a grid point on the base's model with the shortcuts topology: "
                        "x_j = act(y_j + sum_i w_ij x_i) over the design's shortcuts i:j, no other skip.")
    elif kind == FIELDS:
        grid = choose_fields(base, cols[:2])
    else:
        depth = str(base.model.params.get("depth", DEPTH_CHOICES[2]))
        depths = sorted({*DEPTH_CHOICES, depth}, key=int)
        st.session_state.setdefault("compare-depths", [depth])
        st.session_state.setdefault("compare-taus", list(DEPTH_RULES))
        grid = {
            "model.depth": cols[0].multiselect("Depths (model.depth)", depths, key="compare-depths",
                                               accept_new_options=True, help="Type another depth and press Enter."),
            "topology.value": cols[1].multiselect("tau (topology.value)", TAU_CHOICES, key="compare-taus",
                                                  accept_new_options=True,
                                                  help="A rule of the depth L or a number (type it and press Enter): "
                                                       "each block adds tau times its branch."),
        }
    # the steps per base, starting at the base's; the Train page's set-up changes, so its own steps name it too
    steps_key = f"compare-steps:{base_name}" + (f":{base.train.steps}" if base_name == "train" else "")
    st.session_state.setdefault("compare-seeds", 1)
    st.session_state.setdefault(steps_key, base.train.steps)
    seeds = cols[2].number_input("Seeds", min_value=1, max_value=MAX_RUNS, key="compare-seeds",
                                 help="Seeds train.seed, train.seed + 1, ... of the base for every grid point.")
    steps = cols[3].number_input("Steps per run", min_value=1, key=steps_key)
    return kind, grid, int(seeds), int(steps)


def run_label(paths: list[str], spec) -> str:
    """The run's value on each axis ("0:3+1:4 seed 1", "L=8 tau=1/L seed 0", "optim.lr=0.01 ... seed 0")."""
    found = point(spec, paths)
    seed = found.pop(SEED_AXIS)
    if len(found) == 1:
        return f"{next(iter(found.values()))} seed {seed}"
    return " ".join(f"{SHORT_NAMES.get(path, path)}={value}" for path, value in found.items()) + f" seed {seed}"


def check_axes(base, grid: dict[str, list]) -> None:
    """Each axis' values alone on the base (SpecError naming the field, in its own words), none repeated."""
    for path, values in grid.items():
        seen = {}
        for value in values:
            coerced = base.with_values({path: value}).get(path)
            if coerced in seen:
                raise SpecError(path, f"the value {value} is listed twice (as {seen[coerced]!r} and {value!r}); "
                                      "list each value once")
            seen[coerced] = value


def expand(kind: str, base, grid: dict[str, list], seeds: int, steps: int) -> list[tuple[str, object]]:
    """(label, spec) of every run of the grid, each valid and within this server's limits (else SpecError)."""
    base = base.with_values({"train.steps": steps})
    if kind == DEPTH_TAU:
        if "depth" not in base.model.params:
            raise SpecError("model.depth", f"the model {base.model.name!r} has no depth; "
                                           "pick another base for depth x tau")
        base = base.with_values({"topology.name": "tau"})
    if kind == DESIGNS:
        base, grid = design_grid(base, grid[DESIGN_PATH])
    else:
        check_axes(base, grid)
    items = []
    for _, spec in trials(base, grid, seeds):
        limits.check_spec(spec, caps)
        items.append((run_label(list(grid), spec), spec))
    labels = [label for label, _ in items]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise SpecError(next(iter(grid)), f"the grid holds the same run twice ({repeated[0]}); "
                                          "remove the repeated value")
    return items


def too_many_runs(size: int, grid: dict[str, list], seeds: int) -> str:
    """One sentence on a grid with more runs than it may launch: the limit, where it comes from, and the fix
    (fewer values on an axis, or fewer seeds)."""
    most = min(MAX_RUNS, caps.max_jobs_per_session)
    limit = (f"a grid launches at most {most}" if MAX_RUNS <= caps.max_jobs_per_session else
             f"this server lets one session queue at most {most} runs (EXPLORER_MAX_JOBS_PER_SESSION)")
    shape = " x ".join(str(len(values)) for values in grid.values()) + (f" x {seeds} seeds" if seeds > 1 else "")
    return f"This grid has {size} runs ({shape}), but {limit}: remove values from an axis or lower Seeds."


def grid_size(grid: dict[str, list], seeds: int) -> int:
    size = seeds
    for values in grid.values():
        size *= len(values)
    return size


# ---- launching ----------------------------------------------------------------------------------
def launch(items: list[tuple[str, object]], paths: list[str]) -> bool:
    """Queue every run of the grid in the server's job queue, all or none (each trains in a worker process, which
    leaves out a live probe that does not apply to the model, with a note); the grid becomes this session's
    current one. False (and a one-line message naming the cap) when the caps leave fewer places than runs."""
    number = st.session_state.get("compare-grids", 0) + 1
    try:
        jobs = state.submit_many([{"spec": spec, "label": f"grid {number}: {label}", "probes": LIVE_PROBES,
                                   "optional_probes": tuple(LIVE_PROBES), "probe_every": max(spec.train.steps // 4, 1)}
                                  for label, spec in items])
    except state.SessionLimit as refused:
        st.error(f"Not launched, none of its {len(items)} runs queued: {messages.escape(refused)}",
                 icon=":material/error:")
        return False
    st.session_state["compare-grids"] = number
    st.session_state["compare-grid"] = {"number": number, "jobs": jobs, "selected": False, "paths": paths,
                                        "specs": [spec for _, spec in items]}
    return True


def stop_grid() -> None:
    for job in current_grid()["jobs"]:
        job.stop()


def current_grid() -> dict | None:
    return st.session_state.get("compare-grid")


def grid_active() -> bool:
    grid = current_grid()
    return bool(grid) and any(job.view().active for job in grid["jobs"])


st.subheader("Launch a grid")
# the choices, kept in the session: Streamlit drops them while another page shows
state.keep_choices("compare-choices", ("compare-base", "compare-preset", "compare-axes", "compare-topologies",
                                       "compare-designs", "compare-design-presets", "compare-field-0",
                                       "compare-field-1", "compare-depths", "compare-taus", "compare-seeds",
                                       "compare-all-runs", "compare-runs", "compare-basis"),
                   prefixes=("compare-values-", "compare-steps:"))
base_name, base = choose_base()
st.caption(f"Base: {describe(base)}")
try:
    kind, grid_values, seeds, steps = choose_grid(base_name, base)
except SpecError as error:  # typed values the grid cannot read (too long, say): nothing to launch
    st.error(messages.spec_error(error), icon=":material/error:")
    kind, grid_values, seeds, steps = None, {}, 0, 0
size = grid_size(grid_values, seeds)
items = None
if size == 0 and kind is None:
    pass
elif size == 0:
    st.info("Pick at least one value on each axis.", icon=":material/info:")
elif size > min(MAX_RUNS, caps.max_jobs_per_session):
    st.error(too_many_runs(size, grid_values, seeds), icon=":material/error:")
else:
    try:
        items = expand(kind, base, grid_values, seeds, steps)
    except SpecError as error:
        st.error(messages.spec_error(error), icon=":material/error:")
busy = grid_active()
if st.button(f"Launch {size} run{'s' * (size != 1)}", type="primary", key="compare-launch",
             icon=":material/play_arrow:", disabled=items is None or busy,
             help="Wait for the current grid to finish (or stop it) first." if busy else None) \
        and launch(items, list(grid_values)):
    st.rerun()  # drawn again with the grid under way: Launch is off until it ends (it was drawn before the click)


# ---- watching the grid --------------------------------------------------------------------------
def grid_stamp(views) -> str:
    """What the grid's widgets show of its runs: when the feed's stamp differs, its fragment reruns."""
    return json.dumps([[view.status, view.queue_position, view.note, view.error] for view in views])


def grid_progress(grid: dict, views) -> tuple[float, str]:
    queued = sum(view.status == "queued" for view in views)
    done = sum(not view.active for view in views)
    fraction = sum(run_fraction(view) if view.active else 1.0 for view in views) / len(views)  # an ended run is done
    return fraction, f"Grid {grid['number']}: {done} of {len(views)} runs done" + (f" · {queued} queued" if queued else "")


def grid_loss(grid: dict, views):
    """The grid's loss curves (one colour per run, as in every figure of the page); None before any logged step."""
    colors = plots.run_colors([view.label for view in views])
    curves = [view.as_run() for view in views if view.history]
    return plots.loss_curves(curves, colors=colors, title=f"Grid {grid['number']}: training loss") if curves else None


def grid_loss_or_empty(grid: dict, views):
    """grid_loss, or empty axes where the feed will draw it."""
    figure = grid_loss(grid, views)
    return figure if figure is not None else plots.loss_curves([{"label": "no step logged yet", "history": []}],
                                                               title=f"Grid {grid['number']}: training loss")


def publish_grid_feed(grid: dict) -> str | None:
    """Serve the grid's progress, runs table and loss chart to the browser (explorer_app.live_feed), under this
    session's Compare token (kept, with what it built, while the grid stays); None where no feed is served.
    The feed reads only the rows logged since its last read, and builds the loss chart at most once per
    CHART_REFRESH_S."""
    if not live_feed.served:
        return None
    readers = [jobs.HistoryReader(job) for job in grid["jobs"]]
    chart: dict = {"at": float("-inf"), "seen": None, "version": 0, "figure": None}

    def source() -> live_feed.State:
        views = [reader.view() for reader in readers]
        active = any(view.active for view in views)
        seen = [(view.history_length, view.status) for view in views]
        now = time.monotonic()
        if seen != chart["seen"] and (now - chart["at"] >= CHART_REFRESH_S or not active):
            chart.update(at=now, seen=seen, version=chart["version"] + 1, figure=grid_loss(grid, views))
        figure = chart["figure"]
        charts = {"loss": live_feed.Chart(str(chart["version"]), lambda: figure)} if figure is not None else {}
        return live_feed.State(grid_stamp(views), active, grid_progress(grid, views), charts,
                               figures.live_table([grid_row(view) for view in views], "progress"))

    token = live_feed.publish(source, st.session_state.get("compare-feed"), key=(grid["number"],))
    st.session_state["compare-feed"] = token
    return token


def grid_view() -> None:
    """Overall progress, a row per run and the overlaid loss curves of the current grid."""
    live_feed.stale()  # a live part asked for this rerun (a run's state changed): drawn below as it is now
    grid = current_grid()
    if grid is None:
        st.caption(f"No grid launched yet. Runs beyond this server's limit of {caps.max_jobs} at once "
                   "(EXPLORER_MAX_JOBS) wait in a queue.")
        return
    views = [job.view() for job in grid["jobs"]]
    active = any(view.active for view in views)
    token = publish_grid_feed(grid) if active else None
    stamp = grid_stamp(views)
    fraction, text = grid_progress(grid, views)
    left, right = st.columns([5, 1])
    with left:
        figures.progress(fraction, text, key="compare-grid", feed=live_feed.link(token, "progress", "", stamp))
    right.button("Stop grid", key="compare-stop", icon=":material/stop:", disabled=not active, on_click=stop_grid,
                 help="Stop the runs under way and drop the queued ones; what they did stays in the store.")
    queued = [view for view in views if view.status == "queued"]
    if queued:
        st.info(f"{len(queued)} run(s) wait for a training slot: this server trains at most {caps.max_jobs} runs at "
                "once across all sessions (EXPLORER_MAX_JOBS); they start as slots free up.",
                icon=":material/hourglass_top:")
    for note in sorted({view.note for view in views if view.note}):  # a live probe the workers left out, and why
        st.caption(note)
    figures.table([grid_row(view) for view in views], key="compare-grid-table", progress_column="progress",
                  feed=live_feed.link(token, "table", "", stamp))
    for view in views:
        if view.status == "error":
            st.error(f"{messages.escape(view.label)} failed: {messages.escape(view.error)}", icon=":material/error:")
    if token is not None or any(view.history for view in views):  # with a feed, axes it will draw on
        figures.show(grid_loss_or_empty(grid, views), key="compare-grid-loss", name=f"grid-{grid['number']}-loss",
                     live=True, feed=live_feed.link(token, "loss", "", stamp),  # "": the feed sends its newest
                     current=lambda: grid_loss_or_empty(grid, [job.view() for job in grid["jobs"]]))
    grid_cells(grid, views)
    if active != st.session_state.get("compare-active", False):
        st.rerun(scope="app")  # the grid started or ended: the Launch button and the comparison below follow


def grid_rows(grid: dict, views) -> list[dict]:
    """The grid's runs as explorer.sweeps rows (each run's point on the grid's axes, status, final metrics)."""
    return [result_row(view.label.partition(": ")[2] or view.label, spec, grid["paths"], view.status, view.history,
                       view.diverged_at) for view, spec in zip(views, grid["specs"])]


def grid_cells(grid: dict, views) -> None:
    """The grid's small multiples: each cell's final loss (or accuracy) in a heatmap over the grid's axes, filled
    in as runs end, and a sortable table of the cells."""
    rows = grid_rows(grid, views)
    paths = grid["paths"]
    metrics = [key for key in plots.GRID_METRICS if key == "final_loss" or any(row[key] is not None for row in rows)]
    left, right = st.columns(2)
    metric = left.radio("Cell value", metrics, key="compare-grid-metric", horizontal=True,
                        format_func=plots.GRID_METRICS.get, help="What each cell of the heatmap shows: the last "
                                                                 "logged value of each run.")
    x = paths[1] if len(paths) > 1 else SEED_AXIS
    if len(paths) == 1 and len({row["point"][SEED_AXIS] for row in rows}) > 1:
        if right.radio("Seeds", ["each seed", "seed mean"], key="compare-grid-seeds", horizontal=True,
                       help="A column per seed, or one column of the seeds' mean.") == "seed mean":
            x = None
    figures.show(plots.grid_figure(rows, paths[0], x, metric=metric,
                                   title=f"Grid {grid['number']}: {plots.GRID_METRICS[metric]} per cell"),
                 key="compare-grid-cells-figure", name=f"grid-{grid['number']}-cells")
    number = st.column_config.NumberColumn(format="%.4g")
    st.dataframe([{**row["point"], "status": row["status"], "final loss": row["final_loss"],
                   "val loss": row["final_val_loss"], "val accuracy": row["final_val_accuracy"],
                   "diverged at": row["diverged_at"]} for row in rows],
                 hide_index=True, key="compare-grid-cells", placeholder="-",
                 column_config={"final loss": number, "val loss": number,
                                "val accuracy": st.column_config.NumberColumn(format="%.3f"),
                                "diverged at": st.column_config.NumberColumn(format="%d")})


def run_fraction(view) -> float:
    return min(view.steps_done / max(view.total_steps, 1), 1.0)


def significant(value, digits: int = 4):
    """A float rounded to `digits` significant digits (a table cell that fits its column); anything else as it is."""
    return float(f"{value:.{digits}g}") if isinstance(value, float) else value


def grid_row(view) -> dict:
    final = view.history[-1] if view.history else {}
    status = f"queued (#{view.queue_position} in line)" if view.status == "queued" else view.status
    diverged = view.status == "diverged" and view.diverged_at is not None
    if diverged:  # one description: the step it diverged at, not the last step it logged
        status = messages.steps_text(view.status, view.steps_done, view.total_steps, view.diverged_at)
    return {"run": view.label, "status": status, "progress": 100 * run_fraction(view),
            "step": f"{view.diverged_at if diverged else view.steps_done} / {view.total_steps}",
            "loss": significant(final.get("loss")),
            "val accuracy": significant(final.get("val_accuracy")), "diverged at": view.diverged_at}


active = grid_active()
st.session_state["compare-active"] = active
st.fragment(run_every=REFRESH_S if active and not live_feed.served else None)(grid_view)()


# ---- comparing stored runs ----------------------------------------------------------------------
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


st.divider()
st.subheader("Compare runs")
compare_view()
