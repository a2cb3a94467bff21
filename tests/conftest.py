"""Test-suite setup: make the test helpers (``optable``, ``paddle_oracle``) importable."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
