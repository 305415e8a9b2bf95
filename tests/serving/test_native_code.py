"""Native code of the speaker and transcription paths on a CPU without AVX-512, on any machine.

Two proofs that do not need such a CPU: the libraries the speaker model's process maps are scanned
for AVX-512 code that runs without a CPU probe (``whisper_build.serving.native_code``), and the
native code of both paths runs under QEMU's user-mode emulation of an AMD EPYC Zen 2
(``qemu-x86_64 -cpu EPYC-Rome``: no AVX-512 there, whatever the host has; Debian ``qemu-user``).
Docs: docs/gateway.md, "Speakers (diarization)".
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from whisper_build.serving.native_code import loaded_libraries, scan, unguarded_avx512

REPO = Path(__file__).resolve().parents[2]
SCANNED_BYTES = 16 << 20
"""Libraries above this size (torch, llvmlite, OpenBLAS, libpython) probe the CPU and take minutes to
disassemble on 2 cores: the emulation tests and the image build (which scans all) cover them."""
QEMU = shutil.which("qemu-x86_64")
needs_qemu = pytest.mark.skipif(QEMU is None, reason="needs qemu-x86_64 (Debian qemu-user, .ci/apt-packages.txt)")
needs_objdump = pytest.mark.skipif(shutil.which("objdump") is None, reason="needs objdump (binutils)")


def _python(code: str, *, emulated: bool, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in this venv's interpreter (under ``qemu-x86_64 -cpu EPYC-Rome`` when ``emulated``)."""
    command = [sys.executable, "-c", textwrap.dedent(code)]
    if emulated:
        command = [str(QEMU), "-cpu", "EPYC-Rome", *command]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests" / "support")])}
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, check=False)


@needs_objdump
def test_the_scanner_tells_avx512_run_unasked_from_avx512_chosen_at_run_time() -> None:
    import numpy.fft
    import senko  # noqa: F401 - its wheel holds the extractor; importing senko does not load it

    extractor = scan(Path(senko.__file__).parent / "libfbank_extractor.so")
    assert extractor.evex > 1000 and not extractor.cpu_probe and extractor.unguarded
    pocketfft = next(
        p for p in loaded_libraries() if "pocketfft" in p.name and Path(numpy.fft.__file__).parent in p.parents
    )
    assert not scan(pocketfft).unguarded


@pytest.mark.integration
@needs_objdump
def test_the_speaker_model_maps_no_library_that_runs_avx512_unasked() -> None:
    # GIVEN the speaker model built and one clip embedded (features and CAM++ ran) in a process of its own
    done = _python(
        """
        from whisper_build.serving.diarization.self_test import _clip
        from whisper_build.serving.diarization.senko_model import SpeakerModel
        SpeakerModel().embed(_clip())  # the imports of the speaker model's stub, and its self-test
        print(open("/proc/self/maps").read())
        """,
        emulated=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    # THEN no library it maps holds AVX-512 code without a CPU probe (senko's own extractor did)
    mapped = loaded_libraries(done.stdout)
    assert not any(p.name == "libfbank_extractor.so" for p in mapped)
    small = [p for p in mapped if p.stat().st_size <= SCANNED_BYTES]
    assert len(small) > 100 and unguarded_avx512(small) == []


@pytest.mark.integration
@needs_qemu
def test_speaker_features_run_on_an_epyc_without_avx512_where_senkos_extractor_dies() -> None:
    # GIVEN QEMU's EPYC-Rome (AVX2, no AVX-512): senko's own extractor dies there of SIGILL, on any host
    native = _python(
        """
        import ctypes, importlib.util, numpy as np  # senko itself is not imported: numba is slow to emulate
        folder = importlib.util.find_spec("senko").submodule_search_locations[0]
        lib = ctypes.CDLL(folder + "/libfbank_extractor.so")
        lib.create_fbank_extractor.restype = ctypes.c_void_p
        handle = ctypes.c_void_p(lib.create_fbank_extractor())
        audio = np.random.default_rng(0).standard_normal(32000).astype(np.float32) * 0.1
        spans = np.array([0.0, 1.5], dtype=np.float32)
        f = ctypes.POINTER(ctypes.c_float)
        lib.extract_fbank_features_from_memory.argtypes = [ctypes.c_void_p, f, ctypes.c_size_t, f, ctypes.c_size_t]
        lib.extract_fbank_features_from_memory.restype = ctypes.c_void_p * 6
        lib.extract_fbank_features_from_memory(handle, audio.ctypes.data_as(f), 32000, spans.ctypes.data_as(f), 1)
        """,
        emulated=True,
    )
    assert native.returncode == -signal.SIGILL, native.stderr[-2000:]
    # WHEN the speaker model's features are computed there THEN they are
    portable = _python(
        """
        import numpy as np
        from whisper_build.serving.diarization.fbank import subsegment_features
        audio = np.random.default_rng(0).standard_normal(32000).astype(np.float32) * 0.1
        flat, frames, offsets, dim = subsegment_features(audio, [(0.0, 1.5), (1.0, 1.01)])
        print(frames.tolist(), dim, bool(np.isfinite(flat).all()))
        """,
        emulated=True,
    )
    assert portable.returncode == 0, portable.stderr[-2000:]
    assert portable.stdout.split() == ["[148,", "1]", "80", "True"]


@pytest.mark.integration
@needs_qemu
def test_the_transcription_paths_native_libraries_dispatch_on_an_epyc_without_avx512() -> None:
    # GIVEN QEMU's EPYC-Rome; WHEN soxr resamples, PyAV decodes, onnxruntime runs silero's VAD and
    # CTranslate2 reads the CPU THEN each works (each picks its code at run time, none needs AVX-512)
    done = _python(
        """
        import io, wave
        from importlib.resources import files
        import av, ctranslate2, numpy as np, onnxruntime as ort, soxr
        print("soxr", soxr.resample(np.zeros(4800, np.float32), 48000, 16000).shape[0])
        body = io.BytesIO()
        with wave.open(body, "wb") as w:
            w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000); w.writeframes(bytes(3200))
        body.seek(0)
        with av.open(body) as container:
            print("av", sum(frame.samples for frame in container.decode(audio=0)))
        session = ort.InferenceSession(str(files("silero_vad") / "data" / "silero_vad.onnx"))
        feeds = {"input": np.zeros((1, 512), np.float32), "state": np.zeros((2, 1, 128), np.float32),
                 "sr": np.array(16000, np.int64)}
        print("onnxruntime", session.run(None, feeds)[0].shape)
        print("ctranslate2", "float32" in ctranslate2.get_supported_compute_types("cpu"))
        """,
        emulated=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["soxr 1600", "av 1600", "onnxruntime (1, 1)", "ctranslate2 True"]
