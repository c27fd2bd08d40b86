"""The memory budget (explorer.budget) against what training really takes, for every model and every optimizer
entry.

One child process imports explorer, builds every dataset once and trains a tiny spec of every model (so
that lazy imports happen once); then each (model, optimizer) pair trains in a process forked from it.
A forked process starts with its peak resident set equal to its current one, so its ru_maxrss growth over
the run is what the run took: it first trains a tiny spec of the same model and optimizer (the code pages
a first step touches, shared by every process, are not the spec's memory), reads ru_maxrss as its
baseline, trains the spec and reads ru_maxrss again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import explorer
from conftest import example_spec, home_topology, model_examples, vector_models
from explorer import budget

MB = 1_000_000
# The estimate may be this many times what a run takes, plus FLOOR_MB. It counts the validation pass as if it
# kept its activations for a backward pass and every convolution at the input's resolution (All-CNN's strided
# layers work at a quarter and a sixteenth of it: about 6x over); a larger gap would refuse runs that fit.
FACTOR = 8.0
FLOOR_MB = 16  # a run of a few megabytes: the estimate's fixed parts (the data copy, the validation pass) dominate
# One torch thread (a process forked from a multi-threaded OpenMP one can hang), and every allocation of 64 KiB or
# more in its own mapping, returned when freed: what a run holds, whatever memory earlier runs left in malloc's
# heap (with glibc's adaptive threshold a run may reuse it, or keep some of its own after freeing it).
MEASURING = {"OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "65536"}

ID = {"data.name": "identity", "data.dim": 128, "data.n_train": 2048, "data.n_val": 256}
IMAGES = {"data.name": "shapes", "data.size": 16, "data.n_train": 1024, "data.n_val": 256}
SIZES = {  # measured sizes of models (over the default spec): a second or less per step on one core, tens of megabytes
    "linear": {**ID, "model.width": 128, "model.depth": 8},
    "lowrank": {**ID, "model.width": 128, "model.depth": 8},
    "mlp-resnet": {**ID, "model.width": 128, "model.depth": 8},
    "mlp": {**ID, "model.width": 128, "model.depth": 8},
    "resnet-cifar": {**IMAGES, "model.width": 8, "model.depth": 8},
    "allconv": {**IMAGES, "topology.name": "none", "model.width": 16},
    "gpt": {"data.name": "text", "data.max_chars": 40_000, "data.context": 32, "data.n_val": 64, "model.width": 32,
            "model.depth": 2},
    "vit": {**IMAGES, "model.width": 32, "model.depth": 2},
}
# A model without SIZES runs its registered example grown: this many times its width (a data dimension tied to the
# width with it), on this many examples where its dataset takes the counts.
GROW = 8
POINTS = {"n_train": 1024, "n_val": 256}
TRAIN = {"train.steps": 1, "train.log_every": 1, "train.batch_size": 256}  # a step between two validation passes


def spec_of(model: str, optimizer: str) -> explorer.ExperimentSpec:
    """The model's spec in SIZES, else its registered example grown."""
    if model not in SIZES:
        return grown(model, optimizer)
    return explorer.ExperimentSpec.default().with_values({"model.name": model, **SIZES[model], **TRAIN,
                                                          "optim.name": optimizer})


def grown(model: str, optimizer: str) -> explorer.ExperimentSpec:
    """The model's registered example at GROW times its width, on POINTS examples."""
    example = model_examples()[model]
    raw = example_spec(model, home_topology(model))
    raw["model"]["width"] *= GROW
    if raw["data"].get("dim") == example["model"]["width"]:
        raw["data"]["dim"] *= GROW
    dataset = explorer.registry("datasets")[raw["data"]["name"]]
    raw["data"].update({name: n for name, n in POINTS.items() if dataset.param(name)})
    return explorer.ExperimentSpec.from_dict(raw).with_values({**TRAIN, "optim.name": optimizer})


def warm_up_of(spec: explorer.ExperimentSpec) -> explorer.ExperimentSpec:
    """The same model and optimizer on two examples for one step (a full-batch optimizer's mini-batch twin:
    gd is torch's SGD on the whole set)."""
    mini = "sgd" if explorer.registry("optimizers")[spec.optim.name].info.full_batch else spec.optim.name
    return spec.with_values({"optim.name": mini, "train.batch_size": 2, "train.steps": 1, "train.log_every": 1})


# The measuring loop both children share: each job in a forked child (its own heap, the parent's imports and caches
# already warm), its peak reset right before the measured work, one JSON line per job on standard output.
IN_A_FORK = """
def measured_in_a_fork(label, prepare, work):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        prepared = prepare()
        gc.collect()  # what prepare() left in reference cycles
        with open("/proc/self/clear_refs", "w") as hwm:
            hwm.write("5")  # the peak so far back to the current resident set
        baseline = peak()
        work(prepared)
        os.write(write, json.dumps([label, peak() - baseline]).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        text = answer.read()
    _, status = os.waitpid(pid, 0)
    print(text if status == 0 else json.dumps([label, f"the child exited with status {status}"]), flush=True)
"""

CHILD = IN_A_FORK + textwrap.dedent("""
    import gc, json, os, resource, sys

    import torch

    torch.set_num_threads(1)
    import explorer

    def peak():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux

    jobs = [(label, explorer.ExperimentSpec.from_json(spec), explorer.ExperimentSpec.from_json(warm))
            for label, spec, warm in json.loads(sys.stdin.read())]
    warmed = set()
    for _, spec, warm in jobs:  # every dataset into the cache, and each model's and optimizer's lazy imports
        if not {spec.model.name, spec.optim.name} <= warmed:
            explorer.train(warm)
            warmed |= {spec.model.name, spec.optim.name}
    gc.collect()
    for label, spec, warm in jobs:  # the warm-up again in the child, then the measured run
        measured_in_a_fork(label, lambda: explorer.train(warm), lambda _: explorer.train(spec))
""")

# Every model entry (with Adam: two states per weight) and every optimizer entry (on the first model of vectors and
# the first Transformer): each entry's own memory is measured without the whole cross product's time.
ON_EVERY_OPTIMIZER = (vector_models()[0], next(iter(model_examples(transformer=True))))
COMBINATIONS = sorted({(m, "adam") for m in explorer.registry("models")}
                      | {(m, o) for m in ON_EVERY_OPTIMIZER for o in explorer.registry("optimizers")})


def in_two_children(script: str, jobs: list) -> dict[str, int | str]:
    """{label: what `script` measured} for `jobs`, split between two child processes that run side by side (each
    measures its own resident set, so the two do not see each other's memory; two cores halve the wait)."""
    import tempfile

    children = []
    for half in [half for half in (jobs[0::2], jobs[1::2]) if half]:
        with tempfile.TemporaryFile("w+") as given:  # the child reads its jobs from standard input
            given.write(json.dumps(half))
            given.seek(0)
            children.append(subprocess.Popen([sys.executable, "-c", script], stdin=given, stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE, text=True, env={**os.environ, **MEASURING}))
    results = {}
    for child in children:
        out, err = child.communicate(timeout=600)
        assert child.returncode == 0, err[-3000:]
        results.update(json.loads(line) for line in out.splitlines() if line.startswith("["))
    return results


@pytest.fixture(scope="module")
def measured() -> dict[str, int | str]:
    """{"model/optimizer": bytes its run took, or why it could not run}."""
    jobs = [(f"{m}/{o}", spec_of(m, o).to_json(), warm_up_of(spec_of(m, o)).to_json()) for m, o in COMBINATIONS]
    return in_two_children(CHILD, jobs)


def test_every_model_has_a_spec_to_measure():
    """Every registered model's example grows into an accepted spec GROW times as wide (what a model without SIZES
    runs); SIZES names registered models only."""
    for model, example in model_examples().items():
        assert grown(model, "adam").model.width == GROW * example["model"]["width"], model
        assert spec_of(model, "adam").model.name == model
    assert set(SIZES) <= set(explorer.registry("models")), "SIZES names a model that is not registered"


@pytest.mark.parametrize("model, optimizer", COMBINATIONS)
def test_the_estimate_covers_what_a_run_takes(measured, model, optimizer):
    spec = spec_of(model, optimizer)
    took = measured[f"{model}/{optimizer}"]
    assert isinstance(took, int), took
    weights, activations = budget.model_bytes(spec)
    estimate = weights + activations + budget.data_bytes(spec)  # train holds its own copy of the cached data
    report = (f"estimated {estimate / MB:.1f} MB (weights and states {weights / MB:.1f}, activations "
              f"{activations / MB:.1f}), the run took {took / MB:.1f} MB")
    assert estimate >= took, report
    assert estimate <= FACTOR * took + FLOOR_MB * MB, report


# ---- probing a trained model ---------------------------------------------------------------------------
# A ViT at patch 2 on 16 x 16 shapes: 65 tokens of width 16, so param-jacobian stacks 2 x 65 x 16 = 2080 rows and
# each row's batched backward keeps the inputs' heads x 65^2 attention maps. The topologies that mix every earlier
# block's output into each block (cascaded, GRN-v3, DCA) and a ViT without norms (as a diverging run draws it).
VIT = {"data.name": "shapes", "data.size": 16, "data.n_train": 48, "data.n_val": 16, "model.name": "vit",
       "model.patch": 2, "model.width": 16, "model.depth": 4, "model.heads": 4, "model.mlp_ratio": 2.0}
PROBED = {
    "vit-dca": ({**VIT, "topology.name": "dca"}, "param-jacobian", 2),
    "vit-cascaded": ({**VIT, "topology.name": "cascaded"}, "param-jacobian", 2),
    "vit-grn-v3": ({**VIT, "topology.name": "grn-v3"}, "param-jacobian", 1),
    "vit-no-norm": ({**VIT, "model.norm": "none", "topology.name": "none"}, "param-jacobian", 2),
    "vit-dca-jacobian": ({**VIT, "topology.name": "dca"}, "jacobian", 2),
}
PROBE_FACTOR = 8.0  # the estimate may be this many times the peak (jacrev's chunks are sized from the same cap)

PROBE_CHILD = IN_A_FORK + textwrap.dedent("""
    import gc, json, os, sys

    import torch

    torch.set_num_threads(1)
    import explorer

    def peak():  # the resident high-water mark since the last reset (/proc/self/clear_refs)
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM"))

    jobs = json.loads(sys.stdin.read())
    tiny = explorer.ExperimentSpec.from_json(jobs[0][1]).with_values({"model.depth": 1, "model.heads": 1})
    model, data = explorer.build(tiny)  # torch.func, the math attention kernel and LAPACK loaded once, here
    for name in {job[2] for job in jobs}:
        explorer.probe(model, data.x_val[:1], name)
    del model, data
    gc.collect()
    def built(spec, inputs):
        model, data = explorer.build(explorer.ExperimentSpec.from_json(spec))
        return model.eval(), data.x_val[:inputs]

    for label, spec, name, inputs in jobs:
        measured_in_a_fork(label, lambda: built(spec, inputs),
                           lambda prepared: explorer.probe(*prepared, name, max_inputs=inputs))
""")


def probed_spec(label: str) -> explorer.ExperimentSpec:
    return explorer.ExperimentSpec.default().with_values(PROBED[label][0])


@pytest.fixture(scope="module")
def probe_peaks() -> dict[str, int | str]:
    """{label: bytes the probe's peak added to the resident set, or why it could not run}."""
    jobs = [(label, probed_spec(label).to_json(), name, inputs) for label, (_, name, inputs) in PROBED.items()]
    return in_two_children(PROBE_CHILD, jobs)


@pytest.mark.parametrize("label", PROBED)
def test_the_probe_estimate_covers_its_peak(probe_peaks, label):
    _, name, inputs = PROBED[label]
    took = probe_peaks[label]
    assert isinstance(took, int), took
    estimate = budget.probe_bytes(probed_spec(label), {name: {}}, inputs)[name]
    report = f"{name} on {inputs} input(s): estimated {estimate / MB:.1f} MB, its peak added {took / MB:.1f} MB"
    assert estimate >= took, report
    assert estimate <= PROBE_FACTOR * took + FLOOR_MB * MB, report
