"""Weighted shortcuts, ANCRe's initial logits and rewiring a model while it trains (library and app worker)."""

import copy
import math

import pytest
import torch

import explorer
from explorer.topology import Shortcuts
from test_app_jobs import wait_for

PRESET = "ancre-fig2b-0:2"
TEXT = {"name": "text", "context": 6, "max_chars": 2000, "n_val": 8}


def preset(**values):
    spec = explorer.preset(PRESET)
    return spec.with_values(values) if values else spec


def losses(run):
    return [row["loss"] for row in run.history]


# ---- the encoding ----------------------------------------------------------------------------------

def test_shortcut_text_round_trips_and_is_canonical():
    weights = explorer.parse_shortcuts("1:4, 0:3*0.5 0:1*-2+1:2*1e-3,2:3*1")
    assert weights == {(1, 4): 1.0, (0, 3): 0.5, (0, 1): -2.0, (1, 2): 1e-3, (2, 3): 1.0}
    text = explorer.shortcuts_text(weights)
    assert text == "0:1*-2,0:3*0.5,1:2*0.001,1:4,2:3"
    assert explorer.parse_shortcuts(text) == weights
    assert explorer.parse_shortcuts("") == {}


@pytest.mark.parametrize("text, match", [
    ("0:3,0:3", r"shortcut 0:3 is listed twice; list each i:j once \(give it a weight with 0:3\*w\)"),
    ("0:3*0.5,0:3", "0:3 is listed twice"),
    ("0:4", "0 <= i < j <= 3"),
    ("2:1", "must go forward"),
    ("0:2*x", "'0:2\\*x' is not"),
    ("0:2*1e999", "not a finite number"),
])
def test_bad_shortcut_lists_name_the_field(text, match):
    with pytest.raises(explorer.SpecError, match=match) as caught:
        explorer.parse_shortcuts(text, 3)
    assert caught.value.path == "topology.shortcuts"
    with pytest.raises(explorer.SpecError, match=match):  # the spec refuses them too
        preset(**{"topology.shortcuts": text})


# ---- the weighted forward ----------------------------------------------------------------------------

def test_the_weighted_forward_is_the_equation_written_by_hand():
    """x_j = y_j + sum_i w_ij x_i on a 3-block linear network, with a negative and a fractional weight."""
    spec = preset(**{"topology.shortcuts": "0:2*0.5,1:3*-2,0:3*0.25"})
    model, data = explorer.build(spec)
    w1, w2, w3 = (block.weight.detach() for block in model.stack.blocks)
    x0 = data.x_train
    x1 = x0 @ w1.T
    x2 = x1 @ w2.T + 0.5 * x0
    x3 = x2 @ w3.T - 2 * x1 + 0.25 * x0
    torch.testing.assert_close(model(x0), x3)
    own = model.stack.topology.own_matrix()
    assert own[2, 0] == 0.5 and own[3, 1] == -2 and own[3, 0] == 0.25 and own.sum() == pytest.approx(-1.25)


def test_default_weights_give_bit_identical_runs():
    """All weights 1 and fixed: the same parameters and losses as the plain sum x_j = y_j + sum_i x_i."""
    base = explorer.train(preset())
    assert losses(explorer.train(preset(**{"topology.shortcuts": "0:2*1"}))) == losses(base)
    assert [n for n, _ in base.model.named_parameters()] == [f"stack.blocks.{k}.weight" for k in range(3)]

    def plain_sum(self, x0, blocks, acts):  # the forward without weights
        states, x = {0: x0}, x0
        for j, block in enumerate(blocks, start=1):
            y = block(x)
            for i, jj in self.pairs:
                if jj == j:
                    y = y + states[i]
            x = acts[j - 1](y)
            states[j] = x
        return x

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Shortcuts, "run", plain_sum)
        plain = explorer.train(preset())
    assert losses(plain) == losses(base)
    for p, q in zip(plain.model.parameters(), base.model.parameters()):
        assert torch.equal(p, q)


def test_learnable_weights_get_gradients_and_move():
    spec = preset(**{"topology.shortcuts": "0:2*0.5,0:1", "topology.learnable": True, "train.steps": 50})
    model, data = explorer.build(spec)
    weights = model.stack.topology.weights
    assert isinstance(weights, torch.nn.Parameter) and weights.tolist() == [1.0, 0.5]  # sorted pairs: 0:1, 0:2
    assert explorer.roles(model)["stack.topology.weights"] == "mix"
    ((model(data.x_train) - data.y_train) ** 2).sum().backward()
    assert weights.grad is not None and weights.grad.abs().min() > 0
    run = explorer.train(spec)
    learned = run.model.stack.topology.weight_map()
    assert learned[(0, 1)] != 1.0 and learned[(0, 2)] != 0.5
    own = run.model.stack.topology.own_matrix()
    assert own[1, 0] == pytest.approx(learned[(0, 1)]) and own[2, 0] == pytest.approx(learned[(0, 2)])


# ---- ANCRe's initial logits -----------------------------------------------------------------------------

def test_ancre_logits_start_where_the_text_says():
    spec = explorer.preset("ancre-fig2b-ancre")
    temperature = spec.topology.params["temperature"]
    drawn = spec.with_values({"topology.logits": "0:2*1,1:2*-0.5"})
    p = explorer.build(drawn)[0].stack.topology.probabilities().detach().double()
    c = torch.tensor([1.0, -0.5], dtype=torch.float64) / temperature
    by_hand = torch.exp(c - c.max()) / torch.exp(c - c.max()).sum()
    torch.testing.assert_close(p[:2, 2], by_hand, rtol=1e-5, atol=1e-6)
    assert p[:3, 3].tolist() == pytest.approx([1 / 3] * 3)  # layer 3's logits were left at 0: uniform
    uniform = explorer.build(spec)[0].stack.topology
    assert not uniform.logits.any()
    with pytest.raises(explorer.SpecError, match="0:4 ends at layer 4.*0 <= i < j <= 3") as caught:
        spec.with_values({"topology.logits": "0:4*1"})
    assert caught.value.path == "topology.logits"


# ---- rewiring ------------------------------------------------------------------------------------------

REWIRE = {"name": "shortcuts", "shortcuts": "0:2,0:3*0.5", "learnable": True}


def rewire_spec(**values):
    return preset(**{"train.steps": 30, "train.log_every": 1, "optim.name": "adam", "optim.lr": 0.01, **values})


def test_a_rewire_keeps_the_blocks_and_changes_the_design_from_the_next_step():
    spec, n = rewire_spec(), 10
    plain = explorer.train(spec)
    seen = {}

    def watch(event):
        if event.kind == "log" and event.step == n + 1:
            seen["blocks"] = [b.weight.detach().clone() for b in event.run.model.stack.blocks]

    rewired = explorer.train(spec, callbacks=[watch], rewire={n: REWIRE})
    assert losses(rewired)[:n + 1] == losses(plain)[:n + 1]  # up to the rewire's step: the same run
    assert losses(rewired)[n + 1] != losses(plain)[n + 1]  # then the new design
    # step n's update was taken from the design before: the blocks after it are the plain run's
    plain_blocks = {}
    explorer.train(spec, callbacks=[lambda e: e.kind == "log" and e.step == n + 1 and plain_blocks.setdefault(
        "w", [b.weight.detach().clone() for b in e.run.model.stack.blocks])])
    for ours, theirs in zip(seen["blocks"], plain_blocks["w"]):
        assert torch.equal(ours, theirs)
    assert rewired.rewires == [{"step": n, "topology": REWIRE}]
    assert rewired.spec.topology.to_dict() == REWIRE and rewired.initial_spec == spec
    learned = rewired.model.stack.topology.weight_map()
    assert set(learned) == {(0, 2), (0, 3)} and learned[(0, 3)] != 0.5  # in the optimizer: it learned
    summary = rewired.summary()
    assert summary["rewires"] == rewired.rewires and summary["initial_spec"] == spec.to_dict()


def test_rewire_from_a_callback_and_its_refusals():
    spec = rewire_spec(**{"train.steps": 6})
    errors = []

    def edit(event):
        if event.kind == "log" and event.step == 2:
            for bad in ({"shortcuts": "0:2,0:2"}, {"shortcuts": "0:7"}, "0:2"):
                with pytest.raises(explorer.SpecError) as caught:
                    event.run.rewire(bad)
                errors.append(caught.value.path)
            event.run.rewire({"shortcuts": "0:2,1:3"})  # without a name: the same topology, learnable kept

    run = explorer.train(spec, callbacks=[edit])
    assert errors == ["topology.shortcuts", "topology.shortcuts", "topology"]
    assert run.rewires == [{"step": 2, "topology": {"name": "shortcuts", "shortcuts": "0:2,1:3", "learnable": False}}]
    assert run.model.stack.topology.pairs == [(0, 2), (1, 3)]
    with pytest.raises(RuntimeError, match="log"):
        run.rewire(REWIRE)  # the run has ended
    with pytest.raises(explorer.SpecError, match="not a logged step") as caught:
        explorer.train(preset(**{"train.log_every": 10}), rewire={5: REWIRE})
    assert caught.value.path == "rewire"


def test_a_rewire_that_would_change_the_blocks_is_refused():
    """skipless acts on a GPT's attention and MLP apart (twice the blocks of cascaded): the run keeps its blocks."""
    spec = explorer.ExperimentSpec.from_dict({
        "data": TEXT, "model": {"name": "gpt", "depth": 2, "width": 8, "heads": 2, "mlp_ratio": 2},
        "topology": {"name": "cascaded"}, "train": {"steps": 2, "log_every": 1}})
    refused = []

    def edit(event):
        if event.kind == "log" and event.step == 0:
            with pytest.raises(explorer.SpecError, match="change the model's blocks") as caught:
                event.run.rewire({"name": "skipless"})
            refused.append(caught.value.path)
            event.run.rewire({"name": "ancre"})  # the same blocks: taken

    run = explorer.train(spec, callbacks=[edit])
    assert refused == ["topology"] and run.spec.topology.name == "ancre"
    assert type(run.model.stack.topology).__name__ == "ANCRe"


def test_resume_after_a_rewire_reproduces_the_uninterrupted_run():
    spec, n = rewire_spec(), 8
    whole = explorer.train(spec, rewire={n: REWIRE})
    for at in (n, n + 5):  # at the rewire's own log event, and later
        saved = {}

        def keep(event, at=at):
            if event.kind == "log" and event.step == at:
                saved["state"] = copy.deepcopy(event.run.checkpoint())
                raise explorer.StopTraining

        explorer.train(spec, callbacks=[keep], rewire={n: REWIRE})
        resumed = explorer.train(spec, resume_from=saved["state"])
        assert losses(resumed) == losses(whole)
        assert resumed.rewires == whole.rewires and resumed.spec == whole.spec
        for p, q in zip(resumed.model.parameters(), whole.model.parameters()):
            assert torch.equal(p, q)


def test_the_store_records_the_rewires_and_the_plot_marks_them():
    spec, n = rewire_spec(**{"train.steps": 12}), 4
    recorder = explorer.StoreRecorder(checkpoint_every=6)
    later = {"shortcuts": "0:3*0.25", "learnable": False}
    run = explorer.train(spec, callbacks=[recorder], rewire={n: REWIRE, 8: later})
    record = explorer.RunStore().get(recorder.run_id)
    assert record["rewires"] == run.rewires and len(record["rewires"]) == 2
    assert record["spec"] == spec.to_dict()  # the design it started from; the rewires say the rest
    assert explorer.RunStore().list()[0]["rewires"] == run.rewires
    from explorer import plots

    figure = plots.loss_curves([{**record, "label": "rewired"}], log_x=False)
    texts = [a.text for a in figure.layout.annotations]
    assert "+0:3*0.5,learnable" in texts and "-0:2,0:3*0.25,fixed" in texts
    assert sorted(shape.x0 for shape in figure.layout.shapes if shape.line.dash == "dash") == [n, 8]
    logged = plots.loss_curves([{**record, "label": "rewired"}], log_x=True)  # step + 1 on a log axis:
    assert sorted(shape.x0 for shape in logged.layout.shapes if shape.line.dash == "dash") == [n + 1, 9]  # data
    assert sorted(a.x for a in logged.layout.annotations if a.text in texts) == pytest.approx(  # log10 units
        sorted([math.log10(n + 1), math.log10(9)]))


def test_a_second_rewire_at_the_same_step_replaces_the_first():
    spec, n = rewire_spec(**{"train.steps": 12}), 4
    second = {"name": "shortcuts", "shortcuts": "0:3*0.25", "learnable": False}

    def edit(event):
        if event.kind == "log" and event.step == n:
            for design in (REWIRE, {"shortcuts": "0:1"}, second):
                event.run.rewire(design)
            assert len(event.run.rewires) == 1 and event.run.spec.topology.to_dict() == second

    run = explorer.train(spec, callbacks=[edit])
    assert run.rewires == [{"step": n, "topology": second}]
    once = explorer.train(spec, rewire={n: second})
    assert losses(run) == losses(once) and run.rewires == once.rewires


def test_a_run_is_rewired_at_most_max_rewires_times():
    from explorer.training import MAX_REWIRES

    cap = MAX_REWIRES
    spec = rewire_spec(**{"train.steps": cap + 3})
    designs = [{"name": "shortcuts", "shortcuts": f"0:{2 + k % 2}"} for k in range(cap + 2)]
    refused = []

    def edit(event):
        if event.kind == "log" and event.step <= cap:
            try:
                event.run.rewire(designs[event.step])
            except explorer.SpecError as error:
                refused.append((event.step, error))

    run = explorer.train(spec, callbacks=[edit])
    assert len(run.rewires) == cap and run.status == "finished"
    assert [step for step, _ in refused] == [cap]  # the one past the cap, at step `cap`; the run went on
    error = refused[0][1]
    assert error.path == "rewire" and "\n" not in str(error)
    assert f"rewired {cap} times" in error.message and "start a new run" in error.message
    with pytest.raises(explorer.SpecError, match=f"more than the {cap}") as too_many:
        explorer.train(spec, rewire={step: designs[step] for step in range(cap + 1)})
    assert too_many.value.path == "rewire"


# ---- the app's worker ----------------------------------------------------------------------------------

def test_a_paused_job_is_rewired_by_its_worker(worker_pool):
    from explorer_app import jobs

    spec = rewire_spec(**{"train.steps": 20, "train.log_every": 5})
    queue = jobs.JobQueue(1, store=explorer.RunStore(), pool=worker_pool)
    job = queue.submit(spec, "rewired")
    queue.rewire(job.id, REWIRE)  # not paused yet: refused, nothing sent
    assert "not paused" in job.view().rewire_error
    job.pause()
    wait_for(lambda: job.view().status == "paused" and job.view().history)
    queue.rewire(job.id, {"shortcuts": "0:2,0:2"})
    wait_for(lambda: job.view().rewire_error is not None)
    assert job.view().rewire_error.startswith("topology.shortcuts: shortcut 0:2 is listed twice")
    queue.rewire(job.id, REWIRE)
    wait_for(lambda: job.view().rewires)
    view = job.view()
    held = view.steps_done
    assert view.rewires == [{"step": held, "topology": REWIRE, "change": "+0:3*0.5,learnable"}]
    assert view.rewire_error is None and view.as_run()["rewires"] == view.rewires
    second = {"name": "shortcuts", "shortcuts": "0:3*0.25", "learnable": False}
    queue.rewire(job.id, second)  # again at the same step: it replaces the first, and says so against the start
    wait_for(lambda: job.view().rewires[-1]["topology"] == second)
    assert job.view().rewires == [{"step": held, "topology": second, "change": "+0:3*0.25,-0:2"}]
    queue.rewire(job.id, REWIRE)
    wait_for(lambda: job.view().rewires[-1]["topology"] == REWIRE)
    job.resume()
    view = jobs.wait(job)
    assert view.status == "finished"
    record = explorer.RunStore().get(view.run_id)
    assert [{"step": r["step"], "topology": r["topology"]} for r in view.rewires] == record["rewires"]
    same = explorer.train(spec, rewire={held: REWIRE})  # another process: equal up to summation order
    assert [row["loss"] for row in view.history] == pytest.approx(losses(same), rel=1e-5)
    with pytest.raises(KeyError):
        queue.rewire("nope", REWIRE)


def test_adding_dca_to_a_trained_transformer_keeps_its_function_and_resumes():
    """DCA Sec. 5 (retrofitting): rewired to DCA at its last step, a trained Transformer keeps its blocks, each
    attention gets key and value norms copied from its trained norm, and DCA's mixes start as the plain sum: the
    same logits. Rewired earlier, the new norms and mixes train, and a resume replays the split."""
    spec = explorer.ExperimentSpec.from_dict({
        "data": TEXT, "model": {"name": "gpt", "depth": 2, "width": 8, "heads": 2, "mlp_ratio": 2},
        "topology": {"name": "cascaded"}, "optim": {"name": "adam", "lr": 0.01},
        "train": {"steps": 6, "log_every": 1}})
    dca = {"name": "dca"}
    plain = explorer.train(spec)
    switched = explorer.train(spec, rewire={6: dca})
    x = plain.data.x_val[:4]
    with torch.no_grad():
        assert torch.allclose(switched.model.eval()(x), plain.model.eval()(x), rtol=0, atol=1e-6)
    attention = switched.model.stack.blocks[0].attn
    assert attention.norm_k is not attention.norm and attention.norm_v is not attention.norm_k
    assert torch.equal(attention.norm_k.norm.weight, attention.norm.norm.weight)
    assert not torch.equal(attention.norm.norm.weight, torch.ones(8))  # a copy of the trained norm, not a fresh one
    assert switched.spec.topology.name == "dca" and type(switched.model.stack.topology).__name__ == "DCA"

    whole = explorer.train(spec, rewire={3: dca})
    attention = whole.model.stack.blocks[0].attn
    assert not torch.equal(attention.norm_k.norm.weight, attention.norm.norm.weight)  # in the optimizer: they learn
    assert not torch.equal(whole.model.stack.topology.weights, torch.ones_like(whole.model.stack.topology.weights))
    saved = {}

    def keep(event):
        if event.kind == "log" and event.step == 4:
            saved["state"] = copy.deepcopy(event.run.checkpoint())
            raise explorer.StopTraining

    explorer.train(spec, callbacks=[keep], rewire={3: dca})
    resumed = explorer.train(spec, resume_from=saved["state"])
    assert losses(resumed) == losses(whole)
    for p, q in zip(resumed.model.parameters(), whole.model.parameters()):
        assert torch.equal(p, q)
