"""``ProgramDesc`` with its rules loosened: strings are bytes, enums are plain integers.

The fields keep their numbers, so a loose message and a real one read and write the same bytes.
Mutations done on a loose message can therefore put invalid UTF-8 in a name or an unknown value
in an enum field — things the real schema refuses to set — and still re-encode exactly.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from fluidjax.proto import framework_pb2 as pb

_F = descriptor_pb2.FieldDescriptorProto


def _loosen(msg: descriptor_pb2.DescriptorProto) -> None:
    for field in msg.field:
        if field.type == _F.TYPE_ENUM:
            field.type = _F.TYPE_INT64
            field.ClearField("type_name")
            field.ClearField("default_value")
        elif field.type == _F.TYPE_STRING:
            field.type = _F.TYPE_BYTES
    for nested in msg.nested_type:
        _loosen(nested)


def _build():
    fdp = descriptor_pb2.FileDescriptorProto()
    pb.DESCRIPTOR.CopyToProto(fdp)
    fdp.name = "fluidjax_fuzz/loose_framework.proto"
    fdp.package = "fluidjax_fuzz_loose"
    for msg in fdp.message_type:
        _loosen(msg)
    # Message-typed fields name their types with the package: rename those references too.
    def rename(msg):
        for field in msg.field:
            if field.type_name.startswith(".fluidjax.proto."):
                field.type_name = ".fluidjax_fuzz_loose." + field.type_name[len(".fluidjax.proto."):]
        for nested in msg.nested_type:
            rename(nested)
    for msg in fdp.message_type:
        rename(msg)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {m.name: message_factory.GetMessageClass(pool.FindMessageTypeByName("fluidjax_fuzz_loose." + m.name))
            for m in fdp.message_type}


_CLASSES = _build()
ProgramDesc = _CLASSES["ProgramDesc"]
Scalar = _CLASSES["Scalar"]


def parse(data: bytes):
    """A loose ``ProgramDesc`` from bytes (partial messages allowed)."""
    desc = ProgramDesc()
    desc.ParseFromString(data)
    return desc


def encode(desc) -> bytes:
    """Bytes of a loose message, whatever required fields it lacks."""
    return desc.SerializePartialToString()
