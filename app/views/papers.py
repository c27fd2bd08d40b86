"""Papers page: each paper's question, its key equations, and its claims rerun at CPU scale.

One tab per paper (the open tab is in the URL as ?paper=...): a plain-language summary, the
equations its claims test (st.latex), every claim with a button that reruns it on real training
runs (fast mode by default) and shows its verdict, the measured numbers against the criterion,
and the paper's presets, each of which opens in the Train page to be trained live and probed.

Claims run as a job of the server's queue, in a worker process (never in the page's script thread),
so a class cannot start more heavy work at once than EXPLORER_MAX_JOBS allows; the page follows the
job's progress ("claim i of n") through a live feed (explorer_app.live_feed; without a served feed, a fragment
reruns twice a second), and is drawn again with the results once the job ends. Claims are seeded and
deterministic, so each result row is cached
server-wide per (paper, claim, mode, context): in a class only the first student pays.

The equations follow the papers; where their text conversion is garbled or inconsistent:
ANCRe's Eq. 8 sums its denominator over k = 1..j-1, but Eq. 7 (sum over i = 0..j-1 of p_ij = 1)
needs k = 0..j-1, which is what is shown; DCA's GRN-v3 formula is missing from the text and is
written from its description (weights b_t + w_t-bar, where w_t-bar is a ReLU of a learned
projection w_t of the stacked outputs, shared by all d features); ANCRe's layer update is the
library's form of the paper's "aggregated shortcuts to layer j" (explorer/topology.py).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import plotly.graph_objects as go
import streamlit as st

import explorer
from explorer import plots
from explorer.papers.claims import Claim, claims, recorded
from explorer_app import figures, live_feed, state
from explorer_app.messages import escape, failure
from explorer.settings import SettingError


@dataclass(frozen=True)
class Paper:
    tab: str  # the tab's label, also the value of ?paper= in the URL
    title: str
    summary: str
    equations: tuple[tuple[str, str], ...]  # (what it says, LaTeX)
    notebook: str


PAPERS = {
    "ancre": Paper(
        tab="ANCRe",
        title="ANCRe: Adaptive Neural Connection Reassignment for Efficient Depth Scaling",
        summary="A residual network need not connect each layer only to the one before it: any shortcut i:j from "
                "an earlier output to a later layer is possible. On deep linear networks *where* the shortcut goes "
                "changes how fast gradient descent converges, exponentially: the single shortcut 0:2 gives a linear "
                "(exponential) rate, 0:1 only a sublinear one. ANCRe learns the placement from data, with "
                "softmax-normalised coefficients on all shortcuts, and carries it over to Transformers.",
        equations=(
            (r"The 3-layer linear network with the shortcut 0:1, and with 0:2 (whitened data, $XX^\top = I$):",
             r"\mathcal L_1 = \tfrac12\big\|W_3 W_2 (W_1 + I)X - Y\big\|_F^2, \qquad "
             r"\mathcal L_2 = \tfrac12\big\|W_3 (W_2 W_1 + I)X - Y\big\|_F^2"),
            ("Under gradient flow from a small initialisation (Theorems 3.2 and 3.3):",
             r"\mathcal L_1(t) \ge \Omega(1/t^2), \qquad \mathcal L_2(t) \le \mathcal L_2(0)\, e^{-2(1-\lambda)^2 t}"),
            ("ANCRe: every earlier output feeds layer $j$, with ingoing-normalised coefficients at a temperature "
             "$T$ (the paper states 0.1; 0.01 for language models and in the official code):",
             r"x_j = f_j(x_{j-1}) + \sum_{i<j} p_{ij}\, x_i, \qquad "
             r"p_{ij} = \frac{\exp(c_{ij}/T)}{\sum_{k=0}^{j-1} \exp(c_{kj}/T)}"),
            ("In a Transformer each whole layer keeps its own residual and the shortcut sum comes on top "
             "(the official code):",
             r"h_j = \underbrace{h_{j-1} + a_j + \mathrm{mlp}(h_{j-1} + a_j)}_{\mathrm{layer}_j(h_{j-1})}"
             r" + \sum_{i<j} p_{ij}\, h_i, \qquad a_j = \mathrm{attn}(\mathrm{norm}(h_{j-1}))"),
        ),
        notebook="notebooks/01_ancre.ipynb",
    ),
    "dca": Paper(
        tab="DCA",
        title="DeepCrossAttention: Supercharging Transformer Residual Connections",
        summary="A standard residual network adds every block's output to one stream with weight 1, so what early "
                "blocks computed gets diluted. Generalized residual networks (GRN) let each block read a learned "
                "combination of all earlier outputs; DeepCrossAttention (DCA) uses three such combinations to give "
                "every Transformer block its own queries, keys and values. A theorem on low-rank linear networks "
                "says the learned combinations help most when the model's rank (its width) is small.",
        equations=(
            (r"The input of block $t$ mixes the stack of earlier outputs $G_t = [x_0, y_1, \dots, y_{t-1}]$: ResNet, "
             r"GRN-v1, GRN-v2 and GRN-v3 ($\sigma$ = ReLU, $w_t = 0$ at init):",
             r"G_t\mathbf 1, \qquad G_t b_t, \qquad (G_t \odot b_t)\mathbf 1, \qquad "
             r"\big(G_t \odot (b_t + \mathbf 1\,\sigma(w_t^\top G_t))\big)\mathbf 1"),
            (r"Theorem 4.1: with linear blocks of rank $r_t$ and collective rank $r_* = \sum_t r_t < d$, what each "
             "architecture can express ($D$ diagonal):",
             r"\mathcal C_{\rm res} = \{I + M\},\quad \mathcal C_{\rm GRN\text{-}v1} = \{\alpha I + M\},\quad "
             r"\mathcal C_{\rm GRN\text{-}v2} = \{D + M\}, \qquad \operatorname{rank} M \le r_*"),
        ),
        notebook="notebooks/02_dca.ipynb",
    ),
    "idinit": Paper(
        tab="IDInit",
        title="IDInit: A Universal and Stable Initialization Method",
        summary="Residual networks train best when every block starts as (almost) the identity. IDInit starts "
                "every layer from an identity, non-square ones included (a padded identity, which also lifts a rank "
                "limit that zero padding imposes), relies on SGD with momentum to make identical layers differ, "
                "and replaces the exact zeros at the end of each residual branch by a tiny pattern of ±ε "
                "(IDIZ) so that no weight is left without a gradient.",
        equations=(
            (r"The padded identity for a $D_{\rm out} \times D_{\rm in}$ weight (a tall layer is "
             r"$[I; I; \dots]$; Eq. 3):",
             r"\operatorname{IDI}_\tau(\theta)_{m,j} = \begin{cases} \tau & m \equiv j \pmod{D_{\rm in}} \\ "
             r"0 & \text{otherwise} \end{cases}"),
            ("Zero padding $[I; 0]$ of a layer that widens $D_0$ to $D_h$ keeps the residual part of the next square "
             "layer low-rank; the padded identity lets it exceed $D_0$ (Theorem 3.1):",
             r"\operatorname{rank}\big(\theta^{(1)} - I\big) \le D_0 \quad \text{(zero padding)}"),
            (r"Dynamical isometry: $\chi$, the mean squared singular value of the input-output Jacobian, is about 1 "
             "on the critical line (above 1: exploding gradients):",
             r"\chi = \frac1n \sum_{i=1}^n \sigma_i^2(J_{io}) \approx 1"),
        ),
        notebook="notebooks/03_idinit.ipynb",
    ),
    "tau": Paper(
        tab="τ stability",
        title="Stability and Convergence Theory for Learning ResNet: A Full Characterization",
        summary="How much may each residual block add to the stream for a very deep ResNet to train without "
                "normalisation? The paper scales every branch by τ and proves that τ = 1/√L is a sharp threshold: "
                "at or below it the forward and backward passes stay bounded at any depth L; for τ ≥ L^(−1/2+c) "
                "the output norm grows at least like L^c. With batch normalisation the stream's norm grows like "
                "√l, and τ = 1/√L on top of it keeps it flat.",
        equations=(
            (r"The ResNet of Section 2 (width $m$, depth $L$, $\phi$ = ReLU), with Kaiming initialisation:",
             r"h_0 = \phi(Ax), \qquad h_l = \phi\big(h_{l-1} + \tau W_l h_{l-1}\big), \qquad "
             r"(W_l)_{ij} \sim \mathcal N(0, 2/m)"),
            (r"Theorem 1 ($\tau \le 1/\Omega(\sqrt L)$: with high probability, for any $b > a$ and diagonal "
             r"$D_l$ of norm at most 1) and Theorem 4 ($\tau \ge L^{-1/2 + c}$):",
             r"\big\|D_b(I + \tau W_b)\cdots D_a(I + \tau W_a)\big\|_2 \le 1 + c, \qquad "
             r"\mathbb E\,\|h_L\|^2 > L^{2c}"),
            (r"Claim 1, with batch normalisation ($n$ examples): the norm of the stream grows like $\sqrt L$:",
             r"\mathbb E\,\|h_L\|_F^2 \approx n\, m\, L"),
        ),
        notebook="notebooks/04_tau.ipynb",
    ),
    "skipless": Paper(
        tab="Cutting the Skip",
        title="Cutting the Skip: Training Residual-Free Transformers",
        summary="Skip connections make Transformers easy to train but keep re-injecting shallow features into deep "
                "layers. Without them, a self-attention block's input Jacobian is badly conditioned at the usual "
                "initialisation: diffuse attention logits make the attention map nearly the rank-one uniform "
                "matrix. The paper's initialisation makes the logits diagonally dominant and the value-output "
                "product orthogonal, so a ViT trains without any skip.",
        equations=(
            (r"The input Jacobian of attention block $\ell$ ($A_\ell$: the attention map, $A'_\ell$: its derivative; "
             "Eq. 10) and its condition number:",
             r"K_\ell = \big(\hat X_{\ell-1} W^V_\ell W^O_\ell \otimes I_n\big)^\top A'_\ell + "
             r"\big(W^V_\ell W^O_\ell\big)^\top \otimes A_\ell, \qquad \kappa(K) = \frac{s_{\max}(K)}{s_{\min}(K)}"),
            (r"The proposed initialisation, from the SVD $Q = USV^\top$ of a random matrix (Sec. 5; supervised ViTs: "
             r"$\alpha = 2, \beta = 0.6, c = 3$):",
             r"W^V_\ell = c\,U,\quad W^O_\ell = c\,V^\top, \qquad "
             r"W^Q_\ell {W^K_\ell}^\top = \alpha Z + \beta I,\quad Z_{ij} \sim \mathcal N(0, 1/d)"),
        ),
        notebook="notebooks/05_skipless.ipynb",
    ),
}

VERDICTS = {  # a claim's verdict -> (badge colour, icon, label); the labels are explorer.plots.VERDICT_STYLES'
    "holds": ("green", ":material/check_circle:", plots.VERDICT_STYLES["holds"][1]),
    "does-not-hold": ("red", ":material/cancel:", plots.VERDICT_STYLES["does-not-hold"][1]),
    "inconclusive": ("violet", ":material/help:", plots.VERDICT_STYLES["inconclusive"][1]),
    "not-tested": ("orange", ":material/science:", plots.VERDICT_STYLES["not-tested"][1]),
    "error": ("gray", ":material/error:", plots.VERDICT_STYLES["error"][1]),
}

MODES = ("Fast mode runs one seed and small runs: seconds per claim, and it decides only large effects (otherwise "
         "inconclusive). Full mode runs at least 3 seeds and decides on the paired same-seed differences: up to "
         "several minutes per claim on a 2-core CPU. Verdicts can differ between the two.")

PROGRESS_S = 0.5  # without a feed: the progress refresh period while this session's claims job runs
RESULTS = "papers-results"  # session state: (paper, claim id, fast) -> the claim's result row


# ---- running claims -----------------------------------------------------------------------------

def claim_context() -> tuple:
    """What a claim's numbers depend on besides its seeded specs: the code's version, torch's version, the
    machine and the threads a job trains with (float sums differ with them)."""
    import platform

    import torch

    return (explorer.__version__, torch.__version__, platform.machine(), state.job_queue().claim_threads)


def cache_key(claim: Claim, fast: bool) -> tuple:
    return (claim.paper, claim.id, fast, claim_context())


def start_claims(to_run: list[Claim], fast: bool) -> None:
    """Button callback: show the cached results at once and queue the others as one claims job (a worker
    runs them; the page only follows its progress)."""
    results = session_results()
    missing = []
    for claim in to_run:
        row = state.claim_rows().get(cache_key(claim, fast))
        if row is not None:
            results[(claim.paper, claim.id, fast)] = row
        else:
            missing.append(claim)
    st.session_state.pop("papers-message", None)
    if not missing:
        st.session_state["papers-last"] = (len(to_run), 0.0, fast, to_run[0].paper)
        return
    mode = "fast" if fast else "full"
    label = f"claims {missing[0].paper}: {len(missing)} ({mode} mode)"
    try:
        job = state.submit_claims([(c.paper, c.id) for c in missing], fast, label)
    except (state.SessionLimit, SettingError) as refused:
        st.session_state["papers-message"] = f"Not started: {escape(refused)}"
        return
    st.session_state["papers-job"] = {"job": job, "fast": fast, "cached": len(to_run) - len(missing),
                                      "started": time.perf_counter(), "paper": missing[0].paper}


def collect_finished() -> None:
    """Once the claims job ended: its rows into this session's results, and (all but errors) into the
    server-wide cache (claims are seeded: in a class only the first student pays)."""
    running = st.session_state.get("papers-job")
    if running is None or running["job"].view().active:
        return
    view, fast = running["job"].view(), running["fast"]
    for (paper, claim_id), row in view.results.items():
        session_results()[(paper, claim_id, fast)] = row
        if row["verdict"] != "error":
            claim = next(c for c in claims(paper) if c.id == claim_id)
            state.claim_rows().put(cache_key(claim, fast), row)
    done = [(paper, claim_id) for paper, claim_id in running["job"].claims if (paper, claim_id) not in view.results]
    if view.status == "error":  # the worker failed (or died) before these claims reported
        for paper, claim_id in done:
            session_results()[(paper, claim_id, fast)] = {
                "verdict": "error", "measured": {}, "per_seed": {}, "reason": view.error, "note": view.error,
                "seconds": None}
    st.session_state["papers-last"] = (len(view.results) + running["cached"],
                                       time.perf_counter() - running["started"], fast, running["paper"])
    del st.session_state["papers-job"]


def claims_progress(paper: str) -> None:
    """The progress of this session's claims job: it follows the job's feed (without one, this fragment reruns
    twice a second); the whole page is drawn again with the results once the job ends."""
    live_feed.stale()  # a live part asked for this rerun (the job's state changed): drawn below as it is now
    running = st.session_state.get("papers-job")
    if running is not None and running["paper"] == paper:
        view = running["job"].view(since=10**12)  # a claims job logs no rows
        if not view.active:
            st.rerun(scope="app")  # its results are drawn by the whole page
        fraction, text = job_progress(view, running["fast"], state.job_queue())
        figures.progress(fraction, text, key="papers-claims",
                         feed=live_feed.link(publish_claims_feed(running), "progress", "", claims_stamp(view)))
        return
    last = st.session_state.get("papers-last")
    if last is not None and last[3] == paper:
        count, seconds, fast, _ = last
        st.progress(1.0, text=f"Done: {count} claim{'s' if count != 1 else ''} in {seconds:.1f} s "
                              f"({'fast' if fast else 'full'} mode)")


def job_progress(view, fast: bool, queue) -> tuple[float, str]:
    """(fraction, text) of a claims job's progress bar."""
    if view.status == "queued":
        running_jobs, _ = queue.counts()
        return 0.0, (f"Queued: number {view.queue_position} in line ({running_jobs} job(s) running on this server, "
                     f"limit {queue.max_jobs}, EXPLORER_MAX_JOBS)")
    mode = "fast" if fast else "full"
    if view.steps_done >= view.total_steps:  # the last claim reported; the job is ending
        return 1.0, f"{view.total_steps} of {view.total_steps} claims done ({mode} mode)"
    return (view.steps_done / max(view.total_steps, 1),
            f"Claim {view.steps_done + 1} of {view.total_steps} ({mode} mode): {view.current or 'starting'}"
            f"{view.detail}")


def claims_stamp(view) -> str:
    """What the page shows of a claims job besides its progress: when the feed's stamp differs, it reruns."""
    return json.dumps([view.status, view.queue_position])


def publish_claims_feed(running: dict) -> str | None:
    """Serve the claims job's progress bar (explorer_app.live_feed) under this session's Papers token; None
    where no feed is served."""
    if not live_feed.served:
        return None
    job, fast, queue = running["job"], running["fast"], state.job_queue()

    def source() -> live_feed.State:
        view = job.view(since=10**12)
        return live_feed.State(claims_stamp(view), view.active, job_progress(view, fast, queue))

    token = live_feed.publish(source, st.session_state.get("papers-feed"), key=(job.id,))
    st.session_state["papers-feed"] = token
    return token


def session_results() -> dict:
    return st.session_state.setdefault(RESULTS, {})


# ---- showing results ----------------------------------------------------------------------------

def error_message(note: str) -> str:
    """The error's first lines, without the traceback `Claim.run` appends."""
    return note.split("\nTraceback (most recent call last):", 1)[0].strip()


def formatted(value) -> str:
    if value is None:
        return "—"  # not reached, or not finite
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return ", ".join(formatted(v) for v in value)
    return str(value)


def tau_norm_figure(m: dict) -> go.Figure:
    curves = {"measured, τ = 1/√L": m["R[1/sqrt(L)]"], "Theorem 1's ceiling, τ = 1/√L": m["theory_R_upper[1/sqrt(L)]"],
              "measured, τ = L^-1/4": m["R[1/L^0.25]"], "Theorem 4's floor L^1/4, τ = L^-1/4": m["theorem4_floor[1/L^0.25]"]}
    return plots.theory_curves(m["depths"], curves, "Norm growth at initialisation: ||h_(L-1)|| / ||h_0||",
                               "depth L", "RMS norm ratio R", log_x=True, log_y=True)


def width_figure(per_seed: dict) -> go.Figure:
    """DCA's gain (Transformer - DCA validation loss) against width, one curve per seed, on its own axis."""
    prefix = "gain (transformer - DCA) at width "
    widths = sorted(int(key.removeprefix(prefix)) for key in per_seed if key.startswith(prefix))
    n_seeds = len(per_seed[f"{prefix}{widths[0]}"])
    curves = {f"seed {i}": [per_seed[f"{prefix}{w}"][i] for w in widths] for i in range(n_seeds)}
    return plots.theory_curves(widths, curves, "DCA's gain over the Transformer against width (one curve per seed)",
                               "width", "gain: val loss Transformer - DCA (nats)", log_x=True)


FIGURES = {  # claims whose numbers explorer.plots can draw -> (field of the row, figure)
    ("tau", "init-norm-sharp-threshold"): ("measured", tau_norm_figure),
    ("dca", "table2-width-trend"): ("per_seed", width_figure),
}



def show_result(claim: Claim, row: dict, fast: bool) -> None:
    """Verdict badge, the per-seed numbers, the rule with its threshold and why, the set-up, and a figure."""
    mode = "fast" if fast else "full"
    color, icon, label = VERDICTS.get(row["verdict"], ("gray", ":material/help:", "unknown verdict"))
    took = f", computed in {row['seconds']} s" if row.get("seconds") is not None else ""
    st.markdown(f":{color}-badge[{icon} {label}] :gray-badge[{mode} mode{took}]")
    if row["verdict"] == "error":
        st.error(escape(error_message(row["note"])), icon=":material/error:")
        return
    # the notebooks' verdict table (explorer.plots.verdict_table): every text in it is escaped
    st.html(plots.verdict_table([row], show_claim=False))
    st.caption(f"The paper: {escape(row['source'])}")
    st.caption(f"Paper scale: {escape(row['paper_scale'])}")
    field, draw = FIGURES.get((claim.paper, claim.id), (None, None))
    if draw is not None:
        try:
            fig = draw(row[field])
        except (KeyError, TypeError, ValueError, IndexError) as error:  # numbers not shaped as drawn here
            st.caption(f"No figure for these numbers ({failure(error)}).")
            return
        figures.show(fig, key=f"papers-{claim.paper}-{claim.id}-{mode}", name=f"{claim.paper}-{claim.id}-{mode}")


def recorded_section(paper: str) -> None:
    """The paper's full-mode results recorded with the package (3 seeds), folded: what a full run gives, without
    waiting for it."""
    stored = recorded(paper)
    if not stored["rows"]:
        return
    about = stored["about"]
    verdicts = ", ".join(f"{sum(r['verdict'] == v for r in stored['rows'])} {VERDICTS[v][2]}"
                         for v in VERDICTS if any(r["verdict"] == v for r in stored["rows"]))
    with st.expander(f"Recorded full-mode results ({len(stored['rows'])} claims, 3 seeds: {verdicts})"):
        st.caption(escape(f"Recorded {about['date']} on {about['machine']} with: {about['command']} (commit "
                          f"{about['commit'][:10]}). Rerun any claim in full mode below to check."))
        stale = [r["id"] for r in stored["rows"] if r["stale"]]
        if stale:
            st.warning(f"The check of {escape(', '.join(stale))} changed after it was recorded: a new run may differ.")
        st.html(plots.verdict_table(stored["rows"]))


# ---- the page -----------------------------------------------------------------------------------

def claims_section(paper: str, fast: bool) -> None:
    paper_claims = claims(paper)
    st.markdown(f"#### Claims ({len(paper_claims)})")
    st.caption("Each claim is checked on real runs at CPU scale, on several seeds in full mode: it holds or does not "
               "hold only when every seed agrees by more than the run-to-run noise; otherwise, or when a score sits "
               "at its trivial floor (chance accuracy, float noise), it is inconclusive. Results are cached on the "
               "server: a claim someone already ran shows at once.")
    busy = st.session_state.get("papers-job") is not None
    st.button("Run all claims of this paper", key=f"papers-run-all-{paper}", icon=":material/play_arrow:",
              on_click=start_claims, args=(paper_claims, fast), disabled=busy,
              help="Claims run one after another in a worker process; the page follows their progress.")
    if "papers-message" in st.session_state:
        st.warning(st.session_state["papers-message"], icon=":material/warning:")
    st.fragment(run_every=PROGRESS_S if busy and not live_feed.served else None)(claims_progress)(paper)
    recorded_section(paper)
    for claim in paper_claims:
        with st.container(border=True):
            st.markdown(f"**{escape(claim.section)}.** {escape(claim.statement)}")
            st.button("Run this claim", key=f"papers-run-{paper}-{claim.id}", on_click=start_claims,
                      args=([claim], fast), disabled=busy)
            for mode_fast in (True, False):
                row = session_results().get((paper, claim.id, mode_fast))
                if row is not None:
                    show_result(claim, row, mode_fast)


def presets_section(paper: str) -> None:
    presets = [(name, entry) for name, entry in explorer.registry("presets").items()
               if entry.extra.get("paper") == paper]
    with st.expander(f"Presets ({len(presets)}): the paper's experiments at CPU scale, to train live in Train"):
        for name, entry in presets:
            text, button = st.columns([5, 1], vertical_alignment="center")
            text.markdown(f"`{name}`: {escape(entry.description)}")
            if button.button("Open in Train", key=f"papers-open-{name}", icon=":material/open_in_new:"):
                state.open_in_train(explorer.preset(name))


def paper_section(paper: str, fast: bool) -> None:
    info = PAPERS[paper]
    st.subheader(info.title)
    st.markdown(info.summary)
    for text, latex in info.equations:
        st.markdown(text)
        st.latex(latex)
    st.caption(f"Figures, widgets and exercises: `{info.notebook}`.")
    claims_section(paper, fast)
    presets_section(paper)


collect_finished()
st.title("Papers")
st.caption("Five papers on residual connections: what each one says, its key equations, and its claims rerun on "
           "real training runs at CPU scale, with the numbers measured and a verdict.")
fast_mode = st.toggle("Fast mode", value=True, key="papers-fast")
st.caption(MODES)
tabs = st.tabs([info.tab for info in PAPERS.values()], key="paper", bind="query-params")
for paper_id, tab in zip(PAPERS, tabs):
    if tab.open:
        with tab:
            paper_section(paper_id, fast_mode)
