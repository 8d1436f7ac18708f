"""How a predicted peak splits (issue 24): the tracker's categories at the peak grouped into
the parts people budget for (model states, inputs, activations, the LM head and loss,
temporaries), and the op that holds the peak as one short text. One place, so the CLI's
table (points.py) and the report (reports/peak_table.py) cannot group differently.

Model states are what exists whatever the length: parameters, their gradients, the
optimizer's states and the parameters' autocast copies (the 16 bytes per parameter of
mixed-precision AdamW plus the low-precision copies; DeepSpeed's and accelerate's
estimators count the same). The optimizer step's temporaries are temporaries. A category
this module does not know (a later tracker's) goes to "other", never silently elsewhere.
"""

from __future__ import annotations

PARTS = (
    ("model states", ("parameters", "gradients", "optimizer_state", "autocast_copies")),
    ("inputs", ("inputs",)),
    ("activations", ("activations",)),
    ("lm head/loss", ("lm_head_loss",)),
    ("temporaries", ("temporaries", "optimizer_temporaries")),
)
OTHER = "other"
PASS_SHORT = {"forward": "fwd", "backward": "bwd", "step": "step"}


def split(breakdown: dict) -> dict:
    """part -> bytes at the peak, every part of PARTS (0 where none), "other" only where
    the breakdown has a category PARTS does not name."""
    known = {c: part for part, categories in PARTS for c in categories}
    out = {part: 0 for part, _ in PARTS}
    for category, nbytes in (breakdown or {}).items():
        part = known.get(category, OTHER)
        out[part] = out.get(part, 0) + int(nbytes or 0)
    return out


def peak_op_text(op, pass_) -> str:
    """"_log_softmax_backward_data (bwd)": the op whose output reached the peak (".default"
    left out) and its pass; "-" when unknown (a registered tensor reached it, an old record)."""
    if not isinstance(op, str) or not op:
        return "-"
    name = op[:-len(".default")] if op.endswith(".default") else op
    short = PASS_SHORT.get(pass_, "") if isinstance(pass_, str) else ""
    return f"{name} ({short})" if short else name
