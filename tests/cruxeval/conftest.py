import json

import pytest

from zoo.sandbox import Sandbox


@pytest.fixture(scope="module")
def sandbox():
    """Small limits keep the containment tests fast; one pool shared by a test module."""
    with Sandbox(workers=2, cpu_seconds=1, memory_mb=256, wall_timeout=2, max_output_bytes=4096,
                 file_size_mb=1, tmpfs_mb=8) as sb:
        yield sb


@pytest.fixture
def crux_rows(shared_data):
    path = shared_data / "cruxeval.jsonl"
    if not path.exists():
        pytest.skip("cruxeval.jsonl not in ../shared/data")
    return [json.loads(line) for line in path.read_text().splitlines()]
