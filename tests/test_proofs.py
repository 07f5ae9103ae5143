"""The stored certificate of the shipped configuration is current: CI fails
when the plan changed and `proofs/` was not written again. The GPU device
demands the certificate it is given: the plan's digest and each cubin."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from planner.certify import certify, proofs, with_machine_code

PROOFS = Path(__file__).resolve().parents[1] / "proofs"


def test_default_certificate_is_current(default_plan):
    outcome = certify(default_plan, machine=with_machine_code())
    found = proofs.check(outcome, PROOFS / "default", resolve=True)
    assert found.current, "proofs/default is stale (planner certify --write-proofs): " + "; ".join(found.problems)
    assert outcome.ok


def _card():
    from planner.runtime.driver import Device
    return Device(0, None, None, "sm_90", "a card", 227 * 1024)   # an H100's or H200's block


def test_the_device_refuses_a_plan_its_certificate_does_not_hold(default_plan, small_plan, driver_calls):
    from planner.runtime import cuda
    certificate = proofs.Certificate(small_plan.digest, (("containment", "pass"),), "Z3")
    with pytest.raises(proofs.Uncertified, match=f"plan {default_plan.digest[:16]} is not the certified plan"):
        cuda.CudaDevice(default_plan, _card(), certificate=certificate)
    assert not driver_calls   # refused before the card is touched


def test_the_device_refuses_a_cubin_its_certificate_does_not_attest(default_plan, driver_calls, monkeypatch):
    from planner.runtime import cuda
    loaded = []
    monkeypatch.setattr(cuda.driver, "load_kernel", lambda cubin, shared: loaded.append(cubin))
    first = default_plan.images[0].name
    attested = {f"{img.name}@sm_90": hashlib.sha256(f"{img.name}@sm_90".encode()).hexdigest()
                for img in default_plan.images}
    # every cubin attested but the first image's on this card (the certificate lists sm_86's)
    attested[f"{first}@sm_90"] = "0" * 64
    certificate = proofs.Certificate(default_plan.digest, (("machine-code", "pass"),), "Z3", attested)
    with pytest.raises(proofs.Uncertified, match=f"image {first}: its sm_90 cubin .* is not one the certificate"):
        cuda.CudaDevice(default_plan, _card(), certificate=certificate)
    assert not loaded
