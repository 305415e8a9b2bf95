"""Reading a Prometheus text endpoint (``/metrics``) from this process: the URL check and one fetch.

Used where one component reads another's metrics at run time: the gateway reads Triton's
(``transcription/triton_load.py``), a bulk worker a sharing gateway's (``bulk/yielding.py``).
Docs: docs/contracts.md, "7. Gateway metrics".
"""

from __future__ import annotations

import http.client
import urllib.request
from collections.abc import Callable, Collection, Mapping

from prometheus_client.parser import text_string_to_metric_families


def require_http_url(url: str, field: str) -> str:
    """``url`` when it is ``http(s)://…``; a typo would otherwise read nothing, silently.

    Raises: ``ValueError`` naming ``field``.
    """
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"{field} must be an http(s)://host:port/metrics URL, got {url!r}")
    return url


def fetch_text(url: str, timeout: float) -> str | None:
    """The endpoint's text (blocking; run it in a thread); ``None`` when it cannot be read.

    Unreadable: refused, timed out, not HTTP (e.g. a gRPC port: ``http.client.HTTPException``), an answer
    cut short, not UTF-8.
    """
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - http(s) checked by the caller
            return str(response.read().decode())
    except (OSError, ValueError, http.client.HTTPException):
        return None


def sample_sums(
    text: str, names: Collection[str], where: Callable[[Mapping[str, str]], bool] = lambda labels: True
) -> dict[str, float] | None:
    """Per metric family in ``names``, the sum of its samples whose labels pass ``where``.

    A name matches a family's name or its samples' (a counter exported as ``x_total`` is the family
    ``x`` with samples ``x_total``). A family absent from ``text`` is absent from the answer; ``None``
    when ``text`` is not Prometheus text (an HTML page at a wrong port, say).
    """
    sums: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name = family.name if family.name in names else sample.name
                if name in names and where(sample.labels):
                    sums[name] = sums.get(name, 0.0) + sample.value
    except ValueError:
        return None
    return sums
