"""Runs the binding's pytest suite (ctest's ``python_binding``): fails with a
clear message when numpy or pytest is missing, else ``pytest -q`` on this
folder (extra arguments are passed on)."""
import os
import sys

try:
    import numpy  # noqa: F401
    import pytest
except ImportError as exc:
    sys.exit(f"python_binding: {exc}. The Python binding's tests need numpy and pytest for "
             f"{sys.executable}: run scripts/install-deps.sh or "
             f"'{sys.executable} -m pip install numpy pytest'.")

sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-rs", os.path.dirname(os.path.abspath(__file__)),
                      *sys.argv[1:]]))
