"""The S3 test server is real and enforces what the S3 backend relies on (conditional writes), checked
here so a server change shows up as one clear failure rather than as backend flakiness."""

from __future__ import annotations

import concurrent.futures
from typing import Any

import pytest

pytestmark = pytest.mark.s3


def _code(err: Exception) -> str:
    return str(getattr(err, "response", {}).get("Error", {}).get("Code", err))


def test_server_enforces_create_if_absent_and_if_match(s3_server: Any) -> None:
    import s3_server as s3s
    from botocore.exceptions import ClientError

    s3 = s3s.client(s3_server.endpoint)
    s3.create_bucket(Bucket="crewckpt-selftest")
    first = s3.put_object(Bucket="crewckpt-selftest", Key="ref", Body=b"1", IfNoneMatch="*")
    with pytest.raises(ClientError) as info:
        s3.put_object(Bucket="crewckpt-selftest", Key="ref", Body=b"2", IfNoneMatch="*")
    assert _code(info.value) == "PreconditionFailed"
    s3.put_object(Bucket="crewckpt-selftest", Key="ref", Body=b"3", IfMatch=first["ETag"])
    with pytest.raises(ClientError) as info:
        s3.put_object(Bucket="crewckpt-selftest", Key="ref", Body=b"4", IfMatch=first["ETag"])
    assert _code(info.value) == "PreconditionFailed"
    assert s3.get_object(Bucket="crewckpt-selftest", Key="ref")["Body"].read() == b"3"


def test_sixteen_racing_creates_have_one_winner(s3_server: Any) -> None:
    import s3_server as s3s
    from botocore.exceptions import ClientError

    s3 = s3s.client(s3_server.endpoint)
    s3.create_bucket(Bucket="crewckpt-race")

    def create(i: int) -> bool:
        try:
            s3.put_object(Bucket="crewckpt-race", Key="k", Body=str(i).encode(), IfNoneMatch="*")
            return True
        except ClientError:
            return False

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        wins = list(pool.map(create, range(16)))
    assert sum(wins) == 1
    assert s3.get_object(Bucket="crewckpt-race", Key="k")["Body"].read() == str(wins.index(True)).encode()
