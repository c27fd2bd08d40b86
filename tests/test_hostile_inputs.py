"""Hostile or careless input to the library and the CLI gives a SpecError or a one-line error
(exit 2), never a traceback; corrupt stores and checkpoints name the file and what to do."""

from __future__ import annotations

import json
import os
import pickle
import time

import pytest
import torch

import explorer
from explorer import ExperimentSpec, SpecError
from explorer.cli import main
from explorer.runs import RunStore, StoreRecorder

TINY = {"data": {"name": "identity", "dim": 4, "n_train": 32}, "model": {"name": "linear", "depth": 2, "width": 4},
        "train": {"steps": 20, "log_every": 10}}


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, out, err, *needles):
    assert code == 2, (code, out, err)
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err + out
    for needle in needles:
        assert needle in err, f"{needle!r} not in {err!r}"


@pytest.mark.parametrize("text", [
    '{"model": {"depth": ' + "9" * 5000 + '}}',                  # ValueError: int digits limit
    "[" * 5000 + "]" * 5000,                                      # RecursionError
    '{"model": ' + '{"a": ' * 5000 + "1" + "}" * 5001,            # RecursionError inside an object
    '{"model": {"name": ["mlp"]}}',                               # TypeError: unhashable name
    '{"model": {"name": {"x": 1}}}',
    '{"model": {"depth": NaN}}', '{"optim": {"lr": Infinity}}', '{"optim": {"lr": -Infinity}}',
    '{"model": {"depth": 1e400}}', '{"model": {"depth": ' + "9" * 400 + '}}',
    '{"data": {"path": ' + json.dumps("x" * 100_000) + '}}',
    '[]', '"spec"', 'null', '{"data": []}', '{"1": {}}', '{"model": {"1": 2}}',
    '{"train": {"steps": true}}', '{"topology": {"name": "tau", "value": [1]}}',
    " " * 2_000_000,
])
def test_bad_spec_json_is_a_spec_error(text):
    with pytest.raises(SpecError) as refused:
        ExperimentSpec.from_json(text)
    assert len(str(refused.value)) < 600  # the message quotes the value cut short


def test_non_string_keys_and_values_through_the_api_are_spec_errors():
    for raw in ({1: {}}, {"model": {1: 2}}, {"model": {"name": 3}}, [("model", {})]):
        with pytest.raises(SpecError):
            ExperimentSpec.from_dict(raw)
    with pytest.raises(SpecError):
        ExperimentSpec.default().with_values({("model", "depth"): 3})
    with pytest.raises(SpecError):
        ExperimentSpec.from_query({"model.depth": "9" * 5000})


def test_cli_refuses_spec_files_that_are_not_small_regular_files(capsys, tmp_path):
    started = time.monotonic()
    assert_one_line_error(*cli(capsys, "train", "--spec", "/dev/zero"), "--spec", "not a regular file")
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as handle:  # a 2 GB sparse file: no disk used, and it must not be read
        handle.truncate(2 * 1024 ** 3)
    assert_one_line_error(*cli(capsys, "train", "--spec", huge), "--spec", "2,147,483,648 bytes")
    assert_one_line_error(*cli(capsys, "train", "--spec", tmp_path), "not a regular file")
    assert time.monotonic() - started < 30  # generous: reading either would take far longer or never end
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 5000 + "]" * 5000)
    assert_one_line_error(*cli(capsys, "train", "--spec", deep), "spec: ", "nested too deeply")
    typed = tmp_path / "typed.json"
    typed.write_text('{"model": {"name": ["mlp"]}}')
    assert_one_line_error(*cli(capsys, "train", "--spec", typed), "model.name")


@pytest.fixture
def recorded(tmp_path, monkeypatch):
    """A store with one stopped, checkpointed run (what `runs resume` continues)."""
    home = tmp_path / "home"
    monkeypatch.setenv("EXPLORER_HOME", str(home))
    store = RunStore(home)
    stop = __import__("threading").Event()
    spec = ExperimentSpec.from_dict(TINY)
    recorder = StoreRecorder(store, label="tiny")

    def stop_at_10(event):
        if event.kind == "log" and event.step >= 10:
            stop.set()

    run = explorer.train(spec, callbacks=[recorder, stop_at_10], stop=stop)
    assert run.status == "stopped"
    return store, recorder.run_id


def _damage_database(db, how: str) -> None:
    data = db.read_bytes()
    if how == "truncated":
        db.write_bytes(data[:len(data) // 2 or 100])
    elif how == "overwritten":
        db.write_bytes(os.urandom(len(data)))
    else:  # text over the header
        db.write_bytes(b"this is not a database " * 50 + data[1200:])


@pytest.mark.parametrize("how", ["truncated", "overwritten", "text"])
def test_cli_on_a_damaged_database_is_one_line(capsys, recorded, how):
    store, run_id = recorded
    store.close()
    for suffix in ("-wal", "-shm"):  # what a copy of the file alone (or a crash after a checkpoint) leaves
        store.db_path.with_name(store.db_path.name + suffix).unlink(missing_ok=True)
    _damage_database(store.db_path, how)
    for argv in (["runs", "list"], ["runs", "show", run_id[:8]], ["runs", "resume", run_id[:8]],
                 ["runs", "export", run_id[:8], store.root / "out.json"], ["runs", "list", "--json"]):
        code, out, err = cli(capsys, *argv)
        if code == 0 and how == "truncated":  # SQLite may still read a truncated file's first pages
            continue
        assert_one_line_error(code, out, err, "EXPLORER_HOME", "move it aside")
        assert str(store.root) not in err  # the setting's name, not the server's path


def _corrupt_checkpoints(path, run_spec):
    good = path.read_bytes()
    yield "empty", b""
    yield "truncated", good[:len(good) // 2]
    yield "random", os.urandom(2000)
    yield "malicious pickle", pickle.dumps(type("Evil", (), {"__reduce__": lambda self: (os.system, ("true",))})())
    buffer = __import__("io").BytesIO()
    torch.save([1, 2, 3], buffer)
    yield "a list", buffer.getvalue()
    buffer = __import__("io").BytesIO()
    torch.save({"step": 3, "model": {"w": torch.ones(2)}, "optimizer": {}}, buffer)
    yield "wrong parts", buffer.getvalue()


def test_cli_resume_on_corrupt_checkpoints_is_one_line(capsys, recorded):
    store, run_id = recorded
    path = store.checkpoint_path(run_id)
    kinds = list(_corrupt_checkpoints(path, None))
    for kind, data in kinds:
        path.write_bytes(data)
        code, out, err = cli(capsys, "runs", "resume", run_id[:8])
        assert_one_line_error(code, out, err, "EXPLORER_HOME", f"explorer runs delete {run_id[:12]}",
                              "move that file aside")
        assert str(store.root) not in err
        assert "weights_only=False" not in err, kind
    assert len(kinds) >= 5


# ---- the store fails loudly -----------------------------------------------------------------------

@pytest.mark.parametrize("state", ["empty", "missing"])
def test_an_empty_or_missing_database_beside_checkpoints_is_reported_not_recreated(capsys, recorded, state):
    store, run_id = recorded
    store.close()
    for suffix in ("", "-wal", "-shm"):
        store.db_path.with_name(store.db_path.name + suffix).unlink(missing_ok=True)
    if state == "empty":
        store.db_path.write_bytes(b"")
    with pytest.raises(explorer.runs.StoreError, match="checkpoint"):
        RunStore(store.root)
    assert_one_line_error(*cli(capsys, "runs", "list"), "EXPLORER_HOME", "restore runs.sqlite")
    assert (store.db_path.exists() and store.db_path.stat().st_size == 0) if state == "empty" else not store.db_path.exists()
    code, out, err = cli(capsys, "runs", "check")
    assert code == 1 and "problem" in out and "restore runs.sqlite" in out and "Traceback" not in out + err


def test_runs_check_says_ok_or_names_each_problem(capsys, recorded):
    store, run_id = recorded
    code, out, _ = cli(capsys, "runs", "check")
    assert code == 0 and out.strip().endswith("ok") and "1 run(s)" in out
    store.checkpoint_path(run_id).write_bytes(b"garbage")
    (store.checkpoint_dir / ("f" * 32 + ".pt")).write_bytes(b"x")
    code, out, _ = cli(capsys, "runs", "check")
    assert code == 1
    assert f"{store.checkpoint_path(run_id)} is damaged" in out and "belongs to no recorded run" in out


def test_a_run_being_trained_is_locked_against_a_second_writer(capsys, recorded):
    import subprocess
    import sys

    store, run_id = recorded
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from explorer.runs import RunStore, RunLock; "
        f"lock = RunLock(RunStore({str(store.root)!r}), {run_id!r}).acquire(); print('held', flush=True); time.sleep(120)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert_one_line_error(*cli(capsys, "runs", "resume", run_id[:8]), "being trained by process", str(holder.pid))
    finally:
        holder.kill()  # kill -9: the system drops its lock
        holder.wait()
    code, out, err = cli(capsys, "runs", "resume", run_id[:8], "--json")
    assert code == 0, err
    assert json.loads(out)["status"] == "finished"


def test_claims_with_an_unknown_id_fails_with_the_valid_ids(capsys):
    code, out, err = cli(capsys, "claims", "--id", "nosuch")
    assert_one_line_error(code, out, err, "nosuch", "valid ids")
    from explorer.papers.claims import claims

    assert claims()[0].id in err
