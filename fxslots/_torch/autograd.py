"""The autograd engine's private state fxslots reads (part of fxslots._torch)."""

from __future__ import annotations

import torch
import torch._dynamo.compiled_autograd as _compiled_autograd


def keep_graph() -> bool:
    """True inside a backward called with retain_graph=True: saved tensors stay readable."""
    return bool(torch._C._autograd._get_current_graph_task_keep_graph())


def saved_tensors_watched() -> bool:
    """Whether something beyond the compiled backward will look at the tensors a forward saves
    now: saved-tensor hooks (``save_on_cpu``, checkpointing's) pack each one, and compiled
    autograd traces the backward with their shapes."""
    if torch._C._autograd._top_saved_tensors_default_hooks(True) is not None:
        return True
    return bool(getattr(_compiled_autograd, "compiled_autograd_enabled", False)
                or getattr(_compiled_autograd, "in_compiled_autograd_region", False))
