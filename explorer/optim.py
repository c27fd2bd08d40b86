"""Optimizers and learning-rate schedules, chosen by name in the spec's optim section."""

from __future__ import annotations

import math

import torch

from explorer.nn.base import roles
from explorer.registries import Param, Registry

OPTIMIZERS = Registry(
    "optimizers",
    common=(
        Param("lr", "float", 1e-3, "learning rate", low=0.0, high=1e4),
        Param("weight_decay", "float", 0.0, "L2 penalty (decoupled for AdamW)", low=0.0, high=10.0),
        Param("schedule", "choice", "constant", "learning-rate schedule after warm-up", choices=("constant", "cosine")),
        Param("warmup_steps", "int", 0, "linear warm-up from 0 over this many steps", low=0, high=10_000_000),
    ),
)

SCALAR_LR_FACTOR = 0.1  # tau and other scalar gates learn 10x slower (tau paper, Sec. 5.2)

_MOMENTUM = Param("momentum", "float", 0.0, "heavy-ball momentum", low=0.0, high=0.9999)
_BETAS = (Param("beta1", "float", 0.9, "first-moment decay", low=0.0, high=0.9999),
          Param("beta2", "float", 0.999, "second-moment decay", low=0.0, high=0.999999))


@OPTIMIZERS.register("gd", "full-batch gradient descent: every step uses the whole training set",
                     (_MOMENTUM,), full_batch=True)
def gd(groups, lr, weight_decay, momentum):
    return torch.optim.SGD(groups, lr=lr, momentum=momentum, weight_decay=weight_decay)


@OPTIMIZERS.register("sgd", "mini-batch SGD with optional (Nesterov) momentum",
                     (_MOMENTUM, Param("nesterov", "bool", False, "Nesterov momentum (needs momentum > 0)")))
def sgd(groups, lr, weight_decay, momentum, nesterov):
    return torch.optim.SGD(groups, lr=lr, momentum=momentum, weight_decay=weight_decay, nesterov=nesterov and momentum > 0)


@OPTIMIZERS.register("adam", "Adam", _BETAS)
def adam(groups, lr, weight_decay, beta1, beta2):
    return torch.optim.Adam(groups, lr=lr, betas=(beta1, beta2), weight_decay=weight_decay)


@OPTIMIZERS.register("adamw", "AdamW (decoupled weight decay)", _BETAS)
def adamw(groups, lr, weight_decay, beta1, beta2):
    return torch.optim.AdamW(groups, lr=lr, betas=(beta1, beta2), weight_decay=weight_decay)


@OPTIMIZERS.register("adagrad", "Adagrad")
def adagrad(groups, lr, weight_decay):
    return torch.optim.Adagrad(groups, lr=lr, weight_decay=weight_decay)


@OPTIMIZERS.register(
    "soap", "SOAP: Adam in the eigenbasis of Shampoo's preconditioner (pytorch-optimizer's implementation)",
    (Param("beta1", "float", 0.95, "first-moment decay", low=0.0, high=0.9999),
     Param("beta2", "float", 0.95, "second-moment decay", low=0.0, high=0.999999),
     Param("precondition_frequency", "int", 10, "steps between eigenbasis updates", low=1, high=100_000)),
)
def soap(groups, lr, weight_decay, beta1, beta2, precondition_frequency):
    """Vyas et al. 2024, as implemented by pytorch-optimizer (maintained, fast on CPU; not hand-written)."""
    from pytorch_optimizer import SOAP

    return SOAP(groups, lr=lr, betas=(beta1, beta2), weight_decay=weight_decay,
                precondition_frequency=precondition_frequency)


def is_full_batch(section) -> bool:
    return OPTIMIZERS[section.name].info.full_batch


def build_optimizer(model: torch.nn.Module, section, steps: int):
    """The optimizer and its LambdaLR schedule; scalar scale parameters get lr / 10."""
    params = dict(model.named_parameters())
    role_of = roles(model)
    scalar = [p for n, p in params.items() if role_of[n] == "scale"]
    rest = [p for n, p in params.items() if role_of[n] != "scale"]
    lr = section.params["lr"]
    groups = [{"params": rest}] + ([{"params": scalar, "lr": lr * SCALAR_LR_FACTOR}] if scalar else [])
    extra = {k: v for k, v in section.params.items() if k not in ("schedule", "warmup_steps")}
    optimizer = OPTIMIZERS[section.name].factory(groups, **extra)
    warmup, cosine = section.params["warmup_steps"], section.params["schedule"] == "cosine"

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if not cosine:
            return 1.0
        progress = (step - warmup) / max(1, steps - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
