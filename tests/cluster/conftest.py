"""
Fixtures for the cluster tests: a real S3 API on loopback (moto) and a real Ray head on 127.0.0.1 whose nodes
hold the S3 endpoint and credentials in their environment, as cloud nodes hold theirs (instance profiles,
Kubernetes secrets). Both live for the tests of this folder only.
"""

import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.cluster.cluster_testing import LocalRayHead


@pytest.fixture(autouse=True)
def _restore_environment() -> Iterator[None]:
    """`jobs.submit` sets RAY_AUTH_MODE for its client: no test of this folder may leave it (or anything else) set
    for the test modules that start their own local Ray afterwards."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@dataclass(frozen=True)
class S3Server:
    """A moto S3 server: its endpoint and the environment a client needs to use it."""

    endpoint: str
    env: dict[str, str]
    bucket: str = "bulk-qa"


@pytest.fixture(scope="package")
def s3_server() -> Iterator[S3Server]:
    """A moto S3 server on 127.0.0.1 with one empty bucket."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)  # the server takes a free port
    server.start()
    _, port = server.get_host_and_port()
    endpoint = f"http://127.0.0.1:{port}"
    env = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "bulk-qa-test-secret",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    s3 = S3Server(endpoint, env)
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )
    client.create_bucket(Bucket=s3.bucket)
    try:
        yield s3
    finally:
        server.stop()


@pytest.fixture(scope="package")
def ray_head(s3_server: S3Server) -> Iterator[LocalRayHead]:
    """A Ray head started with `ray start --head` (dashboard and Job Submission API included)."""
    head = LocalRayHead(num_cpus=4, env=s3_server.env)
    head.start()
    try:
        yield head
    finally:
        head.stop()
