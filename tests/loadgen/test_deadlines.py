"""Deadline propagation's rewrite of a pre-encoded request (`headway.loadgen.deadlines`)."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from headway.loadgen.client import Target, http_request
from headway.loadgen.deadlines import Late, time_left_ms
from headway.loadgen.workload import Request, Tensor, encode

TARGET = Target("127.0.0.1", 8000)


def _request(parameters: dict[str, object] | None, binary: bool = False) -> bytes:
    tensor = Tensor("input-0", "FP32", np.arange(4, dtype=np.float32).reshape(1, 4))
    extra = {"parameters": parameters} if parameters else {}
    return http_request(TARGET, "/v2/models/m/infer", encode(Request([tensor], extra), binary))


def _split(request: bytes) -> tuple[dict[bytes, bytes], bytes]:
    head, _, body = request.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")[1:]
    return dict(line.lower().split(b": ", 1) for line in lines), body


def test_a_late_request_carries_the_time_it_has_left_and_a_matching_length() -> None:
    request = _request({"slo_ms": 50, "priority": 1})
    late = Late(request)
    assert late.exact == request
    for left in (37.25, 0.5, 9.999):
        headers, body = _split(late.with_left(left))
        assert int(headers[b"content-length"]) == len(body)
        document = orjson.loads(body)
        assert document["parameters"] == {"slo_ms": pytest.approx(left, abs=1e-3), "priority": 1}
        assert document["inputs"] == orjson.loads(_split(request)[1])["inputs"]


@pytest.mark.parametrize("parameters,binary", [(None, False), ({"slo_ms": 50}, True)])
def test_only_json_requests_with_an_slo_can_carry_their_time_left(
    parameters: dict[str, object] | None, binary: bool
) -> None:
    with pytest.raises(ValueError, match=r"parameters\.slo_ms"):
        Late(_request(parameters, binary))


def test_a_request_left_less_than_the_written_resolution_has_expired() -> None:
    # Sent a tenth of a microsecond before its 50 ms deadline, a request would be written with
    # slo_ms 0.000: no deadline at all. It has expired; anything written carries a positive time.
    late = Late(_request({"slo_ms": 50}))
    assert time_left_ms(0.05, 0.05 - 1e-7) is None
    assert time_left_ms(0.05, 0.05) is None and time_left_ms(0.05, 0.06) is None
    assert time_left_ms(0.05, 0.02) == pytest.approx(30.0)
    for late_s in (0.05 - 2e-6, 0.05 - 1.0001e-6, 0.049, 0.001):
        left = time_left_ms(0.05, late_s)
        assert left is not None
        assert orjson.loads(_split(late.with_left(left))[1])["parameters"]["slo_ms"] > 0
