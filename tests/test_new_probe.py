"""A probe is one function in one file: registered here, it is probed, offered and drawn on the Train page."""

import json

import pytest
import torch

import explorer
from explorer.probes import PROBES
from explorer_app import jobs

NAME = "output-scale"


@pytest.fixture
def output_scale():
    """A probe that exists only while the test runs (and declares no figure)."""

    @PROBES.register(NAME, "mean |output| of the model over the batch, per output unit",
                     cost=lambda c: c.forward(c.n))
    def probe(model, inputs):
        with torch.no_grad():
            out = model(inputs).abs()
        return {"mean_abs": out.mean(), "per_unit": out.mean(0)}

    yield NAME
    PROBES.unregister(NAME)


class FinishedJob:
    """A finished training job as the Train page reads it. The server trains in worker processes, which know
    only the library's probes; this run trained here, where the test's probe is registered."""

    active = False
    run_id = None
    id = "test-job"

    def __init__(self, run):
        self.run, self.spec = run, run.spec

    def view(self, since: int = 0) -> jobs.JobView:
        latest = {row["name"]: row["result"] for row in self.run.probe_history}
        steps = [row["step"] for row in self.run.probe_history]
        history = list(self.run.history)
        return jobs.JobView(id=self.id, label="test", kind="train", status="finished", steps_done=self.run.steps_done,
                            total_steps=self.run.spec.train.steps, error=None, queue_position=None,
                            history=history[since:], history_length=len(history), probes=latest,
                            probe_step=max(steps), steps_per_second=None, diverged_at=None, run_id=None)

    def pause(self):
        pass

    resume = step = stop = pause


def test_a_probe_registered_in_a_test_is_offered_and_drawn_on_the_train_page(open_page, output_scale):
    spec = explorer.ExperimentSpec.default().with_values({"train.steps": 10, "train.log_every": 5})
    run = explorer.train(spec, probes={"coefficients": {}, output_scale: {}}, probe_every=5)
    result = FinishedJob(run).view().probes[output_scale]
    assert set(result) == {"mean_abs", "per_unit"}

    at = open_page("train")
    assert output_scale in at.selectbox(key="train-probe").options
    at.selectbox(key="train-probe").set_value(output_scale).run()
    at.session_state["train-job"] = FinishedJob(run)
    at.run()
    assert not at.exception
    charts = [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]
    [table] = [c for c in charts if output_scale in c["layout"]["title"]["text"]]
    names, _, values = table["data"][0]["cells"]["values"]
    assert names == ["mean_abs", "per_unit"]
    assert values[0] == f"{float(result['mean_abs']):.4g}"
    assert values[1].split(", ") == [f"{v:.4g}" for v in result["per_unit"]]


PLUGIN = '''from explorer.probes.core import PROBES


@PROBES.register("plugin-scale", "mean |input| of the batch (a probe from the plug-in folder)", cost=lambda c: 0)
def plugin_scale(model, inputs):
    return {"mean_abs": inputs.abs().mean()}
'''


def test_a_probe_file_in_the_plugin_folder_registers_in_a_fresh_interpreter(tmp_path):
    """EXPLORER_PLUGINS_DIR names a folder outside the package: importing the library imports each file in it
    (as a server's worker does), and the probe runs like a built-in one."""
    import os
    import subprocess
    import sys

    (tmp_path / "scale.py").write_text(PLUGIN)
    (tmp_path / "_skipped.py").write_text("raise RuntimeError('a file starting with _ is not a plug-in')\n")
    code = ("import torch, explorer; from explorer.probes import PROBES, probe; "
            "model = torch.nn.Linear(2, 2); "
            "print(float(probe(model, torch.ones(3, 2), 'plugin-scale')['mean_abs']))")
    env = {**os.environ, "EXPLORER_PLUGINS_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1.0"]


def test_the_plugin_folder_setting_and_a_broken_plugin_each_say_what_to_fix(tmp_path, monkeypatch):
    from explorer.registries import SpecError, import_files
    from explorer.settings import SettingError, plugins_folder

    monkeypatch.delenv("EXPLORER_PLUGINS_DIR", raising=False)
    assert plugins_folder() is None
    monkeypatch.setenv("EXPLORER_PLUGINS_DIR", str(tmp_path))
    assert plugins_folder() == tmp_path
    monkeypatch.setenv("EXPLORER_PLUGINS_DIR", str(tmp_path / "missing"))
    with pytest.raises(SettingError) as error:
        plugins_folder()
    assert error.value.path == "EXPLORER_PLUGINS_DIR" and "not a folder" in str(error.value)

    (tmp_path / "broken.py").write_text("import no_such_module_here\n")
    with pytest.raises(SpecError) as error:
        import_files(tmp_path, "explorer_test_plugin_")
    assert error.value.path.endswith("broken.py") and "ModuleNotFoundError" in str(error.value)
    import sys
    assert "explorer_test_plugin_broken" not in sys.modules  # a fixed file is imported on the next try
