"""The test tiers (tests/conftest.py): a test lands in its tiers by rule, the tables name tests that exist,
every page of the app has its one AppTest smoke in the fast tier, and under pytest-xdist the tests that share a
costly fixture run in one worker."""

import ast
import functools
import re
import types
from pathlib import Path

import pytest
from conftest import (FAST_COMMAND, FAST_EXCLUDES, FULL_COMMAND, PAGE_SMOKES, SLOW, TIERS, tier_markers, tiers_of,
                      xdist_group)

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


@functools.cache
def functions(path: Path) -> dict[str, str]:
    """{name: source} of the module-level functions of a test file."""
    text = path.read_text()
    return {node.name: ast.get_source_segment(text, node) for node in ast.parse(text).body
            if isinstance(node, ast.FunctionDef)}


def test_every_table_entry_names_a_test_that_exists():
    for entry in (*SLOW, *PAGE_SMOKES):
        file, _, name = entry.partition("::")
        assert (TESTS / file).is_file(), f"{entry}: no file {file} in tests/"
        assert not name or name in functions(TESTS / file), f"{entry}: {file} has no test {name}"
    assert len(set(SLOW)) == len(SLOW) and len(set(PAGE_SMOKES)) == len(PAGE_SMOKES)


def test_the_readme_and_ci_run_the_same_test_commands():
    """The README's second set-up command ends in the full command, which is what .ci/run runs, and the README
    gives the fast tier's command: one definition of each (conftest), quoted by both."""
    readme = (ROOT / "README.md").read_text()
    setup = readme.split("## Set-up", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line for line in setup.splitlines() if line.strip() and not line.startswith("#")]
    assert len(commands) == 2 and commands[1].endswith(f" && {FULL_COMMAND}"), commands
    assert f"`{FAST_COMMAND}`" in readme
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if "python -m pytest" in line and not line.lstrip().startswith("#")]
    assert len(ci) == 1 and ci[0].endswith(FULL_COMMAND), ci


def test_every_page_of_the_app_has_one_smoke_test_in_the_fast_tier():
    """Each page in app/views is opened (open_page("name") in the test or in its module's `page` fixture) by one
    test of PAGE_SMOKES."""
    opened = []
    for entry in PAGE_SMOKES:
        file, _, name = entry.partition("::")
        found = functions(TESTS / file)
        code = found[name]
        if re.search(r"def \w+\([^)]*\bpage\b", code):
            code += found.get("page", "")
        opened += re.findall(r'open_page\(\s*"(\w+)"', code)
    pages = sorted(path.stem for path in (ROOT / "app" / "views").glob("*.py"))
    assert sorted(set(opened)) == pages


def test_a_test_file_lands_in_its_tier_by_name_fixtures_and_code():
    assert tiers_of("test_parsing_bounds.py::test_x") == {"fast"}
    assert tiers_of("test_app_queue_cap.py::test_x") == {"app", "fast"}
    assert tiers_of("test_app_design_browser.py::test_x") == {"app", "browser"}
    assert tiers_of("test_notebooks_export.py::test_x") == {"notebooks"}
    assert tiers_of("test_exercises_more.py::test_x[a]") == {"notebooks"}
    assert tiers_of("test_claims_new_paper.py::test_x") == {"claims"}
    assert tiers_of("test_sweep.py::test_x", fixtures=("tmp_path", "local_ray")) == {"ray"}
    assert tiers_of("test_data.py::test_x", marks=("slow", "parametrize")) == {"slow"}
    server = "def test_x(tmp_path):\n    with browsing.serve(tmp_path) as base:\n        pass\n"
    assert tiers_of("test_app_hostile.py::test_x", code=server) == {"app", "browser"}


def test_an_apptest_is_fast_only_as_its_pages_smoke_and_a_slow_entry_is_never_fast():
    assert tiers_of("test_app_train.py::test_x", fixtures=("open_page",)) == {"app", "slow"}
    assert tiers_of("test_spec.py::test_x", fixtures=("page", "open_page")) == {"app", "slow"}
    assert tiers_of("test_app_x.py::test_x", code="at = AppTest.from_file(APP)") == {"app", "slow"}
    assert tiers_of(PAGE_SMOKES[0] + "[p]", fixtures=("open_page",)) == {"app", "fast"}
    entry = next(entry for entry in SLOW if "::" in entry and not entry.startswith("test_app_"))
    assert tiers_of(entry + "[p]") == {"slow"} and tiers_of(entry.split("::")[0] + "::test_other") == {"fast"}
    whole = next(entry for entry in SLOW if "::" not in entry)
    assert tiers_of(whole + "::test_anything") == {"slow"}


def test_the_tiers_are_the_markers_pytest_knows():
    """--strict-markers: a tier used in conftest and not registered in pyproject.toml fails every run."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    registered = {line.split(":")[0] for line in options["markers"]}
    assert TIERS <= registered and set(FAST_EXCLUDES) < TIERS
    assert "--strict-markers" in options["addopts"].split()


def served_app(browsing, tmp_path):
    """A stand-in module fixture of a test file: its code starts the app's server."""
    with browsing.serve(tmp_path) as base:
        yield base


def test_a_fixture_that_starts_a_server_puts_its_tests_in_the_browser_tier():
    def test_x(app):
        assert app

    fixtures = {"app": [types.SimpleNamespace(func=served_app, scope="module")]}
    item = types.SimpleNamespace(path=TESTS / "test_app_x.py", name="test_x", function=test_x, fixturenames=["app"],
                                 iter_markers=lambda: [], _fixtureinfo=types.SimpleNamespace(name2fixturedefs=fixtures))
    assert tier_markers(item) == {"app", "browser"}
    item._fixtureinfo.name2fixturedefs = {}
    assert tier_markers(item) == {"app", "fast"}


def collected(file: str, **scopes: str):
    """A stand-in for a collected test of `file` using fixtures {name: scope}."""
    definitions = {name: [types.SimpleNamespace(scope=scope)] for name, scope in scopes.items()}
    return types.SimpleNamespace(path=Path(file), fixturenames=list(scopes),
                                 _fixtureinfo=types.SimpleNamespace(name2fixturedefs=definitions))


def test_tests_that_share_a_costly_fixture_run_in_one_xdist_worker():
    """Under `-n N` a module's fixture and the session's Ray, JupyterLab and executed notebooks are built once: their
    tests form one xdist group (--dist loadgroup); the browser tests are one group; a test with function-scoped
    fixtures has none."""
    assert xdist_group(collected("test_x.py", measured="module", tmp_path="function")) == "test_x.py"
    assert xdist_group(collected("test_x_browser.py", app="module"), {"app", "browser"}) == "browser"
    assert xdist_group(collected("test_notebooks_browser.py", notebook_lab="session"), {"browser"}) == "notebook_lab"
    assert xdist_group(collected("test_sweep.py", local_ray="session")) == "local_ray"
    assert xdist_group(collected("test_notebooks_site.py", site="module", executed_notebooks="session")) \
        == "executed_notebooks"
    assert xdist_group(collected("test_app_jobs.py", worker_pool="session", tmp_path="function")) is None
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert "--dist loadgroup" in addopts


def test_an_xdist_group_runs_in_one_worker(tmp_path):
    """Under `-n 2 --dist loadgroup` two files of one group run in one worker (the installed pytest and pytest-xdist
    agree on how a group is tagged); without the group they spread over both."""
    pytest.importorskip("xdist")
    import subprocess
    import sys

    for name in ("a", "b"):
        (tmp_path / f"test_{name}.py").write_text(
            "import os, pathlib, time\n"
            "import pytest\n"
            "@pytest.mark.parametrize('i', range(4))\n"
            f"def test_{name}(i):\n"
            "    time.sleep(0.2)\n"
            f"    pathlib.Path(r'{tmp_path}', f'ran-{name}{{i}}-' + os.environ['PYTEST_XDIST_WORKER']).touch()\n")
    for grouped in (True, False):
        (tmp_path / "conftest.py").write_text(
            "import pytest\n"
            "@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups, as tests/conftest.py\n"
            "def pytest_collection_modifyitems(items):\n"
            + ("    for item in items:\n        item.add_marker(pytest.mark.xdist_group('one'))\n" if grouped
               else "    pass\n"))
        for ran in tmp_path.glob("ran-*"):
            ran.unlink()
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p",
                               "no:cacheprovider", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stdout[-2000:]
        workers = {ran.name.rsplit("-", 1)[1] for ran in tmp_path.glob("ran-*")}
        assert len(list(tmp_path.glob("ran-*"))) == 8
        assert (len(workers) == 1) == grouped, (grouped, workers)
