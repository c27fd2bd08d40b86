"""Admin: every training job on this server, with a Stop button each; only with EXPLORER_ADMIN_TOKEN.

The page exists only when the server was started with EXPLORER_ADMIN_TOKEN set, and shows anything only
to a browser that opened it as /admin?token=<that value> (kept for the session). An operator uses it to
see what holds the job slots (whose session, how far, since when) and to stop any job.
"""

import streamlit as st

from explorer_app import messages, state

st.title("Admin: jobs on this server")
state.operator_only("admin")

queue = state.job_queue()
running, waiting = queue.counts()
st.caption(f"{running} running, {waiting} waiting; limits: {queue.max_jobs} at once (EXPLORER_MAX_JOBS), "
           f"{queue.max_per_session} per session (EXPLORER_MAX_JOBS_PER_SESSION), stopped {queue.grace_s:.0f} s "
           "after their session ends (EXPLORER_SESSION_GRACE_S).")
jobs = queue.jobs()
if not jobs:
    st.info("No jobs.", icon=":material/info:")
for job in reversed(jobs):
    view = job.view()
    left, right = st.columns([5, 1])
    alive = "connected" if job.session and state.session_alive(job.session) else "gone" if job.session else "-"
    left.markdown(f"`{job.id}` **{messages.escape(view.label)}** · {view.status} · step {view.steps_done} of "
                  f"{view.total_steps} · session `{(job.session or '-')[:8]}` ({alive})")
    right.button("Stop", key=f"admin-stop-{job.id}", disabled=not view.active, icon=":material/stop:",
                 on_click=job.stop, args=("Stopped by the server's operator.",))
