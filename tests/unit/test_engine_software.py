"""Engine software stage: which distribution is the engine, version checks, wheelhouse."""

import pytest
from pyinfra.api import DeployError

from deploys import settings as s
from deploys.stages import engine_software as es

BASE = {"kvceph_s3_endpoint_ip": "10.0.0.5"}
LAB = {
    "name": "lab-engine",
    "packages": ["kvceph-lab-engine==0.1.0", "lmcache==0.5.6"],
    "executable": "kvceph-lab-engine",
    "vllm_version": "0.33.0",
}


def host(groups=("gpu",), **data):
    return s.load({**BASE, **data}, "gpu1", groups)


def test_engine_distribution_from_the_profile():
    assert es.engine_distribution(host().engine.profile) == "vllm"
    assert es.engine_distribution(host(("gaudi",)).engine.profile) == "vllm"
    lab = host(kvceph_engine_profile=LAB).engine.profile
    assert es.engine_distribution(lab) == "kvceph-lab-engine"


def test_ambiguous_profile_is_refused():
    me = host(kvceph_engine_profile={**LAB, "packages": ["a==1", "b==2", "lmcache==0.5.6"]})
    with pytest.raises(ValueError, match="pins no vllm and 2 other"):
        es.engine_distribution(me.engine.profile)


def test_versions_match():
    me = host()
    assert es.check_versions(me, {"vllm": "0.25.1", "lmcache": "0.5.6"}) is None
    assert es.check_versions(me, {"vllm": "0.25.2", "lmcache": "0.5.6"}) is None


def test_installed_vllm_minor_differs_from_profile():
    error = es.check_versions(host(), {"vllm": "0.26.0", "lmcache": "0.5.6"})
    assert error.startswith("gpu1: installed vLLM 0.26.0 (installed vllm) differs")
    assert "\n" not in error


def test_unsupported_pair_is_refused():
    error = es.check_versions(host(), {"vllm": "0.25.1", "lmcache": "0.4.2"})
    assert "not a supported pair" in error


def test_missing_packages_name_the_fix():
    error = es.check_versions(host(kvceph_engine_install=False), {"lmcache": "0.5.6"})
    assert "engine packages missing" in error and "vllm" in error


def test_lab_engine_uses_the_declared_version_and_says_so():
    me = host(kvceph_engine_profile=LAB)
    installed = {"kvceph-lab-engine": "0.1.0", "lmcache": "0.5.6"}
    assert es.check_versions(me, installed) is None
    version, source = es.engine_vllm_version(me.engine.profile, installed)
    assert (version, source) == ("0.33.0", "kvceph-lab-engine emulates the profile's vllm_version")
    assert es.engine_vllm_version(me.engine.profile, {"lmcache": "0.5.6"})[0] is None


def test_wheelhouse(tmp_path):
    (tmp_path / "b-1-py3-none-any.whl").write_text("")
    (tmp_path / "a-1-py3-none-any.whl").write_text("")
    (tmp_path / "notes.txt").write_text("")
    assert [p.name for p in es.wheels(str(tmp_path))] == [
        "a-1-py3-none-any.whl",
        "b-1-py3-none-any.whl",
    ]
    with pytest.raises(DeployError, match="no \\*.whl files"):
        es.wheels(str(tmp_path / "missing"))
