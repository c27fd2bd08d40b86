"""The `explorer` command line, called in-process (and once through the installed script)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import explorer
from explorer import ExperimentSpec
from explorer.cli import main

PRESET = "ancre-fig2b-0:2"


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_clean_error(code, out, err, *needles):
    assert code == 2
    assert err.startswith("error: ")
    assert "Traceback" not in err and "Traceback" not in out
    for needle in needles:
        assert needle in err, f"{needle!r} not in {err!r}"


# ---- listing ---------------------------------------------------------------------------


def test_presets_lists_every_preset(capsys):
    code, out, err = run_cli(capsys, "presets")
    assert code == 0
    listed = [line.split()[0] for line in out.splitlines() if line.strip()]
    assert listed == list(explorer.registry("presets"))
    for name, description in explorer.registry("presets").describe().items():
        assert any(line.startswith(name) and line.rstrip().endswith(description) for line in out.splitlines())


def test_list_topologies(capsys):
    code, out, _ = run_cli(capsys, "list", "topologies")
    assert code == 0
    listed = [line.split()[0] for line in out.splitlines() if line.strip()]
    assert listed == list(explorer.registry("topologies"))
    for name in ("none", "cascaded", "tau", "shortcuts", "ancre", "grn-v1", "grn-v2", "grn-v3"):
        assert name in listed


def test_list_models_json(capsys):
    code, out, _ = run_cli(capsys, "list", "models", "--json")
    assert code == 0
    mapping = json.loads(out)
    assert isinstance(mapping, dict)
    assert mapping == explorer.registry("models").describe()
    assert {"linear", "lowrank", "mlp-resnet", "mlp"} <= set(mapping)


def test_list_unknown_kind_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["list", "bogus"])
    assert info.value.code == 2


# ---- train -----------------------------------------------------------------------------


def test_train_preset_json(capsys):
    code, out, err = run_cli(capsys, "train", "--preset", PRESET, "--set", "train.steps=50", "--json")
    assert code == 0, err
    summary = json.loads(out)  # stdout holds exactly one JSON document
    for key in ("status", "steps", "final_loss", "final_val_loss", "history", "spec"):
        assert key in summary
    assert summary["status"] == "finished"
    assert summary["steps"] == 50
    history = summary["history"]
    assert isinstance(history, list) and history
    for row in history:
        assert isinstance(row, dict)
        assert type(row["step"]) is int
        assert type(row["loss"]) is float
    log_every = explorer.preset(PRESET).train.log_every
    assert [row["step"] for row in history] == list(range(0, 51, log_every))
    assert summary["final_loss"] == history[-1]["loss"]
    assert isinstance(summary["final_val_loss"], float)
    # the printed spec is the preset with the change applied
    expected = explorer.preset(PRESET).with_values({"train.steps": 50})
    assert ExperimentSpec.from_dict(summary["spec"]) == expected
    assert summary["spec"]["train"]["steps"] == 50


def test_set_changes_spec_by_dotted_path(capsys):
    code, out, err = run_cli(capsys, "train", "--preset", PRESET, "--set", "train.steps=10", "--set", "model.depth=2",
                             "--set", "optim.lr=0.01", "--set", "topology.shortcuts = 0:1", "--json")
    assert code == 0, err
    spec = json.loads(out)["spec"]
    assert spec["model"]["depth"] == 2
    assert spec["optim"]["lr"] == 0.01
    assert spec["topology"]["shortcuts"] == "0:1"
    assert spec["train"]["steps"] == 10
    assert spec["model"]["width"] == explorer.preset(PRESET).model.width  # untouched
    assert json.loads(out)["steps"] == 10


def test_spec_file(capsys, tmp_path):
    spec = explorer.preset("ancre-fig2b-cascaded").with_values({"train.steps": 10, "train.seed": 3})
    path = tmp_path / "spec.json"
    path.write_text(spec.to_json())
    code, out, err = run_cli(capsys, "train", "--spec", str(path), "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert ExperimentSpec.from_dict(summary["spec"]) == spec
    assert summary["steps"] == 10


def test_spec_file_with_set(capsys, tmp_path):
    spec = explorer.preset(PRESET).with_values({"train.steps": 10})
    path = tmp_path / "spec.json"
    path.write_text(spec.to_json())
    code, out, err = run_cli(capsys, "train", "--spec", str(path), "--set", "train.steps=20", "--json")
    assert code == 0, err
    assert json.loads(out)["spec"]["train"]["steps"] == 20


def test_train_without_json_prints_a_summary(capsys):
    code, out, err = run_cli(capsys, "train", "--preset", PRESET, "--set", "train.steps=10", "--quiet")
    assert code == 0, err
    assert "status" in out and "finished" in out
    with pytest.raises(json.JSONDecodeError):
        json.loads(out)


# ---- errors ----------------------------------------------------------------------------


def test_bad_set_value_exits_2_with_the_field_path(capsys):
    code, out, err = run_cli(capsys, "train", "--preset", PRESET, "--set", "model.depth=0", "--json")
    assert_clean_error(code, out, err, "model.depth", "at least 1")
    assert out == ""


def test_unknown_preset_exits_2(capsys):
    code, out, err = run_cli(capsys, "train", "--preset", "no-such-preset")
    assert_clean_error(code, out, err, "no-such-preset", PRESET)  # lists the valid names


def test_set_without_equals_exits_2(capsys):
    code, out, err = run_cli(capsys, "train", "--preset", PRESET, "--set", "model.depth")
    assert_clean_error(code, out, err, "--set", "PATH=VALUE")


def test_set_unknown_path_exits_2(capsys):
    code, out, err = run_cli(capsys, "train", "--preset", PRESET, "--set", "model.dpeth=3")
    assert_clean_error(code, out, err, "model.dpeth", "depth")


def test_missing_spec_file_exits_2(capsys, tmp_path):
    missing = tmp_path / "nope.json"
    code, out, err = run_cli(capsys, "train", "--spec", str(missing))
    assert_clean_error(code, out, err, "--spec", str(missing), "No such file")


def test_invalid_json_spec_file_exits_2(capsys, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"model": {"depth": 3,}')
    code, out, err = run_cli(capsys, "train", "--spec", str(path))
    assert_clean_error(code, out, err, "JSON", "line 1")


def test_spec_file_with_non_object_json_exits_2(capsys, tmp_path):
    path = tmp_path / "list.json"
    path.write_text("[1, 2]")
    code, out, err = run_cli(capsys, "train", "--spec", str(path))
    assert_clean_error(code, out, err, "spec")


def test_spec_file_with_invalid_value_exits_2(capsys, tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"model": {"depth": -3}}))
    code, out, err = run_cli(capsys, "train", "--spec", str(path))
    assert_clean_error(code, out, err, "model.depth")


def test_non_utf8_spec_file_exits_2(capsys, tmp_path):
    path = tmp_path / "binary.json"
    path.write_bytes(b"\xff\xfe\x00\x01not json")
    code, out, err = run_cli(capsys, "train", "--spec", str(path))
    assert_clean_error(code, out, err, "--spec")


# ---- the installed console script ------------------------------------------------------


def _console_script() -> str:
    """The installed `explorer` script: on PATH, or next to this interpreter (an unactivated venv)."""
    exe = shutil.which("explorer") or shutil.which("explorer", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("the `explorer` console script is not installed")
    return exe


def test_console_script_train_json():
    exe = _console_script()
    result = subprocess.run(
        [exe, "train", "--preset", PRESET, "--set", "train.steps=20", "--json"],
        capture_output=True, text=True, timeout=180,
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["status"] == "finished"
    assert summary["steps"] == 20
    assert summary["spec"]["train"]["steps"] == 20


def test_console_script_error_exit_code():
    exe = _console_script()
    result = subprocess.run([exe, "train", "--preset", PRESET, "--set", "model.depth=0"],
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 2
    assert "model.depth" in result.stderr and "Traceback" not in result.stderr


# ---- probe -----------------------------------------------------------------------------


def test_probe_json_gives_the_probe_arrays_after_training(capsys):
    code, out, err = run_cli(capsys, "probe", "--preset", PRESET, "--train-steps", "30", "--probe", "coefficients",
                             "--json")
    assert code == 0, err
    payload = json.loads(out)
    assert payload["probe"] == "coefficients" and payload["train_steps"] == 30
    own = payload["result"]["own"]
    assert own[2][0] == 1.0 and sum(map(sum, own)) == 1.0  # the preset's single shortcut 0:2


def test_probe_passes_options_and_the_datasets_masks(capsys):
    code, out, err = run_cli(capsys, "probe", "--preset", "skip-table1-skipless-init", "--set", "model.depth=1",
                             "--set", "model.width=16", "--probe", "pca", "--option", "block=1", "--inputs", "16", "--json")
    assert code == 0, err
    result = json.loads(out)["result"]
    assert len(result["rgb"]) == 1 and len(result["rgb"][0]) == 16  # block 1 only, 16 images
    assert len(result["miou"]) == 2  # the embedding and the one block, scored on the shapes masks


def test_probe_text_output_and_bad_options(capsys):
    code, out, err = run_cli(capsys, "probe", "--preset", PRESET, "--probe", "jacobian", "--option", "k=2")
    assert code == 0, err
    assert "singular_values" in out and "(8, 2)" in out
    assert_clean_error(*run_cli(capsys, "probe", "--preset", PRESET, "--probe", "jacobian", "--option", "k=-1"),
                       "probe.k")
    assert_clean_error(*run_cli(capsys, "probe", "--preset", PRESET, "--probe", "jacobain"), "did you mean 'jacobian'")
    assert_clean_error(*run_cli(capsys, "probe", "--preset", PRESET, "--probe", "pca"), "vit")


# ---- recording ---------------------------------------------------------------------------


def test_train_records_the_run_in_the_store_unless_told_not_to(capsys):
    code, out, err = run_cli(capsys, "train", "--preset", PRESET, "--set", "train.steps=20", "--json")
    assert code == 0, err
    run_id = json.loads(out)["run_id"]
    code, out, err = run_cli(capsys, "runs", "show", run_id[:8], "--json")
    assert code == 0 and json.loads(out)["status"] == "finished" and len(json.loads(out)["history"]) == 3
    code, out, _ = run_cli(capsys, "train", "--preset", PRESET, "--set", "train.steps=20", "--json", "--no-record")
    assert "run_id" not in json.loads(out)
    code, out, _ = run_cli(capsys, "runs", "list", "--json")
    assert [r["id"] for r in json.loads(out)] == [run_id]
    assert_clean_error(*run_cli(capsys, "runs", "resume", run_id), "finished")


# ---- failures: memory, a closed pipe ---------------------------------------------------


FULL_BATCH_TEXT = {"data.name": "text", "data.max_chars": 200_000, "model.name": "gpt", "model.width": 16,
                   "model.depth": 1, "optim.name": "gd", "train.steps": 1, "train.log_every": 1, "train.batch_size": 1}


def test_full_batch_training_is_refused_before_a_run_is_recorded(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_MAX_MODEL_MB", "2048")  # restored after the test: --max-model-mb sets it
    spec = tmp_path / "spec.json"
    spec.write_text(ExperimentSpec.default().with_values(FULL_BATCH_TEXT).to_json())
    code, out, err = run_cli(capsys, "train", "--spec", str(spec), "--max-model-mb", "100")
    assert_clean_error(code, out, err, "optim.name", "whole training set", "data.max_chars", "optim.name=sgd")
    assert err.count("\n") == 1
    assert run_cli(capsys, "runs", "list", "--json")[1].strip() == "[]"


OUT_OF_MEMORY = """
import resource, sys
from explorer.cli import main
# address space for what is loaded now and 300 MB more: the run below asks for more than that
used = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (used + 300_000_000, resource.RLIM_INFINITY))
sys.exit(main(sys.argv[1:]))
"""


def test_running_out_of_memory_ends_the_run_as_error_in_one_line():
    changes = {"data.name": "identity", "data.dim": 64, "data.n_train": 20_000, "data.n_val": 64,  # data: 10 MB
               "model.name": "mlp", "model.width": 1024, "model.depth": 4, "optim.name": "gd",  # weights: 70 MB
               "train.steps": 1, "train.log_every": 1}
    sets = [f"--set={key}={value}" for key, value in changes.items()]
    done = subprocess.run([sys.executable, "-c", OUT_OF_MEMORY, "train", "--preset", PRESET, *sets, "--quiet",
                           "--max-model-mb", "100000", "--max-data-mb", "100000"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "out of memory" in done.stderr and "model.width" in done.stderr
    (run,) = explorer.RunStore().list()
    assert run["status"] == "error" and "out of memory" in run["final"]["error"]


@pytest.mark.parametrize("argv", [["list", "models"], ["runs", "list"]])
def test_a_reader_that_stops_early_gets_no_traceback(argv):
    """`explorer runs list | head -5`: the reader closes the pipe before the listing is written."""
    child = subprocess.Popen([sys.executable, "-m", "explorer.cli", *argv], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env={**os.environ, "OMP_NUM_THREADS": "1"})
    child.stdout.close()  # before the child has imported anything, let alone printed
    err = child.stderr.read().decode()
    assert child.wait(timeout=120) in (0, 141), err
    assert "Traceback" not in err and "BrokenPipeError" not in err and "Exception ignored" not in err, err


def test_batch_norm_on_one_training_example_is_refused_in_one_line(capsys):
    code, out, err = run_cli(capsys, "train", "--preset", PRESET, "--set", "data.name=affine", "--set", "model.name=mlp",
                             "--set", "data.n_train=1", "--set", "model.norm=batchnorm", "--no-record")
    assert_clean_error(code, out, err, "data.n_train", "model.norm")
    assert err.count("\n") == 1


def test_runs_delete_refuses_a_run_being_trained_unless_forced(capsys):
    from explorer.runs import RunLock, default_store

    store = default_store()
    run_id = store.create({}, label="training")
    lock = RunLock(store, run_id).acquire()  # this process trains it
    try:
        code, out, err = run_cli(capsys, "runs", "delete", run_id[:8])
        assert_clean_error(code, out, err, f"run {run_id[:8]} is being trained by process {os.getpid()}",
                           "stop it first or pass --force")
        assert [r["id"] for r in store.list()] == [run_id]
        code, out, err = run_cli(capsys, "runs", "delete", run_id[:8], "--force")
        assert code == 0 and run_id in out and store.list() == []
    finally:
        lock.release()


# ---- claims ----------------------------------------------------------------------------


def test_claims_json_is_alone_on_stdout_and_progress_goes_to_stderr():
    done = subprocess.run([sys.executable, "-m", "explorer.cli", "claims", "--fast", "--json", "--id",
                           "shortcut-02-exponential", "--paper", "ancre", "--workers", "1"],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = json.loads(done.stdout)
    assert row["id"] == "shortcut-02-exponential"
    assert "[1/1] ancre/shortcut-02-exponential" in done.stderr


def test_claims_reproduce_reruns_a_recorded_seed_and_the_small_linear_runs_agree(capsys):
    """The LNN runs are small and linear: their per-seed numbers rerun bit for bit (machine and threads aside)."""
    code, out, err = run_cli(capsys, "claims", "--reproduce", "ancre/shortcut-02-exponential", "--seed", "1")
    assert code == 0, err
    assert out.startswith("ancre/shortcut-02-exponential, seed 1, rerun in full mode") and "machine" in out
    blocks = out.split("\ndecade growth ")[1:]
    assert len(blocks) == 2  # the row's two per-seed series
    for block in blocks:
        recorded, now, difference = (line.split(None, 1)[1] for line in block.splitlines()[1:4])
        assert recorded == now and difference == "0", block


@pytest.mark.parametrize("argv, field", [(["--reproduce", "ancre/no-such-claim"], "--reproduce"),
                                         (["--reproduce", "ancre/shortcut-02-exponential", "--seed", "99"], "--seed"),
                                         (["--seed", "0"], "--seed")])
def test_claims_reproduce_of_what_was_not_recorded_is_one_line_naming_the_flag(capsys, argv, field):
    code, out, err = run_cli(capsys, "claims", *argv)
    assert_clean_error(code, out, err, f"error: {field}:")
    assert err.count("\n") == 1 and out == ""


def test_claims_record_with_a_papers_cache_folder_is_refused_before_anything_runs(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_PAPERS_CACHE_DIR", str(tmp_path / "cache"))
    code, out, err = run_cli(capsys, "claims", "--paper", "ancre", "--record")
    assert_clean_error(code, out, err, "error: --record:")
    assert "EXPLORER_PAPERS_CACHE_DIR" in err and not (tmp_path / "cache").exists()
