"""The pages' layout for a projector (1280x720 beside the sidebar): narrower margins around the page's content than
Streamlit's wide layout leaves, so that two columns (the Train page's design and live loss, a Papers claim's verdict
table and figure) each have room to read and the top of a page shows more than its title."""

import streamlit as st

# Streamlit's wide layout pads the content 6rem above and 5rem either side; its header bar is 3.75rem high.
CSS = """<style>
[data-testid="stMainBlockContainer"] { padding-top: 3.75rem; padding-left: 2rem; padding-right: 2rem; }
</style>"""


def projector() -> None:
    """Apply the layout to the page being drawn (st.html with only a style tag takes no room on the page)."""
    st.html(CSS)
