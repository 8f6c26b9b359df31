"""Which torch device the encoder runs on: a name checked against this machine, with errors naming the option."""
from __future__ import annotations

import torch

from uhdsearch.errors import UsageError


def resolve_device(device: str | torch.device, option: str = "device") -> torch.device:
    """`device` as a torch.device that exists here, or a UsageError naming `option`.

    Examples:
        >>> resolve_device("cpu")
        device(type='cpu')
        >>> resolve_device("gpu", "--device")
        Traceback (most recent call last):
        ...
        uhdsearch.errors.UsageError: --device='gpu' is not a torch device name (e.g. 'cpu', 'cuda', 'cuda:1')
    """
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise UsageError(f"{option}={device!r} is not a torch device name (e.g. 'cpu', 'cuda', 'cuda:1')") from None
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"{option}={str(device)!r} asks for a CUDA GPU, but torch here has none (torch "
                             f"{torch.__version__}, torch.cuda.is_available() is False)")
        count = torch.cuda.device_count()
        if resolved.index is not None and resolved.index >= count:
            raise UsageError(f"{option}={str(device)!r}: this process sees {count} CUDA device(s), "
                             f"numbered 0 to {count - 1}")
    elif resolved.type == "mps" and not torch.backends.mps.is_available():
        raise UsageError(f"{option}={str(device)!r} asks for an Apple GPU, but torch here has no MPS backend")
    elif resolved.type not in ("cpu", "cuda", "mps"):
        raise UsageError(f"{option}={str(device)!r}: uhdsearch encodes on 'cpu', 'cuda' or 'mps' only")
    return resolved
