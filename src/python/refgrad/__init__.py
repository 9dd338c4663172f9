"""refgrad: a reference interpreter for functionalized PyTorch backward programs.

The Python API grows with the project; today it exposes the version of the
C++ core it was built with.
"""
from refgrad._refgrad import __version__

__all__ = ["__version__"]
