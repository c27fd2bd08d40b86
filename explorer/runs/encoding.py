"""How a run's values are kept, never pickled: strict JSON for specs, histories, metrics and probe results
(`encode`/`decode`: arrays as {"__ndarray__", "dtype", "shape"}, NaN and infinities as null), the check that a
checkpoint holds only what `torch.load(weights_only=True)` reads (`_check_state`), and where a run ran
(`environment`)."""

from __future__ import annotations

import json
import math
import platform
import socket
from collections.abc import Mapping
from typing import Any


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def encode(obj: Any) -> Any:
    """A strict-JSON-able copy: arrays/tensors -> {"__ndarray__", "dtype", "shape"}, NaN/inf -> None."""
    import numpy as np

    if obj is None or isinstance(obj, (bool, str, int)):
        return obj
    if isinstance(obj, float):
        return _finite(obj)
    if isinstance(obj, Mapping):
        return {str(k): encode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [encode(v) for v in obj]
    if type(obj).__module__.startswith("torch"):
        import torch

        if isinstance(obj, torch.Tensor):
            obj = obj.detach().cpu().numpy()
    if isinstance(obj, np.generic):
        return encode(obj.item())
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind == "c":
            data = {"real": encode(obj.real)["__ndarray__"], "imag": encode(obj.imag)["__ndarray__"]}
        elif obj.dtype.kind == "f":
            data = np.where(np.isfinite(obj), obj, None).tolist()
        elif obj.dtype.kind in "biu":
            data = obj.tolist()
        else:
            data = obj.astype(str).tolist()
        return {"__ndarray__": data, "dtype": str(obj.dtype), "shape": list(obj.shape)}
    raise TypeError(f"cannot store a {type(obj).__name__} as JSON; give numbers, strings, lists, dicts or arrays")


def decode(obj: Any) -> Any:
    """The inverse of `encode`: encoded arrays come back as numpy arrays (null -> NaN in float arrays)."""
    import numpy as np

    if isinstance(obj, dict):
        if "__ndarray__" in obj and "dtype" in obj:
            dtype, shape, data = np.dtype(obj["dtype"]), tuple(obj["shape"]), obj["__ndarray__"]
            if dtype.kind == "c":
                real = decode({"__ndarray__": data["real"], "dtype": "float64", "shape": shape})
                imag = decode({"__ndarray__": data["imag"], "dtype": "float64", "shape": shape})
                return (real + 1j * imag).astype(dtype)
            if dtype.kind == "f":
                data = _nan_for_none(data)
            return np.array(data, dtype=dtype).reshape(shape)
        return {k: decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode(v) for v in obj]
    return obj


def _nan_for_none(data: Any) -> Any:
    if data is None:
        return float("nan")
    return [_nan_for_none(v) for v in data] if isinstance(data, list) else data


def _dumps(obj: Any) -> str:
    return json.dumps(encode(obj), allow_nan=False)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def environment(device: str | None = None) -> dict[str, Any]:
    """Where a run ran: torch and python versions, device, hostname, platform."""
    import torch

    from explorer.version import __version__

    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": device,
        "cuda": torch.version.cuda,
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "explorer": __version__,
    }


def _check_state(state: Any, path: str = "state") -> None:
    """Raise TypeError naming the first value that `torch.load(weights_only=True)` would refuse."""
    import torch

    if isinstance(state, torch.Tensor) or state is None or isinstance(state, (bool, int, float, str, bytes)):
        return
    if isinstance(state, (torch.Size, torch.dtype, torch.device)):
        return
    if isinstance(state, Mapping):
        for key, value in state.items():
            if not isinstance(key, (str, int)):
                raise TypeError(f"{path}: checkpoint keys must be strings or ints, got {type(key).__name__}")
            _check_state(value, f"{path}[{key!r}]")
        return
    if isinstance(state, (list, tuple)):
        for i, value in enumerate(state):
            _check_state(value, f"{path}[{i}]")
        return
    raise TypeError(f"{path}: a checkpoint holds only tensors, numbers, strings and lists/dicts of them, "
                    f"not {type(state).__name__} (it must load with weights_only=True)")
