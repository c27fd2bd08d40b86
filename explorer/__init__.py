"""Residual Explorer: see and test how residual connections shape deep networks.

Data flows one way: spec -> model -> run -> probes -> figures (explorer.plots).

    import explorer
    spec = explorer.preset("ancre-fig2b-0:2")
    run = explorer.train(spec)
    run.summary()["final_loss"]
"""

# Layer by layer, bottom-up: importing a package registers its entries (datasets, models, topologies,
# inits, optimizers, the cross-section checks, probes, presets), which the spec looks up by name.
from explorer import combinations  # noqa: F401,I001  (registers the spec's cross-section checks)
from explorer.nn import roles
from explorer.papers import preset
from explorer.probes import probe
from explorer.runs import RunStore, StoreRecorder, resume
from explorer.sweeps import sweep
from explorer.registries import SpecError
from explorer.registries import registry
from explorer.spec import ExperimentSpec
from explorer.topology.shortcuts import (SHORTCUT_NOTATION, describe_shortcut, parse_shortcuts, shortcuts_text,
                                         state_label)
from explorer.training import Event, Run, StopTraining, build, evaluate, train
from explorer.diagnosis import Diagnosis, diagnose
from explorer.batched import train_batched
from explorer.network_view import network_figure, replay_figure
from explorer import challenge  # noqa: F401  (the design challenge: explorer.challenge)

__all__ = [
    "Diagnosis",
    "Event",
    "ExperimentSpec",
    "Run",
    "RunStore",
    "SHORTCUT_NOTATION",
    "SpecError",
    "StopTraining",
    "StoreRecorder",
    "build",
    "describe_shortcut",
    "diagnose",
    "evaluate",
    "network_figure",
    "parse_shortcuts",
    "preset",
    "probe",
    "registry",
    "replay_figure",
    "resume",
    "roles",
    "shortcuts_text",
    "state_label",
    "sweep",
    "train",
    "train_batched",
]
from explorer.version import __version__  # noqa: E402
