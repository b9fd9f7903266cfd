"""Cost models on a known cost law: they recover it, never beat the roof, intervals cover."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from operator_db.errors import InvalidInputError
from operator_db.predict.features import MIN_BOUND_S, arg_features, features
from operator_db.predict.model import (
    FALLBACK,
    Predictor,
    Sample,
    conformal_half_width,
    data_hash,
    effective_peaks,
    fit_predictor,
)
from tests.predict.synthetic import (
    EFFICIENCY,
    PEAKS,
    Cfg,
    configs,
    elementwise,
    law_time_s,
    matmul,
    samples,
)


@pytest.fixture(scope="module")
def fitted() -> Predictor:
    rng = random.Random(1)
    return fit_predictor(samples(configs(rng, 300), rng), {"float32": PEAKS})


def test_recovers_the_law(fitted: Predictor) -> None:
    rng = random.Random(2)
    test = configs(rng, 200)
    predictions = fitted.predict(test)
    errors = [abs(p.value / law_time_s(c) - 1) for p, c in zip(predictions, test, strict=True)]
    assert statistics.median(errors) < 0.05
    assert sorted(errors)[int(0.9 * len(errors))] < 0.25


def test_intervals_cover_about_their_level(fitted: Predictor) -> None:
    rng = random.Random(3)
    measured = samples(configs(rng, 400), rng)
    predictions = fitted.predict([s.config for s in measured])
    covered = [p.low <= s.time_s <= p.high for p, s in zip(predictions, measured, strict=True)]
    assert 0.82 <= statistics.mean(covered) <= 0.98


def test_a_time_is_never_below_its_roofline_bound(fitted: Predictor) -> None:
    tiny = [elementwise("torch.nn.ReLU", 8, 32), matmul(2048, 2048, 2048)]
    for c, p in zip(tiny, fitted.predict(tiny), strict=True):
        assert p is not None
        bound = max(PEAKS.bound_s(c.flops, c.bytes), MIN_BOUND_S)
        assert p.bound_s == pytest.approx(bound)
        assert p.low >= bound * (1 - 1e-12) and p.value >= p.low and p.high >= p.value


def test_energy_is_predicted_where_measured(fitted: Predictor) -> None:
    test = configs(random.Random(4), 50)
    energies = fitted.predict(test, "energy")
    errors = [abs(p.value / (50 * law_time_s(c)) - 1) for p, c in zip(energies, test, strict=True)]
    assert statistics.median(errors) < 0.05


def test_an_unseen_operator_type_falls_back(fitted: Predictor) -> None:
    unseen = elementwise("torch.nn.SiLU", 256, 1024)
    [p] = fitted.predict([unseen])
    assert p is not None and p.model == FALLBACK
    assert p.value > 0


def test_what_cannot_be_predicted_is_none(fitted: Predictor) -> None:
    opaque = Cfg("o", "my.Custom", [], [], None, None, form="opaque")
    no_bytes = Cfg("b", "torch.nn.ReLU", [{"shape": [4]}], [], 4, None)
    half = Cfg("h", "torch.matmul", [{"shape": [4, 4]}], [], 128, 96, dtype="float16")
    assert fitted.predict([opaque, no_bytes, half]) == [None, None, None]


def test_types_with_enough_samples_get_their_own_entry(fitted: Predictor) -> None:
    assert {op for target, op in fitted.models if target == "time"} == {FALLBACK, *EFFICIENCY}
    for model in fitted.models.values():
        assert model.kind in ("boosting", "ridge", "fallback")
        assert math.isfinite(model.interval_ln) and model.interval_ln > 0


def test_too_little_data_or_a_bad_level_is_one_line() -> None:
    rng = random.Random(5)
    few = samples(configs(rng, 3), rng)
    with pytest.raises(InvalidInputError, match="at least 5"):
        fit_predictor(few, {"float32": PEAKS})
    with pytest.raises(InvalidInputError, match="between 0 and 1"):
        fit_predictor(samples(configs(rng, 20), rng), {"float32": PEAKS}, level=1.5)


def test_conformal_half_width_takes_the_right_rank() -> None:
    residuals = [float(i) for i in range(1, 20)]  # 19 values: rank ⌈20 × 0.9⌉ = 18
    assert conformal_half_width(residuals, 0.9) == 18.0
    assert conformal_half_width([-3.0, 1.0], 0.9) == 3.0  # too few: the largest
    assert conformal_half_width([], 0.9) == math.inf


def test_the_data_hash_is_the_data_identity() -> None:
    rng = random.Random(6)
    data = samples(configs(rng, 10), rng)
    same = data_hash(list(reversed(data)), {"float32": PEAKS})
    assert data_hash(data, {"float32": PEAKS}) == same
    assert data_hash(data[1:], {"float32": PEAKS}) != same


def test_features_read_shapes_and_arguments() -> None:
    f = features(matmul(64, 128, 32), PEAKS)
    assert f["ln_dim0_1"] == pytest.approx(math.log(32)) and f["ln_dim1_1"] == pytest.approx(
        math.log(128)
    )
    assert f["compute_bound"] in (0.0, 1.0) and f["inputs"] == 2
    args = arg_features({"kernel_size": [3, 3], "bias": True, "mode": "x", "groups": 2})
    assert args == {"arg_kernel_size": 9.0, "arg_bias": 1.0, "arg_groups": 2.0}


def test_roofs_are_raised_to_what_configurations_reached() -> None:
    rng = random.Random(7)
    data = samples(configs(rng, 150), rng)
    fast = elementwise("torch.nn.ReLU", 64, 64)  # "cache-resident": 4 × the bandwidth
    data.append(Sample(fast, PEAKS.bound_s(fast.flops, fast.bytes) / 4))
    roofs = effective_peaks(data, {"float32": PEAKS})["float32"]
    assert roofs.flops_per_s == PEAKS.flops_per_s  # nothing ran faster than the compute peak
    assert roofs.bytes_per_s == PEAKS.bytes_per_s  # 1 of 151 is above the 99th pct
    data += [Sample(elementwise("torch.nn.ReLU", 64, 8 * k), 1e-9) for k in range(1, 4)]
    raised = effective_peaks(data, {"float32": PEAKS})["float32"]
    assert raised.bytes_per_s > PEAKS.bytes_per_s and "raised" in raised.source


def test_groups_hold_out_whole_families() -> None:
    rng = random.Random(8)
    cfgs = configs(rng, 120)
    grouped = [
        Sample(s.config, s.time_s, s.energy_j, group=f"family-{i % 4}")
        for i, s in enumerate(samples(cfgs, rng))
    ]
    predictor = fit_predictor(grouped, {"float32": PEAKS})
    fallback = predictor.models[("time", FALLBACK)]
    assert math.isfinite(fallback.interval_ln) and fallback.cv_median_error is not None
    assert fallback.cv_median_error < 0.1
