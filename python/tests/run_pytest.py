"""Runs the binding's pytest suite (ctest's ``python_binding*``): fails with a
clear message when numpy or pytest is missing, else ``pytest -q`` on this
folder, or on the test files named (extra arguments are passed on)."""
import os
import sys

try:
    import numpy  # noqa: F401
    import pytest
except ImportError as exc:
    sys.exit(f"python_binding: {exc}. The Python binding's tests need numpy and pytest for "
             f"{sys.executable}: run scripts/install-deps.sh or "
             f"'{sys.executable} -m pip install numpy pytest'.")

# Test files named among the arguments run alone (ctest runs the suite in
# parts side by side, tests/CMakeLists.txt); otherwise the whole folder.
args = sys.argv[1:]
files = [a for a in args if a.endswith(".py") and not a.startswith("-")]
where = [] if files else [os.path.dirname(os.path.abspath(__file__))]
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-rs", *where, *args]))
