"""Protobuf schema for fluidjax programs.

``framework.proto`` is wire-compatible with PaddlePaddle 2.6.2's
``framework.proto`` (ProgramDesc, BlockDesc, VarDesc, OpDesc, ...), under the
package name ``fluidjax.proto`` so it can coexist with Paddle's module in one
process.  ``framework_pb2`` is generated from it by ``regenerate.py`` and
checked in; run ``python -m fluidjax.proto.regenerate`` after editing the
.proto.
"""

from . import framework_pb2

__all__ = ["framework_pb2"]
