"""Fixtures shared by the test files."""

import ast
import dataclasses
import fnmatch
import functools
import inspect
import os
import socket
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "app"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))  # the tutorial notebooks, in reading order
sys.path.insert(0, str(APP))  # the app's helper package `explorer_app`, importable as under `streamlit run`

# Under pytest-xdist (`-n N`) each of the N workers gets its share of the cores as torch threads (1 each on a
# 2-core machine with -n 2), and so do the processes it starts (servers, kernels, CLI runs): set before torch is
# imported. An OMP_NUM_THREADS set by the caller is kept.
XDIST_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
if os.environ.get("PYTEST_XDIST_WORKER") and XDIST_WORKERS:
    for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_variable, str(max(1, (os.cpu_count() or 1) // XDIST_WORKERS)))


@pytest.fixture(autouse=True)
def explorer_home(tmp_path_factory, monkeypatch):
    """Every test records runs into its own store, never the user's (~/.explorer)."""
    path = tmp_path_factory.mktemp("explorer-home")
    monkeypatch.setenv("EXPLORER_HOME", str(path))
    yield path
    from explorer.data.files import restrict_reads

    restrict_reads(None)  # an app test (AppTest runs the server's script in this process) restricts reads


@pytest.fixture(scope="module")
def one_torch_thread():
    """One torch thread for a module of tiny tensors: a second thread only adds contention on a loaded machine."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def worker_pool():
    """Two warm worker processes shared by the job tests (each importing torch costs seconds)."""
    from explorer_app.workers import WorkerPool

    pool = WorkerPool(2)
    pool.warm()
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def local_ray():
    """One private local Ray for the tests that use it (starting Ray costs tens of seconds); those tests run
    last (pytest_collection_modifyitems), so it is started once, and under pytest-xdist in one worker."""
    ray = pytest.importorskip("ray")
    from explorer.parallel import connect_ray

    connect_ray(cpus=2)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def papers_cache_dir(tmp_path_factory):
    """One EXPLORER_PAPERS_CACHE_DIR for the session (under pytest-xdist, for all its workers): the fast-mode claims
    (tests/test_claims.py) write their runs there and the notebooks' kernels (executed_notebooks) read them instead
    of training them again. Only those two fixtures name it: every other test trains what it checks."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "papers-cache"
    folder.mkdir(exist_ok=True)
    return folder


# The tiers. The fast tier (every module's unit tests and one AppTest smoke per page, under two minutes on a
# 2-core machine) is run before every change; .ci/run runs every tier. A test lands in its tiers by rule: its
# file's name, its fixtures, what its code starts, and the two tables below (tests measured, with the time each
# took recorded by .ci/run in .ci-out/durations.txt).
FAST_COMMAND = "python -m pytest -m fast"
FULL_COMMAND = "python -m pytest -n auto"  # every tier: the README's test command, which .ci/run runs
FAST_EXCLUDES = ("slow", "browser", "notebooks", "claims", "ray")  # `-m fast` is `-m "not (slow or ...)"`
TIERS = {"fast", "app", *FAST_EXCLUDES}
FILE_TIERS = (  # (file-name pattern, marker): every match applies
    ("*_browser.py", "browser"),
    ("test_app_*", "app"),
    ("test_notebooks*", "notebooks"),
    ("test_exercises*", "notebooks"),
    ("test_claims*", "claims"),
)
FIXTURE_TIERS = {"local_ray": "ray", "executed_notebooks": "notebooks", "open_page": "app"}
BROWSER_CALLS = {"browsing.browser", "browsing.serve"}  # a test that starts Chromium or an app server itself
# The one AppTest smoke test of each page kept in the fast tier; a page's other AppTests are in the app tier only.
PAGE_SMOKES = (
    "test_app_train.py::test_train_produces_a_stored_run_with_loss_chart_and_heatmap",
    "test_app_compare.py::test_overlaying_stored_runs_draws_each_and_marks_divergence",
    "test_app_inside.py::test_probes_read_the_stored_weights",
    "test_app_papers.py::test_each_paper_section_renders_with_its_equations_claims_and_presets",
    "test_app_theory.py::test_page_renders_every_chart_without_messages",
    "test_app_sessions.py::test_the_admin_page_lists_every_job_and_stops_one",
    "test_app_classroom.py::test_the_teacher_starts_a_class_pushes_a_link_and_sees_the_named_board",
)
# Tests that take a second or more on a loaded 2-core machine, or a parametrized matrix that takes tens of
# seconds in all (file::test, every parametrization; or a whole file); each module keeps fast tests elsewhere.
SLOW = (
    "test_app_jobs.py::test_a_job_trains_in_a_worker_records_and_matches_a_plain_run",
    "test_app_jobs.py::test_a_killed_worker_marks_its_job_error_and_is_replaced",
    "test_app_jobs.py::test_a_worker_does_not_run_the_parents_main_script",
    "test_app_jobs.py::test_pause_step_and_stop_act_at_logged_steps",
    "test_app_jobs.py::test_the_queue_runs_at_most_max_jobs_in_submission_order",
    "test_app_jobs.py::test_the_running_jobs_share_the_cores_and_rebalance",
    "test_app_probe_jobs.py::test_a_probe_job_of_a_gone_session_is_cancelled_and_frees_its_slot",
    "test_app_probe_jobs.py::test_an_idle_worker_gives_its_memory_back",
    "test_app_probe_jobs.py::test_the_estimate_is_not_below_what_the_jacobian_probe_allocates",
    "test_app_probe_jobs.py::test_the_time_limit_stops_a_probe_and_the_next_job_runs",
    "test_app_sessions.py::test_a_session_has_at_most_its_share_of_active_jobs",
    "test_app_train.py::test_app_starts_from_a_relative_script_path",
    "test_batched.py::test_learnable_tau_with_its_gradient_hook_and_schedule",
    "test_budget_rss.py::test_the_estimate_covers_what_a_run_takes",
    "test_budget_rss.py::test_the_probe_estimate_covers_its_peak",
    "test_challenge.py::test_score_is_the_first_logged_step_at_the_target_on_a_real_run",
    "test_challenge.py::test_the_reference_beats_no_shortcut_and_the_slow_shortcut",
    "test_cli.py::test_a_reader_that_stops_early_gets_no_traceback",
    "test_cli.py::test_claims_json_is_alone_on_stdout_and_progress_goes_to_stderr",
    "test_cli.py::test_claims_reproduce_reruns_a_recorded_seed_and_the_small_linear_runs_agree",
    "test_cli.py::test_console_script_error_exit_code",
    "test_cli.py::test_console_script_train_json",
    "test_cli.py::test_running_out_of_memory_ends_the_run_as_error_in_one_line",
    "test_conditioning.py::test_lanczos_kappa_is_within_ten_percent_of_the_exact_value",
    "test_conv.py::test_every_topology_trains_inside_the_stages",
    "test_data.py::test_digits_are_sklearns_digits_read_without_importing_sklearn",
    "test_diagnosis.py::test_dca_gain_of_a_grn_v1_run_is_set_against_theorem_4_2",
    "test_diagnosis.py::test_the_tau_explanation_names_the_learning_rate_and_what_it_changes",
    "test_fuzz.py::test_the_fuzzer_meets_every_outcome_and_no_raw_exception",
    "test_fuzz_specs.py",
    "test_new_probe.py::test_a_probe_file_in_the_plugin_folder_registers_in_a_fresh_interpreter",
    "test_papers_disk_cache.py::test_another_process_reads_what_this_one_wrote",
    "test_plots.py::test_every_probe_result_draws_titled_figures",
    "test_plots.py::test_png_export_works_or_names_the_fix",
    "test_probes.py::test_probes_restore_the_mode_and_leave_gradients_alone",
    "test_rewire.py::test_default_weights_give_bit_identical_runs",
    "test_tiers.py::test_an_xdist_group_runs_in_one_worker",
    "test_sweep.py::test_a_failed_trial_is_recorded_and_the_others_go_on",
    "test_sweep.py::test_ctrl_c_stops_the_pool_and_keeps_what_finished",
    "test_sweep.py::test_local_pool_records_every_trial_as_it_finishes",
    "test_topology.py::test_dense_topologies_train_identically_in_parallel_threads",
    "test_topology.py::test_fast_dense_mix_matches_plain_autograd",
    "test_train.py::test_a_preset_of_each_data_set_trains_at_full_data_scale",
    "test_train.py::test_every_preset_trains_a_few_steps",
    "test_train.py::test_every_topology_trains_on_every_model",
    "test_train.py::test_train_records_the_loss_it_diverged_at",
    "test_transformer.py::test_every_topology_trains_at_both_levels",
    "test_transformer.py::test_gpt_loss_falls_below_the_unigram_entropy_of_its_corpus",
    "test_transformer.py::test_skipless_vit_trains_worse_with_default_init_than_with_the_skipless_init",
    "test_transformer.py::test_transformer_inits_train_under_each_kind_of_topology",
    "test_worker_memory.py",  # workers filled to their memory limit: tens of seconds
)


def listed(test: str, table) -> bool:
    """Whether a table names the test "file::name[params]" (file::name, any parametrization, or its file)."""
    return any(entry in (test.split("::")[0], test, test.split("[")[0]) for entry in table)


@functools.cache  # parametrized tests and tests with the same fixtures share their code: each is parsed once
def names_in(code: str) -> frozenset[str]:
    """The names and dotted names (`browsing.serve`) a piece of code reads; what its strings say does not count."""
    try:
        tree = ast.parse(textwrap.dedent(code))
    except SyntaxError:
        return frozenset()
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
            if isinstance(node.value, ast.Name):
                found.add(f"{node.value.id}.{node.attr}")
    return frozenset(found)


def tiers_of(test: str, fixtures=(), code: str = "", marks=()) -> set[str]:
    """The tiers of test "file::name[params]" by its file name, its fixtures, its code, its tier markers, the
    page smokes and the SLOW table (an AppTest that is not its page's smoke counts as slow: the app tier has it)."""
    name = test.split("::")[0]
    found = set(marks) & TIERS
    found |= {marker for pattern, marker in FILE_TIERS if fnmatch.fnmatch(name, pattern)}
    found |= {marker for fixture, marker in FIXTURE_TIERS.items() if fixture in fixtures}
    names = names_in(code)
    if names & BROWSER_CALLS:
        found.add("browser")
    if "AppTest" in names:
        found.add("app")
    page_test = "open_page" in fixtures or "AppTest" in names
    if listed(test, SLOW) or (page_test and not listed(test, PAGE_SMOKES)):
        found.add("slow")
    if not found & set(FAST_EXCLUDES):
        found.add("fast")
    return found


@functools.cache
def source_of(function, folder: Path | None = None) -> str:
    """A function's source, dedented: "" when it has none to read, or when `folder` is given and it is defined
    elsewhere."""
    try:
        if folder is not None and Path(inspect.getsourcefile(function) or "").resolve().parent != folder:
            return ""
        return textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError):
        return ""


def tier_markers(item) -> set[str]:
    """The tiers of a collected test (tiers_of); its code is its own and that of the fixtures it uses from tests/
    (a module fixture that starts the app's server puts its tests in the browser tier)."""
    definitions = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    fixtures = [source_of(d.func, ROOT / "tests") for defs in definitions.values() for d in defs]
    code = "\n\n".join([source_of(getattr(item, "function", None)), *fixtures])
    return tiers_of(f"{item.path.name}::{item.name}", getattr(item, "fixturenames", ()), code,
                    [mark.name for mark in item.iter_markers()])


# Under pytest-xdist (--dist loadgroup, in pyproject.toml's addopts) the tests that share a costly fixture run in one
# worker, so it is built once: a session fixture named here is one group, and a module-scoped fixture makes its
# file one group (a module's measured runs). The browser tests are one group, "browser", in one worker: the test
# process itself mostly waits (a tenth of a core), while its server, the server's workers and Chromium keep about
# half of a 2-core machine busy (Chromium's renderer the most), so the other worker runs the tests that compute
# meanwhile. Every other test goes to whichever worker is free.
SHARED_SESSION_FIXTURES = ("local_ray", "executed_notebooks", "notebook_lab")
BROWSER_GROUP = "browser"


def xdist_group(item, tiers=frozenset()) -> str | None:
    """The pytest-xdist group of a collected test (its `tiers`, tier_markers): the costly shared session fixture it
    uses, else "browser" for a browser test, else its file for a module-scoped fixture, else None."""
    definitions = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    names = getattr(item, "fixturenames", ())
    for fixture in SHARED_SESSION_FIXTURES:
        if fixture in names:
            return fixture
    if "browser" in tiers:
        return BROWSER_GROUP
    if any(d.scope == "module" for name in names for d in definitions.get(name, ())):
        return item.path.name
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_collection():
    """Collect with bytecode writes on, where PYTHONDONTWRITEBYTECODE turns them off: pytest then keeps each test
    module's assertion rewrite in tests/__pycache__ and reads it back at the next run, instead of rewriting every
    test module at every run (a third of collecting the suite)."""
    saved = sys.dont_write_bytecode
    sys.dont_write_bytecode = False
    try:
        yield
    finally:
        sys.dont_write_bytecode = saved


@pytest.hookimpl(tryfirst=True)  # before `-m` selects on the markers added here (and before xdist reads groups)
def pytest_collection_modifyitems(items):
    """Mark each test with its tiers; the tests on the shared local Ray run last, one after the other (the
    order within each group is kept). In an xdist worker, mark each test's group (xdist_group)."""
    in_worker = bool(os.environ.get("PYTEST_XDIST_WORKER"))
    tiers = {item: tier_markers(item) for item in items}
    groups = {item: xdist_group(item, tiers[item]) for item in items} if in_worker else {}
    # a file with a module fixture or a browser test keeps its other tests in that group: they run in order around
    # the module fixture, as in a serial run
    files = {item.path.name: group for item, group in groups.items()
             if group in (item.path.name, BROWSER_GROUP)}
    for item in items:
        for marker in sorted(tiers[item] - {mark.name for mark in item.iter_markers()}):
            item.add_marker(marker)
        item.user_properties.append(("tiers", ",".join(sorted(tiers[item]))))  # in the junit XML .ci/run keeps
        group = groups.get(item) or files.get(item.path.name)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
    on_ray = [item for item in items if item.get_closest_marker("ray")]
    items[:] = [item for item in items if item not in on_ray] + on_ray


# The notebooks by their time in fast mode, longest first (the quickstart, the shortest, comes last):
# executed_notebooks starts them in this order, so that its two kernels end close together.
LONGEST_NOTEBOOKS = ("01_ancre", "02_dca", "05_skipless", "04_tau", "03_idinit")


@pytest.fixture(scope="session")
def executed_notebooks(tmp_path_factory, papers_cache_dir):
    """{name: notebook} of every notebook executed top to bottom in fast mode, each by a fresh kernel in a
    folder of its own, two kernels at a time with one torch thread each (a notebook's small runs gain little
    from a second thread, so the two cores of a CI machine run two notebooks), the longest started first (so
    that no long one starts last, beside an idle core); a notebook that failed to run maps to its exception.
    The kernels read the runs the fast-mode claims kept in papers_cache_dir (those the claims did not run, they
    train). Shared by the notebook tests and the static site's tests."""
    pytest.importorskip("nbclient")
    sys.path.insert(0, str(ROOT / "notebooks"))
    import build_site

    saved = {key: os.environ.get(key) for key in ("EXPLORER_FAST", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                                  "EXPLORER_PAPERS_CACHE_DIR")}
    # the kernels inherit them, MKL's threads too: a caller's MKL_NUM_THREADS=2 keeps a second thread spinning in each
    # kernel, and beside a busy process a notebook runs ten times slower
    os.environ.update(EXPLORER_FAST="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                      EXPLORER_PAPERS_CACHE_DIR=str(papers_cache_dir))
    try:
        first = [path for name in LONGEST_NOTEBOOKS for path in build_site.NOTEBOOKS if path.stem == name]
        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = {path.stem: pool.submit(build_site.execute, path, tmp_path_factory.mktemp(path.stem), 600)
                       for path in first + [path for path in build_site.NOTEBOOKS if path not in first]}
            return {path.stem: futures[path.stem].exception() or futures[path.stem].result()
                    for path in build_site.NOTEBOOKS}
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)


@pytest.fixture(scope="session")
def notebook_lab(tmp_path_factory):
    """One JupyterLab and one Chromium shared by every notebook browser test (each start costs seconds):
    JupyterLab on 127.0.0.1 (no token, folders of its own, EXPLORER_FAST=1, a run store of its own) serving copies
    of every notebook, and a Chromium whose tabs open them. Yields `base` (the URL), `context` (Playwright's
    browser context), `folder` (the copies, and the screenshots) and `close_session(id)`, which shuts a kernel
    down in the background (JupyterLab answers only once the kernel has exited; the session's end checks that each
    one did)."""
    import shutil
    import subprocess
    import types
    import urllib.request

    from browsers import browsing, skip_without_browser

    missing = skip_without_browser("jupyterlab")
    assert not missing, f"CI needs {' and '.join(missing)} for the JupyterLab tests"
    folder = tmp_path_factory.mktemp("lab")
    sys.path.insert(0, str(ROOT / "notebooks"))
    import build_site

    for path in build_site.NOTEBOOKS:
        shutil.copy(path, folder)
    port = browsing.free_port()
    env = {**os.environ, "EXPLORER_FAST": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
           "EXPLORER_HOME": str(folder / ".explorer-home"), "JUPYTER_RUNTIME_DIR": str(folder / ".runtime"),
           "JUPYTER_CONFIG_DIR": str(folder / ".config")}
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip", "127.0.0.1", "--port", str(port),
         "--IdentityProvider.token=", "--ServerApp.password=", "--allow-root", f"--ServerApp.root_dir={folder}",
         "--ServerApp.disable_check_xsrf=True",  # close_session's requests come from urllib, with no XSRF cookie
         f"--LabApp.workspaces_dir={folder / '.workspaces'}", "--LabApp.expose_app_in_browser=True"],
        cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"

    closed = []
    with browsing.running(server, f"{base}/api", 90, "JupyterLab"), ThreadPoolExecutor(max_workers=1) as closing, \
            browsing.browser(folder / ".profile", height=1400) as first_page:

        def close(session: str) -> None:
            with urllib.request.urlopen(urllib.request.Request(f"{base}/api/sessions/{session}", method="DELETE"),
                                        timeout=60):
                pass

        def close_session(session: str) -> None:
            closed.append(closing.submit(close, session))

        yield types.SimpleNamespace(base=base, context=first_page.context, folder=folder, close_session=close_session)
    for future in closed:
        future.result()  # a kernel that was not shut down says so here


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a connection or resolve a host fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture
def open_page():
    """open_page("train", query={...}) -> a streamlit AppTest of the whole app, switched to that page and run."""
    from streamlit.testing.v1 import AppTest

    def open_(page: str, query: dict | None = None, timeout: float = 120):
        at = AppTest.from_file(str(APP / "streamlit_app.py"), default_timeout=timeout)
        for key, value in (query or {}).items():
            at.query_params[key] = value
        at.switch_page(f"views/{page}.py")
        return at.run()

    return open_


def plotly_array(values):
    """A data array of a figure's JSON (e.g. an AppTest chart's proto.spec) as a numpy array of floats: plotly
    sends numpy arrays as base64 typed arrays {dtype, bdata, shape} and lists as lists (None for gaps -> nan)."""
    import base64

    import numpy as np

    if isinstance(values, dict) and "bdata" in values:
        array = np.frombuffer(base64.b64decode(values["bdata"]), dtype=np.dtype(values["dtype"])).astype(float)
        shape = values.get("shape")
        if shape:
            array = array.reshape([int(n) for n in str(shape).split(",")] if isinstance(shape, str) else shape)
        return array
    return np.array([[np.nan if v is None else v for v in row] if isinstance(row, list) else
                     (np.nan if row is None else row) for row in values], dtype=float)


def plain(markdown: str) -> str:
    """An element's markdown body as the reader sees it: the app escapes user-supplied text (backslashes
    before punctuation, invisible word joiners inside would-be autolinks)."""
    import re

    return re.sub(r"\\(.)", r"\1", markdown).replace("\u2060", "")


# ---- the registries' examples, swept by the tests ----------------------------------------------------------------
# Each model registers a tiny spec (ModelInfo.example) and each topology the parameter values the tests run it with
# (TopologyInfo.examples). The tests that sweep models, topologies and inits take them from here, and which
# combinations they run from what the spec accepts, so a new entry is under every sweep without editing a test.


def section_id(section: dict) -> str:
    """A test id for a spec section: its values joined by "-" ({"name": "tau", "value": 0.3} -> "tau-0.3")."""
    return "-".join(str(value) for value in section.values())


def model_examples(transformer: bool | None = None) -> dict[str, dict]:
    """{model name: {"data": ..., "model": ...}}: every registered model's own tiny spec (ModelInfo.example), its
    model section naming it; `transformer` keeps the models with (True) or without (False) attention only."""
    import explorer

    return {name: {"data": dict(entry.info.example["data"]), "model": {"name": name, **entry.info.example["model"]}}
            for name, entry in explorer.registry("models").items()
            if transformer is None or entry.info.transformer == transformer}


def example_spec(model: str, topology: dict | None = None, init: dict | str | None = None, **model_values) -> dict:
    """The raw spec (a dict) of `model`'s example under a topology section and an init (a name or a section); the
    keywords override its model parameters. Sections left out keep the spec's defaults."""
    raw = model_examples()[model]
    raw["model"].update(model_values)
    if topology is not None:
        raw["topology"] = dict(topology)
    if init is not None:
        raw["init"] = {"name": init} if isinstance(init, str) else dict(init)
    return raw


def refusal(raw: dict):
    """The SpecError with which the spec refuses a raw spec, or None when it is accepted."""
    import explorer

    try:
        explorer.ExperimentSpec.from_dict(raw)
    except explorer.SpecError as refused:
        return refused
    return None


def topology_examples(model: str | None = None) -> list[dict]:
    """Every registered topology section with each of the parameter values it declares for the tests; with `model`,
    those the spec accepts on that model's example."""
    import explorer

    sections = [{"name": name, **example} for name, entry in explorer.registry("topologies").items()
                for example in entry.info.examples]
    return sections if model is None else [t for t in sections if refusal(example_spec(model, t)) is None]


@dataclasses.dataclass(frozen=True)
class Combination:
    """A model's example under a topology section and an init, as a raw spec, and the spec's SpecError if it
    refuses them (None when it accepts them)."""

    model: str
    topology: dict
    init: str
    raw: dict
    refused: Exception | None


def combinations(models=None, topologies=None, inits=("default",), **model_values) -> list[Combination]:
    """Every (model, topology section, init) of the given ones (default: every registered model and every
    topology example), each with the spec's verdict; the keywords override the models' parameters."""
    import explorer

    models = list(explorer.registry("models")) if models is None else list(models)
    topologies = topology_examples() if topologies is None else [dict(t) for t in topologies]
    inits = list(explorer.registry("inits")) if inits is None else list(inits)
    found = []
    for model in models:
        for topology in topologies:
            for init in inits:
                raw = example_spec(model, topology, init, **model_values)
                found.append(Combination(model, topology, init, raw, refusal(raw)))
    return found


def valid_combinations(*args, **kwargs) -> list[Combination]:
    """The combinations (as `combinations` takes them) that the spec accepts: the ones a sweep runs."""
    return [c for c in combinations(*args, **kwargs) if c.refused is None]


def refused_combinations(*args, **kwargs) -> list[Combination]:
    """The combinations (as `combinations` takes them) that the spec refuses: each is tested for its message."""
    return [c for c in combinations(*args, **kwargs) if c.refused is not None]


def vector_models() -> list[str]:
    """The registered models whose layers each compute on one vector per example (ModelInfo.positions is 1 on
    their example): one residual stream of vectors, no tokens, patches or pixels."""
    import explorer
    from explorer.data import dims

    found = []
    for model, entry in explorer.registry("models").items():
        spec = explorer.ExperimentSpec.from_dict(valid_combinations([model])[0].raw)
        if entry.info.positions(spec.model.params, dims(spec.data).input_shape) == 1:
            found.append(model)
    return found


def home_topology(model: str) -> dict:
    """The first topology example the spec accepts on the model's example that has a skip path (what the gated
    inits need), else the first it accepts (a model without a residual stream)."""
    import explorer

    accepted = topology_examples(model)
    return next((t for t in accepted if explorer.registry("topologies")[t["name"]].info.residual), accepted[0])
