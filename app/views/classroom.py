"""Class: the teacher's page, only with EXPLORER_ADMIN_TOKEN (opened as /classroom?token=..., checked as Admin is).

A running class (explorer.classroom, one file in the run store's folder, so it survives a restart) lets the teacher
set the students' job limits below the server's, push a Train-page link that shows above every student's page,
see each session's current run and design, follow the design challenge's class board, reveal the papers' answer
to the students, and download the class's runs and scores as CSV. Without the token the page shows one line and
nothing else, and draws none of the buttons that write the class file.

The limits the teacher sets are the job queue's caps that can change while the server runs: the jobs one browser
(a student, all their tabs) and one network address may have training or waiting. Each stays at most the server's
setting (EXPLORER_MAX_JOBS_PER_SESSION, EXPLORER_MAX_JOBS_PER_ADDRESS), which remains the ceiling for whoever
runs the server. The others stay the server's: EXPLORER_MAX_JOBS is the worker processes started with it, and
EXPLORER_MAX_QUEUED, the steps, parameters and memory caps protect the server from the whole room at once.
"""

import streamlit as st

import explorer
from explorer import challenge, classroom
from explorer.registries import SpecError
from explorer_app import design_editor, limits, messages, state

REFRESH_S = 3.0  # the room and the board follow the students' runs without a click
ERROR = "class-error"

st.title("Class")
state.operator_only("classroom")

room_file = state.classroom()
caps = limits.limits()


def act(do, *args) -> None:
    """A button's callback: do it; a refusal is one line above the page's sections."""
    try:
        do(*args)
        st.session_state.pop(ERROR, None)
    except SpecError as error:
        st.session_state[ERROR] = messages.spec_error(error)


def apply_limits() -> None:
    act(room_file.set_limits, int(st.session_state["class-per-session"]), int(st.session_state["class-per-address"]),
        caps.max_jobs_per_session, caps.max_jobs_per_address)


def push() -> None:
    message = st.session_state.get("class-link-message", "")
    if st.session_state.get("class-link-kind") == "a challenge design":
        act(room_file.push_design, st.session_state.get("class-link-design", ""), message)
    else:
        act(room_file.push_preset, st.session_state.get("class-link-preset", ""), message)


room = room_file.read()
if room.damaged:
    st.warning(f"{messages.escape(room.damaged)}.", icon=":material/warning:")
if st.session_state.get(ERROR):
    st.error(st.session_state[ERROR], icon=":material/block:")
if not room.open:
    st.markdown("No class is running. A class puts a name field and the class board in every student's **Design "
                "challenge** (Train), keeps the papers' answer hidden until you reveal it, and lets you lower the "
                "students' job limits and push a link that shows above every page.")
    st.button("Start a class", key="class-start", icon=":material/play_arrow:", on_click=act, args=(room_file.start,))
    st.stop()

def current_runs(room) -> list[dict]:
    """Each session's current job (its latest active one, else its latest): who, what, how far, which design."""
    queue = state.job_queue()
    latest: dict[str, object] = {}
    for job in queue.jobs():  # oldest first: a later job replaces an earlier one unless that one is still active
        if job.session is not None and (job.active or not getattr(latest.get(job.session), "active", False)):
            latest[job.session] = job
    rows = []
    for session, job in latest.items():
        view, spec = job.view(), getattr(job, "spec", None)
        rows.append({"name": room.names.get(queue.browser_of(session), ""),
                     "design": classroom.design_label(spec) if spec is not None else "", "status": view.status,
                     "step": f"{view.steps_done} of {view.total_steps}", "run": view.label, "session": session[:8]})
    return rows


@st.fragment(run_every=REFRESH_S)
def live() -> None:
    """The board and the room, redrawn every REFRESH_S seconds."""
    room = room_file.read()
    board_column, room_column = st.columns(2, gap="medium")
    with board_column:
        st.subheader("Class board")
        st.caption(f"{challenge.CHALLENGE.text} Best first: fewest steps, then the lowest last loss; equal scores in "
                   "the order they came in.")
        rows = design_editor.class_board_table(room)
        if rows:
            st.container(key="class-board-teacher").dataframe(rows, hide_index=True)
        else:
            st.caption("No scored run yet.")
        others = classroom.unscored(room)
        if others:
            with st.expander(f"Not scored ({len(others)})"):
                st.dataframe(others, hide_index=True)
        left, right = st.columns(2)
        left.button("Hide the answer" if room.revealed else "Reveal the answer", key="class-reveal",
                    icon=":material/visibility:", on_click=act, args=(room_file.reveal, not room.revealed))
        right.download_button("Download CSV", classroom.csv_text(room), file_name="class-runs.csv", mime="text/csv",
                              key="class-csv", icon=":material/download:", on_click="ignore")
        answer = challenge.reference(measure=False)
        st.caption(f"The papers' answer ({'shown to' if room.revealed else 'hidden from'} the students): "
                   f"{answer['design']}.")
    with room_column:
        st.subheader("The room")
        runs = current_runs(room)
        if runs:
            st.dataframe(runs, hide_index=True, key="class-room")
        else:
            st.caption("No session has a run yet.")
        st.caption(f"{len(room.names)} named student(s).")


live()
link_column, limits_column = st.columns(2, gap="medium")
with link_column:
    st.subheader("Push a link")
    kind = st.radio("to", ["a preset", "a challenge design"], horizontal=True, key="class-link-kind",
                    label_visibility="collapsed")
    if kind == "a preset":
        st.selectbox("preset", list(explorer.registry("presets")), key="class-link-preset")
    else:
        st.text_input("design (at most two shortcuts i:j)", key="class-link-design",
                      placeholder=challenge.REFERENCE_DESIGN)
    st.text_input("your line to the class (optional)", key="class-link-message", max_chars=classroom.MESSAGE_CHARS)
    left, right = st.columns(2)
    left.button("Push to every page", key="class-push", icon=":material/campaign:", on_click=push)
    right.button("Clear", key="class-clear", icon=":material/close:", on_click=act, args=(room_file.clear_link,),
                 disabled=not room.link)
    st.caption(f"Showing: {messages.escape(room.link_text)}." if room.link else "No link pushed.")
with limits_column:
    st.subheader("Job limits")
    st.number_input("each student may run this many jobs at once", min_value=1,
                    max_value=caps.max_jobs_per_session, value=room.per_session or caps.max_jobs_per_session,
                    key="class-per-session")
    st.number_input("each network address may run this many jobs at once", min_value=1,
                    max_value=caps.max_jobs_per_address, value=room.per_address or caps.max_jobs_per_address,
                    key="class-per-address")
    st.button("Apply", key="class-limits", icon=":material/tune:", on_click=apply_limits)
    queue = state.job_queue()
    st.caption(f"Now: {queue.max_per_session} per student, {queue.max_per_address} per address (a Compare grid "
               f"counts each run: a 3x3 grid needs 9). The server's settings are the ceiling: "
               f"EXPLORER_MAX_JOBS_PER_SESSION={caps.max_jobs_per_session}, "
               f"EXPLORER_MAX_JOBS_PER_ADDRESS={caps.max_jobs_per_address}.")
st.divider()
st.button("End the class", key="class-end", icon=":material/stop_circle:", on_click=act, args=(room_file.end,),
          help="Clears the names, the board, the link and the limits: download the CSV first.")
