"""fxslots' passes: each a named function over one graph or one plan, run through ``observe``."""

from ..routes import find_out_overload
from .collect import collect_inputs, collect_saved
from .observe import failure_reason, observe
from .plan import plan_arena, unplaceable_reason
from .recompute import recomputed_ops, tag_recompute
from .rewrite import annotate_backward, backward_slot_args, rewrite_forward, slot_outputs, snapshot
from .share import share_slot
from .verify import verify_forward

__all__ = [
    "annotate_backward",
    "backward_slot_args",
    "slot_outputs",
    "collect_inputs",
    "collect_saved",
    "failure_reason",
    "find_out_overload",
    "observe",
    "plan_arena",
    "rewrite_forward",
    "share_slot",
    "snapshot",
    "recomputed_ops",
    "tag_recompute",
    "unplaceable_reason",
    "verify_forward",
]
