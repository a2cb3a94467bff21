"""Op definitions, one module per family; importing this package registers them all."""

from . import math, nn, random, tensor  # noqa: F401
