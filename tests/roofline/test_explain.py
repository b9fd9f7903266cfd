"""A point above every roof explained by the algorithm its imported result names.

NeuSight's 3×3 convolutions that cuDNN ran as Winograd or FFT kernels are above the compute roof:
their FLOPs are the direct convolution's. The kernel names come from each imported result's
provenance (``kernel``, ``kernels``); the point is ``algorithm`` where it is no further above the
roof than the named algorithm's FLOP reduction allows, else it stays ``unexplained`` with why.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from operator_db.db import queries
from operator_db.db.models import OperatorConfig, utcnow
from operator_db.db.store import Store
from operator_db.roofline.bounds import Peaks
from operator_db.roofline.configs import kind_configs_roofline
from operator_db.roofline.explain import (
    NO_KERNEL,
    count_classes,
    explain_above,
    fft_reduction,
    kernel_algorithm,
    winograd_reduction,
)
from operator_db.roofline.record import store_attained_roofs
from tests.helpers import result_row, run_cli
from tests.report.test_report import png_ok
from tests.roofline.test_attained import imported_kinds

T4 = "Tesla T4"  # 8.1 TFLOP/s float32, 320 GB/s, 4 MiB of L2
PEAK = 8.1e12
NONFUSED = [  # cuDNN's WINOGRAD_NONFUSED on 4×4 output tiles, as NeuSight lists them
    "void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(...)",
    "turing_sgemm_128x128_nn",
    "void cudnn::winograd_nonfused::winogradForwardOutput4x4<float, float>(...)",
]
FUSED = "cudnn_infer_turing_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1"
FFT = "void fft2d_r2c_32x32<float, false, 1u, false>(...)"


def add(
    store: Store,
    tag: str,
    flops: float,
    nbytes: float,
    time_s: float,
    provenance: dict[str, Any],
    *,
    imported: bool = True,
    config_id: int | None = None,
    age_s: float = 0.0,
) -> int:
    """Store a result on the T4 (a new configuration, or ``config_id``'s); return the config id."""
    with store.transaction() as session:
        kind = queries.get_device_kind(session, T4)
        source = queries.get_or_update_data_source(session, "neusight", {"title": "NeuSight"})
        if config_id is None:
            config = OperatorConfig(
                key=hashlib.sha256(tag.encode()).hexdigest(),
                op="torch.nn.Conv2d",
                form="module",
                mode="inference",
                dtype="float32",
                flops=int(flops),
                bytes=int(nbytes),
            )
            session.add(config)
            session.flush()
            config_id = config.id
        row = result_row(
            config_id=config_id,
            device_kind_id=kind.id,
            timing="eager",
            cache_mode="warm",
            time_median_s=time_s,
            time_mean_s=time_s,
            provenance=provenance,
            created_at=utcnow() - timedelta(seconds=age_s),
        )
        if imported:
            row |= {"source_id": source.id, "source_ref": f"{tag}-{age_s}"}
        queries.add_results(session, "measurements", [row])
        store_attained_roofs(session, kind)  # as an import does
    return config_id


def test_the_kernel_names_say_the_algorithm_and_its_reduction() -> None:
    nonfused = kernel_algorithm(NONFUSED)
    assert nonfused is not None and nonfused.name == "Winograd F(4×4, 3×3)"
    assert nonfused.reduction == pytest.approx(4.0) == winograd_reduction(4)
    # A fused kernel names its thread block (128x128), not its tile: the least tile's 2.25×.
    fused = kernel_algorithm([FUSED])
    assert fused is not None and fused.reduction == pytest.approx(2.25) == winograd_reduction(2)
    fft = kernel_algorithm([FFT.lower(), "void fft2d_c2r_32x32<float>(...)"])
    assert fft is not None and fft.name == "FFT, 32×32 transforms"
    assert fft.reduction == pytest.approx(9 * 30**2 / (2 * 32 * 34)) == fft_reduction(32)
    assert fft_reduction(16) == pytest.approx(3.0625)
    assert kernel_algorithm(["volta_sgemm_128x64_tn", "implicit_convolve_sgemm"]) is None
    assert kernel_algorithm([]) is None
    both = kernel_algorithm([FUSED, *NONFUSED])  # the most any kernel named allows
    assert both is not None and both.reduction == pytest.approx(4.0)


def test_a_point_above_the_compute_roof_within_its_algorithm_is_explained() -> None:
    roof = Peaks(PEAK, 320e9, "spec")
    flops, nbytes = 8.1e10, 4e7
    twice = flops / PEAK / 2  # 2× above the compute roof
    assert explain_above(flops, nbytes, twice, roof, NONFUSED) == (
        "algorithm",
        "Winograd F(4×4, 3×3): up to 4× fewer FLOPs",
    )
    assert explain_above(flops, nbytes, twice, roof, [FUSED])[0] == "algorithm"
    cls, why = explain_above(flops, nbytes, flops / PEAK / 3, roof, [FUSED])
    assert cls == "unexplained"
    assert why == (
        "3.00× the compute roof: more than Winograd (tile not named: F(2×2, 3×3)) allows (2.25×)"
    )
    assert explain_above(flops, nbytes, twice, roof, None) == ("unexplained", NO_KERNEL)
    assert explain_above(flops, nbytes, twice, roof, ["volta_sgemm_128x64_tn"]) == (
        "unexplained",
        "no Winograd or FFT kernel (volta_sgemm_128x64_tn)",
    )
    # Fewer FLOPs do not explain a point above the memory roof too.
    heavy = flops / PEAK / 2 * 320e9 * 2  # bytes that take twice the time at 320 GB/s
    assert explain_above(flops, heavy, twice, roof, NONFUSED) == (
        "unexplained",
        "Winograd F(4×4, 3×3), but above the memory roof too",
    )
    counts = count_classes(["algorithm", "unexplained", "compute"], [2.0, 3.0, 0.9])
    assert (counts.algorithm, counts.unexplained, counts.total) == (1, 1, 3)
    assert counts.describe(roof) == (
        "0 DRAM-bound, 0 cache-explained, 1 compute-bound, 1 algorithm-explained "
        "(Winograd/FFT kernels, up to 2.00×), 1 unexplained (up to 3.00× above every roof)"
    )


def test_the_kernels_of_the_newest_imported_result(store: Store) -> None:
    imported_kinds(store, (T4,))
    old = add(store, "a", 1e9, 1e6, 1e-3, {"kernel": FUSED}, age_s=60)
    add(store, "a", 1e9, 1e6, 1e-3, {"kernel": "Turing_SGEMM", "kernels": [FFT]}, config_id=old)
    add(store, "own", 1e9, 1e6, 1e-3, {}, imported=False, config_id=old)  # own: no kernels
    bare = add(store, "bare", 1e9, 1e6, 1e-3, {"file": "x.csv"})
    mine = add(store, "mine", 1e9, 1e6, 1e-3, {"kernel": FUSED}, imported=False)
    with store.transaction(read_only=True) as session:
        kind = queries.get_device_kind(session, T4)
        found = queries.imported_kernels(session, kind.id, [old, bare, mine, 10**9])
        graph = queries.imported_kernels(session, kind.id, [old], timing="graph")
    assert found == {old: ("turing_sgemm", FFT.lower())}
    assert graph == {}


def test_a_kinds_points_above_every_roof_by_their_kernels(
    store: Store, db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    imported_kinds(store, (T4,))
    f, b = 8.1e10, 4e7
    add(store, "winograd", f, b, f / PEAK / 2, {"kernel": "sgemm", "kernels": NONFUSED})
    add(store, "fused", f, b, f / PEAK / 1.5, {"kernel": FUSED})
    add(store, "too-fast", f, b, f / PEAK / 3, {"kernel": FUSED})  # above its 2.25×
    add(store, "no-kernels", f, b, f / PEAK / 2, {"file": "conv.csv"})
    add(store, "own", f, b, f / PEAK / 2, {"kernel": FUSED}, imported=False)
    add(store, "compute", f, b, f / PEAK * 1.2, {"kernel": FUSED})  # below the roof
    with store.transaction(read_only=True) as session:
        view = kind_configs_roofline(session, T4)
    t = view.table.set_index("key")
    roof = {
        tag: t.loc[hashlib.sha256(tag.encode()).hexdigest(), "roof"]
        for tag in ("winograd", "fused", "too-fast", "no-kernels", "own", "compute")
    }
    assert roof == {
        "winograd": "algorithm",
        "fused": "algorithm",
        "too-fast": "unexplained",
        "no-kernels": "unexplained",
        "own": "unexplained",  # operator-db's own results record no kernel names
        "compute": "compute",
    }
    counts = view.counts
    assert (counts.compute, counts.algorithm, counts.unexplained) == (1, 2, 3)
    assert [(r.why, r.configs) for r in view.reasons("unexplained")] == [
        (NO_KERNEL, 2),
        ("more than Winograd (tile not named: F(2×2, 3×3)) allows (2.25×)", 1),
    ]
    assert [(r.why, r.configs) for r in view.reasons("algorithm")] == [
        ("Winograd (tile not named: F(2×2, 3×3)): up to 2.25× fewer FLOPs", 1),
        ("Winograd F(4×4, 3×3): up to 4× fewer FLOPs", 1),
    ]
    svg = view.plot(tmp_path / "t4.svg").read_text()  # the legend names each class
    assert "algorithm-explained: a Winograd/FFT kernel ran fewer FLOPs than counted" in svg
    assert "unexplained: above every roof (3, up to 3.00×)" in svg
    out = tmp_path / "t4.png"
    done = run_cli(capsys, "roofline", "--device-kind", T4, "-o", str(out), "--db", db_url)
    assert done.code == 0, done.err
    lines = done.out.splitlines()
    assert (
        "by roof: 0 DRAM-bound, 0 cache-explained, 1 compute-bound, 2 algorithm-explained "
        "(Winograd/FFT kernels, up to 2.00×), 3 unexplained (up to 3.00× above every roof)"
    ) in lines
    assert (
        "  algorithm: 1, Winograd F(4×4, 3×3): up to 4× fewer FLOPs; at most 2.00× above the roofs"
    ) in lines
    assert "  unexplained: 2, no kernel recorded; at most 2.00× above the roofs" in lines
    assert png_ok(out)
