"""Dense causal mixing: out_j = sum_{i<j} W[i, j] h_i over a history h_0, h_1, ... built block by block.

ANCRe and GRN-v1 need, before every block j, a weighted sum of *all* earlier outputs:
O(L^2) work. Written with ordinary ops that is O(L^2) small kernels (stacks, weighted sums,
and as many gradient accumulations), which on a CPU costs far more than the arithmetic.

`Mixer` keeps the history in one preallocated buffer (each entry written once) and reads it
with matrix products: one product per chunk of CHUNK destinations for everything before the
chunk, plus one short product per destination for the chunk's own entries. Its backward
accumulates the history's gradients in place in a matching buffer, so the whole mix costs a
few GEMMs forward and backward. Gradients reach each entry through `_Record`, whose backward
runs after every mix that read it (the autograd engine orders it so).

The buffer is a side effect, which torch.func transforms (jacrev, vmap) cannot trace;
`fast_path_ok` tells callers when to use their plain-autograd reference path instead. Double
backward is not supported on the fast path either.
"""

from __future__ import annotations

import threading
import weakref

import torch

CHUNK = 8  # destinations per block-wide product; balances per-chunk GEMMs against per-block ones


try:
    from torch._C._functorch import is_functorch_wrapped_tensor
except ImportError:  # pragma: no cover - older torch: always take the plain path
    def is_functorch_wrapped_tensor(x):
        return True


def fast_path_ok(x: torch.Tensor) -> bool:
    """False inside torch.func transforms (wrapped tensors), where only plain autograd ops work."""
    return not is_functorch_wrapped_tensor(x)


class _BufferPool:
    """Large scratch buffers reused across forward passes.

    A fresh multi-megabyte tensor costs a page fault per 4 KB page on first write, which in a
    virtual machine can exceed the arithmetic done on it. A buffer is lent to one owner (a
    Mixer) and becomes free again when that owner, and with it the autograd graph that may still
    read the buffer, is garbage.
    """

    def __init__(self, per_key: int = 4):
        self.per_key = per_key
        self.slots: dict[tuple, list[list]] = {}
        self.lock = threading.Lock()  # runs may train in several threads (the app does)

    def take(self, owner, purpose: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        key = (purpose, shape, like.dtype, like.device)
        with self.lock:
            slots = self.slots.setdefault(key, [])
            for slot in slots:
                if slot[1]() is None:
                    slot[1] = weakref.ref(owner)
                    return slot[0]
            buffer = like.new_empty(shape)
            if len(slots) < self.per_key:
                slots.append([buffer, weakref.ref(owner)])
            return buffer


_POOL = _BufferPool()


class _Record(torch.autograd.Function):
    """Write entry i into the history; return a token whose backward hands entry i its gradient."""

    @staticmethod
    def forward(ctx, x, history, index):
        history.values[index].copy_(x.reshape(-1))
        ctx.history, ctx.index = history, index
        return x.new_empty(0)

    @staticmethod
    def backward(ctx, _token_grad):
        grads = ctx.history.grads
        if grads is None:
            return None, None, None
        ctx.history.consumed[ctx.index] = True  # a later backward pass over this graph starts this row afresh
        return grads[ctx.index].view(ctx.history.shape), None, None


class _Pull(torch.autograd.Function):
    """weights (r, s) @ history[lo:hi] -> (r, *shape); backward accumulates into history.grads[lo:hi]."""

    @staticmethod
    def forward(ctx, weights, history, lo, hi, *tokens):
        ctx.save_for_backward(weights)
        ctx.history, ctx.lo, ctx.hi, ctx.n_tokens = history, lo, hi, len(tokens)
        out = weights @ history.values[lo:hi]
        return out.view(len(weights), *history.shape)

    @staticmethod
    def backward(ctx, grad_out):
        (weights,) = ctx.saved_tensors
        history, lo, hi = ctx.history, ctx.lo, ctx.hi
        grad = grad_out.reshape(len(weights), -1)
        history.grad_buffer(lo, hi)[lo:hi].addmm_(weights.T, grad)
        grad_weights = grad @ history.values[lo:hi].T if ctx.needs_input_grad[0] else None
        empty = grad_out.new_empty(0)
        return (grad_weights, None, None, None, *([empty] * ctx.n_tokens))


class Mixer:
    """A history of same-shaped tensors and the dense mixes read from it (see the module docstring).

    weights: (n_sources, n_destinations) with weights[i, j] the share of entry i in destination j;
    destination j may read entries 0..j-1 only.
    """

    def __init__(self, weights: torch.Tensor, first: torch.Tensor):
        self.weights = weights
        self.shape = first.shape
        self.values = _POOL.take(self, "values", (weights.shape[0], first.numel()), first)
        self.grads = None
        self.consumed: list[bool] = []
        self.tokens: list[torch.Tensor] = []
        self._chunk: tuple[int, tuple[torch.Tensor, ...]] | None = None
        self.push(first)

    def grad_buffer(self, lo: int, hi: int) -> torch.Tensor:
        """The gradient buffer, with rows lo:hi cleared if an earlier backward pass (retain_graph) consumed them."""
        if self.grads is None:
            self.grads = _POOL.take(self, "grads", self.values.shape, self.values).zero_()
            self.consumed = [False] * len(self.values)
        for row in range(lo, hi):
            if self.consumed[row]:
                self.grads[row].zero_()
                self.consumed[row] = False
        return self.grads

    def push(self, x: torch.Tensor) -> None:
        """Append the next history entry."""
        self.tokens.append(_Record.apply(x, self, len(self.tokens)))

    def _pull(self, weights: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        return _Pull.apply(weights, self, lo, hi, *self.tokens[lo:hi])

    def mix(self, j: int) -> torch.Tensor:
        """sum_{i<j} weights[i, j] * entry_i; entries 0..j-1 must have been pushed."""
        start = 1 + (j - 1) // CHUNK * CHUNK  # first destination of j's chunk
        if self._chunk is None or self._chunk[0] != start:
            stop = min(start + CHUNK, self.weights.shape[1])
            self._chunk = (start, self._pull(self.weights[:start, start:stop].T, 0, start).unbind(0))
        out = self._chunk[1][j - start]
        if j > start:
            out = out + self._pull(self.weights[start:j, j:j + 1].T, start, j)[0]
        return out

    def close(self) -> None:
        """End of the forward pass: drop the tokens, which would otherwise keep this mixer (and its
        buffers) alive in a reference cycle through the autograd graph."""
        self.tokens = []
        self._chunk = None
