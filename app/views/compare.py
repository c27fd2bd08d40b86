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
(or the whole store) are compared (explorer_app.compare_runs): overlaid loss curves, shortcut-coefficient heatmaps
side by side and overlaid Jacobian spectra, with one colour per run in every figure.
"""

import json
import time

import streamlit as st

import explorer
from explorer import plots
from explorer.registries import DEPTH_RULES, SpecError
from explorer.spec import SECTIONS
from explorer.sweeps import (DESIGN_PATH, SEED_AXIS, design_grid, design_label, point, result_row, split_values,
                             trials)
from explorer_app import figures, jobs, limits, live_feed, messages, spec_form, state
from explorer_app.compare_runs import LIVE_PROBES, MAX_RUNS, compare_view, current_grid, grid_active

REFRESH_S = 0.5  # without a feed: the grid's refresh period while a job is active
# The grid's loss chart is rebuilt at most this often while it trains (its progress and table follow the feed
# at every poll): the chart's redraws are the largest part of what the browser does beside the grid's training.
CHART_REFRESH_S = 0.5
DEFAULT_PRESET = "tau-fig1-1/sqrt(L)"
AXES = ("topologies x seeds", "designs x seeds", "any field x any field", "depth x tau")
TOPOLOGIES, DESIGNS, FIELDS, DEPTH_TAU = AXES
TRAIN_DESIGN = "the Train page's design"  # a design picked from the Train page's spec
SHORT_NAMES = {"model.depth": "L", "topology.value": "tau"}  # how a run's label names these axes
DEPTH_CHOICES = ("2", "4", "8", "16", "32", "64")
TAU_CHOICES = (*DEPTH_RULES, "0.1", "0.5", "1")
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


st.divider()
st.subheader("Compare runs")
compare_view()
