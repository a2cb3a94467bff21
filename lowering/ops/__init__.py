"""Op definitions, one module per family; importing this package registers them all."""

from . import (activation, conv, logic, loss, manipulation, math, nn, norm, random,  # noqa: F401
               reduce, tensor)
