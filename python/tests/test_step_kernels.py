"""tools/step_kernels.py: the step's kernels summed by family or by --match string, or by what
each adds to the step (--adds), files side by side, and the refusal of a file that is not `bench
step --timeline --json` output."""

import importlib.util
import json
import os

import pytest

_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "step_kernels.py")
_spec = importlib.util.spec_from_file_location("step_kernels", _PATH)
step_kernels = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(step_kernels)

TIMELINE = [
    {"name": "gemm_detail::gemm_wg_kernel<1, 1, false, false>", "duration_us": 20.5},
    {"name": "attention_chunk_kernel<8, 4, true>", "duration_us": 19.0},
    {"name": "attention_combine_kernel<1, 32>", "duration_us": 6.25},
    {"name": "gemm_detail::gemm_wg_kernel<4, 1, false, true>", "duration_us": 11.0},
    {"name": "attention_chunk_kernel<8, 4, true>", "duration_us": 18.5},
]


def test_family_drops_namespaces_and_template_arguments():
    assert step_kernels.family("gemm_detail::gemm_wg_kernel<1, 1, false, false>") == "gemm_wg_kernel"
    assert step_kernels.family("ns::k(int)") == "k"


def test_sums_by_family_in_order_of_first_appearance():
    s = step_kernels.sums(TIMELINE)
    assert list(s) == ["gemm_wg_kernel", "attention_chunk_kernel", "attention_combine_kernel"]
    assert s["gemm_wg_kernel"] == [2, 31.5]
    assert s["attention_chunk_kernel"] == [2, 37.5]


def test_sums_by_match_keep_the_given_order_and_empty_keys():
    s = step_kernels.sums(TIMELINE, ["attention", "silu_mul", "gemm_wg"])
    assert list(s) == ["attention", "silu_mul", "gemm_wg"]
    assert s["attention"] == [3, 43.75]
    assert s["silu_mul"] == [0, 0.0]


def test_adds_is_each_kernels_end_past_the_latest_end_before_it():
    # As under programmatic dependent launch: the GEMM becomes resident at 2 us, while the
    # boundary runs, and waits; it adds only its end past the boundary's (30 - 10 = 20), not
    # its 28 us. A kernel that ends inside an earlier one adds nothing.
    timeline = [
        {"name": "residual_boundary_kernel<float, 2>", "start_us": 0.0, "duration_us": 10.0},
        {"name": "gemm_detail::gemm_wg_kernel<1, 1>", "start_us": 2.0, "duration_us": 28.0},
        {"name": "qkv_front_kernel", "start_us": 25.0, "duration_us": 4.0},
        {"name": "residual_boundary_kernel<float, 2>", "start_us": 30.5, "duration_us": 3.0},
    ]
    s = step_kernels.sums(timeline, adds=True)
    assert s["residual_boundary_kernel"] == [2, 13.5]
    assert s["gemm_wg_kernel"] == [1, 20.0]
    assert s["qkv_front_kernel"] == [1, 0.0]
    assert step_kernels.sums(timeline)["gemm_wg_kernel"] == [1, 28.0]


def test_files_side_by_side(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    rec = {"preset": "qwen3-8b", "rows": 8, "fused_timeline": {"timeline": TIMELINE}}
    a.write_text(json.dumps([rec]))
    b.write_text(json.dumps([dict(rec, fused_timeline={"timeline": TIMELINE[:2]})]))
    assert step_kernels.main([str(a), str(b), "--match", "attention_chunk"]) == 0
    out = capsys.readouterr().out
    assert "qwen3-8b rows 8:" in out
    assert "2 x      37.5    1 x      19.0" in out


def test_refuses_a_file_without_a_timeline(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps([{"preset": "qwen3-8b", "rows": 1}]))
    with pytest.raises(SystemExit) as e:
        step_kernels.main([str(p)])
    assert e.value.code == 2
