"""One module per paper: its presets (named specs at CPU scale) and its claims (see explorer.papers.claims)."""

from __future__ import annotations

from explorer.registry import Entry, Registry

PRESETS = Registry("presets")


def _register_presets() -> None:
    from explorer.papers import ancre, dca, idinit, skipless, tau

    for module in (ancre, dca, idinit, skipless, tau):
        for name, (description, spec_dict) in module.PRESETS.items():
            PRESETS.add(Entry(name, description, (), _loader(spec_dict), {"paper": module.__name__.rsplit(".", 1)[-1]}))


def _loader(spec_dict):
    def load():
        from explorer.spec import ExperimentSpec

        return ExperimentSpec.from_dict(spec_dict)

    return load


def preset(name: str):
    """The ExperimentSpec registered under `name` (a SpecError lists the valid names)."""
    return PRESETS.lookup(name, "preset").factory()


_register_presets()
