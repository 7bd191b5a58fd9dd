"""fxslots' passes: each a named function over one graph or one plan, run through ``observe``."""

from .collect import collect_inputs, collect_saved, find_out_overload
from .observe import observe
from .plan import plan_arena, unplaceable_reason
from .recompute import tag_recompute
from .rewrite import annotate_backward, rewrite_forward
from .verify import verify_forward

__all__ = [
    "annotate_backward",
    "collect_inputs",
    "collect_saved",
    "find_out_overload",
    "observe",
    "plan_arena",
    "rewrite_forward",
    "tag_recompute",
    "unplaceable_reason",
    "verify_forward",
]
