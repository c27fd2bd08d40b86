"""Residual Explorer: see and test how residual connections shape deep networks.

Data flows one way: spec -> model -> run -> probes -> figures (explorer.plots).

    import explorer
    spec = explorer.preset("ancre-fig2b-0:2")
    run = explorer.train(spec)
    run.summary()["final_loss"]
"""

from explorer.nn.models import roles
from explorer.papers import preset
from explorer.probes import probe
from explorer.runs import RunStore, StoreRecorder, resume
from explorer.sweeps import sweep
from explorer.registry import SpecError
from explorer.spec import ExperimentSpec, registry
from explorer.train import Event, Run, StopTraining, build, evaluate, train
from explorer.batched import train_batched

__all__ = [
    "Event",
    "ExperimentSpec",
    "Run",
    "RunStore",
    "SpecError",
    "StopTraining",
    "StoreRecorder",
    "build",
    "evaluate",
    "preset",
    "probe",
    "registry",
    "resume",
    "roles",
    "sweep",
    "train",
    "train_batched",
]
__version__ = "0.1.0"
