"""What the pages share: the server's job queue and run store, and this browser session's runs."""

from __future__ import annotations

import json
import urllib.parse

import streamlit as st

import explorer
from explorer.cache import LRUCache
from explorer.classroom import Classroom
from explorer.registries import SpecError
from explorer.runs import home
from explorer.settings import admin_token
from explorer_app.jobs import Job, JobQueue, SessionLimit  # noqa: F401  (SessionLimit: for the pages)
from explorer_app.limits import limits
from explorer_app.workers import shared_pool

CLAIM_ROWS_BYTES = 20_000_000  # claim result rows kept server-wide (a row is a few kB)

TRAIN_PAGE = "views/train.py"  # relative to app/streamlit_app.py, as st.switch_page wants


def job_queue() -> JobQueue:
    """One queue for the whole server: EXPLORER_MAX_JOBS trainings at once, at most EXPLORER_MAX_QUEUED waiting;
    each browser at most EXPLORER_MAX_JOBS_PER_SESSION active jobs and each network address at most
    EXPLORER_MAX_JOBS_PER_ADDRESS, stopped EXPLORER_SESSION_GRACE_S seconds after the session ends.
    Its jobs run in a pool of EXPLORER_MAX_JOBS worker processes shared by every queue of this server; a worker
    that keeps more than EXPLORER_WORKER_IDLE_MB after a job is replaced."""
    caps = limits()
    queue = _job_queue(caps.max_jobs, str(home()), caps.max_jobs_per_session, caps.session_grace_s,
                       caps.worker_idle_mb, caps.max_jobs_per_address, caps.max_queued)
    room = classroom().read()  # a running class's teacher may lower the per-browser and per-address caps
    queue.limit(*((room.per_session, room.per_address) if room.open else ()))
    return queue


def classroom() -> Classroom:
    """The class on this server (explorer.classroom): its file in the run store's folder, EXPLORER_HOME."""
    return Classroom(home())


def student() -> str | None:
    """Who this session is on the class board: its browser (all its tabs are one student), else the session."""
    return browser_id() or session_id()


def operator_only(url_path: str) -> None:
    """Stop the page here unless it was opened with the server's EXPLORER_ADMIN_TOKEN (/url_path?token=..., kept for
    the session and taken out of the address bar): no token set, or another one, shows one line and nothing else."""
    import hmac

    expected = admin_token()
    given = st.query_params.get("token", "") or st.session_state.get("admin-token", "")
    if not expected or not hmac.compare_digest(str(given).encode(), expected.encode()):
        st.info(f"Open this page as /{url_path}?token=... with the server's EXPLORER_ADMIN_TOKEN.",
                icon=":material/lock:")
        st.stop()
    st.session_state["admin-token"] = given
    if "token" in st.query_params:
        del st.query_params["token"]  # out of the address bar (and of anything copied from it)


def session_id() -> str | None:
    """This browser session's id (None outside a Streamlit script run)."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else None


def browser_id() -> str | None:
    """This browser's id, the same in all its tabs: a digest of the token in the XSRF cookie Streamlit's server
    (tornado) gives each browser once. The cookie is sent re-masked per page load ("2|mask|token XOR mask|time"),
    so the token is unmasked first. None where there is none (AppTest, XSRF protection off): each tab then
    counts alone."""
    import binascii
    import hashlib

    try:
        cookie = st.context.cookies.get("_streamlit_xsrf")
    except Exception:  # noqa: BLE001  (outside a script run: no request, no cookie)
        return None
    if not isinstance(cookie, str) or not cookie:  # (AppTest's context holds no real request)
        return None
    parts = cookie.split("|")
    try:
        if parts[0] == "2" and len(parts) == 4:
            mask, masked = binascii.a2b_hex(parts[1]), binascii.a2b_hex(parts[2])
            token = bytes(byte ^ mask[i % len(mask)] for i, byte in enumerate(masked))
        else:
            token = cookie.encode()
    except (binascii.Error, ZeroDivisionError):  # a cookie this server did not write
        return None
    return "browser-" + hashlib.sha256(token).hexdigest()[:16]


def client_address() -> str | None:
    """The network address this session connects from (the TCP peer Streamlit's server sees); None for a local
    connection (127.0.0.1, ::1) or outside a server (AppTest)."""
    try:
        return st.context.ip_address
    except Exception:  # noqa: BLE001  (outside a script run: no request)
        return None


def queue_for_this_session() -> JobQueue:
    """The server's queue, told which browser this tab belongs to and its network address (the job caps count
    the browser's tabs, and the address's browsers)."""
    queue = job_queue()
    session = session_id()
    queue.same_browser(session, browser_id())
    queue.same_address(session, client_address())
    return queue


def session_alive(session: str) -> bool:
    """Whether a browser session is still connected (True when there is no server to ask, as in AppTest)."""
    from streamlit.runtime import Runtime

    return not Runtime.exists() or Runtime.instance().is_active_session(session)


def submit(spec, label: str, **options) -> Job:
    """Queue a run for this session (SessionLimit, naming the cap, when its browser or address already has its
    share of active jobs or the server's line is full)."""
    job = queue_for_this_session().submit(spec, label, session=session_id(), **options)
    add_job(job)
    return job


def submit_many(runs: list[dict]) -> list[Job]:
    """Queue runs for this session, each a dict of `submit`'s arguments, all or none (SessionLimit, nothing
    queued, when the caps leave fewer places than runs)."""
    jobs = queue_for_this_session().submit_many(runs, session=session_id())
    for job in jobs:
        add_job(job)
    return jobs


def store() -> explorer.RunStore:
    """The run store in EXPLORER_HOME (default ~/.explorer), shared by all sessions."""
    return _store(str(home()))


# Keyed by the settings, so a changed EXPLORER_HOME (each test has its own) gets its own store and queue.
@st.cache_resource(show_spinner=False)
def _job_queue(max_jobs: int, root: str, per_session: int, grace_s: int, idle_mb: int, per_address: int,
               max_queued: int) -> JobQueue:
    return JobQueue(max_jobs, store=_store(root), max_per_session=per_session, alive=session_alive, grace_s=grace_s,
                    pool=shared_pool(max_jobs), worker_idle_mb=idle_mb, max_per_address=per_address,
                    max_queued=max_queued)


@st.cache_resource(show_spinner=False)
def _store(root: str) -> explorer.RunStore:
    return explorer.RunStore(root)


def session_jobs() -> list[Job]:
    """This session's jobs, oldest first (another browser has its own list)."""
    return st.session_state.setdefault("jobs", [])


def add_job(job: Job) -> None:
    session_jobs().append(job)


def session_run_ids() -> list[str]:
    """Ids in the run store of the runs this session started (newest first)."""
    ids = [job.view().run_id for job in reversed(session_jobs())]
    return [run_id for run_id in ids if run_id]


def remember_train_spec(spec) -> None:
    """Keep the Train page's current, valid experiment (its dict) in a session key of its own, for other pages and
    for the Train page's return (Streamlit drops a page's widget state when the user leaves it)."""
    st.session_state["train-spec"] = spec.to_dict()


def train_spec():
    """The experiment the Train page last held in this session, or None (also where it no longer validates, e.g.
    its data file is gone)."""
    kept = st.session_state.get("train-spec")
    if kept is None:
        return None
    try:
        return explorer.ExperimentSpec.from_dict(kept)
    except SpecError:
        return None


def keep_choices(name: str, keys: tuple[str, ...] = (), prefixes: tuple[str, ...] = ()) -> None:
    """Keep a page's choices in the session key `name` and put back the ones missing. Streamlit drops a widget's
    value in every run that does not draw it (a run of another page): the widgets with these keys (or keys
    starting with these prefixes) are copied on each run and restored when the user comes back. Call it before
    the widgets are drawn; such a widget takes its default from the session (setdefault), not from its
    `value`/`default` argument, which Streamlit would warn about beside a restored value."""
    kept = st.session_state.setdefault(name, {})
    for key in list(st.session_state):
        if key in keys or (prefixes and str(key).startswith(prefixes)):
            kept[key] = st.session_state[key]
    for key, value in kept.items():
        if key not in st.session_state:
            st.session_state[key] = value


def train_page_params(spec) -> dict[str, str]:
    """Query parameters that open the Train page set up with `spec` (what its URL holds)."""
    return dict(urllib.parse.parse_qsl(spec.to_query()))


def open_in_train(spec) -> None:
    """Switch to the Train page with `spec` loaded (e.g. a paper's preset)."""
    st.switch_page(TRAIN_PAGE, query_params=train_page_params(spec))


def submit_probes(spec, probes: dict, inputs: int, run_id: str, state: dict | None = None,
                  step: int | None = None) -> Job:
    """Queue the Inside page's probes of a run for this session (its stored weights, or `state` at `step` for a
    run still training), each limited to EXPLORER_PROBE_SECONDS. SpecError when their memory estimate passes
    EXPLORER_MAX_MODEL_MB, SessionLimit when a job cap is reached (as `submit`); the job is not
    one of the session's runs (`session_jobs`)."""
    return queue_for_this_session().submit_probes(spec, probes, inputs, f"probe {run_id[:8]}", run_id=run_id,
                                                  state=state, step=step, seconds=limits().probe_seconds,
                                                  session=session_id())


def submit_claims(claims: list[tuple[str, str]], fast: bool, label: str) -> Job:
    """Queue paper claims as one job of this session (SessionLimit when a job cap is reached, as `submit`)."""
    job = queue_for_this_session().submit_claims(claims, fast, label, session=session_id())
    add_job(job)
    return job


def claim_rows() -> LRUCache:
    """Claim result rows kept for every session of this server: results only (small dicts), least recently
    used dropped first past CLAIM_ROWS_BYTES."""
    return _claim_rows()


@st.cache_resource(show_spinner=False)
def _claim_rows() -> LRUCache:
    return LRUCache(CLAIM_ROWS_BYTES, size_of=lambda row: len(json.dumps(row, default=str)))
