"""What a backend needs from the compile it runs inside: Dynamo's signals, real tensors."""

from __future__ import annotations

from typing import Any

import torch
import torch._dynamo.exc


def is_dynamo_signal(e: BaseException) -> bool:
    """Whether ``e`` is Dynamo's own (a restart of its analysis, say, which it raises through
    backends and catches itself), or a fake-tensor exception Dynamo turns into a graph break
    when a backend raises it (a data-dependent ``.item()`` met while AOTAutograd traces:
    Mixtral's routing on CUDA): never a failure of fxslots to report."""
    breaks = getattr(torch._dynamo.exc, "exceptions_allowed_to_be_fallback", ())
    return isinstance(e, (torch._dynamo.exc.TorchDynamoException, *breaks))


def real_tensors() -> Any:
    """A context where new tensors are real even inside a compile, whose FakeTensorMode is
    active while backends run (a measurement made there would time no-op fake copies)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    return unset_fake_temporarily()
