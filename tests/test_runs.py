"""The run store (explorer.runs) and `explorer runs ...`: round trips, export, migration, concurrency, kill -9.

Every test works in a store under pytest's tmp_path (EXPLORER_HOME is pointed there for all of them).
"""

import csv
import json
import multiprocessing
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

import explorer
from explorer import runs
from explorer.cli import main
from explorer.runs import RunStore, StoreError, StoreRecorder, UnknownRun

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    """Point EXPLORER_HOME at a fresh directory, so no test ever touches the user's store."""
    path = tmp_path / "home"
    monkeypatch.setenv("EXPLORER_HOME", str(path))
    return path


@pytest.fixture
def store(home):
    with RunStore() as s:
        yield s


def tiny_spec(steps=20):
    return explorer.preset("ancre-fig2b-0:2").with_values({"train.steps": steps, "train.log_every": 5})


def strict_json(text):
    """json.loads that refuses NaN/Infinity (which are not JSON)."""
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")
    return json.loads(text, parse_constant=refuse)


# ---- recording a real run ---------------------------------------------------------------------------

def test_recorded_training_round_trips(store, home):
    spec = tiny_spec()
    recorder = StoreRecorder(store, label="tiny", checkpoint_every=10)
    run = explorer.train(spec, callbacks=[recorder], probes={"norms": {}}, probe_every=10)
    assert default_is(store, home)

    record = store.get(recorder.run_id)
    assert record["id"] == recorder.run_id and len(record["id"]) == 32
    assert record["history"] == run.history
    assert record["status"] == run.status == "finished"
    assert record["steps_done"] == 20 and record["diverged_at"] is None
    assert record["wall_time"] == pytest.approx(run.wall_time)
    assert record["final"] == run.final
    assert record["label"] == "tiny"
    assert explorer.ExperimentSpec.from_dict(record["spec"]).to_dict() == spec.to_dict()
    assert store.spec(recorder.run_id).to_json() == spec.to_json()
    env = record["environment"]
    assert env["torch"] == torch.__version__ and env["device"] == run.device and env["hostname"] and env["python"]

    # probe results: same steps, names and arrays as the run kept in memory
    assert [(p["step"], p["name"]) for p in record["probes"]] == [(p["step"], p["name"]) for p in run.probe_history]
    for stored, live in zip(record["probes"], run.probe_history):
        assert stored["result"].keys() == live["result"].keys()
        for key, value in live["result"].items():
            if np.asarray(value).dtype.kind in "US":  # labels (e.g. the norms probe's block names)
                assert list(np.asarray(stored["result"][key])) == list(value), key
                continue
            np.testing.assert_allclose(stored["result"][key], value)
            assert stored["result"][key].shape == np.asarray(value).shape

    # the final checkpoint loads with weights_only=True into a fresh model built from the stored spec
    path = store.checkpoint_path(recorder.run_id)
    assert record["checkpoint"] == str(path)
    raw = torch.load(path, weights_only=True)
    assert raw["step"] == 20
    state = store.load_checkpoint(recorder.run_id[:8])
    model, data = explorer.build(store.spec(recorder.run_id), device="cpu")
    fresh_out = model(data.x_val).detach()
    model.load_state_dict(state["model"])
    run.model.eval(), model.eval()
    with torch.no_grad():
        expected = run.model.cpu()(data.x_val)
        assert not torch.allclose(fresh_out, expected)  # training moved the weights: the test can fail
        torch.testing.assert_close(model(data.x_val), expected)


def default_is(store, home):
    """default_store() is the store in EXPLORER_HOME."""
    return runs.default_store().root == home == store.root


def test_stopped_run_keeps_its_unannounced_last_row(store):
    """A stopped run logs its last step without an event; the recorder picks it up at "end"."""
    stop, train_forwards = threading.Event(), []

    def count(module, inputs, output):
        if module.training:
            train_forwards.append(1)
            if len(train_forwards) == 7:  # step 6, between the logged steps 5 and 10
                stop.set()

    def stopper(event):
        if event.kind == "start":
            event.run.model.register_forward_hook(count)

    recorder = StoreRecorder(store)
    run = explorer.train(tiny_spec(), callbacks=[stopper, recorder], stop=stop)
    assert run.status == "stopped" and run.history[-1]["step"] == 6
    record = store.get(recorder.run_id)
    assert record["status"] == "stopped" and record["history"] == run.history
    assert store.load_checkpoint(recorder.run_id)["step"] == run.steps_done


def test_checkpoint_with_optimizer_and_rng_loads_weights_only(store):
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    gen = torch.Generator().manual_seed(3)
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 7, "lr": 0.5,
             "rng": gen.get_state(), "nested": {"a": [1, 2.5, None, "x"]}}
    run_id = store.create({"model": {"name": "mlp"}})
    assert store.load_checkpoint(run_id) is None
    store.save_checkpoint(run_id, state)
    loaded = torch.load(store.checkpoint_path(run_id), weights_only=True)
    assert loaded["step"] == 7 and loaded["nested"] == {"a": [1, 2.5, None, "x"]}
    torch.testing.assert_close(loaded["rng"], gen.get_state())
    fresh = torch.optim.Adam(torch.nn.Linear(3, 2).parameters())
    fresh.load_state_dict(loaded["optimizer"])
    assert fresh.state_dict()["state"][0]["step"] == 1
    assert not list(store.checkpoint_dir.glob("*.tmp")) and not list(store.checkpoint_dir.glob(".*"))

    with pytest.raises(TypeError, match=r"state\['bad'\]"):
        store.save_checkpoint(run_id, {"bad": object()})
    with pytest.raises(UnknownRun):
        store.save_checkpoint("0" * 32, {"step": 1})


# ---- encoding, lookup, listing ---------------------------------------------------------------------

def test_probe_arrays_are_json_with_nulls_not_pickles(store):
    run_id = store.create({})
    result = {"f": np.array([[1.0, np.nan], [np.inf, -2.0]]), "i": np.arange(3, dtype=np.int64),
              "scalar": np.float32(1.5), "zero_d": np.array(2.0), "empty": np.zeros((0, 4)),
              "tensor": torch.tensor([1.0, float("-inf")]), "c": np.array([1 + 2j])}
    store.append_probes(run_id, 5, "mine", result)
    store.append_history(run_id, [{"step": 0, "loss": float("nan"), "n": 3}])

    raw = sqlite3.connect(store.db_path).execute("SELECT result FROM probes").fetchone()[0]
    stored = strict_json(raw)  # strict JSON: no NaN/Infinity tokens, no pickles
    assert stored["f"]["__ndarray__"] == [[1.0, None], [None, -2.0]]
    got = store.get(run_id)["probes"][0]["result"]
    np.testing.assert_array_equal(got["f"], [[1.0, np.nan], [np.nan, -2.0]])
    assert got["i"].dtype == np.int64 and got["i"].tolist() == [0, 1, 2]
    assert got["scalar"] == 1.5 and got["zero_d"].shape == () and got["zero_d"] == 2.0
    assert got["empty"].shape == (0, 4)
    np.testing.assert_array_equal(got["tensor"], [1.0, np.nan])
    assert got["c"].dtype.kind == "c" and got["c"][0] == 1 + 2j
    assert store.get(run_id)["history"] == [{"step": 0, "loss": None, "n": 3}]
    with pytest.raises(TypeError, match="cannot store"):
        store.append_probes(run_id, 6, "bad", {"x": object()})


def test_lookup_by_unique_prefix_and_clean_errors(store):
    ids = [store.create({}, label=str(i)) for i in range(17)]  # 17 ids: two share a first hex digit
    for run_id in ids:
        assert store.resolve(run_id[:10]) == run_id
        assert store.get(run_id[:10].upper())["id"] == run_id
    first = [i[0] for i in ids]
    shared = next(c for c in first if first.count(c) > 1)
    with pytest.raises(UnknownRun, match="matches several runs"):
        store.get(shared)
    with pytest.raises(UnknownRun, match="explorer runs list"):
        store.get("zz")
    with pytest.raises(UnknownRun):
        store.get("%")  # no LIKE wildcards
    with pytest.raises(UnknownRun):
        store.append_history("f" * 32, [{"step": 0}])
    with pytest.raises(UnknownRun):
        store.append_probes("f" * 32, 0, "x", {})
    with pytest.raises(UnknownRun):
        store.set_status("f" * 32, "finished")
    with pytest.raises(TypeError, match="unknown fields"):
        store.set_status(ids[0], "finished", colour="red")
    with pytest.raises(ValueError, match="step"):
        store.append_history(ids[0], [{"loss": 1.0}])


def test_list_is_newest_first_filters_and_omits_history(store):
    ids = [store.create({"train": {"seed": i}}, label=f"r{i}") for i in range(4)]
    store.append_history(ids[1], [{"step": s, "loss": 1.0} for s in range(3)])
    store.set_status(ids[1], "finished", steps_done=2, final={"step": 2, "loss": 1.0})
    store.set_status(ids[2], "diverged", diverged_at=3)
    listed = store.list()
    assert [r["id"] for r in listed] == ids[::-1]
    assert all("history" not in r for r in listed)
    assert listed[2]["history_rows"] == 3 and listed[2]["final"] == {"step": 2, "loss": 1.0}
    assert [r["id"] for r in store.list(status="finished")] == [ids[1]]
    assert [r["id"] for r in store.list(limit=2)] == [ids[3], ids[2]]
    assert store.list(status="diverged")[0]["diverged_at"] == 3
    assert store.list(label="r0")[0]["spec"] == {"train": {"seed": 0}}


# ---- export and delete ------------------------------------------------------------------------------

def test_export_csv_and_json(store, tmp_path):
    run_id = store.create({"model": {"name": "mlp"}}, label="exp")
    rows = [{"step": 0, "loss": 2.0, "time": 0.1}, {"step": 5, "loss": float("inf"), "time": 0.2},
            {"step": 10, "loss": 1.0, "time": 0.3, "val_loss": 1.5}]
    store.append_history(run_id, rows[1:])
    store.append_history(run_id, rows[:1])  # out of order: stored and exported by step
    store.append_probes(run_id, 10, "norms", {"x": np.array([1.0, np.nan])})
    store.set_status(run_id, "finished", steps_done=10, final=rows[-1])

    with open(store.export(run_id[:6], tmp_path / "h.csv"), newline="") as f:
        table = list(csv.reader(f))
    assert table == [["step", "loss", "time", "val_loss"], ["0", "2.0", "0.1", ""], ["5", "", "0.2", ""],
                     ["10", "1.0", "0.3", "1.5"]]

    data = strict_json(store.export(run_id, tmp_path / "all.json").read_text())
    assert data["id"] == run_id and data["label"] == "exp" and data["status"] == "finished"
    assert data["spec"] == {"model": {"name": "mlp"}}
    assert [r["step"] for r in data["history"]] == [0, 5, 10] and data["history"][1]["loss"] is None
    assert data["probes"] == [{"step": 10, "name": "norms",
                               "result": {"x": {"__ndarray__": [1.0, None], "dtype": "float64", "shape": [2]}}}]
    assert runs.decode(data["probes"])[0]["result"]["x"].shape == (2,)

    with pytest.raises(explorer.SpecError, match=r"\.json or \.csv"):
        store.export(run_id, tmp_path / "h.txt")
    assert not (tmp_path / "h.txt").exists()


def test_delete_removes_rows_and_checkpoint(store):
    keep, gone = store.create({}), store.create({})
    for run_id in (keep, gone):
        store.append_history(run_id, [{"step": 0, "loss": 1.0}])
        store.append_probes(run_id, 0, "p", {"a": np.ones(2)})
        store.save_checkpoint(run_id, {"step": 0, "w": torch.ones(2)})
    path = store.checkpoint_path(gone)
    assert path.exists()
    assert store.delete(gone[:12]) == gone
    assert not path.exists()
    with pytest.raises(UnknownRun):
        store.get(gone)
    db = sqlite3.connect(store.db_path)
    for table in ("history", "probes"):
        assert db.execute(f"SELECT count(*) FROM {table} WHERE run_id = ?", (gone,)).fetchone()[0] == 0
        assert db.execute(f"SELECT count(*) FROM {table} WHERE run_id = ?", (keep,)).fetchone()[0] == 1
    assert store.checkpoint_path(keep).exists() and [r["id"] for r in store.list()] == [keep]


def _with_rows(store) -> str:
    run_id = store.create({})
    store.append_history(run_id, [{"step": 0, "loss": 1.0}])
    store.save_checkpoint(run_id, {"step": 0, "w": torch.ones(2)})
    return run_id


def test_delete_refuses_a_run_this_process_is_training_unless_forced(store):
    import socket

    run_id = _with_rows(store)
    lock = runs.RunLock(store, run_id).acquire()  # as a StoreRecorder holds it while it trains
    try:
        with pytest.raises(runs.RunBusy) as refused:
            store.delete(run_id[:8])
        message = str(refused.value)
        assert f"process {os.getpid()} on {socket.gethostname()}" in message and "--force" in message
        assert "\n" not in message and "stop it first" in message
        assert store.get(run_id)["history"] and store.checkpoint_path(run_id).exists()  # nothing removed
        assert store.delete(run_id, force=True) == run_id
        assert not store.checkpoint_path(run_id).exists() and store.list() == []
    finally:
        lock.release()


def test_delete_refuses_while_another_process_trains_the_run_and_goes_ahead_once_it_ends(store, capsys):
    run_id = _with_rows(store)
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from explorer.runs import RunLock, default_store
        lock = RunLock(default_store(), {run_id!r}).acquire()
        print("held", flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(runs.RunBusy, match=f"process {child.pid} on "):
            store.delete(run_id)
        assert main(["runs", "delete", run_id[:8]]) == 2
        err = capsys.readouterr().err
        assert f"process {child.pid}" in err and "--force" in err and err.count("\n") == 1
        assert store.get(run_id)["history"] and store.checkpoint_path(run_id).exists()
    finally:
        child.terminate()  # the system drops its lock
        child.wait(timeout=60)
    assert main(["runs", "delete", run_id[:8]]) == 0
    assert store.list() == [] and not store.checkpoint_path(run_id).exists()


# ---- schema migrations ------------------------------------------------------------------------------

def test_migrations_bring_an_old_store_forward(home, monkeypatch):
    old = RunStore(home)
    current = runs.schema_version()
    assert old.version == current
    run_id = old.create({"train": {"steps": 3}}, label="old")
    old.append_history(run_id, [{"step": 0, "loss": 1.0}])
    old.close()

    def v2(conn):
        conn.execute("ALTER TABLE runs ADD COLUMN notes TEXT DEFAULT 'none'")
        conn.execute("CREATE TABLE tags (run_id TEXT NOT NULL, tag TEXT NOT NULL)")

    monkeypatch.setattr("explorer.runs.store.MIGRATIONS", [*runs.MIGRATIONS, v2])
    new = RunStore(home)
    assert new.version == current + 1
    db = sqlite3.connect(new.db_path)
    assert "notes" in [row[1] for row in db.execute("PRAGMA table_info(runs)")]
    assert db.execute("SELECT count(*) FROM tags").fetchone()[0] == 0
    record = new.get(run_id)
    assert record["label"] == "old" and record["notes"] == "none" and record["history"] == [{"step": 0, "loss": 1.0}]
    assert RunStore(home).version == current + 1  # reopening applies nothing twice


def test_version_zero_database_failed_migration_and_newer_schema(tmp_path, monkeypatch):
    # version 0: an sqlite file without our tables (e.g. left by an interrupted first open)
    root = tmp_path / "v0"
    root.mkdir()
    sqlite3.connect(root / "runs.sqlite").execute("CREATE TABLE unrelated (x)").connection.commit()
    store = RunStore(root)
    assert store.version == runs.schema_version() and store.list() == []
    assert sqlite3.connect(store.db_path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"

    # a migration that fails is rolled back whole: the version and the schema stay as they were
    def broken(conn):
        conn.execute("CREATE TABLE half_done (x)")
        raise RuntimeError("boom")

    monkeypatch.setattr("explorer.runs.store.MIGRATIONS", [*runs.MIGRATIONS, broken])
    with pytest.raises(RuntimeError, match="boom"):
        RunStore(root)
    monkeypatch.undo()
    db = sqlite3.connect(root / "runs.sqlite")
    assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == str(runs.schema_version())
    assert not db.execute("SELECT name FROM sqlite_master WHERE name = 'half_done'").fetchall()

    # a store written by a newer explorer is refused, not damaged
    db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    db.commit()
    with pytest.raises(StoreError, match="newer"):
        RunStore(root)


# ---- concurrency and crashes ------------------------------------------------------------------------

def _write_runs(root, worker, n_runs, n_rows):
    """One writer process: n_runs runs of n_rows history rows each, row by row (one transaction each)."""
    store = RunStore(root)
    for i in range(n_runs):
        run_id = store.create({"train": {"seed": i}}, label=f"w{worker}", status="running")
        for step in range(n_rows):
            store.append_history(run_id, [{"step": step, "loss": float(worker * 1000 + i)}])
        store.set_status(run_id, "finished", steps_done=n_rows - 1)


def test_many_processes_write_at_once(tmp_path):
    """4 processes create (and migrate) one fresh store at once, then record 20 runs of 10 rows each."""
    root = tmp_path / "shared"
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    ctx = multiprocessing.get_context(method)
    procs = [ctx.Process(target=_write_runs, args=(root, w, 20, 10)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    store = RunStore(root)
    assert store.version == runs.schema_version()
    listed = store.list()
    assert len(listed) == 80 and all(r["status"] == "finished" for r in listed)
    assert sorted(r["label"] for r in listed) == sorted(f"w{w}" for w in range(4) for _ in range(20))
    for r in listed:
        history = store.get(r["id"])["history"]
        assert [row["step"] for row in history] == list(range(10))
        assert len({row["loss"] for row in history}) == 1
    assert store.integrity_check() == "ok"


def test_threads_share_one_store_object(store):
    """sqlite3 connections cannot cross threads; the store opens one per thread."""
    errors = []

    def work(worker):
        try:
            _write_runs_with(store, worker)
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(store.list()) == 20 and all(r["history_rows"] == 5 for r in store.list())


def _write_runs_with(store, worker):
    for i in range(5):
        run_id = store.create({}, label=f"t{worker}")
        store.append_history(run_id, [{"step": s} for s in range(5)])
        store.set_status(run_id, "finished")


KILLED_WRITER = textwrap.dedent("""
    import sys
    import torch
    from explorer.runs import RunStore

    store = RunStore(sys.argv[1])
    i = 0
    while True:
        run_id = store.create({"train": {"seed": i}}, label="victim", status="running")
        for step in range(10):
            store.append_history(run_id, [{"step": step, "loss": float(i)}])
        store.append_probes(run_id, 9, "p", {"a": [float(i)] * 50})
        store.save_checkpoint(run_id, {"step": i, "w": torch.full((100,), float(i))})
        store.set_status(run_id, "finished", steps_done=9)
        print(run_id, flush=True)
        i += 1
""")


def test_kill_9_leaves_finished_runs_intact(store):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(store.root)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    finished = []
    try:
        while len(finished) < 8:
            line = proc.stdout.readline()
            assert line, f"writer died early: {proc.stderr.read()}"
            finished.append(line.strip())
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    assert proc.returncode == -signal.SIGKILL

    fresh = RunStore(store.root)
    assert fresh.integrity_check() == "ok"
    listed = {record["id"]: record for record in fresh.list()}
    assert set(finished) <= set(listed)  # every run the writer reported is still there
    # The writer may have finished any number of runs after the last line we read before the kill
    # landed; what must hold is a property of each run: finished and complete, or the one being
    # written (running) and still readable.
    for run_id, summary in listed.items():
        record = fresh.get(run_id)
        seed = record["spec"]["train"]["seed"]
        if summary["status"] == "finished":
            assert record["history"] == [{"step": s, "loss": float(seed)} for s in range(10)]
            assert record["probes"][0]["result"]["a"] == [float(seed)] * 50
            assert fresh.load_checkpoint(run_id)["step"] == seed
        else:
            assert summary["status"] == "running" and run_id not in finished
            assert record["history"] == [{"step": s, "loss": float(seed)} for s in range(len(record["history"]))]
            assert len(record["history"]) <= 10
    assert sum(summary["status"] == "running" for summary in listed.values()) <= 1  # runs are written one by one
    assert [listed[run_id]["status"] for run_id in finished] == ["finished"] * len(finished)
    fresh.create({})  # and still writable


# ---- the command line ---------------------------------------------------------------------------------

def test_cli_runs_list_show_export_delete(store, tmp_path, capsys):
    assert main(["runs", "list"]) == 0
    assert "no runs" in capsys.readouterr().out

    recorder = StoreRecorder(runs.default_store(), label="cli-run")
    run = explorer.train(tiny_spec(10), callbacks=[recorder])
    other = store.create({}, label="other")
    store.set_status(other, "diverged", diverged_at=3)
    run_id = recorder.run_id

    assert main(["runs", "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[0].startswith(other[:12]) and "cli-run" in out[1] and "finished" in out[1]
    assert main(["runs", "list", "--status", "finished", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in listed] == [run_id]

    assert main(["runs", "show", run_id[:8]]) == 0
    text = capsys.readouterr().out
    assert run_id in text and "finished" in text and "cli-run" in text and "model=linear" in text
    assert main(["runs", "show", run_id, "--json"]) == 0
    shown = strict_json(capsys.readouterr().out)
    assert shown["history"] == run.history and shown["spec"] == run.spec.to_dict()

    csv_path = tmp_path / "out.csv"
    assert main(["runs", "export", run_id[:8], str(csv_path)]) == 0
    assert str(csv_path) in capsys.readouterr().out
    assert [int(r["step"]) for r in csv.DictReader(csv_path.open())] == [row["step"] for row in run.history]
    assert main(["runs", "export", run_id, str(tmp_path / "out.json")]) == 0
    assert strict_json((tmp_path / "out.json").read_text())["id"] == run_id

    checkpoint = store.checkpoint_path(run_id)
    assert checkpoint.exists()
    assert main(["runs", "delete", run_id[:8]]) == 0
    assert run_id in capsys.readouterr().out and not checkpoint.exists()
    assert [r["id"] for r in store.list()] == [other]


@pytest.mark.parametrize("argv", [["runs", "show", "deadbeef"], ["runs", "delete", "deadbeef"],
                                  ["runs", "export", "deadbeef", "x.json"], ["runs", "show", "deadbeef", "--json"]])
def test_cli_unknown_id_is_a_clean_error(store, argv, capsys):
    store.create({})
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: ") and "'deadbeef'" in captured.err and "explorer runs list" in captured.err
    assert "Traceback" not in captured.err


def test_cli_export_bad_extension(store, tmp_path, capsys):
    run_id = store.create({})
    assert main(["runs", "export", run_id, str(tmp_path / "x.parquet")]) == 2
    assert ".json or .csv" in capsys.readouterr().err


# ---- resume -----------------------------------------------------------------------------------------

RESUME_SPECS = {
    "adam-cosine": {"data": {"name": "spirals", "n_train": 96, "n_val": 32},
                    "model": {"name": "mlp", "depth": 3, "width": 16},
                    "optim": {"name": "adam", "lr": 0.01, "schedule": "cosine", "warmup_steps": 5},
                    "train": {"steps": 30, "batch_size": 20, "log_every": 5, "seed": 3}},
    "sgd-momentum-ancre": {"data": {"name": "digits"}, "model": {"name": "mlp-resnet", "depth": 5, "width": 16},
                           "topology": {"name": "ancre"}, "optim": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
                           "train": {"steps": 30, "batch_size": 64, "log_every": 5, "seed": 1}},
}


def _losses(history):
    return [(row["step"], row["loss"], row.get("val_loss")) for row in history]


@pytest.mark.parametrize("name", list(RESUME_SPECS))
def test_a_stopped_run_resumes_to_the_same_result_as_an_uninterrupted_one(store, name):
    spec = explorer.ExperimentSpec.from_dict(RESUME_SPECS[name])
    whole = explorer.train(spec)
    stop = threading.Event()
    recorder = StoreRecorder(store)
    stopped = explorer.train(spec, callbacks=[recorder, lambda e: e.kind == "log" and e.step == 10 and stop.set()],
                             stop=stop)
    assert stopped.status == "stopped" and stopped.steps_done < 30
    resumed = runs.resume(recorder.run_id, store)
    assert resumed.status == "finished"
    assert _losses(resumed.history) == _losses(whole.history)
    for (key, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), key
    stored = store.get(recorder.run_id)
    assert stored["status"] == "finished" and _losses(stored["history"]) == _losses(whole.history)


def test_a_run_killed_mid_way_resumes_from_its_last_periodic_checkpoint(store):
    spec = explorer.ExperimentSpec.from_dict(RESUME_SPECS["adam-cosine"])
    whole = explorer.train(spec)

    def crash(event):
        if event.kind == "log" and event.step == 15:
            raise RuntimeError("the machine went away")

    recorder = StoreRecorder(store, checkpoint_every=10)
    with pytest.raises(RuntimeError):
        explorer.train(spec, callbacks=[recorder, crash])
    assert store.get(recorder.run_id)["status"] == "running"  # interrupted: never marked finished
    assert store.load_checkpoint(recorder.run_id)["step"] == 10
    with pytest.raises(runs.RunBusy):  # this process still holds the run, as if it were training on
        runs.resume(recorder.run_id, store)
    recorder.release()  # what the system does when the crashed process goes away
    resumed = runs.resume(recorder.run_id, store)
    assert _losses(resumed.history) == _losses(whole.history)


def test_finished_or_diverged_runs_do_not_resume(store):
    recorder = StoreRecorder(store)
    explorer.train(tiny_spec(), callbacks=[recorder])
    with pytest.raises(explorer.SpecError) as err:
        runs.resume(recorder.run_id, store)
    assert "finished" in str(err.value)


# ---- a damaged row, a refused write ----------------------------------------------------------------

def damage(store, run_id, column, text="{not json"):
    """Overwrite one column of a run's row behind the store's back, as a crash or a hand edit might."""
    table, key = ("runs", "id") if column in ("spec", "final", "environment") else (column, "run_id")
    field = {"history": "metrics", "probes": "result"}.get(column, column)
    with sqlite3.connect(store.db_path) as conn:
        assert conn.execute(f"UPDATE {table} SET {field} = ? WHERE {key} = ?", (text, run_id)).rowcount
    conn.close()


@pytest.mark.parametrize("column, text", [("spec", "{not json"), ("final", "[1, 2"), ("spec", "[1, 2]"),
                                          ("environment", '"a string"')])
def test_a_damaged_row_is_skipped_and_named_by_the_listing(store, column, text):
    bad = store.create({}, label="bad")
    good = [store.create({}, label="good"), store.create({}, label="also good")]
    store.set_status(bad, "finished", final={"loss": 0.5}, environment={"torch": "x"})
    damage(store, bad, column, text)
    listing = store.list()
    assert sorted(r["id"] for r in listing) == sorted(good)
    assert [d.run_id for d in listing.skipped] == [bad]
    assert bad[:12] in listing.notice() and f"its {column}" in listing.notice()
    assert "explorer runs delete" in listing.notice() and "\n" not in listing.notice()
    assert store.list(limit=1).notice() is None  # the newest row alone is sound
    with pytest.raises(runs.DamagedRun) as refused:
        store.get(bad)
    assert f"explorer runs delete {bad[:12]}" in str(refused.value)
    store.delete(bad[:12])  # what the message says to do works on the damaged row
    assert store.list().notice() is None and len(store.list()) == 2


@pytest.mark.parametrize("column", ["history", "probes"])
def test_a_damaged_history_or_probe_row_is_named_when_the_run_is_read(store, column):
    run_id = store.create({})
    store.append_history(run_id, [{"step": 0, "loss": 1.0}])
    store.append_probes(run_id, 0, "norms", {"norm": np.ones(2)})
    damage(store, run_id, column)
    with pytest.raises(runs.DamagedRun, match=f"step 0 is not valid JSON.*explorer runs delete {run_id[:12]}"):
        store.get(run_id)
    assert [r["id"] for r in store.list()] == [run_id]  # the listing reads the runs row only
    facts, problems = runs.check_store()
    assert any(run_id[:12] in p and "explorer runs delete" in p for p in problems), problems


def test_cli_lists_around_a_damaged_row_and_check_names_it(store, tmp_path, capsys):
    good, bad = store.create({}, label="good"), store.create({}, label="bad")
    damage(store, bad, "spec")
    assert main(["runs", "list"]) == 0
    out, err = capsys.readouterr()
    assert good[:12] in out and bad[:12] not in out
    assert err.startswith("note: ") and err.count("\n") == 1 and bad[:12] in err
    assert main(["runs", "list", "--json"]) == 0
    out, err = capsys.readouterr()
    assert [r["id"] for r in json.loads(out)] == [good] and bad[:12] in err
    for argv in (["runs", "show", bad[:8]], ["runs", "export", bad[:8], str(tmp_path / "x.json")]):
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.startswith("error: ") and err.count("\n") == 1, err
        assert f"explorer runs delete {bad[:12]}" in err and "Traceback" not in err
    assert main(["runs", "show", good[:8]]) == 0
    assert main(["runs", "check"]) == 1
    out = capsys.readouterr().out
    assert any(line.startswith("problem") and bad[:12] in line and "explorer runs delete" in line
               for line in out.splitlines()), out
    assert main(["runs", "delete", bad[:8]]) == 0
    assert main(["runs", "check"]) == 0


class FullDisk:
    """This thread's connection, except that writing history rows fails as on a full disk."""

    def __init__(self, conn):
        object.__setattr__(self, "conn", conn)

    def __getattr__(self, name):
        return getattr(self.conn, name)

    def __setattr__(self, name, value):
        setattr(self.conn, name, value)

    def executemany(self, sql, params):
        if "INTO history" in sql:
            raise sqlite3.OperationalError("database or disk is full")
        return self.conn.executemany(sql, params)


def test_a_refused_write_ends_the_run_as_error_with_the_reason(store, monkeypatch):
    connect = RunStore._conn
    monkeypatch.setattr(RunStore, "_conn", lambda self: FullDisk(connect(self)))
    recorder = StoreRecorder(store, label="full")
    with pytest.raises(runs.StoreWriteError) as refused:
        explorer.train(tiny_spec(), callbacks=[recorder])
    message = str(refused.value)
    assert "database or disk is full" in message and "EXPLORER_HOME" in message and "\n" not in message
    assert str(store.root) not in message
    record = store.get(recorder.run_id)
    assert record["status"] == "error" and "disk is full" in record["final"]["error"]
    assert runs.RunLock(store, recorder.run_id).held_elsewhere() is None  # let go


def test_cli_checkpoint_write_failure_is_one_line_and_marks_the_run_error(store, monkeypatch, capsys):
    def refuse(*args, **kwargs):
        raise RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 64 vs 0")

    monkeypatch.setattr(torch, "save", refuse)
    assert main(["train", "--preset", "ancre-fig2b-0:2", "--set", "train.steps=10", "--set", "train.log_every=5",
                 "--checkpoint-every", "5", "--json"]) == 2
    out, err = capsys.readouterr()
    assert err.startswith("error: the run store could not be written") and err.count("\n") == 1, err
    assert "inline_container" not in err and "Traceback" not in err
    [record] = store.list()
    assert record["status"] == "error" and "checkpoint" in record["final"]["error"]


@pytest.mark.parametrize("checkpointed", [True, False])
def test_runs_check_suggests_resume_only_with_a_checkpoint(store, capsys, checkpointed):
    recorder = StoreRecorder(store, checkpoint_every=5 if checkpointed else None)

    def crash(event):
        if event.kind == "log" and event.step == 10:
            raise RuntimeError("the machine went away")

    with pytest.raises(RuntimeError):
        explorer.train(tiny_spec(), callbacks=[recorder, crash])
    recorder.release()  # what the system does when the crashed process goes away
    assert main(["runs", "check"]) == 0
    [line] = [line for line in capsys.readouterr().out.splitlines() if recorder.run_id[:12] in line]
    assert "marked running" in line
    assert ("explorer runs resume" in line) == checkpointed
    if not checkpointed:
        assert "no checkpoint" in line and f"explorer runs delete {recorder.run_id[:12]}" in line


# ---- a stored run opens here even when it cannot run here -----------------------------------------------

def stopped_at_10(event):
    if event.kind == "log" and event.step == 10:
        raise explorer.StopTraining


def record_elsewhere(store, spec_dict, run, status):
    """Record `run` (trained here, on CPU) under `spec_dict`, row by row through the public API, as a run trained
    on another machine leaves it: StoreRecorder would refuse a spec this machine cannot train."""
    run_id = store.create(spec_dict, label="elsewhere", status="running", environment=runs.environment("cuda:0"))
    store.append_history(run_id, run.history)
    store.save_checkpoint(run_id, run.checkpoint())
    store.set_status(run_id, status, steps_done=run.steps_done, wall_time=run.wall_time, final=run.final)
    return run_id


def as_if_saved_on_cuda(path):
    """Rewrite a checkpoint file so each tensor's storage is tagged "cuda:0", byte for byte what torch.save writes
    for tensors on a GPU: the data.pkl pickle names every storage's location, and that name is what torch.load
    restores to unless map_location says otherwise. (Moving tensors to "meta" before saving is not the same: a
    meta tensor has no data.) Returns how many location tags were rewritten."""
    import io
    import zipfile

    with zipfile.ZipFile(path) as archive:
        entries = [(info, archive.read(info.filename)) for info in archive.infolist()]
    cpu, cuda = b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0"  # pickle protocol 2 BINUNICODE strings
    tags = sum(data.count(cpu) for info, data in entries if info.filename.endswith("/data.pkl"))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for info, data in entries:
            archive.writestr(info, data.replace(cpu, cuda) if info.filename.endswith("/data.pkl") else data)
    Path(path).write_bytes(out.getvalue())
    return tags


def tensors_of(state):
    if isinstance(state, torch.Tensor):
        yield state
    elif isinstance(state, dict):
        for value in state.values():
            yield from tensors_of(value)
    elif isinstance(state, (list, tuple)):
        for value in state:
            yield from tensors_of(value)


def one_line_spec_error(error, field):
    assert isinstance(error, explorer.SpecError) and error.path == field, error
    assert "\n" not in str(error) and "Traceback" not in str(error)


def test_a_run_trained_on_cuda_lists_shows_exports_and_is_probed_on_cpu(store, tmp_path, capsys):
    """A run whose stored spec says train.device=cuda, with a checkpoint whose tensors are tagged for CUDA: its
    record lists, shows and exports; its spec opens (form only) and rebuilds with device="cpu"; the checkpoint
    maps to the CPU, and the rebuilt model computes what the trained one did."""
    run = explorer.train(tiny_spec().with_values({"train.device": "cpu"}), callbacks=[stopped_at_10])
    spec_dict = run.spec.to_dict()
    spec_dict["train"]["device"] = "cuda"
    run_id = record_elsewhere(store, spec_dict, run, "finished")
    path = store.checkpoint_path(run_id)
    assert as_if_saved_on_cuda(path) >= 1
    if not torch.cuda.is_available():  # the file really asks for a GPU: without map_location it does not load here
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(path, weights_only=True)

    listing = store.list()
    assert [r["id"] for r in listing] == [run_id] and listing.notice() is None
    assert main(["runs", "show", run_id[:8]]) == 0
    assert run_id in capsys.readouterr().out
    exported = json.loads(store.export(run_id, tmp_path / "run.json").read_text())
    assert exported["spec"]["train"]["device"] == "cuda" and exported["history"] == run.history
    assert main(["runs", "export", run_id[:8], str(tmp_path / "run.csv")]) == 0

    spec = store.spec(run_id)
    assert spec.to_dict() == spec_dict and spec.train.device == "cuda"
    if not torch.cuda.is_available():
        with pytest.raises(explorer.SpecError) as refused:
            spec.check_runnable()
        one_line_spec_error(refused.value, "train.device")
    spec.check_runnable(device="cpu")
    state = store.load_checkpoint(run_id)
    assert {t.device.type for t in tensors_of(state)} == {"cpu"}
    model, data = explorer.build(spec, device="cpu")
    x = data.x_val[:8]
    with torch.no_grad():
        fresh = model(x)
        model.load_state_dict(state["model"])
        expected = run.model.eval()(x)
        assert not torch.allclose(fresh, expected)  # trained weights differ from fresh ones: the test can fail
        torch.testing.assert_close(model.eval()(x), expected)
    norms = explorer.probe(model, x, "norms")
    assert norms and all(np.isfinite(np.asarray(v, dtype=float)).all() for v in norms.values()
                         if np.asarray(v).dtype.kind in "fiu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present: a cuda run resumes here")
def test_resuming_a_cuda_run_on_a_cpu_machine_is_one_line(store, capsys):
    """Resume refuses a run stored with train.device=cuda before it trains, naming the field and the fix, and
    leaves the run as it was; the same run stored with train.device=cpu resumes."""
    run = explorer.train(tiny_spec(), callbacks=[stopped_at_10])
    assert run.status == "stopped" and "optimizer" in run.checkpoint()
    on_cuda = run.spec.to_dict()
    on_cuda["train"]["device"] = "cuda"
    cuda_id = record_elsewhere(store, on_cuda, run, "stopped")
    with pytest.raises(explorer.SpecError) as refused:
        explorer.resume(cuda_id, store)
    one_line_spec_error(refused.value, "train.device")
    assert "cpu or auto" in refused.value.message and cuda_id[:8] in refused.value.message
    record = store.get(cuda_id)
    assert record["status"] == "stopped" and record["steps_done"] == 10 and record["history"] == run.history
    assert runs.RunLock(store, cuda_id).held_elsewhere() is None
    assert main(["runs", "resume", cuda_id[:8]]) == 2
    out, err = capsys.readouterr()
    assert err.startswith("error: train.device") and err.count("\n") == 1 and "Traceback" not in err

    cpu_id = record_elsewhere(store, run.spec.to_dict(), run, "stopped")
    resumed = explorer.resume(cpu_id, store)
    assert resumed.status == "finished" and store.get(cpu_id)["steps_done"] == 20


def test_a_run_on_a_data_file_since_deleted_opens_but_does_not_build(store, tmp_path, capsys):
    """A run trained on a text file that is gone: its record lists, shows and exports, its spec opens, and
    building it says data.path on one line."""
    text = tmp_path / "corpus.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    spec = explorer.ExperimentSpec.from_dict({
        "data": {"name": "text", "path": str(text), "context": 8, "n_val": 16},
        "model": {"name": "gpt", "depth": 1, "width": 16, "heads": 2},
        "topology": {"name": "none"}, "optim": {"name": "adam", "lr": 1e-3},
        "train": {"steps": 4, "batch_size": 8, "log_every": 2, "device": "cpu"}})
    recorder = StoreRecorder(store)
    run = explorer.train(spec, callbacks=[recorder])
    run_id = recorder.run_id
    text.unlink()

    assert [r["id"] for r in store.list()] == [run_id]
    assert main(["runs", "show", run_id[:8]]) == 0
    assert store.get(run_id)["history"] == run.history
    assert json.loads(store.export(run_id, tmp_path / "run.json").read_text())["spec"] == spec.to_dict()
    stored = store.spec(run_id)
    assert stored == spec
    for attempt in (lambda: stored.check_runnable(device="cpu"), lambda: explorer.build(stored, device="cpu")):
        with pytest.raises(explorer.SpecError) as refused:
            attempt()
        one_line_spec_error(refused.value, "data.path")
    assert store.load_checkpoint(run_id) is not None  # the weights are still there, for when the file is back


def test_a_run_whose_model_is_no_longer_registered_opens_as_a_record(store, tmp_path, capsys):
    """A run of a model registered when it trained and not now: its record lists, shows and exports; its spec
    cannot be rebuilt, which is a one-line SpecError at model.name."""
    import dataclasses

    models = explorer.registry("models")
    models.add(dataclasses.replace(models["linear"], name="retired-linear"))
    try:
        spec_dict = tiny_spec().to_dict()
        spec_dict["model"]["name"] = "retired-linear"
        recorder = StoreRecorder(store, checkpoint_every=10)
        run = explorer.train(explorer.ExperimentSpec.from_dict(spec_dict), callbacks=[recorder])
        assert store.spec(recorder.run_id).model.name == "retired-linear"  # opens while registered
    finally:
        models.unregister("retired-linear")
    run_id = recorder.run_id

    listing = store.list()
    assert [r["id"] for r in listing] == [run_id] and listing.notice() is None
    assert main(["runs", "show", run_id[:8]]) == 0
    record = store.get(run_id)
    assert record["history"] == run.history and record["spec"] == spec_dict
    assert json.loads(store.export(run_id, tmp_path / "run.json").read_text())["spec"] == spec_dict
    with pytest.raises(explorer.SpecError) as refused:
        store.spec(run_id)
    one_line_spec_error(refused.value, "model.name")
    assert "retired-linear" in refused.value.message and "registered" in refused.value.message


def test_store_messages_name_explorer_home_not_its_path(store, capsys):
    """A damaged checkpoint, a damaged database and a missing database beside checkpoints: each message names
    EXPLORER_HOME and the run, never the store's folder, and suggests no shell command."""
    recorder = StoreRecorder(store)
    explorer.train(tiny_spec(), callbacks=[recorder])
    run_id = recorder.run_id
    store.checkpoint_path(run_id).write_bytes(b"not a checkpoint")
    messages = []
    with pytest.raises(StoreError) as damaged:
        store.load_checkpoint(run_id)
    messages.append(str(damaged.value))
    assert run_id[:12] in messages[-1] and f"explorer runs delete {run_id[:12]}" in messages[-1]
    store.close()
    for suffix in ("-wal", "-shm"):
        store.db_path.with_name(store.db_path.name + suffix).unlink(missing_ok=True)
    store.db_path.write_bytes(b"this is not a database " * 200)
    with pytest.raises(StoreError) as unreadable:
        RunStore()
    messages.append(str(unreadable.value))
    store.db_path.unlink()
    with pytest.raises(StoreError) as missing:
        RunStore()
    messages.append(str(missing.value))
    for message in messages:
        assert "EXPLORER_HOME" in message and "\n" not in message, message
        assert str(store.root) not in message and "mv " not in message, message


CUDA_STORE = Path(__file__).parent / "data" / "cuda_store"  # benchmarks/gpu_check.py --store, on an NVIDIA H200


def test_a_store_written_on_a_gpu_machine_opens_and_evaluates_on_cpu(tmp_path):
    """A real store from a GPU machine (the ANCRe Fig. 2b preset trained 40 steps with train.device=cuda): it
    lists, its checkpoint maps to the CPU, and the model rebuilt here gives the validation loss the GPU
    recorded (float32 on two devices: equal to 1e-4 relative)."""
    store = explorer.RunStore(shutil.copytree(CUDA_STORE, tmp_path / "home"))  # a copy: never mutate test data
    [record] = store.list()
    assert record["environment"]["device"].startswith("cuda") and record["status"] == "finished"
    spec = store.spec(record["id"])
    assert spec.train.device == "cuda"
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA"):  # the file asks for a GPU unless mapped
            torch.load(store.checkpoint_path(record["id"]), weights_only=True)
    model, data = explorer.build(spec, device="cpu")
    untrained = explorer.evaluate(model, data)["val_loss"]
    model.load_state_dict(store.load_checkpoint(record["id"])["model"])
    recorded = store.get(record["id"], arrays=False)["final"]["val_loss"]
    assert explorer.evaluate(model, data)["val_loss"] == pytest.approx(recorded, rel=1e-4)
    assert untrained != pytest.approx(recorded, rel=1e-2)  # the weights decide it: the check can fail
    assert set(explorer.probe(model, data.x_val[:8], "coefficients"))
