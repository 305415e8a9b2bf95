"""whisper_build.serving.audio: base64 payloads, decoding every supported format, windows, silence."""

from __future__ import annotations

import base64
import io
import itertools
import tracemalloc

import numpy as np
import pytest
import soundfile
import speech_samples as samples
from long_audio import without_total_samples

from whisper_build.serving.audio import (
    SAMPLE_RATE,
    AudioStream,
    AudioTooLongError,
    EmptyAudioError,
    InvalidBase64Error,
    NotAudioError,
    decode_audio,
    decode_base64,
    is_silent,
    iter_windows,
    open_audio,
    split_windows,
)
from whisper_build.serving.audio.readers import av_reader, sndfile_reader

PAYLOAD = bytes(range(256)) * 3


@pytest.mark.parametrize(
    "text",
    [
        base64.b64encode(PAYLOAD).decode(),
        "data:audio/wav;base64," + base64.b64encode(PAYLOAD).decode(),
        "DATA:audio/x-flac;codecs=flac;base64," + base64.b64encode(PAYLOAD).decode(),
        base64.urlsafe_b64encode(PAYLOAD).decode(),
        base64.b64encode(PAYLOAD).decode().rstrip("="),
        base64.encodebytes(PAYLOAD).decode(),  # MIME line-wrapped
    ],
    ids=["plain", "data-uri", "data-uri-params", "urlsafe", "unpadded", "wrapped"],
)
def test_decode_base64_accepts_client_variants(text: str) -> None:
    assert decode_base64(text) == PAYLOAD


@pytest.mark.parametrize("text", ["not base64!", "abcde", "data:audio/wav;base64,@@@@"])
def test_decode_base64_rejects_garbage(text: str) -> None:
    with pytest.raises(InvalidBase64Error, match="not valid base64"):
        decode_base64(text)


@pytest.mark.parametrize("text", ["", "   ", "data:audio/wav;base64,"])
def test_decode_base64_rejects_empty(text: str) -> None:
    with pytest.raises(EmptyAudioError, match="empty"):
        decode_base64(text)


def _peak_hz(x: np.ndarray) -> float:
    return float(np.argmax(np.abs(np.fft.rfft(x))) * SAMPLE_RATE / len(x))


CASES = [
    ("wav_u8", 8000, 1),
    ("wav_s16", 16000, 1),
    ("wav_s16", 8000, 2),
    ("wav_s24", 44100, 1),
    ("wav_f32", 22050, 6),
    ("flac", 44100, 2),
    ("mp3", 22050, 2),
    ("ogg_opus", 48000, 1),
    ("m4a_aac", 44100, 1),
]


@pytest.mark.parametrize(("fmt", "rate", "channels"), CASES)
def test_decode_formats_rates_channels_to_16k_mono(fmt: str, rate: int, channels: int) -> None:
    x = samples.tone(1.5, rate, freq=440.0)
    audio = decode_audio(samples.encode(np.stack([x] * channels) if channels > 1 else x, rate, fmt))
    assert audio.samples.ndim == 1 and audio.samples.dtype == np.float32
    assert audio.source_rate in (rate, 48000)  # Opus always decodes at 48 kHz
    assert audio.source_channels == channels
    # Lossy codecs add encoder delay/padding (AAC: 1024 samples); pitch proves real resampling.
    assert audio.duration == pytest.approx(1.5, abs=0.08)
    assert _peak_hz(audio.samples) == pytest.approx(440.0, abs=2.0)
    middle = audio.samples[SAMPLE_RATE // 4 : SAMPLE_RATE]
    assert np.sqrt(np.mean(middle**2)) == pytest.approx(0.5 / np.sqrt(2), rel=0.1)  # level kept


def test_stereo_is_averaged_to_mono() -> None:
    left = samples.tone(1.0, 16000, amplitude=0.8)
    audio = decode_audio(samples.encode(np.stack([left, np.zeros_like(left)]), 16000, "wav_f32"))
    assert np.abs(audio.samples).max() == pytest.approx(0.4, abs=1e-3)


@pytest.mark.parametrize(
    ("fmt", "rate", "channels", "codec"),
    [
        ("wav_s16", 16000, 1, "wav/pcm_16"),
        ("wav_s24", 44100, 2, "wavex/pcm_24"),  # WAVE_FORMAT_EXTENSIBLE
        ("wav_f32", 8000, 1, "wav/float"),
        ("flac", 22050, 2, "flac/pcm_16"),
    ],
)
def test_wav_and_flac_are_read_by_libsndfile_like_ffmpeg_reads_them(
    fmt: str, rate: int, channels: int, codec: str
) -> None:
    x = samples.tone(2.0, rate, freq=440.0)
    data = samples.encode(np.stack([x] * channels) if channels > 1 else x, rate, fmt)
    with open_audio(data) as fast:
        assert fast.codec == codec  # libsndfile's reader, not FFmpeg's
        assert fast.declared_seconds == pytest.approx(2.0, abs=1e-3)
        fast_samples = np.concatenate(list(fast.chunks()))
    with AudioStream(av_reader(data), None) as ffmpeg:
        ffmpeg_samples = np.concatenate(list(ffmpeg.chunks()))
    assert len(fast_samples) == len(ffmpeg_samples)
    if rate == SAMPLE_RATE:
        np.testing.assert_array_equal(fast_samples, ffmpeg_samples)  # no resampling: bit-identical
    else:  # the same resampler fed different block sizes
        np.testing.assert_allclose(fast_samples, ffmpeg_samples, atol=1e-4)


def test_a_wav_libsndfile_cannot_open_goes_to_ffmpeg() -> None:
    data = bytearray(samples.encode(samples.tone(1.0, 16000), 16000, "wav_s16"))
    assert sndfile_reader(bytes(data)) is not None
    data[20:22] = (0x1234).to_bytes(2, "little")  # an audio format tag libsndfile does not know
    with pytest.raises(NotAudioError):
        decode_audio(bytes(data))  # FFmpeg does not know it either: the same 400 message


def _long_stereo_flac(seconds: int, rate: int) -> bytes:
    """``seconds`` of a 440 Hz tone, both channels, written one second at a time (low memory)."""
    second = samples.tone(1.0, rate, freq=440.0)  # a whole number of periods: blocks join seamlessly
    block = np.stack([second, second], axis=1)
    buffer = io.BytesIO()
    with soundfile.SoundFile(buffer, "w", rate, 2, format="FLAC", subtype="PCM_16") as out:
        for _ in range(seconds):
            out.write(block)
    return buffer.getvalue()


@pytest.mark.slow
def test_long_high_rate_file_is_resampled_while_decoding_in_bounded_memory() -> None:
    seconds = 600
    data = _long_stereo_flac(seconds, 48000)
    tracemalloc.start()  # numpy registers its buffers with tracemalloc
    try:
        audio = decode_audio(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert audio.source_rate == 48000 and audio.source_channels == 2
    assert audio.duration == pytest.approx(seconds, abs=0.005)
    # Keeping 48 kHz chunks then resampling needs > 6x the 16 kHz output; streaming needs ~2x.
    assert peak < 3 * audio.samples.nbytes, f"peak {peak / 1e6:.0f} MB"
    tail = audio.samples[-SAMPLE_RATE:]
    assert _peak_hz(tail) == pytest.approx(440.0, abs=2.0)  # resampled right to the end


@pytest.mark.parametrize(
    "data", [b"hello, this is plain text and not audio", b"\x00" * 4096, b"RIFF\x10\x00\x00\x00WAVEfmt "]
)
def test_not_audio(data: bytes) -> None:
    with pytest.raises(NotAudioError, match="not a decodable audio file"):
        decode_audio(data)


def _header_only_wav() -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, np.zeros(0, dtype=np.float32), 16000, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def test_empty_bytes_and_zero_samples() -> None:
    with pytest.raises(EmptyAudioError):
        decode_audio(b"")
    with pytest.raises(EmptyAudioError, match="zero length"):
        decode_audio(_header_only_wav())


def test_duration_limit_names_the_limit() -> None:
    data = samples.encode(samples.tone(3.0, 16000), 16000, "wav_s16")
    assert decode_audio(data, max_seconds=3.5).duration == pytest.approx(3.0)
    with pytest.raises(AudioTooLongError, match="limit of 2 s") as info:
        decode_audio(data, max_seconds=2)
    assert info.value.limit_seconds == 2


@pytest.mark.parametrize(
    ("fmt", "rate"),
    [("wav_s16", 16000), ("flac", 44100), ("ogg_opus", 48000), ("m4a_aac", 44100), ("mp3", 22050)],
)
def test_over_long_audio_is_refused_from_the_header_before_decoding(fmt: str, rate: int) -> None:
    data = samples.encode(samples.tone(5.0, rate), rate, fmt)
    with open_audio(data, max_seconds=6) as stream:
        assert stream.declared_seconds == pytest.approx(5.0, abs=0.1)
    with pytest.raises(AudioTooLongError, match=r"is 5\.\d s long by its header, over the limit of 4 s: split it"):
        open_audio(data, max_seconds=4)


def test_audio_without_a_declared_duration_stops_decoding_at_the_limit() -> None:
    data = without_total_samples(samples.encode(samples.tone(5.0, 16000), 16000, "flac"))
    stream = open_audio(data, max_seconds=2)
    assert stream.declared_seconds is None
    decoded = 0
    with stream, pytest.raises(AudioTooLongError, match="longer than 2 s, over the limit of 2 s"):
        for chunk in stream.chunks():
            decoded += len(chunk)
    assert 2 * SAMPLE_RATE <= decoded < 2.5 * SAMPLE_RATE  # stopped within a frame of the limit
    assert decode_audio(data).duration == pytest.approx(5.0)


@pytest.mark.slow
def test_truncated_three_hour_flac_is_refused_by_its_header() -> None:
    # The case: a small FLAC of 3 h of silence was refused only after ~7 s of decoding.
    buffer = io.BytesIO()
    block = np.zeros(8000 * 60, dtype=np.float32)
    with soundfile.SoundFile(buffer, "w", 8000, 1, format="FLAC", subtype="PCM_16") as out:
        for _ in range(180):
            out.write(block)
    head = buffer.getvalue()[:65536]  # only the start of the upload is even needed
    with pytest.raises(AudioTooLongError, match="10800.0 s long by its header"):
        open_audio(head, max_seconds=7200)


def test_stream_closed_from_another_thread_stops_after_the_current_frame() -> None:
    stream = open_audio(samples.encode(samples.tone(20.0, 16000), 16000, "flac"))
    chunks = stream.chunks()
    first = next(chunks)
    stream.close()
    assert len(first) > 0 and list(chunks) == []
    stream.close()  # idempotent


def _bursts(total_s: float, gaps: list[tuple[float, float]]) -> np.ndarray:
    """Noise everywhere except the given (start, end) gaps, which are silent."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(int(total_s * SAMPLE_RATE)) * 0.1).astype(np.float32)
    for start, end in gaps:
        x[int(start * SAMPLE_RATE) : int(end * SAMPLE_RATE)] = 0
    return x


def test_windows_tile_input_and_cut_in_silence() -> None:
    x = _bursts(70.0, [(27.0, 27.6), (54.0, 54.5)])
    windows = split_windows(x, window_seconds=30.0, search_seconds=5.0)
    assert [w.start for w in windows][0] == 0 and windows[-1].end == len(x)
    assert all(a.end == b.start for a, b in itertools.pairwise(windows))
    assert all(w.end - w.start <= 30 * SAMPLE_RATE for w in windows)
    assert len(windows) == 3
    assert 27.0 <= windows[0].end_s <= 27.6
    assert 54.0 <= windows[1].end_s <= 54.5


def test_windows_without_silence_cut_at_limit_region_and_short_audio_is_one_window() -> None:
    x = _bursts(65.0, [])
    windows = split_windows(x, 30.0, 5.0)
    assert all(25 * SAMPLE_RATE <= w.end - w.start <= 30 * SAMPLE_RATE for w in windows[:-1])
    assert windows[-1].end == len(x)
    assert split_windows(x[: 10 * SAMPLE_RATE]) == [type(windows[0])(0, 10 * SAMPLE_RATE)]
    assert split_windows(np.zeros(0, dtype=np.float32)) == []
    with pytest.raises(ValueError, match="search_seconds"):
        split_windows(x, 30.0, 30.0)


def _speechlike(seconds: int, rng: np.random.Generator) -> np.ndarray:
    """Tone bursts of random length separated by random pauses, float32 ``[seconds * 16000]``."""
    x = np.zeros(seconds * SAMPLE_RATE, dtype=np.float32)
    at = 0
    while at < len(x):
        burst = int(rng.uniform(0.5, 9.0) * SAMPLE_RATE)
        x[at : at + burst] = samples.tone(burst / SAMPLE_RATE, SAMPLE_RATE, amplitude=0.3)[: len(x) - at]
        at += burst + int(rng.uniform(0.1, 1.5) * SAMPLE_RATE)
    return x


@pytest.mark.parametrize("chunking", ["one", "frames", "random"])
def test_streamed_windows_are_the_same_whatever_the_chunking(chunking: str) -> None:
    rng = np.random.default_rng(7)
    x = _speechlike(200, rng)
    if chunking == "one":
        bounds = [0, len(x)]
    elif chunking == "frames":
        bounds = list(range(0, len(x), 4096)) + [len(x)]
    else:
        bounds = sorted({0, len(x), *rng.integers(0, len(x), 3000).tolist()})
    chunks = (x[a:b] for a, b in zip(bounds, bounds[1:], strict=False))
    streamed = list(iter_windows(chunks, 30.0, 5.0))
    whole = split_windows(x, 30.0, 5.0)
    assert [w for w, _ in streamed] == whole
    assert len(whole) >= 7 and whole[0].start == 0 and whole[-1].end == len(x)
    assert all(w.end - w.start <= 30 * SAMPLE_RATE for w in whole)
    for window, part in streamed:  # each window carries its own samples at its true offset
        np.testing.assert_array_equal(part, x[window.start : window.end])


def test_is_silent() -> None:
    assert is_silent(np.zeros(SAMPLE_RATE, dtype=np.float32))
    rng = np.random.default_rng(1)
    assert is_silent((rng.standard_normal(SAMPLE_RATE) * 1e-4).astype(np.float32))  # -80 dBFS hiss
    assert not is_silent(samples.tone(1.0, SAMPLE_RATE, amplitude=0.05))
    assert is_silent(np.zeros(0, dtype=np.float32))
