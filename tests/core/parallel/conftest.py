"""Every test of this folder sees an empty hardware-profile cache, so a profile on the machine
(`mstrain plan --calibrate`) never changes what the tests expect."""
import pytest


@pytest.fixture(autouse=True)
def isolated_hardware_profile(tmp_path_factory, monkeypatch):
    from mstrain.parallel import calibrate
    monkeypatch.setenv("MSTRAIN_CACHE_DIR", str(tmp_path_factory.mktemp("mstrain-cache")))
    calibrate._cached.clear()
    yield
    calibrate._cached.clear()
