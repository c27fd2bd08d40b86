"""Building blocks, the Stack that runs them under a Topology, and the registered models.

Importing this package registers every model: the MLPs and linear nets (models), the conv
nets (conv) and the Transformers (transformer); each of them imports only `explorer.nn.base`.
"""

from explorer.nn.base import MODELS, Network, Stack, roles
from explorer.nn import models, conv, transformer  # noqa: E402,F401,I001  (register the models)
from explorer.nn.models import build_model

__all__ = ["MODELS", "Network", "Stack", "build_model", "roles"]
