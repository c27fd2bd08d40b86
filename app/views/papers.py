"""Papers page: each paper's question, its key equations, and its claims rerun at CPU scale.

One tab per paper (the open tab is in the URL as ?paper=...): a plain-language summary, the
equations its claims test (st.latex), every claim with its full-mode result recorded with the package and a
button that reruns it on real training runs (fast mode by default); a result shows its verdict, the measured
summary and why, the per-seed numbers with the rule folded, and beside them the figure of the numbers it decided
on; and the paper's presets, each of which opens in the Train page to be trained live and probed.

Claims run as a job of the server's queue, in a worker process (never in the page's script thread),
so a class cannot start more heavy work at once than EXPLORER_MAX_JOBS allows; the page follows the
job's progress ("claim i of n") through a live feed (explorer_app.live_feed; without a served feed, a fragment
reruns twice a second), and is drawn again with the results once the job ends. Claims are seeded and
deterministic, so each result row is cached
server-wide per (paper, claim, mode, context): in a class only the first student pays.

Each tab draws its paper's record (explorer.papers.PAPERS: the summary, equations, notebook and presets a
paper module declares), so a new paper needs no change here.
"""

from __future__ import annotations

import json
import time

import streamlit as st

import explorer
from explorer import plots
from explorer.papers import PAPERS, presets_of
from explorer.papers.claims import RULE_SUMMARY, Claim, claims, recorded
from explorer.papers.claims import figure as claim_figure
from explorer_app import figures, live_feed, state
from explorer_app.messages import escape
from explorer.settings import SettingError


VERDICTS = {  # a claim's verdict -> (badge colour, icon, label); the labels are explorer.plots.VERDICT_STYLES'
    "holds": ("green", ":material/check_circle:", plots.VERDICT_STYLES["holds"][1]),
    "does-not-hold": ("red", ":material/cancel:", plots.VERDICT_STYLES["does-not-hold"][1]),
    "inconclusive": ("violet", ":material/help:", plots.VERDICT_STYLES["inconclusive"][1]),
    "not-tested": ("orange", ":material/science:", plots.VERDICT_STYLES["not-tested"][1]),
    "error": ("gray", ":material/error:", plots.VERDICT_STYLES["error"][1]),
}


TABLE_SHARE = [3, 2]  # a claim's verdict table and its figure, side by side
FIGURE_TITLE_CHARS = 36  # the figure's column holds title lines of about this many characters
PROGRESS_S = 0.5  # without a feed: the progress refresh period while this session's claims job runs
RESULTS = "papers-results"  # session state: (paper, claim id, fast) -> the claim's result row
OPEN_KEY = "papers-open"  # session state: the preset whose Open in Train was pressed (its callback sets it, the
# page opens it first thing: a claims job ending further down reruns the page, which would lose a plain click)


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


def fitted(fig):
    """A claim's figure fitted to its column: its title wrapped, a legend beside the plot moved under it."""
    fig.update_layout(title_text=plots.wrap_title(fig.layout.title.text or "", FIGURE_TITLE_CHARS))
    if fig.layout.legend.orientation != "h":
        fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.2, x=0))
    return fig


def seconds_note(row: dict, mode: str, recorded_row: bool) -> str:
    """What the verdict table's "s" column is: the seconds the claim took, and where."""
    if recorded_row:
        return (f"s: seconds the claim took when it was recorded ({escape(row['mode'])}; the machine and command are "
                "under Recorded full-mode results above).")
    return f"s: seconds the claim took on this server ({mode} mode)."


def show_result(claim: Claim, row: dict, fast: bool, recorded_row: bool = False) -> None:
    """Verdict badge, then the verdict table (the measured summary first, why, the per-seed numbers, the rule
    folded) beside the figure of the numbers it decided on (explorer.papers.claims.figure), then the paper's words.
    `recorded_row`: a full-mode row recorded with the package, not run in this session."""
    mode = "fast" if fast else "full"
    color, icon, label = VERDICTS.get(row["verdict"], ("gray", ":material/help:", "unknown verdict"))
    took = f", computed in {row['seconds']} s" if row.get("seconds") is not None else ""
    source = (f":blue-badge[recorded with the package: {escape(row['mode'])}]" if recorded_row
              else f":gray-badge[{mode} mode{took}]")
    st.markdown(f":{color}-badge[{icon} {label}] {source}")
    if row["verdict"] == "error":
        st.error(escape(error_message(row["note"])), icon=":material/error:")
        return
    if recorded_row and row.get("stale"):
        st.caption("The check changed after this was recorded: a new full-mode run may differ.")
    # the notebooks' verdict table (explorer.plots.verdict_table; every text in it is escaped) beside its figure:
    # both in one screen at 1280x720, the table's text column wide enough to read (TABLE_SHARE); without the claim and
    # verdict columns, which the heading and the badge above it show
    fig = claim_figure(row)
    table, chart = st.columns(TABLE_SHARE, gap="small") if fig is not None else (st.container(), None)
    table.html(plots.verdict_table([row], show_claim=False))
    table.caption(seconds_note(row, mode, recorded_row))
    if chart is not None:
        with chart:
            name = f"{claim.paper}-{claim.id}-{'recorded' if recorded_row else mode}"
            figures.show(fitted(fig), key=f"papers-{name}", name=name)
    st.caption(f"The paper: {escape(row.get('source', claim.source))}")
    st.caption(f"Paper scale: {escape(row.get('paper_scale', claim.paper_scale))}")


def recorded_section(paper: str) -> None:
    """The paper's full-mode results recorded with the package: when and where they were recorded and
    all its claims in one table, folded; each claim below shows its own recorded row with its figure."""
    stored = recorded(paper)
    if not stored["rows"]:
        return
    about = stored["about"]
    verdicts = ", ".join(f"{sum(r['verdict'] == v for r in stored['rows'])} {VERDICTS[v][2]}"
                         for v in VERDICTS if any(r["verdict"] == v for r in stored["rows"]))
    with st.expander(f"Recorded full-mode results ({len(stored['rows'])} claims: {verdicts})"):
        for when in [about, *about.get("earlier", [])]:  # the newest recording first
            st.caption(escape(f"Recorded {when['date']} on {when['machine']} with: {when['command']} (commit "
                              f"{when['commit']})."))
        st.caption(escape(f"{about['note']}. " if about.get("note") else "") + "Rerun any claim in full mode below to check.")
        stale = [r["id"] for r in stored["rows"] if r["stale"]]
        if stale:
            st.warning(f"The check of {escape(', '.join(stale))} changed after it was recorded: a new run may differ.")
        st.html(plots.verdict_table(stored["rows"]))


# ---- the page -----------------------------------------------------------------------------------

def claims_section(paper: str, fast: bool) -> None:
    paper_claims = claims(paper)
    st.markdown(f"#### Claims ({len(paper_claims)})")
    st.caption("Each claim is checked on real runs at CPU scale, by the rule above. Results are cached on the "
               "server: a claim someone already ran shows at once.")
    busy = st.session_state.get("papers-job") is not None
    st.button("Run all claims of this paper", key=f"papers-run-all-{paper}", icon=":material/play_arrow:",
              on_click=start_claims, args=(paper_claims, fast), disabled=busy,
              help="Claims run one after another in a worker process; the page follows their progress.")
    if "papers-message" in st.session_state:
        st.warning(st.session_state["papers-message"], icon=":material/warning:")
    st.fragment(run_every=PROGRESS_S if busy and not live_feed.served else None)(claims_progress)(paper)
    recorded_section(paper)
    stored = {row["id"]: row for row in recorded(paper)["rows"]}
    for claim in paper_claims:
        with st.container(border=True, key=f"papers-claim-{paper}-{claim.id}"):
            st.markdown(f"**{escape(claim.section)}.** {escape(claim.statement)}")
            st.button("Run this claim", key=f"papers-run-{paper}-{claim.id}", on_click=start_claims,
                      args=([claim], fast), disabled=busy)
            for mode_fast in (True, False):
                row = session_results().get((paper, claim.id, mode_fast))
                if row is not None:
                    show_result(claim, row, mode_fast)
                    difference = plots.mode_difference(row, stored.get(claim.id))
                    if difference:
                        st.info(escape(difference), icon=":material/compare_arrows:")
            if session_results().get((paper, claim.id, False)) is None and claim.id in stored:
                show_result(claim, stored[claim.id], fast=False, recorded_row=True)  # no run needed to see one


def presets_section(paper: str) -> None:
    presets = presets_of(paper)
    with st.expander(f"Presets ({len(presets)}): the paper's experiments at CPU scale, to train live in Train"):
        for name, entry in presets.items():
            text, button = st.columns([5, 1], vertical_alignment="center")
            text.markdown(f"`{name}`: {escape(entry.description)}")
            button.button("Open in Train", key=f"papers-open-{name}", icon=":material/open_in_new:",
                          on_click=st.session_state.__setitem__, args=(OPEN_KEY, name))


def paper_section(paper: str, fast: bool) -> None:
    info = PAPERS[paper]  # the paper's record, declared in explorer/papers/<paper>.py
    st.subheader(info.title)
    st.markdown(info.summary)
    for text, latex in info.equations:
        st.markdown(text)
        st.latex(latex)
    st.caption(f"Figures, widgets and exercises: `{info.notebook}`.")
    claims_section(paper, fast)
    presets_section(paper)


if OPEN_KEY in st.session_state:  # before anything that may rerun the page (a claims job ending): the click holds
    state.open_in_train(explorer.preset(st.session_state.pop(OPEN_KEY)))
collect_finished()
st.title("Papers")
st.caption(f"{len(PAPERS)} papers on residual connections: what each one says, its key equations, and its claims rerun on "
           "real training runs at CPU scale, with the numbers measured and a verdict.")
fast_mode = st.toggle("Fast mode", value=True, key="papers-fast")
st.caption(RULE_SUMMARY)  # the rule and the two modes, in the library's words
tabs = st.tabs([info.tab for info in PAPERS.values()], key="paper", bind="query-params")
for paper_id, tab in zip(PAPERS, tabs):
    if tab.open:
        with tab:
            paper_section(paper_id, fast_mode)
