"""Topologies: how each block's input is made from the outputs before it.

A network is a stack of blocks f_1..f_L. x_0 is the embedded input and y_j = f_j(input_j)
the output of block j. The papers write the history in two bases:

* state basis (ANCRe, the i:j shortcuts, cascaded, tau): x_j = act_j(s * y_j + sum_{i<j} P[i, j] x_i),
  the input of block j is x_{j-1} and the network output is x_L;
* branch basis (DCA's GRN): input_t = mix_t(x_0, d_1, ..., d_{t-1}) and the output is
  mix_{L+1}(x_0, d_1, ..., d_L), where d_t = act_t(input_t + y_t) - input_t is what block t
  added to the stream (d_t = y_t when the main stem is linear).

`act_j` is the main-stem operation after block j's merge (identity; ReLU for the MLP-ResNet
of the tau paper; a normalisation for post-norm Transformers), a block option rather than a
topology: `run` receives one per block. With a linear stem the two bases are
related by a cumulative sum, which is what `coefficients()` reports:

* `own`: an (L+1) x (L+1) matrix in the topology's own basis. Rows are destinations
  (row r is the input of block r+1, the last row the network output), columns sources
  (column 0 is x_0). In the state basis own[r, i] = P[i, r]; in the branch basis it holds
  the mixing weights (GRN-v2/v3 averaged over features; GRN-v3's input-dependent term needs
  data and is left to the probes).
* `unrolled`: the same destinations written in the branch basis (x_0, y_1, ..., y_L), so any two
  topologies can be compared on one picture. For a non-linear stem this is the linear
  skeleton of the wiring.

One file per topology family lives in this package (chain, shortcuts, ancre, grn, dca, highway, ...);
each registers its entries in TOPOLOGIES with their typed metadata (explorer.registries.TopologyInfo).
Importing the package imports every module in it, so a new topology is one new file here: it is then
in the spec, the CLI, the app's forms and every test that iterates the registry.
"""

from __future__ import annotations

from explorer.registries import import_folder
from explorer.topology.base import (K, TOPOLOGIES, Coefficients, FirstLastK, Topology, branch_output, build_topology,
                                    check_topology, depth_rule, feature_axis, is_shareable, stem_activation)
from explorer.topology import chain, shortcuts, ancre, grn, dca  # noqa: E402,I001  (the built-ins, listed in this order)
from explorer.topology.ancre import ANCRe
from explorer.topology.chain import Chain
from explorer.topology.dca import DCA
from explorer.topology.grn import GATE_STD, GRN, draw_gates
from explorer.topology.shortcuts import (SHORTCUT_NOTATION, SOURCE_STATE, TARGET_STATE, Shortcuts, describe_shortcut,
                                         parse_shortcuts, shortcuts_text, state_label, target_label)

import_folder(__name__, __path__)  # every other topology file in this folder registers itself

__all__ = ["ANCRe", "Chain", "Coefficients", "DCA", "FirstLastK", "GATE_STD", "GRN", "K", "SHORTCUT_NOTATION",
           "SOURCE_STATE", "Shortcuts", "TARGET_STATE", "TOPOLOGIES", "Topology", "branch_output", "build_topology",
           "check_topology", "depth_rule", "describe_shortcut", "draw_gates", "feature_axis", "is_shareable",
           "parse_shortcuts", "shortcuts_text", "state_label", "stem_activation", "target_label"]
