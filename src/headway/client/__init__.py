"""Headway's Python client: numpy in and out over the Open Inference Protocol (REST, binary
tensors) and the apps API, with deadlines, retries of 429/503 and pooled connections;
`GrpcClient` makes the protocol's calls over gRPC.

    with headway.Client("http://127.0.0.1:8000") as client:
        answer = client.infer("iris-forest", rows, timeout=0.5)
        answer["label"]
"""

from headway.client.aio import AsyncClient
from headway.client.codec import Answer
from headway.client.grpc_client import GrpcClient
from headway.client.retry import Retry
from headway.client.sync import Client

__all__ = ["Answer", "AsyncClient", "Client", "GrpcClient", "Retry"]
