"""The Streamlit app's helpers: server limits, background training jobs, the spec form and figure output.

Kept apart from the `explorer` library (which knows nothing of Streamlit) and from the page scripts in
app/views/, which only lay out widgets and call these.
"""
