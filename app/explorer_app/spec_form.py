"""The experiment form: one widget per spec field, generated from the registries.

Each section (data, model, topology, init, optim) gets a select box of its registry's entries
and one widget per parameter of the chosen entry, typed by the parameter's declaration (int,
float, bool, choice, text, or a tau rule). A new topology or init registered in the library
appears here with no change to the app. The form keeps the whole spec in the page's URL, so a
shared link opens the same experiment, and shows a SpecError next to the field it names.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import streamlit as st

import explorer
from explorer.registries import DEPTH_RULES, Param, SpecError
from explorer.spec import SECTION_KINDS, SECTIONS, TRAIN_PARAMS, ExperimentSpec
from explorer_app import messages

SECTION_TITLES = {"data": "Data", "model": "Architecture", "topology": "Residual topology", "init": "Initialisation",
                  "optim": "Optimizer", "train": "Training"}
CUSTOM_RULE = "a number"
PREFIX = "spec:"  # widget keys: spec:<section>.<entry>.<param>


@dataclass
class Form:
    """What the form produced this run: the spec (None when invalid), the error, and where to show it."""

    spec: ExperimentSpec | None
    error: SpecError | None
    raw: dict[str, dict[str, Any]]
    slots: dict[str, Any] = field(default_factory=dict)  # field path -> st.empty() under its widget

    def show_error(self) -> None:
        """Put the error message under the widget its path names (or the section's, or the form's top)."""
        if self.error is None:
            return
        path = self.error.path
        section = path.split(".")[0]
        slot = self.slots.get(path) or self.slots.get(f"{section}.name") or self.slots["top"]
        slot.error(messages.spec_error(self.error), icon=":material/error:")


def widget_key(section: str, entry: str | None, name: str) -> str:
    return f"{PREFIX}{section}.{entry or '-'}.{name}"


def load_into_widgets(spec: ExperimentSpec) -> None:
    """Set every widget's value from `spec` (before the widgets are drawn), e.g. from a shared URL."""
    for key in [k for k in st.session_state if str(k).startswith(PREFIX)]:
        del st.session_state[key]
    for section in SECTIONS:
        part = getattr(spec, section)
        if section != "train":
            st.session_state[f"{PREFIX}{section}.name"] = part.name
        for param in params_of(section, part.name):
            value = part.params[param.name]
            key = widget_key(section, part.name, param.name)
            if param.kind == "rule":
                is_rule = isinstance(value, str)
                st.session_state[key + ":mode"] = value if is_rule else CUSTOM_RULE
                if not is_rule:
                    st.session_state[key] = float(value)
            else:
                st.session_state[key] = value


def in_session() -> bool:
    """Whether the form's widgets hold values in this session: Streamlit drops them in a run of another page, so
    they are gone when the user comes back to the form's page."""
    return all(f"{PREFIX}{section}.name" in st.session_state for section in SECTIONS if section != "train")


def params_of(section: str, name: str | None) -> tuple[Param, ...]:
    """The fields of `section` (a spec section) for the registry entry `name` (train: the training fields)."""
    if section == "train":
        return TRAIN_PARAMS
    return explorer.registry(SECTION_KINDS[section])[name].params


def render(check: Callable[[ExperimentSpec], None] | None = None, hidden: dict[str, set[str]] | None = None) -> Form:
    """Draw the form (in the current container) and validate it; `check` adds server limits.

    `hidden` names parameters drawn elsewhere ({section: {param}}) whose current values still count.
    """
    slots = {"top": st.empty()}
    raw: dict[str, dict[str, Any]] = {}
    for section in SECTIONS:
        with st.expander(SECTION_TITLES[section], expanded=section in ("model", "topology")):
            raw[section] = _section(section, slots, (hidden or {}).get(section, set()))
    error = None
    spec = None
    try:
        spec = ExperimentSpec.from_dict(raw)
        if check is not None:
            check(spec)
    except SpecError as err:
        error, spec = err, None
    form = Form(spec, error, raw, slots)
    form.show_error()
    return form


def _section(section: str, slots: dict[str, Any], hidden: set[str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    name = None
    if section != "train":
        registry = explorer.registry(SECTION_KINDS[section])
        described = registry.describe()
        key = f"{PREFIX}{section}.name"
        if st.session_state.get(key) not in registry:
            st.session_state[key] = explorer.spec.DEFAULT_NAMES[section]
        name = st.selectbox(SECTION_TITLES[section], list(registry), key=key,
                            help=_entry_help(described))
        st.caption(described[name])
        slots[f"{section}.name"] = st.empty()
        values["name"] = name
    for param in params_of(section, name):
        if param.name in hidden:
            key = widget_key(section, name, param.name)
            values[param.name] = st.session_state.get(key, param.default)
            continue
        values[param.name] = _widget(section, name, param)
        slots[f"{section}.{param.name}"] = st.empty()
    return values


def _entry_help(described: dict[str, str]) -> str:
    return "\n".join(f"- **{n}**: {d}" for n, d in described.items())


def _widget(section: str, entry: str | None, param: Param) -> Any:
    return param_widget(param, widget_key(section, entry, param.name))


def param_widget(param: Param, key: str) -> Any:
    """One widget for one declared parameter (its type, range, choices and help), starting at its default."""
    label = param.name.replace("_", " ")
    if param.kind == "bool":
        st.session_state.setdefault(key, param.default)
        return st.toggle(label, key=key, help=param.help)
    if param.kind == "choice":
        st.session_state.setdefault(key, param.default)
        return st.selectbox(label, param.choices, key=key, help=param.help)
    if param.kind == "str":
        st.session_state.setdefault(key, param.default)
        return st.text_input(label, key=key, help=param.help)
    if param.kind == "int":
        st.session_state.setdefault(key, int(param.default))
        return st.number_input(label, step=1, key=key, help=param.help,
                               min_value=_bound(param.low, int), max_value=_bound(param.high, int))
    if param.kind == "float":
        st.session_state.setdefault(key, float(param.default))
        return st.number_input(label, key=key, help=param.help, format="%g", step=_step(param.default),
                               min_value=_bound(param.low, float), max_value=_bound(param.high, float))
    if param.kind == "rule":
        default_is_rule = isinstance(param.default, str)
        st.session_state.setdefault(key + ":mode", param.default if default_is_rule else CUSTOM_RULE)
        mode = st.selectbox(label, (*DEPTH_RULES, CUSTOM_RULE), key=key + ":mode", help=param.help)
        if mode != CUSTOM_RULE:
            return mode
        st.session_state.setdefault(key, 0.1 if default_is_rule else float(param.default))
        return st.number_input(f"{label} (number)", key=key, format="%g", step=0.01,
                               min_value=_bound(param.low, float), max_value=_bound(param.high, float))
    raise AssertionError(f"no widget for parameter kind {param.kind!r}")


def _bound(value: float | None, kind: type) -> Any:
    return None if value is None else kind(value)


def _step(default: float) -> float:
    """A +/- step of the default's decade (0.001 for lr 0.001; 0.1 for a zero default)."""
    if not default:
        return 0.1
    return 10.0 ** math.floor(math.log10(abs(default)))
