"""The detector registry: every detector in its own module, stating what it judges and the harm it needs.

A warning or an error must rest on harm seen in the run or on a mistake that is wrong whatever happens; each
detector module says which, and which kinds of training objective it can judge at all. These tests list every
registered detector and fail on one that does not say so, and check that the catalog, `--list`, the report order
and the "which finding explains which" rule are all read from the registry.
"""
from __future__ import annotations

import importlib

import pytest

from torchwise.diagnose.catalog import CATALOG, DETECTED_BY, Finding, describe
from torchwise.diagnose.detectors import ORDER, REGISTRY
from torchwise.diagnose.detectors.registry import NAMES
from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, FIXED_OBJECTIVES, OBJECTIVE_KINDS, Detector
from conftest import REPO_ROOT


DETECTORS = REPO_ROOT / "torchwise" / "diagnose" / "detectors"


@pytest.mark.parametrize("det", list(REGISTRY.values()), ids=lambda d: d.id)
def test_every_detector_states_what_it_judges_and_the_harm_it_needs(det: Detector):
    assert det.applies_to and det.applies_to <= set(OBJECTIVE_KINDS), det.id
    assert det.evidence.strip(), f"{det.id}: no statement of the evidence it needs"
    if det.severity in ("warning", "error"):
        assert len(det.harm) >= 40, f"{det.id}: a {det.severity} detector must state the harm it requires"
        assert ("whatever happens" in det.harm or "harmed" in det.harm or "harm" in det.harm
                or det.harm_seen is not None), f"{det.id}: the harm statement names neither harm nor a sure mistake"
    if det.harm_seen is not None:
        assert det.maybe_fine, f"{det.id}: shown as info without harm, it must say why it may be fine"
    if det.severity == "info":
        assert det.maybe_fine, f"{det.id}: an info hint says why it may be by design"
    package = DETECTORS.parents[1]
    assert (package / "diagnose" / det.decided_in).exists() or (package / det.decided_in).exists(), \
        f"{det.id}: decided_in names no module: {det.decided_in}"


def test_one_module_a_detector_and_one_registry_line_each():
    modules = sorted(p.stem for p in DETECTORS.glob("*.py") if p.stem not in ("__init__", "spec", "registry"))
    assert sorted(NAMES) == modules, "every detector module is listed once in registry.py, and nothing else is"
    for name in NAMES:
        det = importlib.import_module(f"torchwise.diagnose.detectors.{name}").DETECTOR
        assert det.id.replace("-", "_") == name


def test_the_catalog_and_its_order_come_from_the_registry():
    assert tuple(CATALOG) == ORDER == tuple(REGISTRY)
    for det in REGISTRY.values():
        entry = CATALOG[det.id]
        assert (entry.severity, entry.title, entry.why, entry.fix) == (det.severity, det.title, det.why, det.fix)
        assert DETECTED_BY[det.id] == det.evidence
        assert f"{det.id}" in describe()


def test_loss_curve_detectors_judge_fixed_objectives_only():
    curve = {d.id for d in REGISTRY.values() if d.applies_to == FIXED_OBJECTIVES}
    assert {"loss-not-decreasing", "lr-too-low", "lr-too-high"} <= curve
    universal = {d.id for d in REGISTRY.values() if d.applies_to == ALL_OBJECTIVES}
    # the ones the issue names as universal: they judge whatever the objective
    assert {"missing-zero-grad", "loss-retains-graph", "params-not-in-optimizer", "nonfinite-loss",
            "ddp-no-distributed-sampler", "softmax-before-loss", "double-sigmoid"} <= universal


def test_explains_is_read_from_the_detectors():
    from torchwise.diagnose.checks import _drop_consequences

    cause = REGISTRY["missing-zero-grad"]
    assert "lr-too-high" in cause.explains
    kept = _drop_consequences([Finding("missing-zero-grad", "m"), Finding("lr-too-high", "m")])
    assert [f.id for f in kept] == ["missing-zero-grad"]
    # a hint that may be by design explains nothing
    info = Finding("dead-relu", "m", severity="info")
    kept = _drop_consequences([info, Finding("no-gradient-flow", "m")])
    assert sorted(f.id for f in kept) == ["dead-relu", "no-gradient-flow"]


def test_a_detector_without_harm_cannot_be_registered():
    with pytest.raises(ValueError, match="harm"):
        Detector(id="x", severity="warning", title="t", why="w", fix="f", maybe_fine="", evidence="e",
                 applies_to=ALL_OBJECTIVES, harm="", explains=(), decided_in="checks/model.py")
    with pytest.raises(ValueError, match="applies_to"):
        Detector(id="x", severity="error", title="t", why="w", fix="f", maybe_fine="", evidence="e",
                 applies_to=frozenset(), harm="wrong whatever happens", explains=(), decided_in="checks/model.py")
