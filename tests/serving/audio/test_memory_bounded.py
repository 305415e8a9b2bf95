"""Memory of the decode + window path does not grow with the audio's length.

Each file goes through the gateway's real pipeline (``Transcriber.open`` → ``window_groups``) in a
fresh Python process, which reports its peak RSS (``ru_maxrss``, the kernel's high-water mark, so
no sampling can miss a spike) before and after. The upload's bytes and a warm-up decode are in the
baseline: the growth is what decoding this file's length adds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from long_audio import tone_flac

from whisper_build.paths import REPO_ROOT
from whisper_build.serving.gateway.settings import GatewaySettings

MIB = 1024 * 1024
BOUND_BYTES = 64 * MIB
"""The bound on RSS growth per request, besides one window group."""

_MEASURE = r"""
import json, resource, sys
from pathlib import Path

from whisper_build.serving.transcription.windows import Transcriber, WindowPlan
from whisper_build.serving.gateway.settings import GatewaySettings

def peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB

data = Path(sys.argv[1]).read_bytes()
transcriber = Transcriber(backend=None, plan=GatewaySettings(max_audio_seconds=7200).requests.window_plan())
with transcriber.open(data[: 1 << 20]) as warm:  # first MiB: FFmpeg, soxr and numpy set up
    next(transcriber.window_groups(warm), None)
before = peak()
windows = groups = 0
with transcriber.open(data) as stream:
    for group in transcriber.window_groups(stream):
        groups += 1
        windows += len(group)
print(json.dumps({"before": before, "after": peak(), "seconds": stream.seconds, "windows": windows, "groups": groups}))
"""


def _measure(path: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(path)], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.slow
def test_rss_growth_per_request_is_bounded_whatever_the_duration() -> None:
    settings = GatewaySettings().requests
    group_bytes = settings.window_group_size * int(settings.window_seconds * 16000) * 4
    results = {minutes: _measure(tone_flac(minutes)) for minutes in (30, 60)}
    growth = {minutes: r["after"] - r["before"] for minutes, r in results.items()}
    for minutes, r in results.items():
        assert r["seconds"] == pytest.approx(minutes * 60, abs=0.01)  # decoded (and resampled) to the end
        # Every window holds the tone (none dropped as silent); cuts land 25-30 s apart.
        assert minutes * 2 <= r["windows"] <= minutes * 60 / 25 + 1
        assert r["groups"] == -(-r["windows"] // settings.window_group_size)
        assert growth[minutes] <= BOUND_BYTES + group_bytes, f"{minutes} min: +{growth[minutes] / MIB:.0f} MiB"
    # Flat in duration: twice the audio (a whole decoded copy would add 110 MiB) costs no more.
    assert growth[60] - growth[30] <= 8 * MIB, {m: f"{g / MIB:.1f} MiB" for m, g in growth.items()}
    print({m: f"+{g / MIB:.1f} MiB" for m, g in growth.items()})
