"""Lets `import refgrad` use an extension module from a meson build tree.

meson builds refgrad._refgrad as <build>/src/python/_refgrad.*.so, beside the
package rather than inside it (installs put it inside). With that folder and
the sources on the path, e.g.

    PYTHONPATH=build-py/src/python:src/python python -m pytest tests/python

a top-level `_refgrad` is importable, and is loaded here as `refgrad._refgrad`
before the package asks for it. Under the editable install (`make
test-python`) there is no top-level `_refgrad` and this does nothing.
"""
import importlib.util
import sys

_built = importlib.util.find_spec("_refgrad")
if _built is not None and "refgrad._refgrad" not in sys.modules:
    _spec = importlib.util.spec_from_file_location("refgrad._refgrad", _built.origin)
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
    sys.modules["refgrad._refgrad"] = _module


# Tests marked `slow` (compiled autograd on every transformers zoo model: minutes each) are deselected from the
# default run; `make test-slow` runs them with `-m slow`. Any -m expression given decides by itself.
def pytest_configure(config):
    config.addinivalue_line("markers", "slow: minutes-long; deselected unless -m selects it (make test-slow)")


def pytest_collection_modifyitems(config, items):
    if config.option.markexpr:
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
