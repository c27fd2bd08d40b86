"""Probes: numbers read off a model and a batch of its inputs, never trained, never plotted.

    from explorer.probes import probe
    result = probe(model, data.x_val[:8], "jacobian", k=4)
    result["chi"]  # mean squared singular value per input (dynamical isometry: about 1)

Every probe is a pure function of the model and the inputs (the model's own input
format: vectors, images or token ids). It runs the model in eval mode and restores the
previous mode, leaves the parameters' gradients as it found them, and returns a dict of
numpy arrays on the CPU. On a diverged model (non-finite weights or activations), an all-zero one or a
degenerate batch it still returns what is defined: each undefined quantity is NaN where undefined and is
named, with the reason, in the result's `undefined` lines (`undefined(result)` reads them as {quantity: why}).
`PROBES` lists them with their options declared as `Param`s, so the CLI and the app can list and validate them
like every other registry.

A probe is one function in one module of this folder (importing the package imports each of them), or in
one file of the folder named by EXPLORER_PLUGINS_DIR (imported the same way, after these):
registered with `@PROBES.register(...)`, and drawn by the
figure builder its module declares beside it with `@explorer.plots.figure_for(name)` (a probe that
declares none is drawn as a table of its numbers, so every registered probe shows on the Train page).
"""

from explorer.probes.core import PROBES, probe, undefined, validation_tensors
from explorer.probes import probes as _probes  # noqa: I001  (registers the built-in probes, in this order)
from explorer.probes import conditioning as _conditioning, features as _features
from explorer.registries import import_files, import_folder
from explorer.settings import plugins_folder

import_folder(__name__, __path__)  # every other probe file in this folder registers itself
if plugins_folder() is not None:
    import_files(plugins_folder(), "explorer_plugin_")  # and every file of EXPLORER_PLUGINS_DIR
del _conditioning, _features, _probes

__all__ = ["PROBES", "probe", "undefined", "validation_tensors"]
