"""Comparing refgrad's gradients with torch's in the capture tests: torch.testing's tolerances per dtype,
and the precision a captured program runs at to be compared with torch in that dtype."""
import torch

DTYPES = [torch.float64, torch.float32]
TOLERANCES = {torch.float64: (1e-7, 1e-7), torch.float32: (1.3e-6, 1e-5)}  # torch.testing's (rtol, atol)


def precision(dtype):
    """float64 runs in float64; float32 runs as captured."""
    return "float64" if dtype == torch.float64 else "float32"


def assert_grads_close(ours, theirs, dtype, what="", same_dtype=False):
    """max|ours - theirs| <= atol + rtol max|theirs|, both defined and of one shape (and dtype, if asked)."""
    rtol, atol = TOLERANCES[dtype]
    assert ours is not None and theirs is not None, what
    assert ours.shape == theirs.shape, what
    assert not same_dtype or ours.dtype == theirs.dtype, what
    error = (ours.double() - theirs.double()).abs().max().item()
    scale = theirs.double().abs().max().item()
    assert error <= atol + rtol * scale, f"{what}: max error {error} at scale {scale}"
