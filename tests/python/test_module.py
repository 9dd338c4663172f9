"""The Python package is built from the same meson.build and importable from .venv."""
import pathlib
import re

import refgrad


def test_version_matches_the_meson_project():
    meson_build = pathlib.Path(__file__).parents[2] / "meson.build"
    declared = re.search(r"version\s*:\s*'([^']+)'", meson_build.read_text()).group(1)
    assert refgrad.__version__ == declared


def test_extension_module_is_compiled():
    from refgrad import _refgrad

    assert _refgrad.__file__.endswith(".so")
