"""The public registries by kind, and the hook for checks that need more than one spec section.

This module sits at the bottom with the registry and the spec: it imports neither the packages
that fill the registries nor the module that knows the cross-section rules. Those register
themselves when `explorer` is imported (the registries by kind, see `explorer.registry`; the
checks with `add_check`, see `explorer.combinations`).
"""

from __future__ import annotations

from collections.abc import Callable

from explorer.registry import Registry, SpecError, registry_of_kind

KINDS = ("datasets", "models", "topologies", "inits", "optimizers", "presets", "probes")

_CHECKS: list[Callable] = []


def get(kind: str) -> Registry:
    """The registry of `kind` (one of KINDS)."""
    found = registry_of_kind(kind) if kind in KINDS else None
    if found is None:
        raise SpecError("kind", f"unknown registry {kind!r}; valid kinds: {', '.join(KINDS)}")
    return found


def add_check(check: Callable) -> Callable:
    """Register `check(spec)`, run on every spec after its sections are valid; raises SpecError."""
    _CHECKS.append(check)
    return check


def check_spec(spec) -> None:
    """Run every registered cross-section check on a spec whose sections are each valid."""
    for check in _CHECKS:
        check(spec)
