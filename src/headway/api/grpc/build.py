"""Regenerate `inference.binpb`, the compiled `inference.proto`, with grpcio-tools' protoc.

The compiled descriptor is committed, so installing Headway needs no compiler, and
`messages` builds the message classes from it at import: this works with any protobuf
runtime from 5 on (generated `_pb2` modules pin the runtime's major version, and
tritonclient[grpc] pins protobuf below the one today's protoc generates for).
A test compiles the proto again and compares. After editing the proto, run
`python -m headway.api.grpc.build`.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
PROTO = HERE / "inference.proto"
COMPILED = HERE / "inference.binpb"


def compile_proto() -> bytes:
    """`inference.proto` compiled to a serialized FileDescriptorSet."""
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "inference.binpb"
        code = protoc.main(
            ["protoc", f"--proto_path={HERE}", f"--descriptor_set_out={out}", PROTO.name]
        )
        if code != 0:
            raise RuntimeError(f"protoc failed on {PROTO} (exit {code})")
        return out.read_bytes()


if __name__ == "__main__":
    COMPILED.write_bytes(compile_proto())
    print(f"wrote {COMPILED}", file=sys.stderr)
