"""vLLM's staging for the GPU machine, offline: the closure's pins, wheel files, parts, split pieces, the device side.

benchmarks/gpu_carry.py (missing pins, split/join, pack), benchmarks/vllm_closure.py and the shell steps
of benchmarks/gpu_stage_lib.sh that run on the GPU machine (stage, verify, merge, join), driven here on
temporary folders.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from benchmarks import gpu_carry, vllm_closure
from benchmarks.gpu_carry import join_split, missing_pins, split_large
from benchmarks.vllm_closure import calls, select, summary, wheel_files

ROOT = Path(__file__).resolve().parents[2]


def _report(*pins: str) -> dict:
    return {"install": [{"metadata": {"name": p.split("==")[0], "version": p.split("==")[1]}} for p in pins]}


def test_missing_pins_drop_what_the_machine_has_by_normalised_name() -> None:
    report = _report("vllm==0.24.0", "torch==2.11.0", "PyYAML==6.0.4", "numba==0.65.0", "flashinfer-cubin==0.6.12")
    machine = ["torch", "pyyaml", "numba", "typing-extensions"]
    assert missing_pins(report, machine) == ["vllm==0.24.0", "flashinfer-cubin==0.6.12"]
    assert missing_pins(report, machine, keep=["Numba"]) == [
        "vllm==0.24.0",
        "numba==0.65.0",
        "flashinfer-cubin==0.6.12",
    ]


def test_the_machine_list_file_is_read_without_its_comments(tmp_path: Path) -> None:
    listed = gpu_carry.machine_packages(ROOT / "benchmarks/gpu_machine_packages.txt")
    assert {"torch", "torchaudio", "torchvision", "transformers", "numba"} <= set(listed)
    assert not [name for name in listed if name.startswith("#") or " " in name]


def test_split_pieces_join_back_byte_for_byte(tmp_path: Path) -> None:
    big, small = os.urandom(2500), os.urandom(300)
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "vllm.whl").write_bytes(big)
    (tmp_path / "small.json").write_bytes(small)
    assert split_large(tmp_path, 1000) == ["wheels/vllm.whl"]
    pieces = sorted(p.name for p in (tmp_path / "wheels").iterdir())
    assert pieces == ["vllm.whl.split-000", "vllm.whl.split-001", "vllm.whl.split-002"]
    assert (tmp_path / "wheels" / "vllm.whl.split-002").stat().st_size == 500
    assert join_split(tmp_path) == ["wheels/vllm.whl"]
    assert (tmp_path / "wheels" / "vllm.whl").read_bytes() == big
    assert sorted(p.name for p in (tmp_path / "wheels").iterdir()) == ["vllm.whl"]
    assert (tmp_path / "small.json").read_bytes() == small


def test_a_missing_piece_is_named(tmp_path: Path) -> None:
    (tmp_path / "a.whl").write_bytes(os.urandom(2500))
    split_large(tmp_path, 1000)
    (tmp_path / "a.whl.split-001").unlink()
    with pytest.raises(ValueError, match=r"a.whl: pieces \[0, 2\] of 2; one is missing"):
        join_split(tmp_path)


def test_select_names_a_stale_exclusion() -> None:
    pins = ["vllm==0.24.0", "flashinfer-cubin==0.6.12", "tilelang==0.1.9"]
    assert select(pins, ["flashinfer_cubin"]) == ["vllm==0.24.0", "tilelang==0.1.9"]
    with pytest.raises(ValueError, match="not in the closure.*no-such"):
        select(pins, ["no-such"])


def test_wheel_files_follow_the_wheel_name_normalisation(tmp_path: Path) -> None:
    names = ["nvidia_cutlass_dsl_libs_base-4.5.2-cp312-cp312-manylinux_2_28_x86_64.whl",
             "pyjwt-2.15.1-py3-none-any.whl", "pyjwt-2.15.10-py3-none-any.whl"]  # fmt: skip
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    found = wheel_files(["nvidia-cutlass-dsl-libs-base==4.5.2", "PyJWT==2.15.1"], tmp_path)
    assert {pin: path.name for pin, path in found.items()} == {
        "nvidia-cutlass-dsl-libs-base==4.5.2": names[0], "PyJWT==2.15.1": names[1]
    }  # fmt: skip
    with pytest.raises(FileNotFoundError, match="lark==1.2.2: no wheel lark-1.2.2-"):
        wheel_files(["lark==1.2.2"], tmp_path)


def test_calls_count_split_pieces_and_small_files_riding_along() -> None:
    mib = 1024 * 1024
    sizes = {"vllm.whl": 266 * mib, "flashinfer_cubin.whl": 427 * mib, "lark.whl": mib // 10}
    # 266 MiB -> 5 pieces of 60 + 26; 427 -> 7 of 60 + 7; the remainders and lark share parts
    assert calls(sizes, 60 * mib) == 12
    assert calls({"a": 10, "b": 10}, 20) == 1


def test_summary_counts_the_travelling_wheels(tmp_path: Path) -> None:
    (tmp_path / "vllm-0.24.0-cp38-abi3-manylinux_2_28_x86_64.whl").write_bytes(b"v" * 3000)
    (tmp_path / "lark-1.2.2-py3-none-any.whl").write_bytes(b"l" * 500)
    report = _report("vllm==0.24.0", "lark==1.2.2", "torch==2.11.0", "tilelang==0.1.9")
    missing = ["vllm==0.24.0", "lark==1.2.2", "tilelang==0.1.9"]
    travelling = select(missing, ["tilelang"])
    closure = summary(report, missing, wheel_files(travelling, tmp_path), 2000, ["tilelang"])
    assert closure["pin"] == "vllm==0.24.0"
    assert (closure["resolved_packages"], closure["missing_on_machine"], closure["wheels_travelling"]) == (4, 3, 2)
    assert closure["bytes"] == 3500 and closure["parts"] == 2 and closure["left_out"] == ["tilelang"]
    assert closure["wheels"] == {"lark==1.2.2": 500, "vllm==0.24.0": 3000}


def _stage_parts_here(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """What benchmarks/vllm_stage.sh leaves in .vllmcarry: parts v1..vN, each with the MANIFEST."""
    flat, carry = tmp_path / "flat", tmp_path / "checkout" / ".vllmcarry"
    files = {"wheels/vllm-0.24.0-x.whl": os.urandom(5000), "wheels/lark-1.2.2-y.whl": os.urandom(700),
             "peer/texts.json": b'{"long": {}}'}  # fmt: skip
    for name, data in files.items():
        (flat / name).parent.mkdir(parents=True, exist_ok=True)
        (flat / name).write_bytes(data)
    assert gpu_carry.main(["pack", str(flat), str(carry), "--budget", "2048", "--split", "--prefix", "v"]) == 0
    manifest = "".join(
        f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(carry)}\n"
        for p in sorted(carry.rglob("*"), key=lambda p: str(p.relative_to(carry)))
        if p.is_file()
    )
    for part in carry.iterdir():
        (part / "MANIFEST").write_text(manifest)
    return carry, files


def _shell(checkout: Path, script: str) -> subprocess.CompletedProcess[str]:
    lib = ROOT / "benchmarks/gpu_stage_lib.sh"
    return subprocess.run(["bash", "-c", f"source {lib}; {script}"], cwd=checkout, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)  # fmt: skip


def test_the_device_side_stages_part_by_part_then_merges_and_joins(tmp_path: Path) -> None:
    carry, files = _stage_parts_here(tmp_path)
    parts = sorted(p.name for p in carry.iterdir())
    assert len(parts) >= 3 and all(p.startswith("v") for p in parts)
    stage, held = tmp_path / "stage", tmp_path / "held"
    shutil.move(carry, held)
    carry.mkdir()
    for k, part in enumerate(parts):  # one device call per part: only that part travels
        shutil.rmtree(carry)
        shutil.copytree(held / part, carry / part)
        done = _shell(carry.parent, f"stage_parts .vllmcarry {stage}")
        assert f"staged .vllmcarry part {part}" in done.stdout
        if k < len(parts) - 1:
            assert done.returncode == 2, done.stdout
            assert "MISSING or damaged parts of .vllmcarry: " + " ".join(parts[k + 1 :]) in done.stdout
    assert done.returncode == 0 and "all parts of .vllmcarry verified" in done.stdout
    merged = _shell(carry.parent, f"merge_parts {stage} {ROOT}")
    assert merged.returncode == 0, merged.stderr
    assert merged.stdout.strip() == f"{stage}/all"
    for name, data in files.items():
        assert (stage / "all" / name).read_bytes() == data
    assert not list((stage / "all").rglob("*.split-*"))


def test_a_damaged_part_is_named_and_nothing_staged_says_so(tmp_path: Path) -> None:
    carry, _ = _stage_parts_here(tmp_path)
    first = sorted(carry.iterdir())[0]
    victim = next(p for p in first.rglob("*") if p.is_file() and p.name != "MANIFEST")
    victim.write_bytes(b"damaged")
    done = _shell(carry.parent, f"stage_parts .vllmcarry {tmp_path / 'stage'}")
    assert done.returncode == 2 and f"MISSING or damaged parts of .vllmcarry: {first.name} " in done.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    nothing = _shell(empty, f"stage_parts .vllmcarry {tmp_path / 'stage2'}")
    assert nothing.returncode == 1 and "nothing staged from .vllmcarry" in nothing.stdout


def test_vllm_closure_cli_links_the_travelling_wheels(tmp_path: Path) -> None:
    cache, dest = tmp_path / "cache", tmp_path / "dest"
    cache.mkdir()
    dest.mkdir()
    (cache / "lark-1.2.2-py3-none-any.whl").write_bytes(b"l")
    (cache / "stale-0.1-py3-none-any.whl").write_bytes(b"s")
    (tmp_path / "pins.txt").write_text("lark==1.2.2\n")
    assert vllm_closure.main(["link", str(tmp_path / "pins.txt"), str(cache), str(dest)]) == 0
    assert [p.name for p in dest.iterdir()] == ["lark-1.2.2-py3-none-any.whl"]
    (tmp_path / "pins.txt").write_text("absent==1.0\n")
    assert vllm_closure.main(["link", str(tmp_path / "pins.txt"), str(cache), str(dest)]) == 1
