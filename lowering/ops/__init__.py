"""Op definitions, one module per family; importing this package registers them all."""

from . import (activation, conv, logic, loss, manipulation, math, nn, norm,  # noqa: F401
               optimizer, random, reduce, sequence, tensor)
