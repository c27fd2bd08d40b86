"""The presets registry: named specs at CPU scale, each paper module's PRESETS registered by the package."""

from __future__ import annotations

from explorer.registry import Entry, Registry

PRESETS = Registry("presets")


def register_presets(paper: str, presets: dict) -> None:
    """Register a paper module's {name: (description, spec dict)} under its paper id."""
    for name, (description, spec_dict) in presets.items():
        PRESETS.add(Entry(name, description, (), _loader(spec_dict), {"paper": paper}))


def _loader(spec_dict):
    def load():
        from explorer.spec import ExperimentSpec

        return ExperimentSpec.from_dict(spec_dict)

    return load


def preset(name: str):
    """The ExperimentSpec registered under `name` (a SpecError lists the valid names)."""
    return PRESETS.lookup(name, "preset").factory()
